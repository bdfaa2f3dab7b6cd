// cgroup v1: one hierarchy per controller (or per group of co-mounted controllers). An airlock
// cgroup is the same relative directory in every hierarchy it uses.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <set>

#include "common/status.h"
#include "engine/cgroup.h"
#include "engine/internal/cgroup_files.h"
#include "engine/internal/cgroup_impl.h"
#include "fmt/format.h"

namespace airlock::engine::internal {
namespace {

// The v1 controllers airlock uses. cpuacct gives CPU accounting, blkio I/O accounting.
constexpr const char* kUsed[] = {"memory", "pids", "cpu", "cpuacct", "freezer", "blkio"};

class CgroupV1 : public Cgroup {
 public:
  CgroupV1(const std::map<std::string, std::string>* mounts, std::string name)
      : mounts_(mounts), name_(std::move(name)) {}

  CgroupVersion version() const override { return CgroupVersion::kV1; }
  const std::string& name() const override { return name_; }

  absl::StatusOr<std::unique_ptr<Cgroup>> CreateChild(std::string_view child) override {
    RETURN_IF_ERROR(CheckCgroupName(child));
    std::string child_name = fmt::format("{}/{}", name_, child);
    std::vector<std::string> made;
    for (const std::string& root : UniqueMounts()) {
      std::string path = root + "/" + child_name;
      if (::mkdir(path.c_str(), 0755) != 0) {
        absl::Status err = ErrnoStatus(errno, fmt::format("mkdir {}", path));
        for (const std::string& m : made) ::rmdir(m.c_str());
        return err;
      }
      made.push_back(path);
    }
    return std::unique_ptr<Cgroup>(new CgroupV1(mounts_, child_name));
  }

  absl::Status SetLimits(const CgroupLimits& limits) override {
    if (limits.memory_bytes > 0) {
      ASSIGN_OR_RETURN(std::string dir, Dir("memory"));
      std::string v = std::to_string(limits.memory_bytes);
      RETURN_IF_ERROR(WriteCgroupFile(dir + "/memory.limit_in_bytes", v));
      // memsw = memory + swap; equal to the memory limit means no swap for sandboxed code.
      // Without swap accounting (swapaccount=0) the file is absent; then swap is only a risk if
      // the host has swap, which the engine checks separately.
      if (::access((dir + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0) {
        RETURN_IF_ERROR(WriteCgroupFile(dir + "/memory.memsw.limit_in_bytes", v));
      }
    }
    if (limits.pids_max > 0) {
      ASSIGN_OR_RETURN(std::string dir, Dir("pids"));
      RETURN_IF_ERROR(WriteCgroupFile(dir + "/pids.max", std::to_string(limits.pids_max)));
    }
    if (limits.cpu_cores > 0) {
      ASSIGN_OR_RETURN(std::string dir, Dir("cpu"));
      constexpr int64_t kPeriodUs = 100000;
      int64_t quota = std::max<int64_t>(1000, std::llround(limits.cpu_cores * kPeriodUs));
      RETURN_IF_ERROR(WriteCgroupFile(dir + "/cpu.cfs_period_us", std::to_string(kPeriodUs)));
      RETURN_IF_ERROR(WriteCgroupFile(dir + "/cpu.cfs_quota_us", std::to_string(quota)));
    }
    return absl::OkStatus();
  }

  absl::Status AddProcess(pid_t pid) override {
    for (const std::string& root : UniqueMounts()) {
      RETURN_IF_ERROR(
          WriteCgroupFile(fmt::format("{}/{}/cgroup.procs", root, name_), std::to_string(pid)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<pid_t>> Processes() override {
    return ReadProcsRecursive(fmt::format("{}/{}", ProcessMount(), name_));
  }

  absl::StatusOr<CgroupStats> Stats() override {
    CgroupStats s;
    if (auto dir = Dir("cpuacct"); dir.ok()) {
      ASSIGN_OR_RETURN(auto user_ns, ReadCgroupInt(*dir + "/cpuacct.usage_user"));
      ASSIGN_OR_RETURN(auto sys_ns, ReadCgroupInt(*dir + "/cpuacct.usage_sys"));
      s.cpu_user_us = user_ns.value_or(0) / 1000;
      s.cpu_system_us = sys_ns.value_or(0) / 1000;
    }
    if (auto dir = Dir("memory"); dir.ok()) {
      ASSIGN_OR_RETURN(auto current, ReadCgroupInt(*dir + "/memory.usage_in_bytes"));
      ASSIGN_OR_RETURN(auto peak, ReadCgroupInt(*dir + "/memory.max_usage_in_bytes"));
      s.memory_current_bytes = current.value_or(0);
      s.memory_peak_bytes = peak.value_or(0);
      s.oom_kills = ReadKeyedValue(*dir + "/memory.oom_control", "oom_kill").value_or(0);
    }
    if (auto dir = Dir("pids"); dir.ok()) {
      ASSIGN_OR_RETURN(auto current, ReadCgroupInt(*dir + "/pids.current"));
      ASSIGN_OR_RETURN(auto peak, ReadCgroupInt(*dir + "/pids.peak"));
      s.pids_current = current.value_or(0);
      s.pids_peak = peak.value_or(0);
      s.pids_limit_hits = ReadKeyedValue(*dir + "/pids.events", "max").value_or(0);
    }
    if (auto dir = Dir("blkio"); dir.ok()) {
      s.io_read_bytes = SumBlkio(*dir, "Read");
      s.io_write_bytes = SumBlkio(*dir, "Write");
    }
    return s;
  }

  absl::Status Freeze() override {
    ASSIGN_OR_RETURN(std::string dir, Dir("freezer"));
    RETURN_IF_ERROR(WriteCgroupFile(dir + "/freezer.state", "FROZEN"));
    if (!WaitFor(
            [&] {
              auto state = ReadCgroupFile(dir + "/freezer.state");
              return state.ok() && *state == "FROZEN";
            },
            std::chrono::seconds(5))) {
      return absl::DeadlineExceededError(fmt::format("cgroup {} did not freeze within 5 s", name_));
    }
    return absl::OkStatus();
  }

  absl::Status Thaw() override {
    ASSIGN_OR_RETURN(std::string dir, Dir("freezer"));
    return WriteCgroupFile(dir + "/freezer.state", "THAWED");
  }

  absl::Status Kill(std::chrono::milliseconds timeout) override {
    std::string procs_dir = fmt::format("{}/{}", ProcessMount(), name_);
    if (::access(procs_dir.c_str(), F_OK) != 0) return absl::OkStatus();
    // Nothing to do for an empty tree (the common case at teardown): freezing it would only
    // wait for the freezer to report a state change.
    if (auto pids = ReadProcsRecursive(procs_dir); pids.ok() && pids->empty()) {
      return absl::OkStatus();
    }
    // Freeze first so that nothing in the tree can fork while we send SIGKILLs; frozen tasks
    // receive the signal when thawed. A task caught mid-way (joining the cgroup right after its
    // start) can hold the freezer in FREEZING: wait only briefly, kill what is listed, and thaw
    // in every case (a cgroup left FREEZING keeps its tasks stopped, unkillable), then repeat
    // the kills until the tree is empty. Without a freezer hierarchy, only the repetition.
    absl::StatusOr<std::string> freezer = Dir("freezer");
    std::shared_lock freezing(KillFreezeLock());
    bool frozen = freezer.ok() && WriteCgroupFile(*freezer + "/freezer.state", "FROZEN").ok();
    if (frozen) {
      (void)WaitFor(
          [&] {
            auto state = ReadCgroupFile(*freezer + "/freezer.state");
            return state.ok() && *state == "FROZEN";
          },
          std::chrono::milliseconds(200));
    }
    auto kill_all = [&]() -> absl::StatusOr<bool> {
      ASSIGN_OR_RETURN(std::vector<pid_t> pids, ReadProcsRecursive(procs_dir));
      for (pid_t p : pids) RETURN_IF_ERROR(KillIfMember(p, name_));
      return pids.empty();
    };
    absl::StatusOr<bool> empty = kill_all();
    if (frozen) RETURN_IF_ERROR(Thaw());
    freezing.unlock();
    if (!empty.ok()) return Annotate(empty.status(), fmt::format("kill cgroup {}", name_));
    absl::Status failed;
    bool done = WaitFor(
        [&] {
          absl::StatusOr<bool> e = kill_all();
          failed = e.status();
          return !e.ok() || *e;
        },
        timeout);
    if (!failed.ok()) return Annotate(failed, fmt::format("kill cgroup {}", name_));
    if (!done) {
      return absl::DeadlineExceededError(fmt::format(
          "kill cgroup {}: processes still present after {} ms", name_, timeout.count()));
    }
    return absl::OkStatus();
  }

  absl::Status Destroy() override {
    // The kernel refuses to remove a cgroup holding a process or a child cgroup (EBUSY), so
    // when rmdir succeeds in the hierarchy that lists processes, the tree was empty in all of
    // them (every airlock process joins every hierarchy) and needs no scan and no kill: the
    // common case at the end of a command or a sandbox.
    const std::string procs_dir = fmt::format("{}/{}", ProcessMount(), name_);
    const bool emptied = ::rmdir(procs_dir.c_str()) == 0;
    if (!emptied) {
      RETURN_IF_ERROR(Kill(std::chrono::seconds(5)), fmt::format("destroy cgroup {}", name_));
    }
    absl::Status status;
    for (const std::string& root : UniqueMounts()) {
      std::string dir = fmt::format("{}/{}", root, name_);
      if (emptied && dir == procs_dir) continue;
      status.Update(RemoveCgroupDir(dir));
    }
    return status;
  }

  absl::StatusOr<Entry> OpenEntry() override {
    Entry e{Entry::Mode::kWriteSelf, {}};
    for (const std::string& root : UniqueMounts()) {
      std::string path = fmt::format("{}/{}/tasks", root, name_);
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd) return ErrnoStatus(errno, fmt::format("open {}", path));
      e.fds.push_back(std::move(fd));
    }
    return e;
  }

 private:
  absl::StatusOr<std::string> Dir(const std::string& controller) const {
    auto it = mounts_->find(controller);
    if (it == mounts_->end()) {
      return FailedPrecondition(fmt::format(
          "cgroup v1 controller \"{}\" is not mounted; mount it (e.g. mount -t cgroup -o {} cgroup "
          "/sys/fs/cgroup/{})",
          controller, controller, controller));
    }
    return fmt::format("{}/{}", it->second, name_);
  }

  std::set<std::string> UniqueMounts() const {
    std::set<std::string> out;
    for (const auto& [controller, mount] : *mounts_) out.insert(mount);
    return out;
  }

  // The hierarchy used to list processes: freezer (kill needs it), else any.
  std::string ProcessMount() const {
    for (const char* c : {"freezer", "pids", "memory"}) {
      auto it = mounts_->find(c);
      if (it != mounts_->end()) return it->second;
    }
    return mounts_->begin()->second;
  }

  static int64_t SumBlkio(const std::string& dir, std::string_view op) {
    auto text = ReadCgroupFile(dir + "/blkio.throttle.io_service_bytes_recursive");
    if (!text.ok()) return 0;
    int64_t total = 0;
    std::string_view rest(*text);
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      // "8:0 Read 4096"
      size_t sp1 = line.find(' ');
      if (sp1 == std::string_view::npos) continue;
      size_t sp2 = line.find(' ', sp1 + 1);
      if (sp2 == std::string_view::npos || line.substr(sp1 + 1, sp2 - sp1 - 1) != op) continue;
      total += std::strtoll(std::string(line.substr(sp2 + 1)).c_str(), nullptr, 10);
    }
    return total;
  }

  const std::map<std::string, std::string>* mounts_;  // owned by the driver
  std::string name_;
};

class CgroupV1Driver : public CgroupDriver {
 public:
  CgroupV1Driver(std::map<std::string, std::string> mounts, std::string base)
      : mounts_(std::move(mounts)), base_(std::move(base)) {}

  CgroupVersion version() const override { return CgroupVersion::kV1; }

  bool HasController(Controller c) const override {
    switch (c) {
      case Controller::kMemory:
        return mounts_.count("memory") > 0;
      case Controller::kPids:
        return mounts_.count("pids") > 0;
      case Controller::kCpu:
        return mounts_.count("cpu") > 0;
      case Controller::kFreezer:
        return mounts_.count("freezer") > 0;
    }
    return false;
  }

  bool HasSwapAccounting() const override {
    auto memory = mounts_.find("memory");
    return memory != mounts_.end() &&
           ::access((memory->second + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0;
  }

  absl::StatusOr<std::unique_ptr<Cgroup>> Create(std::string_view name) override {
    CgroupV1 base(&mounts_, base_);
    return base.CreateChild(name);
  }

  absl::StatusOr<std::unique_ptr<Cgroup>> Open(std::string_view name) override {
    RETURN_IF_ERROR(CheckCgroupName(name));
    std::string full = fmt::format("{}/{}", base_, name);
    for (const auto& [controller, mount] : mounts_) {
      std::string path = mount + "/" + full;
      if (::access(path.c_str(), F_OK) != 0) {
        return ErrnoStatus(errno, fmt::format("open cgroup {}", path));
      }
    }
    return std::unique_ptr<Cgroup>(new CgroupV1(&mounts_, full));
  }

  absl::StatusOr<std::vector<std::string>> List() override {
    std::set<std::string> names;
    for (const auto& [controller, mount] : mounts_) {
      absl::StatusOr<std::vector<std::string>> sub = ListSubdirs(mount + "/" + base_);
      if (!sub.ok()) continue;
      names.insert(sub->begin(), sub->end());
    }
    return std::vector<std::string>(names.begin(), names.end());
  }

 private:
  std::map<std::string, std::string> mounts_;
  std::string base_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CgroupDriver>> NewCgroupV1Driver(
    const std::map<std::string, std::string>& all_mounts, const std::string& base) {
  std::map<std::string, std::string> mounts;
  for (const char* c : kUsed) {
    auto it = all_mounts.find(c);
    if (it != all_mounts.end()) mounts[c] = it->second;
  }
  if (mounts.empty()) return FailedPrecondition("no cgroup v1 controller hierarchy is mounted");
  std::set<std::string> roots;
  for (const auto& [c, m] : mounts) roots.insert(m);
  for (const std::string& root : roots) {
    std::string dir = root;
    size_t start = 0;
    while (start < base.size()) {
      size_t slash = base.find('/', start);
      std::string part = base.substr(start, slash == std::string::npos ? slash : slash - start);
      start = slash == std::string::npos ? base.size() : slash + 1;
      if (part.empty()) continue;
      RETURN_IF_ERROR(CheckCgroupName(part));
      dir += "/" + part;
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoStatus(errno, fmt::format("mkdir {}", dir));
      }
    }
    // memory.use_hierarchy must be on so that a sandbox limit bounds its commands' cgroups.
    if (mounts.count("memory") && mounts.at("memory") == root) {
      auto h = ReadCgroupInt(dir + "/memory.use_hierarchy");
      if (h.ok() && h->has_value() && **h == 0) {
        (void)WriteCgroupFile(dir + "/memory.use_hierarchy", "1");
      }
    }
  }
  return std::unique_ptr<CgroupDriver>(new CgroupV1Driver(std::move(mounts), base));
}

}  // namespace airlock::engine::internal
