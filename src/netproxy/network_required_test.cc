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

// Attack: hide a refusal (the metadata attempt, or another command's) by flooding the sandbox's
// bounded log with refusals. Repeats within a second are recorded once; a client records 256 and
// then 4 a second; its metadata refusals have their own budget; what is left out is counted.
TEST(EventsTest, BlockedEventLogLimitsFloodsPerClient) {
  BlockedEventLog log;
  const SandboxId sb("sb-1");
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::hours(1000));
  auto event = [&](std::string host, std::string client, double seconds,
                   std::string rule = "not-allowlisted") {
    BlockedNetworkEgress e = Blocked(std::move(host), 443, std::move(rule));
    e.client = std::move(client);
    e.time = t0 + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    return e;
  };
  // 1,000 repeats of one attempt at once: one event.
  for (int i = 0; i < 1000; ++i) log.Record(event("same.test", "cmd-1", 0));
  EXPECT_EQ(log.Since(sb, 0).size(), 1u);
  EXPECT_EQ(log.Suppressed(sb, "cmd-1"), 999u);
  // 300 distinct hosts at once: the first 255 more (256 in all), the rest suppressed.
  for (int i = 0; i < 300; ++i) log.Record(event(fmt::format("h{}.test", i), "cmd-1", 0));
  EXPECT_EQ(log.Since(sb, 0).size(), 256u);
  EXPECT_EQ(log.Suppressed(sb, "cmd-1"), 999u + 45u);
  // The metadata refusal after the flood is kept, and so is another command's refusal.
  log.Record(event("169.254.169.254", "cmd-1", 0.1, "always-denied:169.254.0.0/16 (metadata)"));
  log.Record(event("other.test", "cmd-2", 0.1));
  std::vector<BlockedNetworkEgress> got = log.Since(sb, 0);
  ASSERT_EQ(got.size(), 258u);
  EXPECT_EQ(got[256].host, "169.254.169.254");
  EXPECT_EQ(got[257].client, "cmd-2");
  EXPECT_EQ(log.Suppressed(sb, "cmd-2"), 0u);
  // Ten seconds later the client has 40 more; the same attempt again after a second is new.
  for (int i = 0; i < 100; ++i) log.Record(event(fmt::format("late{}.test", i), "cmd-1", 10));
  EXPECT_EQ(log.Since(sb, 0).size(), 298u);
  log.Record(event("same.test", "cmd-2", 11.0));
  log.Record(event("same.test", "cmd-2", 12.5));
  EXPECT_EQ(log.Since(sb, 0).size(), 300u);
}

// Attack: the same, by a sandbox that floods under many client names (the name is its to choose)
// and reaches for the metadata address directly, ignoring the proxy. Expected: the metadata
// attempts stay (their own log, and a direct attempt on a metadata address counts as one), the
// flood pushes only other refusals out and is counted as dropped, and names past the limit
// share one budget instead of resetting the known ones.
TEST(EventsTest, BlockedEventLogKeepsMetadataAttemptsThroughAFloodUnderManyNames) {
  BlockedEventLog log;
  const SandboxId sb("sb-1");
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::hours(1000));
  auto at = [&](BlockedNetworkEgress e, std::string client) {
    e.client = std::move(client);
    e.time = t0;
    return e;
  };
  BlockedNetworkEgress direct =
      Blocked("169.254.169.254", 80, std::string(kRuleDirectConnect), "169.254.169.254");
  direct.method = "connect";
  EXPECT_TRUE(IsMetadataRefusal(direct));
  BlockedNetworkEgress mapped = direct;
  mapped.resolved_address = "::ffff:169.254.169.254";
  EXPECT_TRUE(IsMetadataRefusal(mapped));
  BlockedNetworkEgress outside = direct;
  outside.resolved_address = "192.0.2.1";
  EXPECT_FALSE(IsMetadataRefusal(outside));

  log.Record(at(direct, "cmd-1"));
  for (int name = 0; name < 8; ++name) {
    for (int i = 0; i < 256; ++i) {
      log.Record(at(Blocked(fmt::format("h{}-{}.test", name, i), 443, "not-allowlisted"),
                    fmt::format("fake-{}", name)));
    }
  }
  std::vector<BlockedNetworkEgress> got = log.Since(sb, 0);
  ASSERT_EQ(got.size(), 1001u);  // 1,000 of the flood and the metadata attempt
  EXPECT_EQ(got[0].resolved_address, "169.254.169.254");
  EXPECT_EQ(log.Dropped(sb), 8u * 256u - 1000u);
  // The command's own budget was not touched by the other names; past kMaxClients names, new
  // names share one budget, and the known ones keep theirs.
  for (size_t name = 8; name < BlockedEventLog::kMaxClients + 10; ++name) {
    log.Record(at(Blocked("x.test", 443, "not-allowlisted"), fmt::format("fake-{}", name)));
  }
  uint64_t mark = log.Mark(sb);
  log.Record(at(Blocked("mine.test", 443, "not-allowlisted"), "cmd-1"));
  EXPECT_EQ(log.Since(sb, mark).size(), 1u);
  EXPECT_EQ(log.Suppressed(sb, "cmd-1"), 0u);
}

// A command's violations: each distinct attempt once, metadata first, then the other refusals by
// address, then the rest in order; at most `max`, and a last one counting what is not listed.
TEST(EventsTest, BlockedViolationsListMetadataFirstAndCountTheRest) {
  std::vector<BlockedNetworkEgress> blocked;
  for (int i = 0; i < 70; ++i) blocked.push_back(Blocked(fmt::format("h{}.test", i), 443, "x"));
  blocked.push_back(blocked[0]);  // a repeat
  blocked.push_back(Blocked("10.0.0.1", 80, "always-denied:10.0.0.0/8 (private)", "10.0.0.1"));
  blocked.push_back(
      Blocked("169.254.169.254", 80, "always-denied:169.254.0.0/16 (metadata)", "169.254.169.254"));
  std::vector<Violation> v = BlockedViolations(blocked, 5, 0, 64);
  ASSERT_EQ(v.size(), 65u);
  EXPECT_EQ(v[0].data["host"], "169.254.169.254");
  EXPECT_EQ(v[1].data["host"], "10.0.0.1");
  EXPECT_EQ(v[2].data["host"], "h0.test");
  EXPECT_EQ(v[63].data["host"], "h61.test");
  EXPECT_EQ(v[64].kind, "BlockedNetworkEgressOmitted");
  // 73 events, 64 listed, 5 more suppressed by the log.
  EXPECT_EQ(v[64].data["omitted"], 14);
  // Nothing left out: no count.
  std::vector<BlockedNetworkEgress> few(blocked.begin(), blocked.begin() + 3);
  EXPECT_EQ(BlockedViolations(few, 0, 0, 64).size(), 3u);
  // Events the sandbox's log dropped while the command ran are said too.
  std::vector<Violation> dropped = BlockedViolations(few, 0, 7, 64);
  ASSERT_EQ(dropped.size(), 4u);
  EXPECT_EQ(dropped[3].kind, "BlockedNetworkEgressOmitted");
  EXPECT_EQ(dropped[3].data["dropped_from_log"], 7);
  EXPECT_EQ(dropped[3].data["omitted"], 0);
}

}  // namespace
}  // namespace airlock::netproxy
