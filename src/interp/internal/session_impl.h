// The Session implementation: the event loop between the guest and its tools, the call journal,
// the limits, the rule-of-two gate, and the snapshot's host state.
#ifndef AIRLOCK_INTERP_INTERNAL_SESSION_IMPL_H_
#define AIRLOCK_INTERP_INTERNAL_SESSION_IMPL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "interp/internal/guest.h"
#include "interp/interpreter.h"
#include "nlohmann/json.hpp"

namespace airlock::interp::internal {

// Answers of immediate tools, pushed from any thread. Shared with the ToolDone callbacks so that a
// late answer after the session is gone lands here harmlessly.
struct CompletionQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::string, ToolResult>> items;
  bool cancelled = false;
};

class SessionImpl : private GuestHost {
 public:
  // Validates the options (limits, rule of two) and boots a guest.
  static absl::StatusOr<std::unique_ptr<SessionImpl>> Create(SessionOptions options);
  // From a decoded snapshot (host state JSON and memory image).
  static absl::StatusOr<std::unique_ptr<SessionImpl>> FromSnapshot(const nlohmann::json& host_state,
                                                                   uint32_t pages,
                                                                   std::string_view bitmap,
                                                                   std::string_view data,
                                                                   SessionOptions options);
  // A fresh session that will answer calls from `journal` (Interpreter::Replay).
  static absl::StatusOr<std::unique_ptr<SessionImpl>> ForReplay(const nlohmann::json& host_state,
                                                                SessionOptions options);
  ~SessionImpl() override;

  // The Session API (interpreter.h).

  absl::StatusOr<RunResult> Run(std::string_view script);
  absl::StatusOr<RunResult> Resume(std::string_view call_id, const ToolResult& result);
  absl::StatusOr<std::string> Snapshot();
  void Cancel();
  const SessionId& id() const { return id_; }
  SessionState state() const { return state_; }
  const std::string& console() const { return console_; }
  const std::vector<JournalEntry>& journal() const { return journal_; }
  const RunResult& last_result() const { return last_; }

  const std::string& script() const { return script_; }
  // Ends replay mode (Interpreter::Replay, once the replayed run has paused): later calls are
  // live again.
  void EndReplay() { replaying_ = false; }

 private:
  struct Pending {
    std::string id;
    std::string name;
    std::string args;
    uint32_t resolve = 0;
    uint32_t reject = 0;
    bool durable = false;
    size_t journal_index = 0;
  };

  SessionImpl() = default;
  absl::Status Configure(SessionOptions options);
  absl::Status BootGuest();

  // GuestHost.
  uint32_t OnHostCall(Guest& guest, std::string_view op, std::string_view a,
                      std::string_view b) override;
  bool ShouldInterrupt(Guest& guest) override;

  uint32_t ToolCallFromGuest(std::string_view name_json, std::string_view args_json);
  uint32_t Refuse(const std::string& tool, std::string_view args_json, const std::string& why);

  // Runs jobs, delivers answers, starts tools, until the script ends or pauses.
  RunResult Drive();
  RunResult Finish(Outcome outcome, std::string error, std::string result_json = {});
  // An uncaught exception: kScriptError, or kMemoryLimit when it is the engine's out of memory.
  RunResult FinishScriptError(std::string error);
  bool HeapCameNearItsLimit() const;
  absl::Status Deliver(const std::string& id, const ToolResult& result);
  void StartQueuedTools();
  std::chrono::nanoseconds GuestTime() const;
  std::string ErrorFromStatus(const absl::Status& status, Outcome* outcome) const;

  nlohmann::json HostState() const;
  absl::Status LoadHostState(const nlohmann::json& state, bool with_guest);

  SessionId id_ = SessionId::New();
  Limits limits_;
  std::string key_;
  std::map<std::string, std::shared_ptr<Tool>, std::less<>> tools_;  // implementations
  std::vector<std::string> allowlist_;
  CapabilitySet declared_;
  CapabilitySet capabilities_;
  bool gated_ = false;  // all three capabilities: state-changing calls need an approval
  int approvals_available_ = 0;

  std::unique_ptr<Guest> guest_;
  GuestConfig guest_config_;
  uint32_t main_promise_ = 0;
  std::string script_;
  SessionState state_ = SessionState::kNew;
  RunResult last_;

  std::map<std::string, Pending, std::less<>> pending_;
  std::vector<ToolCall> to_start_;
  uint64_t next_call_ = 1;
  int total_calls_ = 0;
  int refused_calls_ = 0;
  int64_t journal_bytes_ = 0;
  std::vector<JournalEntry> journal_;
  std::string console_;
  bool console_full_ = false;
  std::shared_ptr<CompletionQueue> completions_ = std::make_shared<CompletionQueue>();
  std::atomic<bool> cancelled_{false};
  std::string interrupt_reason_;
  Outcome interrupt_outcome_ = Outcome::kTimeout;
  std::chrono::steady_clock::time_point wall_deadline_ =
      std::chrono::steady_clock::time_point::max();
  std::chrono::nanoseconds guest_time_before_{0};  // spent in earlier processes

  // Replay: journaled calls not yet matched, oldest first; and a divergence seen.
  bool replaying_ = false;
  std::deque<JournalEntry> replay_;
  std::string replay_error_;
};

}  // namespace airlock::interp::internal

#endif  // AIRLOCK_INTERP_INTERNAL_SESSION_IMPL_H_
