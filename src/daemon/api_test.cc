// API tests against a real airlockd on loopback (src/daemon/testing/test_daemon.h): every
// endpoint, every error answer (status, code, and a message naming what was wrong), and the
// fault cases of issue 5 (kill -9 during running commands, concurrent idempotent creates, a
// client leaving a stream). Needs root (the daemon runs sandboxes); skipped otherwise.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/files.h"
#include "common/unique_fd.h"
#include "daemon/testing/test_daemon.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace airlock::daemon {
namespace {

using json = nlohmann::json;
using testing::Api;
using testing::ApiResponse;
using ::testing::HasSubstr;
using testing::TestDaemon;
using Verb = boost::beast::http::verb;

// Asserts an error answer: the status, the body's code, a message naming `what`, and a request
// id.
void ExpectError(const ApiResponse& r, int status, std::string_view code, std::string_view what) {
  EXPECT_EQ(r.status, status) << r.Describe();
  EXPECT_EQ(r.code(), code) << r.Describe();
  EXPECT_THAT(r.message(), HasSubstr(std::string(what))) << r.Describe();
  ASSERT_TRUE(r.json.is_object()) << r.Describe();
  EXPECT_FALSE(r.json.value("request_id", "").empty()) << r.Describe();
}

// "/v1/sandboxes/ID" followed by `rest`.
std::string Sb(const std::string& id, std::string_view rest = "") {
  return fmt::format("/v1/sandboxes/{}{}", id, rest);
}

class DaemonApiTest : public ::testing::Test {
 protected:
  // Where the tests' repositories are: the daemon's only --git-local-root.
  static constexpr const char* kRepoRoot = "/tmp/airlock-api-repos";

  static void SetUpTestSuite() {
    if (::geteuid() != 0) return;
    ::mkdir(kRepoRoot, 0700);
    auto d = TestDaemon::Start({.extra_args = {"--git-local-root", kRepoRoot}});
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = d->release();
    auto a = daemon_->CreateKey("alice");
    auto b = daemon_->CreateKey("bob");
    ASSERT_TRUE(a.ok() && b.ok());
    alice_key_ = new std::string(*a);
    bob_key_ = new std::string(*b);
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
    delete alice_key_;
    delete bob_key_;
  }
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: airlockd runs sandboxes";
    ASSERT_NE(daemon_, nullptr);
    ASSERT_TRUE(daemon_->running()) << daemon_->log();
  }

  Api alice() { return Api(daemon_, *alice_key_); }
  Api bob() { return Api(daemon_, *bob_key_); }

  // A running sandbox of alice's, destroyed at the end of the test.
  std::string NewSandbox(json body = {{"spec", json::object()}}) {
    ApiResponse r;
    std::string id = alice().CreateSandbox(body, &r);
    EXPECT_FALSE(id.empty()) << r.Describe();
    if (!id.empty()) made_.push_back(id);
    return id;
  }
  void TearDown() override {
    for (const std::string& id : made_) alice().Delete("/v1/sandboxes/" + id);
  }

  static TestDaemon* daemon_;
  static std::string* alice_key_;
  static std::string* bob_key_;
  std::vector<std::string> made_;
};

TestDaemon* DaemonApiTest::daemon_ = nullptr;
std::string* DaemonApiTest::alice_key_ = nullptr;
std::string* DaemonApiTest::bob_key_ = nullptr;

// ---- public endpoints ----

TEST_F(DaemonApiTest, HealthReadyAndMetricsNeedNoKey) {
  Api anonymous(daemon_, "");
  ApiResponse h = anonymous.Get("/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "ok\n");
  ApiResponse ready = anonymous.Get("/readyz");
  EXPECT_EQ(ready.status, 200) << ready.Describe();
  EXPECT_EQ(ready.json.value("ready", false), true) << ready.Describe();
  ApiResponse m = anonymous.Get("/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_THAT(m.body, HasSubstr("airlock_sandboxes"));
  EXPECT_THAT(m.body, HasSubstr("airlock_http_requests_total"));
}

// ---- authentication ----

TEST_F(DaemonApiTest, MissingKeyIs401NamingTheHeader) {
  Api anonymous(daemon_, "");
  ExpectError(anonymous.Get("/v1/sandboxes"), 401, "unauthenticated", "Authorization: Bearer");
  ExpectError(anonymous.Post("/v1/sandboxes", {{"spec", json::object()}}), 401, "unauthenticated",
              "Authorization");
}

TEST_F(DaemonApiTest, WrongKeyIs401) {
  Api wrong(daemon_, "ak_not-a-real-key");
  ExpectError(wrong.Get("/v1/sandboxes"), 401, "unauthenticated", "API key is unknown");
  // Another scheme is not a bearer key.
  Api anonymous(daemon_, "");
  ExpectError(
      anonymous.Send(Verb::get, "/v1/sandboxes", "", "", {{"Authorization", "Basic dXNlcjpwYXNz"}}),
      401, "unauthenticated", "Authorization: Bearer");
  // A real key with its last character cut is refused too.
  Api truncated(daemon_, alice_key_->substr(0, alice_key_->size() - 1));
  ExpectError(truncated.Get("/v1/sandboxes"), 401, "unauthenticated", "API key is unknown");
}

// ---- routing ----

TEST_F(DaemonApiTest, UnknownPathIs404AndWrongMethodIs405) {
  ApiResponse unknown = alice().Get("/v1/nothing-here");
  EXPECT_EQ(unknown.status, 404) << unknown.Describe();
  EXPECT_EQ(unknown.code(), "not_found");
  EXPECT_THAT(unknown.message(), HasSubstr("/v1/nothing-here"));
  ExpectError(alice().Send(Verb::patch, "/v1/sandboxes/sb-000000000000", "{}"), 405,
              "method_not_allowed", "PATCH");
  ExpectError(alice().Send(Verb::put, "/v1/sandboxes", "{}"), 405, "method_not_allowed", "PUT");
  ExpectError(alice().Send(Verb::get, "/v1/sandboxes/sb-000000000000/exec"), 405,
              "method_not_allowed", "GET");
}

// ---- create ----

TEST_F(DaemonApiTest, CreateGetListDestroy) {
  std::string id = NewSandbox({{"spec", json::object()},
                               {"ttl_seconds", 600},
                               {"idle_timeout_seconds", 300},
                               {"metadata", {{"team", "infra"}, {"run", "api-test"}}}});
  ASSERT_FALSE(id.empty());
  ApiResponse got = alice().Get(Sb(id));
  ASSERT_EQ(got.status, 200) << got.Describe();
  EXPECT_EQ(got.json["id"], id);
  EXPECT_EQ(got.json["state"], "Running");
  EXPECT_EQ(got.json["ttl_seconds"], 600);
  EXPECT_EQ(got.json["idle_timeout_seconds"], 300);
  EXPECT_EQ(got.json["metadata"]["team"], "infra");
  EXPECT_TRUE(got.json["spec"].is_object());

  ApiResponse list = alice().Get("/v1/sandboxes?state=Running&metadata.run=api-test");
  ASSERT_EQ(list.status, 200) << list.Describe();
  std::set<std::string> ids;
  for (const json& s : list.json["sandboxes"]) ids.insert(s["id"].get<std::string>());
  EXPECT_TRUE(ids.count(id)) << list.Describe();
  ApiResponse other = alice().Get("/v1/sandboxes?metadata.run=something-else");
  ASSERT_EQ(other.status, 200);
  for (const json& s : other.json["sandboxes"]) EXPECT_NE(s["id"], id);
  // Bob sees none of alice's sandboxes.
  ApiResponse bobs = bob().Get("/v1/sandboxes");
  ASSERT_EQ(bobs.status, 200);
  for (const json& s : bobs.json["sandboxes"]) EXPECT_NE(s["id"], id);

  ApiResponse del = alice().Delete(Sb(id));
  ASSERT_EQ(del.status, 200) << del.Describe();
  EXPECT_EQ(del.json["state"], "Gone");
  EXPECT_TRUE(daemon_->CgroupsOf(id).empty());
  // Destroy is idempotent; the record stays.
  EXPECT_EQ(alice().Delete(Sb(id)).status, 200);
  ApiResponse gone = alice().Get(Sb(id));
  EXPECT_EQ(gone.status, 200);
  EXPECT_EQ(gone.json["state"], "Gone");
}

TEST_F(DaemonApiTest, CreateFromTemplate) {
  std::string id = NewSandbox({{"template", "R1"}});
  ASSERT_FALSE(id.empty());
  ExpectError(alice().Post("/v1/sandboxes", {{"template", "no-such-template"}}), 404, "not_found",
              "no-such-template");
  ExpectError(alice().Post("/v1/sandboxes", {{"template", "../etc"}}), 422, "invalid_argument",
              "not a valid template name");
  ExpectError(alice().Post("/v1/sandboxes", {{"template", "R1"}, {"spec", {{"riskClass", "R2"}}}}),
              422, "invalid_argument", "either spec or template");
}

TEST_F(DaemonApiTest, CreateRejectsMalformedJsonWith400) {
  ExpectError(alice().PostRaw("/v1/sandboxes", "{\"spec\": {"), 400, "malformed_body", "JSON");
  ExpectError(alice().PostRaw("/v1/sandboxes", "not json"), 400, "malformed_body", "JSON");
}

TEST_F(DaemonApiTest, CreateRejectsBadFieldsWith422NamingThem) {
  ExpectError(alice().Post("/v1/sandboxes", {{"spec", json::object()}, {"colour", "red"}}), 422,
              "invalid_argument", "colour");
  ExpectError(alice().Post("/v1/sandboxes", {{"spec", json::object()}, {"ttl_seconds", "long"}}),
              422, "invalid_argument", "ttl_seconds");
  ExpectError(alice().Post("/v1/sandboxes", {{"spec", json::object()}, {"ttl_seconds", 0}}), 422,
              "invalid_argument", "ttl_seconds");
  ExpectError(alice().Post("/v1/sandboxes", {{"spec", "R1"}}), 422, "invalid_argument", "spec");
  ExpectError(alice().Post("/v1/sandboxes", {{"spec", json::object()}, {"metadata", {{"n", 1}}}}),
              422, "invalid_argument", "metadata");
  ExpectError(alice().Post("/v1/sandboxes", {{"ttl_seconds", 60}}), 422, "invalid_argument",
              "spec");
  ExpectError(alice().Post("/v1/sandboxes", {{"spec", {{"colour", "red"}}}}), 422,
              "invalid_argument", "colour");
  ExpectError(
      alice().Post("/v1/sandboxes", {{"spec", json::object()}, {"workspace", json::object()}}), 422,
      "invalid_argument", "workspace.git");
  // Longer than the node's maximum TTL (a day by default).
  ExpectError(alice().Post("/v1/sandboxes", {{"spec", json::object()}, {"ttl_seconds", 90000}}),
              422, "invalid_argument", "ttl_seconds");
}

TEST_F(DaemonApiTest, OversizedBodiesAre413) {
  std::string big = R"({"spec": {}, "metadata": {"pad": ")" + std::string(2 << 20, 'x') + "\"}}";
  ExpectError(alice().PostRaw("/v1/sandboxes", big), 413, "payload_too_large", "bytes");
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  std::string exec = R"({"argv": ["true"], "stdin": ")" + std::string(3 << 20, 'y') + "\"}";
  ExpectError(alice().PostRaw(Sb(id, "/exec"), exec), 413, "payload_too_large", "bytes");
}

// ---- ownership and unknown sandboxes ----

TEST_F(DaemonApiTest, AnotherUsersSandboxIsIndistinguishableFromNone) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  const std::string none = "sb-000000000000";
  struct Probe {
    Verb method;
    std::string rest;
    std::string body;
  };
  std::vector<Probe> probes = {
      {Verb::get, "", ""},
      {Verb::delete_, "", ""},
      {Verb::post, "/exec", R"({"argv": ["true"]})"},
      {Verb::get, "/commands", ""},
      {Verb::get, "/commands/cmd-000000000000", ""},
      {Verb::get, "/files?path=a.txt", ""},
      {Verb::put, "/files?path=a.txt", "data"},
      {Verb::get, "/files:list", ""},
      {Verb::get, "/files:stat?path=a", ""},
      {Verb::post, "/files:mkdir?path=d", ""},
      {Verb::delete_, "/files?path=a", ""},
      {Verb::post, "/pause", ""},
      {Verb::post, "/resume", ""},
      {Verb::post, "/ttl", R"({"ttl_seconds": 60})"},
      {Verb::put, "/network", R"({"network": {"profile": "none"}})"},
      {Verb::get, "/events", ""},
  };
  for (const Probe& p : probes) {
    SCOPED_TRACE(
        fmt::format("{} {}", std::string(boost::beast::http::to_string(p.method)), p.rest));
    ApiResponse theirs = bob().Send(p.method, Sb(id, p.rest), p.body);
    ApiResponse missing = bob().Send(p.method, Sb(none, p.rest), p.body);
    ExpectError(theirs, 404, "not_found", "no sandbox " + id);
    ExpectError(missing, 404, "not_found", "no sandbox " + none);
    // The same words apart from the id: nothing tells the two apart.
    std::string a = theirs.message(), b = missing.message();
    a.replace(a.find(id), id.size(), "ID");
    b.replace(b.find(none), none.size(), "ID");
    EXPECT_EQ(a, b);
  }
  // Alice's sandbox is untouched by bob's attempts.
  ApiResponse still = alice().Get(Sb(id));
  EXPECT_EQ(still.json.value("state", ""), "Running") << still.Describe();
}

// ---- exec ----

TEST_F(DaemonApiTest, ExecReturnsTheCommandResult) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  ApiResponse r =
      alice().Post(Sb(id, "/exec"), {{"argv", {"/bin/sh", "-c", "echo hi; echo err >&2"}},
                                     {"env", {{"GREETING", "x"}}},
                                     {"timeout_seconds", 30}});
  ASSERT_EQ(r.status, 200) << r.Describe();
  EXPECT_EQ(r.json["classification"], "OK");
  EXPECT_EQ(r.json["exit_code"], 0);
  EXPECT_EQ(r.json["stdout_preview"], "hi\n");
  EXPECT_EQ(r.json["stderr_preview"], "err\n");
  EXPECT_EQ(r.json["stdout_bytes"], 3);
  EXPECT_TRUE(r.json["usage"].is_object());
  EXPECT_THAT(r.json.value("command_id", ""), HasSubstr("cmd-"));

  ApiResponse fail = alice().Post(Sb(id, "/exec"), {{"argv", {"/bin/sh", "-c", "exit 3"}}});
  ASSERT_EQ(fail.status, 200) << fail.Describe();
  EXPECT_EQ(fail.json["classification"], "EXIT_NONZERO");
  EXPECT_EQ(fail.json["exit_code"], 3);

  ApiResponse stdin_echo = alice().Post(Sb(id, "/exec"), {{"argv", {"cat"}}, {"stdin", "piped"}});
  ASSERT_EQ(stdin_echo.status, 200) << stdin_echo.Describe();
  EXPECT_EQ(stdin_echo.json["stdout_preview"], "piped");

  ApiResponse cmds = alice().Get(Sb(id, "/commands"));
  ASSERT_EQ(cmds.status, 200) << cmds.Describe();
  EXPECT_GE(cmds.json["commands"].size(), 3u);
  ApiResponse one = alice().Get(Sb(id, "/commands/" + r.json["command_id"].get<std::string>()));
  ASSERT_EQ(one.status, 200) << one.Describe();
  EXPECT_EQ(one.json["state"], "finished");
  EXPECT_EQ(one.json["result"]["stdout_preview"], "hi\n");
  // The metrics saw them: the exec latency histogram counts these three execs (at least; the
  // daemon may have served others), the store's calls are timed by operation, and a sandbox runs.
  std::string metrics = Api(daemon_, "").Get("/metrics").body;
  const std::string count = "\nairlock_exec_seconds_count ";
  size_t at = metrics.find(count);
  ASSERT_NE(at, std::string::npos) << metrics;
  long execs = std::strtol(metrics.c_str() + at + count.size(), nullptr, 10);
  EXPECT_GE(execs, 3);
  EXPECT_THAT(metrics, HasSubstr("airlock_store_seconds_count{op="));
  EXPECT_THAT(metrics, ::testing::ContainsRegex("airlock_sandboxes\\{state=\"Running\"\\} [1-9]"));
}

// The command permission policy (src/cmdpolicy) refuses `sudo ...` and `curl ... | sh` before
// they run, as a POLICY_BLOCKED result naming the rule, in every exec form.
TEST_F(DaemonApiTest, ExecRefusesPolicyBlockedCommands) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  ApiResponse sudo = alice().Post(Sb(id, "/exec"), {{"argv", {"sudo", "ls"}}});
  ASSERT_EQ(sudo.status, 200) << sudo.Describe();
  EXPECT_EQ(sudo.json["classification"], "POLICY_BLOCKED");
  EXPECT_NE(sudo.body.find("privilege-escalation/sudo"), std::string::npos) << sudo.Describe();
  ApiResponse bg = alice().Post(
      Sb(id, "/exec"),
      {{"argv", {"sh", "-c", "curl -fsSL https://example.com/x.sh | sh"}}, {"background", true}});
  ASSERT_EQ(bg.status, 202) << bg.Describe();
  std::string cid = bg.json.value("command_id", "");
  ApiResponse polled;
  for (int i = 0; i < 100; ++i) {
    polled = alice().Get(Sb(id, "/commands/" + cid));
    if (polled.json.value("state", "") != "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(polled.body.find("POLICY_BLOCKED"), std::string::npos) << polled.Describe();
}

// Attack: code in the sandbox names an artifact "r.txt\r\nContent-Length:
// 13\r\n\r\nforged-bytes\n", so that its path, sent in X-Artifact-Path, ends the header block and a
// forged body replaces the scanned one. The path goes out percent-encoded and the download is the
// file's content.
TEST_F(DaemonApiTest, AnArtifactsNameCannotSplitTheDownload) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  ApiResponse made = alice().Post(
      Sb(id, "/exec"),
      {{"argv",
        {"sh", "-c",
         "mkdir -p /sandbox/artifacts && printf 'clean\\n' > \"/sandbox/artifacts/$(printf "
         "'r.txt\\r\\nContent-Length: 13\\r\\n\\r\\nforged-bytes\\n.')\""}}});
  ASSERT_EQ(made.json.value("exit_code", -1), 0) << made.Describe();
  ApiResponse c = alice().Post(Sb(id, "/artifacts:collect"), json::object());
  ASSERT_EQ(c.status, 200) << c.Describe();
  ASSERT_EQ(c.json["files"].size(), 1u) << c.Describe();
  EXPECT_EQ(c.json["files"][0]["path"],
            "/sandbox/artifacts/r.txt\r\nContent-Length: 13\r\n\r\nforged-bytes\n.");
  std::string aid = c.json["files"][0].value("artifact_id", "");
  ASSERT_FALSE(aid.empty()) << c.Describe();
  ApiResponse down = alice().Get(Sb(id, "/artifacts/" + aid));
  ASSERT_EQ(down.status, 200) << down.Describe();
  EXPECT_EQ(down.body, "clean\n");
}

// Artifacts: released files can be listed and downloaded byte for byte; never-leave files are
// refused; a secret in one file quarantines it, blocks the collection (nothing else released)
// and leaves a policy_blocked event; a quarantined artifact is never downloadable.
TEST_F(DaemonApiTest, ArtifactsCollectListDownloadAndQuarantine) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  ApiResponse made =
      alice().Post(Sb(id, "/exec"), {{"argv",
                                      {"sh", "-c",
                                       "mkdir -p /sandbox/artifacts && printf 'report\\n' > "
                                       "/sandbox/artifacts/report.txt && printf 'X=1\\n' > "
                                       "/sandbox/artifacts/.env"}}});
  ASSERT_EQ(made.json.value("exit_code", -1), 0) << made.Describe();
  ApiResponse c = alice().Post(Sb(id, "/artifacts:collect"), json::object());
  ASSERT_EQ(c.status, 200) << c.Describe();
  EXPECT_EQ(c.json["policy_blocked"], false);
  std::string report_id;
  for (const json& f : c.json["files"]) {
    if (f["path"] == "/sandbox/artifacts/report.txt") {
      EXPECT_EQ(f["outcome"], "released");
      report_id = f.value("artifact_id", "");
    }
    if (f["path"] == "/sandbox/artifacts/.env") {
      EXPECT_EQ(f["rule"], "never-leave/env-file");
    }
  }
  ASSERT_FALSE(report_id.empty()) << c.Describe();
  ApiResponse down = alice().Get(Sb(id, "/artifacts/" + report_id));
  ASSERT_EQ(down.status, 200) << down.Describe();
  EXPECT_EQ(down.body, "report\n");
  ExpectError(bob().Get(Sb(id, "/artifacts/" + report_id)), 404, "not_found", id);
  ExpectError(alice().Post(Sb(id, "/artifacts:collect"), {{"paths", {"/etc"}}}), 422,
              "invalid_argument", "/etc");
  ExpectError(alice().Post(Sb(id, "/artifacts:collect"), {{"path", "x"}}), 422, "invalid_argument",
              "path");

  // The key is assembled inside the sandbox so this file holds none.
  ApiResponse leak = alice().Post(
      Sb(id, "/exec"),
      {{"argv",
        {"sh", "-c", "echo \"aws=AKIA$0\" > /sandbox/artifacts/leak.txt", "IOSFODNN7EXAMPLE"}}});
  ASSERT_EQ(leak.json.value("exit_code", -1), 0) << leak.Describe();
  ApiResponse blocked = alice().Post(Sb(id, "/artifacts:collect"), json::object());
  ASSERT_EQ(blocked.status, 200) << blocked.Describe();
  EXPECT_EQ(blocked.json["policy_blocked"], true);
  EXPECT_EQ(blocked.body.find("IOSFODNN7EXAMPLE"), std::string::npos)
      << "the secret is never shown";
  std::string quarantined_id;
  for (const json& f : blocked.json["files"]) {
    if (f["path"] == "/sandbox/artifacts/leak.txt") {
      EXPECT_EQ(f["outcome"], "quarantined");
      quarantined_id = f.value("artifact_id", "");
    } else if (f["path"] == "/sandbox/artifacts/report.txt") {
      EXPECT_EQ(f["outcome"], "withheld");
      EXPECT_FALSE(f.contains("artifact_id")) << "a withheld file is not recorded";
    }
  }
  ASSERT_FALSE(quarantined_id.empty()) << blocked.Describe();
  ExpectError(alice().Get(Sb(id, "/artifacts/" + quarantined_id)), 409, "failed_precondition",
              "quarantined");
  ApiResponse list = alice().Get(Sb(id, "/artifacts"));
  ASSERT_EQ(list.status, 200) << list.Describe();
  EXPECT_EQ(list.json["artifacts"].size(), 2u) << list.Describe();
  ApiResponse events = alice().Get(Sb(id, "/events"));
  EXPECT_NE(events.body.find("policy_blocked"), std::string::npos) << events.Describe();
  ApiResponse sb = alice().Get(Sb(id));
  EXPECT_EQ(sb.json["state"], "Running") << "collection returns the sandbox to Running";
}

// Attack: a caller names a repository it has no business reading (another sandbox's workspace,
// any path on the node), a URL the daemon would fetch with the node's network, or a commit that
// git would read as an option. Only https:// without credentials, or a path beneath the node's
// --git-local-root, is taken; the rest is 422 naming the field, and nothing is cloned.
TEST_F(DaemonApiTest, WorkspaceRepoIsHttpsOrBeneathALocalRoot) {
  auto create = [&](const std::string& repo, const std::string& commit) {
    return alice().Post(
        "/v1/sandboxes",
        {{"spec", json::object()}, {"workspace", {{"git", {{"repo", repo}, {"commit", commit}}}}}});
  };
  ExpectError(create("/etc", "HEAD"), 422, "invalid_argument",
              "workspace.git.repo: /etc is not beneath a --git-local-root");
  ExpectError(create(std::string(kRepoRoot) + "/../../etc", "HEAD"), 422, "invalid_argument",
              "is not beneath a --git-local-root");
  ExpectError(create("file:///var/lib", "HEAD"), 422, "invalid_argument",
              "is not beneath a --git-local-root");
  ExpectError(create("http://127.0.0.1:1/x.git", "HEAD"), 422, "invalid_argument",
              "neither an https:// URL nor an absolute path");
  ExpectError(create("ext::sh -c id", "HEAD"), 422, "invalid_argument", "workspace.git.repo");
  ExpectError(create("https://user:token@example.com/r.git", "HEAD"), 422, "invalid_argument",
              "credentials in the URL are refused");
  ExpectError(create(std::string(kRepoRoot) + "/any", "--output=/tmp/x"), 422, "invalid_argument",
              "workspace.git.commit");
}

// A TCP listener on 127.0.0.1 standing in for a service only the node can reach: it counts the
// connections made to it and closes each at once (it speaks no TLS).
class LoopbackListener {
 public:
  LoopbackListener() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 ||
        ::listen(fd_.get(), 16) != 0 ||
        ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (UniqueFd c{::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC)}) ++accepted_;
    });
  }
  ~LoopbackListener() {
    ::shutdown(fd_.get(), SHUT_RDWR);  // ends the blocked accept
    if (thread_.joinable()) thread_.join();
  }
  uint16_t port() const { return port_; }
  int accepted() const { return accepted_; }

 private:
  UniqueFd fd_;
  uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// Attack: a caller names an https repository at an address only the node can reach (a service
// on the node's loopback, by address or by a name that resolves there; a private range; the
// cloud metadata address). git runs on the host with the node's network, so its clone goes
// through an egress proxy that refuses what every sandbox's egress refuses: the create is 403
// naming the address and the rule, nothing connects to the service, and the refusal is in the
// sandbox's audit trail.
TEST_F(DaemonApiTest, WorkspaceCloneCannotReachTheNodesPrivateAddresses) {
  LoopbackListener service;
  ASSERT_NE(service.port(), 0);
  const std::string run = fmt::format("clone-ssrf-{}", ::getpid());
  auto create = [&](const std::string& repo) {
    return alice().Post("/v1/sandboxes",
                        {{"spec", json::object()},
                         {"metadata", {{"run", run}}},
                         {"workspace", {{"git", {{"repo", repo}, {"commit", "HEAD"}}}}}});
  };
  const std::string port = std::to_string(service.port());
  ExpectError(create("https://127.0.0.1:" + port + "/r.git"), 403, "permission_denied",
              "workspace.git.repo: the clone's egress to 127.0.0.1:" + port +
                  " (127.0.0.1) blocked by always-denied:127.0.0.0/8 (loopback)");
  ExpectError(create("https://localhost:" + port + "/r.git"), 403, "permission_denied",
              "(loopback)");
  ExpectError(create("https://169.254.169.254/r.git"), 403, "permission_denied",
              "blocked by always-denied:169.254.0.0/16 (metadata)");
  ExpectError(create("https://10.20.30.40/r.git"), 403, "permission_denied",
              "blocked by always-denied:10.0.0.0/8 (private)");
  EXPECT_EQ(service.accepted(), 0) << "the clone reached the node's loopback service";

  ApiResponse failed = alice().Get("/v1/sandboxes?metadata.run=" + run);
  ASSERT_EQ(failed.status, 200) << failed.Describe();
  ASSERT_EQ(failed.json["sandboxes"].size(), 4u) << failed.Describe();
  for (const json& sb : failed.json["sandboxes"]) {
    EXPECT_EQ(sb["state"], "Failed") << sb.dump();
    ApiResponse events = alice().Get(Sb(sb["id"].get<std::string>(), "/events"));
    EXPECT_NE(events.body.find("policy_blocked"), std::string::npos) << events.Describe();
    EXPECT_NE(events.body.find("BlockedNetworkEgress"), std::string::npos) << events.Describe();
  }
}

// The operator opens a private address for every sandbox of the node (an internal git host):
// the clone's proxy then connects to it. Here the "git host" is the loopback listener, which
// speaks no TLS, so the clone fails after the connection, not before. A policy file that would
// open a metadata address stops the daemon at start, naming the file.
TEST_F(DaemonApiTest, OperatorPolicyOpensAPrivateGitHost) {
  const std::string dir = fmt::format("/tmp/airlock-api-operator-{}", ::getpid());
  ::mkdir(dir.c_str(), 0700);
  ASSERT_TRUE(
      WriteFileAtomic(dir + "/open.json", R"({"openPrivateCidrs": ["127.0.0.1/32"]})", 0600).ok());
  ASSERT_TRUE(
      WriteFileAtomic(dir + "/metadata.json", R"({"openPrivateCidrs": ["169.254.0.0/16"]})", 0600)
          .ok());

  auto refused = TestDaemon::Start({.extra_args = {"--operator-policy", dir + "/metadata.json"}});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("--operator-policy " + dir + "/metadata.json"));

  auto d = TestDaemon::Start({.extra_args = {"--operator-policy", dir + "/open.json"}});
  ASSERT_TRUE(d.ok()) << d.status();
  auto key = (*d)->CreateKey("carol");
  ASSERT_TRUE(key.ok()) << key.status();
  LoopbackListener host;
  ASSERT_NE(host.port(), 0);
  ApiResponse r = Api(d->get(), *key)
                      .Post("/v1/sandboxes",
                            {{"spec", json::object()},
                             {"workspace",
                              {{"git",
                                {{"repo", fmt::format("https://127.0.0.1:{}/r.git", host.port())},
                                 {"commit", "HEAD"}}}}}});
  EXPECT_NE(r.status, 201) << r.Describe();
  EXPECT_NE(r.status, 403) << r.Describe();
  EXPECT_THAT(r.message(), HasSubstr("git clone")) << r.Describe();
  EXPECT_GE(host.accepted(), 1) << "the opened address was not reached";
  std::filesystem::remove_all(dir);
}

// The workspace diff: a fresh clone at the pinned commit, changed in the sandbox; the diff is
// made inside the sandbox, covers modified and untracked files, and applies to the base commit.
TEST_F(DaemonApiTest, WorkspaceDiffAgainstThePinnedCommit) {
  char tmpl[] = "/tmp/airlock-api-repos/repo-XXXXXX";
  std::string repo = ::mkdtemp(tmpl);
  std::string setup = fmt::format(
      "cd {} && git init -q && echo one > a.txt && git add a.txt && git -c user.email=t@t "
      "-c user.name=t commit -qm base && git rev-parse HEAD > {}.head",
      repo, repo);
  ASSERT_EQ(std::system(setup.c_str()), 0);
  std::string head = ReadFile(repo + ".head").value_or("");
  head = head.substr(0, head.find('\n'));
  std::string id = NewSandbox(
      {{"spec", json::object()}, {"workspace", {{"git", {{"repo", repo}, {"commit", head}}}}}});
  ASSERT_FALSE(id.empty());
  // Hooks are off in the workspace: a hook planted in .git/hooks does not run on a commit.
  ApiResponse hook = alice().Post(
      Sb(id, "/exec"),
      {{"argv",
        {"sh", "-c",
         "printf '#!/bin/sh\\ntouch /sandbox/tmp/hook-ran\\n' > .git/hooks/pre-commit && "
         "chmod +x .git/hooks/pre-commit && git config core.hooksPath && "
         "git -c user.email=t@t -c user.name=t commit -q --allow-empty -m probe && "
         "test ! -e /sandbox/tmp/hook-ran && git reset -q --soft HEAD~1 && "
         "rm .git/hooks/pre-commit"}}});
  EXPECT_EQ(hook.json.value("exit_code", -1), 0) << hook.Describe();
  EXPECT_EQ(hook.json.value("stdout_preview", ""), "/dev/null\n") << hook.Describe();
  ApiResponse edit = alice().Post(
      Sb(id, "/exec"), {{"argv", {"sh", "-c", "echo two >> a.txt && echo new > b.txt"}}});
  ASSERT_EQ(edit.json.value("exit_code", -1), 0) << edit.Describe();
  ApiResponse diff = alice().Post(Sb(id, "/workspace:diff"), json::object());
  ASSERT_EQ(diff.status, 200) << diff.Describe();
  EXPECT_EQ(diff.json["base_commit"], head);
  ASSERT_EQ(diff.json["files"].size(), 1u) << diff.Describe();
  std::string aid = diff.json["files"][0].value("artifact_id", "");
  ApiResponse patch = alice().Get(Sb(id, "/artifacts/" + aid));
  ASSERT_EQ(patch.status, 200) << patch.Describe();
  EXPECT_NE(patch.body.find("+two"), std::string::npos) << patch.body;
  EXPECT_NE(patch.body.find("b/b.txt"), std::string::npos) << "untracked files count";
  ASSERT_TRUE(WriteFileAtomic(repo + ".patch", patch.body).ok());
  EXPECT_EQ(std::system(fmt::format("cd {} && git apply --check {}.patch", repo, repo).c_str()), 0);
  // A sandbox without a git workspace has nothing to diff against.
  std::string plain = NewSandbox();
  ExpectError(alice().Post(Sb(plain, "/workspace:diff"), json::object()), 409,
              "failed_precondition", "no git workspace");
  (void)RemoveTree(repo);
  (void)::unlink((repo + ".patch").c_str());
  (void)::unlink(("/tmp/" + repo.substr(5) + ".head").c_str());
}

TEST_F(DaemonApiTest, ExecRejectsBadRequestsNamingTheField) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  ExpectError(alice().PostRaw(Sb(id, "/exec"), "{argv: [}"), 400, "malformed_body", "JSON");
  ExpectError(alice().Post(Sb(id, "/exec"), json::object()), 422, "invalid_argument", "argv");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", json::array()}}), 422, "invalid_argument",
              "argv: must not be empty");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", {"ls", 7}}}), 422, "invalid_argument",
              "argv[1]");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", "ls -l"}}), 422, "invalid_argument", "argv");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}, {"timeout_seconds", 0}}), 422,
              "invalid_argument", "timeout_seconds");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}, {"timeout_seconds", "10"}}), 422,
              "invalid_argument", "timeout_seconds");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}, {"env", {{"A", 1}}}}), 422,
              "invalid_argument", "env");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}, {"stream", "yes"}}), 422,
              "invalid_argument", "stream");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}, {"shell", true}}), 422,
              "invalid_argument", "shell");
  ExpectError(
      alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}, {"stream", true}, {"background", true}}),
      422, "invalid_argument", "stream");
  ExpectError(alice().Post("/v1/sandboxes/sb-000000000000/exec", {{"argv", {"true"}}}), 404,
              "not_found", "no sandbox sb-000000000000");
}

TEST_F(DaemonApiTest, ExecStreamSendsOutputThenTheResult) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  std::vector<std::string> names;
  std::string out;
  json result;
  ApiResponse r = alice().Stream(
      Verb::post, Sb(id, "/exec"),
      json{{"argv", {"/bin/sh", "-c", "echo one; echo two >&2; echo three"}}, {"stream", true}}
          .dump(),
      [&](std::string_view name, const json& data) {
        names.emplace_back(name);
        if (name == "stdout") out += data.value("text", "");
        if (name == "result") result = data;
        return true;
      });
  ASSERT_EQ(r.status, 200) << r.Describe();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), "result");
  EXPECT_EQ(out, "one\nthree\n");
  EXPECT_NE(std::find(names.begin(), names.end(), "stderr"), names.end());
  EXPECT_EQ(result.value("classification", ""), "OK") << result;
  // A stream on a sandbox that is not there is an ordinary error answer.
  ApiResponse missing = alice().Stream(Verb::post, "/v1/sandboxes/sb-000000000000/exec",
                                       R"({"argv": ["true"], "stream": true})",
                                       [](std::string_view, const json&) { return true; });
  ExpectError(missing, 404, "not_found", "no sandbox sb-000000000000");
}

TEST_F(DaemonApiTest, BackgroundCommandsPollStreamAndKill) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  ApiResponse started =
      alice().Post(Sb(id, "/exec"), {{"argv", {"/bin/sh", "-c", "echo started; sleep 60"}},
                                     {"background", true},
                                     {"timeout_seconds", 90}});
  ASSERT_EQ(started.status, 202) << started.Describe();
  std::string cid = started.json.value("command_id", "");
  ASSERT_FALSE(cid.empty());
  EXPECT_EQ(started.json["state"], "running");
  EXPECT_EQ(started.json["background"], true);

  ApiResponse poll = alice().Get(Sb(id, "/commands/" + cid));
  ASSERT_EQ(poll.status, 200) << poll.Describe();
  EXPECT_EQ(poll.json["state"], "running");

  ExpectError(alice().Post(Sb(id, "/commands/" + cid + "/kill"), {{"signal", "NOPE"}}), 422,
              "invalid_argument", "signal");
  ExpectError(alice().Post(Sb(id, "/commands/" + cid + "/kill"), {{"signal", 999}}), 422,
              "invalid_argument", "signal");
  ExpectError(alice().Post(Sb(id, "/commands/" + cid + "/kill"), {{"signull", "TERM"}}), 422,
              "invalid_argument", "signull");

  // Attach, see the first line, then kill from another connection: the stream ends with the
  // command's result.
  std::thread killer;
  std::string seen;
  json result;
  ApiResponse stream = alice().Stream(Verb::get, Sb(id, "/commands/" + cid + "/stream"), "",
                                      [&](std::string_view name, const json& data) {
                                        if (name == "stdout") {
                                          seen += data.value("text", "");
                                          if (!killer.joinable()) {
                                            killer = std::thread([&] {
                                              ApiResponse k =
                                                  alice().Post(Sb(id, "/commands/" + cid + "/kill"),
                                                               {{"signal", "TERM"}});
                                              EXPECT_EQ(k.status, 200) << k.Describe();
                                              EXPECT_EQ(k.json.value("signal", 0), SIGTERM);
                                            });
                                          }
                                        }
                                        if (name == "result") result = data;
                                        return true;
                                      });
  if (killer.joinable()) killer.join();
  ASSERT_EQ(stream.status, 200) << stream.Describe();
  EXPECT_EQ(seen, "started\n");
  EXPECT_EQ(result.value("signal", 0), SIGTERM) << result;

  ApiResponse done = alice().Get(Sb(id, "/commands/" + cid));
  ASSERT_EQ(done.status, 200);
  EXPECT_NE(done.json["state"], "running") << done.Describe();
  ExpectError(alice().Post(Sb(id, "/commands/" + cid + "/kill"), json::object()), 409,
              "failed_precondition", "already ended");
  ExpectError(alice().Get(Sb(id, "/commands/cmd-000000000000")), 404, "not_found",
              "no command cmd-000000000000");
  ExpectError(alice().Post(Sb(id, "/commands/cmd-000000000000/kill"), json::object()), 404,
              "not_found", "no command cmd-000000000000");
}

// Several clients polling a command as it ends: each poll may be the one that learns the result
// from the shim; every one answers 200 with the same end state (the first records it, the others
// read it), never 409.
TEST_F(DaemonApiTest, ConcurrentPollsOfAnEndingCommandAllSucceed) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  for (int round = 0; round < 3; ++round) {
    ApiResponse started =
        alice().Post(Sb(id, "/exec"), {{"argv", {"sleep", "0.5"}}, {"background", true}});
    ASSERT_EQ(started.status, 202) << started.Describe();
    std::string target = Sb(id, "/commands/" + started.json.value("command_id", ""));
    std::vector<std::thread> pollers;
    std::atomic<int> bad{0};
    std::mutex mu;
    std::string first_bad;
    for (int t = 0; t < 8; ++t) {
      pollers.emplace_back([&] {
        Api a(daemon_, *alice_key_);
        for (int i = 0; i < 400; ++i) {
          ApiResponse r = a.Get(target);
          if (r.status != 200) {
            std::lock_guard lock(mu);
            if (bad++ == 0) first_bad = r.Describe();
            return;
          }
          if (r.json.value("state", "") != "running") {
            EXPECT_EQ(r.json.value("state", ""), "finished") << r.Describe();
            return;
          }
        }
      });
    }
    for (std::thread& t : pollers) t.join();
    EXPECT_EQ(bad.load(), 0) << first_bad;
  }
}

// ---- lifecycle conflicts ----

TEST_F(DaemonApiTest, PausedAndDestroyedSandboxesRefuseWorkWith409) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  ApiResponse paused = alice().Post(Sb(id, "/pause"), json::object());
  ASSERT_EQ(paused.status, 200) << paused.Describe();
  EXPECT_EQ(paused.json["state"], "Paused");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}}), 409, "failed_precondition",
              "Paused");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}, {"stream", true}}), 409,
              "failed_precondition", "Paused");
  ExpectError(alice().Get(Sb(id, "/files:list")), 409, "failed_precondition", "Paused");
  ExpectError(alice().Post(Sb(id, "/pause"), json::object()), 409, "failed_precondition", "Paused");
  ApiResponse resumed = alice().Post(Sb(id, "/resume"), json::object());
  ASSERT_EQ(resumed.status, 200) << resumed.Describe();
  EXPECT_EQ(resumed.json["state"], "Running");
  ExpectError(alice().Post(Sb(id, "/resume"), json::object()), 409, "failed_precondition",
              "not Paused");
  ApiResponse ok = alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}});
  EXPECT_EQ(ok.status, 200) << ok.Describe();

  ASSERT_EQ(alice().Delete(Sb(id)).status, 200);
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}}), 409, "failed_precondition",
              "Gone");
  ExpectError(alice().Post(Sb(id, "/exec"), {{"argv", {"true"}}, {"background", true}}), 409,
              "failed_precondition", "Gone");
  ExpectError(alice().Put(Sb(id, "/files?path=a.txt"), "x"), 409, "failed_precondition", "Gone");
  ExpectError(alice().Post(Sb(id, "/pause"), json::object()), 409, "failed_precondition", "Gone");
  ExpectError(alice().Post(Sb(id, "/resume"), json::object()), 409, "failed_precondition", "Gone");
}

// ---- ttl, network, events ----

TEST_F(DaemonApiTest, TtlNetworkAndEvents) {
  std::string id = NewSandbox({{"spec", json::object()}, {"ttl_seconds", 60}});
  ASSERT_FALSE(id.empty());
  ApiResponse ttl = alice().Post(Sb(id, "/ttl"), {{"ttl_seconds", 1200}});
  ASSERT_EQ(ttl.status, 200) << ttl.Describe();
  // From created_at, which is a little before the call (a second more in a slow build).
  EXPECT_GE(ttl.json.value("ttl_seconds", 0), 1200) << ttl.Describe();
  EXPECT_LT(ttl.json.value("ttl_seconds", 0), 1260) << ttl.Describe();
  ExpectError(alice().Post(Sb(id, "/ttl"), json::object()), 422, "invalid_argument", "ttl_seconds");
  ExpectError(alice().Post(Sb(id, "/ttl"), {{"ttl_seconds", -5}}), 422, "invalid_argument",
              "ttl_seconds");
  ExpectError(alice().Post(Sb(id, "/ttl"), {{"ttl_seconds", 10'000'000}}), 422, "invalid_argument",
              "ttl_seconds");
  ExpectError(alice().PostRaw(Sb(id, "/ttl"), "[1,"), 400, "malformed_body", "JSON");

  // A sandbox created under none opens while it runs, with the caller's authority only; the
  // commands after that get the proxy variables.
  const json registry = {{"profile", "dependency-egress"}, {"allowHosts", {"registry.test"}}};
  ExpectError(alice().Send(Verb::put, Sb(id, "/network"), json{{"network", registry}}.dump()), 403,
              "permission_denied", "allows more than the old one");
  // The refused attempt is in the sandbox's audit trail, with what was asked.
  json refused;
  ApiResponse audit = alice().Get(Sb(id, "/events"));
  for (const json& e : audit.json["events"]) {
    if (e.value("reason", "") == "network policy change refused") refused = e;
  }
  ASSERT_TRUE(refused.is_object()) << audit.Describe();
  EXPECT_EQ(refused["kind"], "policy_blocked") << refused.dump();
  EXPECT_EQ(refused["data"]["network"]["profile"], "dependency-egress") << refused.dump();
  EXPECT_EQ(refused["data"]["may_loosen"], false) << refused.dump();
  auto proxy_env = [&] {
    return alice()
        .Post(Sb(id, "/exec"), {{"argv", {"/bin/sh", "-c", "echo \"$HTTPS_PROXY\""}}})
        .json.value("stdout_preview", "");
  };
  EXPECT_EQ(proxy_env(), "\n");
  ApiResponse opened = alice().Send(Verb::put, Sb(id, "/network"),
                                    json{{"network", registry}, {"loosen", true}}.dump());
  ASSERT_EQ(opened.status, 200) << opened.Describe();
  EXPECT_EQ(opened.json["spec"]["network"]["profile"], "dependency-egress") << opened.Describe();
  EXPECT_THAT(proxy_env(), ::testing::MatchesRegex("http://cmd-[0-9]+:@127\\.0\\.0\\.1:3128\n"));
  std::string r2 = NewSandbox({{"spec", {{"riskClass", "R2"}}}});
  ASSERT_FALSE(r2.empty());
  ApiResponse net =
      alice().Send(Verb::put, Sb(r2, "/network"), json{{"network", {{"profile", "none"}}}}.dump());
  EXPECT_EQ(net.status, 200) << net.Describe();
  EXPECT_EQ(net.json.value("id", ""), r2);
  EXPECT_EQ(net.json["spec"]["network"]["profile"], "none") << net.Describe();
  EXPECT_EQ(alice().Get(Sb(r2)).json["spec"]["network"]["profile"], "none")
      << "the record shows the policy the sandbox runs under";
  // The audit record says what changed, from what, and whether it loosened anything.
  json change;
  ApiResponse r2_events = alice().Get(Sb(r2, "/events"));
  for (const json& e : r2_events.json["events"]) {
    if (e.value("kind", "") == "network_policy_changed") change = e;
  }
  ASSERT_TRUE(change.is_object()) << r2_events.Describe();
  EXPECT_EQ(change["reason"], "policy tightened") << change.dump();
  EXPECT_EQ(change["data"]["loosened"], false) << change.dump();
  EXPECT_EQ(change["data"]["previous_network"]["profile"], "dependency-egress") << change.dump();
  EXPECT_EQ(change["data"]["network"]["profile"], "none") << change.dump();
  ExpectError(alice().Send(Verb::put, Sb(id, "/network"), "{}"), 422, "invalid_argument",
              "network");
  ExpectError(alice().Send(Verb::put, Sb(id, "/network"),
                           json{{"network", {{"profile", "none"}}}, {"loosen", "yes"}}.dump()),
              422, "invalid_argument", "loosen");

  ApiResponse events = alice().Get(Sb(id, "/events"));
  ASSERT_EQ(events.status, 200) << events.Describe();
  std::vector<std::string> to;
  for (const json& e : events.json["events"]) {
    if (e.contains("to")) to.push_back(e["to"]);
  }
  EXPECT_THAT(to, ::testing::IsSupersetOf({"PreparingImage", "Starting", "Running"}));
  int64_t last = events.json["events"].back()["seq"];
  ApiResponse after = alice().Get(Sb(id, fmt::format("/events?after={}&limit=5", last)));
  ASSERT_EQ(after.status, 200);
  EXPECT_TRUE(after.json["events"].empty()) << after.Describe();
  ExpectError(alice().Get(Sb(id, "/events?after=x")), 422, "invalid_argument", "after");
  ExpectError(alice().Get(Sb(id, "/events?limit=0")), 422, "invalid_argument", "limit");
}

TEST_F(DaemonApiTest, ListPagesWithACursor) {
  std::set<std::string> made;
  for (int i = 0; i < 3; ++i) {
    made.insert(NewSandbox({{"spec", json::object()}, {"metadata", {{"page", "yes"}}}}));
  }
  std::set<std::string> seen;
  std::string cursor;
  int pages = 0;
  do {
    ApiResponse page = alice().Get("/v1/sandboxes?metadata.page=yes&limit=2" +
                                   (cursor.empty() ? "" : "&cursor=" + cursor));
    ASSERT_EQ(page.status, 200) << page.Describe();
    EXPECT_LE(page.json["sandboxes"].size(), 2u);
    for (const json& s : page.json["sandboxes"]) seen.insert(s["id"].get<std::string>());
    cursor = page.json["next_cursor"];
    ++pages;
  } while (!cursor.empty() && pages < 5);
  EXPECT_EQ(pages, 2);
  EXPECT_EQ(seen, made);
}

TEST_F(DaemonApiTest, ListRejectsBadQueries) {
  ExpectError(alice().Get("/v1/sandboxes?state=Sleeping"), 422, "invalid_argument", "Sleeping");
  ExpectError(alice().Get("/v1/sandboxes?limit=0"), 422, "invalid_argument", "limit");
  ExpectError(alice().Get("/v1/sandboxes?colour=red"), 422, "invalid_argument", "colour");
}

// ---- files ----

TEST_F(DaemonApiTest, FilesUploadDownloadListStatMkdirRemove) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  ApiResponse up = alice().Put(Sb(id, "/files?path=dir/hello.txt&mode=600"), "hello, sandbox");
  ASSERT_EQ(up.status, 200) << up.Describe();
  EXPECT_EQ(up.json["size"], 14);
  ApiResponse down = alice().Get(Sb(id, "/files?path=dir/hello.txt"));
  ASSERT_EQ(down.status, 200) << down.Describe();
  EXPECT_EQ(down.body, "hello, sandbox");
  ApiResponse abs = alice().Get(Sb(id, "/files?path=/sandbox/workspace/dir/hello.txt"));
  EXPECT_EQ(abs.body, "hello, sandbox");
  ApiResponse stat = alice().Get(Sb(id, "/files:stat?path=dir/hello.txt"));
  ASSERT_EQ(stat.status, 200) << stat.Describe();
  EXPECT_EQ(stat.json["type"], "file");
  EXPECT_EQ(stat.json["size"], 14);
  ApiResponse mk = alice().Post(Sb(id, "/files:mkdir?path=a/b/c&parents=true"), json::object());
  ASSERT_EQ(mk.status, 200) << mk.Describe();
  EXPECT_EQ(mk.json["created"], true);
  ApiResponse list = alice().Get(Sb(id, "/files:list?path=/sandbox/workspace"));
  ASSERT_EQ(list.status, 200) << list.Describe();
  std::set<std::string> names;
  for (const json& e : list.json["entries"]) names.insert(e["name"].get<std::string>());
  EXPECT_TRUE(names.count("dir") && names.count("a")) << list.Describe();
  // The command sees what the API wrote.
  ApiResponse cat =
      alice().Post(Sb(id, "/exec"), {{"argv", {"cat", "/sandbox/workspace/dir/hello.txt"}}});
  EXPECT_EQ(cat.json.value("stdout_preview", ""), "hello, sandbox") << cat.Describe();

  ApiResponse rm = alice().Delete(Sb(id, "/files?path=dir/hello.txt"));
  ASSERT_EQ(rm.status, 200) << rm.Describe();
  EXPECT_EQ(rm.json["removed"], true);
  ExpectError(alice().Get(Sb(id, "/files:stat?path=dir/hello.txt")), 404, "not_found",
              "dir/hello.txt");
  ExpectError(alice().Get(Sb(id, "/files?path=dir")), 409, "failed_precondition", "not a file");
  ExpectError(alice().Get(Sb(id, "/files?path=")), 422, "invalid_argument", "path");
  ExpectError(alice().Get(Sb(id, "/files")), 422, "invalid_argument", "path");
  ExpectError(alice().Put(Sb(id, "/files?path=x&mode=999"), "x"), 422, "invalid_argument", "mode");
  ApiResponse rmdir = alice().Delete(Sb(id, "/files?path=a&recursive=true"));
  EXPECT_EQ(rmdir.status, 200) << rmdir.Describe();
}

// Attack: reach host files through the file API with "..", an absolute path outside the
// sandbox areas, or a symlink the sandbox planted. Expected: refused (403), message naming the
// path, and nothing read or written outside.
TEST_F(DaemonApiTest, FilePathTraversalIsRefused) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  for (const char* path :
       {"../../etc/passwd", "/sandbox/workspace/../../etc/passwd", "a/../../x"}) {
    SCOPED_TRACE(path);
    ExpectError(alice().Get(Sb(id, fmt::format("/files?path={}", path))), 403, "permission_denied",
                "\"..\" is not allowed");
    ExpectError(alice().Put(Sb(id, fmt::format("/files?path={}", path)), "pwned"), 403,
                "permission_denied", "\"..\" is not allowed");
    ExpectError(alice().Get(Sb(id, fmt::format("/files:stat?path={}", path))), 403,
                "permission_denied", "\"..\" is not allowed");
  }
  for (const char* path : {"/etc/passwd", "/proc/1/environ", "/sandbox", "/sandboxes/x"}) {
    SCOPED_TRACE(path);
    ApiResponse r = alice().Get(Sb(id, fmt::format("/files?path={}", path)));
    ExpectError(r, 403, "permission_denied", path);
    ApiResponse w = alice().Put(Sb(id, fmt::format("/files?path={}", path)), "pwned");
    ExpectError(w, 403, "permission_denied", path);
  }
  // A symlink inside the workspace pointing at the host's /etc (inside the sandbox, /etc is the
  // sandbox's own, but the file API must not follow links out of /sandbox/* at all).
  ApiResponse ln = alice().Post(Sb(id, "/exec"), {{"argv",
                                                   {"/bin/sh", "-c",
                                                    "ln -s /etc /sandbox/workspace/etc-link && "
                                                    "ln -s /etc/passwd /sandbox/workspace/pw"}}});
  ASSERT_EQ(ln.json.value("exit_code", -1), 0) << ln.Describe();
  // A symlink as the last component is not followed: the download refuses it as such.
  ExpectError(alice().Get(Sb(id, "/files?path=pw")), 409, "failed_precondition",
              "pw is a symlink, not a file");
  for (const char* path : {"etc-link/passwd", "etc-link/hostname"}) {
    SCOPED_TRACE(path);
    ApiResponse r = alice().Get(Sb(id, fmt::format("/files?path={}", path)));
    ExpectError(r, 403, "permission_denied", path);
    EXPECT_THAT(r.body, ::testing::Not(HasSubstr("root:x:0:0")));
  }
  // An upload through the link is refused and writes nothing (its answer: the test below).
  ApiResponse up = alice().Put(Sb(id, "/files?path=etc-link/evil"), "pwned");
  EXPECT_GE(up.status, 400) << up.Describe();
  ApiResponse there = alice().Post(Sb(id, "/exec"), {{"argv", {"test", "-e", "/etc/evil"}}});
  EXPECT_EQ(there.json.value("exit_code", 0), 1) << there.Describe();
  ExpectError(alice().Get(Sb(id, "/files:list?path=etc-link")), 403, "permission_denied",
              "etc-link");
  ExpectError(alice().Post(Sb(id, "/files:mkdir?path=etc-link/newdir"), json::object()), 403,
              "permission_denied", "etc-link/newdir");
  ExpectError(alice().Delete(Sb(id, "/files?path=etc-link/hostname")), 403, "permission_denied",
              "etc-link/hostname");
}

// Attack as above, by upload. Expected: 403 naming the path (the worker's refusal, read even
// though it stopped reading before the commit byte).
TEST_F(DaemonApiTest, UploadThroughSymlinkNamesThePath) {
  std::string id = NewSandbox();
  ASSERT_FALSE(id.empty());
  ApiResponse ln = alice().Post(Sb(id, "/exec"),
                                {{"argv", {"ln", "-s", "/etc", "/sandbox/workspace/etc-link"}}});
  ASSERT_EQ(ln.json.value("exit_code", -1), 0) << ln.Describe();
  ExpectError(alice().Put(Sb(id, "/files?path=etc-link/evil"), "pwned"), 403, "permission_denied",
              "etc-link/evil");
}

// An upload past the node's file limit (--max-file-bytes) is 413, and nothing is written.
TEST(DaemonLimitsTest, UploadPastTheFileLimitIs413) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: airlockd runs sandboxes";
  auto d = TestDaemon::Start({.extra_args = {"--max-file-bytes", "4096"}});
  ASSERT_TRUE(d.ok()) << d.status();
  auto key = (*d)->CreateKey("limits");
  ASSERT_TRUE(key.ok()) << key.status();
  Api api(d->get(), *key);
  std::string id = api.CreateSandbox();
  ASSERT_FALSE(id.empty());
  ApiResponse fits =
      api.Put(fmt::format("/v1/sandboxes/{}/files?path=fits", id), std::string(4096, 'a'));
  EXPECT_EQ(fits.status, 200) << fits.Describe();
  ExpectError(api.Put(fmt::format("/v1/sandboxes/{}/files?path=big", id), std::string(8192, 'b')),
              413, "payload_too_large", "4096");
  ExpectError(api.Get(fmt::format("/v1/sandboxes/{}/files:stat?path=big", id)), 404, "not_found",
              "big");
}

// Attack: one key keeps long requests running (commands that sleep, whose clients may already
// have left) to take every worker from the other keys. Beyond --max-long-requests-per-key its
// next long request is 429; another key's commands, and everyone's quick requests, go on.
TEST(DaemonLimitsTest, OneKeyCannotTakeEveryWorker) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: airlockd runs sandboxes";
  auto d = TestDaemon::Start({.extra_args = {"--max-long-requests-per-key", "2"}});
  ASSERT_TRUE(d.ok()) << d.status();
  auto a = (*d)->CreateKey("greedy");
  auto b = (*d)->CreateKey("other");
  ASSERT_TRUE(a.ok() && b.ok());
  Api greedy(d->get(), *a), other(d->get(), *b);
  std::string mine = greedy.CreateSandbox();
  std::string theirs = other.CreateSandbox();
  ASSERT_FALSE(mine.empty());
  ASSERT_FALSE(theirs.empty());
  auto sleep_in = [](Api& api, const std::string& id) {
    return api.Post(fmt::format("/v1/sandboxes/{}/exec", id), {{"argv", {"sleep", "3"}}});
  };
  std::vector<std::thread> holders;
  std::atomic<int> done_ok{0};
  for (int i = 0; i < 2; ++i) {
    holders.emplace_back([&] {
      if (sleep_in(greedy, mine).status == 200) ++done_ok;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // both are running
  ExpectError(sleep_in(greedy, mine), 429, "resource_exhausted", "2 long requests");
  ApiResponse theirs_ran = other.Post(fmt::format("/v1/sandboxes/{}/exec", theirs),
                                      {{"argv", {"echo", "still served"}}});
  EXPECT_EQ(theirs_ran.json.value("stdout_preview", ""), "still served\n") << theirs_ran.Describe();
  EXPECT_EQ(greedy.Get(fmt::format("/v1/sandboxes/{}", mine)).status, 200);
  for (std::thread& t : holders) t.join();
  EXPECT_EQ(done_ok.load(), 2);
  // The slots come back when the requests end.
  EXPECT_EQ(greedy.Post(fmt::format("/v1/sandboxes/{}/exec", mine), {{"argv", {"true"}}}).status,
            200);
}

// ---- faults ----

bool IsSleep(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/comm", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char comm[32] = {0};
  bool sleep = std::fgets(comm, sizeof comm, f) != nullptr && std::string(comm) == "sleep\n";
  std::fclose(f);
  return sleep;
}

// A daemon of the test's own (started with DaemonOptions()) and one API key for it.
class OwnDaemonTest : public ::testing::Test {
 protected:
  virtual testing::TestDaemonOptions DaemonOptions() const { return {}; }

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: airlockd runs sandboxes";
    auto d = TestDaemon::Start(DaemonOptions());
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
    auto key = daemon_->CreateKey("user");
    ASSERT_TRUE(key.ok()) << key.status();
    key_ = *key;
  }
  Api api() { return Api(daemon_.get(), key_); }

  std::unique_ptr<TestDaemon> daemon_;
  std::string key_;
};

class DaemonFaultTest : public OwnDaemonTest {};

// kill -9 of airlockd while 50 commands run in 5 sandboxes, one of whose shims is also killed:
// after a restart on the same data directory, the 4 sandboxes with live shims are re-adopted
// (exec works, the commands that finished meanwhile have their results), the one without is
// reaped (Gone, its commands killed, no process, cgroup or mount of it left), and GET shows
// exactly that.
TEST_F(DaemonFaultTest, KillNineDuringExecsThenRestartAdoptsOrReaps) {
  constexpr int kSandboxes = 5, kPerSandbox = 10;
  std::vector<std::string> ids;
  for (int i = 0; i < kSandboxes; ++i) {
    ApiResponse r;
    std::string id = api().CreateSandbox({{"spec", json::object()}}, &r);
    ASSERT_FALSE(id.empty()) << r.Describe();
    ids.push_back(id);
  }
  // Half of the commands are plain execs whose connections die with the daemon, half are
  // background commands.
  std::vector<std::thread> clients;
  // The sleeps outlast the start of all 50 (slow in the sanitizer build under load).
  std::atomic<int> answered{0}, background_answered{0};
  for (int i = 0; i < kSandboxes * kPerSandbox; ++i) {
    const std::string& id = ids[static_cast<size_t>(i % kSandboxes)];
    bool background = i % 2 == 0;
    clients.emplace_back([&, id, background] {
      Api a(daemon_.get(), key_);
      ApiResponse r = a.Post(fmt::format("/v1/sandboxes/{}/exec", id),
                             {{"argv", {"sleep", "15"}}, {"background", background}});
      if (r.status != 0) ++answered;
      if (r.status == 202) ++background_answered;
    });
  }
  // Every command runs (a `sleep` process under its sandbox's shim) before the kill.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int running = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    running = 0;
    for (const std::string& id : ids) {
      for (pid_t p : TestDaemon::Descendants(daemon_->ShimPid(id))) running += IsSleep(p);
    }
    if (running == kSandboxes * kPerSandbox) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(running, kSandboxes * kPerSandbox);
  // The background starts have been answered; the plain execs are waiting for their results.
  while (background_answered < kSandboxes * kPerSandbox / 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  const std::string& lost = ids.back();
  pid_t lost_shim = daemon_->ShimPid(lost);
  ASSERT_GT(lost_shim, 0);
  std::vector<pid_t> lost_tree = TestDaemon::Descendants(lost_shim);
  EXPECT_GE(lost_tree.size(), 2u);  // its init and the sleeps
  ASSERT_TRUE(daemon_->Kill().ok());
  ASSERT_EQ(::kill(lost_shim, SIGKILL), 0);
  for (std::thread& t : clients) t.join();
  // Background starts were answered before the kill; plain execs lost their connection.
  EXPECT_EQ(answered.load(), kSandboxes * kPerSandbox / 2);

  ASSERT_TRUE(daemon_->Restart().ok()) << daemon_->log();
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    SCOPED_TRACE(ids[i]);
    ApiResponse s = api().Get("/v1/sandboxes/" + ids[i]);
    EXPECT_EQ(s.json.value("state", ""), "Running") << s.Describe();
    EXPECT_GT(daemon_->ShimPid(ids[i]), 0);
    ApiResponse e =
        api().Post(fmt::format("/v1/sandboxes/{}/exec", ids[i]), {{"argv", {"echo", "back"}}});
    EXPECT_EQ(e.json.value("stdout_preview", ""), "back\n") << e.Describe();
    ApiResponse events = api().Get(fmt::format("/v1/sandboxes/{}/events", ids[i]));
    EXPECT_THAT(events.body, HasSubstr("adopt")) << events.Describe();
  }
  {
    SCOPED_TRACE(lost);
    ApiResponse s = api().Get("/v1/sandboxes/" + lost);
    EXPECT_EQ(s.json.value("state", ""), "Gone") << s.Describe();
    for (pid_t p : lost_tree) EXPECT_FALSE(TestDaemon::Alive(p)) << "pid " << p << " survived";
    EXPECT_EQ(daemon_->ShimPid(lost), -1);
    EXPECT_THAT(daemon_->CgroupsOf(lost), ::testing::IsEmpty());
    EXPECT_THAT(daemon_->MountsOf(lost), ::testing::IsEmpty());
    EXPECT_NE(::access(fmt::format("{}/run/{}", daemon_->data_dir(), lost).c_str(), F_OK), 0)
        << "its run directory is left";
    ExpectError(api().Post(fmt::format("/v1/sandboxes/{}/exec", lost), {{"argv", {"true"}}}), 409,
                "failed_precondition", "Gone");
  }
  // Every command reaches an end state in the store: finished (its result kept) where the shim
  // lived, killed where it did not.
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::map<std::string, std::map<std::string, int>> states;
  while (std::chrono::steady_clock::now() < deadline) {
    states.clear();
    bool any_running = false;
    for (const std::string& id : ids) {
      ApiResponse c = api().Get(fmt::format("/v1/sandboxes/{}/commands", id));
      for (const json& cmd : c.json.value("commands", json::array())) {
        // Polling a command reads its result from the shim when it has ended.
        ApiResponse one =
            api().Get(fmt::format("/v1/sandboxes/{}/commands/{}", id, cmd.value("command_id", "")));
        std::string state = one.json.value("state", "?");
        if (state == "running") any_running = true;
        if (cmd.value("argv", json::array()) == json{"sleep", "15"}) ++states[id][state];
      }
    }
    if (!any_running) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    EXPECT_EQ(states[ids[i]]["finished"], kPerSandbox) << ids[i];
  }
  EXPECT_EQ(states[lost]["killed"], kPerSandbox);
}

// 20 concurrent creates with one idempotency key make exactly one sandbox.
TEST_F(DaemonFaultTest, ConcurrentIdempotentCreatesMakeOneSandbox) {
  constexpr int kClients = 20;
  std::vector<ApiResponse> answers(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      Api a(daemon_.get(), key_);
      answers[static_cast<size_t>(i)] =
          a.Post("/v1/sandboxes", {{"spec", json::object()}, {"idempotency_key", "retry-me"}});
    });
  }
  for (std::thread& t : clients) t.join();
  std::set<std::string> ids;
  int created = 0;
  for (const ApiResponse& r : answers) {
    EXPECT_TRUE(r.status == 200 || r.status == 201) << r.Describe();
    created += r.status == 201;
    ids.insert(r.json.value("id", ""));
    EXPECT_EQ(r.json.value("state", ""), "Running") << r.Describe();
  }
  EXPECT_EQ(created, 1);
  ASSERT_EQ(ids.size(), 1u);
  ApiResponse list = api().Get("/v1/sandboxes");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.json["sandboxes"].size(), 1u) << list.Describe();
  // A different key is a different sandbox.
  ApiResponse other =
      api().Post("/v1/sandboxes", {{"spec", json::object()}, {"idempotency_key", "other"}});
  EXPECT_EQ(other.status, 201) << other.Describe();
  EXPECT_NE(other.json.value("id", ""), *ids.begin());
}

// A client that hangs up in the middle of an exec or attach stream: the daemon's sockets, pipes
// and other non-file descriptors return to where they were (its database files are not counted:
// the store's connection pool grows with load, up to its size), and every command still runs to
// its end with its result stored.
TEST_F(DaemonFaultTest, ClientLeavingAStreamLeaksNothing) {
  std::string id = api().CreateSandbox();
  ASSERT_FALSE(id.empty());
  // Warm up: the first exec opens what the daemon keeps (database connections, pools).
  ASSERT_EQ(api().Post(fmt::format("/v1/sandboxes/{}/exec", id), {{"argv", {"true"}}}).status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int before = daemon_->OpenNonFileFds();
  ASSERT_GT(before, 0);
  std::vector<std::string> command_ids;
  for (int i = 0; i < 5; ++i) {
    std::string cid;
    ApiResponse r = api().Stream(
        Verb::post, fmt::format("/v1/sandboxes/{}/exec", id),
        json{{"argv", {"/bin/sh", "-c", "echo first; sleep 2; echo last"}}, {"stream", true}}
            .dump(),
        [&](std::string_view name, const json& data) {
          if (name == "event" && data.contains("command_id")) cid = data["command_id"];
          return name != "stdout";  // hang up at the first output
        });
    EXPECT_EQ(r.status, 200) << r.Describe();
    ASSERT_FALSE(cid.empty()) << r.body;
    command_ids.push_back(cid);
  }
  // The same for an attach stream of a background command.
  ApiResponse bg = api().Post(
      fmt::format("/v1/sandboxes/{}/exec", id),
      {{"argv", {"/bin/sh", "-c", "echo first; sleep 2; echo last"}}, {"background", true}});
  ASSERT_EQ(bg.status, 202) << bg.Describe();
  std::string bg_id = bg.json.value("command_id", "");
  ApiResponse attached =
      api().Stream(Verb::get, fmt::format("/v1/sandboxes/{}/commands/{}/stream", id, bg_id), "",
                   [&](std::string_view name, const json&) { return name != "stdout"; });
  EXPECT_EQ(attached.status, 200) << attached.Describe();
  command_ids.push_back(bg_id);
  // Every command still ran to its end, with its whole output recorded.
  for (const std::string& cid : command_ids) {
    ApiResponse c;
    for (int i = 0; i < 100; ++i) {
      c = api().Get(fmt::format("/v1/sandboxes/{}/commands/{}", id, cid));
      if (c.json.value("state", "") != "running") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(c.json.value("state", ""), "finished") << c.Describe();
    EXPECT_EQ(c.json["result"].value("stdout_preview", ""), "first\nlast\n") << c.Describe();
  }
  int after = -1;
  for (int i = 0; i < 50; ++i) {
    after = daemon_->OpenNonFileFds();
    if (after <= before) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_LE(after, before);
}

// ---- the warm pool (airlockd --warm-pool N) ----

// A pool whose template does not exist stops the daemon at start, naming the flag and the
// template; nothing is started.
TEST(DaemonWarmPoolStartTest, AnUnknownTemplateStopsTheDaemonNamingIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: airlockd runs sandboxes";
  auto d = TestDaemon::Start(
      {.extra_args = {"--warm-pool", "2", "--warm-pool-template", "no-such-template"}});
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("--warm-pool-template no-such-template"));
  EXPECT_THAT(d.status().message(), HasSubstr("does not exist"));
}

class DaemonWarmPoolTest : public OwnDaemonTest {
 protected:
  static constexpr int kPool = 2;

  testing::TestDaemonOptions DaemonOptions() const override {
    return {.extra_args = {"--warm-pool", std::to_string(kPool)}};
  }

  // A counter or gauge from /metrics (-1 when absent), e.g.
  // Metric("airlock_warm_pool_claims_total{result=\"hit\"}").
  double Metric(std::string_view series) {
    ApiResponse m = Api(daemon_.get(), "").Get("/metrics");
    const std::string start = "\n" + std::string(series) + " ";
    size_t at = ("\n" + m.body).find(start);
    if (at == std::string::npos) return -1;
    return std::atof(m.body.c_str() + at + start.size() - 1);
  }
  // Waits until the pool holds `n` started sandboxes.
  bool PoolReaches(int n) {
    for (int i = 0; i < 600; ++i) {
      if (Metric("airlock_warm_pool_ready") == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // Every sandbox with a state directory on the node (the pool's and the callers').
  std::set<std::string> SandboxDirs() {
    std::set<std::string> ids;
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator(daemon_->data_dir() + "/sandboxes", ec)) {
      ids.insert(e.path().filename().string());
    }
    return ids;
  }
};

// A create of the pool's spec is handed a sandbox the pool started: already Running, with its
// whole trail (the start by the pool, then the hand-over to the caller), its TTL counted from the
// hand-over, and working like any other. The pool refills; no sandbox is handed out twice; the
// pool's sandboxes are nobody's to list or name.
TEST_F(DaemonWarmPoolTest, CreatesOfThePoolsSpecAreHandedStartedSandboxes) {
  ASSERT_TRUE(PoolReaches(kPool)) << daemon_->log();
  const std::set<std::string> pooled = SandboxDirs();
  ASSERT_EQ(pooled.size(), static_cast<size_t>(kPool));
  // Nobody sees the pool's sandboxes.
  ApiResponse empty = api().Get("/v1/sandboxes");
  EXPECT_EQ(empty.json["sandboxes"].size(), 0u) << empty.Describe();
  ExpectError(api().Get("/v1/sandboxes/" + *pooled.begin()), 404, "not_found", *pooled.begin());

  std::set<std::string> handed;
  for (int i = 0; i < kPool + 1; ++i) {
    ApiResponse r = api().Post(
        "/v1/sandboxes",
        {{"template", "default"}, {"ttl_seconds", 600}, {"metadata", {{"n", std::to_string(i)}}}});
    ASSERT_EQ(r.status, 201) << r.Describe();
    EXPECT_EQ(r.json.value("state", ""), "Running") << r.Describe();
    EXPECT_EQ(r.json["metadata"].value("n", ""), std::to_string(i)) << r.Describe();
    EXPECT_TRUE(handed.insert(r.json.value("id", "")).second) << "handed out twice";
  }
  // The first two came from the pool (the pool had two); the third started cold or was
  // refilled in time; every one is a different sandbox.
  EXPECT_GE(Metric("airlock_warm_pool_claims_total{result=\"hit\"}"), kPool);
  int from_pool = 0;
  for (const std::string& id : handed) {
    SCOPED_TRACE(id);
    from_pool += pooled.count(id);
    ApiResponse got = api().Get("/v1/sandboxes/" + id);
    ASSERT_EQ(got.status, 200) << got.Describe();
    absl::Time created, expires;
    std::string err;
    ASSERT_TRUE(
        absl::ParseTime(absl::RFC3339_full, got.json.value("created_at", ""), &created, &err));
    ASSERT_TRUE(
        absl::ParseTime(absl::RFC3339_full, got.json.value("expires_at", ""), &expires, &err));
    EXPECT_EQ(expires - created, absl::Seconds(600));
    ApiResponse e = api().Post(Sb(id, "/exec"), {{"argv", {"/bin/sh", "-c", "echo $((6*7))"}}});
    EXPECT_EQ(e.json.value("stdout_preview", ""), "42\n") << e.Describe();
    if (pooled.count(id) == 0) continue;
    ApiResponse events = api().Get(Sb(id, "/events"));
    std::vector<std::string> trail;
    for (const json& ev : events.json.value("events", json::array())) {
      trail.push_back(ev.value("kind", "") + ":" + ev.value("actor", ""));
    }
    ASSERT_GE(trail.size(), 6u) << events.Describe();
    EXPECT_EQ(trail[0], "state_transition:warm-pool");
    EXPECT_EQ(trail[4], "state_transition:warm-pool");  // Starting -> Running, by the pool
    EXPECT_THAT(trail, ::testing::Contains(HasSubstr("sandbox_claimed:key:")));
  }
  EXPECT_EQ(from_pool, kPool);
  ApiResponse mine = api().Get("/v1/sandboxes");
  EXPECT_EQ(mine.json["sandboxes"].size(), handed.size()) << mine.Describe();
  // The pool fills up again, with new sandboxes.
  ASSERT_TRUE(PoolReaches(kPool)) << daemon_->log();
  std::set<std::string> now = SandboxDirs();
  int fresh = 0;
  for (const std::string& id : now) fresh += handed.count(id) == 0 && pooled.count(id) == 0;
  EXPECT_EQ(fresh, kPool);
}

// A create of another spec, or one that clones a workspace, starts its own sandbox; a retry with
// an idempotency key gets the sandbox of the first try, and takes nothing more from the pool.
TEST_F(DaemonWarmPoolTest, OtherSpecsStartColdAndRetriesTakeNothingMore) {
  ASSERT_TRUE(PoolReaches(kPool)) << daemon_->log();
  const std::set<std::string> pooled = SandboxDirs();
  ApiResponse other = api().Post("/v1/sandboxes", {{"spec", {{"resources", {{"memoryMb", 300}}}}}});
  ASSERT_EQ(other.status, 201) << other.Describe();
  EXPECT_EQ(pooled.count(other.json.value("id", "")), 0u);
  EXPECT_EQ(Metric("airlock_warm_pool_claims_total{result=\"other_spec\"}"), 1);
  EXPECT_EQ(Metric("airlock_warm_pool_ready"), kPool);

  json body = {{"spec", json::object()}, {"idempotency_key", "once"}};
  ApiResponse first = api().Post("/v1/sandboxes", body);
  ASSERT_EQ(first.status, 201) << first.Describe();
  EXPECT_EQ(pooled.count(first.json.value("id", "")), 1u) << "the default spec is the pool's";
  ApiResponse retry = api().Post("/v1/sandboxes", body);
  EXPECT_EQ(retry.status, 200) << retry.Describe();
  EXPECT_EQ(retry.json.value("id", ""), first.json.value("id", ""));
  EXPECT_EQ(Metric("airlock_warm_pool_claims_total{result=\"hit\"}"), 1);
}

// A pooled sandbox whose shim died (killed from outside) is never handed out: creates get the
// live one and then a cold start, and each works.
TEST_F(DaemonWarmPoolTest, APooledSandboxWithADeadShimIsNotHandedOut) {
  ASSERT_TRUE(PoolReaches(kPool)) << daemon_->log();
  const std::set<std::string> pooled = SandboxDirs();
  const std::string dead = *pooled.begin();
  pid_t shim = daemon_->ShimPid(dead);
  ASSERT_GT(shim, 0);
  ASSERT_EQ(::kill(shim, SIGKILL), 0);
  for (int i = 0; i < 50 && TestDaemon::Alive(shim); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i = 0; i < kPool; ++i) {
    ApiResponse r = api().Post("/v1/sandboxes", {{"spec", json::object()}});
    ASSERT_EQ(r.status, 201) << r.Describe();
    const std::string id = r.json.value("id", "");
    EXPECT_NE(id, dead);
    ApiResponse e = api().Post(Sb(id, "/exec"), {{"argv", {"echo", "alive"}}});
    EXPECT_EQ(e.json.value("stdout_preview", ""), "alive\n") << e.Describe();
  }
}

// On a graceful stop the daemon destroys the sandboxes waiting in the pool (they are nobody's),
// while the callers' sandboxes keep running. After kill -9, the next daemon re-adopts the pool
// and hands out the same sandboxes without starting new ones.
TEST_F(DaemonWarmPoolTest, StopDestroysThePoolAndARestartAfterKillReadoptsIt) {
  ASSERT_TRUE(PoolReaches(kPool)) << daemon_->log();
  std::set<std::string> pooled = SandboxDirs();
  ASSERT_TRUE(daemon_->Kill().ok());
  ASSERT_TRUE(daemon_->Restart().ok()) << daemon_->log();
  ASSERT_TRUE(PoolReaches(kPool)) << daemon_->log();
  EXPECT_EQ(SandboxDirs(), pooled) << "the restarted daemon started new sandboxes";
  ApiResponse claimed = api().Post("/v1/sandboxes", {{"spec", json::object()}});
  ASSERT_EQ(claimed.status, 201) << claimed.Describe();
  const std::string mine = claimed.json.value("id", "");
  EXPECT_EQ(pooled.count(mine), 1u);
  ApiResponse e = api().Post(Sb(mine, "/exec"), {{"argv", {"echo", "adopted"}}});
  EXPECT_EQ(e.json.value("stdout_preview", ""), "adopted\n") << e.Describe();
  ASSERT_TRUE(PoolReaches(kPool)) << daemon_->log();

  std::set<std::string> waiting = SandboxDirs();
  waiting.erase(mine);
  ASSERT_EQ(waiting.size(), static_cast<size_t>(kPool));
  std::map<std::string, pid_t> shims;
  for (const std::string& id : waiting) shims[id] = daemon_->ShimPid(id);
  ASSERT_TRUE(daemon_->Stop().ok()) << daemon_->log();
  for (const auto& [id, shim] : shims) {
    SCOPED_TRACE(id);
    EXPECT_GT(shim, 0);
    // The shim ends on its own right after answering the destroy (slowly in a sanitizer build).
    for (int i = 0; i < 200 && TestDaemon::Alive(shim); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_FALSE(TestDaemon::Alive(shim)) << "a pooled sandbox's shim outlived the daemon";
    EXPECT_THAT(daemon_->CgroupsOf(id), ::testing::IsEmpty());
    EXPECT_THAT(daemon_->MountsOf(id), ::testing::IsEmpty());
  }
  EXPECT_GT(daemon_->ShimPid(mine), 0) << "the caller's sandbox must keep running";
}

}  // namespace
}  // namespace airlock::daemon
