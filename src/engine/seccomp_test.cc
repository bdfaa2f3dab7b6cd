// The default filter (the one compiled at build time, which sandboxes use), applied to a forked
// child outside any sandbox: each test states a system call and what the filter must answer.
#include "engine/internal/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "gtest/gtest.h"

namespace airlock::engine::internal {
namespace {

struct Outcome {
  bool killed = false;
  int signal = 0;
  int err = 0;  // errno of the call, 0 if it succeeded
};

// Runs `call` under the filter in a child; the call returns -1 with errno on failure.
Outcome UnderFilter(const std::function<long()>& call, const std::string& filter) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    struct sock_fprog prog = {static_cast<unsigned short>(filter.size() / sizeof(sock_filter)),
                              reinterpret_cast<sock_filter*>(const_cast<char*>(filter.data()))};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) _exit(255);
    errno = 0;
    long rc = call();
    _exit(rc < 0 ? (errno & 0x7f) : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Outcome o;
  if (WIFSIGNALED(status)) {
    o.killed = true;
    o.signal = WTERMSIG(status);
  } else {
    o.err = WEXITSTATUS(status);
  }
  return o;
}

Outcome UnderFilter(const std::function<long()>& call) {
  static const std::string filter(DefaultSeccompFilter());
  return UnderFilter(call, filter);
}

int Errno(const std::function<long()>& call) {
  Outcome o = UnderFilter(call);
  EXPECT_FALSE(o.killed) << "killed by signal " << o.signal;
  return o.err;
}

TEST(SeccompTest, FilterIsBuilt) {
  auto f = BuildSeccompFilter();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size() % sizeof(sock_filter), 0u);
  EXPECT_GT(f->size() / sizeof(sock_filter), 100u);
}

TEST(SeccompTest, BuildTimeFilterIsTheProfileCompiledNow) {
  auto f = BuildSeccompFilter();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(DefaultSeccompFilter(), *f);
}

TEST(SeccompTest, OrdinaryCallsPass) {
  EXPECT_EQ(Errno([] { return syscall(SYS_getppid); }), 0);
  EXPECT_EQ(Errno([] {
              struct stat st;
              return syscall(SYS_fstat, 0, &st);
            }),
            0);
  EXPECT_EQ(Errno([] { return syscall(SYS_openat, AT_FDCWD, "/nonexistent-airlock", O_RDONLY); }),
            ENOENT);
  EXPECT_EQ(Errno([] { return syscall(SYS_ptrace, 0 /*PTRACE_TRACEME*/, 0, 0, 0); }), EPERM);
  EXPECT_EQ(Errno([] { return syscall(SYS_io_uring_setup, 1, nullptr); }), ENOSYS);
}

TEST(SeccompTest, TreatmentsAndWidening) {
  using supervisor::ProfileTreatment;
  EXPECT_EQ(TreatmentOf("read"), ProfileTreatment::kAllowed);
  EXPECT_EQ(TreatmentOf("ioctl"), ProfileTreatment::kFiltered);
  EXPECT_EQ(TreatmentOf("ptrace"), ProfileTreatment::kAlwaysDenied);
  EXPECT_EQ(TreatmentOf("clone3"), ProfileTreatment::kAlwaysDenied);
  EXPECT_EQ(TreatmentOf("process_mrelease"), ProfileTreatment::kNotAllowed);
  // Outside the profile, a call is killed; widened for a policy, it reaches the kernel.
  auto mrelease = [] { return syscall(SYS_process_mrelease, -1, 0); };
  Outcome killed = UnderFilter(mrelease);
  EXPECT_TRUE(killed.killed);
  EXPECT_EQ(killed.signal, SIGSYS);
  auto widened = BuildSeccompFilter({"process_mrelease"});
  ASSERT_TRUE(widened.ok()) << widened.status();
  Outcome ran = UnderFilter(mrelease, *widened);
  EXPECT_FALSE(ran.killed);
  EXPECT_EQ(ran.err, EBADF);
  // Only calls outside the profile can be widened; never a denied or argument-filtered one.
  EXPECT_FALSE(BuildSeccompFilter({"ptrace"}).ok());
  EXPECT_FALSE(BuildSeccompFilter({"personality"}).ok());
}

TEST(SeccompTest, OrdinaryIoctlsPassAndTerminalInjectionIsRefused) {
  // On /dev/null every tty ioctl that passes the filter fails with ENOTTY in the kernel.
  EXPECT_EQ(Errno([] { return syscall(SYS_ioctl, 0, TCGETS, nullptr); }), ENOTTY);
  EXPECT_EQ(Errno([] { return syscall(SYS_ioctl, 0, 0x80045430UL /*TIOCGPTN*/, nullptr); }),
            ENOTTY);
  EXPECT_EQ(Errno([] { return syscall(SYS_ioctl, 0, TIOCSTI, nullptr); }), EPERM);
  EXPECT_EQ(Errno([] { return syscall(SYS_ioctl, 0, TIOCLINUX, nullptr); }), EPERM);
  EXPECT_EQ(Errno([] { return syscall(SYS_ioctl, 0, (1UL << 32) | TIOCSTI, nullptr); }), EPERM);
  EXPECT_EQ(Errno([] { return syscall(SYS_ioctl, 0, (0xffffUL << 48) | TIOCLINUX, nullptr); }),
            EPERM);
  // Neighbours of the denied values differ in one bit each and must pass.
  for (unsigned long near : {0x5410UL, 0x5413UL, 0x5416UL, 0x541aUL, 0x541eUL, 0x5414UL}) {
    EXPECT_EQ(Errno([near] { return syscall(SYS_ioctl, 0, near, nullptr); }), ENOTTY) << near;
  }
}

TEST(SeccompTest, NamespaceFlagsAreRefused) {
  EXPECT_EQ(Errno([] { return syscall(SYS_unshare, CLONE_NEWUSER); }), EPERM);
  EXPECT_EQ(Errno([] { return syscall(SYS_unshare, CLONE_NEWNET); }), EPERM);
  EXPECT_EQ(Errno([] { return syscall(SYS_clone3, nullptr, 0); }), ENOSYS);
  EXPECT_EQ(Errno([] { return syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0); }), EPERM);
}

TEST(SeccompTest, SocketFamilies) {
  EXPECT_EQ(Errno([] { return socket(AF_UNIX, SOCK_STREAM, 0); }), 0);
  EXPECT_EQ(Errno([] { return socket(AF_INET6, SOCK_DGRAM, 0); }), 0);
  EXPECT_EQ(Errno([] { return socket(AF_PACKET, SOCK_RAW, 0); }), EAFNOSUPPORT);
  EXPECT_EQ(Errno([] { return socket(40 /*AF_VSOCK*/, SOCK_STREAM, 0); }), EAFNOSUPPORT);
  EXPECT_EQ(Errno([] { return socket(AF_NETLINK, SOCK_RAW, 9); }), EPERM);
  Outcome weird = UnderFilter([] { return syscall(SYS_socket, 99, SOCK_STREAM, 0); });
  EXPECT_TRUE(weird.killed);
}

TEST(SeccompTest, UnknownAndForeignCallsAreKilled) {
  Outcome o = UnderFilter([] { return syscall(0x40000000 | SYS_getpid); });  // x32
  EXPECT_TRUE(o.killed);
  EXPECT_EQ(o.signal, SIGSYS);
  o = UnderFilter([] { return syscall(SYS_personality, 0x0040000); });
  EXPECT_TRUE(o.killed);
  EXPECT_EQ(Errno([] { return syscall(SYS_personality, 0xffffffffUL); }), 0);
}

}  // namespace
}  // namespace airlock::engine::internal
