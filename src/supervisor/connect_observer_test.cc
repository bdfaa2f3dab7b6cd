// The connect observer on a real process outside any sandbox: a forked child in a network
// namespace of its own (loopback only, as in a sandbox) installs the observer's filter, hands its
// listener over, and makes the calls a tool that ignores the proxy would make.
#include "supervisor/connect_observer.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "gtest/gtest.h"
#include "init/protocol.h"
#include "supervisor/internal/bpf.h"

namespace airlock::supervisor {
namespace {

using init::MessageType;

// The calls the child makes, in order, and what each returned (0 or an errno value).
enum Call {
  kTcpToDocumentationRange,  // connect 192.0.2.1:80
  kUdpToIpv6,                // sendto [2001:db8::1]:53
  kTcpToLoopback,            // connect 127.0.0.1:9 (nothing listens)
  kTcpToMappedLoopback,      // connect [::ffff:127.0.0.1]:9
  kUnixAbstract,             // connect to an abstract unix socket nobody bound
  kUdpWithoutAddress,        // sendto with no address on an unconnected socket
  kTcpToUnspecified,         // connect 0.0.0.0:9 (Linux connects it over loopback)
  kUnixShortName,            // connect to "nosock" in the working directory (3 + 6 bytes)
  kInetTooShort,             // connect 192.0.2.1:80 with a 15-byte address
  kCallCount,
};

int Errno(int rc) { return rc == 0 || rc > 0 ? 0 : errno; }

int ConnectV4(const char* ip, int port, int type) {
  int fd = ::socket(AF_INET, type, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  int err = Errno(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)));
  ::close(fd);
  return err;
}

int ConnectV6(const char* ip, int port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a = {};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET6, ip, &a.sin6_addr);
  int err = Errno(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)));
  ::close(fd);
  return err;
}

void MakeCalls(int* results) {
  results[kTcpToDocumentationRange] = ConnectV4("192.0.2.1", 80, SOCK_STREAM);
  int udp = ::socket(AF_INET6, SOCK_DGRAM, 0);
  sockaddr_in6 dst = {};
  dst.sin6_family = AF_INET6;
  dst.sin6_port = htons(53);
  ::inet_pton(AF_INET6, "2001:db8::1", &dst.sin6_addr);
  // Without its scope id (24 bytes), which the kernel accepts.
  // Without its scope id (24 bytes), which the kernel accepts.
  results[kUdpToIpv6] =
      Errno(static_cast<int>(::sendto(udp, "x", 1, 0, reinterpret_cast<sockaddr*>(&dst), 24)));
  results[kTcpToLoopback] = ConnectV4("127.0.0.1", 9, SOCK_STREAM);
  results[kTcpToMappedLoopback] = ConnectV6("::ffff:127.0.0.1", 9);
  int un = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un ua = {};
  ua.sun_family = AF_UNIX;
  std::memcpy(ua.sun_path + 1, "airlock-observer-test", 21);
  results[kUnixAbstract] =
      Errno(::connect(un, reinterpret_cast<sockaddr*>(&ua), offsetof(sockaddr_un, sun_path) + 22));
  int udp4 = ::socket(AF_INET, SOCK_DGRAM, 0);
  results[kUdpWithoutAddress] = Errno(static_cast<int>(::sendto(udp4, "x", 1, 0, nullptr, 0)));
  results[kTcpToUnspecified] = ConnectV4("0.0.0.0", 9, SOCK_STREAM);
  sockaddr_un short_name = {};
  short_name.sun_family = AF_UNIX;
  std::memcpy(short_name.sun_path, "nosock", 7);
  results[kUnixShortName] =
      Errno(::connect(::socket(AF_UNIX, SOCK_STREAM, 0), reinterpret_cast<sockaddr*>(&short_name),
                      offsetof(sockaddr_un, sun_path) + 7));
  int tcp = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in outside = {};
  outside.sin_family = AF_INET;
  outside.sin_port = htons(80);
  ::inet_pton(AF_INET, "192.0.2.1", &outside.sin_addr);
  results[kInetTooShort] = Errno(::connect(tcp, reinterpret_cast<sockaddr*>(&outside), 15));
}

// The child: its own network namespace with loopback up, the observer's filter with a listener
// sent to the parent, then one round of calls per byte the parent sends (results written back).
[[noreturn]] void Child(int sock) {
  if (::unshare(CLONE_NEWNET) != 0) {
    init::SendMessage(sock, MessageType::kReady, "no network namespace");
    _exit(0);
  }
  if (::chdir("/") != 0) _exit(10);  // where "nosock" is not
  int s = ::socket(AF_INET, SOCK_DGRAM, 0);
  ifreq ifr = {};
  std::strcpy(ifr.ifr_name, "lo");
  ifr.ifr_flags = IFF_UP;
  if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) _exit(11);
  ::close(s);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(12);
  // As airlock-init does, under a profile that allows everything.
  internal::BpfProgram allow_all;
  allow_all.Return(SECCOMP_RET_ALLOW);
  int listener = -1;
  if (init::InstallSelfFilters(*allow_all.Finish(), ConnectObserverFilter(), &listener) != 0) {
    _exit(13);
  }
  if (init::SendMessage(sock, MessageType::kReady, "", &listener, 1) != 0) _exit(14);
  ::close(listener);
  char go;
  while (::read(sock, &go, 1) == 1) {
    int results[kCallCount];
    MakeCalls(results);
    if (::write(sock, results, sizeof(results)) != sizeof(results)) _exit(15);
  }
  _exit(0);
}

class ConnectObserverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (a network namespace of its own)";
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    child_ = ::fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      ::close(sv[0]);
      Child(sv[1]);
    }
    ::close(sv[1]);
    sock_.Reset(sv[0]);
    MessageType type;
    std::string payload;
    int fds[init::kMaxFds];
    int nfds = 0;
    ASSERT_EQ(init::ReceiveMessage(sock_.get(), &type, &payload, fds, &nfds), 0)
        << "the child failed to set up";
    if (nfds == 0) GTEST_SKIP() << payload;
    ASSERT_EQ(nfds, 1);
    listener_.Reset(fds[0]);
  }
  void TearDown() override {
    sock_.Reset();
    if (child_ > 0) {
      int status = 0;
      ::waitpid(child_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
  }

  std::vector<int> Round() {
    std::vector<int> results(kCallCount, -1);
    char go = 1;
    EXPECT_EQ(::write(sock_.get(), &go, 1), 1);
    EXPECT_EQ(::read(sock_.get(), results.data(), kCallCount * sizeof(int)),
              static_cast<ssize_t>(kCallCount * sizeof(int)));
    return results;
  }

  pid_t child_ = -1;
  UniqueFd sock_;
  UniqueFd listener_;
};

// Attack: a tool ignores the proxy and connects (TCP) or sends (UDP) to outside addresses.
// Expected: the kernel refuses both as before (ENETUNREACH: no route), and each is reported once
// with its address, port and call; loopback, unix sockets and sends without an address are not
// reported, and behave as they would unobserved.
TEST_F(ConnectObserverTest, ReportsTheRefusedAttemptsAndChangesNoOutcome) {
  std::mutex mu;
  std::vector<DirectAttempt> seen;
  auto observer = ConnectObserver::Start(std::move(listener_), [&](const DirectAttempt& a) {
    std::lock_guard lock(mu);
    seen.push_back(a);
  });
  ASSERT_TRUE(observer.ok()) << observer.status();
  std::vector<int> results = Round();
  EXPECT_EQ(results[kTcpToDocumentationRange], ENETUNREACH);
  EXPECT_EQ(results[kUdpToIpv6], ENETUNREACH);
  EXPECT_EQ(results[kTcpToLoopback], ECONNREFUSED);
  EXPECT_EQ(results[kTcpToMappedLoopback], ECONNREFUSED);
  EXPECT_EQ(results[kUnixAbstract], ECONNREFUSED);
  EXPECT_EQ(results[kUdpWithoutAddress], EDESTADDRREQ);
  EXPECT_EQ(results[kTcpToUnspecified], ECONNREFUSED);
  EXPECT_EQ(results[kUnixShortName], ENOENT);
  EXPECT_EQ(results[kInetTooShort], EINVAL);
  {
    // Reported before each call returned: nothing is still on its way.
    std::lock_guard lock(mu);
    EXPECT_EQ(seen.size(), 2u);
  }
  observer->reset();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].syscall, "connect");
  EXPECT_EQ(seen[0].address, "192.0.2.1");
  EXPECT_EQ(seen[0].port, 80);
  EXPECT_EQ(seen[1].syscall, "sendto");
  EXPECT_EQ(seen[1].address, "2001:db8::1");
  EXPECT_EQ(seen[1].port, 53);
  // The caller's cgroup file, read while it waited in the call (cgroup v1 or v2 lines).
  EXPECT_NE(seen[0].cgroups.find(":/"), std::string::npos) << seen[0].cgroups;
}

// Attack: the observer is gone (its process died) while the sandbox lives on. Expected: routed
// calls fail (ENOSYS) instead of running unobserved; the rest is untouched.
TEST_F(ConnectObserverTest, WithoutItsObserverTheRoutedCallsFail) {
  listener_.Reset();
  std::vector<int> results = Round();
  EXPECT_EQ(results[kTcpToDocumentationRange], ENOSYS);
  EXPECT_EQ(results[kUdpToIpv6], ENOSYS);
  EXPECT_EQ(results[kTcpToLoopback], ENOSYS);
  // Calls the filter does not route are untouched: no address, or one too short for inet.
  EXPECT_EQ(results[kUdpWithoutAddress], EDESTADDRREQ);
  EXPECT_EQ(results[kUnixShortName], ENOENT);
  EXPECT_EQ(results[kInetTooShort], EINVAL);
}

TEST(IsLocalAddress, OnlyWhatStaysInTheSandbox) {
  EXPECT_TRUE(IsLocalAddress("127.0.0.1"));
  EXPECT_TRUE(IsLocalAddress("127.255.0.9"));
  EXPECT_TRUE(IsLocalAddress("::1"));
  EXPECT_TRUE(IsLocalAddress("::ffff:127.0.0.1"));
  EXPECT_TRUE(IsLocalAddress("0.0.0.0"));
  EXPECT_TRUE(IsLocalAddress("::"));
  EXPECT_TRUE(IsLocalAddress("::ffff:0.0.0.0"));
  EXPECT_FALSE(IsLocalAddress("0.0.0.1"));
  EXPECT_FALSE(IsLocalAddress("128.0.0.1"));
  EXPECT_FALSE(IsLocalAddress("::ffff:10.0.0.1"));
  EXPECT_FALSE(IsLocalAddress("169.254.169.254"));
  EXPECT_FALSE(IsLocalAddress("not an address"));
}

}  // namespace
}  // namespace airlock::supervisor
