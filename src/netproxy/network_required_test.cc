#include "netproxy/network_required.h"

#include "fmt/format.h"
#include "gtest/gtest.h"

namespace airlock::netproxy {
namespace {

BlockedNetworkEgress Blocked(std::string host, uint16_t port, std::string rule,
                             std::string address = "") {
  BlockedNetworkEgress e;
  e.sandbox = SandboxId("sb-1");
  e.host = std::move(host);
  e.port = port;
  e.rule = std::move(rule);
  e.resolved_address = std::move(address);
  e.method = "CONNECT";
  return e;
}

TEST(NetworkRequiredTest, FailedCommandAfterBlockedFetchNamesTheHost) {
  std::vector<BlockedNetworkEgress> blocked = {
      Blocked("registry.npmjs.org", 443, "not-allowlisted"),
      Blocked("registry.npmjs.org", 443, "not-allowlisted"),
      Blocked("files.example", 80, "not-allowlisted")};
  std::optional<NetworkRequired> v = DetectNetworkRequired(Classification::kExitNonzero, blocked);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->host, "registry.npmjs.org");
  EXPECT_EQ(v->port, 443);
  EXPECT_EQ(v->rule, "not-allowlisted");
  EXPECT_EQ(v->hosts, (std::vector<std::string>{"registry.npmjs.org:443", "files.example:80"}));

  CommandResult r;
  r.classification = Classification::kExitNonzero;
  r.key_lines = {"npm ERR! network"};
  ApplyNetworkRequired(*v, r);
  EXPECT_EQ(r.classification, Classification::kNetworkRequired);
  EXPECT_EQ(r.failure, FailureKind::kNetworkRequired);
  ASSERT_EQ(r.key_lines.size(), 2u);
  EXPECT_NE(r.key_lines[0].find("registry.npmjs.org:443"), std::string::npos);
  EXPECT_NE(r.key_lines[0].find("files.example:80"), std::string::npos);
}

TEST(NetworkRequiredTest, SuccessOrOtherFailuresAreNotNetworkRequired) {
  std::vector<BlockedNetworkEgress> blocked = {Blocked("a.example", 443, "not-allowlisted")};
  for (Classification c : {Classification::kOk, Classification::kResourceExhaustedMemory,
                           Classification::kOutputLimit, Classification::kSandboxError}) {
    EXPECT_FALSE(DetectNetworkRequired(c, blocked).has_value()) << ToString(c);
  }
  EXPECT_TRUE(DetectNetworkRequired(Classification::kCommandTimeout, blocked).has_value());
  EXPECT_FALSE(DetectNetworkRequired(Classification::kExitNonzero, {}).has_value());
}

TEST(NetworkRequiredTest, MetadataAndOperatorDeniesNeverAskForNetwork) {
  std::vector<BlockedNetworkEgress> blocked = {
      Blocked("evil.example", 80, "always-denied:169.254.0.0/16 (metadata)", "169.254.169.254"),
      Blocked("%%%", 80, "invalid-host"),
      Blocked("a.example", 443, "unsupported-scheme:https"),
      Blocked("a.example", 0, "not-a-proxy-request"),
      Blocked("a.example", 80, "unsupported-framing"),
      Blocked("node.example", 22, "operator-deny-cidr:203.0.113.7/32", "203.0.113.7")};
  EXPECT_FALSE(DetectNetworkRequired(Classification::kExitNonzero, blocked).has_value());
  blocked.push_back(Blocked("npm.internal", 443, "always-denied:10.0.0.0/8 (private)", "10.0.0.5"));
  std::optional<NetworkRequired> v = DetectNetworkRequired(Classification::kExitNonzero, blocked);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->host, "npm.internal");
}

TEST(EventsTest, BlockedEventBecomesAViolation) {
  BlockedNetworkEgress e =
      Blocked("evil.example", 443, "always-denied:169.254.0.0/16 (metadata)", "169.254.169.254");
  Violation v = ToViolation(e);
  EXPECT_EQ(v.kind, "BlockedNetworkEgress");
  EXPECT_EQ(v.detail,
            "egress to evil.example:443 (169.254.169.254) blocked by always-denied:169.254.0.0/16 "
            "(metadata)");
  EXPECT_EQ(v.data["sandbox"], "sb-1");
  EXPECT_EQ(v.data["host"], "evil.example");
  EXPECT_EQ(v.data["resolved_address"], "169.254.169.254");
  EXPECT_EQ(v.data["port"], 443);
  EXPECT_EQ(v.data["rule"], "always-denied:169.254.0.0/16 (metadata)");
  EXPECT_EQ(ToJson(EgressEvent(e))["type"], "BlockedNetworkEgress");
}

TEST(EventsTest, BlockedEventLogKeepsPerSandboxStreamsBounded) {
  BlockedEventLog log(3);
  SandboxId b("sb-b");
  EventCallback cb = log.Callback();
  uint64_t mark = log.Mark(SandboxId("sb-1"));
  for (int i = 0; i < 5; ++i) cb(Blocked(fmt::format("h{}.example", i), 443, "not-allowlisted"));
  BlockedNetworkEgress other = Blocked("x.example", 443, "not-allowlisted");
  other.sandbox = b;
  cb(other);
  cb(ConnectionClosed{});
  std::vector<BlockedNetworkEgress> got = log.Since(SandboxId("sb-1"), mark);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].host, "h2.example");
  EXPECT_EQ(log.Dropped(SandboxId("sb-1")), 2u);
  uint64_t later = log.Mark(SandboxId("sb-1"));
  cb(Blocked("h9.example", 443, "not-allowlisted"));
  got = log.Since(SandboxId("sb-1"), later);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].host, "h9.example");
  EXPECT_EQ(log.Since(b, 0).size(), 1u);
}

}  // namespace
}  // namespace airlock::netproxy
