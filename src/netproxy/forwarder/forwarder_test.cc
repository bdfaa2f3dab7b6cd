// airlock-forwarder as a process, against a real EgressProxy on a unix socket (loopback only).
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/ids.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "netproxy/egress_proxy.h"
#include "netproxy/testing/test_net.h"
#include "netproxy/testing/test_servers.h"

namespace airlock::netproxy {
namespace {

using testing::ConnectTcp;
using testing::ForwarderProcess;
using testing::FreeLoopbackPort;
using testing::ReadUntil;
using testing::RunCommand;
using testing::SendAll;
using testing::TestServer;

class ForwarderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fmt::format("/tmp/airlock-forwarder-test-{}", RandomHex(4));
    std::filesystem::create_directories(dir_);
    socket_ = dir_ + "/egress.sock";
    echo_ = *TestServer::Start({TestServer::Kind::kEcho, "127.0.0.1", 0, "", "echo", ""});
    http_ = *TestServer::Start({TestServer::Kind::kHttp, "127.0.0.1", 0, "", "origin", ""});
    EgressProxy::Options options;
    options.hosts = {{"echo.test", {"127.0.0.1"}}, {"origin.test", {"127.0.0.1"}}};
    options.resolution = NameResolution::kHostsOnly;
    proxy_ = *EgressProxy::Start(options);
    spec::Network n;
    n.profile = spec::NetworkProfile::kDependencyEgress;
    n.allow_hosts = {fmt::format("echo.test:{}", echo_->port()),
                     fmt::format("origin.test:{}", http_->port())};
    OperatorPolicy op;
    op.open_private_cidrs = {"127.0.0.1/32"};
    ASSERT_TRUE(proxy_->AddSandbox(SandboxId("sb-fwd"), *Policy::Compile(n, op), socket_).ok());
    port_ = FreeLoopbackPort();
    forwarder_ = std::make_unique<ForwarderProcess>(AIRLOCK_FORWARDER_PATH, "",
                                                    fmt::format("127.0.0.1:{}", port_), socket_);
    ASSERT_TRUE(forwarder_->ready());
  }
  void TearDown() override {
    forwarder_.reset();
    proxy_.reset();
    std::filesystem::remove_all(dir_);
  }

  UniqueFd Tunnel(const std::string& target) {
    absl::StatusOr<UniqueFd> fd = ConnectTcp("127.0.0.1", port_);
    EXPECT_TRUE(fd.ok()) << fd.status();
    EXPECT_TRUE(SendAll(fd->get(), fmt::format("CONNECT {} HTTP/1.1\r\n\r\n", target)).ok());
    EXPECT_TRUE(ReadUntil(fd->get(), "\r\n\r\n").starts_with("HTTP/1.1 200"));
    return *std::move(fd);
  }

  std::string dir_;
  std::string socket_;
  uint16_t port_ = 0;
  std::unique_ptr<TestServer> echo_;
  std::unique_ptr<TestServer> http_;
  std::unique_ptr<EgressProxy> proxy_;
  std::unique_ptr<ForwarderProcess> forwarder_;
};

TEST_F(ForwarderTest, CarriesTunnelsAndHalfCloses) {
  UniqueFd fd = Tunnel(fmt::format("echo.test:{}", echo_->port()));
  ASSERT_TRUE(SendAll(fd.get(), "half-close me").ok());
  ASSERT_EQ(::shutdown(fd.get(), SHUT_WR), 0);
  // The echo comes back and then the end of the stream, passed on through both hops.
  EXPECT_EQ(ReadUntil(fd.get()), "half-close me");
}

TEST_F(ForwarderTest, StreamsALargeDownloadIntact) {
  UniqueFd fd = Tunnel(fmt::format("origin.test:{}", http_->port()));
  constexpr size_t kBytes = 64 << 20;
  ASSERT_TRUE(
      SendAll(fd.get(), fmt::format("GET /bytes/{} HTTP/1.1\r\nHost: o\r\n\r\n", kBytes)).ok());
  std::string head = ReadUntil(fd.get(), "\r\n\r\n");
  size_t body = head.size() - (head.find("\r\n\r\n") + 4);
  std::string rest = ReadUntil(fd.get(), {}, kBytes - body);
  EXPECT_EQ(body + rest.size(), kBytes);
  EXPECT_EQ(rest.find_first_not_of('x'), std::string::npos);
}

// Both hops splice (forwarder: TCP <-> unix socket, proxy: unix socket <-> TCP): 32 MiB of a
// pattern echoed back arrive byte for byte, and the half-close travels both hops and back.
TEST_F(ForwarderTest, CarriesALargeTransferBothWaysByteExactWithHalfClose) {
  UniqueFd fd = Tunnel(fmt::format("echo.test:{}", echo_->port()));
  const std::string data = testing::PatternBytes(32 << 20, 3);
  absl::StatusOr<std::string> back = testing::SendHalfCloseAndReadAll(fd.get(), data);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), data.size());
  EXPECT_TRUE(*back == data) << "the echoed bytes differ from those sent";
}

TEST_F(ForwarderTest, ManyConcurrentConnections) {
  std::vector<UniqueFd> fds;
  for (int i = 0; i < 200; ++i) fds.push_back(Tunnel(fmt::format("echo.test:{}", echo_->port())));
  for (size_t i = 0; i < fds.size(); ++i) {
    ASSERT_TRUE(SendAll(fds[i].get(), fmt::format("{}|", i)).ok());
  }
  for (size_t i = 0; i < fds.size(); ++i)
    EXPECT_EQ(ReadUntil(fds[i].get(), "|"), fmt::format("{}|", i));
}

TEST_F(ForwarderTest, ClosesTheClientWhenTheProxySocketIsGone) {
  ASSERT_TRUE(proxy_->RemoveSandbox(SandboxId("sb-fwd")).ok());
  for (int i = 0; i < 50 && std::filesystem::exists(socket_); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  absl::StatusOr<UniqueFd> fd = ConnectTcp("127.0.0.1", port_);
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(ReadUntil(fd->get()), "");
}

TEST_F(ForwarderTest, ExitsCleanlyOnSigterm) {
  int status = forwarder_->Stop();
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(ForwarderTest, ExitsWhenItsParentDies) {
  int pid_pipe[2];
  ASSERT_EQ(::pipe(pid_pipe), 0);
  uint16_t port = FreeLoopbackPort();
  pid_t parent = ::fork();
  if (parent == 0) {
    ForwarderProcess child(AIRLOCK_FORWARDER_PATH, "", fmt::format("127.0.0.1:{}", port), socket_);
    pid_t pid = child.ready() ? child.pid() : -1;
    ssize_t n = ::write(pid_pipe[1], &pid, sizeof(pid));
    (void)n;
    ::_exit(0);  // without running the destructor: the forwarder must notice on its own
  }
  pid_t forwarder = -1;
  ASSERT_EQ(::read(pid_pipe[0], &forwarder, sizeof(forwarder)),
            static_cast<ssize_t>(sizeof(forwarder)));
  ::close(pid_pipe[0]);
  ::close(pid_pipe[1]);
  ::waitpid(parent, nullptr, 0);
  ASSERT_GT(forwarder, 0);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::ifstream stat(fmt::format("/proc/{}/stat", forwarder));
    std::string pid_field, comm, state;
    gone = !(stat >> pid_field >> comm >> state) || state == "Z" || state == "X";
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone);
  EXPECT_FALSE(ConnectTcp("127.0.0.1", port).ok());
}

TEST(ForwarderFlagsTest, RejectsBadFlags) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--listen", "0.0.0.0:3128", "--socket", "/tmp/x"},
        {"--listen", "192.0.2.1:3128", "--socket", "/tmp/x"},
        {"--listen", "127.0.0.1:0", "--socket", "/tmp/x"},
        {"--listen", "127.0.0.1:3128"},
        {"--socket", "/tmp/x"},
        {"--bogus", "1"}}) {
    args.insert(args.begin(), AIRLOCK_FORWARDER_PATH);
    absl::StatusOr<testing::CommandOutput> out = RunCommand(args);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(out->exit_code, 2) << args[1] << " " << args[2] << ": " << out->output;
  }
}

}  // namespace
}  // namespace airlock::netproxy
