// airlock-probe: tries one attack from inside a sandbox and prints what happened, as
// "<attack>: <result>", where result is "ok" (the operation succeeded) or the errno name.
// Static, so that it runs in any sandbox root. Used by the escape tests.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace {

const char* Name(int err) {
  switch (err) {
    case 0:
      return "ok";
    case EPERM:
      return "EPERM";
    case ENOENT:
      return "ENOENT";
    case EACCES:
      return "EACCES";
    case EROFS:
      return "EROFS";
    case ENOSYS:
      return "ENOSYS";
    case EAFNOSUPPORT:
      return "EAFNOSUPPORT";
    case EINVAL:
      return "EINVAL";
    case ENXIO:
      return "ENXIO";
    case EBADF:
      return "EBADF";
    case ENOSPC:
      return "ENOSPC";
    case EIO:
      return "EIO";
    case ENOTTY:
      return "ENOTTY";
    case ESRCH:
      return "ESRCH";
    case EAGAIN:
      return "EAGAIN";
    case ENETUNREACH:
      return "ENETUNREACH";
    case ECONNREFUSED:
      return "ECONNREFUSED";
    case EEXIST:
      return "EEXIST";
    case EPROTONOSUPPORT:
      return "EPROTONOSUPPORT";
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

int VmWriteSibling() {
  static char target_buf[16] = "untouched";
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  char data[16] = "written";
  struct iovec local = {data, sizeof(data)};
  struct iovec remote = {target_buf, sizeof(target_buf)};
  int err = Result(process_vm_writev(child, &local, 1, &remote, 1, 0));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return err;
}

int CloneUntraced() {
  long pid = syscall(SYS_clone, CLONE_UNTRACED | SIGCHLD, 0, 0, 0, 0);
  if (pid < 0) return errno;
  if (pid == 0) _exit(0);
  waitpid(static_cast<pid_t>(pid), nullptr, 0);
  return 0;
}

// One thread opens a path for writing again and again while another flips the path between an
// allowed and a forbidden one: whatever the supervisor read, the forbidden file must never be
// created. EEXIST if it was; ok if it was not and the allowed one was. The forbidden path is on
// /dev, a tmpfs mounted writable where only Landlock refuses new files (EACCES, not EROFS), so
// the test fails if a supervisor's decision on the path it read could widen Landlock's.
int ToctouOpen() {
  static char path[64] = "/sandbox/tmp/toctou-ok";
  const char* forbidden = "/dev/toctou-evil";
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    while (!stop) {
      strcpy(path, forbidden);
      strcpy(path, "/sandbox/tmp/toctou-ok");
    }
  });
  int opened = 0;
  for (int i = 0; i < 3000; ++i) {
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) {
      ++opened;
      close(fd);
    }
  }
  stop = true;
  flipper.join();
  if (access(forbidden, F_OK) == 0) return EEXIST;
  return opened > 0 ? 0 : ENOENT;
}

// Threads making a call the policy routes, forever.
[[noreturn]] void Flood(int threads) {
  for (int i = 0; i < threads; ++i) {
    std::thread([] {
      for (;;) syscall(SYS_getppid);
    }).detach();
  }
  for (;;) pause();
}

// Processes killed while (or just before) the supervisor handles their routed calls.
int RoutedThenDie(int rounds) {
  for (int i = 0; i < rounds; ++i) {
    pid_t child = fork();
    if (child == 0) {
      for (;;) syscall(SYS_getppid);
    }
    if (child < 0) return errno;
    usleep(static_cast<useconds_t>(i % 7) * 100);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
  return 0;
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
                    static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n)) == 0
                ? 0
                : errno;
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

// Every way to give a file in `dir` a setuid or setgid bit. Prints each call that did not answer
// as expected (EPERM; ENOSYS for openat2, whose mode a filter cannot read) and returns EPERM if
// one did; 0 when all were refused and ordinary creation and chmod still work.
int SetIdFiles(const char* dir) {
  std::string d(dir);
  int bad = 0;
  auto expect = [&](const char* what, long rc, int want) {
    int got = rc < 0 ? errno : 0;
    if (got != want) {
      printf("%s: %s\n", what, Name(got));
      bad = 1;
    }
  };
  expect("creat 04755", creat((d + "/a").c_str(), 04755), EPERM);
  expect("open O_CREAT 02755", syscall(SYS_open, (d + "/b").c_str(), O_CREAT | O_WRONLY, 02755),
         EPERM);
  expect("openat O_CREAT 04755",
         syscall(SYS_openat, AT_FDCWD, (d + "/c").c_str(), O_CREAT | O_WRONLY, 04755), EPERM);
  expect("openat O_TMPFILE 06755", syscall(SYS_openat, AT_FDCWD, dir, O_TMPFILE | O_WRONLY, 06755),
         EPERM);
  expect("mknod S_IFREG|04755", mknod((d + "/e").c_str(), S_IFREG | 04755, 0), EPERM);
  struct {
    uint64_t flags, mode, resolve;
  } how = {O_CREAT | O_WRONLY, 04755, 0};
  expect("openat2", syscall(SYS_openat2, AT_FDCWD, (d + "/f").c_str(), &how, sizeof(how)), ENOSYS);
  std::string plain = d + "/plain";
  int fd = open(plain.c_str(), O_CREAT | O_WRONLY, 0755);
  expect("open O_CREAT 0755", fd, 0);
  expect("chmod 04755", chmod(plain.c_str(), 04755), EPERM);
  expect("fchmod 02755", fchmod(fd, 02755), EPERM);
  expect("fchmodat 06755", syscall(SYS_fchmodat, AT_FDCWD, plain.c_str(), 06755), EPERM);
  expect("chmod 0700", chmod(plain.c_str(), 0700), 0);
  expect("mkdir 0777", mkdir((d + "/g").c_str(), 0777), 0);
  expect("chmod directory 02777", chmod((d + "/g").c_str(), 02777), EPERM);
  close(fd);
  // An open that creates nothing passes whatever mode is in the register.
  long again = syscall(SYS_openat, AT_FDCWD, plain.c_str(), O_RDONLY, 04777);
  expect("openat O_RDONLY with a stray mode", again, 0);
  if (again >= 0) close(static_cast<int>(again));
  return bad ? EPERM : 0;
}

// The always-denied calls no other attack makes, each with arguments that would do nothing harmful
// were it let through. Prints each that did not fail with EPERM or ENOSYS (the profile's
// answers) and returns EPERM if one did; 0 when all were refused.
int DeniedSet() {
  int bad = 0;
  auto expect = [&](const char* what, long rc) {
    int got = rc < 0 ? errno : 0;
    if (got != EPERM && got != ENOSYS) {
      printf("%s: %s\n", what, Name(got));
      bad = 1;
    }
  };
  expect("request_key", syscall(SYS_request_key, "user", "x", nullptr, 0));
  expect("umount2", syscall(SYS_umount2, "/sandbox/tmp", 0));
  expect("pivot_root", syscall(SYS_pivot_root, "/sandbox/tmp", "/sandbox/tmp"));
  expect("kexec_load", syscall(SYS_kexec_load, 0, 0, nullptr, 0));
  expect("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0));
  expect("init_module", syscall(SYS_init_module, nullptr, 0, ""));
  expect("finit_module", syscall(SYS_finit_module, -1, "", 0));
  expect("delete_module", syscall(SYS_delete_module, "airlock-none", 0));
  expect("reboot", syscall(SYS_reboot, 0, 0, 0, nullptr));  // wrong magic: EINVAL if let through
  expect("swapon", syscall(SYS_swapon, "/sandbox/tmp/none", 0));
  expect("swapoff", syscall(SYS_swapoff, "/sandbox/tmp/none"));
  expect("acct", syscall(SYS_acct, "/sandbox/tmp/none"));
  expect("quotactl", syscall(SYS_quotactl, 0, "/", 0, nullptr));
  expect("process_vm_readv", syscall(SYS_process_vm_readv, getppid(), nullptr, 0, nullptr, 0, 0));
  expect("io_uring_enter", syscall(SYS_io_uring_enter, -1, 0, 0, 0, nullptr, 0));
  expect("io_uring_register", syscall(SYS_io_uring_register, -1, 0, nullptr, 0));
  return bad ? EPERM : 0;
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
  if (a == "read")
    err = OpenRead(arg);
  else if (a == "write")
    err = CreateFile(arg);
  else if (a == "unshare-user")
    err = Result(unshare(CLONE_NEWUSER));
  else if (a == "unshare-mount")
    err = Result(unshare(CLONE_NEWNS));
  else if (a == "clone-newuser")
    err = Result(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
  else if (a == "clone3")
    err = Result(syscall(SYS_clone3, nullptr, 0));
  else if (a == "mount")
    err = Result(mount("tmpfs", "/sandbox/tmp", "tmpfs", 0, nullptr));
  else if (a == "chroot")
    err = Result(chroot("/sandbox/tmp"));
  else if (a == "setns")
    err = Result(setns(open("/proc/self/ns/net", O_RDONLY), 0));
  else if (a == "ptrace")
    err = PtraceSibling();
  else if (a == "keyctl")
    err = Result(syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "x"));
  else if (a == "add_key")
    err = Result(syscall(SYS_add_key, "user", "k", "v", 1, KEY_SPEC_SESSION_KEYRING));
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
  } else if (a == "userfaultfd")
    err = Result(syscall(SYS_userfaultfd, 0));
  else if (a == "socket-vsock")
    err = Result(socket(AF_VSOCK, SOCK_STREAM, 0));
  else if (a == "socket-packet")
    err = Result(socket(AF_PACKET, SOCK_RAW, 0));
  else if (a == "socket-netlink-audit")
    err = Result(socket(AF_NETLINK, SOCK_RAW, 9));
  else if (a == "socket-netlink-route")
    err = Result(socket(AF_NETLINK, SOCK_RAW, 0));
  else if (a == "socket-inet")
    err = Result(socket(AF_INET, SOCK_STREAM, 0));
  else if (a == "socket-inet6-udp")
    err = Result(socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP));
  else if (a == "socket-inet-packet")  // the kernel makes this a packet socket
    err = Result(socket(AF_INET, SOCK_PACKET, htons(3 /*ETH_P_ALL*/)));
  else if (a == "socket-inet-sctp")
    err = Result(socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP));
  else if (a == "socket-inet6-seqpacket")
    err = Result(socket(AF_INET6, SOCK_SEQPACKET, 0));
  else if (a == "socket-inet-udplite")
    err = Result(socket(AF_INET, SOCK_DGRAM, IPPROTO_UDPLITE));
  else if (a == "socket-inet-proto-high")  // a protocol above every allowed one
    err = Result(socket(AF_INET, SOCK_STREAM, 262 /*IPPROTO_MPTCP*/));
  else if (a == "io_setup") {
    unsigned long ctx = 0;
    err = Result(syscall(SYS_io_setup, 65536, &ctx));
  } else if (a == "ptmx-hoard") {
    int n = 0;
    while (open("/dev/ptmx", O_RDWR | O_NOCTTY) >= 0) ++n;
    err = errno;
    printf("%d terminals\n", n);
  } else if (a == "fill-tmp") {
    // Fills memory without mapping it (a tmpfs file), from a process much smaller than
    // airlock-init: if anything but this process is killed for it, the sandbox goes.
    static char chunk[1 << 16];
    int fd = open("/sandbox/tmp/fill", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    err = fd < 0 ? errno : 0;
    while (err == 0) {
      if (write(fd, chunk, sizeof(chunk)) < 0) err = errno;
    }
  } else if (a == "sched-fifo") {
    struct sched_param p = {1};
    err = Result(sched_setscheduler(0, SCHED_FIFO, &p));
  } else if (a == "socketpair-tipc" || a == "socketpair-vsock" || a == "socketpair-unix") {
    int sv[2];
    int family = a == "socketpair-tipc" ? AF_TIPC : a == "socketpair-vsock" ? AF_VSOCK : AF_UNIX;
    err = Result(socketpair(family, a == "socketpair-unix" ? SOCK_STREAM : SOCK_SEQPACKET, 0, sv));
  } else if (a == "tiocsti")
    err = Tiocsti(TIOCSTI);
  else if (a == "tiocsti-high-bits")
    err = Tiocsti(0x100000000UL | TIOCSTI);
  else if (a == "tioclinux")
    err = Tiocsti(TIOCLINUX);
  else if (a == "tcgets")
    err = Tiocsti(TCGETS);
  else if (a == "personality")
    err = Result(syscall(SYS_personality, 0x0040000 /*ADDR_NO_RANDOMIZE*/));
  else if (a == "seccomp-listener") {
    err = Result(syscall(SYS_seccomp, 1 /*SET_MODE_FILTER*/, 1u << 3 /*NEW_LISTENER*/, nullptr));
  } else if (a == "open_by_handle_at")
    err = Result(syscall(SYS_open_by_handle_at, AT_FDCWD, nullptr, 0));
  else if (a == "int80") {
    // getpid through the 32-bit entry point: a foreign-architecture call, killed by the filter.
    long rc;
    asm volatile("int $0x80" : "=a"(rc) : "a"(20) : "memory");
    err = rc < 0 ? static_cast<int>(-rc) : 0;
  } else if (a == "x32")
    err = Result(syscall(0x40000000 | SYS_getpid));
  else if (a == "fds")
    err = OpenFds();
  else if (a == "process_vm_writev")
    err = VmWriteSibling();
  else if (a == "clone-untraced")
    err = CloneUntraced();
  else if (a == "toctou-open")
    err = ToctouOpen();
  else if (a == "flood")
    Flood(atoi(arg));
  else if (a == "routed-then-die")
    err = RoutedThenDie(atoi(arg));
  else if (a == "connect-tcp")
    err = ConnectTcp(arg, argc > 3 ? atoi(argv[3]) : 80);
  else if (a == "udp-send")
    err = SendUdp(arg, argc > 3 ? atoi(argv[3]) : 53);
  else if (a == "raw-socket")
    err = Result(socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
  else if (a == "ping-socket")
    err = Result(socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP));
  else if (a == "abstract-connect")
    err = ConnectAbstract(arg);
  else if (a == "caps")
    err = Caps();
  else if (a == "setuid-root")
    err = Result(setuid(0));
  else if (a == "setid-files")
    err = SetIdFiles(arg);
  else if (a == "inotify-flood") {
    int n = 0;
    while (syscall(SYS_inotify_init1, 0) >= 0) ++n;
    err = errno;
    printf("%d instances\n", n);
  } else if (a == "prlimit-init") {
    struct rlimit none = {0, 0};
    err = Result(prlimit(1, RLIMIT_NOFILE, &none, nullptr));
  } else if (a == "setrlimit-self") {
    struct rlimit l;
    err = Result(getrlimit(RLIMIT_NOFILE, &l));
    if (err == 0) err = Result(setrlimit(RLIMIT_NOFILE, &l));
  } else if (a == "uid-map-write")
    err = CreateFile("/proc/self/uid_map");
  else if (a == "denied-set")
    err = DeniedSet();
  else {
    fprintf(stderr, "airlock-probe: unknown attack %s\n", a.c_str());
    return 2;
  }
  printf("%s: %s\n", a.c_str(), Name(err));
  return 0;
}
