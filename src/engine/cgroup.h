// Control groups: limits, accounting and whole-tree kill for sandboxes and their commands.
//
// Two implementations behind one interface: cgroup v2 (the unified hierarchy, most production
// hosts) and cgroup v1 (one hierarchy per controller, as on hosts that mount the controllers on
// v1 next to an empty v2 tree). Both pass the same contract tests (cgroup_test.cc).
//
// Layout: every airlock cgroup lives under one base path of the hierarchy (CgroupOptions::base,
// "airlock" by default), e.g. airlock/sb-1a2b/init and airlock/sb-1a2b/cmd-1.
//
// Thread safety: a Cgroup object is not synchronised; distinct objects may be used from
// distinct threads. Errors name the cgroup file that failed.
#ifndef AIRLOCK_ENGINE_CGROUP_H_
#define AIRLOCK_ENGINE_CGROUP_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace airlock::engine {

enum class CgroupVersion { kV1, kV2 };
const char* ToString(CgroupVersion v);

// The controllers airlock relies on. kFreezer is a v1 controller; v2 freezes natively.
enum class Controller { kMemory, kPids, kCpu, kFreezer };
const char* ToString(Controller c);

struct CgroupLimits {
  int64_t memory_bytes = 0;  // memory including swap; 0 = no limit
  // v2, with a memory limit: an OOM kill takes every process of this cgroup (memory.oom.group).
  // For a command's cgroup, never for a sandbox's: the kernel kills the highest group cgroup
  // between the victim and the cgroup whose limit was hit, airlock-init included. v1 has none.
  bool oom_group = false;
  int64_t pids_max = 0;  // 0 = no limit
  double cpu_cores = 0;  // CPU bandwidth in cores; 0 = no limit
};

struct CgroupStats {
  int64_t cpu_user_us = 0;
  int64_t cpu_system_us = 0;
  int64_t memory_current_bytes = 0;
  int64_t memory_peak_bytes = 0;
  int64_t pids_current = 0;
  int64_t pids_peak = 0;
  int64_t oom_kills = 0;        // processes killed by the OOM killer in this cgroup's tree
  int64_t pids_limit_hits = 0;  // forks refused because pids.max was reached
  int64_t io_read_bytes = 0;
  int64_t io_write_bytes = 0;
};

class Cgroup {
 public:
  virtual ~Cgroup() = default;

  virtual CgroupVersion version() const = 0;
  // Path relative to the hierarchy root, e.g. "airlock/sb-1a2b/cmd-1".
  virtual const std::string& name() const = 0;

  // Creates a child cgroup (fails with AlreadyExists if it exists).
  virtual absl::StatusOr<std::unique_ptr<Cgroup>> CreateChild(std::string_view child) = 0;

  // Applies the limits whose values are non-zero. A limit whose controller is missing is
  // FailedPrecondition naming the controller.
  virtual absl::Status SetLimits(const CgroupLimits& limits) = 0;

  // Moves a process (all its threads) into this cgroup.
  virtual absl::Status AddProcess(pid_t pid) = 0;

  // Pids of every process in this cgroup and its descendants.
  virtual absl::StatusOr<std::vector<pid_t>> Processes() = 0;

  // Accounting. Fields whose controller is missing are zero.
  virtual absl::StatusOr<CgroupStats> Stats() = 0;

  virtual absl::Status Freeze() = 0;
  virtual absl::Status Thaw() = 0;

  // SIGKILLs every process in the tree, including ones forked concurrently, and waits until the
  // tree is empty or `timeout` passes (DeadlineExceeded).
  virtual absl::Status Kill(std::chrono::milliseconds timeout = std::chrono::seconds(5)) = 0;

  // Kill(), then removes this cgroup and every descendant. Idempotent.
  virtual absl::Status Destroy() = 0;

  // How a new process enters this cgroup without anyone migrating it. Moving another process
  // (writing its pid to cgroup.procs) takes a global lock whose first use waits for an RCU grace
  // period, milliseconds on an idle host; both ways below avoid it.
  struct Entry {
    enum class Mode {
      kCloneInto,  // v2: fds[0] is an O_DIRECTORY fd for clone3(CLONE_INTO_CGROUP)
      kWriteSelf,  // v1: one write-only fd per hierarchy of its "tasks" file; the new,
                   // single-threaded process writes "0" to each to move itself (the
                   // permission is the opener's, so an unprivileged process can use them)
    };
    Mode mode;
    std::vector<UniqueFd> fds;
  };
  virtual absl::StatusOr<Entry> OpenEntry() = 0;
};

struct CgroupOptions {
  enum class Version { kAuto, kV1, kV2 };
  Version version = Version::kAuto;
  std::string base = "airlock";  // relative to the hierarchy root
  std::string mount_root = "/sys/fs/cgroup";
};

// One cgroup hierarchy (v2) or set of hierarchies (v1) where airlock makes its cgroups.
class CgroupDriver {
 public:
  virtual ~CgroupDriver() = default;

  // Finds the cgroup setup of this host: v2 when /sys/fs/cgroup is cgroup2, otherwise the v1
  // controller hierarchies. With an explicit version, uses that one (for v2 on a hybrid host:
  // the "unified" tree). Creates the base cgroup if needed.
  static absl::StatusOr<std::unique_ptr<CgroupDriver>> Detect(const CgroupOptions& options);

  virtual CgroupVersion version() const = 0;
  virtual bool HasController(Controller c) const = 0;
  // Whether memory limits can include swap (v1: memory.memsw.*; v2: memory.swap.max). Without
  // it a sandbox could escape its memory limit into swap on a host that has swap.
  virtual bool HasSwapAccounting() const = 0;

  // Creates base/<name> (AlreadyExists if present).
  virtual absl::StatusOr<std::unique_ptr<Cgroup>> Create(std::string_view name) = 0;
  // Opens an existing base/<name> (NotFound if absent), e.g. for the reaper.
  virtual absl::StatusOr<std::unique_ptr<Cgroup>> Open(std::string_view name) = 0;
  // Names of the cgroups directly under base.
  virtual absl::StatusOr<std::vector<std::string>> List() = 0;
};

// Reads the "Pid:" line of /proc/self/fdinfo/<pidfd>: the pid in this process's namespace, even
// for a process created in another pid namespace. -1 (with NotFound) once the process is gone.
absl::StatusOr<pid_t> PidFromPidfd(int pidfd);

// For a process about to end on purpose before its sandboxes are destroyed (a second Ctrl-C of
// `airlock run`): waits until every kill under way that froze a cgroup has thawed it, and keeps
// any later kill from freezing one (it then waits forever). A tree left frozen keeps its tasks
// stopped and unkillable, so the death of airlock-init would not end them. Call it once; the
// process must end right after.
void StopCgroupFreezesForExit();

}  // namespace airlock::engine

#endif  // AIRLOCK_ENGINE_CGROUP_H_
