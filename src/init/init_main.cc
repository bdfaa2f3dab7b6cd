// airlock-init: PID 1 inside a sandbox.
//
// Started by the engine as the last step of sandbox setup (privileges already dropped, Landlock
// applied), with its control socket on fd 3 and an empty environment. It reaps every process
// that ends up as its child and starts commands on the host's request (see protocol.h). When
// the control socket closes, it exits, and with it, by the kernel's rule for the init of a PID
// namespace, every process of the sandbox.
//
// Static binary, plain libc and libstdc++: it must run from any root filesystem.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "init/file_ops.h"
#include "init/protocol.h"

namespace airlock::init {
namespace {

// Why a spawned process failed before its program ran, written to the setup pipe.
struct SetupFailure {
  int32_t stage;  // SetupStage
  int32_t err;
};

void WriteStderr(const char* a, const char* b, const char* c) {
  char buf[512];
  int n = std::snprintf(buf, sizeof(buf), "airlock: %s%s%s\n", a, b, c);
  if (n > 0) (void)!::write(2, buf, static_cast<size_t>(n) < sizeof(buf) ? n : sizeof(buf) - 1);
}

[[noreturn]] void Fail(int setup_fd, SetupStage stage, int err, const char* what, const char* arg) {
  SetupFailure f{static_cast<int32_t>(stage), err};
  (void)!::write(setup_fd, &f, sizeof(f));
  WriteStderr(what, arg, (std::string(": ") + std::strerror(err)).c_str());
  _exit(stage == SetupStage::kExec && (err == ENOENT || err == ENOTDIR) ? 127 : 126);
}

// The program to execute: argv[0] itself when it names a path, else the first executable
// regular file of that name along PATH in the command's own environment (execvpe would search
// ours). Resolved before the seccomp filters go on, so that a syscall supervisor sees one
// execve of the program, not one per directory tried. Sets errno and returns "" when none.
std::string ResolveProgram(const char* file, const std::vector<char*>& envp) {
  if (std::strchr(file, '/') != nullptr) return file;
  const char* path = "/usr/local/bin:/usr/bin:/bin";
  for (char* e : envp) {
    if (e != nullptr && std::strncmp(e, "PATH=", 5) == 0) path = e + 5;
  }
  int saved = ENOENT;
  std::string candidate;
  for (const char* p = path;; ++p) {
    const char* end = std::strchr(p, ':');
    size_t len = end ? static_cast<size_t>(end - p) : std::strlen(p);
    candidate.assign(p, len);
    if (candidate.empty()) candidate = ".";
    candidate += '/';
    candidate += file;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      saved = EACCES;
    }
    if (end == nullptr) break;
    p = end;
  }
  errno = saved;
  return "";
}

// Runs in the forked child: enters its cgroup (kWriteSelf), waits for kStart when asked to
// (SpawnStart::kOnStart: the host places it or attaches to it), then becomes the command. Never
// returns.
[[noreturn]] void RunCommand(const SpawnRequest& req, const int* fds, int nfds, int start_fd,
                             int setup_fd) {
  // Into our cgroup before anything else, by moving ourselves (single-threaded): no migration.
  if (req.cgroup_join == CgroupJoin::kWriteSelf) {
    for (int i = 3; i < nfds; ++i) {
      if (::write(fds[i], "0", 1) != 1) _exit(125);
    }
  }
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);

  char go;
  if (start_fd >= 0 && ::read(start_fd, &go, 1) != 1) _exit(125);  // the host gave up on it

  ::setsid();
  for (int i = 0; i < 3; ++i) {
    if (::dup2(fds[i], i) < 0) Fail(setup_fd, SetupStage::kStdio, errno, "stdio", "");
  }
  // The setup pipe stays open (it is close-on-exec) so a failure below can still be reported.
  int keep = ::dup3(setup_fd, 3, O_CLOEXEC);
  if (keep < 0) _exit(125);
  setup_fd = keep;
  ::close_range(4, ~0U, 0);

  if (!req.cwd.empty() && ::chdir(req.cwd.c_str()) != 0) {
    Fail(setup_fd, SetupStage::kWorkdir, errno, "cannot enter working directory ", req.cwd.c_str());
  }
  for (const Rlimit& r : req.rlimits) {
    struct rlimit rl = {r.soft, r.hard};
    if (::setrlimit(static_cast<int>(r.resource), &rl) != 0) {
      Fail(setup_fd, SetupStage::kRlimit, errno, "setrlimit", "");
    }
  }
  ::umask(022);

  std::vector<std::string> env_copy = req.env;
  std::vector<std::string> argv_copy = req.argv;
  std::vector<char*> argv, envp;
  for (std::string& a : argv_copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env_copy) envp.push_back(e.data());
  envp.push_back(nullptr);

  std::string program = ResolveProgram(argv[0], envp);
  if (program.empty()) Fail(setup_fd, SetupStage::kExec, errno, "cannot run ", req.argv[0].c_str());
  // The seccomp filters go on last: nothing after them but the exec.
  if (int err =
          InstallFilters(req.seccomp_filter, req.policy_filter, req.policy_listener, kListenerFd);
      err != 0) {
    Fail(setup_fd, SetupStage::kSeccomp, err, "seccomp", "");
  }
  ::execve(program.c_str(), argv.data(), envp.data());
  Fail(setup_fd, SetupStage::kExec, errno, "cannot run ", req.argv[0].c_str());
}

// Forks a worker for one file operation (protocol.h, kFileOp): init keeps serving while the
// worker blocks on its pipes. The worker is reaped like any orphan; it reports on the result
// socket, never on the control socket.
void ServeFileOp(const std::string& payload, const int* fds, int nfds) {
  FileRequest req;
  FileDone done;
  std::string root, rel;
  if (nfds != 2) return;  // no result socket to answer on
  int data_fd = fds[0], result_fd = fds[1];
  if (!DecodeFileRequest(payload, &req)) {
    done.err = EINVAL;
    done.message = "malformed file request";
  } else if (!SplitFileRoot(req.path, &root, &rel)) {
    done.id = req.id;
    done.err = EPERM;
    done.message = "path is not under a sandbox file area";
  } else {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(data_fd, 0);
      ::dup2(result_fd, 1);
      ::close_range(2, ~0U, 0);  // the control socket and the children's pipes among them
      ::umask(022);
      int root_fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (root_fd < 0) {
        done.id = req.id;
        done.err = errno;
        done.message = "open " + root;
      } else {
        RunFileOp(root_fd, rel, req, 0, 1, &done);
      }
      ::close(0);  // a reader of our data sees its end before it reads our answer
      SendFrame(1, static_cast<uint32_t>(MessageType::kFileDone), EncodeFileDone(done));
      _exit(0);
    }
    if (pid > 0) return;
    done.id = req.id;
    done.err = errno;
    done.message = "fork a file worker";
  }
  SendFrame(result_fd, static_cast<uint32_t>(MessageType::kFileDone), EncodeFileDone(done));
}

struct Child {
  int start_fd = -1;  // write end: one byte starts the command
  int setup_fd = -1;  // read end: a SetupFailure, or EOF once the program runs
};

int Serve() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  int sigfd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) return 120;

  Writer ready;
  ready.U32(kProtocolVersion);
  if (SendMessage(kControlFd, MessageType::kReady, ready.data()) != 0) return 121;

  std::map<pid_t, Child> children;
  for (;;) {
    struct pollfd pfds[2] = {{kControlFd, POLLIN, 0}, {sigfd, POLLIN, 0}};
    if (::poll(pfds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 122;
    }
    if (pfds[1].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (::read(sigfd, &info, sizeof(info)) > 0) {
      }
      int status = 0;
      pid_t pid;
      while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
        auto it = children.find(pid);
        if (it == children.end()) continue;  // an orphan we only reap
        SetupFailure failure{0, 0};
        if (::read(it->second.setup_fd, &failure, sizeof(failure)) != sizeof(failure)) {
          failure = {0, 0};
        }
        Writer w;
        w.I32(pid);
        w.I32(status);
        w.I32(failure.stage);
        w.I32(failure.err);
        if (it->second.start_fd >= 0) ::close(it->second.start_fd);
        ::close(it->second.setup_fd);
        children.erase(it);
        if (SendMessage(kControlFd, MessageType::kExited, w.data()) != 0) return 0;
      }
    }
    if (pfds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      MessageType type;
      std::string payload;
      int fds[kMaxFds];
      int nfds = 0;
      int err = ReceiveMessage(kControlFd, &type, &payload, fds, &nfds);
      if (err != 0) return 0;  // the host is gone: exiting takes the whole sandbox down
      switch (type) {
        case MessageType::kSpawn: {
          SpawnRequest req;
          int start[2] = {-1, -1}, setup[2] = {-1, -1};
          int32_t spawn_err = 0;
          pid_t pid = -1;
          bool decoded = DecodeSpawn(payload, &req);
          bool joins_ok = req.cgroup_join == CgroupJoin::kWriteSelf ? nfds > 3 : nfds == 3;
          if (!decoded || !joins_ok) {
            spawn_err = EINVAL;
          } else if ((req.start == SpawnStart::kOnStart && ::pipe2(start, O_CLOEXEC) != 0) ||
                     ::pipe2(setup, O_CLOEXEC) != 0) {
            spawn_err = errno;
          } else {
            pid = ::fork();
            if (pid == 0) {
              if (start[1] >= 0) ::close(start[1]);
              ::close(setup[0]);
              RunCommand(req, fds, nfds, start[0], setup[1]);
            }
            if (pid < 0) spawn_err = errno;
          }
          for (int i = 0; i < nfds; ++i) ::close(fds[i]);
          if (start[0] >= 0) ::close(start[0]);
          if (setup[1] >= 0) ::close(setup[1]);
          int pidfd = -1;
          if (spawn_err == 0) {
            pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
            if (pidfd < 0) spawn_err = errno;
            children[pid] = Child{start[1], setup[0]};
            ::fcntl(setup[0], F_SETFL, O_NONBLOCK);
          } else {
            if (start[1] >= 0) ::close(start[1]);
            if (setup[0] >= 0) ::close(setup[0]);
          }
          Writer w;
          w.U64(req.id);
          w.I32(spawn_err);
          w.I32(pid);
          err =
              SendMessage(kControlFd, MessageType::kSpawned, w.data(), &pidfd, pidfd >= 0 ? 1 : 0);
          if (pidfd >= 0) ::close(pidfd);
          if (err != 0) return 0;
          break;
        }
        case MessageType::kStart: {
          Reader r(payload);
          pid_t pid = r.I32();
          auto it = children.find(pid);
          if (r.done() && it != children.end() && it->second.start_fd >= 0) {
            char go = 1;
            (void)!::write(it->second.start_fd, &go, 1);
            ::close(it->second.start_fd);
            it->second.start_fd = -1;
          }
          break;
        }
        case MessageType::kFileOp: {
          ServeFileOp(payload, fds, nfds);
          for (int i = 0; i < nfds; ++i) ::close(fds[i]);
          break;
        }
        case MessageType::kFilterSelf: {
          // Installed here, between requests: nothing is forked while it goes on, and everything
          // forked afterwards inherits it.
          Reader r(payload);
          std::string profile = r.Bytes();
          std::string observer = r.Bytes();
          int listener = -1;
          int32_t filter_err = r.done() && !profile.empty()
                                   ? InstallSelfFilters(profile, observer, &listener)
                                   : EINVAL;
          for (int i = 0; i < nfds; ++i) ::close(fds[i]);
          Writer w;
          w.I32(filter_err);
          err = SendMessage(kControlFd, MessageType::kFilteredSelf, w.data(), &listener,
                            listener >= 0 ? 1 : 0);
          // The host holds the listener now (or is gone): no process here may keep it.
          if (listener >= 0) ::close(listener);
          if (err != 0) return 0;
          break;
        }
        case MessageType::kSignal: {
          Reader r(payload);
          pid_t pid = r.I32();
          int sig = r.I32();
          if (r.done() && children.count(pid)) ::kill(-pid, sig);
          break;
        }
        default:
          for (int i = 0; i < nfds; ++i) ::close(fds[i]);
          break;
      }
    }
  }
}

}  // namespace
}  // namespace airlock::init

int main() {
  // Not dumpable: sandboxed processes (same uid) cannot read our memory, fds or environ.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  struct stat st;
  if (::fstat(airlock::init::kControlFd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    std::fprintf(stderr,
                 "airlock-init: fd %d is not the control socket; this program is started "
                 "by airlock\n",
                 airlock::init::kControlFd);
    return 2;
  }
  return airlock::init::Serve();
}
