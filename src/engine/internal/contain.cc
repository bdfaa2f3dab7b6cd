// The sandbox's first process, from clone to the exec of airlock-init. This file is the
// checklist: every step in order, each failing closed with its name. Nothing here allocates,
// locks or logs; a failure is reported as a ChildError on the error pipe.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "engine/internal/plan.h"
#include "init/protocol.h"

namespace airlock::engine::internal {

const char* ToString(Step step) {
  switch (step) {
    case Step::kWaitParent:
      return "wait for uid/gid maps";
    case Step::kJoinCgroup:
      return "join cgroup";
    case Step::kCgroupNamespace:
      return "cgroup namespace";
    case Step::kDeathSignal:
      return "parent death signal";
    case Step::kMountPropagation:
      return "make mounts private";
    case Step::kOpenSources:
      return "open bind mount source";
    case Step::kStagingRoot:
      return "mount root tmpfs";
    case Step::kIdentity:
      return "set uid/gid";
    case Step::kMount:
      return "mount";
    case Step::kPivotRoot:
      return "pivot_root";
    case Step::kRootReadOnly:
      return "make root read-only";
    case Step::kHostname:
      return "set hostname";
    case Step::kLoopback:
      return "bring up loopback";
    case Step::kNoNewPrivs:
      return "no_new_privs";
    case Step::kLandlock:
      return "landlock";
    case Step::kCapabilities:
      return "drop capabilities";
    case Step::kFds:
      return "close file descriptors";
    case Step::kExecInit:
      return "exec airlock-init";
    case Step::kWorkerStdio:
      return "worker stdio";
    case Step::kRlimits:
      return "set rlimits";
    case Step::kSeccomp:
      return "install seccomp filters";
    case Step::kUserLimits:
      return "limits of the user namespace";
  }
  return "unknown step";
}

namespace {

// The kernel charges inotify instances and watches, and namespaces, to every user namespace up
// to the host's, where ours belongs to the engine's user (root): all sandboxes and the host's
// root services share root's 128 inotify instances. Our own namespace's limits (which we may set
// while we hold its capabilities) bound what this sandbox can take of them, and it may create no
// user namespace (seccomp refuses that too). Mount namespaces stay: open_tree makes one.
int SetUserNamespaceLimits() {
  static constexpr std::pair<const char*, const char*> kLimits[] = {
      {"/proc/sys/user/max_inotify_instances", "16"},
      {"/proc/sys/user/max_inotify_watches", "16384"},
      {"/proc/sys/user/max_user_namespaces", "0"},
  };
  for (auto [path, value] : kLimits) {
    int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      // ENOENT: a kernel without that limit. EROFS: the engine runs in a container whose
      // /proc/sys is read-only; the host's limits then stay the only ones.
      if (errno == ENOENT || errno == EROFS) continue;
      return errno;
    }
    size_t len = std::strlen(value);
    int err = ::write(fd, value, len) == static_cast<ssize_t>(len) ? 0 : errno;
    ::close(fd);
    if (err != 0) return err;
  }
  return 0;
}

[[noreturn]] void Die(const SetupPlan& plan, Step step, int op, int err) {
  ChildError e{static_cast<int32_t>(step), op, err};
  (void)!::write(plan.error_fd, &e, sizeof(e));
  _exit(1);
}

inline void Check(const SetupPlan& plan, Step step, int err, int op = -1) {
  if (err != 0) Die(plan, step, op, err);
}

inline int Errno(int rc) { return rc == 0 ? 0 : errno; }

}  // namespace

void Contain(SetupPlan* plan) {
  const SetupPlan& p = *plan;

  // First into the sandbox's cgroup (v1; on v2 we were cloned into it), by moving ourselves:
  // no global lock, no RCU grace period, unlike a migration by the parent.
  for (int fd : p.cgroup_join_fds) {
    if (::write(fd, "0", 1) != 1) Die(p, Step::kJoinCgroup, -1, errno);
  }

  // The parent writes our uid/gid maps, then says go.
  // Only the engine may hold the other end of the sync socket: its death then reads as a hangup.
  if (p.sync_peer_fd >= 0) ::close(p.sync_peer_fd);
  char go;
  if (::read(p.sync_fd, &go, 1) != 1) Die(p, Step::kWaitParent, -1, errno ? errno : EPIPE);

  // If the engine dies, so does the sandbox.
  Check(p, Step::kDeathSignal, Errno(::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)));

  // Nothing we mount may propagate back to the host.
  Check(p, Step::kMountPropagation,
        Errno(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr)));

  // Host paths are opened with the parent's credentials, before we take the sandbox's ids.
  // (Each result is taken before `op` is read: argument evaluation order is unspecified.)
  int op = -1;
  int err = OpenMountSources(plan, &op);
  Check(p, Step::kOpenSources, err, op);
  int root_fd = -1, scratch_fd = -1;
  Check(p, Step::kStagingRoot, MountStagingRoot(p, &root_fd, &scratch_fd));

  // The only ids mapped in our user namespace; everything created from here is owned by them.
  // Raw system calls: glibc's setresuid/setresgid synchronise every thread of the process, and
  // this child has inherited the parent's thread list without its threads (a deadlock whenever
  // the caller is multi-threaded, as with an egress proxy running).
  Check(p, Step::kIdentity, Errno(static_cast<int>(::syscall(SYS_setresgid, p.gid, p.gid, p.gid))));
  Check(p, Step::kIdentity, Errno(static_cast<int>(::syscall(SYS_setresuid, p.uid, p.uid, p.uid))));
  // Changing ids cleared the death signal: set it again. Had the engine died in between, the
  // other end of sync_fd, which it holds until we report, is closed now.
  Check(p, Step::kDeathSignal, Errno(::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)));
  struct pollfd engine_alive = {p.sync_fd, POLLRDHUP, 0};
  if (::poll(&engine_alive, 1, 0) != 0) Die(p, Step::kDeathSignal, -1, ESRCH);

  Check(p, Step::kUserLimits, SetUserNamespaceLimits());

  err = RunMountOps(plan, root_fd, scratch_fd, &op);
  Check(p, Step::kMount, err, op);
  ::close(scratch_fd);
  Check(p, Step::kPivotRoot, PivotIntoRoot(root_fd));
  ::close(root_fd);
  if (p.read_only_root) Check(p, Step::kRootReadOnly, MakeRootReadOnly());

  Check(p, Step::kHostname, Errno(::sethostname(p.hostname.data(), p.hostname.size())));
  Check(p, Step::kLoopback, LoopbackUp());

  ::close(p.sync_fd);
  // Our cgroup becomes the root of our cgroup namespace.
  if (p.new_cgroup_namespace) Check(p, Step::kCgroupNamespace, Errno(::unshare(CLONE_NEWCGROUP)));

  Check(p, Step::kNoNewPrivs, Errno(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)));
  if (p.landlock_abi > 0) Check(p, Step::kLandlock, ApplyLandlock(p));
  Check(p, Step::kCapabilities, DropCapabilities());
}

void RunChild(SetupPlan* plan) {
  Contain(plan);
  const SetupPlan& p = *plan;

  // airlock-init gets its control socket as fd 3, and nothing else but stdio and the error pipe
  // (close-on-exec, so a successful exec reads as EOF in the parent).
  int control = p.control_fd;
  if (control != init::kControlFd) {
    Check(p, Step::kFds, Errno(::dup2(control, init::kControlFd) < 0 ? -1 : 0));
    control = init::kControlFd;
  } else {
    Check(p, Step::kFds, Errno(::fcntl(control, F_SETFD, 0)));
  }
  // Our stdio may be the caller's terminal: init gets /dev/null instead.
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) Die(p, Step::kFds, -1, errno);
  for (int fd = 0; fd < 3; ++fd) {
    if (::dup2(null_fd, fd) < 0) Die(p, Step::kFds, -1, errno);
  }
  int error_fd = p.error_fd;
  if (error_fd <= init::kControlFd) Die(p, Step::kFds, -1, EBADF);
  ::close_range(init::kControlFd + 1, static_cast<unsigned>(error_fd) - 1, 0);
  ::close_range(static_cast<unsigned>(error_fd) + 1, ~0U, 0);

  char* const argv[] = {const_cast<char*>("airlock-init"), nullptr};
  char* const envp[] = {nullptr};
  ::execve(p.init_path.c_str(), argv, envp);
  Die(p, Step::kExecInit, -1, errno);
}

void EnterWorker(WorkerPlan* worker) {
  SetupPlan* plan = &worker->setup;
  Contain(plan);
  const SetupPlan& p = *plan;

  // The worker's stdio are the pipes it was given; the error pipe moves to fd 3 and everything
  // else (the zygote's socket, the interpreter's own descriptors) is closed.
  for (int fd = 0; fd < 3; ++fd) {
    Check(p, Step::kWorkerStdio, Errno(::dup2(worker->stdio[fd], fd) < 0 ? -1 : 0));
  }
  // The error pipe goes above every descriptor we keep, the status pipe to fd 3.
  int error_fd = ::fcntl(p.error_fd, F_DUPFD_CLOEXEC, 4);
  if (error_fd < 0) Die(p, Step::kWorkerStdio, -1, errno);
  int keep_from = 3;
  if (worker->status_fd >= 0) {
    Check(p, Step::kWorkerStdio, Errno(::dup2(worker->status_fd, 3) < 0 ? -1 : 0));
    keep_from = 4;
  }
  if (error_fd > keep_from) ::close_range(keep_from, static_cast<unsigned>(error_fd) - 1, 0);
  ::close_range(static_cast<unsigned>(error_fd) + 1, ~0U, 0);
  worker->setup.error_fd = error_fd;
  ::setsid();
  Check(p, Step::kWorkerStdio, Errno(::chdir(worker->workdir.c_str())));
  ::umask(022);

  for (const init::Rlimit& r : worker->rlimits) {
    struct rlimit rl = {r.soft, r.hard};
    Check(p, Step::kRlimits, Errno(::setrlimit(static_cast<int>(r.resource), &rl)));
  }
  // The filters go on last, as airlock-init installs them before a command's exec; a policy
  // with a notify listener needs the engine's supervisor, which workers do not have.
  Check(p, Step::kSeccomp,
        init::InstallFilters(worker->seccomp_filter, worker->policy_filter,
                             init::PolicyListener::kNone, -1));
  // EOF on the error pipe tells the host that the worker is contained and runs its code.
  ::close(error_fd);
}

}  // namespace airlock::engine::internal
