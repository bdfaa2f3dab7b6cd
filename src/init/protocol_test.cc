#include "init/protocol.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace airlock::init {
namespace {

SpawnRequest Sample() {
  SpawnRequest req;
  req.id = 42;
  req.argv = {"/bin/echo", "hello world", ""};
  req.env = {"PATH=/usr/bin", "HOME=/sandbox/home"};
  req.cwd = "/sandbox/workspace";
  req.rlimits = {{7, 1024, 2048}};
  req.seccomp_filter = std::string("\x01\x02\x00\x03\x04\x05\x06\x07", 8);
  return req;
}

TEST(ProtocolTest, SpawnRoundTrip) {
  SpawnRequest in = Sample();
  SpawnRequest out;
  ASSERT_TRUE(DecodeSpawn(EncodeSpawn(in), &out));
  EXPECT_EQ(out.id, 42u);
  EXPECT_EQ(out.argv, in.argv);
  EXPECT_EQ(out.env, in.env);
  EXPECT_EQ(out.cwd, in.cwd);
  ASSERT_EQ(out.rlimits.size(), 1u);
  EXPECT_EQ(out.rlimits[0].soft, 1024u);
  EXPECT_EQ(out.seccomp_filter, in.seccomp_filter);
  EXPECT_TRUE(out.policy_filter.empty());
  EXPECT_EQ(out.policy_listener, PolicyListener::kNone);
}

TEST(ProtocolTest, PolicyFilterRoundTripAndNeedsAFilterForAListener) {
  SpawnRequest in = Sample();
  in.policy_filter = std::string("\x06\x00\x00\x00\x00\x00\xff\x7f", 8);
  in.policy_listener = PolicyListener::kNotify;
  SpawnRequest out;
  ASSERT_TRUE(DecodeSpawn(EncodeSpawn(in), &out));
  EXPECT_EQ(out.policy_filter, in.policy_filter);
  EXPECT_EQ(out.policy_listener, PolicyListener::kNotify);
  in.policy_filter.clear();
  EXPECT_FALSE(DecodeSpawn(EncodeSpawn(in), &out)) << "a listener without a filter to carry it";
}

TEST(ProtocolTest, SpawnStartRoundTripAndHostPlacementWaitsForStart) {
  SpawnRequest in = Sample();
  in.cgroup_join = CgroupJoin::kWriteSelf;
  in.start = SpawnStart::kAtOnce;
  SpawnRequest out;
  ASSERT_TRUE(DecodeSpawn(EncodeSpawn(in), &out));
  EXPECT_EQ(out.start, SpawnStart::kAtOnce);
  in.cgroup_join = CgroupJoin::kNone;
  EXPECT_FALSE(DecodeSpawn(EncodeSpawn(in), &out))
      << "a process the host places in its cgroup would run before it is placed";
  in.start = SpawnStart::kOnStart;
  ASSERT_TRUE(DecodeSpawn(EncodeSpawn(in), &out));
  EXPECT_EQ(out.start, SpawnStart::kOnStart);
}

TEST(ProtocolTest, EveryTruncationIsRejected) {
  std::string payload = EncodeSpawn(Sample());
  SpawnRequest out;
  for (size_t n = 0; n < payload.size(); ++n) {
    EXPECT_FALSE(DecodeSpawn(std::string_view(payload).substr(0, n), &out)) << n;
  }
  EXPECT_FALSE(DecodeSpawn(payload + "x", &out)) << "trailing bytes accepted";
}

TEST(ProtocolTest, HugeCountsDoNotAllocate) {
  Writer w;
  w.U64(1);
  w.U32(0xffffffff);  // claims four billion argv strings
  SpawnRequest out;
  EXPECT_FALSE(DecodeSpawn(w.data(), &out));
}

TEST(ProtocolTest, MessagesCarryDescriptors) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  std::string big(1 << 20, 'z');  // larger than the socket buffer: exercises partial writes
  pid_t writer = fork();
  if (writer == 0) {
    int fds[2] = {pipefd[0], pipefd[1]};
    _exit(SendMessage(sv[0], MessageType::kSpawn, big, fds, 2));
  }
  MessageType type;
  std::string payload;
  int fds[kMaxFds];
  int nfds = 0;
  ASSERT_EQ(ReceiveMessage(sv[1], &type, &payload, fds, &nfds), 0);
  EXPECT_EQ(type, MessageType::kSpawn);
  EXPECT_EQ(payload, big);
  ASSERT_EQ(nfds, 2);
  // The received write end reaches the original read end.
  ASSERT_EQ(write(fds[1], "k", 1), 1);
  char c = 0;
  ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  EXPECT_EQ(c, 'k');
  EXPECT_EQ(fcntl(fds[0], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  for (int i = 0; i < nfds; ++i) close(fds[i]);
  close(sv[0]);
  EXPECT_EQ(ReceiveMessage(sv[1], &type, &payload, fds, &nfds), -1);  // end of stream
  close(sv[1]);
}

TEST(ProtocolTest, OversizedHeaderIsRejected) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const char header[8] = {2, 0, 0, 0, 0, 0, 0, 0x7f};  // length 2 GiB
  ASSERT_EQ(write(sv[0], header, 8), 8);
  MessageType type;
  std::string payload;
  int fds[kMaxFds];
  int nfds = 0;
  EXPECT_EQ(ReceiveMessage(sv[1], &type, &payload, fds, &nfds), EMSGSIZE);
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace airlock::init
