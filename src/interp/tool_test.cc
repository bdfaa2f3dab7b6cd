#include "interp/tool.h"

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "interp/test_util.h"

namespace airlock::interp {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

std::shared_ptr<Tool> Echo() {
  return test::FnTool("echo", [](const json& args) -> absl::StatusOr<json> { return args; });
}

// An immediate tool that answers from another thread after `delay`.
class SlowTool : public Tool {
 public:
  explicit SlowTool(std::chrono::milliseconds delay) : delay_(delay) { info_.name = "slow"; }
  ~SlowTool() override {
    for (auto& t : threads_) t.join();
  }
  const ToolInfo& info() const override { return info_; }
  void Start(const ToolCall& call, ToolDone done) override {
    std::string args = call.args_json;
    threads_.emplace_back([done = std::move(done), args, delay = delay_] {
      std::this_thread::sleep_for(delay);
      done(ToolResult::Value(args));
    });
  }

 private:
  ToolInfo info_;
  std::chrono::milliseconds delay_;
  std::vector<std::thread> threads_;
};

TEST(ToolTest, HostFunctionRoundTrip) {
  SessionOptions options;
  options.tools = {Echo()};
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, R"JS(
    const r = await tools.call('echo', {text: 'héllo', n: [1, 2.5, null], nested: {ok: true}});
    return [r.text, r.n, r.nested.ok];
  )JS");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(r.result_json, "[\"héllo\",[1,2.5,null],true]");
  ASSERT_EQ(session->journal().size(), 1u);
  const JournalEntry& e = session->journal()[0];
  EXPECT_EQ(e.call_id, "call-1");
  EXPECT_EQ(e.tool, "echo");
  EXPECT_EQ(e.status, JournalEntry::Status::kOk);
  EXPECT_THAT(e.args_json, HasSubstr("héllo"));
  EXPECT_EQ(json::parse(e.result), json::parse(e.args_json));
  EXPECT_GT(e.started_unix_ms, 0);
  EXPECT_GE(e.finished_unix_ms, e.started_unix_ms);
}

TEST(ToolTest, ToolErrorRejectsWithAnError) {
  SessionOptions options;
  options.tools = {test::FnTool("fail", [](const json&) -> absl::StatusOr<json> {
    return absl::NotFoundError("no such record");
  })};
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, R"JS(
    try { await tools.call('fail', {}); } catch (e) { return [e instanceof Error, e.message]; }
  )JS");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(r.result_json, "[true,\"no such record\"]");
  EXPECT_EQ(session->journal()[0].status, JournalEntry::Status::kError);
}

TEST(ToolTest, ToolNotInTheAllowlistIsRefused) {
  SessionOptions options;
  options.tools = {Echo()};
  auto session = test::NewSession(std::move(options));
  RunResult r =
      test::Run(*session, "await tools.call('sandbox.exec', {argv: ['rm', '-rf', '/']});");
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_THAT(r.error, HasSubstr("tool 'sandbox.exec' is not allowed in this session (allowed: "
                                 "echo)"));
  ASSERT_EQ(session->journal().size(), 1u);
  EXPECT_EQ(session->journal()[0].status, JournalEntry::Status::kRefused);
}

TEST(ToolTest, ArgumentsThatAreNotJsonAreRefused) {
  SessionOptions options;
  options.tools = {Echo()};
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, R"JS(
    const a = {}; a.self = a;
    try { await tools.call('echo', a); } catch (e) { return e.message; }
  )JS");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_THAT(r.result_json, HasSubstr("arguments are not JSON"));
}

TEST(ToolTest, InFlightLimit) {
  auto slow = std::make_shared<SlowTool>(std::chrono::milliseconds(20));
  SessionOptions options;
  options.tools = {slow};
  options.limits.max_in_flight_calls = 2;
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, R"JS(
    const calls = [1, 2, 3].map((i) => tools.call('slow', i));
    const settled = await Promise.allSettled(calls);
    const more = await tools.call('slow', 4);  // fine once the others are done
    return settled.map((s) => s.status === 'fulfilled' ? s.value : s.reason.message).concat(more);
  )JS");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  json v = json::parse(r.result_json);
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[1], 2);
  EXPECT_THAT(v[2].get<std::string>(), HasSubstr("too many calls in flight (2, the limit)"));
  EXPECT_EQ(v[3], 4);
}

TEST(ToolTest, TotalCallLimit) {
  SessionOptions options;
  options.tools = {Echo()};
  options.limits.max_total_calls = 3;
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, "for (let i = 0; i < 10; i++) await tools.call('echo', i);");
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_THAT(r.error, HasSubstr("call limit reached (3 calls per script)"));
  EXPECT_EQ(session->journal().size(), 4u);
}

TEST(ToolTest, RefusalsInALoopKeepTheJournalBounded) {
  SessionOptions options;
  options.limits.exec_time = std::chrono::milliseconds(200);
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, "for (;;) tools.call('nope', 'x'.repeat(10000));");
  EXPECT_EQ(r.outcome, Outcome::kTimeout);
  EXPECT_EQ(session->journal().size(), 100u);
}

TEST(ToolTest, JournalSizeIsBounded) {
  SessionOptions options;
  options.tools = {Echo()};
  options.limits.max_journal_bytes = 100000;
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, R"JS(
    const big = 'x'.repeat(30000);
    let ok = 0;
    try { for (;;) { await tools.call('echo', big); ok++; } } catch (e) { return [ok, e.message]; }
  )JS");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  json v = json::parse(r.result_json);
  EXPECT_EQ(v[0], 1);  // 30 KB of arguments and 30 KB of result per call
  EXPECT_THAT(v[1].get<std::string>(), HasSubstr("does not fit the session's journal"));
}

TEST(ToolTest, ImmediateToolsAnswerFromOtherThreads) {
  auto slow = std::make_shared<SlowTool>(std::chrono::milliseconds(5));
  SessionOptions options;
  options.tools = {slow};
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, R"JS(
    const rs = await Promise.all([1, 2, 3, 4].map((i) => tools.call('slow', {i})));
    return rs.map((x) => x.i);
  )JS");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(r.result_json, "[1,2,3,4]");
}

TEST(ToolTest, WallTimeLimitWhileWaitingForATool) {
  auto slow = std::make_shared<SlowTool>(std::chrono::milliseconds(300));
  SessionOptions options;
  options.tools = {slow};
  options.limits.wall_time = std::chrono::milliseconds(50);
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, "await tools.call('slow', 1);");
  EXPECT_EQ(r.outcome, Outcome::kTimeout);
  EXPECT_THAT(r.error, HasSubstr("waiting for slow (call-1)"));
}

TEST(ToolTest, InvalidJsonFromAToolBecomesAnError) {
  class Bad : public Tool {
   public:
    Bad() { info_.name = "bad"; }
    const ToolInfo& info() const override { return info_; }
    void Start(const ToolCall&, ToolDone done) override { done(ToolResult::Value("{nope")); }
    ToolInfo info_;
  };
  SessionOptions options;
  options.tools = {std::make_shared<Bad>()};
  auto session = test::NewSession(std::move(options));
  RunResult r =
      test::Run(*session, "try { await tools.call('bad'); } catch (e) { return e.message; }");
  EXPECT_EQ(r.result_json, "\"tool 'bad' returned invalid JSON\"");
}

TEST(ToolTest, RuleOfTwoRefusesAllThreeWithoutApproval) {
  SessionOptions options;
  auto ok = [](const json&) -> absl::StatusOr<json> { return json(true); };
  options.tools = {test::FnTool("read_secrets", ok, {Capability::kReadsSensitiveData}),
                   test::FnTool("fetch_page", ok, {Capability::kSeesUntrustedContent}),
                   test::FnTool("send_email", ok, {Capability::kChangesState})};
  auto session = test::Interp().NewSession(std::move(options));
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(Message(session.status())), HasSubstr("rule of two"));
}

TEST(ToolTest, RuleOfTwoCountsDeclaredCapabilities) {
  SessionOptions options;
  auto ok = [](const json&) -> absl::StatusOr<json> { return json(true); };
  options.tools = {test::FnTool("read_secrets", ok, {Capability::kReadsSensitiveData}),
                   test::FnTool("send_email", ok, {Capability::kChangesState})};
  options.declared = {Capability::kSeesUntrustedContent};
  EXPECT_EQ(test::Interp().NewSession(std::move(options)).status().code(),
            absl::StatusCode::kPermissionDenied);
  SessionOptions two;
  two.tools = {test::FnTool("read_secrets", ok, {Capability::kReadsSensitiveData}),
               test::FnTool("send_email", ok, {Capability::kChangesState})};
  EXPECT_TRUE(test::Interp().NewSession(std::move(two)).ok());
}

TEST(ToolTest, RuleOfTwoApprovalGatesEachStateChange) {
  SessionOptions options;
  auto ok = [](const json&) -> absl::StatusOr<json> { return json("sent"); };
  options.tools = {test::FnTool("read_secrets", ok, {Capability::kReadsSensitiveData}),
                   test::FnTool("fetch_page", ok, {Capability::kSeesUntrustedContent}),
                   test::FnTool("send_email", ok, {Capability::kChangesState}),
                   MakeHumanApprovalTool()};
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, R"JS(
    const out = [];
    try { await tools.call('send_email', {}); } catch (e) { out.push(e.message); }
    const ok = await tools.call('human_approval', {action: 'send one email'});
    out.push(ok.approved);
    out.push(await tools.call('send_email', {}));
    try { await tools.call('send_email', {}); } catch (e) { out.push(e.message); }
    return out;
  )JS");
  ASSERT_EQ(r.outcome, Outcome::kPaused) << r.error;
  ASSERT_EQ(r.pending.size(), 1u);
  r = test::Resume(*session, r.pending[0].id, ToolResult::Value(R"({"approved": true})"));
  ASSERT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  json v = json::parse(r.result_json);
  EXPECT_THAT(v[0].get<std::string>(), HasSubstr("needs an approved human_approval call first"));
  EXPECT_EQ(v[1], true);
  EXPECT_EQ(v[2], "sent");
  EXPECT_THAT(v[3].get<std::string>(), HasSubstr("rule of two"));
}

TEST(ToolTest, CapabilityNames) {
  CapabilitySet s{Capability::kReadsSensitiveData, Capability::kChangesState};
  EXPECT_EQ(s.ToString(), "reads-sensitive-data,changes-state");
  EXPECT_EQ(*ParseCapability("sees-untrusted-content"), Capability::kSeesUntrustedContent);
  EXPECT_FALSE(ParseCapability("everything").ok());
}

}  // namespace
}  // namespace airlock::interp
