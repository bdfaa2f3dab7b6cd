// Level 0 of the SandboxSpec: a JavaScript interpreter (QuickJS compiled to WebAssembly, then to C
// by wasm2c) that runs agent-written orchestration scripts in-process. A script starts from
// nothing: no file system, no network, no modules; it sees `tools.call(name, args)` (a promise)
// and `console.log`, and the session decides which tools it may call. A script that awaits only
// durable tools (a human's approval) can be snapshotted, the process may exit, and any process
// with the same build resumes it later with the answer. See docs/interp.md.
//
//   ASSIGN_OR_RETURN(auto interp, Interpreter::Create());
//   SessionOptions opts;
//   opts.tools = {MakeHumanApprovalTool(), my_tool};
//   opts.hmac_key = key;
//   ASSIGN_OR_RETURN(auto session, interp->NewSession(std::move(opts)));
//   ASSIGN_OR_RETURN(RunResult r, session->Run(script));
//   if (r.outcome == Outcome::kPaused) { ASSIGN_OR_RETURN(std::string snap, session->Snapshot()); }
//   ...later, anywhere: interp->Restore(snap, opts) then session->Resume(call_id, answer).
//
// Threading: an Interpreter is thread-safe and cheap; any number of Sessions run on any number of
// threads at once, each Session used by one thread at a time (Cancel() from any thread). The
// runtime's trap state is thread-local (internal/wasm_rt.h). Errors: absl::Status for misuse and
// host failures; how a script ended is a value (RunResult), never an error.
#ifndef AIRLOCK_INTERP_INTERPRETER_H_
#define AIRLOCK_INTERP_INTERPRETER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/ids.h"
#include "interp/tool.h"
#include "spec/sandbox_spec.h"

namespace airlock::interp {

struct SessionIdTag {
  static constexpr std::string_view kPrefix = "isn-";
};
using SessionId = StrongId<SessionIdTag>;

struct Limits {
  // QuickJS's own heap limit: past it allocations fail with a catchable "out of memory".
  int64_t memory_bytes = 32 << 20;
  // The real bound: linear memory never grows past this (0: 2 x memory_bytes + 16 MiB for the
  // module's data and shadow stack). Counts towards the process RSS only as pages are touched.
  int64_t linear_memory_bytes = 0;
  // JavaScript stack (QuickJS's limit, on the WebAssembly shadow stack of 5 MiB).
  int64_t stack_bytes = 1 << 20;
  // Execution time: the (wall-clock) time spent running guest code over the session's whole
  // life, across pauses and processes; waits for tools do not count. Enforced by the engine's
  // interrupt handler (uncatchable), backed by the watchdog after backstop_grace.
  std::chrono::milliseconds exec_time{5000};
  // Wall time of one Run or Resume, including waits for immediate tools.
  std::chrono::milliseconds wall_time{60000};
  std::chrono::milliseconds backstop_grace{1000};
  // Sub-agent limits: tool calls awaiting an answer at once, and calls per script in total.
  int max_in_flight_calls = 8;
  int max_total_calls = 256;
  int64_t max_console_bytes = 1 << 20;  // console.log output kept; the rest is dropped
  int64_t max_value_bytes = 4 << 20;    // tool arguments, tool results, the script's result
  // Arguments and results kept in the journal (host memory, and the snapshot): past it calls are
  // refused and results become errors.
  int64_t max_journal_bytes = 32 << 20;
  int64_t max_script_bytes = 1 << 20;
};

// Limits for a level-0 SandboxSpec (resources.memoryMb, commandTimeoutSeconds as execution time,
// runTimeoutSeconds as wall time). InvalidArgument when the spec's level is not 0.
absl::StatusOr<Limits> LimitsFromSpec(const spec::SandboxSpec& spec);

struct SessionOptions {
  Limits limits;
  // The allowlist: a script can call exactly these tools, by their info().name. Set here, never
  // by the script.
  std::vector<std::shared_ptr<Tool>> tools;
  // Rule-of-two declarations beyond what the tools confer (e.g. kSeesUntrustedContent when the
  // script itself came from untrusted input). A session with all three capabilities is refused
  // unless a kHumanApproval tool is allowed; then every call of a kChangesState tool needs an
  // approved human_approval answer before it (one approval, one call).
  CapabilitySet declared;
  // Signs and verifies snapshots (HMAC-SHA256). Required by Snapshot, Restore and Replay.
  std::string hmac_key;
};

enum class Outcome {
  kCompleted,    // the script returned; result_json is its value
  kPaused,       // the script awaits only durable tools; see pending, Snapshot(), Resume()
  kScriptError,  // an uncaught exception (syntax error, stack overflow, a failed tool...)
  kMemoryLimit,  // uncaught "out of memory"
  kTimeout,      // exec_time or wall_time ran out, or the watchdog stopped the guest
  kCancelled,    // Cancel()
  kTrapped,      // the WebAssembly guest trapped (a fault inside the engine); discarded
  kStalled,      // the script awaits a promise nothing can settle
};
const char* ToString(Outcome outcome);

struct PendingCall {
  std::string id;
  std::string name;
  std::string args_json;
};

struct RunResult {
  Outcome outcome = Outcome::kCompleted;
  std::string result_json;                 // kCompleted ("null" for undefined)
  std::string error;                       // every outcome but kCompleted and kPaused
  std::vector<PendingCall> pending;        // kPaused: the durable calls awaited
  std::chrono::nanoseconds guest_time{0};  // execution time so far (whole life)
};

// One tools.call, as journaled. Every accepted call is; refused ones too, up to the first 100 of a
// session (a script refused in a loop must not grow host memory).
struct JournalEntry {
  enum class Status { kPending, kOk, kError, kRefused };
  std::string call_id;  // empty for refused calls
  std::string tool;
  std::string args_json;
  Status status = Status::kPending;
  std::string result;  // the value's JSON (kOk) or the error message (kError, kRefused)
  int64_t started_unix_ms = 0;
  int64_t finished_unix_ms = 0;
};
const char* ToString(JournalEntry::Status status);

enum class SessionState {
  kNew,       // no script yet
  kRunning,   // inside Run or Resume
  kPaused,    // awaiting durable calls: Resume or Snapshot
  kFinished,  // ended (see the last RunResult); the guest is gone
};

namespace internal {
class SessionImpl;
}

// One script's life. Used by one thread at a time (Cancel from any). Movable, not copyable.
class Session {
 public:
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Runs `script` (the body of an async function: `await` and `return` work at top level) until
  // it finishes or awaits only durable calls. Once per session.
  absl::StatusOr<RunResult> Run(std::string_view script);
  // Answers the durable call `call_id` and continues the script. Only in kPaused.
  absl::StatusOr<RunResult> Resume(std::string_view call_id, const ToolResult& result);
  // The paused session, signed with the session's key: the guest's non-zero memory pages, its
  // global, the pending calls, the journal and the build id. Only in kPaused.
  absl::StatusOr<std::string> Snapshot();
  // Stops the running script at its next interrupt poll (or the watchdog's). Any thread.
  void Cancel();

  const SessionId& id() const;
  SessionState state() const;
  const std::string& console() const;
  const std::vector<JournalEntry>& journal() const;
  const RunResult& last_result() const;

 private:
  friend class Interpreter;
  explicit Session(std::unique_ptr<internal::SessionImpl> impl);
  std::unique_ptr<internal::SessionImpl> impl_;
};

class Interpreter {
 public:
  // Checks that the compiled-in QuickJS module matches its generated import table (a self-test
  // run once per process, a few milliseconds).
  static absl::StatusOr<std::unique_ptr<Interpreter>> Create();

  // A fresh session (about 0.3 ms). InvalidArgument for bad limits, PermissionDenied when the rule
  // of two refuses the tool set.
  absl::StatusOr<std::unique_ptr<Session>> NewSession(SessionOptions options) const;

  // Restores a paused session from Snapshot() bytes. The allowlist, limits and declarations come
  // from the snapshot; `options.tools` supplies the implementations (an allowed tool missing here
  // fails when called) and `options.hmac_key` verifies it. Errors: PermissionDenied for a
  // tampered snapshot or a wrong key, FailedPrecondition for a snapshot of another build (replay
  // it instead), InvalidArgument for something that is not a snapshot.
  absl::StatusOr<std::unique_ptr<Session>> Restore(std::string_view snapshot,
                                                   SessionOptions options) const;

  // Rebuilds a paused session from a snapshot's journal on this build, whatever build wrote it:
  // runs its script again in a fresh session, answering each journaled call from the journal
  // without starting any tool, and stops paused at the same durable calls. Fails with a clear
  // error when the script diverges from its journal (it must be deterministic given its tool
  // results). The key verifies the snapshot as for Restore.
  absl::StatusOr<std::unique_ptr<Session>> Replay(std::string_view snapshot,
                                                  SessionOptions options) const;

  // sha256 of the QuickJS .wasm compiled in: snapshots carry it and resume only on an equal one.
  static std::string_view BuildId();

 private:
  Interpreter() = default;
};

}  // namespace airlock::interp

#endif  // AIRLOCK_INTERP_INTERPRETER_H_
