#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "interp/internal/snapshot_format.h"
#include "interp/snapshot_store.h"
#include "interp/test_util.h"

namespace airlock::interp {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// An orchestration script: state in locals and closures across two durable pauses.
constexpr char kScript[] = R"JS(
  const seen = [];
  const note = (x) => { seen.push(x); return seen.length; };
  const data = await tools.call('lookup', {id: 7});
  note(data.name);
  const first = await tools.call('human_approval', {action: 'deploy ' + data.name});
  note(first.approved ? 'approved' : 'denied');
  if (!first.approved) return {deployed: false, seen};
  console.log('deploying', data.name);
  const second = await tools.call('human_approval', {action: 'notify the team'});
  note(second);
  return {deployed: true, seen, counter: note('end')};
)JS";

SessionOptions Options() {
  SessionOptions options;
  options.tools = {test::FnTool("lookup",
                                [](const json& args) -> absl::StatusOr<json> {
                                  return json{{"id", args["id"]}, {"name", "api"}};
                                }),
                   MakeHumanApprovalTool()};
  options.hmac_key = test::TestKey();
  return options;
}

std::string PausedSnapshot() {
  auto session = test::NewSession(Options());
  RunResult r = test::Run(*session, kScript);
  EXPECT_EQ(r.outcome, Outcome::kPaused) << r.error;
  auto snap = session->Snapshot();
  EXPECT_TRUE(snap.ok()) << snap.status();
  return snap.ok() ? *snap : std::string();
}

TEST(SnapshotTest, PausesOnDurableCallsOnly) {
  auto session = test::NewSession(Options());
  RunResult r = test::Run(*session, kScript);
  ASSERT_EQ(r.outcome, Outcome::kPaused) << r.error;
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].id, "call-2");
  EXPECT_EQ(r.pending[0].name, "human_approval");
  EXPECT_EQ(json::parse(r.pending[0].args_json)["action"], "deploy api");
  EXPECT_EQ(session->state(), SessionState::kPaused);
  ASSERT_EQ(session->journal().size(), 2u);
  EXPECT_EQ(session->journal()[1].status, JournalEntry::Status::kPending);
}

TEST(SnapshotTest, ResumeInTheSameProcess) {
  auto session = test::NewSession(Options());
  RunResult r = test::Run(*session, kScript);
  r = test::Resume(*session, "call-2", ToolResult::Value(R"({"approved": true})"));
  ASSERT_EQ(r.outcome, Outcome::kPaused) << r.error;
  EXPECT_EQ(r.pending[0].id, "call-3");
  r = test::Resume(*session, "call-3", ToolResult::Value("true"));
  ASSERT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(json::parse(r.result_json),
            json::parse(R"({"deployed": true, "seen": ["api", "approved", true, "end"],
                            "counter": 4})"));
  EXPECT_EQ(session->console(), "deploying api\n");
}

TEST(SnapshotTest, ResumeTwiceFromOneSnapshotWithDifferentAnswers) {
  std::string snap = PausedSnapshot();
  ASSERT_FALSE(snap.empty());

  auto yes = test::Interp().Restore(snap, Options());
  ASSERT_TRUE(yes.ok()) << yes.status();
  RunResult r = test::Resume(**yes, "call-2", ToolResult::Value(R"({"approved": true})"));
  ASSERT_EQ(r.outcome, Outcome::kPaused) << r.error;
  r = test::Resume(**yes, "call-3", ToolResult::Value("false"));
  ASSERT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(json::parse(r.result_json)["seen"], json::parse(R"(["api","approved",false,"end"])"));

  auto no = test::Interp().Restore(snap, Options());
  ASSERT_TRUE(no.ok()) << no.status();
  r = test::Resume(**no, "call-2", ToolResult::Value(R"({"approved": false})"));
  ASSERT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(json::parse(r.result_json),
            json::parse(R"({"deployed":false,"seen":["api","denied"]})"));
}

TEST(SnapshotTest, ResumeWithAnErrorRejectsTheCall) {
  auto session = test::Interp().Restore(PausedSnapshot(), Options());
  ASSERT_TRUE(session.ok()) << session.status();
  RunResult r = test::Resume(**session, "call-2", ToolResult::Error("nobody answered in 24h"));
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_THAT(r.error, HasSubstr("Error: nobody answered in 24h"));
}

TEST(SnapshotTest, RestoredSessionKeepsItsJournalAndLimits) {
  SessionOptions options = Options();
  options.limits.max_total_calls = 2;
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, kScript);
  ASSERT_EQ(r.outcome, Outcome::kPaused);
  auto snap = session->Snapshot();
  ASSERT_TRUE(snap.ok());
  // The restoring side asks for more calls: the snapshot's limits win.
  SessionOptions wider = Options();
  wider.limits.max_total_calls = 100;
  auto restored = test::Interp().Restore(*snap, std::move(wider));
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->journal().size(), 2u);
  EXPECT_EQ((*restored)->id(), session->id());
  r = test::Resume(**restored, "call-2", ToolResult::Value(R"({"approved": true})"));
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_THAT(r.error, HasSubstr("call limit reached (2 calls per script)"));
}

TEST(SnapshotTest, UnknownCallIdIsNotFound) {
  auto session = test::Interp().Restore(PausedSnapshot(), Options());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ((*session)->Resume("call-9", ToolResult::Value("1")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*session)->Resume("call-1", ToolResult::Value("1")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SnapshotTest, OnlyPausedSessionsSnapshot) {
  auto session = test::NewSession(Options());
  EXPECT_EQ(session->Snapshot().status().code(), absl::StatusCode::kFailedPrecondition);
  test::Run(*session, "return 1;");
  EXPECT_EQ(session->Snapshot().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SnapshotTest, TamperedSnapshotIsRefused) {
  std::string snap = PausedSnapshot();
  ASSERT_GT(snap.size(), 1000u);
  for (size_t at : {size_t{20}, snap.size() / 2, snap.size() - 1}) {
    std::string bad = snap;
    bad[at] = static_cast<char>(bad[at] ^ 0x01);
    auto r = test::Interp().Restore(bad, Options());
    ASSERT_FALSE(r.ok()) << "flipped byte " << at;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
    EXPECT_THAT(std::string(Message(r.status())), HasSubstr("modified"));
  }
  auto truncated = test::Interp().Restore(snap.substr(0, snap.size() - 10), Options());
  EXPECT_FALSE(truncated.ok());
  EXPECT_EQ(test::Interp().Restore("hello", Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SnapshotTest, WrongKeyIsRefused) {
  std::string snap = PausedSnapshot();
  SessionOptions other = Options();
  other.hmac_key = std::string(32, 'x');
  EXPECT_EQ(test::Interp().Restore(snap, std::move(other)).status().code(),
            absl::StatusCode::kPermissionDenied);
  SessionOptions none = Options();
  none.hmac_key.clear();
  EXPECT_EQ(test::Interp().Restore(snap, std::move(none)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Re-signs the snapshot as if another build of the .wasm had written it.
std::string AsOtherBuild(const std::string& snap) {
  auto image = internal::DecodeSnapshot(snap, test::TestKey(), Interpreter::BuildId(),
                                        internal::BuildCheck::kSameBuild);
  EXPECT_TRUE(image.ok()) << image.status();
  image->build_id = std::string(64, 'f');
  auto other = internal::EncodeSnapshot(*image, test::TestKey());
  EXPECT_TRUE(other.ok());
  return *other;
}

TEST(SnapshotTest, AnotherBuildIsRefusedAndReplayWorks) {
  std::string other = AsOtherBuild(PausedSnapshot());
  auto restored = test::Interp().Restore(other, Options());
  ASSERT_FALSE(restored.ok());
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(Message(restored.status())),
              HasSubstr("written by interpreter build ffffffffffff"));
  EXPECT_THAT(std::string(Message(restored.status())), HasSubstr("replay its journal"));

  // Replay: the lookup is answered from the journal (the tool is not called again).
  int lookups = 0;
  SessionOptions options = Options();
  options.tools[0] = test::FnTool("lookup", [&lookups](const json&) -> absl::StatusOr<json> {
    ++lookups;
    return json("not from the journal");
  });
  auto replayed = test::Interp().Replay(other, std::move(options));
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(lookups, 0);
  EXPECT_EQ((*replayed)->state(), SessionState::kPaused);
  RunResult r = test::Resume(**replayed, "call-2", ToolResult::Value(R"({"approved": false})"));
  ASSERT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(json::parse(r.result_json)["seen"], json::parse(R"(["api","denied"])"));
}

TEST(SnapshotTest, ReplayOfADivergingScriptFails) {
  // A script whose calls depend on the clock cannot be replayed faithfully.
  SessionOptions options = Options();
  auto session = test::NewSession(Options());
  RunResult r = test::Run(*session, R"JS(
    await tools.call('lookup', {id: Date.now()});
    await tools.call('human_approval', {});
  )JS");
  ASSERT_EQ(r.outcome, Outcome::kPaused) << r.error;
  auto snap = session->Snapshot();
  ASSERT_TRUE(snap.ok());
  usleep(5000);
  auto replayed = test::Interp().Replay(*snap, Options());
  ASSERT_FALSE(replayed.ok());
  EXPECT_THAT(std::string(Message(replayed.status())), HasSubstr("replay diverged at call-1"));
}

TEST(SnapshotTest, ReplayRefusesCallsThatAreNotInTheJournal) {
  // A journal that lost its last entry (the pending approval): the replayed script's call of
  // human_approval has nothing to match and must not reach the tool.
  auto image = internal::DecodeSnapshot(PausedSnapshot(), test::TestKey(), Interpreter::BuildId(),
                                        internal::BuildCheck::kSameBuild);
  ASSERT_TRUE(image.ok()) << image.status();
  json state = json::parse(image->host_state);
  state["journal"].erase(state["journal"].size() - 1);
  image->host_state = state.dump();
  auto edited = internal::EncodeSnapshot(*image, test::TestKey());
  ASSERT_TRUE(edited.ok());
  int notified = 0;
  SessionOptions options = Options();
  options.tools[1] = MakeHumanApprovalTool([&notified](const ToolCall&) { ++notified; });
  auto replayed = test::Interp().Replay(*edited, std::move(options));
  ASSERT_FALSE(replayed.ok());
  EXPECT_THAT(std::string(Message(replayed.status())),
              HasSubstr("replay diverged at call-2: the script made a call (human_approval) "
                        "that is not in its journal"));
  EXPECT_EQ(notified, 0);
}

// A correctly signed snapshot whose contents are garbage (a leaked key, or a bug): the guest may
// fail in any way, the host must not.
TEST(SnapshotTest, SignedGarbageNeverHurtsTheHost) {
  auto image = internal::DecodeSnapshot(PausedSnapshot(), test::TestKey(), Interpreter::BuildId(),
                                        internal::BuildCheck::kSameBuild);
  ASSERT_TRUE(image.ok()) << image.status();
  const json state = json::parse(image->host_state);
  uint32_t seed = 12345;
  auto next = [&seed] { return seed = seed * 1103515245u + 12345u; };
  for (int round = 0; round < 40; ++round) {
    internal::SnapshotImage bad = *image;
    json s = state;
    switch (round % 4) {
      case 0:  // guest pointers
        s["main_promise"] = next();
        s["pending"][0]["resolve"] = next() % (1u << 24);
        break;
      case 1:
        s["guest"]["ctx"] = next() % (1u << 24);
        s["guest"]["stack_pointer"] = next();
        break;
      case 2:  // memory contents
        for (int k = 0; k < 64; ++k) bad.data[next() % bad.data.size()] = static_cast<char>(next());
        break;
      case 3:
        s["pending"][0]["journal_index"] = 99;
        s["pages"] = 3;
        break;
    }
    bad.host_state = s.dump();
    auto signed_bad = internal::EncodeSnapshot(bad, test::TestKey());
    ASSERT_TRUE(signed_bad.ok());
    auto session = test::Interp().Restore(*signed_bad, Options());
    if (!session.ok()) continue;
    auto r = (*session)->Resume("call-2", ToolResult::Value(R"({"approved": true})"));
    (void)r;  // any outcome, any error: only the host's survival is checked
  }
  auto fine = test::Interp().Restore(PausedSnapshot(), Options());
  ASSERT_TRUE(fine.ok());
  RunResult r = test::Resume(**fine, "call-2", ToolResult::Value(R"({"approved": false})"));
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
}

TEST(SnapshotTest, SnapshotOfASmallStateIsSmall) {
  std::string snap = PausedSnapshot();
  EXPECT_LT(snap.size(), 100u * 1024);
}

TEST(SnapshotTest, DurablePauseAcrossAProcessExit) {
  char dir_template[] = "/tmp/airlock-interp-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string dir = dir_template;
  auto store = FileSnapshotStore::Open(dir + "/snaps");
  ASSERT_TRUE(store.ok()) << store.status();

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: runs to the pause, stores the snapshot and exits without cleaning up.
    auto interp = Interpreter::Create();
    if (!interp.ok()) _exit(10);
    auto session = (*interp)->NewSession(Options());
    if (!session.ok()) _exit(11);
    auto r = (*session)->Run(kScript);
    if (!r.ok() || r->outcome != Outcome::kPaused) _exit(12);
    auto snap = (*session)->Snapshot();
    if (!snap.ok() || !(*store)->Put("run-1", *snap).ok()) _exit(13);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);

  auto snap = (*store)->Get("run-1");
  ASSERT_TRUE(snap.ok()) << snap.status();
  auto session = test::Interp().Restore(*snap, Options());
  ASSERT_TRUE(session.ok()) << session.status();
  RunResult r = test::Resume(**session, "call-2", ToolResult::Value(R"({"approved": true})"));
  ASSERT_EQ(r.outcome, Outcome::kPaused) << r.error;
  // Snapshot again, and resume that in this process.
  auto again = (*session)->Snapshot();
  ASSERT_TRUE(again.ok());
  auto third = test::Interp().Restore(*again, Options());
  ASSERT_TRUE(third.ok()) << third.status();
  r = test::Resume(**third, "call-3", ToolResult::Value("true"));
  ASSERT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(json::parse(r.result_json)["counter"], 4);
  EXPECT_EQ((*third)->console(), "deploying api\n");
  EXPECT_TRUE((*store)->Delete("run-1").ok());
  EXPECT_EQ((*store)->Get("run-1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(RemoveTree(dir).ok());
}

TEST(SnapshotStoreTest, RefusesBadNames) {
  char dir_template[] = "/tmp/airlock-interp-store-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  auto store = FileSnapshotStore::Open(dir_template);
  ASSERT_TRUE(store.ok());
  for (const char* name : {"", "../x", "a/b", ".hidden"}) {
    EXPECT_EQ((*store)->Put(name, "x").code(), absl::StatusCode::kInvalidArgument) << name;
  }
  EXPECT_TRUE(RemoveTree(dir_template).ok());
}

TEST(KeyFileTest, CreatedOnceThenReused) {
  char dir_template[] = "/tmp/airlock-interp-key-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string path = std::string(dir_template) + "/state/interp.key";
  auto key = LoadOrCreateKeyFile(path);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->size(), 32u);
  auto again = LoadOrCreateKeyFile(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*key, *again);
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  EXPECT_EQ(LoadOrCreateKeyFile(path).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(RemoveTree(dir_template).ok());
}

}  // namespace
}  // namespace airlock::interp
