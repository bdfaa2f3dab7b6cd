#include "netproxy/policy.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "fmt/format.h"
#include "gtest/gtest.h"

namespace airlock::netproxy {
namespace {

using spec::NetworkProfile;

spec::Network Net(NetworkProfile profile, std::vector<std::string> hosts = {}) {
  spec::Network n;
  n.profile = profile;
  n.allow_hosts = std::move(hosts);
  return n;
}

Policy Compile(const spec::Network& n, const OperatorPolicy& op = {}) {
  absl::StatusOr<Policy> p = Policy::Compile(n, op);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

Decision Connect(const Policy& p, std::string_view host, uint16_t port = 443) {
  return p.CheckRequest({RequestKind::kConnect, *NormalizeHost(host), port, {}, {}});
}

Decision Http(const Policy& p, std::string_view host, std::string_view method,
              std::string_view target, uint16_t port = 80) {
  return p.CheckRequest({RequestKind::kHttp, *NormalizeHost(host), port, method, target});
}

Decision Addr(const Policy& p, std::string_view address, std::string_view host = "example.com") {
  return p.CheckAddress(*NormalizeHost(host), 443, *IpAddress::Parse(address));
}

const NetworkProfile kAllProfiles[] = {NetworkProfile::kNone, NetworkProfile::kDependencyEgress,
                                       NetworkProfile::kRepoEgress, NetworkProfile::kRestrictedHttp,
                                       NetworkProfile::kOpen};

// Attack: CONNECT to an allowed registry's port 80 and speak plain HTTP through the tunnel,
// with a Host header naming another site behind the same front end; the proxy's plain-HTTP path
// (which sets Host from the checked URL) is bypassed. Expected: a pattern without a port allows
// CONNECT to 443 only; port 80 needs the port named, and plain HTTP keeps 80 and 443.
TEST(PolicyTest, APortlessPatternAllowsTunnelsTo443Only) {
  Policy p =
      Compile(Net(NetworkProfile::kDependencyEgress, {"registry.example", "git.example:80"}));
  EXPECT_TRUE(Connect(p, "registry.example", 443).allowed);
  EXPECT_EQ(Connect(p, "registry.example", 80).rule, "not-allowlisted");
  EXPECT_TRUE(Http(p, "registry.example", "GET", "/", 80).allowed);
  EXPECT_TRUE(Http(p, "registry.example", "GET", "/", 443).allowed);
  EXPECT_TRUE(Connect(p, "git.example", 80).allowed);
  EXPECT_FALSE(Connect(p, "git.example", 443).allowed);
  // Adding ":80" to a portless pattern opens CONNECT to 80: a loosening, not a tightening.
  Policy portless = Compile(Net(NetworkProfile::kDependencyEgress, {"git.example"}));
  Policy with80 =
      Compile(Net(NetworkProfile::kDependencyEgress, {"git.example", "git.example:80"}));
  Policy only443 = Compile(Net(NetworkProfile::kDependencyEgress, {"git.example:443"}));
  EXPECT_FALSE(with80.IsNoLooserThan(portless));
  EXPECT_TRUE(only443.IsNoLooserThan(portless));
  EXPECT_FALSE(portless.IsNoLooserThan(only443));
}

TEST(PolicyTest, NoneBlocksEverythingBeforeResolving) {
  Policy p = Compile(Net(NetworkProfile::kNone, {"example.com"}));
  EXPECT_EQ(Connect(p, "example.com").rule, "profile:none");
  EXPECT_FALSE(Http(p, "example.com", "GET", "/").allowed);
}

TEST(PolicyTest, OpenAllowsAnyPublicHostAndPort) {
  Policy p = Compile(Net(NetworkProfile::kOpen));
  EXPECT_TRUE(Connect(p, "anything.example", 8443).allowed);
  EXPECT_TRUE(Addr(p, "192.0.2.10").allowed);
  EXPECT_TRUE(Addr(p, "2001:db8::1").allowed);
}

TEST(PolicyTest, DependencyEgressUsesTheAllowlist) {
  Policy p = Compile(
      Net(NetworkProfile::kDependencyEgress, {"registry.npmjs.org", "*.pythonhosted.org:443"}));
  EXPECT_TRUE(Connect(p, "registry.npmjs.org").allowed);
  EXPECT_TRUE(Http(p, "Registry.Npmjs.Org.", "GET", "/x").allowed);
  EXPECT_TRUE(Connect(p, "files.pythonhosted.org").allowed);
  EXPECT_EQ(Http(p, "files.pythonhosted.org", "GET", "/").rule, "not-allowlisted");  // port 80
  EXPECT_EQ(Connect(p, "evil.example").rule, "not-allowlisted");
  EXPECT_EQ(Connect(p, "registry.npmjs.org", 22).rule, "not-allowlisted");
  EXPECT_FALSE(Connect(Compile(Net(NetworkProfile::kDependencyEgress)), "a.example").allowed);
}

TEST(PolicyTest, RepoEgressDefaultsToGitProvidersAndSpecNarrowsOrExtends) {
  Policy defaults = Compile(Net(NetworkProfile::kRepoEgress));
  EXPECT_TRUE(Connect(defaults, "github.com").allowed);
  EXPECT_TRUE(Connect(defaults, "gitlab.com").allowed);
  EXPECT_FALSE(Connect(defaults, "registry.npmjs.org").allowed);

  Policy narrowed = Compile(Net(NetworkProfile::kRepoEgress, {"github.com"}));
  EXPECT_TRUE(Connect(narrowed, "github.com").allowed);
  EXPECT_FALSE(Connect(narrowed, "gitlab.com").allowed);

  Policy extended =
      Compile(Net(NetworkProfile::kRepoEgress, {"@git-providers", "git.example.org"}));
  EXPECT_TRUE(Connect(extended, "gitlab.com").allowed);
  EXPECT_TRUE(Connect(extended, "git.example.org").allowed);
}

spec::Network RestrictedNet() {
  spec::Network n = Net(NetworkProfile::kRestrictedHttp, {"free.example"});
  n.http_rules = {{"api.example", {"get", "HEAD"}, {"/v1/"}},
                  {"open-rule.example", {}, {}},
                  {"*.cdn.example:8080", {"GET"}, {}}};
  return n;
}

TEST(PolicyTest, RestrictedHttpChecksMethodAndPathOfPlainHttp) {
  Policy p = Compile(RestrictedNet());
  EXPECT_TRUE(Http(p, "api.example", "GET", "/v1/items?x=1").allowed);
  EXPECT_TRUE(Http(p, "api.example", "HEAD", "/v1/").allowed);
  EXPECT_EQ(Http(p, "api.example", "POST", "/v1/items").rule, "restricted-http:method");
  EXPECT_EQ(Http(p, "api.example", "GET", "/v2/items").rule, "restricted-http:path");
  EXPECT_EQ(Http(p, "api.example", "GET", "/v1/../admin").rule, "restricted-http:path");
  EXPECT_EQ(Http(p, "api.example", "GET", "/v1/%2e%2e/admin").rule, "restricted-http:path");
  EXPECT_EQ(Http(p, "api.example", "GET", "/v1/..%2fadmin").rule, "restricted-http:path");
  // Paths that some server behind the proxy reads as another path: Tomcat, Jetty and Spring
  // drop ";params" and then resolve "..", a server that decodes twice turns "%252e" into ".",
  // a lenient UTF-8 decoder turns the overlong "%c0%ae" into ".".
  for (const char* sneaky :
       {"/v1/..;/admin", "/v1;x=1/items", "/v1/%252e%252e/admin", "/v1/%c0%ae%c0%ae/admin",
        "/v1/%e0%80%ae/admin", "/v1/%u002e", "/v1/%2E", "/v1/a%zz", "/v1/a%2", "/v1/a%", "/v1/a b",
        "/v1/a\\b", "/v1/%5cadmin", "/v1/a%00", "/v1/a%0d%0a", "/v1/\xc3\xa9"}) {
    EXPECT_EQ(Http(p, "api.example", "GET", sneaky).rule, "restricted-http:path") << sneaky;
  }
  // Escapes that mean one thing to every server pass.
  EXPECT_TRUE(Http(p, "api.example", "GET", "/v1/caf%C3%A9/a%20b%2Bc").allowed);
  EXPECT_TRUE(Http(p, "api.example", "GET", "/v1/items:batch@2,x=(1)~").allowed);
  EXPECT_TRUE(Http(p, "x.cdn.example", "GET", "/anything", 8080).allowed);
  EXPECT_EQ(Http(p, "x.cdn.example", "GET", "/anything", 80).rule, "not-allowlisted");
  EXPECT_TRUE(Http(p, "free.example", "DELETE", "/x").allowed);
  EXPECT_TRUE(Http(p, "open-rule.example", "PUT", "/x").allowed);
  EXPECT_EQ(Http(p, "other.example", "GET", "/").rule, "not-allowlisted");
}

// Attack: a request the rule allows (GET /v1/...) carries a header that frameworks read as the
// real method or path (Rack and Express honour X-HTTP-Method-Override, IIS and Symfony
// X-Original-URL), so the server would run DELETE or /admin. Refused where the rule limits
// methods or paths; a host without such limits takes the header like any other.
TEST(PolicyTest, RestrictedHttpRefusesMethodAndPathOverrideHeaders) {
  Policy p = Compile(RestrictedNet());
  auto with = [&](std::string_view host, std::vector<std::string_view> names) {
    return p.CheckRequest({RequestKind::kHttp, *NormalizeHost(host), 80, "GET", "/v1/items",
                           OverrideHeaderOf(names)});
  };
  EXPECT_TRUE(with("api.example", {"Accept", "X-Request-Id"}).allowed);
  for (std::string_view header : {"X-HTTP-Method-Override", "x-http-method", "X-Method-Override",
                                  "X-Original-URL", "X-REWRITE-URL"}) {
    EXPECT_EQ(OverrideHeaderOf({"Accept", header}), header);
    EXPECT_EQ(with("api.example", {"Accept", header}).rule, "restricted-http:method-override")
        << header;
    EXPECT_TRUE(with("open-rule.example", {header}).allowed) << header;
    EXPECT_TRUE(with("free.example", {header}).allowed) << header;
  }
}

TEST(PolicyTest, RestrictedHttpRefusesConnectToHostsWithMethodOrPathRules) {
  Policy p = Compile(RestrictedNet());
  EXPECT_EQ(Connect(p, "api.example").rule, "restricted-http:connect");
  EXPECT_EQ(Connect(p, "x.cdn.example", 8080).rule, "restricted-http:connect");
  EXPECT_TRUE(Connect(p, "open-rule.example").allowed);
  EXPECT_TRUE(Connect(p, "free.example").allowed);
}

TEST(PolicyTest, HttpRulesOnlyInRestrictedHttp) {
  spec::Network n = RestrictedNet();
  n.profile = NetworkProfile::kOpen;
  EXPECT_FALSE(Policy::Compile(n).ok());
}

TEST(PolicyTest, EveryAlwaysDeniedRangeIsDeniedInEveryProfile) {
  const char* kSamples[] = {
      "169.254.169.254", "169.254.0.1", "fd00:ec2::254", "127.0.0.1", "127.255.0.9", "::1",
      "10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.1", "192.168.1.1", "100.64.0.1",
      "100.127.255.1", "fc00::1", "fd12:3456::1", "fe80::1", "febf::1", "0.0.0.0", "0.1.2.3",
      "224.0.0.1", "239.255.255.250", "ff02::1", "::", "255.255.255.255",
      // The same destinations in IPv6 clothing.
      "::ffff:169.254.169.254", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a9fe:a9fe",
      "64:ff9b::7f00:1", "2002:a9fe:a9fe::1", "2002:c0a8:0101::1", "::127.0.0.1",
      // Translated forms a NAT64 or SIIT gateway of the node's network might unwrap (local-use
      // NAT64, IPv4-translated, Teredo), and ranges that are not the public internet.
      "64:ff9b:1::a9fe:a9fe", "::ffff:0:a9fe:a9fe", "2001:0:4136:e378:8000:63bf:3fff:fdd2",
      "fec0::1", "100::1", "192.0.0.8", "192.88.99.1", "198.18.0.1", "198.19.255.255"};
  for (NetworkProfile profile : kAllProfiles) {
    Policy p = Compile(Net(profile, {"example.com"}));
    for (const char* address : kSamples) {
      Decision d = Addr(p, address);
      EXPECT_FALSE(d.allowed) << ProfileName(profile) << " " << address;
      EXPECT_TRUE(d.rule.starts_with("always-denied:")) << address << " " << d.rule;
    }
  }
}

TEST(PolicyTest, EveryListedRangeHasASampleThatIsDenied) {
  Policy p = Compile(Net(NetworkProfile::kOpen));
  for (const DeniedRange& r : AlwaysDeniedRanges()) {
    IpAddress base = *IpAddress::Parse(r.text.substr(0, r.text.find('/')));
    Decision d = p.CheckAddress(*NormalizeHost("example.com"), 443, base);
    EXPECT_FALSE(d.allowed) << r.text;
  }
  // Public neighbours of the denied ranges stay reachable.
  for (const char* ok :
       {"169.253.255.255", "169.255.0.0", "11.0.0.0", "9.255.255.255", "172.15.255.255",
        "172.32.0.0", "192.167.255.255", "192.169.0.0", "100.63.255.255", "100.128.0.0", "1.0.0.0",
        "223.255.255.255", "192.0.2.1", "198.51.100.7", "203.0.113.9", "2001:db8::1", "fe00::1"}) {
    EXPECT_TRUE(Addr(p, ok).allowed) << ok;
  }
}

TEST(PolicyTest, MetadataNamesTheMetadataRule) {
  Policy p = Compile(Net(NetworkProfile::kOpen));
  EXPECT_EQ(Addr(p, "169.254.169.254").rule, "always-denied:169.254.0.0/16 (metadata)");
  EXPECT_EQ(Addr(p, "fd00:ec2::254").rule, "always-denied:fd00:ec2::254/128 (metadata)");
  EXPECT_EQ(Addr(p, "::ffff:169.254.169.254").rule, "always-denied:169.254.0.0/16 (metadata)");
  EXPECT_EQ(Addr(p, "10.1.1.1").rule, "always-denied:10.0.0.0/8 (private)");
}

TEST(PolicyTest, TheNodesOwnAddressesAreDeniedUnlessOpened) {
  Policy p = Compile(Net(NetworkProfile::kOpen));
  HostName host = *NormalizeHost("example.com");
  IpAddress node = *IpAddress::Parse("198.51.100.7");
  EXPECT_TRUE(p.CheckAddress(host, 443, node).allowed);
  EXPECT_EQ(p.CheckAddress(host, 443, node, /*node_local=*/true).rule, "always-denied:node-local");
  // An always-denied range keeps its own, more specific rule name.
  EXPECT_EQ(p.CheckAddress(host, 443, *IpAddress::Parse("127.0.0.1"), true).rule,
            "always-denied:127.0.0.0/8 (loopback)");
  OperatorPolicy op;
  op.open_private_cidrs = {"198.51.100.7/32"};
  EXPECT_TRUE(Compile(Net(NetworkProfile::kOpen), op).CheckAddress(host, 443, node, true).allowed);
}

TEST(LocalAddressesTest, KnowsTheLoopbackAddressAndNotAPublicOne) {
  LocalAddresses local;
  EXPECT_TRUE(local.Contains(*IpAddress::Parse("127.0.0.1")));
  EXPECT_TRUE(local.Contains(*IpAddress::Parse("::ffff:127.0.0.1")));
  EXPECT_FALSE(local.Contains(*IpAddress::Parse("203.0.113.77")));
}

TEST(PolicyTest, SpecDenyCidrsApplyEvenInOpen) {
  spec::Network n = Net(NetworkProfile::kOpen);
  n.deny_cidrs = {"203.0.113.0/24", "2001:db8:bad::/48"};
  Policy p = Compile(n);
  EXPECT_EQ(Addr(p, "203.0.113.5").rule, "deny-cidr:203.0.113.0/24");
  EXPECT_EQ(Addr(p, "::ffff:203.0.113.5").rule, "deny-cidr:203.0.113.0/24");
  EXPECT_FALSE(Addr(p, "2001:db8:bad::1").allowed);
  EXPECT_TRUE(Addr(p, "198.51.100.5").allowed);
  n.deny_cidrs = {"not-a-cidr"};
  EXPECT_FALSE(Policy::Compile(n).ok());
}

TEST(PolicyTest, OperatorPolicyOpensNamedPrivateDestinations) {
  OperatorPolicy op;
  op.open_private_cidrs = {"100.64.7.0/24"};
  op.open_private_hosts = {"npm.internal"};
  Policy p =
      Compile(Net(NetworkProfile::kDependencyEgress, {"npm.internal", "mirror.example"}), op);
  EXPECT_TRUE(Addr(p, "100.64.7.10", "mirror.example").allowed);
  EXPECT_FALSE(Addr(p, "100.64.8.10", "mirror.example").allowed);
  EXPECT_TRUE(Addr(p, "10.9.9.9", "npm.internal").allowed);
  EXPECT_FALSE(Addr(p, "10.9.9.9", "mirror.example").allowed);
  // Opening a destination never adds a host to the profile's allowlist.
  EXPECT_FALSE(Connect(p, "other.internal").allowed);
  // Spec denyCidrs still win over the operator.
  spec::Network n = Net(NetworkProfile::kOpen);
  n.deny_cidrs = {"100.64.7.10/32"};
  EXPECT_EQ(Addr(Compile(n, op), "100.64.7.10").rule, "deny-cidr:100.64.7.10/32");
}

TEST(PolicyTest, OperatorPolicyCannotOpenMetadata) {
  for (const char* cidr : {"169.254.0.0/16", "169.254.169.254/32", "169.254.0.0/15", "0.0.0.0/0",
                           "::/0", "fd00:ec2::/32", "fd00:ec2::254", "::ffff:169.254.0.0/112"}) {
    OperatorPolicy op;
    op.open_private_cidrs = {cidr};
    absl::StatusOr<Policy> p = Policy::Compile(Net(NetworkProfile::kOpen), op);
    EXPECT_FALSE(p.ok()) << cidr;
  }
  // Even a host the operator opened by name is refused when it resolves to metadata.
  OperatorPolicy op;
  op.open_private_hosts = {"metadata.internal", "*.internal"};
  Policy p = Compile(Net(NetworkProfile::kOpen), op);
  EXPECT_EQ(Addr(p, "169.254.169.254", "metadata.internal").rule,
            "always-denied:169.254.0.0/16 (metadata)");
  EXPECT_FALSE(Addr(p, "fd00:ec2::254", "x.internal").allowed);
  EXPECT_FALSE(Addr(p, "64:ff9b::a9fe:a9fe", "x.internal").allowed);
}

// Attack: the operator opened *.corp.test for an internal registry; a sandbox asks for a name
// under it that resolves to the node's loopback, its own address or another special range
// (localhost.corp.test records are common). Expected: a name opens private-use space only;
// everything else stays refused unless an open CIDR names it.
TEST(PolicyTest, AnOpenedNameReachesPrivateUseSpaceOnly) {
  OperatorPolicy op;
  op.open_private_hosts = {"*.corp.test"};
  Policy p = Compile(Net(NetworkProfile::kOpen), op);
  HostName host = *NormalizeHost("localhost.corp.test");
  auto check = [&](const char* address, bool node_local = false) {
    return p.CheckAddress(host, 443, *IpAddress::Parse(address), node_local);
  };
  for (const char* address : {"10.1.2.3", "172.16.0.9", "192.168.1.1", "100.64.7.10", "fd12::1"}) {
    EXPECT_TRUE(check(address).allowed) << address;
  }
  EXPECT_EQ(check("127.0.0.1").rule, "always-denied:127.0.0.0/8 (loopback)");
  EXPECT_EQ(check("::1").rule, "always-denied:::1/128 (loopback)");
  EXPECT_EQ(check("0.0.0.0").rule, "always-denied:0.0.0.0/8 (this-network)");
  EXPECT_EQ(check("224.0.0.1").rule, "always-denied:224.0.0.0/4 (multicast)");
  EXPECT_EQ(check("fe80::1").rule, "always-denied:fe80::/10 (link-local)");
  // The node's own (private) address: only an open CIDR naming it opens it.
  EXPECT_EQ(check("10.0.0.5", true).rule, "always-denied:node-local");
  // Alibaba Cloud's metadata address sits in the shared address space, the IPv6 ones of GCP, EKS
  // Pod Identity and Scaleway in unique-local space; never opened.
  EXPECT_EQ(check("100.100.100.200").rule, "always-denied:100.100.100.200/32 (metadata)");
  for (const char* address : {"fd20:ce::254", "fd00:ec2::23", "fd00:42::42"}) {
    EXPECT_EQ(check(address).rule, fmt::format("always-denied:{}/128 (metadata)", address));
  }
  // Azure's host endpoint is a public address: refused under open, which allows public ones.
  EXPECT_EQ(check("168.63.129.16").rule, "always-denied:168.63.129.16/32 (metadata)");
  op.open_private_cidrs = {"127.0.0.1/32", "10.0.0.5/32"};
  Policy cidrs = Compile(Net(NetworkProfile::kOpen), op);
  EXPECT_TRUE(cidrs.CheckAddress(host, 443, *IpAddress::Parse("127.0.0.1")).allowed);
  EXPECT_TRUE(cidrs.CheckAddress(host, 443, *IpAddress::Parse("10.0.0.5"), true).allowed);
  // An operator may open the shared address space around it; the address stays refused.
  op.open_private_cidrs = {"100.64.0.0/10"};
  Policy cgnat = Compile(Net(NetworkProfile::kOpen), op);
  EXPECT_TRUE(cgnat.CheckAddress(host, 443, *IpAddress::Parse("100.100.100.1")).allowed);
  EXPECT_EQ(cgnat.CheckAddress(host, 443, *IpAddress::Parse("100.100.100.200")).rule,
            "always-denied:100.100.100.200/32 (metadata)");
  // Likewise a public range around Azure's WireServer (an existing operator policy still loads).
  op.open_private_cidrs = {"168.0.0.0/8"};
  absl::StatusOr<Policy> azure = Policy::Compile(Net(NetworkProfile::kOpen), op);
  ASSERT_TRUE(azure.ok()) << azure.status();
  EXPECT_EQ(azure->CheckAddress(host, 443, *IpAddress::Parse("168.63.129.16")).rule,
            "always-denied:168.63.129.16/32 (metadata)");
  // Likewise a unique-local network around GCP's IPv6 metadata address.
  op.open_private_cidrs = {"fd20:ce::/32"};
  Policy ula = Compile(Net(NetworkProfile::kOpen), op);
  EXPECT_TRUE(ula.CheckAddress(host, 443, *IpAddress::Parse("fd20:ce::1")).allowed);
  EXPECT_EQ(ula.CheckAddress(host, 443, *IpAddress::Parse("fd20:ce::254")).rule,
            "always-denied:fd20:ce::254/128 (metadata)");
}

// The operator's file is checked where it is loaded: each bad file is refused with an error that
// names the file and what is wrong in it, and a good one gives its entries.
TEST(PolicyTest, OperatorPolicyFileIsCheckedWhenLoaded) {
  char dir[] = "/tmp/airlock-operator-policy-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  auto load = [&](const std::string& name, const std::string& text) {
    std::string path = std::string(dir) + "/" + name;
    std::ofstream(path) << text;
    return LoadOperatorPolicyFile(path);
  };
  struct Bad {
    const char* name;
    const char* text;
    const char* error;
  };
  for (const Bad& b :
       {Bad{"garbage.json", "{open", "not valid JSON"},
        Bad{"field.json", R"({"openPrivateCidr": []})", "unknown field"},
        Bad{"type.json", R"({"openPrivateCidrs": "10.0.0.0/8"})", "must be a list"},
        Bad{"cidr.json", R"({"openPrivateCidrs": ["10.0.0.0/33"]})", "10.0.0.0/33"},
        Bad{"metadata.json", R"({"openPrivateCidrs": ["169.254.0.0/16"]})", "169.254.0.0/16"}}) {
    absl::StatusOr<OperatorPolicy> op = load(b.name, b.text);
    ASSERT_FALSE(op.ok()) << b.name;
    EXPECT_NE(op.status().message().find(b.name), std::string_view::npos) << op.status();
    EXPECT_NE(op.status().message().find(b.error), std::string_view::npos) << op.status();
  }
  EXPECT_FALSE(LoadOperatorPolicyFile(std::string(dir) + "/missing.json").ok());
  absl::StatusOr<OperatorPolicy> good =
      load("good.json",
           R"({"openPrivateHosts": ["git.corp.test"], "openPrivateCidrs": ["10.20.0.0/16"]})");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->open_private_hosts, std::vector<std::string>{"git.corp.test"});
  EXPECT_EQ(good->open_private_cidrs, std::vector<std::string>{"10.20.0.0/16"});
  absl::StatusOr<OperatorPolicy> none = LoadOperatorPolicyFile("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->open_private_hosts.empty() && none->open_private_cidrs.empty());
  std::filesystem::remove_all(dir);
}

// The operator's deny list: the node's NATed public address and a range it also opened are
// refused with the operator's rule, in every profile and whatever the spec says; the rest of the
// world is untouched. Dropping an operator deny is a loosening.
TEST(PolicyTest, OperatorDenyCidrsWinOverEverything) {
  OperatorPolicy op;
  op.open_private_cidrs = {"10.20.0.0/16"};
  op.deny_cidrs = {"203.0.113.7/32", "10.20.0.5/32"};
  Policy p = Compile(Net(NetworkProfile::kOpen), op);
  EXPECT_EQ(Addr(p, "203.0.113.7").rule, "operator-deny-cidr:203.0.113.7/32");
  EXPECT_EQ(Addr(p, "::ffff:203.0.113.7").rule, "operator-deny-cidr:203.0.113.7/32");
  EXPECT_EQ(Addr(p, "10.20.0.5").rule, "operator-deny-cidr:10.20.0.5/32");
  EXPECT_TRUE(Addr(p, "10.20.0.6").allowed);
  EXPECT_TRUE(Addr(p, "203.0.113.8").allowed);
  // Metadata keeps its own rule.
  op.deny_cidrs.push_back("169.254.0.0/16");
  EXPECT_EQ(Addr(Compile(Net(NetworkProfile::kOpen), op), "169.254.169.254").rule,
            "always-denied:169.254.0.0/16 (metadata)");

  OperatorPolicy fewer = op;
  fewer.deny_cidrs = {"10.20.0.5/32"};
  Policy looser = Compile(Net(NetworkProfile::kOpen), fewer);
  EXPECT_FALSE(looser.IsNoLooserThan(p));
  EXPECT_TRUE(p.IsNoLooserThan(looser));
  EXPECT_EQ(p.ToJson()["operator_deny_cidrs"].size(), 2u);

  op.deny_cidrs = {"203.0.113.7/40"};
  absl::StatusOr<Policy> bad = Policy::Compile(Net(NetworkProfile::kOpen), op);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("operator policy: deny CIDR"), std::string_view::npos)
      << bad.status();

  absl::StatusOr<OperatorPolicy> parsed =
      OperatorPolicyFromJson(nlohmann::json::parse(R"({"denyCidrs": ["198.51.100.1"]})"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->deny_cidrs, std::vector<std::string>{"198.51.100.1"});
  EXPECT_EQ(ToJson(*parsed)["denyCidrs"], nlohmann::json::array({"198.51.100.1"}));
}

TEST(PolicyTest, RebindingNameIsCheckedOnEveryAddress) {
  // A name resolving to a public and to a metadata address: the proxy checks each one, so only
  // the public address is ever connected to.
  Policy p = Compile(Net(NetworkProfile::kDependencyEgress, {"rebind.example"}));
  ASSERT_TRUE(Connect(p, "rebind.example").allowed);
  EXPECT_TRUE(Addr(p, "198.51.100.20", "rebind.example").allowed);
  EXPECT_FALSE(Addr(p, "169.254.169.254", "rebind.example").allowed);
  EXPECT_FALSE(Addr(p, "::ffff:127.0.0.1", "rebind.example").allowed);
}

TEST(PolicyTest, TightenOnlyDetection) {
  auto P = [](NetworkProfile profile, std::vector<std::string> hosts) {
    return Compile(Net(profile, std::move(hosts)));
  };
  Policy broad = P(NetworkProfile::kDependencyEgress, {"*.example.com", "registry.npmjs.org"});
  Policy narrow = P(NetworkProfile::kDependencyEgress, {"a.example.com"});
  EXPECT_TRUE(narrow.IsNoLooserThan(broad));
  EXPECT_FALSE(broad.IsNoLooserThan(narrow));
  EXPECT_TRUE(P(NetworkProfile::kNone, {}).IsNoLooserThan(broad));
  EXPECT_FALSE(P(NetworkProfile::kOpen, {}).IsNoLooserThan(broad));
  EXPECT_TRUE(broad.IsNoLooserThan(P(NetworkProfile::kOpen, {})));
  EXPECT_FALSE(broad.IsNoLooserThan(P(NetworkProfile::kNone, {})));

  spec::Network with_deny = Net(NetworkProfile::kOpen);
  with_deny.deny_cidrs = {"203.0.113.0/24"};
  EXPECT_TRUE(Compile(with_deny).IsNoLooserThan(P(NetworkProfile::kOpen, {})));
  EXPECT_FALSE(P(NetworkProfile::kOpen, {}).IsNoLooserThan(Compile(with_deny)));

  OperatorPolicy op;
  op.open_private_cidrs = {"100.64.7.0/24"};
  Policy opened = Compile(Net(NetworkProfile::kOpen), op);
  EXPECT_FALSE(opened.IsNoLooserThan(P(NetworkProfile::kOpen, {})));
  EXPECT_TRUE(P(NetworkProfile::kOpen, {}).IsNoLooserThan(opened));

  Policy restricted = Compile(RestrictedNet());
  spec::Network fewer = RestrictedNet();
  fewer.http_rules[0].methods = {"GET"};
  fewer.http_rules[0].path_prefixes = {"/v1/items"};
  EXPECT_TRUE(Compile(fewer).IsNoLooserThan(restricted));
  spec::Network more = RestrictedNet();
  more.http_rules[0].methods = {};
  EXPECT_FALSE(Compile(more).IsNoLooserThan(restricted));
}

TEST(PolicyTest, ToJsonDescribesThePolicy) {
  nlohmann::json j = Compile(RestrictedNet()).ToJson();
  EXPECT_EQ(j["profile"], "restricted-http");
  EXPECT_EQ(j["allow_hosts"][0], "free.example");
  EXPECT_EQ(j["http_rules"][0]["methods"][0], "GET");
}

}  // namespace
}  // namespace airlock::netproxy
