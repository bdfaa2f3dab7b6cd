// cgroup v2: one unified hierarchy. Limits on a cgroup need the controller enabled in its
// parent's cgroup.subtree_control, which in turn requires the parent to hold no processes
// ("no internal processes" rule), so airlock keeps processes in leaves only.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>

#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/cgroup.h"
#include "engine/internal/cgroup_files.h"
#include "engine/internal/cgroup_impl.h"
#include "fmt/format.h"

namespace airlock::engine::internal {
namespace {

constexpr const char* kWanted[] = {"memory", "pids", "cpu"};

// Enables the wanted controllers that `dir` offers in its subtree_control. EBUSY (the cgroup
// holds processes) leaves them disabled; SetLimits then reports the missing controller.
void EnableSubtreeControllers(const std::string& dir) {
  absl::StatusOr<std::string> available = ReadCgroupFile(dir + "/cgroup.controllers");
  if (!available.ok()) return;
  std::string words = " " + *available + " ";
  for (const char* c : kWanted) {
    if (words.find(fmt::format(" {} ", c)) == std::string::npos) continue;
    (void)WriteCgroupFile(dir + "/cgroup.subtree_control", fmt::format("+{}", c));
  }
}

class CgroupV2 : public Cgroup {
 public:
  CgroupV2(std::string mount, std::string name)
      : mount_(std::move(mount)), name_(std::move(name)), dir_(mount_ + "/" + name_) {}

  CgroupVersion version() const override { return CgroupVersion::kV2; }
  const std::string& name() const override { return name_; }

  absl::StatusOr<std::unique_ptr<Cgroup>> CreateChild(std::string_view child) override {
    RETURN_IF_ERROR(CheckCgroupName(child));
    EnableSubtreeControllers(dir_);
    std::string child_name = fmt::format("{}/{}", name_, child);
    std::string path = mount_ + "/" + child_name;
    if (::mkdir(path.c_str(), 0755) != 0) return ErrnoStatus(errno, fmt::format("mkdir {}", path));
    return std::unique_ptr<Cgroup>(new CgroupV2(mount_, child_name));
  }

  absl::Status SetLimits(const CgroupLimits& limits) override {
    if (limits.memory_bytes > 0) {
      RETURN_IF_ERROR(RequireFile("memory.max", "memory"));
      RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/memory.max", std::to_string(limits.memory_bytes)));
      // The limit includes swap: no swap at all for sandboxed code.
      if (::access((dir_ + "/memory.swap.max").c_str(), F_OK) == 0) {
        RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/memory.swap.max", "0"));
      }
      // An OOM kill takes the whole command tree, not one arbitrary process of it.
      if (limits.oom_group) RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/memory.oom.group", "1"));
    }
    if (limits.pids_max > 0) {
      RETURN_IF_ERROR(RequireFile("pids.max", "pids"));
      RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/pids.max", std::to_string(limits.pids_max)));
    }
    if (limits.cpu_cores > 0) {
      RETURN_IF_ERROR(RequireFile("cpu.max", "cpu"));
      constexpr int64_t kPeriodUs = 100000;
      int64_t quota = std::max<int64_t>(1000, std::llround(limits.cpu_cores * kPeriodUs));
      RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/cpu.max", fmt::format("{} {}", quota, kPeriodUs)));
    }
    return absl::OkStatus();
  }

  absl::Status AddProcess(pid_t pid) override {
    return WriteCgroupFile(dir_ + "/cgroup.procs", std::to_string(pid));
  }

  absl::StatusOr<std::vector<pid_t>> Processes() override { return ReadProcsRecursive(dir_); }

  absl::StatusOr<CgroupStats> Stats() override {
    CgroupStats s;
    s.cpu_user_us = ReadKeyedValue(dir_ + "/cpu.stat", "user_usec").value_or(0);
    s.cpu_system_us = ReadKeyedValue(dir_ + "/cpu.stat", "system_usec").value_or(0);
    ASSIGN_OR_RETURN(auto current, ReadCgroupInt(dir_ + "/memory.current"));
    s.memory_current_bytes = current.value_or(0);
    ASSIGN_OR_RETURN(auto peak, ReadCgroupInt(dir_ + "/memory.peak"));
    s.memory_peak_bytes = peak.value_or(0);
    s.oom_kills = ReadKeyedValue(dir_ + "/memory.events", "oom_kill").value_or(0);
    ASSIGN_OR_RETURN(auto pids, ReadCgroupInt(dir_ + "/pids.current"));
    s.pids_current = pids.value_or(0);
    ASSIGN_OR_RETURN(auto pids_peak, ReadCgroupInt(dir_ + "/pids.peak"));
    s.pids_peak = pids_peak.value_or(0);
    s.pids_limit_hits = ReadKeyedValue(dir_ + "/pids.events", "max").value_or(0);
    ReadIo(&s);
    return s;
  }

  absl::Status Freeze() override {
    RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/cgroup.freeze", "1"));
    if (!WaitFor([&] { return ReadKeyedValue(dir_ + "/cgroup.events", "frozen") == 1; },
                 std::chrono::seconds(5))) {
      return absl::DeadlineExceededError("cgroup did not freeze within 5 s");
    }
    return absl::OkStatus();
  }

  absl::Status Thaw() override { return WriteCgroupFile(dir_ + "/cgroup.freeze", "0"); }

  absl::Status Kill(std::chrono::milliseconds timeout) override {
    if (::access(dir_.c_str(), F_OK) != 0) return absl::OkStatus();
    if (ReadKeyedValue(dir_ + "/cgroup.events", "populated") == 0) return absl::OkStatus();
    if (::access((dir_ + "/cgroup.kill").c_str(), F_OK) == 0) {
      RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/cgroup.kill", "1"));
    } else {
      // Kernels before 5.14: freeze so nothing forks while we kill, then thaw to let the
      // SIGKILLs be delivered.
      std::shared_lock freezing(KillFreezeLock());
      RETURN_IF_ERROR(Freeze());
      ASSIGN_OR_RETURN(std::vector<pid_t> pids, Processes());
      absl::Status killed;
      for (pid_t p : pids) killed.Update(KillIfMember(p, name_));
      RETURN_IF_ERROR(Thaw());
      RETURN_IF_ERROR(killed, fmt::format("kill cgroup {}", name_));
    }
    if (!WaitFor([&] { return ReadKeyedValue(dir_ + "/cgroup.events", "populated") != 1; },
                 timeout)) {
      return absl::DeadlineExceededError(fmt::format(
          "kill cgroup {}: processes still present after {} ms", name_, timeout.count()));
    }
    return absl::OkStatus();
  }

  absl::Status Destroy() override {
    RETURN_IF_ERROR(Kill(std::chrono::seconds(5)), fmt::format("destroy cgroup {}", name_));
    return RemoveCgroupDir(dir_);
  }

  absl::StatusOr<Entry> OpenEntry() override {
    UniqueFd fd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return ErrnoStatus(errno, fmt::format("open {}", dir_));
    Entry e{Entry::Mode::kCloneInto, {}};
    e.fds.push_back(std::move(fd));
    return e;
  }

 private:
  absl::Status RequireFile(const char* file, const char* controller) {
    if (::access((dir_ + "/" + file).c_str(), F_OK) == 0) return absl::OkStatus();
    return FailedPrecondition(fmt::format(
        "cgroup v2 controller \"{}\" is not enabled for {} (missing {}); enable it in the "
        "parent's cgroup.subtree_control",
        controller, dir_, file));
  }

  void ReadIo(CgroupStats* s) {
    absl::StatusOr<std::string> io = ReadCgroupFile(dir_ + "/io.stat");
    if (!io.ok()) return;
    for (std::string_view field : {std::string_view("rbytes="), std::string_view("wbytes=")}) {
      int64_t* out = field[0] == 'r' ? &s->io_read_bytes : &s->io_write_bytes;
      size_t pos = 0;
      while ((pos = io->find(field, pos)) != std::string::npos) {
        pos += field.size();
        *out += std::strtoll(io->c_str() + pos, nullptr, 10);
      }
    }
  }

  std::string mount_;
  std::string name_;
  std::string dir_;
};

class CgroupV2Driver : public CgroupDriver {
 public:
  CgroupV2Driver(std::string mount, std::string base, std::string controllers)
      : mount_(std::move(mount)), base_(std::move(base)), controllers_(std::move(controllers)) {}

  CgroupVersion version() const override { return CgroupVersion::kV2; }

  bool HasController(Controller c) const override {
    if (c == Controller::kFreezer) return true;  // built into v2
    return (" " + controllers_ + " ").find(fmt::format(" {} ", ToString(c))) != std::string::npos;
  }

  bool HasSwapAccounting() const override {
    return ::access(fmt::format("{}/{}/memory.swap.max", mount_, base_).c_str(), F_OK) == 0;
  }

  absl::StatusOr<std::unique_ptr<Cgroup>> Create(std::string_view name) override {
    CgroupV2 base(mount_, base_);
    return base.CreateChild(name);
  }

  absl::StatusOr<std::unique_ptr<Cgroup>> Open(std::string_view name) override {
    RETURN_IF_ERROR(CheckCgroupName(name));
    std::string full = fmt::format("{}/{}", base_, name);
    if (::access((mount_ + "/" + full).c_str(), F_OK) != 0) {
      return ErrnoStatus(errno, fmt::format("open cgroup {}", full));
    }
    return std::unique_ptr<Cgroup>(new CgroupV2(mount_, full));
  }

  absl::StatusOr<std::vector<std::string>> List() override {
    return ListSubdirs(mount_ + "/" + base_);
  }

 private:
  std::string mount_;
  std::string base_;
  std::string controllers_;  // enabled for children of base, space separated
};

}  // namespace

absl::StatusOr<std::unique_ptr<CgroupDriver>> NewCgroupV2Driver(const std::string& mount,
                                                                const std::string& base) {
  // Walk from the root to base, creating directories and enabling controllers on the way.
  std::string dir = mount;
  EnableSubtreeControllers(dir);
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
    EnableSubtreeControllers(dir);
  }
  absl::StatusOr<std::string> enabled = ReadCgroupFile(dir + "/cgroup.subtree_control");
  return std::unique_ptr<CgroupDriver>(
      new CgroupV2Driver(mount, base, enabled.ok() ? *enabled : ""));
}

}  // namespace airlock::engine::internal
