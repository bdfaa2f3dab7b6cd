#include "supervisor/internal/decode.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "supervisor/policy.h"

namespace airlock::supervisor::internal {
namespace {

TEST(DecodeTest, OpenModes) {
  EXPECT_EQ(OpenMode(O_RDONLY), "r");
  EXPECT_EQ(OpenMode(O_WRONLY | O_CREAT | O_TRUNC), "w+create+trunc");
  EXPECT_EQ(OpenMode(O_RDWR | O_APPEND | O_CLOEXEC), "rw+append");
}

TEST(DecodeTest, SocketAddresses) {
  sockaddr_in in = {};
  in.sin_family = AF_INET;
  in.sin_port = htons(443);
  inet_pton(AF_INET, "10.1.2.3", &in.sin_addr);
  EXPECT_EQ(FormatSockaddr(&in, sizeof(in)), "10.1.2.3:443");
  EXPECT_EQ(FormatSockaddr(&in, 4), "family 2") << "too short for its family";
  sockaddr_in6 in6 = {};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(80);
  inet_pton(AF_INET6, "::1", &in6.sin6_addr);
  EXPECT_EQ(FormatSockaddr(&in6, sizeof(in6)), "[::1]:80");
  // Without its scope id, as the kernel accepts it, from a buffer of exactly that size (nothing
  // beyond it is read: the sanitizer build would say so).
  char no_scope[24];
  std::memcpy(no_scope, &in6, sizeof(no_scope));
  EXPECT_EQ(FormatSockaddr(no_scope, sizeof(no_scope)), "[::1]:80");
  EXPECT_EQ(FormatSockaddr(&in6, 23), "family 10") << "too short for its family";
  sockaddr_un un = {};
  un.sun_family = AF_UNIX;
  std::strcpy(un.sun_path, "/run/x.sock");
  EXPECT_EQ(FormatSockaddr(&un, sizeof(un)), "unix:/run/x.sock");
  std::memcpy(un.sun_path, "\0abs", 4);
  EXPECT_EQ(FormatSockaddr(&un, offsetof(sockaddr_un, sun_path) + 4), "unix:@abs");
}

TEST(DecodeTest, CloneFlags) {
  EXPECT_EQ(CloneFlags(CLONE_VM | CLONE_VFORK | SIGCHLD), "CLONE_VM|CLONE_VFORK|SIGCHLD");
  EXPECT_EQ(CloneFlags(CLONE_NEWUSER | CLONE_UNTRACED), "CLONE_UNTRACED|CLONE_NEWUSER");
  EXPECT_EQ(CloneFlags(0), "0");
}

// Reads this process's own memory through /proc/self/mem, as the supervisor reads a traced
// process's: the decoder reads strings in chunks up to a page end, past the end of the object,
// which a memcpy here would turn into a heap overflow of the test itself (ASan).
class SelfReader : public MemoryReader {
 public:
  ssize_t Read(uint64_t address, void* buf, size_t n) override {
    return ::pread(mem_.get(), buf, n, static_cast<off_t>(address));
  }

 private:
  UniqueFd mem_{::open("/proc/self/mem", O_RDONLY | O_CLOEXEC)};
};

TEST(DecodeTest, ExecArgumentsAreBounded) {
  std::string path = "/usr/bin/python3";
  std::vector<std::string> args(20, "arg");
  args[1] = std::string(1000, 'x');
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  SelfReader mem;
  uint64_t regs[6] = {reinterpret_cast<uint64_t>(path.c_str()),
                      reinterpret_cast<uint64_t>(argv.data()),
                      0,
                      0,
                      0,
                      0};
  DecodedCall d = Decode(SyscallNumber("execve"), regs, &mem);
  ASSERT_TRUE(d.kind.has_value());
  EXPECT_EQ(*d.kind, SyscallEventKind::kExec);
  EXPECT_EQ(d.event.path, path);
  ASSERT_EQ(d.event.argv.size(), 8u);
  EXPECT_EQ(d.event.argv[1], std::string(256, 'x') + "...");
  // Without memory, pointers stay undecoded.
  EXPECT_EQ(Decode(SyscallNumber("execve"), regs, nullptr).event.path, "");
}

}  // namespace
}  // namespace airlock::supervisor::internal
