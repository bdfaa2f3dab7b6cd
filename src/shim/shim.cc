#include "shim/shim.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "cmdpolicy/policy.h"
#include "command/command.h"
#include "command/finish.h"
#include "command/syscalls.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/cgroup.h"
#include "engine/native_sandbox.h"
#include "fmt/format.h"
#include "netproxy/egress_proxy.h"
#include "netproxy/events.h"
#include "shim/collect.h"
#include "shim/protocol.h"
#include "spec/parse.h"

namespace airlock::shim {
namespace {

using nlohmann::json;
using Clock = std::chrono::system_clock;

const Logger& Log() {
  static const Logger& log = GetLogger("shim");
  return log;
}

int64_t UnixMs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

struct Chunk {
  uint64_t seq;
  Frame type;
  std::string data;
};

// A command the shim started: its state, its result once finished, and its recent output (and,
// under a syscall supervisor, its syscall events) for whoever attaches.
struct CommandRecord : public SyscallEventSink {
  CommandId id;
  std::vector<std::string> argv;
  bool background = false;
  Clock::time_point started = Clock::now();
  Clock::time_point finished;

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<CommandResult> result;
  absl::Status error;
  engine::RunningCommand* running = nullptr;  // valid while !done
  std::deque<Chunk> recent;
  size_t recent_bytes = 0;
  uint64_t next_seq = 0;

  void Append(Frame type, std::string_view data) {
    std::lock_guard lock(mu);
    recent.push_back({next_seq++, type, std::string(data)});
    recent_bytes += data.size();
    while (recent_bytes > kMaxRecentOutputBytes && recent.size() > 1) {
      recent_bytes -= recent.front().data.size();
      recent.pop_front();
    }
    cv.notify_all();
  }

  // On the supervisor's thread: the event joins the stream as an event frame
  // {"type": "syscall", "command_id", "event"}, so an agent can react while the command runs.
  // At most kMaxStreamedSyscallEvents per command (the result's report has them all, bounded);
  // past that one {"type": "syscall_events_capped"} says so.
  void OnSyscallEvent(const SyscallEvent& event) override {
    uint64_t n = syscall_events_streamed.fetch_add(1, std::memory_order_relaxed);
    if (n > kMaxStreamedSyscallEvents) return;
    json frame =
        n < kMaxStreamedSyscallEvents
            ? json{{"type", "syscall"}, {"command_id", id.value()}, {"event", ToJson(event)}}
            : json{{"type", "syscall_events_capped"},
                   {"command_id", id.value()},
                   {"streamed", kMaxStreamedSyscallEvents}};
    Append(Frame::kEvent, frame.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  std::atomic<uint64_t> syscall_events_streamed{0};

  json Summary() {
    std::lock_guard lock(mu);
    json j = {{"command_id", id.value()},
              {"argv", argv},
              {"background", background},
              {"state", !done        ? "running"
                        : error.ok() ? "finished"
                                     : "failed"},
              {"started_at_ms", UnixMs(started)}};
    if (done) j["finished_at_ms"] = UnixMs(finished);
    return j;
  }
};

json FileInfoJson(const engine::FileInfo& f) {
  const char* type = f.type == init::FileType::kFile        ? "file"
                     : f.type == init::FileType::kDirectory ? "directory"
                     : f.type == init::FileType::kSymlink   ? "symlink"
                                                            : "other";
  json j = {
      {"name", f.name}, {"type", type}, {"size", f.size}, {"mode", f.mode}, {"mtime", f.mtime}};
  if (!f.target.empty()) j["target"] = f.target;
  return j;
}

absl::StatusOr<CommandSpec> CommandFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("command: expected an object");
  CommandSpec c;
  try {
    c.argv = j.at("argv").get<std::vector<std::string>>();
    c.workdir = j.value("workdir", "");
    if (j.contains("env")) c.env = j.at("env").get<std::map<std::string, std::string>>();
    if (j.contains("timeout_ms"))
      c.timeout = std::chrono::milliseconds(j.at("timeout_ms").get<int64_t>());
    c.stdin_data = j.value("stdin", "");
  } catch (const json::exception& e) {
    return InvalidArgument(fmt::format("command: {}", e.what()));
  }
  if (c.argv.empty()) return InvalidArgument("command.argv: must not be empty");
  return c;
}

}  // namespace

nlohmann::json ShimOptions::ToJson() const {
  return {{"sandbox_id", sandbox_id.value()},
          {"spec", spec::ToJson(spec)},
          {"tools_dir", tools_dir},
          {"run_dir_base", run_dir_base},
          {"log_dir", log_dir},
          {"cgroup_base", cgroup_base},
          {"allow_degraded", allow_degraded},
          {"operator_policy", netproxy::ToJson(operator_policy)},
          {"image_rootfs", image_rootfs},
          {"proxy_hosts", proxy_hosts}};
}

absl::StatusOr<ShimOptions> ShimOptions::FromJson(const nlohmann::json& j) {
  ShimOptions o;
  try {
    o.sandbox_id = SandboxId(j.at("sandbox_id").get<std::string>());
    o.tools_dir = j.value("tools_dir", "");
    o.run_dir_base = j.value("run_dir_base", "");
    o.log_dir = j.value("log_dir", "");
    o.cgroup_base = j.value("cgroup_base", "airlock");
    o.allow_degraded = j.value("allow_degraded", std::vector<std::string>{});
    o.image_rootfs = j.value("image_rootfs", "");
    if (j.contains("proxy_hosts")) {
      o.proxy_hosts = j.at("proxy_hosts").get<std::map<std::string, std::vector<std::string>>>();
    }
  } catch (const json::exception& e) {
    return InvalidArgument(fmt::format("shim options: {}", e.what()));
  }
  ASSIGN_OR_RETURN(o.spec, spec::ParseSpecJson(j.value("spec", json::object()), {}),
                   "shim options: spec");
  if (j.contains("operator_policy")) {
    ASSIGN_OR_RETURN(o.operator_policy, netproxy::OperatorPolicyFromJson(j.at("operator_policy")),
                     "shim options");
  }
  return o;
}

class Shim::Impl {
 public:
  explicit Impl(ShimOptions options) : options_(std::move(options)) {}

  absl::Status Create() {
    engine::CgroupOptions cg;
    cg.base = options_.cgroup_base;
    ASSIGN_OR_RETURN(cgroups_, engine::CgroupDriver::Detect(cg), "cgroups");
    ASSIGN_OR_RETURN(cmdpolicy::Policy policy,
                     cmdpolicy::Policy::Create(options_.spec.command_policy), "commandPolicy");
    policy_.emplace(std::move(policy));
    // Every sandbox of the daemon gets its egress path, a none sandbox too (the proxy refuses
    // everything under none): its network can then be opened while it runs.
    netproxy::EgressProxy::Options po;
    po.on_event = blocked_.Callback();
    po.ResolveOnlyFrom(options_.proxy_hosts);
    ASSIGN_OR_RETURN(proxy_, netproxy::EgressProxy::Start(std::move(po)), "egress proxy");
    engine::SandboxOptions so;
    so.id = options_.sandbox_id;
    so.spec = options_.spec;
    so.image_rootfs = options_.image_rootfs;
    so.tools_dir = options_.tools_dir;
    so.run_dir_base = options_.run_dir_base;
    so.log_dir = options_.log_dir;
    so.cgroups = cgroups_.get();
    so.allow_degraded = options_.allow_degraded;
    so.egress.proxy = proxy_.get();
    so.egress.blocked = &blocked_;
    so.egress.operator_policy = options_.operator_policy;
    so.egress.open_later = true;
    ASSIGN_OR_RETURN(sandbox_, engine::NativeSandbox::Create(std::move(so)));
    Log().Info("sandbox ready", {{"sandbox", options_.sandbox_id.value()},
                                 {"init_pid", static_cast<int64_t>(sandbox_->init_pid())}});
    return absl::OkStatus();
  }

  json Hello() {
    json commands = json::array();
    {
      std::lock_guard lock(mu_);
      for (auto& [id, rec] : commands_) commands.push_back(rec->Summary());
    }
    return {{"ok", true},
            {"protocol", kProtocolVersion},
            {"sandbox_id", options_.sandbox_id.value()},
            {"shim_pid", ::getpid()},
            {"init_pid", sandbox_ ? sandbox_->init_pid() : -1},
            {"paused", paused_.load()},
            {"degraded", sandbox_ ? sandbox_->degraded() : std::vector<std::string>{}},
            {"commands", commands}};
  }

  absl::Status Serve(int listen_fd) {
    wake_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    UniqueFd sigfd(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
    for (;;) {
      struct pollfd p[3] = {
          {listen_fd, POLLIN, 0}, {wake_.get(), POLLIN, 0}, {sigfd.get(), POLLIN, 0}};
      if (::poll(p, 3, -1) < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "poll");
      }
      if (p[1].revents || p[2].revents) break;
      if (!(p[0].revents & POLLIN)) continue;
      UniqueFd conn(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn) continue;
      if (connections_.load() >= kMaxConnections) continue;  // closes it
      ++connections_;
      std::thread([this, fd = std::move(conn)]() mutable {
        Handle(fd.get());
        fd.Reset();
        std::lock_guard lock(conn_mu_);
        --connections_;
        conn_cv_.notify_all();
      }).detach();
    }
    absl::Status destroyed = Destroy();
    // Let request threads finish their answers (they fail fast once the sandbox is gone).
    std::unique_lock lock(conn_mu_);
    conn_cv_.wait_for(lock, std::chrono::seconds(10), [&] { return connections_.load() == 0; });
    return destroyed;
  }

  // Kills every command, waits for their threads, destroys the sandbox. Idempotent.
  absl::Status Destroy() {
    std::lock_guard destroy_lock(destroy_mu_);
    if (destroyed_) return destroy_status_;
    stopping_ = true;
    {
      std::lock_guard lock(mu_);
      for (auto& [id, rec] : commands_) {
        std::lock_guard rl(rec->mu);
        if (!rec->done && rec->running) rec->running->Kill();
      }
    }
    {
      std::unique_lock lock(mu_);
      commands_cv_.wait(lock, [&] { return running_commands_ == 0; });
    }
    if (sandbox_) destroy_status_ = sandbox_->Destroy();
    proxy_.reset();
    Log().Info("sandbox destroyed", {{"sandbox", options_.sandbox_id.value()},
                                     {"status", std::string(Message(destroy_status_))}});
    destroyed_ = true;
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
    return destroy_status_;
  }

 private:
  // Serves requests on one connection until the client closes it or the shim stops. The daemon
  // keeps connections open between calls, so a call costs no connect and no thread here.
  void Handle(int fd) {
    for (;;) {
      struct pollfd p[2] = {{fd, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      int rc = ::poll(p, 2, -1);
      if (rc < 0 && errno == EINTR) continue;
      // An idle connection ends with the shim: Serve waits for every connection to close.
      if (rc < 0 || (p[1].revents != 0 && (p[0].revents & POLLIN) == 0)) return;
      if (!HandleOne(fd)) return;
    }
  }

  // One request and its answer. Returns whether the connection can carry another request.
  bool HandleOne(int fd) {
    absl::StatusOr<Received> first = Receive(fd);
    if (!first.ok()) return false;
    if (first->type != Frame::kRequest) {
      (void)SendJson(fd, Frame::kResponse,
                     ErrorResponse(InvalidArgument("shim protocol: expected a request")));
      return false;
    }
    json req = json::parse(first->payload, nullptr, false);
    std::string op = req.is_object() ? req.value("op", "") : "";
    // An upload refused early leaves its data frames unread: its connection is not reused.
    bool reusable = op != "destroy" && !(op == "files" && req.value("file_op", "") == "write");
    absl::StatusOr<json> answer = InvalidArgument(fmt::format("unknown operation \"{}\"", op));
    if (op == "hello") {
      answer = Hello();
    } else if (stopping_ && op != "destroy") {
      answer = FailedPrecondition("the sandbox is being destroyed");
    } else if (op == "exec") {
      answer = Exec(fd, req);
    } else if (op == "command") {
      answer = CommandState(req);
    } else if (op == "attach") {
      answer = Attach(fd, req);
    } else if (op == "kill") {
      answer = KillCommand(req);
    } else if (op == "pause" || op == "resume") {
      answer = PauseResume(op == "pause");
    } else if (op == "stats") {
      answer = Stats();
    } else if (op == "files") {
      answer = Files(fd, req);
    } else if (op == "network") {
      answer = Network(req);
    } else if (op == "collect") {
      answer = Collect(req);
    } else if (op == "destroy") {
      absl::Status s = Destroy();
      answer = s.ok() ? absl::StatusOr<json>(json{{"ok", true}}) : absl::StatusOr<json>(s);
    }
    absl::Status sent;
    if (answer.ok()) {
      (*answer)["ok"] = true;
      sent = SendJson(fd, Frame::kResponse, *answer);
    } else {
      sent = SendJson(fd, Frame::kResponse, ErrorResponse(answer.status()));
    }
    return reusable && sent.ok();
  }

  std::shared_ptr<CommandRecord> Find(const json& req) {
    std::string id = req.is_object() ? req.value("command_id", "") : "";
    std::lock_guard lock(mu_);
    auto it = commands_.find(CommandId(id));
    return it == commands_.end() ? nullptr : it->second;
  }

  absl::StatusOr<json> Exec(int fd, const json& req) {
    ASSIGN_OR_RETURN(CommandSpec command, CommandFromJson(req.value("command", json())));
    bool background = req.value("background", false);
    bool stream = req.value("stream", false);
    auto rec = std::make_shared<CommandRecord>();
    std::string wanted = req.value("command_id", "");
    rec->id = wanted.empty() ? CommandId::New() : CommandId(wanted);
    rec->argv = command.argv;
    rec->background = background;
    engine::ExecOptions eo;
    eo.command_id = rec->id;
    eo.keep_background = req.value("keep_background", false);
    try {
      eo.secrets = req.value("secrets", std::vector<std::string>{});
    } catch (const json::exception&) {
      return InvalidArgument("secrets: expected a list of strings");
    }
    if (background || stream) {
      eo.on_output = [rec](OutputCapture::Stream s, std::string_view data) {
        rec->Append(s == OutputCapture::kStdout ? Frame::kStdout : Frame::kStderr, data);
      };
      eo.syscall_events = rec.get();  // rec outlives the command (RunCommand holds it)
    }
    {
      std::lock_guard lock(mu_);
      if (commands_.count(rec->id)) {
        return absl::AlreadyExistsError(fmt::format("command {} exists", rec->id.value()));
      }
    }
    // The command permission policy refuses before anything runs: the result says which rule.
    if (cmdpolicy::Decision d = policy_->Check(command.argv); !d.allowed) {
      Log().Info("command refused", {{"sandbox", options_.sandbox_id.value()}, {"rule", d.rule}});
      ASSIGN_OR_RETURN(Redactor redactor, RedactorFor(eo.secrets), "secrets");
      {
        std::lock_guard lock(rec->mu);
        rec->result = cmdpolicy::BlockedResult(command, d, redactor);
        rec->result->command_id = rec->id;
        rec->done = true;
        rec->finished = Clock::now();
      }
      std::lock_guard lock(mu_);
      commands_[rec->id] = rec;
      finished_.push_back(rec->id);
      if (background) return json{{"command_id", rec->id.value()}, {"state", "finished"}};
    }
    if (rec->done) return Follow(fd, rec, stream, 0);
    ASSIGN_OR_RETURN(std::unique_ptr<engine::RunningCommand> running, sandbox_->Start(command, eo));
    {
      std::lock_guard lock(mu_);
      commands_[rec->id] = rec;
      ++running_commands_;
      rec->running = running.get();
    }
    // A plain exec's answer waits for the command anyway, so it runs on this connection's thread
    // (which serves no other request meanwhile and carries on if the daemon goes away). Streamed
    // and background commands run on their own thread, so they outlive this connection.
    if (!background && !stream) {
      RunCommand(rec, std::move(running));
      return Follow(fd, rec, false, 0);
    }
    std::thread(&Impl::RunCommand, this, rec, std::move(running)).detach();
    if (background) return json{{"command_id", rec->id.value()}, {"state", "running"}};
    return Follow(fd, rec, stream, 0);
  }

  void RunCommand(std::shared_ptr<CommandRecord> rec,
                  std::unique_ptr<engine::RunningCommand> running) {
    absl::StatusOr<CommandResult> r = running->Wait();
    {
      std::lock_guard lock(rec->mu);
      rec->running = nullptr;
      rec->done = true;
      rec->finished = Clock::now();
      if (r.ok()) {
        rec->result = *std::move(r);
      } else {
        rec->error = r.status();
      }
      rec->cv.notify_all();
    }
    running.reset();
    std::lock_guard lock(mu_);
    finished_.push_back(rec->id);
    while (finished_.size() > kMaxFinishedCommands) {
      commands_.erase(finished_.front());
      finished_.pop_front();
    }
    --running_commands_;
    commands_cv_.notify_all();
  }

  // Sends a command's output from `from_seq` on (if `stream`) until it ends, then returns its
  // result. A connection that breaks stops the sending, never the command.
  absl::StatusOr<json> Follow(int fd, const std::shared_ptr<CommandRecord>& rec, bool stream,
                              uint64_t from_seq) {
    uint64_t next = from_seq;
    bool connected = true;
    if (stream) {
      connected =
          SendJson(fd, Frame::kEvent, {{"type", "started"}, {"command_id", rec->id.value()}}).ok();
    }
    for (;;) {
      std::vector<Chunk> batch;
      bool finished;
      uint64_t dropped = 0;
      {
        std::unique_lock lock(rec->mu);
        rec->cv.wait(lock, [&] { return rec->done || rec->next_seq > next; });
        if (!rec->recent.empty() && rec->recent.front().seq > next) {
          dropped = rec->recent.front().seq - next;
          next = rec->recent.front().seq;
        }
        for (const Chunk& c : rec->recent) {
          if (c.seq >= next) batch.push_back(c);
        }
        if (!batch.empty()) next = batch.back().seq + 1;
        finished = rec->done && next >= rec->next_seq;
      }
      if (stream && connected) {
        if (dropped > 0) {
          connected =
              SendJson(fd, Frame::kEvent, {{"type", "output_dropped"}, {"chunks", dropped}}).ok();
        }
        for (const Chunk& c : batch) {
          if (connected) connected = SendBytes(fd, c.type, c.data).ok();
        }
      }
      if (finished) break;
    }
    std::lock_guard lock(rec->mu);
    if (!rec->error.ok()) return rec->error;
    return json{{"command_id", rec->id.value()}, {"result", ToJson(*rec->result)}};
  }

  absl::StatusOr<json> CommandState(const json& req) {
    std::shared_ptr<CommandRecord> rec = Find(req);
    if (!rec) return NotFound("no such command in this sandbox");
    json j = rec->Summary();
    std::lock_guard lock(rec->mu);
    if (rec->done && rec->result) j["result"] = ToJson(*rec->result);
    if (rec->done && !rec->error.ok()) j["error"] = std::string(rec->error.message());
    return j;
  }

  absl::StatusOr<json> Attach(int fd, const json& req) {
    std::shared_ptr<CommandRecord> rec = Find(req);
    if (!rec) return NotFound("no such command in this sandbox");
    uint64_t from;
    {
      std::lock_guard lock(rec->mu);
      from = rec->recent.empty() ? rec->next_seq : rec->recent.front().seq;
    }
    return Follow(fd, rec, true, from);
  }

  absl::StatusOr<json> KillCommand(const json& req) {
    std::shared_ptr<CommandRecord> rec = Find(req);
    if (!rec) return NotFound("no such command in this sandbox");
    int sig = req.value("signal", SIGKILL);
    std::lock_guard lock(rec->mu);
    if (rec->done) return FailedPrecondition("the command has already finished");
    if (sig == SIGKILL) {
      rec->running->Kill();
    } else {
      RETURN_IF_ERROR(rec->running->Signal(sig));
    }
    return json::object();
  }

  absl::StatusOr<json> PauseResume(bool pause) {
    RETURN_IF_ERROR(pause ? sandbox_->Pause() : sandbox_->Resume());
    paused_ = pause;
    return json::object();
  }

  absl::StatusOr<json> Stats() {
    ASSIGN_OR_RETURN(engine::CgroupStats s, sandbox_->cgroup().Stats());
    std::lock_guard lock(mu_);
    return json{{"cpu_user_us", s.cpu_user_us},
                {"cpu_system_us", s.cpu_system_us},
                {"memory_current_bytes", s.memory_current_bytes},
                {"memory_peak_bytes", s.memory_peak_bytes},
                {"pids_current", s.pids_current},
                {"running_commands", running_commands_},
                {"paused", paused_.load()}};
  }

  absl::StatusOr<json> Network(const json& req) {
    // One change at a time: each reads the spec it replaces and writes the new one.
    std::lock_guard network_lock(network_mu_);
    json doc = spec::ToJson(options_.spec);
    doc["network"] = req.value("network", json::object());
    ASSIGN_OR_RETURN(spec::SandboxSpec parsed, spec::ParseSpecJson(doc, {}), "network");
    ASSIGN_OR_RETURN(netproxy::PolicyChanged change,
                     sandbox_->UpdateNetworkPolicy(parsed.network,
                                                   req.value("may_loosen", false)
                                                       ? netproxy::PolicyAuthority::kMayLoosen
                                                       : netproxy::PolicyAuthority::kTightenOnly));
    json previous = spec::ToJson(options_.spec)["network"];
    options_.spec.network = parsed.network;
    return json{{"network", spec::ToJson(parsed)["network"]},
                {"previous_network", std::move(previous)},
                {"loosened", change.loosened}};
  }

  // Runs the sandbox's artifact paths (or the request's `paths`) through the release gate and
  // stages what it read in the request's `staging_dir`, a directory the daemon made for this.
  absl::StatusOr<json> Collect(const json& req) {
    std::vector<std::string> paths, secrets;
    try {
      paths = req.value("paths", std::vector<std::string>{});
      secrets = req.value("secrets", std::vector<std::string>{});
    } catch (const json::exception&) {
      return InvalidArgument("paths and secrets: expected lists of strings");
    }
    std::string staging = req.value("staging_dir", "");
    if (staging.empty() || staging[0] != '/') return InvalidArgument("staging_dir: required");
    ASSIGN_OR_RETURN(CollectOutcome out,
                     CollectArtifacts(*sandbox_, options_.spec.artifacts, paths, secrets, staging));
    return json{{"collection", artifact::ToJson(out.collection)},
                {"summary", artifact::Summary(out.collection)},
                {"staged", out.staged}};
  }

  absl::StatusOr<json> Files(int fd, const json& req) {
    std::string op = req.value("file_op", "");
    std::string path = req.value("path", "");
    if (op == "stat") {
      ASSIGN_OR_RETURN(engine::FileInfo f, sandbox_->StatFile(path));
      return json{{"file", FileInfoJson(f)}};
    }
    if (op == "list") {
      ASSIGN_OR_RETURN(std::vector<engine::FileInfo> v, sandbox_->ListFiles(path));
      json entries = json::array();
      for (const auto& f : v) entries.push_back(FileInfoJson(f));
      return json{{"entries", entries}};
    }
    if (op == "mkdir") {
      RETURN_IF_ERROR(sandbox_->MakeDirectory(path, req.value("parents", false)));
      return json::object();
    }
    if (op == "remove") {
      RETURN_IF_ERROR(sandbox_->RemoveFile(path, req.value("recursive", false)));
      return json::object();
    }
    uint64_t max_bytes = req.value("max_bytes", uint64_t{0});
    if (op == "read") {
      ASSIGN_OR_RETURN(auto t, sandbox_->ReadFileFrom(path, max_bytes));
      std::string buf(64 << 10, '\0');
      for (;;) {
        ssize_t n = ::read(t->fd(), buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (!SendBytes(fd, Frame::kData, std::string_view(buf.data(), static_cast<size_t>(n)))
                 .ok()) {
          t->Abandon();
          return absl::CancelledError("the reader went away");
        }
      }
      ASSIGN_OR_RETURN(engine::FileInfo f, t->Finish());
      return json{{"file", FileInfoJson(f)}};
    }
    if (op == "write") {
      ASSIGN_OR_RETURN(auto t, sandbox_->WriteFileInto(path, req.value("mode", 0644u), max_bytes,
                                                       req.value("parents", false)));
      bool writable = true;
      for (;;) {
        absl::StatusOr<Received> frame = Receive(fd);
        if (!frame.ok() || (frame->type != Frame::kData && frame->type != Frame::kEnd)) {
          t->Abandon();
          return absl::CancelledError("the upload ended before its end frame");
        }
        if (frame->type == Frame::kEnd) break;
        // Once the worker stops reading (a limit, an error) the rest is drained unread; Finish
        // then reports why.
        if (writable) writable = WriteAll(t->fd(), frame->payload).ok();
      }
      ASSIGN_OR_RETURN(engine::FileInfo f, t->Finish());
      return json{{"file", FileInfoJson(f)}};
    }
    return InvalidArgument(fmt::format("unknown file operation \"{}\"", op));
  }

  ShimOptions options_;
  std::unique_ptr<engine::CgroupDriver> cgroups_;
  netproxy::BlockedEventLog blocked_;
  std::unique_ptr<netproxy::EgressProxy> proxy_;
  std::mutex network_mu_;  // Network() requests, one at a time
  std::unique_ptr<engine::NativeSandbox> sandbox_;
  std::optional<cmdpolicy::Policy> policy_;

  std::mutex mu_;
  std::condition_variable commands_cv_;
  std::map<CommandId, std::shared_ptr<CommandRecord>> commands_;
  std::deque<CommandId> finished_;
  int running_commands_ = 0;

  std::atomic<bool> stopping_{false};
  std::atomic<bool> paused_{false};
  std::mutex destroy_mu_;
  bool destroyed_ = false;
  absl::Status destroy_status_;
  UniqueFd wake_;

  std::mutex conn_mu_;
  std::condition_variable conn_cv_;
  std::atomic<int> connections_{0};
};

Shim::Shim(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Shim::~Shim() {
  if (impl_) (void)impl_->Destroy();
}

absl::StatusOr<std::unique_ptr<Shim>> Shim::Create(ShimOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  RETURN_IF_ERROR(impl->Create());
  return std::unique_ptr<Shim>(new Shim(std::move(impl)));
}

nlohmann::json Shim::Hello() const { return impl_->Hello(); }

absl::Status Shim::Serve(int listen_fd) { return impl_->Serve(listen_fd); }

}  // namespace airlock::shim
