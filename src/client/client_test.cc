// The C++ client against a real airlockd (in this process, on loopback) running real sandboxes:
// every call, the errors it returns, and the image endpoints with spec.image.
#include "client/client.h"

#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <filesystem>
#include <thread>

#include "common/files.h"
#include "common/status.h"
#include "daemon/daemon.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "image/testing/image_builder.h"
#include "store/sqlite_store.h"

namespace airlock::client {
namespace {

namespace it = image::testing;
using nlohmann::json;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: airlockd's sandboxes map host uid ranges";
    ASSERT_EQ(setgroups(0, nullptr), 0);
    char tmpl[] = "/tmp/airlock-client-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    {
      auto store = store::OpenSqliteStore(dir_, {});
      ASSERT_TRUE(store.ok()) << store.status();
      auto key = (*store)->CreateApiKey("test", "admin");
      ASSERT_TRUE(key.ok()) << key.status();
      key_ = key->token;
    }
    auto node = daemon::NodeIdFor(dir_);
    ASSERT_TRUE(node.ok());
    cgroup_ = "airlock-test/" + node->value();
    StartDaemon();
  }

  // Starts airlockd on the test's data directory (again, after a stop) and a client of it.
  void StartDaemon() {
    daemon::DaemonOptions o;
    o.listen = "127.0.0.1:0";
    o.manager.data_dir = dir_;
    o.manager.tools_dir = AIRLOCK_TEST_TOOLS_DIR;
    o.manager.shim_bin = AIRLOCK_TEST_SHIM;
    auto node = daemon::NodeIdFor(dir_);
    ASSERT_TRUE(node.ok());
    o.manager.node = *node;
    o.manager.cgroup_base = cgroup_;
    o.worker_threads = 8;
    Customize(o);
    auto d = daemon::Daemon::Start(o);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    url_ = fmt::format("http://127.0.0.1:{}", daemon_->port());
    auto c = Client::Create({.url = url_, .api_key = key_});
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }

  void TearDown() override {
    if (client_) {
      // Every sandbox this test made is destroyed: nothing may outlive the test.
      auto list = client_->ListSandboxes({.states = {"Running", "Paused"}});
      if (list.ok()) {
        for (const Sandbox& s : list->sandboxes) EXPECT_TRUE(client_->DestroySandbox(s.id).ok());
      }
    }
    client_.reset();
    daemon_.reset();
    // The node's cgroup parent in the v2 tree and in every v1 controller's hierarchy.
    ::rmdir(("/sys/fs/cgroup/" + cgroup_).c_str());
    std::error_code ec;
    for (const auto& h : std::filesystem::directory_iterator("/sys/fs/cgroup", ec)) {
      ::rmdir((h.path().string() + "/" + cgroup_).c_str());
    }
    if (!dir_.empty()) (void)RemoveTree(dir_);
  }

  // A client with a key of its own, made in the daemon's store.
  absl::StatusOr<std::unique_ptr<Client>> ClientOfNewKey(const std::string& name) {
    ASSIGN_OR_RETURN(std::unique_ptr<store::Store> store, store::OpenSqliteStore(dir_, {}));
    ASSIGN_OR_RETURN(store::NewApiKey key, store->CreateApiKey(name, "admin"));
    return Client::Create({.url = url_, .api_key = key.token});
  }

  // For fixtures that run the daemon with other options.
  virtual void Customize(daemon::DaemonOptions&) {}

  // A busybox image (layers as in tests/images) written as an OCI layout tarball.
  // `customize` may add files and set the image's config.
  std::string BusyboxImage(
      const std::string& marker,
      const std::function<void(it::Image&, std::vector<it::Entry>&)>& customize = nullptr) {
    auto busybox = ReadFile("/bin/busybox", 8 << 20);
    EXPECT_TRUE(busybox.ok()) << "install busybox-static (scripts/install-deps)";
    std::vector<it::Entry> files = {it::Dir("bin"), it::File("bin/busybox", *busybox, 0755),
                                    it::Dir("etc"), it::File("etc/marker", marker)};
    for (const char* applet : {"sh", "cat", "echo", "sleep", "id"}) {
      files.push_back(it::Symlink(fmt::format("bin/{}", applet), "busybox"));
    }
    it::Image img;
    img.env = {"PATH=/bin"};
    if (customize) customize(img, files);
    img.layers.push_back({it::Tar(files), it::Compression::kGzip});
    std::string path = dir_ + "/busybox-" + marker + ".oci.tar";
    it::WriteArchive(path, it::OciLayout(img).files);
    return path;
  }

  std::string dir_, key_, url_, cgroup_;
  std::unique_ptr<daemon::Daemon> daemon_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientTest, ErrorsCarryTheServersCodeMessageAndRequestId) {
  auto bad = Client::Create({.url = url_, .api_key = "ak_wrong"});
  ASSERT_TRUE(bad.ok());
  absl::StatusOr<SandboxList> denied = (*bad)->ListSandboxes();
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kUnauthenticated);
  ApiError e = ErrorOf(denied.status());
  EXPECT_EQ(e.http_status, 401);
  EXPECT_EQ(e.code, "unauthenticated");
  EXPECT_FALSE(e.request_id.empty());
  EXPECT_NE(e.message.find("API key"), std::string::npos) << e.message;

  absl::StatusOr<Sandbox> missing = client_->GetSandbox("sb-000000000000");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorOf(missing.status()).http_status, 404);

  absl::StatusOr<Sandbox> invalid = client_->CreateSandbox({.ttl_seconds = -5});
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorOf(invalid.status()).http_status, 422);

  auto nobody = Client::Create({.url = "http://127.0.0.1:1", .api_key = key_});
  ASSERT_TRUE(nobody.ok());
  absl::StatusOr<SandboxList> down = (*nobody)->ListSandboxes();
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrorOf(down.status()).http_status, 0);
}

TEST_F(ClientTest, SandboxLifecycleCommandsAndFiles) {
  CreateSandboxRequest req{.spec = json::object(),
                           .ttl_seconds = 600,
                           .metadata = {{"suite", "client"}},
                           .idempotency_key = "client-test-1"};
  absl::StatusOr<Sandbox> sb = client_->CreateSandbox(req);
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(sb->state, "Running");
  EXPECT_EQ(sb->metadata.at("suite"), "client");
  absl::StatusOr<Sandbox> again = client_->CreateSandbox(req);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, sb->id);

  auto listed = client_->ListSandboxes({.metadata = {{"suite", "client"}}});
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->sandboxes.size(), 1u);
  EXPECT_EQ(listed->sandboxes[0].id, sb->id);
  auto none = client_->ListSandboxes({.metadata = {{"suite", "other"}}});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->sandboxes.empty());

  // Plain and streamed exec.
  absl::StatusOr<CommandResult> r =
      client_->Exec(sb->id, {.argv = {"sh", "-c", "echo hi; exit 3"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->stdout_preview, "hi\n");
  std::string out, err;
  int results = 0;
  r = client_->ExecStream(sb->id, {.argv = {"sh", "-c", "echo one; echo two >&2; echo three"}},
                          [&](const ExecEvent& e) {
                            if (e.kind == ExecEvent::Kind::kStdout) out += e.text;
                            if (e.kind == ExecEvent::Kind::kStderr) err += e.text;
                            if (e.kind == ExecEvent::Kind::kResult) ++results;
                            return true;
                          });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(out, "one\nthree\n");
  EXPECT_EQ(err, "two\n");
  EXPECT_EQ(results, 1);
  EXPECT_EQ(r->exit_code, 0);

  // Background: poll, attach, kill.
  absl::StatusOr<Command> bg = client_->StartBackground(sb->id, {.argv = {"sleep", "300"}});
  ASSERT_TRUE(bg.ok()) << bg.status();
  EXPECT_EQ(bg->state, "running");
  absl::StatusOr<Command> polled = client_->GetCommand(sb->id, bg->command_id);
  ASSERT_TRUE(polled.ok());
  EXPECT_EQ(polled->state, "running");
  ASSERT_TRUE(client_->KillCommand(sb->id, bg->command_id, "KILL").ok());
  absl::StatusOr<json> attached = client_->StreamCommand(sb->id, bg->command_id, nullptr);
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_EQ(attached->value("signal", 0), 9) << attached->dump();
  auto commands = client_->ListCommands(sb->id);
  ASSERT_TRUE(commands.ok());
  EXPECT_EQ(commands->size(), 3u);

  // Files, small and large (streamed both ways).
  ASSERT_TRUE(client_->MakeDirectory(sb->id, "d/e", /*parents=*/true).ok());
  absl::StatusOr<FileEntry> w = client_->WriteFile(sb->id, "d/e/f.txt", "content\n");
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<std::string> read = client_->ReadFile(sb->id, "/sandbox/workspace/d/e/f.txt");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "content\n");
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 % 251);
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/big.bin", big).ok());
  ASSERT_TRUE(client_->UploadFrom(sb->id, "big.bin", dir_ + "/big.bin").ok());
  std::string down;
  absl::StatusOr<int64_t> size = client_->Download(sb->id, "big.bin", [&](std::string_view d) {
    down.append(d);
    return absl::OkStatus();
  });
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, static_cast<int64_t>(big.size()));
  EXPECT_TRUE(down == big);
  absl::StatusOr<FileEntry> st = client_->StatFile(sb->id, "big.bin");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->type, "file");
  EXPECT_EQ(st->size, static_cast<int64_t>(big.size()));
  auto entries = client_->ListFiles(sb->id, "/sandbox/workspace");
  ASSERT_TRUE(entries.ok());
  std::set<std::string> names;
  for (const FileEntry& f : *entries) names.insert(f.name);
  EXPECT_EQ(names, (std::set<std::string>{"big.bin", "d"}));
  EXPECT_EQ(client_->RemoveFile(sb->id, "d", /*recursive=*/false).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(client_->RemoveFile(sb->id, "d", /*recursive=*/true).ok());
  EXPECT_EQ(client_->StatFile(sb->id, "d").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<FileEntry> escape = client_->WriteFile(sb->id, "../../etc/x", "no");
  ASSERT_FALSE(escape.ok());
  EXPECT_EQ(ErrorOf(escape.status()).http_status, 403) << escape.status();

  // Pause, resume, TTL, events, destroy.
  absl::StatusOr<Sandbox> paused = client_->Pause(sb->id);
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_EQ(paused->state, "Paused");
  EXPECT_EQ(client_->Exec(sb->id, {.argv = {"true"}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Sandbox> resumed = client_->Resume(sb->id);
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->state, "Running");
  absl::StatusOr<Sandbox> longer = client_->ExtendTtl(sb->id, 1200);
  ASSERT_TRUE(longer.ok()) << longer.status();
  // The TTL now counts from this call: the sandbox's age plus 1200 s.
  EXPECT_GE(longer->ttl_seconds, 1200);
  EXPECT_LT(longer->ttl_seconds, 1200 + 60);
  EXPECT_GT(longer->expires_at, sb->expires_at);
  absl::StatusOr<json> events = client_->Events(sb->id);
  ASSERT_TRUE(events.ok());
  EXPECT_GT(events->size(), 5u);
  absl::StatusOr<Sandbox> gone = client_->DestroySandbox(sb->id);
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(gone->state, "Gone");
}

TEST_F(ClientTest, ImagesImportListRunAndRemove) {
  std::string tarball = BusyboxImage("from-the-image");
  std::vector<ImportProgress::Stage> stages;
  int64_t sent = 0;
  absl::StatusOr<std::vector<Image>> imported =
      client_->ImportImage(tarball, {"team/busybox:1"}, [&](const ImportProgress& p) {
        if (stages.empty() || stages.back() != p.stage) stages.push_back(p.stage);
        sent = p.bytes_sent;
        EXPECT_EQ(p.bytes_total, static_cast<int64_t>(std::filesystem::file_size(tarball)));
      });
  ASSERT_TRUE(imported.ok()) << imported.status();
  ASSERT_EQ(imported->size(), 1u);
  const Image& img = (*imported)[0];
  EXPECT_EQ(img.tags, std::vector<std::string>{"team/busybox:1"});
  EXPECT_EQ(img.layers, 1);
  EXPECT_EQ(sent, static_cast<int64_t>(std::filesystem::file_size(tarball)));
  ASSERT_FALSE(stages.empty());
  EXPECT_EQ(stages.front(), ImportProgress::Stage::kUploading);
  EXPECT_EQ(stages.back(), ImportProgress::Stage::kDone);
  EXPECT_NE(std::find(stages.begin(), stages.end(), ImportProgress::Stage::kUnpacking),
            stages.end());

  auto listed = client_->ListImages();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].digest, img.digest);
  absl::StatusOr<Image> by_tag = client_->GetImage("team/busybox:1");
  ASSERT_TRUE(by_tag.ok()) << by_tag.status();
  EXPECT_EQ(by_tag->digest, img.digest);
  EXPECT_EQ(client_->GetImage("team/other:1").status().code(), absl::StatusCode::kNotFound);

  // A tag resolves to the digest at create time; the sandbox runs on the image's root.
  absl::StatusOr<Sandbox> sb = client_->CreateSandbox({.spec = {{"image", "team/busybox:1"}}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(sb->image_digest, img.digest);
  EXPECT_EQ(sb->spec.value("image", ""), img.digest);
  absl::StatusOr<CommandResult> r = client_->Exec(sb->id, {.argv = {"/bin/cat", "/etc/marker"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_preview, "from-the-image") << r->error;

  // In use: removal refused (409) until the sandbox is gone.
  absl::Status busy = client_->RemoveImage("team/busybox:1");
  EXPECT_EQ(busy.code(), absl::StatusCode::kFailedPrecondition) << busy;
  EXPECT_EQ(ErrorOf(busy).http_status, 409);
  ASSERT_TRUE(client_->DestroySandbox(sb->id).ok());
  absl::Status removed = client_->RemoveImage(img.digest);
  EXPECT_TRUE(removed.ok()) << removed;
  EXPECT_EQ(client_->GetImage(img.digest).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->CreateSandbox({.spec = {{"image", "team/busybox:1"}}}).status().code(),
            absl::StatusCode::kNotFound);
}

// A command that runs quietly for longer than the client's read timeout still gets its result:
// Exec waits as long as the command may run. Other calls keep the short timeout.
TEST_F(ClientTest, ExecWaitsForAQuietCommandLongerThanTheReadTimeout) {
  auto quick = Client::Create({.url = url_, .api_key = key_, .timeout = std::chrono::seconds(1)});
  ASSERT_TRUE(quick.ok());
  absl::StatusOr<Sandbox> sb = client_->CreateSandbox({.spec = json::object()});
  ASSERT_TRUE(sb.ok()) << sb.status();
  for (std::optional<int64_t> limit : {std::optional<int64_t>(30), std::optional<int64_t>()}) {
    absl::StatusOr<CommandResult> r = (*quick)->Exec(
        sb->id, {.argv = {"sh", "-c", "sleep 2.5; echo done"}, .timeout_seconds = limit});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 0);
    EXPECT_EQ(r->stdout_preview, "done\n");
  }
  EXPECT_TRUE(client_->DestroySandbox(sb->id).ok());
}

// Stopping airlockd does not wait for a long command: the exec waiting for it ends at once, the
// command goes on in its sandbox, and the next daemon gives its result.
TEST_F(ClientTest, StoppingTheDaemonDoesNotWaitForALongCommand) {
  absl::StatusOr<Sandbox> sb = client_->CreateSandbox({.spec = json::object()});
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto waiter = Client::Create({.url = url_, .api_key = key_});
  ASSERT_TRUE(waiter.ok());
  absl::StatusOr<CommandResult> interrupted = absl::UnknownError("not run");
  std::thread exec([&] {
    interrupted = (*waiter)->Exec(sb->id, {.argv = {"sh", "-c", "sleep 6; echo finished"}});
  });
  std::string command_id;
  for (int i = 0; i < 100 && command_id.empty(); ++i) {
    auto commands = client_->ListCommands(sb->id);
    if (commands.ok() && !commands->empty() && (*commands)[0].state == "running") {
      command_id = (*commands)[0].command_id;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ASSERT_FALSE(command_id.empty()) << "the command did not start";
  auto start = std::chrono::steady_clock::now();
  client_.reset();
  daemon_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "the stop waited for the command";
  exec.join();
  EXPECT_FALSE(interrupted.ok()) << "the exec cannot have its result: the command still runs";

  StartDaemon();
  absl::StatusOr<Command> c = client_->GetCommand(sb->id, command_id);
  for (int i = 0; i < 200 && c.ok() && c->state == "running"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c = client_->GetCommand(sb->id, command_id);
  }
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state, "finished") << c->raw.dump();
  ASSERT_TRUE(c->result.has_value());
  EXPECT_EQ(c->result->exit_code, 0);
  EXPECT_EQ(c->result->stdout_preview, "finished\n");
}

// Runs `airlockd ARGS` (stdout and stderr together); its exit status and output.
std::pair<int, std::string> Airlockd(const std::string& args) {
  std::string cmd = std::string(AIRLOCKD_BIN) + " " + args + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  int status = ::pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Two keys on one node. The attack: Bob imports his own image under the tag Alice's sandboxes
// use ("team/busybox:1"), then deletes Alice's image by its digest. Alice's next sandbox still
// runs her image, Bob's delete and lookups answer 404 as for an image that does not exist, and
// neither key lists the other's images. The node's images (airlockd admin import-image) are
// seen by both, and only the node's operator removes them.
TEST_F(ClientTest, AKeyCannotTakeAnotherKeysImageOrTag) {
  absl::StatusOr<std::unique_ptr<Client>> bob = ClientOfNewKey("bob");
  ASSERT_TRUE(bob.ok()) << bob.status();
  auto mine = client_->ImportImage(BusyboxImage("alice"), {"team/busybox:1"});
  ASSERT_TRUE(mine.ok()) << mine.status();
  auto theirs = (*bob)->ImportImage(BusyboxImage("bob"), {"team/busybox:1"});
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  const std::string alices = (*mine)[0].digest;

  for (const std::string& ref : {alices, std::string("team/busybox:1")}) {
    absl::Status removed = (*bob)->RemoveImage(ref);
    if (ref == alices) {
      EXPECT_EQ(ErrorOf(removed).http_status, 404) << removed;
      EXPECT_EQ(removed.message(), fmt::format("image {} is not in the image store", alices))
          << "the answer for an image nobody imported";
    } else {
      EXPECT_TRUE(removed.ok()) << "Bob's own tag and image: " << removed;
    }
  }
  EXPECT_EQ((*bob)->GetImage(alices).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*bob)->CreateSandbox({.spec = {{"image", alices}}}).status().code(),
            absl::StatusCode::kNotFound);
  auto bobs_list = (*bob)->ListImages();
  ASSERT_TRUE(bobs_list.ok());
  EXPECT_TRUE(bobs_list->empty());

  absl::StatusOr<Sandbox> sb = client_->CreateSandbox({.spec = {{"image", "team/busybox:1"}}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(sb->image_digest, alices);
  absl::StatusOr<CommandResult> r = client_->Exec(sb->id, {.argv = {"/bin/cat", "/etc/marker"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_preview, "alice");
  ASSERT_TRUE(client_->DestroySandbox(sb->id).ok());

  // A node image: imported on the node, used by both keys, removed only there.
  auto [rc, out] = Airlockd(fmt::format("admin import-image --data-dir {} {} --tag node/busybox:1",
                                        dir_, BusyboxImage("node")));
  ASSERT_EQ(rc, 0) << out;
  for (Client* c : {client_.get(), bob->get()}) {
    absl::StatusOr<Sandbox> s = c->CreateSandbox({.spec = {{"image", "node/busybox:1"}}});
    ASSERT_TRUE(s.ok()) << s.status();
    r = c->Exec(s->id, {.argv = {"/bin/cat", "/etc/marker"}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->stdout_preview, "node");
    ASSERT_TRUE(c->DestroySandbox(s->id).ok());
  }
  absl::Status refused = (*bob)->RemoveImage("node/busybox:1");
  EXPECT_EQ(ErrorOf(refused).http_status, 403) << refused;
  std::tie(rc, out) =
      Airlockd(fmt::format("admin remove-image --data-dir {} node/busybox:1", dir_));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ((*bob)->GetImage("node/busybox:1").status().code(), absl::StatusCode::kNotFound);
  std::tie(rc, out) =
      Airlockd(fmt::format("admin remove-image --data-dir {} node/busybox:1", dir_));
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("image node/busybox:1 is not in the image store"), std::string::npos) << out;
}

// A daemon whose keys may hold about 2.5 busybox binaries' worth of images (an image of one is
// its unpacked file plus the compressed layer: 1.3-2.1 binaries).
class ClientQuotaTest : public ClientTest {
 protected:
  void Customize(daemon::DaemonOptions& o) override {
    o.max_image_bytes_per_key =
        static_cast<int64_t>(std::filesystem::file_size("/bin/busybox")) * 5 / 2;
  }
};

// A key fills its image quota: the import beyond it is refused (413, naming the quota) and
// leaves nothing; removing an image makes room; another key has its own quota.
TEST_F(ClientQuotaTest, AnImportBeyondTheKeysQuotaIsRefusedAndLeavesNothing) {
  auto first = client_->ImportImage(BusyboxImage("one"), {"one:1"});
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::vector<Image>> second =
      client_->ImportImage(BusyboxImage("two"), {"one:1", "two:1"});
  ASSERT_FALSE(second.ok());
  // Refused inside the import's progress stream, which had begun: the body's code says why.
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  EXPECT_EQ(ErrorOf(second.status()).code, "payload_too_large");
  EXPECT_NE(second.status().message().find("image quota"), std::string::npos) << second.status();
  auto listed = client_->ListImages();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].digest, (*first)[0].digest);
  EXPECT_EQ(client_->GetImage("two:1").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<Image> kept = client_->GetImage("one:1");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->digest, (*first)[0].digest) << "the refused import moved the key's tag";

  absl::StatusOr<std::unique_ptr<Client>> bob = ClientOfNewKey("bob");
  ASSERT_TRUE(bob.ok()) << bob.status();
  EXPECT_TRUE((*bob)->ImportImage(BusyboxImage("two"), {"two:1"}).ok()) << "Bob's own quota";

  ASSERT_TRUE(client_->RemoveImage("one:1").ok());
  EXPECT_TRUE(client_->ImportImage(BusyboxImage("two"), {"two:1"}).ok()) << "room again";
}

// The image's Env, WorkingDir and User apply to its sandboxes' commands, under the spec: what
// the spec sets wins, and a user named by the image is looked up in the image's own etc/passwd.
TEST_F(ClientTest, TheImageConfigAppliesUnderTheSpec) {
  std::string tarball = BusyboxImage("config", [](it::Image& img, std::vector<it::Entry>& files) {
    img.env = {"PATH=/bin", "FROM_IMAGE=yes", "SHARED=image"};
    img.working_dir = "/app";
    img.user = "app";
    files.push_back(it::Dir("app"));
    files.push_back(it::File("etc/passwd", "app:x:1500:1600::/app:/bin/sh\n"));
  });
  ASSERT_TRUE(client_->ImportImage(tarball, {"team/configured:1"}).ok());
  const std::vector<std::string> probe = {"sh", "-c",
                                          "echo $FROM_IMAGE $SHARED; pwd; id -u; id -g"};

  absl::StatusOr<Sandbox> sb = client_->CreateSandbox(
      {.spec = {{"image", "team/configured:1"}, {"env", {{"SHARED", "spec"}}}}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(sb->spec["workdir"], "/app") << "the effective spec shows what applies";
  absl::StatusOr<CommandResult> r = client_->Exec(sb->id, {.argv = probe});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_preview, "yes spec\n/app\n1500\n1600\n") << r->stderr_preview;
  ASSERT_TRUE(client_->DestroySandbox(sb->id).ok());

  sb = client_->CreateSandbox({.spec = {{"image", "team/configured:1"},
                                        {"workdir", "/sandbox/workspace"},
                                        {"user", {{"uid", 3000}, {"gid", 3001}}}}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  r = client_->Exec(sb->id, {.argv = probe});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_preview, "yes image\n/sandbox/workspace\n3000\n3001\n") << r->stderr_preview;
  ASSERT_TRUE(client_->DestroySandbox(sb->id).ok());

  // An image naming a user it does not have cannot start: a clear error, and nothing created.
  tarball =
      BusyboxImage("ghost", [](it::Image& img, std::vector<it::Entry>&) { img.user = "ghost"; });
  ASSERT_TRUE(client_->ImportImage(tarball, {"team/ghost:1"}).ok());
  absl::StatusOr<Sandbox> ghost = client_->CreateSandbox({.spec = {{"image", "team/ghost:1"}}});
  ASSERT_FALSE(ghost.ok());
  EXPECT_EQ(ghost.status().code(), absl::StatusCode::kInvalidArgument) << ghost.status();
  EXPECT_NE(ghost.status().message().find("image config User \"ghost\": a user name, and the "
                                          "image has no readable etc/passwd"),
            std::string::npos)
      << ghost.status();
  absl::StatusOr<SandboxList> listed = client_->ListSandboxes();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->sandboxes.size(), 2u) << "the refused create left no record";
  for (const Sandbox& s : listed->sandboxes) EXPECT_EQ(s.state, "Gone") << s.id;
}

TEST_F(ClientTest, ArtifactsNetworkAndInterpreterSessions) {
  absl::StatusOr<Sandbox> sb = client_->CreateSandbox({.template_name = "R2"});
  ASSERT_TRUE(sb.ok()) << sb.status();
  ASSERT_TRUE(
      client_
          ->Exec(sb->id, {.argv = {"sh", "-c",
                                   "echo done > /sandbox/artifacts/report.txt; echo "
                                   "'key cpp-client-secret' > /sandbox/artifacts/leak.txt"}})
          .ok());
  absl::StatusOr<json> ok = client_->CollectArtifacts(sb->id, {"/sandbox/artifacts/report.txt"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ((*ok)["files"].size(), 1u) << ok->dump();
  EXPECT_EQ((*ok)["files"][0]["outcome"], "released") << ok->dump();
  const std::string released = (*ok)["files"][0].value("artifact_id", "");
  std::string got;
  absl::StatusOr<int64_t> n = client_->DownloadArtifact(sb->id, released, [&](std::string_view d) {
    got.append(d);
    return absl::OkStatus();
  });
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 5);
  EXPECT_EQ(got, "done\n");

  absl::StatusOr<json> bad =
      client_->CollectArtifacts(sb->id, {"/sandbox/artifacts/leak.txt"}, {"cpp-client-secret"});
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_TRUE((*bad)["policy_blocked"].get<bool>()) << bad->dump();
  EXPECT_EQ(bad->dump().find("cpp-client-secret"), std::string::npos) << "never echoed";
  const std::string quarantined = (*bad)["files"][0].value("artifact_id", "");
  absl::StatusOr<int64_t> refused =
      client_->DownloadArtifact(sb->id, quarantined, [](std::string_view) {
        ADD_FAILURE() << "a quarantined artifact's bytes must never arrive";
        return absl::OkStatus();
      });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  absl::StatusOr<std::vector<Artifact>> listed = client_->ListArtifacts(sb->id);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ(client_->WorkspaceDiff(sb->id).status().code(), absl::StatusCode::kFailedPrecondition)
      << "no git workspace";

  absl::StatusOr<Sandbox> tightened = client_->SetNetwork(sb->id, {{"profile", "none"}});
  ASSERT_TRUE(tightened.ok()) << tightened.status();
  EXPECT_EQ(tightened->spec["network"]["profile"], "none");
  EXPECT_EQ(client_->SetNetwork(sb->id, {{"profile", "dependency-egress"}}).status().code(),
            absl::StatusCode::kPermissionDenied)
      << "loosening needs the caller's say-so";
  ASSERT_TRUE(client_->DestroySandbox(sb->id).ok());

  absl::StatusOr<json> session = client_->CreateInterpreter({{"tools", {"human_approval"}}});
  ASSERT_TRUE(session.ok()) << session.status();
  const std::string sid = (*session)["id"];
  absl::StatusOr<json> run =
      client_->Eval(sid, "const a = await tools.call('human_approval', {step: 1}); return a + 1;");
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ((*run)["outcome"], "paused") << run->dump();
  const std::string call = (*run)["pending"][0]["call_id"];
  absl::StatusOr<json> done = client_->ResumeWithResult(sid, call, 41);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ((*done)["result"], 42) << done->dump();
  EXPECT_EQ(client_->ResumeWithError(sid, call, "late").status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<json> state = client_->GetInterpreter(sid);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)["state"], "finished");
  ASSERT_TRUE(client_->DeleteInterpreter(sid).ok());
  EXPECT_EQ(client_->GetInterpreter(sid).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, ImportRefusesGarbageAndBadTags) {
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/junk.tar", std::string(4096, 'x')).ok());
  absl::StatusOr<std::vector<Image>> junk = client_->ImportImage(dir_ + "/junk.tar");
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kInvalidArgument) << junk.status();
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/empty.tar", "").ok());
  absl::StatusOr<std::vector<Image>> empty = client_->ImportImage(dir_ + "/empty.tar");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(ErrorOf(empty.status()).http_status, 422);
  EXPECT_NE(empty.status().message().find("the body is empty"), std::string::npos)
      << empty.status();
  std::string tarball = BusyboxImage("x");
  absl::StatusOr<std::vector<Image>> bad_tag = client_->ImportImage(tarball, {"Bad Tag!"});
  ASSERT_FALSE(bad_tag.ok());
  EXPECT_EQ(ErrorOf(bad_tag.status()).http_status, 422) << bad_tag.status();
  auto listed = client_->ListImages();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

}  // namespace
}  // namespace airlock::client
