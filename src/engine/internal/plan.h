// The setup plan: everything the sandbox's first process does between clone and exec, decided
// by the parent beforehand. The child only reads it (and fills in descriptors it opens), makes
// system calls, and reports a failure as {step, operation index, errno} over a pipe: no
// allocation, no locks, no logging after clone.
#ifndef AIRLOCK_ENGINE_INTERNAL_PLAN_H_
#define AIRLOCK_ENGINE_INTERNAL_PLAN_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "init/protocol.h"

namespace airlock::engine::internal {

// Setup steps in the order they run (contain.cc); the names are used in error messages.
enum class Step : int32_t {
  kJoinCgroup = 1,
  kWaitParent,
  kDeathSignal,
  kMountPropagation,
  kOpenSources,
  kStagingRoot,
  kIdentity,
  kMount,
  kPivotRoot,
  kRootReadOnly,
  kHostname,
  kLoopback,
  kCgroupNamespace,
  kNoNewPrivs,
  kLandlock,
  kCapabilities,
  kFds,
  kExecInit,
  // A fork-server worker's last steps, after kCapabilities (EnterWorker).
  kWorkerStdio,
  kRlimits,
  kSeccomp,
  kUserLimits,
};
const char* ToString(Step step);

// What the child writes to the error pipe when a step fails.
struct ChildError {
  int32_t step;
  int32_t op;  // index into SetupPlan::mounts for kOpenSources/kMount, else -1
  int32_t err;
};

struct MountOp {
  enum class Kind {
    kMkdir,       // mkdir -p target (mode)
    kFile,        // create an empty file at target (a mount point for a file bind)
    kSymlink,     // symlink target -> source
    kBind,        // bind host `source` at target (cloned before the staging root exists)
    kBindFd,      // attach the detached mount `fd` prepared by the parent (e.g. idmapped)
    kBindInRoot,  // bind the sandbox path `source` at target (after both exist)
    kReadOnly,    // make the mount at target read-only, in place
    kTmpfs,       // tmpfs at target; `data` holds its options
    kProc,        // a fresh procfs of the sandbox's pid namespace
    kDevpts,      // a private devpts instance; `data` holds its options
    kWriteFile,   // create the file target (mode) holding `data`
  };
  Kind kind = Kind::kMkdir;
  std::string source;
  std::string target;       // absolute path inside the sandbox
  std::string data;         // file system options for kTmpfs/kDevpts
  uint64_t attr = 0;        // MOUNT_ATTR_* set on binds
  unsigned long flags = 0;  // MS_* for kTmpfs/kProc/kDevpts
  mode_t mode = 0755;
  bool optional = false;  // a missing target (or source) is skipped, not an error
  int fd = -1;            // kBind: filled in by the child; kBindFd: set by the parent
  // kMkdir, kWriteFile: `target` is in the scratch area, not the sandbox; kBindInRoot: `source`
  // is (SetupPlan::scratch_dir).
  bool scratch = false;
};

struct SetupPlan {
  // Identity inside the user namespace (the only ids mapped).
  uid_t uid = 10001;
  gid_t gid = 10001;
  bool new_cgroup_namespace = true;
  // cgroup v1: write-only fds of the init cgroup's "tasks" files; the child writes "0" to each
  // to move itself (Cgroup::Entry::Mode::kWriteSelf). Empty on v2 (cloned into its cgroup).
  std::vector<int> cgroup_join_fds;
  std::string hostname;
  // Host directory where the root tmpfs is mounted before pivot_root, and its options.
  std::string staging_dir;
  std::string staging_options;
  // Host directory where a scratch tmpfs for the generated files (/etc/passwd, the empty file
  // and directory that mask secrets) is mounted. It is outside the new root, so pivot_root's
  // detach of the old root takes it along: it never appears in the sandbox, and no unmount of
  // its own waits for an RCU grace period.
  std::string scratch_dir;
  std::string scratch_options;
  std::vector<MountOp> mounts;
  bool read_only_root = true;
  // Landlock: 0 = not applied. Otherwise the ABI to use, and the paths (inside the sandbox)
  // that get write access; everything else is read and execute only.
  int landlock_abi = 0;
  std::vector<std::string> landlock_writable;
  std::vector<std::string> landlock_devices;  // read, write and ioctl on these device nodes
  // The program run as PID 1, with its control socket moved to fd 3.
  std::string init_path;
  int control_fd = -1;
  int sync_fd = -1;       // the parent writes one byte once the uid/gid maps are written
  int sync_peer_fd = -1;  // the parent's end, when the child inherited it (closed at once)
  int error_fd = -1;      // close-on-exec: EOF means the exec of init succeeded
};

// Mount steps, run by the child (mounts.cc). Each returns 0 or an errno value; the index of
// the failed operation goes to *failed_op. Targets are resolved beneath the staging root
// (openat2 RESOLVE_IN_ROOT), so no symlink in a root file system can point a mount outside it.
int OpenMountSources(SetupPlan* plan, int* failed_op);
int MountStagingRoot(const SetupPlan& plan, int* root_fd, int* scratch_fd);
int RunMountOps(SetupPlan* plan, int root_fd, int scratch_fd, int* failed_op);
int PivotIntoRoot(int root_fd);
int MakeRootReadOnly();

// Landlock (landlock.cc): read and execute everywhere, write only where the plan says.
int ApplyLandlock(const SetupPlan& plan);

// Capabilities (caps.cc): empties every capability set, including the bounding set, and locks
// the securebits so no execve can grant any back.
int DropCapabilities();

// Brings up the loopback interface of the new network namespace (namespaces.cc).
int LoopbackUp();

// The containment steps, in order: cgroup join, wait for the uid/gid maps, death signal,
// mounts, pivot_root, hostname, loopback, cgroup namespace, no_new_privs, Landlock,
// capabilities. Returns with every step done; on a failure, writes a ChildError and _exits.
void Contain(SetupPlan* plan);

// Runs the plan in the freshly cloned child. Never returns: execs init or _exits after
// writing a ChildError.
[[noreturn]] void RunChild(SetupPlan* plan);

// A fork-server worker: a process forked from a zygote that enters a fresh sandbox and then
// runs code in the interpreter it already is, without exec.
struct WorkerPlan {
  SetupPlan setup;  // setup.control_fd and init_path are unused
  int stdio[3] = {-1, -1, -1};
  // Becomes the worker's fd 3: where its program writes its exit code (an int32) just before it
  // exits, so the host can answer without waiting for the process's teardown. -1: none.
  int status_fd = -1;
  std::string workdir = "/sandbox/workspace";
  std::vector<init::Rlimit> rlimits;
  std::string seccomp_filter;  // the engine's profile (raw struct sock_filter[])
  std::string policy_filter;   // the spec's syscall rules; empty: none
  int cgroup_fd = -1;          // cgroup v2: clone3(CLONE_INTO_CGROUP) target; -1 on v1
};

// Contain(), then stdio on the worker's pipes, the status pipe on fd 3, every other descriptor
// closed, a new session,
// the working directory, rlimits and the seccomp filters (profile and policy, as airlock-init
// installs them), and the error pipe closed (EOF: contained). Returns into the caller, which
// runs the code; on a failure, writes a ChildError and _exits.
void EnterWorker(WorkerPlan* worker);

// The plan on the wire between the fork-server and its zygote (worker_codec.cc). Descriptors
// travel beside the bytes (SCM_RIGHTS): Encode appends every fd the plan names to *fds and
// writes its index; Decode maps the indexes back onto `fds`. Decode returns false on a malformed
// payload or an index out of range.
std::string EncodeWorkerPlan(const WorkerPlan& worker, std::vector<int>* fds);
bool DecodeWorkerPlan(std::string_view payload, const int* fds, int nfds, WorkerPlan* worker);

}  // namespace airlock::engine::internal

#endif  // AIRLOCK_ENGINE_INTERNAL_PLAN_H_
