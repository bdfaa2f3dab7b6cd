// airlock-probe: tries one attack from inside a sandbox and prints what happened, as
// "<attack>: <result>", where result is "ok" (the operation succeeded) or the errno name.
// Static, so that it runs in any sandbox root. Used by the escape tests.
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/vm_sockets.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <string>

namespace {

const char* Name(int err) {
  switch (err) {
    case 0: return "ok";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case EROFS: return "EROFS";
    case ENOSYS: return "ENOSYS";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case EINVAL: return "EINVAL";
    case ENXIO: return "ENXIO";
    case EBADF: return "EBADF";
    case ENOSPC: return "ENOSPC";
    case EIO: return "EIO";
    case ENOTTY: return "ENOTTY";
    case ESRCH: return "ESRCH";
    case EAGAIN: return "EAGAIN";
    case ENETUNREACH: return "ENETUNREACH";
    case ECONNREFUSED: return "ECONNREFUSED";
    default: {
      static char buf[32];
      snprintf(buf, sizeof(buf), "errno%d", err);
      return buf;
    }
  }
}

int Result(long rc) { return rc < 0 ? errno : 0; }

int OpenRead(const char* path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return errno;
  char c;
  int err = read(fd, &c, 1) < 0 ? errno : 0;
  close(fd);
  return err;
}

int CreateFile(const char* path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return errno;
  int err = write(fd, "x", 1) < 0 ? errno : 0;
  close(fd);
  return err;
}

int Tiocsti(unsigned long request) {
  // Our own pty: the filter must refuse the request before the terminal sees it.
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0) return errno;
  grantpt(master);
  unlockpt(master);
  int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  if (slave < 0) return errno;
  struct termios buf = {};  // large enough for TCGETS; TIOCSTI reads its first byte
  int err = Result(syscall(SYS_ioctl, slave, request, &buf));
  close(slave);
  close(master);
  return err;
}

int PtraceSibling() {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  int err = Result(ptrace(PTRACE_ATTACH, child, nullptr, nullptr));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return err;
}

int OpenFds() {
  // The number of the first open descriptor above stderr, or "ok" if there is none below 1024.
  for (int fd = 3; fd < 1024; ++fd) {
    if (fcntl(fd, F_GETFD) >= 0) {
      printf("open fd %d\n", fd);
      return EBADF;
    }
  }
  return 0;
}

int ConnectTcp(const char* ip, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return errno;
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &a.sin_addr);
  int err = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 ? 0 : errno;
  close(fd);
  return err;
}

int SendUdp(const char* ip, int port) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return errno;
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &a.sin_addr);
  int err = sendto(fd, "x", 1, 0, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 1 ? 0 : errno;
  close(fd);
  return err;
}

int ConnectAbstract(const char* name) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return errno;
  struct sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  size_t n = strlen(name);
  memcpy(a.sun_path + 1, name, n);
  int err = connect(fd, reinterpret_cast<sockaddr*>(&a),
                    static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n)) == 0 ? 0 : errno;
  close(fd);
  return err;
}

int Caps() {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == nullptr) return errno;
  char line[256];
  int nonzero = 0;
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "Cap", 3) == 0) {
      fputs(line, stdout);
      const char* v = strchr(line, ':');
      if (v && strtoull(v + 1, nullptr, 16) != 0) nonzero = 1;
    }
  }
  fclose(f);
  return nonzero ? EPERM : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: airlock-probe ATTACK [ARG]\n");
    return 2;
  }
  std::string a = argv[1];
  const char* arg = argc > 2 ? argv[2] : "";
  int err = -1;
  if (a == "read") err = OpenRead(arg);
  else if (a == "write") err = CreateFile(arg);
  else if (a == "unshare-user") err = Result(unshare(CLONE_NEWUSER));
  else if (a == "unshare-mount") err = Result(unshare(CLONE_NEWNS));
  else if (a == "clone-newuser") err = Result(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
  else if (a == "clone3") err = Result(syscall(SYS_clone3, nullptr, 0));
  else if (a == "mount") err = Result(mount("tmpfs", "/sandbox/tmp", "tmpfs", 0, nullptr));
  else if (a == "chroot") err = Result(chroot("/sandbox/tmp"));
  else if (a == "setns") err = Result(setns(open("/proc/self/ns/net", O_RDONLY), 0));
  else if (a == "ptrace") err = PtraceSibling();
  else if (a == "keyctl") err = Result(syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "x"));
  else if (a == "add_key") err = Result(syscall(SYS_add_key, "user", "k", "v", 1, KEY_SPEC_SESSION_KEYRING));
  else if (a == "bpf") {
    union bpf_attr attr;
    memset(&attr, 0, sizeof(attr));
    err = Result(syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof(attr)));
  } else if (a == "io_uring_setup") {
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    err = Result(syscall(SYS_io_uring_setup, 8, &p));
  } else if (a == "perf_event_open") {
    struct perf_event_attr pe;
    memset(&pe, 0, sizeof(pe));
    pe.size = sizeof(pe);
    pe.type = PERF_TYPE_SOFTWARE;
    pe.config = PERF_COUNT_SW_CPU_CLOCK;
    err = Result(syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0));
  } else if (a == "userfaultfd") err = Result(syscall(SYS_userfaultfd, 0));
  else if (a == "socket-vsock") err = Result(socket(AF_VSOCK, SOCK_STREAM, 0));
  else if (a == "socket-packet") err = Result(socket(AF_PACKET, SOCK_RAW, 0));
  else if (a == "socket-netlink-audit") err = Result(socket(AF_NETLINK, SOCK_RAW, 9));
  else if (a == "socket-netlink-route") err = Result(socket(AF_NETLINK, SOCK_RAW, 0));
  else if (a == "socket-inet") err = Result(socket(AF_INET, SOCK_STREAM, 0));
  else if (a == "tiocsti") err = Tiocsti(TIOCSTI);
  else if (a == "tiocsti-high-bits") err = Tiocsti(0x100000000UL | TIOCSTI);
  else if (a == "tioclinux") err = Tiocsti(TIOCLINUX);
  else if (a == "tcgets") err = Tiocsti(TCGETS);
  else if (a == "personality") err = Result(syscall(SYS_personality, 0x0040000 /*ADDR_NO_RANDOMIZE*/));
  else if (a == "seccomp-listener") {
    err = Result(syscall(SYS_seccomp, 1 /*SET_MODE_FILTER*/, 1u << 3 /*NEW_LISTENER*/, nullptr));
  } else if (a == "open_by_handle_at") err = Result(syscall(SYS_open_by_handle_at, AT_FDCWD, nullptr, 0));
  else if (a == "int80") {
    // getpid through the 32-bit entry point: a foreign-architecture call, killed by the filter.
    long rc;
    asm volatile("int $0x80" : "=a"(rc) : "a"(20) : "memory");
    err = rc < 0 ? static_cast<int>(-rc) : 0;
  } else if (a == "x32") err = Result(syscall(0x40000000 | SYS_getpid));
  else if (a == "fds") err = OpenFds();
  else if (a == "connect-tcp") err = ConnectTcp(arg, argc > 3 ? atoi(argv[3]) : 80);
  else if (a == "udp-send") err = SendUdp(arg, argc > 3 ? atoi(argv[3]) : 53);
  else if (a == "raw-socket") err = Result(socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
  else if (a == "ping-socket") err = Result(socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP));
  else if (a == "abstract-connect") err = ConnectAbstract(arg);
  else if (a == "caps") err = Caps();
  else if (a == "setuid-root") err = Result(setuid(0));
  else if (a == "uid-map-write") err = CreateFile("/proc/self/uid_map");
  else {
    fprintf(stderr, "airlock-probe: unknown attack %s\n", a.c_str());
    return 2;
  }
  printf("%s: %s\n", a.c_str(), Name(err));
  return 0;
}
