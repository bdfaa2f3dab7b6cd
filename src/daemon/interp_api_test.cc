// The interpreter REST API against the real airlockd on loopback: a daemon process with a
// temporary data directory and keys made by `airlockd admin create-key`.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/client.h"
#include "nlohmann/json.hpp"

namespace airlock::daemon {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using Verb = boost::beast::http::verb;

struct Reply {
  int status = 0;
  json body;
};

class InterpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "airlockd runs as root";
    char tmpl[] = "/tmp/ia-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    key_a_ = CreateKey("a");
    key_b_ = CreateKey("b");
    ASSERT_FALSE(key_a_.empty());
    ASSERT_FALSE(key_b_.empty());
    StartDaemon();
  }

  void TearDown() override {
    for (const std::string& sb : sandboxes_) Call(Verb::delete_, "/v1/sandboxes/" + sb, "", key_a_);
    StopDaemon(SIGTERM);
    if (dir_.empty()) return;
    std::string log = ReadLog();
    EXPECT_THAT(log, Not(HasSubstr("AddressSanitizer"))) << log;
    EXPECT_THAT(log, Not(HasSubstr("runtime error:"))) << log;
    EXPECT_THAT(log, Not(HasSubstr("LeakSanitizer"))) << log;
    RemoveNodeCgroups();
    std::filesystem::remove_all(dir_);
  }

  std::string CreateKey(const std::string& name) {
    std::string cmd = std::string(AIRLOCKD_BIN) + " admin create-key --data-dir " + dir_ +
                      " --name " + name + " 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return "";
    char buf[256] = {};
    std::string out;
    while (std::fgets(buf, sizeof(buf), p) != nullptr) out = buf;
    ::pclose(p);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }

  void StartDaemon() {
    // One log for every daemon of the test (checked for sanitizer reports at the end); this
    // daemon's port is in what it appends.
    std::string log = dir_ + "/airlockd.log";
    size_t start = ReadLog().size();
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      std::freopen(log.c_str(), "a", stderr);
      std::freopen("/dev/null", "w", stdout);
      std::vector<std::string> args = {AIRLOCKD_BIN,  "--data-dir",      dir_,  "--listen",
                                       "127.0.0.1:0", "--reap-interval", "3600"};
      args.insert(args.end(), daemon_args_.begin(), daemon_args_.end());
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(AIRLOCKD_BIN, argv.data());
      ::_exit(127);
    }
    // airlockd names its port on stderr once it serves.
    for (int i = 0; i < 300 && port_ == 0; ++i) {
      std::istringstream in(ReadLog().substr(start));
      std::string line;
      while (std::getline(in, line)) {
        auto at = line.find("listening on port ");
        if (at != std::string::npos) port_ = std::stoi(line.substr(at + 18));
      }
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_NE(port_, 0) << "airlockd did not start; its log:\n" << ReadLog();
  }

  void StopDaemon(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
    port_ = 0;
  }

  // airlockd keeps its cgroup base (airlock/<node>) when it stops, for its next start; this
  // test's data directory, and so its node, ends here. Every sandbox cgroup under it must be
  // gone already (rmdir fails on a non-empty cgroup).
  void RemoveNodeCgroups() {
    std::ifstream in(dir_ + "/node-id");
    std::string node;
    std::getline(in, node);
    if (node.rfind("node-", 0) != 0) return;
    std::error_code ec;
    std::vector<std::string> roots = {"/sys/fs/cgroup"};
    for (const auto& e : std::filesystem::directory_iterator("/sys/fs/cgroup", ec)) {
      if (e.is_directory()) roots.push_back(e.path().string());
    }
    for (const std::string& root : roots) {
      std::string dir = root + "/airlock/" + node;
      if (::rmdir(dir.c_str()) != 0) {
        EXPECT_EQ(errno, ENOENT) << dir << ": " << strerror(errno);
      }
    }
  }

  std::string ReadLog() const {
    std::ifstream in(dir_ + "/airlockd.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  Reply Call(Verb verb, const std::string& target, const std::string& body,
             const std::string& key) {
    http::ClientOptions o;
    o.base_url = "http://127.0.0.1:" + std::to_string(port_);
    o.api_key = key;
    auto client = http::Client::Create(o);
    if (!client.ok()) return {};
    auto r = (*client)->Send(verb, target, body, "application/json");
    if (!r.ok()) return {};
    Reply out;
    out.status = r->status;
    out.body = json::parse(r->body, nullptr, false);
    return out;
  }
  Reply Post(const std::string& target, const json& body, const std::string& key) {
    return Call(Verb::post, target, body.dump(), key);
  }

  // Polls the session at `base` until its state is `state` (20 s at most).
  bool StateBecomes(const std::string& base, const std::string& state) {
    for (int i = 0; i < 400; ++i) {
      if (Call(Verb::get, base, "", key_a_).body.value("state", "") == state) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // A new interpreter session of key A; returns its id.
  std::string NewSession(const json& body) {
    Reply r = Post("/v1/interpreters", body, key_a_);
    EXPECT_EQ(r.status, 201) << r.body.dump();
    EXPECT_EQ(r.body.value("state", ""), "new");
    return r.body.value("id", "");
  }

  std::string dir_;
  std::string key_a_, key_b_;
  pid_t pid_ = 0;
  int port_ = 0;
  std::vector<std::string> sandboxes_;
  std::vector<std::string> daemon_args_;  // more airlockd flags for the next StartDaemon
};

TEST_F(InterpApiTest, CreateEvalConsoleGetDelete) {
  std::string id = NewSession({{"tools", json::array()}, {"limits", {{"exec_time_ms", 2000}}}});
  ASSERT_THAT(id, ::testing::StartsWith("is-"));

  Reply run = Post("/v1/interpreters/" + id + "/eval",
                   {{"script",
                     "console.log('hi', 1 + 1);\n"
                     "const doubled = [1, 2, 3].map(v => v * 2);\n"
                     "return {sum: doubled.reduce((a, b) => a + b, 0)};"}},
                   key_a_);
  ASSERT_EQ(run.status, 200) << run.body.dump();
  EXPECT_EQ(run.body["outcome"], "completed");
  EXPECT_EQ(run.body["state"], "finished");
  EXPECT_EQ(run.body["result"], json({{"sum", 12}}));

  Reply console = Call(Verb::get, "/v1/interpreters/" + id + "/console", "", key_a_);
  ASSERT_EQ(console.status, 200);
  EXPECT_EQ(console.body["console"], "hi 2\n");

  Reply got = Call(Verb::get, "/v1/interpreters/" + id, "", key_a_);
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(got.body["state"], "finished");
  EXPECT_EQ(got.body["result"]["result"], json({{"sum", 12}}));
  EXPECT_EQ(got.body["pending"], json::array());

  Reply again = Post("/v1/interpreters/" + id + "/eval", {{"script", "return 1"}}, key_a_);
  EXPECT_EQ(again.status, 409);
  EXPECT_THAT(again.body.value("message", ""), HasSubstr("is finished"));

  EXPECT_EQ(Call(Verb::delete_, "/v1/interpreters/" + id, "", key_a_).status, 200);
  EXPECT_EQ(Call(Verb::get, "/v1/interpreters/" + id, "", key_a_).status, 404);
  EXPECT_EQ(Call(Verb::delete_, "/v1/interpreters/" + id, "", key_a_).status, 404);
}

TEST_F(InterpApiTest, ScriptErrorsAndTimeoutsAreResultsNotHttpErrors) {
  std::string id = NewSession({{"limits", {{"exec_time_ms", 200}}}});
  Reply run = Post("/v1/interpreters/" + id + "/eval", {{"script", "for (;;) {}"}}, key_a_);
  ASSERT_EQ(run.status, 200) << run.body.dump();
  EXPECT_EQ(run.body["outcome"], "timeout");
  EXPECT_EQ(run.body["state"], "finished");
}

TEST_F(InterpApiTest, RequestErrors) {
  // Not JSON at all: 400; a well-formed body with a wrong field: 422.
  EXPECT_EQ(Call(Verb::post, "/v1/interpreters", "{not json", key_a_).status, 400);
  Reply unknown = Post("/v1/interpreters", {{"colour", "blue"}}, key_a_);
  EXPECT_EQ(unknown.status, 422);
  EXPECT_THAT(unknown.body.value("message", ""), HasSubstr("unknown field \"colour\""));
  Reply limit = Post("/v1/interpreters", {{"limits", {{"memory_bytes", 1}}}}, key_a_);
  EXPECT_EQ(limit.status, 422);
  EXPECT_THAT(limit.body.value("message", ""), HasSubstr("limits.memory_bytes"));
  Reply tool = Post("/v1/interpreters", {{"tools", {"shell"}}}, key_a_);
  EXPECT_EQ(tool.status, 422);
  EXPECT_THAT(tool.body.value("message", ""), HasSubstr("unknown tool \"shell\""));
  // Rule of two: sandbox.exec sees untrusted content; with the other two declared and no human
  // approval to gate the third, the session is refused.
  Reply rule =
      Post("/v1/interpreters",
           {{"tools", {"sandbox.exec"}}, {"declared", {"reads-sensitive-data", "changes-state"}}},
           key_a_);
  EXPECT_EQ(rule.status, 403) << rule.body.dump();

  EXPECT_EQ(Call(Verb::get, "/v1/interpreters/is-000000000000", "", key_a_).status, 404);
  EXPECT_EQ(Post("/v1/interpreters/is-000000000000/eval", {{"script", "1"}}, key_a_).status, 404);

  std::string id = NewSession({{"tools", {"human_approval"}}});
  Reply bad_eval = Post("/v1/interpreters/" + id + "/eval", {{"script", 5}}, key_a_);
  EXPECT_EQ(bad_eval.status, 422);
  // Another key's session does not exist for it.
  const std::string base = "/v1/interpreters/" + id;
  EXPECT_EQ(Call(Verb::get, base, "", key_b_).status, 404);
  EXPECT_EQ(Call(Verb::get, base + "/console", "", key_b_).status, 404);
  EXPECT_EQ(Post(base + "/eval", {{"script", "return 1"}}, key_b_).status, 404);
  EXPECT_EQ(Post(base + "/resume", {{"call_id", "call-1"}, {"result", true}}, key_b_).status, 404);
  EXPECT_EQ(Call(Verb::delete_, base, "", key_b_).status, 404);
  EXPECT_EQ(Call(Verb::get, base, "", key_a_).status, 200);

  // A tool outside the allowlist: the script's promise rejects with a clear error.
  Reply run = Post(base + "/eval",
                   {{"script",
                     "try { await tools.call('sandbox.exec', {sandbox_id: 'sb-x', argv: ['id']}); "
                     "return 'called'; } catch (e) { return e.message; }"}},
                   key_a_);
  ASSERT_EQ(run.status, 200) << run.body.dump();
  EXPECT_EQ(run.body["outcome"], "completed");
  EXPECT_THAT(run.body["result"].get<std::string>(),
              HasSubstr("tool 'sandbox.exec' is not allowed in this session"));
  // Resuming a session that is not paused is refused clearly.
  Reply resume = Post(base + "/resume", {{"call_id", "call-1"}, {"result", true}}, key_a_);
  EXPECT_EQ(resume.status, 409);
  EXPECT_THAT(resume.body.value("message", ""), HasSubstr("not paused"));
}

TEST_F(InterpApiTest, DurablePauseSurvivesKillNineAndRestart) {
  std::string id = NewSession({{"tools", {"human_approval"}}});
  const std::string base = "/v1/interpreters/" + id;
  Reply run = Post(base + "/eval",
                   {{"script",
                     "let counter = 41;\n"
                     "const greet = (n) => `hello ${n}`;\n"
                     "const notes = ['before'];\n"
                     "console.log('asking');\n"
                     "const ok = await tools.call('human_approval', {action: 'deploy'});\n"
                     "notes.push('after');\n"
                     "console.log('answered');\n"
                     "return {approved: ok.approved, counter: counter + 1, greeting: "
                     "greet(ok.who), notes};"}},
                   key_a_);
  ASSERT_EQ(run.status, 200) << run.body.dump();
  ASSERT_EQ(run.body["outcome"], "paused") << run.body.dump();
  EXPECT_EQ(run.body["state"], "paused");
  ASSERT_EQ(run.body["pending"].size(), 1u);
  const std::string call = run.body["pending"][0]["call_id"];
  EXPECT_EQ(run.body["pending"][0]["tool"], "human_approval");
  EXPECT_EQ(run.body["pending"][0]["args"], json({{"action", "deploy"}}));

  // The per-node snapshot key exists, readable by the owner only.
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/interp.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  StopDaemon(SIGKILL);
  StartDaemon();

  Reply got = Call(Verb::get, base, "", key_a_);
  ASSERT_EQ(got.status, 200) << got.body.dump();
  EXPECT_EQ(got.body["state"], "paused");
  ASSERT_EQ(got.body["pending"].size(), 1u);
  EXPECT_EQ(got.body["pending"][0]["call_id"], call);
  ASSERT_EQ(got.body["journal"].size(), 1u);
  EXPECT_EQ(got.body["journal"][0]["status"], "pending");

  Reply wrong = Post(base + "/resume", {{"call_id", "call-9"}, {"result", true}}, key_a_);
  EXPECT_EQ(wrong.status, 409);
  EXPECT_THAT(wrong.body.value("message", ""), HasSubstr("\"call-9\" is not awaiting"));
  Reply both =
      Post(base + "/resume", {{"call_id", call}, {"result", true}, {"error", "x"}}, key_a_);
  EXPECT_EQ(both.status, 422);

  Reply done = Post(base + "/resume",
                    {{"call_id", call}, {"result", {{"approved", true}, {"who", "ana"}}}}, key_a_);
  ASSERT_EQ(done.status, 200) << done.body.dump();
  EXPECT_EQ(done.body["outcome"], "completed") << done.body.dump();
  EXPECT_EQ(done.body["result"], json({{"approved", true},
                                       {"counter", 42},
                                       {"greeting", "hello ana"},
                                       {"notes", {"before", "after"}}}));
  EXPECT_EQ(done.body["console"], "asking\nanswered\n");

  Reply twice =
      Post(base + "/resume", {{"call_id", call}, {"result", {{"approved", false}}}}, key_a_);
  EXPECT_EQ(twice.status, 409);
  EXPECT_THAT(twice.body.value("message", ""), HasSubstr("is finished, not paused"));

  Reply after = Call(Verb::get, base, "", key_a_);
  EXPECT_EQ(after.body["state"], "finished");
  ASSERT_EQ(after.body["journal"].size(), 1u);
  EXPECT_EQ(after.body["journal"][0]["status"], "ok");
  EXPECT_EQ(after.body["journal"][0]["result"], json({{"approved", true}, {"who", "ana"}}));
}

TEST_F(InterpApiTest, ARunCutByKillNineIsTakenUpAgainFromItsLastState) {
  std::string id = NewSession({{"limits", {{"wall_time_ms", 3000}, {"exec_time_ms", 3000}}}});
  const std::string base = "/v1/interpreters/" + id;
  std::thread eval([&] { Post(base + "/eval", {{"script", "for (;;) {}"}}, key_a_); });
  const bool started = StateBecomes(base, "running");
  StopDaemon(SIGKILL);  // mid-run: the record says "running"
  eval.join();
  ASSERT_TRUE(started) << "the run never started";
  StartDaemon();
  EXPECT_EQ(Call(Verb::get, base, "", key_a_).body["state"], "running");
  Reply busy = Post(base + "/eval", {{"script", "return 7"}}, key_a_);
  EXPECT_EQ(busy.status, 409);
  EXPECT_THAT(busy.body.value("message", ""), HasSubstr("is running"));
  // Past its wall time (and the margin), the run counts as abandoned: the session is new again.
  std::string state = "running";
  for (int i = 0; i < 100 && state == "running"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    state = Call(Verb::get, base, "", key_a_).body.value("state", "");
  }
  EXPECT_EQ(state, "new");
  Reply run = Post(base + "/eval", {{"script", "return 7"}}, key_a_);
  ASSERT_EQ(run.status, 200) << run.body.dump();
  EXPECT_EQ(run.body["result"], 7);
}

TEST_F(InterpApiTest, OfConcurrentResumesOfOneCallExactlyOneRuns) {
  std::string id = NewSession({{"tools", {"human_approval"}}});
  const std::string base = "/v1/interpreters/" + id;
  Reply run =
      Post(base + "/eval",
           {{"script", "const a = await tools.call('human_approval', {}); return a.n;"}}, key_a_);
  ASSERT_EQ(run.body["outcome"], "paused") << run.body.dump();
  Reply replies[4];
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      replies[i] = Post(base + "/resume", {{"call_id", "call-1"}, {"result", {{"n", i}}}}, key_a_);
    });
  }
  for (auto& t : threads) t.join();
  int won = -1, refused = 0;
  for (int i = 0; i < 4; ++i) {
    if (replies[i].status == 200) {
      EXPECT_EQ(won, -1) << "two resumes ran";
      won = i;
      EXPECT_EQ(replies[i].body["result"], i);
    } else {
      EXPECT_EQ(replies[i].status, 409) << replies[i].body.dump();
      ++refused;
    }
  }
  ASSERT_NE(won, -1);
  EXPECT_EQ(refused, 3);
  Reply got = Call(Verb::get, base, "", key_a_);
  EXPECT_EQ(got.body["result"]["result"], won);
}

TEST_F(InterpApiTest, RunsBeyondTheNodesLimitAreRefusedNotQueued) {
  StopDaemon(SIGTERM);
  daemon_args_ = {"--workers", "4"};  // a quarter of the pool may run scripts: one
  StartDaemon();
  std::string busy = NewSession({{"limits", {{"exec_time_ms", 5000}}}});
  std::string other = NewSession(json::object());
  std::thread eval([&] {
    Post("/v1/interpreters/" + busy + "/eval", {{"script", "for (;;) {}"}}, key_a_);
  });
  // The busy run holds the node's only slot once its session says so.
  const bool started = StateBecomes("/v1/interpreters/" + busy, "running");
  Reply refused = Post("/v1/interpreters/" + other + "/eval", {{"script", "return 1"}}, key_a_);
  eval.join();
  ASSERT_TRUE(started) << "the busy run never started";
  EXPECT_EQ(refused.status, 429) << refused.body.dump();
  EXPECT_THAT(refused.body.value("message", ""), HasSubstr("the limit; retry later"));
  // The refused session was not touched: it runs once the node has room.
  Reply run = Post("/v1/interpreters/" + other + "/eval", {{"script", "return 1"}}, key_a_);
  EXPECT_EQ(run.status, 200) << run.body.dump();
  EXPECT_EQ(run.body["result"], 1);
}

TEST_F(InterpApiTest, ResumeWithAnErrorRejectsTheScriptsPromise) {
  std::string id = NewSession({{"tools", {"human_approval"}}});
  const std::string base = "/v1/interpreters/" + id;
  Reply run = Post(base + "/eval",
                   {{"script",
                     "try { await tools.call('human_approval', {}); return 'approved'; }"
                     " catch (e) { return 'refused: ' + e.message; }"}},
                   key_a_);
  ASSERT_EQ(run.body["outcome"], "paused") << run.body.dump();
  Reply done =
      Post(base + "/resume", {{"call_id", "call-1"}, {"error", "nobody answered"}}, key_a_);
  ASSERT_EQ(done.status, 200) << done.body.dump();
  EXPECT_EQ(done.body["result"], "refused: nobody answered");
}

TEST_F(InterpApiTest, SandboxExecRunsACommandInTheCallersSandbox) {
  Reply sb = Post("/v1/sandboxes", {{"spec", json::object()}}, key_a_);
  ASSERT_EQ(sb.status, 201) << sb.body.dump();
  const std::string sandbox = sb.body["id"];
  sandboxes_.push_back(sandbox);

  std::string id = NewSession({{"tools", {"sandbox.exec"}}, {"limits", {{"wall_time_ms", 60000}}}});
  Reply run =
      Post("/v1/interpreters/" + id + "/eval",
           {{"script", "const r = await tools.call('sandbox.exec', {sandbox_id: '" + sandbox +
                           "', argv: ['sh', '-c', 'echo hello-from-$((6*7))']});\n"
                           "return {exit: r.exit_code, out: r.stdout_preview};"}},
           key_a_);
  ASSERT_EQ(run.status, 200) << run.body.dump();
  ASSERT_EQ(run.body["outcome"], "completed") << run.body.dump();
  EXPECT_EQ(run.body["result"]["exit"], 0);
  EXPECT_THAT(run.body["result"]["out"].get<std::string>(), HasSubstr("hello-from-42"));

  // Key B's script cannot reach key A's sandbox.
  Reply other = Post("/v1/interpreters", {{"tools", {"sandbox.exec"}}}, key_b_);
  ASSERT_EQ(other.status, 201);
  Reply denied =
      Post("/v1/interpreters/" + other.body["id"].get<std::string>() + "/eval",
           {{"script", "try { await tools.call('sandbox.exec', {sandbox_id: '" + sandbox +
                           "', argv: ['id']}); return 'ran'; }"
                           " catch (e) { return e.message; }"}},
           key_b_);
  ASSERT_EQ(denied.status, 200) << denied.body.dump();
  EXPECT_EQ(denied.body["result"], "sandbox.exec: no sandbox " + sandbox);

  // Bad arguments are the script's error, naming the field.
  std::string bad = NewSession({{"tools", {"sandbox.exec"}}});
  Reply args = Post("/v1/interpreters/" + bad + "/eval",
                    {{"script", "try { await tools.call('sandbox.exec', {sandbox_id: '" + sandbox +
                                    "'}); } catch (e) { return e.message; }"}},
                    key_a_);
  EXPECT_THAT(args.body["result"].get<std::string>(), HasSubstr("argv"));
}

TEST_F(InterpApiTest, SandboxExecIntoANetworkedSandboxNeedsChangesStateAndThenApproval) {
  Reply sb =
      Post("/v1/sandboxes", {{"spec", {{"network", {{"profile", "dependency-egress"}}}}}}, key_a_);
  ASSERT_EQ(sb.status, 201) << sb.body.dump();
  const std::string sandbox = sb.body["id"];
  sandboxes_.push_back(sandbox);
  const std::string call =
      "await tools.call('sandbox.exec', {sandbox_id: '" + sandbox + "', argv: ['echo', 'out']})";

  // Undeclared: the command could communicate externally, so the call is refused.
  std::string quiet = NewSession({{"tools", {"sandbox.exec"}}});
  Reply refused = Post(
      "/v1/interpreters/" + quiet + "/eval",
      {{"script", "try { " + call + "; return 'ran'; } catch (e) { return e.message; }"}}, key_a_);
  ASSERT_EQ(refused.status, 200) << refused.body.dump();
  EXPECT_THAT(refused.body["result"].get<std::string>(),
              HasSubstr("network profile \"dependency-egress\""));
  EXPECT_THAT(refused.body["result"].get<std::string>(),
              HasSubstr("did not declare changes-state"));

  // All three capabilities with human_approval: the exec waits for an approval, then runs.
  std::string gated = NewSession({{"tools", {"sandbox.exec", "human_approval"}},
                                  {"declared", {"reads-sensitive-data", "changes-state"}}});
  const std::string base = "/v1/interpreters/" + gated;
  Reply run = Post(base + "/eval",
                   {{"script",
                     "let first;\n"
                     "try { " +
                         call +
                         "; first = 'ran'; } catch (e) { first = e.message; }\n"
                         "const ok = await tools.call('human_approval', {action: 'echo'});\n"
                         "const r = " +
                         call +
                         ";\n"
                         "return {first, exit: r.exit_code, out: r.stdout_preview};"}},
                   key_a_);
  ASSERT_EQ(run.status, 200) << run.body.dump();
  ASSERT_EQ(run.body["outcome"], "paused") << run.body.dump();
  Reply done = Post(
      base + "/resume",
      {{"call_id", run.body["pending"][0]["call_id"]}, {"result", {{"approved", true}}}}, key_a_);
  ASSERT_EQ(done.status, 200) << done.body.dump();
  ASSERT_EQ(done.body["outcome"], "completed") << done.body.dump();
  EXPECT_THAT(done.body["result"]["first"].get<std::string>(), HasSubstr("human_approval"));
  EXPECT_EQ(done.body["result"]["exit"], 0);
  EXPECT_THAT(done.body["result"]["out"].get<std::string>(), HasSubstr("out"));
}

}  // namespace
}  // namespace airlock::daemon
