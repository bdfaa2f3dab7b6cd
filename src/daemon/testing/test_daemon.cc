#include "daemon/testing/test_daemon.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"
#include "http/client.h"

extern char** environ;

namespace airlock::daemon::testing {
namespace {

using json = nlohmann::json;
using Verb = boost::beast::http::verb;

std::string BinDir() {
  if (const char* d = std::getenv("AIRLOCK_BIN_DIR"); d != nullptr && *d != '\0') return d;
  return AIRLOCK_TEST_BIN_DIR;
}

// Runs argv to its end; its stdout in *out.
absl::Status RunCapture(const std::vector<std::string>& argv, std::string* out) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  if (rc != 0) {
    ::close(p[0]);
    return ErrnoStatus(rc, fmt::format("spawn {}", argv[0]));
  }
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Internal(fmt::format("{} exited with status {}", argv[0], status));
  }
  return absl::OkStatus();
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TestDaemon>> TestDaemon::Start(TestDaemonOptions options) {
  std::unique_ptr<TestDaemon> d(new TestDaemon());
  d->options_ = std::move(options);
  char tmpl[] = "/tmp/airlockd-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return ErrnoStatus(errno, "mkdtemp");
  d->root_ = tmpl;
  d->data_dir_ = d->root_ + "/d";
  d->log_path_ = d->root_ + "/airlockd.log";
  RETURN_IF_ERROR(MakeDirs(d->data_dir_, 0700));
  RETURN_IF_ERROR(d->Launch(), "start airlockd");
  return d;
}

TestDaemon::~TestDaemon() { Cleanup(); }

std::string TestDaemon::url() const { return fmt::format("http://127.0.0.1:{}", port_); }

std::string TestDaemon::node_id() const {
  std::string id = ReadText(data_dir_ + "/node-id");
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

std::string TestDaemon::log() const { return ReadText(log_path_) + ReadText(log_path_ + ".run"); }

absl::Status TestDaemon::Launch() {
  // A fresh log per run: the port line we wait for must be this run's.
  std::string run_log = log_path_ + ".run";
  std::vector<std::string> argv = {BinDir() + "/airlockd", "--role",     "all",     "--listen",
                                   "127.0.0.1:0",          "--data-dir", data_dir_, "--tools-dir",
                                   AIRLOCK_TEST_TOOLS_DIR};
  for (const std::string& a : options_.extra_args) argv.push_back(a);
  // Appends the previous run's log, so log() shows every run.
  if (Exists(run_log)) {
    std::ofstream(log_path_, std::ios::app) << ReadText(run_log);
    ::unlink(run_log.c_str());
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, run_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The test's own signal mask and dispositions must not leak into the daemon.
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return ErrnoStatus(rc, fmt::format("spawn {}", argv[0]));
  pid_ = pid;
  constexpr std::string_view kListening = "listening on port ";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string text = ReadText(run_log);
    if (size_t at = text.find(kListening); at != std::string::npos) {
      port_ = static_cast<uint16_t>(std::atoi(text.c_str() + at + kListening.size()));
      if (port_ != 0) return absl::OkStatus();
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Internal(fmt::format("airlockd exited (status {}): {}", status, text));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string text = ReadText(run_log);
  (void)Kill();
  return Internal(fmt::format("airlockd did not listen within 30 s: {}", text));
}

absl::Status TestDaemon::Stop() {
  if (pid_ <= 0) return absl::OkStatus();
  ::kill(pid_, SIGTERM);
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      (void)Kill();
      return Internal("airlockd did not stop within 30 s of SIGTERM; killed it");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Internal(fmt::format("airlockd stopped with status {}", status));
  }
  return absl::OkStatus();
}

absl::Status TestDaemon::Kill() {
  if (pid_ <= 0) return absl::OkStatus();
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return absl::OkStatus();
}

absl::Status TestDaemon::Restart() {
  if (pid_ > 0) return FailedPrecondition("airlockd is still running; Stop or Kill it first");
  return Launch();
}

absl::StatusOr<std::string> TestDaemon::CreateKey(std::string_view name) {
  std::string out;
  RETURN_IF_ERROR(RunCapture({BinDir() + "/airlockd", "admin", "create-key", "--data-dir",
                              data_dir_, "--name", std::string(name)},
                             &out),
                  "airlockd admin create-key");
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (size_t nl = out.rfind('\n'); nl != std::string::npos) out = out.substr(nl + 1);
  if (out.empty()) return Internal("airlockd admin create-key printed no key");
  keys_.push_back(out);
  return out;
}

int TestDaemon::OpenFds() const {
  if (pid_ <= 0) return -1;
  return static_cast<int>(airlock::OpenFds(pid_).size());
}

int TestDaemon::OpenNonFileFds() const {
  if (pid_ <= 0) return -1;
  int n = 0;
  std::string dir = fmt::format("/proc/{}/fd", pid_);
  for (const std::string& fd : ListDir(dir)) {
    char target[256];
    ssize_t len = ::readlink((dir + "/" + fd).c_str(), target, sizeof target - 1);
    if (len > 0 && target[0] != '/') ++n;  // "socket:[..]", "pipe:[..]", "anon_inode:[..]"
  }
  return n;
}

std::vector<std::string> TestDaemon::ProcessesOfDataDir() const {
  std::vector<std::string> out;
  for (const std::string& p : ListDir("/proc")) {
    if (p.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::atoi(p.c_str()) == pid_ || std::atoi(p.c_str()) == ::getpid()) continue;
    std::string cmd = ReadText("/proc/" + p + "/cmdline");
    std::string env = ReadText("/proc/" + p + "/environ");
    if (cmd.find(data_dir_) != std::string::npos || env.find(data_dir_) != std::string::npos) {
      for (char& c : cmd) c = c == '\0' ? ' ' : c;
      out.push_back(p + " " + cmd);
    }
  }
  return out;
}

pid_t TestDaemon::ShimPid(std::string_view sandbox_id) const {
  std::string needle = fmt::format("{}/sandboxes/{}/shim.json", data_dir_, sandbox_id);
  for (const std::string& p : ListDir("/proc")) {
    if (p.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = ReadText("/proc/" + p + "/cmdline");
    if (cmd.find("airlock-shim") != std::string::npos && cmd.find(needle) != std::string::npos) {
      return std::atoi(p.c_str());
    }
  }
  return -1;
}

std::vector<pid_t> TestDaemon::Descendants(pid_t pid) {
  std::map<pid_t, std::vector<pid_t>> children;
  for (const std::string& p : ListDir("/proc")) {
    if (p.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = ReadText("/proc/" + p + "/stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2) {
      children[ppid].push_back(std::atoi(p.c_str()));
    }
  }
  std::vector<pid_t> out, todo = {pid};
  while (!todo.empty()) {
    pid_t next = todo.back();
    todo.pop_back();
    for (pid_t c : children[next]) {
      out.push_back(c);
      todo.push_back(c);
    }
  }
  return out;
}

bool TestDaemon::Alive(pid_t pid) {
  std::string stat = ReadText(fmt::format("/proc/{}/stat", pid));
  size_t close = stat.rfind(')');
  // A zombie has ended; only its parent's wait is missing.
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
}

std::vector<std::string> TestDaemon::CgroupsOf(std::string_view sandbox_id) const {
  std::vector<std::string> out;
  std::string node = node_id();
  for (const std::string& root :
       {std::string("/sys/fs/cgroup"), std::string("/sys/fs/cgroup/unified")}) {
    for (const std::string& controller : ListDir(root)) {
      for (const std::string& base : {root + "/" + controller, root}) {
        std::string dir = fmt::format("{}/airlock/{}/{}", base, node, sandbox_id);
        if (Exists(dir)) out.push_back(dir);
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> TestDaemon::MountsOf(std::string_view sandbox_id) const {
  std::vector<std::string> out;
  std::istringstream in(ReadText("/proc/self/mountinfo"));
  for (std::string line; std::getline(in, line);) {
    if (line.find(data_dir_) != std::string::npos ||
        line.find(std::string(sandbox_id)) != std::string::npos) {
      out.push_back(line);
    }
  }
  return out;
}

void TestDaemon::Cleanup() {
  if (root_.empty()) return;
  if (pid_ <= 0) (void)Launch();
  if (pid_ > 0) {
    for (const std::string& key : keys_) {
      Api api(this, key);
      ApiResponse list = api.Get("/v1/sandboxes?limit=1000");
      if (list.status != 200 || !list.json.contains("sandboxes")) continue;
      for (const json& s : list.json["sandboxes"]) {
        std::string state = s.value("state", "");
        if (state == "Gone" || state == "Failed") continue;
        api.Delete("/v1/sandboxes/" + s.value("id", ""));
      }
    }
    // A daemon that does not stop cleanly (a sanitizer report, a crash) is shown to the test's
    // output: a destructor cannot fail the test.
    if (absl::Status stopped = Stop(); !stopped.ok()) {
      std::string text = log();
      std::fprintf(stderr, "TestDaemon: %s; the end of its log:\n%s\n",
                   std::string(Message(stopped)).c_str(),
                   text.substr(text.size() > 8000 ? text.size() - 8000 : 0).c_str());
    }
  }
  // Whatever still names the data directory (a shim the daemon lost) is killed.
  for (int round = 0; round < 3; ++round) {
    std::vector<std::string> left = ProcessesOfDataDir();
    if (left.empty()) break;
    for (const std::string& p : left) ::kill(std::atoi(p.c_str()), SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // The daemon keeps its node's cgroup parents (airlock/<node>) across restarts; a test's node
  // is gone with its data directory.
  std::string node = node_id();
  if (!node.empty()) {
    for (const std::string& controller : ListDir("/sys/fs/cgroup")) {
      std::string dir = fmt::format("/sys/fs/cgroup/{}/airlock/{}", controller, node);
      for (const std::string& child : ListDir(dir)) {
        if (Exists(dir + "/" + child + "/cgroup.procs")) ::rmdir((dir + "/" + child).c_str());
      }
      ::rmdir(dir.c_str());
    }
  }
  (void)RemoveTree(root_);
  root_.clear();
}

std::string ApiResponse::code() const { return json.is_object() ? json.value("code", "") : ""; }
std::string ApiResponse::message() const {
  return json.is_object() ? json.value("message", "") : "";
}
std::string ApiResponse::Describe() const { return fmt::format("{} {}", status, body); }

namespace {

absl::StatusOr<std::unique_ptr<http::Client>> ClientFor(const TestDaemon* d,
                                                        const std::string& key) {
  http::ClientOptions o;
  o.base_url = d->url();
  o.api_key = key;
  o.timeout = std::chrono::milliseconds(120'000);
  return http::Client::Create(o);
}

ApiResponse FromClient(absl::StatusOr<http::ClientResponse> r) {
  ApiResponse out;
  if (!r.ok()) {
    out.body = std::string(Message(r.status()));
    return out;
  }
  out.status = r->status;
  out.content_type = r->Header("Content-Type");
  out.body = std::move(r->body);
  if (out.content_type.rfind("application/json", 0) == 0) {
    out.json = json::parse(out.body, nullptr, false);
  }
  return out;
}

std::mutex record_mu;

}  // namespace

void Api::Record(Verb method, std::string_view target, const ApiResponse& r) {
  const char* path = std::getenv("AIRLOCK_API_RECORD");
  if (path == nullptr || *path == '\0' || r.status == 0) return;
  // Bodies other than JSON are not kept (downloads, metrics): only their type is checked.
  bool is_json = r.content_type.rfind("application/json", 0) == 0;
  json line = {{"method", std::string(boost::beast::http::to_string(method))},
               {"target", std::string(target)},
               {"status", r.status},
               {"content_type", r.content_type},
               {"body", !is_json                ? json()
                        : r.json.is_discarded() ? json(r.body)
                                                : r.json}};
  std::lock_guard lock(record_mu);
  std::ofstream(path, std::ios::app) << line.dump() << "\n";
}

ApiResponse Api::Send(Verb method, std::string_view target, std::string body,
                      std::string_view content_type, const Headers& headers) {
  absl::StatusOr<std::unique_ptr<http::Client>> c = ClientFor(daemon_, key_);
  if (!c.ok()) return FromClient(c.status());
  std::string_view type = body.empty() ? std::string_view() : content_type;
  ApiResponse r = FromClient((*c)->Send(method, target, std::move(body), type, headers));
  Record(method, target, r);
  return r;
}

ApiResponse Api::Stream(Verb method, std::string_view target, std::string body,
                        const std::function<bool(std::string_view, const json&)>& on_event) {
  absl::StatusOr<std::unique_ptr<http::Client>> c = ClientFor(daemon_, key_);
  if (!c.ok()) return FromClient(c.status());
  std::string buffer, raw;
  bool stopped = false;
  auto on_data = [&](std::string_view data) {
    raw.append(data);
    buffer.append(data);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      std::string frame = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      std::string event, data_line;
      std::istringstream in(frame);
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("event: ", 0) == 0) event = line.substr(7);
        if (line.rfind("data: ", 0) == 0) data_line += line.substr(6);
      }
      if (event.empty() && data_line.empty()) continue;  // a comment (": keep-alive")
      json value = json::parse(data_line, nullptr, false);
      // Streamed events are recorded like answers, under the event's name.
      if (const char* rec = std::getenv("AIRLOCK_API_RECORD"); rec != nullptr && *rec != '\0') {
        json line = {{"method", std::string(boost::beast::http::to_string(method))},
                     {"target", std::string(target)},
                     {"status", 200},
                     {"content_type", "text/event-stream"},
                     {"event", event},
                     {"body", value.is_discarded() ? json(data_line) : value}};
        std::lock_guard lock(record_mu);
        std::ofstream(rec, std::ios::app) << line.dump() << "\n";
      }
      if (!on_event(event, value)) {
        stopped = true;
        return false;
      }
    }
    return true;
  };
  bool has_body = !body.empty();
  absl::StatusOr<http::ClientResponse> r = (*c)->SendStreaming(
      method, target, std::move(body), has_body ? "application/json" : "", on_data);
  if (!r.ok() && stopped) {
    ApiResponse out;
    out.status = 200;
    out.body = raw;
    return out;
  }
  ApiResponse out = FromClient(std::move(r));
  if (out.body.empty()) out.body = raw;
  if (out.status != 200) {
    out.json = json::parse(out.body, nullptr, false);
    Record(method, target, out);
  }
  return out;
}

std::string Api::CreateSandbox(const json& body, ApiResponse* out) {
  ApiResponse r = Post("/v1/sandboxes", body);
  if (out != nullptr) *out = r;
  if ((r.status != 201 && r.status != 200) || !r.json.is_object()) return "";
  return r.json.value("id", "");
}

}  // namespace airlock::daemon::testing
