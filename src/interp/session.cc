#include <algorithm>
#include <chrono>
#include <utility>

#include "common/logging.h"
#include "common/status.h"
#include "fmt/format.h"
#include "interp/internal/session_impl.h"
#include "interp/internal/snapshot_format.h"

namespace airlock::interp::internal {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr int kMaxJournaledRefusals = 100;
// Guest time after which a run's memory moves to huge pages: past what an orchestration step
// takes, short against the runs that gain (the copy costs about 0.1 ms per 2 MiB in use).
constexpr std::chrono::milliseconds kHugePagesAfter{2};

const Logger& Log() {
  static const Logger& log = GetLogger("interp");
  return log;
}

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The script runs as the body of an async arrow function, on the same line as the wrapper's
// start so that error line numbers match the script's own.
std::string WrapScript(std::string_view script) {
  return fmt::format("(async () => {{{}\n}})()", script);
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

json LimitsToJson(const Limits& l) {
  return {{"memory_bytes", l.memory_bytes},
          {"linear_memory_bytes", l.linear_memory_bytes},
          {"stack_bytes", l.stack_bytes},
          {"exec_time_ms", l.exec_time.count()},
          {"wall_time_ms", l.wall_time.count()},
          {"backstop_grace_ms", l.backstop_grace.count()},
          {"max_in_flight_calls", l.max_in_flight_calls},
          {"max_total_calls", l.max_total_calls},
          {"max_console_bytes", l.max_console_bytes},
          {"max_value_bytes", l.max_value_bytes},
          {"max_journal_bytes", l.max_journal_bytes},
          {"max_script_bytes", l.max_script_bytes}};
}

Limits LimitsFromJson(const json& j) {
  Limits l;
  l.memory_bytes = j.value("memory_bytes", l.memory_bytes);
  l.linear_memory_bytes = j.value("linear_memory_bytes", l.linear_memory_bytes);
  l.stack_bytes = j.value("stack_bytes", l.stack_bytes);
  l.exec_time = std::chrono::milliseconds(j.value("exec_time_ms", l.exec_time.count()));
  l.wall_time = std::chrono::milliseconds(j.value("wall_time_ms", l.wall_time.count()));
  l.backstop_grace =
      std::chrono::milliseconds(j.value("backstop_grace_ms", l.backstop_grace.count()));
  l.max_in_flight_calls = j.value("max_in_flight_calls", l.max_in_flight_calls);
  l.max_total_calls = j.value("max_total_calls", l.max_total_calls);
  l.max_console_bytes = j.value("max_console_bytes", l.max_console_bytes);
  l.max_value_bytes = j.value("max_value_bytes", l.max_value_bytes);
  l.max_journal_bytes = j.value("max_journal_bytes", l.max_journal_bytes);
  l.max_script_bytes = j.value("max_script_bytes", l.max_script_bytes);
  return l;
}

json EntryToJson(const JournalEntry& e) {
  return {{"call_id", e.call_id},
          {"tool", e.tool},
          {"args", e.args_json},
          {"status", ToString(e.status)},
          {"result", e.result},
          {"started_unix_ms", e.started_unix_ms},
          {"finished_unix_ms", e.finished_unix_ms}};
}

absl::StatusOr<JournalEntry> EntryFromJson(const json& j) {
  JournalEntry e;
  e.call_id = j.value("call_id", "");
  e.tool = j.value("tool", "");
  e.args_json = j.value("args", "");
  e.result = j.value("result", "");
  e.started_unix_ms = j.value("started_unix_ms", int64_t{0});
  e.finished_unix_ms = j.value("finished_unix_ms", int64_t{0});
  std::string status = j.value("status", "");
  if (status == "pending") {
    e.status = JournalEntry::Status::kPending;
  } else if (status == "ok") {
    e.status = JournalEntry::Status::kOk;
  } else if (status == "error") {
    e.status = JournalEntry::Status::kError;
  } else if (status == "refused") {
    e.status = JournalEntry::Status::kRefused;
  } else {
    return InvalidArgument(fmt::format("journal entry with status '{}'", status));
  }
  return e;
}

}  // namespace

// --- creation ---

absl::Status SessionImpl::Configure(SessionOptions options) {
  limits_ = options.limits;
  key_ = std::move(options.hmac_key);
  declared_ = options.declared;
  const Limits& l = limits_;
  if (l.memory_bytes < (1 << 20) || l.memory_bytes > (int64_t{3} << 30)) {
    return InvalidArgument(
        fmt::format("memory limit {} bytes: want 1 MiB to 3 GiB", l.memory_bytes));
  }
  int64_t linear =
      l.linear_memory_bytes > 0 ? l.linear_memory_bytes : 2 * l.memory_bytes + (int64_t{16} << 20);
  linear = std::min<int64_t>(linear, int64_t{4095} << 20);
  if (linear < (int64_t{16} << 20)) {
    return InvalidArgument("linear memory cap below the module's own 16 MiB");
  }
  if (l.stack_bytes < (64 << 10) || l.stack_bytes > (4 << 20)) {
    return InvalidArgument(
        fmt::format("stack limit {} bytes: want 64 KiB to 4 MiB", l.stack_bytes));
  }
  if (l.exec_time.count() <= 0 || l.wall_time.count() <= 0 || l.max_in_flight_calls < 1 ||
      l.max_total_calls < 0 || l.max_value_bytes < 16 || l.max_script_bytes < 1) {
    return InvalidArgument("limits: time limits and max_in_flight_calls must be positive");
  }
  guest_config_.max_pages = static_cast<uint32_t>(linear / kWasmPageSize);
  guest_config_.quickjs_memory_limit = static_cast<uint32_t>(l.memory_bytes);
  guest_config_.stack_bytes = static_cast<uint32_t>(l.stack_bytes);
  for (auto& tool : options.tools) {
    if (tool == nullptr) return InvalidArgument("null tool");
    const std::string& name = tool->info().name;
    if (name.empty()) return InvalidArgument("a tool without a name");
    if (!tools_.emplace(name, tool).second) {
      return InvalidArgument(fmt::format("tool '{}' listed twice", name));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SessionImpl>> SessionImpl::Create(SessionOptions options) {
  std::unique_ptr<SessionImpl> s(new SessionImpl());
  RETURN_IF_ERROR(s->Configure(std::move(options)));
  s->capabilities_ = s->declared_;
  bool has_approval = false;
  for (const auto& [name, tool] : s->tools_) {
    s->allowlist_.push_back(name);
    s->capabilities_.Add(tool->info().capabilities);
    has_approval = has_approval || tool->info().role == ToolRole::kHumanApproval;
  }
  if (s->capabilities_.HasAll()) {
    if (!has_approval) {
      return PermissionDenied(fmt::format(
          "rule of two: this session would read sensitive data, see untrusted content and "
          "change state ({}); allow a human-approval tool to gate its state changes, or drop "
          "one capability",
          s->capabilities_.ToString()));
    }
    s->gated_ = true;
  }
  RETURN_IF_ERROR(s->BootGuest());
  return s;
}

absl::Status SessionImpl::BootGuest() {
  ASSIGN_OR_RETURN(guest_, Guest::Boot(guest_config_, this));
  return absl::OkStatus();
}

SessionImpl::~SessionImpl() {
  std::lock_guard<std::mutex> lock(completions_->mu);
  completions_->cancelled = true;
}

void SessionImpl::Cancel() {
  cancelled_.store(true);
  std::lock_guard<std::mutex> lock(completions_->mu);
  completions_->cv.notify_all();
}

// --- the guest's calls ---

bool SessionImpl::ShouldInterrupt(Guest& guest) {
  if (!interrupt_reason_.empty()) return true;
  // A script that computes for a while gets its memory on huge pages (wasm_rt.h); a short one,
  // the usual orchestration step, keeps the small footprint of 4 KiB pages.
  const std::chrono::nanoseconds ran = GuestTime();
  if (ran > kHugePagesAfter && !guest.memory().prefers_huge_pages()) {
    guest.memory().PreferHugePages();
  }
  if (cancelled_.load()) {
    interrupt_reason_ = "cancelled";
    interrupt_outcome_ = Outcome::kCancelled;
    return true;
  }
  if (ran > limits_.exec_time) {
    interrupt_reason_ =
        fmt::format("time limit: the script ran for more than {} ms", limits_.exec_time.count());
    interrupt_outcome_ = Outcome::kTimeout;
    return true;
  }
  if (Clock::now() > wall_deadline_) {
    interrupt_reason_ = fmt::format("wall-time limit of {} ms reached", limits_.wall_time.count());
    interrupt_outcome_ = Outcome::kTimeout;
    return true;
  }
  return false;
}

uint32_t SessionImpl::OnHostCall(Guest& /*guest*/, std::string_view op, std::string_view a,
                                 std::string_view b) {
  if (op == "log") {
    if (console_full_) return 0;
    size_t room = static_cast<size_t>(limits_.max_console_bytes) - console_.size();
    if (a.size() + 1 > room) {
      console_.append(a.substr(0, room));
      console_ += "\n[console output truncated]\n";
      console_full_ = true;
      return 0;
    }
    console_.append(a);
    console_ += '\n';
    return 0;
  }
  if (op == "call") return ToolCallFromGuest(a, b);
  return 0;
}

uint32_t SessionImpl::Refuse(const std::string& tool, std::string_view args_json,
                             const std::string& why) {
  // A script can be refused in a loop: only the first refusals are journaled, so the journal
  // (host memory) stays bounded.
  if (++refused_calls_ <= kMaxJournaledRefusals) {
    JournalEntry e;
    e.tool = tool;
    e.args_json = std::string(args_json.substr(0, 4096));
    e.status = JournalEntry::Status::kRefused;
    e.result = why;
    e.started_unix_ms = e.finished_unix_ms = UnixMillis();
    journal_.push_back(std::move(e));
  }
  absl::StatusOr<uint32_t> message = guest_->NewString(why);
  return message.ok() ? *message : 0;
}

uint32_t SessionImpl::ToolCallFromGuest(std::string_view name_json, std::string_view args_json) {
  json name_value = json::parse(name_json, nullptr, false);
  if (!name_value.is_string()) return Refuse("", args_json, "tools.call: bad tool name");
  const std::string name = name_value.get<std::string>();
  auto tool_it = tools_.find(name);
  bool allowed = std::binary_search(allowlist_.begin(), allowlist_.end(), name);
  if (!allowed) {
    std::string list;
    for (const auto& n : allowlist_) list += (list.empty() ? "" : ", ") + n;
    return Refuse(name, args_json,
                  fmt::format("tools.call: tool '{}' is not allowed in this session (allowed: {})",
                              name, list.empty() ? "none" : list));
  }
  if (tool_it == tools_.end()) {
    return Refuse(name, args_json,
                  fmt::format("tools.call: tool '{}' is allowed but not available in this "
                              "process",
                              name));
  }
  if (static_cast<int64_t>(args_json.size()) > limits_.max_value_bytes) {
    return Refuse(name, args_json,
                  fmt::format("tools.call: arguments of '{}' are larger than {} bytes", name,
                              limits_.max_value_bytes));
  }
  if (journal_bytes_ + static_cast<int64_t>(args_json.size()) > limits_.max_journal_bytes) {
    return Refuse(name, args_json.substr(0, 256),
                  fmt::format("tools.call: the session's journal is full ({} bytes of arguments "
                              "and results)",
                              limits_.max_journal_bytes));
  }
  int in_flight = static_cast<int>(pending_.size());
  if (in_flight >= limits_.max_in_flight_calls) {
    return Refuse(name, args_json,
                  fmt::format("tools.call: too many calls in flight ({}, the limit); await some "
                              "before calling '{}'",
                              limits_.max_in_flight_calls, name));
  }
  if (total_calls_ >= limits_.max_total_calls) {
    return Refuse(name, args_json,
                  fmt::format("tools.call: call limit reached ({} calls per script)",
                              limits_.max_total_calls));
  }
  const ToolInfo& info = tool_it->second->info();
  if (gated_ && info.capabilities.Has(Capability::kChangesState) &&
      info.role != ToolRole::kHumanApproval) {
    if (approvals_available_ == 0) {
      return Refuse(name, args_json,
                    fmt::format("tools.call: '{}' changes state in a session that also reads "
                                "sensitive data and sees untrusted content (rule of two): it "
                                "needs an approved human_approval call first",
                                name));
    }
    --approvals_available_;
  }

  absl::StatusOr<Guest::Capability> cap = guest_->NewPromiseCapability();
  if (!cap.ok()) return 0;  // the guest is out of memory or broken; Drive reports it
  ++total_calls_;
  journal_bytes_ += static_cast<int64_t>(args_json.size());
  Pending p;
  p.id = fmt::format("call-{}", next_call_++);
  p.name = name;
  p.args = std::string(args_json);
  p.resolve = cap->resolve;
  p.reject = cap->reject;
  p.durable = info.kind == ToolKind::kDurable;
  p.journal_index = journal_.size();

  JournalEntry e;
  e.call_id = p.id;
  e.tool = name;
  e.args_json = p.args;
  e.started_unix_ms = UnixMillis();

  if (replaying_) {
    if (replay_.empty()) {
      // Every call of the original run is in its journal: one more is a divergence.
      if (replay_error_.empty()) {
        replay_error_ = fmt::format(
            "replay diverged at {}: the script made a call ({}) that is "
            "not in its journal",
            p.id, name);
      }
    } else {
      JournalEntry recorded = std::move(replay_.front());
      replay_.pop_front();
      if (recorded.call_id != p.id || recorded.tool != name || recorded.args_json != p.args) {
        if (replay_error_.empty()) {
          replay_error_ =
              fmt::format("replay diverged at {}: the journal has {}({}), the script called {}({})",
                          recorded.call_id, recorded.tool, recorded.args_json, name, p.args);
        }
      } else {
        e.started_unix_ms = recorded.started_unix_ms;
        if (recorded.status == JournalEntry::Status::kOk ||
            recorded.status == JournalEntry::Status::kError) {
          std::lock_guard<std::mutex> lock(completions_->mu);
          completions_->items.emplace_back(p.id, recorded.status == JournalEntry::Status::kOk
                                                     ? ToolResult::Value(recorded.result)
                                                     : ToolResult::Error(recorded.result));
        } else {
          p.durable = true;  // still awaited when the snapshot was taken
        }
      }
    }
  } else {
    to_start_.push_back(ToolCall{p.id, name, p.args});
  }
  journal_.push_back(std::move(e));
  pending_.emplace(p.id, std::move(p));
  return cap->promise;
}

// --- the event loop ---

std::chrono::nanoseconds SessionImpl::GuestTime() const {
  return guest_time_before_ + (guest_ ? guest_->guest_time() : std::chrono::nanoseconds(0));
}

void SessionImpl::StartQueuedTools() {
  std::vector<ToolCall> calls;
  calls.swap(to_start_);
  for (ToolCall& call : calls) {
    auto it = tools_.find(call.name);
    if (it == tools_.end()) continue;
    std::weak_ptr<CompletionQueue> queue = completions_;
    std::string id = call.id;
    it->second->Start(call, [queue, id](ToolResult result) {
      std::shared_ptr<CompletionQueue> q = queue.lock();
      if (q == nullptr) return;
      std::lock_guard<std::mutex> lock(q->mu);
      if (q->cancelled) return;
      q->items.emplace_back(id, std::move(result));
      q->cv.notify_all();
    });
  }
}

absl::Status SessionImpl::Deliver(const std::string& id, const ToolResult& answer) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return absl::OkStatus();  // answered twice: the first one counts
  Pending p = std::move(it->second);
  pending_.erase(it);
  ToolResult result = answer;
  if (result.ok && !json::accept(result.value_json)) {
    result = ToolResult::Error(fmt::format("tool '{}' returned invalid JSON", p.name));
  }
  if (result.ok && static_cast<int64_t>(result.value_json.size()) > limits_.max_value_bytes) {
    result = ToolResult::Error(
        fmt::format("tool '{}' returned more than {} bytes", p.name, limits_.max_value_bytes));
  }
  const std::string& kept = result.ok ? result.value_json : result.error;
  if (journal_bytes_ + static_cast<int64_t>(kept.size()) > limits_.max_journal_bytes) {
    result =
        ToolResult::Error(fmt::format("tool '{}' answered, but its result does not fit the "
                                      "session's journal ({} bytes)",
                                      p.name, limits_.max_journal_bytes));
  }
  journal_bytes_ +=
      static_cast<int64_t>(result.ok ? result.value_json.size() : result.error.size());
  if (result.ok) {
    auto tool = tools_.find(p.name);
    if (tool != tools_.end() && tool->second->info().role == ToolRole::kHumanApproval) {
      json v = json::parse(result.value_json, nullptr, false);
      if (v.is_object() && v.value("approved", false) == true) ++approvals_available_;
    }
  }
  JournalEntry& e = journal_[p.journal_index];
  e.status = result.ok ? JournalEntry::Status::kOk : JournalEntry::Status::kError;
  e.result = result.ok ? result.value_json : result.error;
  e.finished_unix_ms = UnixMillis();

  absl::StatusOr<EvalResult> called = guest_->CallWithString(
      result.ok ? p.resolve : p.reject, result.ok ? result.value_json : result.error);
  RETURN_IF_ERROR(guest_->FreeValue(p.resolve));
  RETURN_IF_ERROR(guest_->FreeValue(p.reject));
  if (!called.ok()) return called.status();
  return absl::OkStatus();
}

std::string SessionImpl::ErrorFromStatus(const absl::Status& status, Outcome* outcome) const {
  if (guest_ != nullptr && guest_->revoked()) {
    *outcome = Outcome::kTimeout;
    return guest_->broken_reason();
  }
  if (guest_ != nullptr && guest_->broken()) {
    *outcome = Outcome::kTrapped;
    return guest_->broken_reason();
  }
  *outcome = status.code() == absl::StatusCode::kResourceExhausted ? Outcome::kMemoryLimit
                                                                   : Outcome::kTrapped;
  return std::string(Message(status));
}

RunResult SessionImpl::Finish(Outcome outcome, std::string error, std::string result_json) {
  RunResult r;
  r.outcome = outcome;
  r.error = std::move(error);
  r.result_json = std::move(result_json);
  r.guest_time = GuestTime();
  guest_time_before_ = r.guest_time;
  // The instance is discarded whatever the ending: its memory goes back now.
  guest_.reset();
  pending_.clear();
  main_promise_ = 0;
  state_ = SessionState::kFinished;
  Log().Debug("script ended", {{"session", id_.value()},
                               {"outcome", ToString(outcome)},
                               {"guest_ms", static_cast<double>(r.guest_time.count()) / 1e6}});
  last_ = r;
  return r;
}

// The linear memory never shrinks, so its size tells whether the heap came near its limit during
// the run.
bool SessionImpl::HeapCameNearItsLimit() const {
  return guest_ != nullptr &&
         int64_t{guest_->memory().size()} >= (int64_t{5} << 20) + limits_.memory_bytes * 9 / 10;
}

RunResult SessionImpl::FinishScriptError(std::string error) {
  if (StartsWith(error, "InternalError: out of memory")) {
    return Finish(Outcome::kMemoryLimit, std::move(error));
  }
  // At the heap limit QuickJS cannot allocate the error object either and throws null.
  if ((error == "uncaught null" || error == "uncaught undefined") && HeapCameNearItsLimit()) {
    return Finish(Outcome::kMemoryLimit,
                  fmt::format("InternalError: out of memory (the heap limit of {} bytes was "
                              "reached; the engine could not even allocate the error)",
                              limits_.memory_bytes));
  }
  return Finish(Outcome::kScriptError, std::move(error));
}

RunResult SessionImpl::Drive() {
  wall_deadline_ = Clock::now() + limits_.wall_time;
  auto budget = std::chrono::duration_cast<std::chrono::nanoseconds>(limits_.exec_time +
                                                                     limits_.backstop_grace) -
                guest_time_before_;
  guest_->set_backstop_budget(budget);
  for (;;) {
    absl::StatusOr<EvalResult> jobs = guest_->ExecutePendingJobs();
    if (!interrupt_reason_.empty()) return Finish(interrupt_outcome_, interrupt_reason_);
    Outcome outcome;
    if (!jobs.ok()) {
      std::string error = ErrorFromStatus(jobs.status(), &outcome);
      return Finish(outcome, error);
    }
    if (jobs->threw) return FinishScriptError(jobs->exception);
    if (!replay_error_.empty()) return Finish(Outcome::kScriptError, replay_error_);

    absl::StatusOr<PromiseState> state = guest_->GetPromiseState(main_promise_);
    if (!state.ok()) return Finish(Outcome::kTrapped, ErrorFromStatus(state.status(), &outcome));
    if (*state != PromiseState::kPending) {
      absl::StatusOr<uint32_t> value = guest_->PromiseResult(main_promise_);
      absl::StatusOr<std::string> dump =
          value.ok() ? guest_->Dump(*value) : absl::StatusOr<std::string>(value.status());
      if (!dump.ok()) {
        std::string error = ErrorFromStatus(dump.status(), &outcome);
        return Finish(outcome, error);
      }
      if (*state == PromiseState::kFulfilled) {
        std::string result = *dump == "undefined" ? "null" : *dump;
        if (static_cast<int64_t>(result.size()) > limits_.max_value_bytes) {
          return Finish(
              Outcome::kScriptError,
              fmt::format("the script's result is larger than {} bytes", limits_.max_value_bytes));
        }
        return Finish(Outcome::kCompleted, "", std::move(result));
      }
      // Rejected: render the reason as the engine renders uncaught exceptions.
      std::string error = FormatException(*dump);
      return FinishScriptError(error);
    }

    StartQueuedTools();
    std::deque<std::pair<std::string, ToolResult>> ready;
    {
      std::lock_guard<std::mutex> lock(completions_->mu);
      ready.swap(completions_->items);
    }
    if (!ready.empty()) {
      for (auto& [id, result] : ready) {
        absl::Status s = Deliver(id, result);
        if (!s.ok()) {
          std::string error = ErrorFromStatus(s, &outcome);
          return Finish(outcome, error);
        }
      }
      continue;
    }
    if (cancelled_.load()) return Finish(Outcome::kCancelled, "cancelled");

    std::vector<std::string> waiting;
    std::vector<PendingCall> durable;
    for (const auto& [id, p] : pending_) {
      if (p.durable) {
        durable.push_back(PendingCall{p.id, p.name, p.args});
      } else {
        waiting.push_back(fmt::format("{} ({})", p.name, p.id));
      }
    }
    if (!waiting.empty()) {
      std::unique_lock<std::mutex> lock(completions_->mu);
      bool woke = completions_->cv.wait_until(
          lock, wall_deadline_, [&] { return !completions_->items.empty() || cancelled_.load(); });
      if (!woke) {
        std::string list;
        for (const auto& w : waiting) list += (list.empty() ? "" : ", ") + w;
        lock.unlock();
        return Finish(Outcome::kTimeout,
                      fmt::format("wall-time limit of {} ms reached waiting for {}",
                                  limits_.wall_time.count(), list));
      }
      continue;
    }
    if (!durable.empty()) {
      state_ = SessionState::kPaused;
      RunResult r;
      r.outcome = Outcome::kPaused;
      r.pending = std::move(durable);
      r.guest_time = GuestTime();
      last_ = r;
      return r;
    }
    // QuickJS drops a promise job it has no memory to queue, without an exception: a chain of
    // promises that ran the heap out ends here, looking stalled.
    if (HeapCameNearItsLimit()) {
      return Finish(Outcome::kMemoryLimit,
                    fmt::format("out of memory: the heap limit of {} bytes was reached while "
                                "promise jobs were queued, and the promise the script awaits can "
                                "no longer settle",
                                limits_.memory_bytes));
    }
    return Finish(Outcome::kStalled,
                  "the script awaits a promise that nothing can settle (no tool call is pending)");
  }
}

absl::StatusOr<RunResult> SessionImpl::Run(std::string_view script) {
  if (state_ != SessionState::kNew || guest_ == nullptr) {
    return FailedPrecondition("this session has already run a script");
  }
  if (static_cast<int64_t>(script.size()) > limits_.max_script_bytes) {
    return InvalidArgument(fmt::format("script of {} bytes: the limit is {}", script.size(),
                                       limits_.max_script_bytes));
  }
  if (script.data() != script_.data()) script_ = std::string(script);
  state_ = SessionState::kRunning;
  wall_deadline_ = Clock::now() + limits_.wall_time;
  auto budget = std::chrono::duration_cast<std::chrono::nanoseconds>(limits_.exec_time +
                                                                     limits_.backstop_grace);
  guest_->set_backstop_budget(budget);
  absl::StatusOr<EvalResult> main = guest_->Eval(WrapScript(script_), "script.js");
  if (!interrupt_reason_.empty()) return Finish(interrupt_outcome_, interrupt_reason_);
  if (!main.ok()) {
    Outcome outcome;
    std::string error = ErrorFromStatus(main.status(), &outcome);
    return Finish(outcome, error);
  }
  if (main->threw) return FinishScriptError(main->exception);
  main_promise_ = main->value;
  return Drive();
}

absl::StatusOr<RunResult> SessionImpl::Resume(std::string_view call_id, const ToolResult& result) {
  if (state_ != SessionState::kPaused || guest_ == nullptr) {
    return FailedPrecondition("resume: the session is not paused");
  }
  auto it = pending_.find(call_id);
  if (it == pending_.end() || !it->second.durable) {
    std::string ids;
    for (const auto& [id, p] : pending_) ids += (ids.empty() ? "" : ", ") + id;
    return NotFound(fmt::format("resume: no durable call '{}' is pending (pending: {})", call_id,
                                ids.empty() ? "none" : ids));
  }
  {
    std::lock_guard<std::mutex> lock(completions_->mu);
    completions_->items.emplace_back(std::string(call_id), result);
  }
  state_ = SessionState::kRunning;
  RunResult r = Drive();
  return r;
}

// --- snapshots ---

json SessionImpl::HostState() const {
  json pending = json::array();
  for (const auto& [id, p] : pending_) {
    pending.push_back({{"id", p.id},
                       {"name", p.name},
                       {"args", p.args},
                       {"resolve", p.resolve},
                       {"reject", p.reject},
                       {"durable", p.durable},
                       {"journal_index", p.journal_index}});
  }
  json journal = json::array();
  for (const auto& e : journal_) journal.push_back(EntryToJson(e));
  const GuestState& g = guest_->state();
  return {{"session_id", id_.value()},
          {"script", script_},
          {"limits", LimitsToJson(limits_)},
          {"allowlist", allowlist_},
          {"declared", declared_.bits()},
          {"capabilities", capabilities_.bits()},
          {"gated", gated_},
          {"approvals_available", approvals_available_},
          {"guest",
           {{"stack_pointer", g.stack_pointer},
            {"rt", g.rt},
            {"ctx", g.ctx},
            {"undefined", g.undefined},
            {"scratch", g.scratch}}},
          {"main_promise", main_promise_},
          {"pending", pending},
          {"next_call", next_call_},
          {"total_calls", total_calls_},
          {"refused_calls", refused_calls_},
          {"journal_bytes", journal_bytes_},
          {"journal", journal},
          {"console", console_},
          {"console_full", console_full_},
          {"guest_time_ns", GuestTime().count()}};
}

absl::StatusOr<std::string> SessionImpl::Snapshot() {
  if (state_ != SessionState::kPaused || guest_ == nullptr) {
    return FailedPrecondition("snapshot: the session is not paused on durable calls");
  }
  if (key_.empty()) return FailedPrecondition("snapshot: the session has no HMAC key");
  SnapshotImage image;
  image.build_id = std::string(WasmBuildId());
  image.host_state = HostState().dump(-1, ' ', false, json::error_handler_t::replace);
  CapturePages(guest_->memory().data(), guest_->memory().pages(), &image);
  return EncodeSnapshot(image, key_);
}

absl::Status SessionImpl::LoadHostState(const json& s, bool with_guest) {
  if (!s.is_object()) return InvalidArgument("snapshot host state is not an object");
  id_ = SessionId(s.value("session_id", SessionId::New().value()));
  script_ = s.value("script", "");
  approvals_available_ = s.value("approvals_available", 0);
  gated_ = s.value("gated", false);
  declared_ = CapabilitySet::FromBits(s.value("declared", uint8_t{0}));
  capabilities_ = CapabilitySet::FromBits(s.value("capabilities", uint8_t{0}));
  allowlist_ = s.value("allowlist", std::vector<std::string>{});
  std::sort(allowlist_.begin(), allowlist_.end());
  std::vector<JournalEntry> journal;
  for (const json& e : s.value("journal", json::array())) {
    ASSIGN_OR_RETURN(JournalEntry entry, EntryFromJson(e));
    journal.push_back(std::move(entry));
  }
  if (!with_guest) {
    for (auto& e : journal) {
      if (e.status != JournalEntry::Status::kRefused) replay_.push_back(std::move(e));
    }
    return absl::OkStatus();
  }
  journal_ = std::move(journal);
  console_ = s.value("console", "");
  console_full_ = s.value("console_full", false);
  next_call_ = s.value("next_call", uint64_t{1});
  total_calls_ = s.value("total_calls", 0);
  refused_calls_ = s.value("refused_calls", 0);
  journal_bytes_ = s.value("journal_bytes", int64_t{0});
  main_promise_ = s.value("main_promise", uint32_t{0});
  guest_time_before_ = std::chrono::nanoseconds(s.value("guest_time_ns", int64_t{0}));
  for (const json& p : s.value("pending", json::array())) {
    Pending pending;
    pending.id = p.value("id", "");
    pending.name = p.value("name", "");
    pending.args = p.value("args", "");
    pending.resolve = p.value("resolve", uint32_t{0});
    pending.reject = p.value("reject", uint32_t{0});
    pending.durable = p.value("durable", false);
    pending.journal_index = p.value("journal_index", size_t{0});
    if (pending.journal_index >= journal_.size() || !pending.durable) {
      return InvalidArgument("snapshot: inconsistent pending call");
    }
    pending_.emplace(pending.id, std::move(pending));
  }
  if (pending_.empty() || main_promise_ == 0) {
    return InvalidArgument("snapshot: no pending durable call");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SessionImpl>> SessionImpl::FromSnapshot(const json& host_state,
                                                                       uint32_t pages,
                                                                       std::string_view bitmap,
                                                                       std::string_view data,
                                                                       SessionOptions options) {
  std::unique_ptr<SessionImpl> s(new SessionImpl());
  if (!host_state.is_object() || !host_state.contains("limits")) {
    return InvalidArgument("snapshot: host state without limits");
  }
  options.limits = LimitsFromJson(host_state["limits"]);
  RETURN_IF_ERROR(s->Configure(std::move(options)));
  RETURN_IF_ERROR(s->LoadHostState(host_state, /*with_guest=*/true));
  const json& g = host_state.value("guest", json::object());
  GuestState gs;
  gs.stack_pointer = g.value("stack_pointer", uint32_t{0});
  gs.rt = g.value("rt", uint32_t{0});
  gs.ctx = g.value("ctx", uint32_t{0});
  gs.undefined = g.value("undefined", uint32_t{0});
  gs.scratch = g.value("scratch", uint32_t{0});
  ASSIGN_OR_RETURN(s->guest_, Guest::Restore(s->guest_config_, s.get(), gs, pages, bitmap, data));
  s->state_ = SessionState::kPaused;
  RunResult r;
  r.outcome = Outcome::kPaused;
  for (const auto& [id, p] : s->pending_) r.pending.push_back(PendingCall{p.id, p.name, p.args});
  r.guest_time = s->guest_time_before_;
  s->last_ = r;
  return s;
}

absl::StatusOr<std::unique_ptr<SessionImpl>> SessionImpl::ForReplay(const json& host_state,
                                                                    SessionOptions options) {
  if (!host_state.is_object() || !host_state.contains("limits")) {
    return InvalidArgument("snapshot: host state without limits");
  }
  std::unique_ptr<SessionImpl> s(new SessionImpl());
  options.limits = LimitsFromJson(host_state["limits"]);
  RETURN_IF_ERROR(s->Configure(std::move(options)));
  RETURN_IF_ERROR(s->LoadHostState(host_state, /*with_guest=*/false));
  if (s->replay_.empty()) return InvalidArgument("replay: the journal is empty");
  s->replaying_ = true;
  RETURN_IF_ERROR(s->BootGuest());
  return s;
}

}  // namespace airlock::interp::internal

namespace airlock::interp {

Session::Session(std::unique_ptr<internal::SessionImpl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

absl::StatusOr<RunResult> Session::Run(std::string_view script) { return impl_->Run(script); }
absl::StatusOr<RunResult> Session::Resume(std::string_view call_id, const ToolResult& result) {
  return impl_->Resume(call_id, result);
}
absl::StatusOr<std::string> Session::Snapshot() { return impl_->Snapshot(); }
void Session::Cancel() { impl_->Cancel(); }
const SessionId& Session::id() const { return impl_->id(); }
SessionState Session::state() const { return impl_->state(); }
const std::string& Session::console() const { return impl_->console(); }
const std::vector<JournalEntry>& Session::journal() const { return impl_->journal(); }
const RunResult& Session::last_result() const { return impl_->last_result(); }

}  // namespace airlock::interp
