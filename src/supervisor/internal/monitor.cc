#include "supervisor/internal/monitor.h"

#include <fcntl.h>

#include "common/status.h"
#include "fmt/format.h"

namespace airlock::supervisor::internal {
namespace {

constexpr size_t kCountedSyscalls = 1024;

}  // namespace

Monitor::Monitor(SupervisorOptions options, const char* mode_name)
    : options_(std::move(options)), counts_(kCountedSyscalls, 0), builder_(mode_name) {}

Monitor::~Monitor() = default;

void Monitor::StartThread() {
  thread_ = std::thread([this] {
    Run();
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    if (!attached_) attached_ = Internal("the supervisor stopped before the process was attached");
    cv_.notify_all();
  });
}

void Monitor::Shutdown() {
  if (!thread_.joinable()) return;
  bool kill = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    kill = !done_ && attached_.has_value() && attached_->ok();
    cv_.notify_all();
  }
  // Nothing may go on unsupervised: the command dies before its supervisor does.
  if (kill) options_.kill_command();
  Wake();
  thread_.join();
}

absl::Status Monitor::Attach(const Target& target) {
  std::unique_lock<std::mutex> lock(mu_);
  if (target_ || done_) return FailedPrecondition("the supervisor already has a process");
  target_ = target;
  cv_.notify_all();
  cv_.wait(lock, [&] { return attached_.has_value(); });
  return *attached_;
}

std::optional<Target> Monitor::WaitForTarget() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return target_.has_value() || stopping_; });
  return target_;
}

void Monitor::Attached(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  attached_ = std::move(status);
  cv_.notify_all();
}

bool Monitor::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

bool Monitor::WaitDone(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return done_; });
}

SyscallReport Monitor::Report() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SyscallCount> counts;
  for (size_t nr = 0; nr < counts_.size(); ++nr) {
    if (counts_[nr] > 0) counts.push_back({SyscallName(static_cast<int>(nr)), counts_[nr]});
  }
  return builder_.Build(std::move(counts));
}

void Monitor::Record(const SyscallEvent& decoded) {
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    if (options_.observer != nullptr) options_.observer->OnSyscallEvent(decoded);
  }
  // Redacted once, before anything is cut to the report's bounds (a secret cut there would
  // no longer be found).
  SyscallEvent event = decoded;
  if (options_.redactor) RedactSyscallEvent(*options_.redactor, &event);
  {
    std::lock_guard<std::mutex> lock(mu_);
    builder_.Add(event);
  }
  std::lock_guard<std::mutex> lock(events_mu_);
  if (options_.events != nullptr) options_.events->OnSyscallEvent(event);
}

void Monitor::StopEvents() {
  std::lock_guard<std::mutex> lock(events_mu_);
  options_.events = nullptr;
  options_.observer = nullptr;
}

void Monitor::KillCommand(std::string why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    builder_.MarkKilled(std::move(why));
  }
  options_.kill_command();
}

void Monitor::Fail(std::string why) { KillCommand(fmt::format("supervisor: {}", why)); }

Monitor::Decision Monitor::Decide(const seccomp_data& call, MemoryReader* mem) {
  // The verdict depends only on the call's number and register arguments, which the kernel
  // captured when the filter ran: it is the filter's own verdict, with no time-of-check race.
  // Pointer arguments are decoded for the report only.
  Verdict verdict = policy().Evaluate(call, /*handshake=*/false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (call.nr >= 0 && static_cast<size_t>(call.nr) < counts_.size()) ++counts_[call.nr];
    builder_.CountSeen();
  }
  uint64_t args[6];
  std::copy(std::begin(call.args), std::end(call.args), args);
  if (verdict.kind != Verdict::Kind::kErrno && verdict.kind != Verdict::Kind::kKill) {
    if (ReadsMemory(call.nr)) {
      DecodedCall d = Decode(call.nr, args, mem);
      if (d.kind) {
        d.event.kind = *d.kind;
        Record(d.event);
      }
    }
    return {};
  }
  SyscallEvent e = Decode(call.nr, args, mem).event;
  e.kind = SyscallEventKind::kDenied;
  e.action = policy().ActionName(verdict);
  e.rule = verdict.rule;
  Record(e);
  if (verdict.kind == Verdict::Kind::kKill) {
    KillCommand(fmt::format("{} of {} killed the command at {}", e.action, RuleName(verdict.rule),
                            e.syscall));
    return {Decision::What::kKill, EPERM};
  }
  return {Decision::What::kFail, verdict.errno_value};
}

}  // namespace airlock::supervisor::internal
