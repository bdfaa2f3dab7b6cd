#include "interp/interpreter.h"

#include <mutex>
#include <utility>

#include "common/status.h"
#include "fmt/format.h"
#include "interp/internal/guest.h"
#include "interp/internal/session_impl.h"
#include "interp/internal/snapshot_format.h"

namespace airlock::interp {
namespace {

using internal::SessionImpl;

// Exercises every import whose role the generated table could have confused with another of
// the same signature: the host function (tools.call, console.log), heap growth, the clock and
// time zone, and the interrupt handler.
absl::Status SelfTest() {
  SessionOptions options;
  ToolInfo echo;
  echo.name = "selftest.echo";
  options.tools.push_back(MakeHostFunctionTool(
      echo, [](const nlohmann::json& args) -> absl::StatusOr<nlohmann::json> { return args; }));
  ASSIGN_OR_RETURN(std::unique_ptr<SessionImpl> session, SessionImpl::Create(options));
  ASSIGN_OR_RETURN(RunResult r,
                   session->Run("const r = await tools.call('selftest.echo', {x: [1, 2]});\n"
                                "console.log('ok');\n"
                                "const d = new Date(0);\n"
                                "return [r.x.length, d.getHours(), d.getTimezoneOffset(),\n"
                                "        Date.now() > 1.6e12];"));
  const std::string expected = "[2,0,0,true]";
  if (r.outcome != Outcome::kCompleted || r.result_json != expected ||
      session->console() != "ok\n") {
    return Internal(fmt::format(
        "interpreter self-test failed: outcome {}, result {} (want {}), console '{}', error {}",
        ToString(r.outcome), r.result_json, expected, session->console(), r.error));
  }
  // Heap growth: a large malloc (never touched, so this costs no page faults) must grow the
  // linear memory through our import.
  class NoHost : public internal::GuestHost {
    uint32_t OnHostCall(internal::Guest&, std::string_view, std::string_view,
                        std::string_view) override {
      return 0;
    }
    bool ShouldInterrupt(internal::Guest&) override { return false; }
  } no_host;
  ASSIGN_OR_RETURN(std::unique_ptr<internal::Guest> guest, internal::Guest::Boot({}, &no_host));
  ASSIGN_OR_RETURN(bool grew, guest->GrowsForLargeAllocation(24 << 20));
  if (!grew) return Internal("interpreter self-test failed: the heap did not grow");
  SessionOptions spin;
  spin.limits.exec_time = std::chrono::milliseconds(1);
  ASSIGN_OR_RETURN(session, SessionImpl::Create(spin));
  ASSIGN_OR_RETURN(r, session->Run("for (;;) {}"));
  if (r.outcome != Outcome::kTimeout) {
    return Internal(fmt::format("interpreter self-test failed: interrupt handler: outcome {}",
                                ToString(r.outcome)));
  }
  return absl::OkStatus();
}

absl::Status SelfTestOnce() {
  static std::once_flag once;
  static absl::Status* status = nullptr;
  std::call_once(once, [] { status = new absl::Status(SelfTest()); });
  return *status;
}

struct Decoded {
  internal::SnapshotImage image;
  nlohmann::json host_state;
};

// Verifies and decodes a snapshot; errors say `what` ("restore", "replay") first.
absl::StatusOr<Decoded> Decode(std::string_view snapshot, std::string_view key,
                               internal::BuildCheck check, std::string_view what) {
  Decoded d;
  ASSIGN_OR_RETURN(d.image, internal::DecodeSnapshot(snapshot, key, internal::WasmBuildId(), check),
                   what);
  d.host_state = nlohmann::json::parse(d.image.host_state, nullptr, false);
  if (!d.host_state.is_object()) {
    return InvalidArgument(fmt::format("{}: snapshot host state is not JSON", what));
  }
  return d;
}

}  // namespace

const char* ToString(Outcome outcome) {
  switch (outcome) {
    case Outcome::kCompleted:
      return "completed";
    case Outcome::kPaused:
      return "paused";
    case Outcome::kScriptError:
      return "script-error";
    case Outcome::kMemoryLimit:
      return "memory-limit";
    case Outcome::kTimeout:
      return "timeout";
    case Outcome::kCancelled:
      return "cancelled";
    case Outcome::kTrapped:
      return "trapped";
    case Outcome::kStalled:
      return "stalled";
  }
  return "unknown";
}

const char* ToString(JournalEntry::Status status) {
  switch (status) {
    case JournalEntry::Status::kPending:
      return "pending";
    case JournalEntry::Status::kOk:
      return "ok";
    case JournalEntry::Status::kError:
      return "error";
    case JournalEntry::Status::kRefused:
      return "refused";
  }
  return "unknown";
}

absl::StatusOr<Limits> LimitsFromSpec(const spec::SandboxSpec& spec) {
  if (spec.level != spec::Level::kInterp) {
    return InvalidArgument(fmt::format("the interpreter runs level 0 specs, not level {}",
                                       static_cast<int>(spec.level)));
  }
  Limits limits;
  limits.memory_bytes = spec.resources.memory_mb << 20;
  limits.exec_time = std::chrono::seconds(spec.resources.command_timeout_seconds);
  limits.wall_time = std::chrono::seconds(spec.resources.run_timeout_seconds);
  limits.max_console_bytes = spec.resources.max_log_bytes;
  return limits;
}

absl::StatusOr<std::unique_ptr<Interpreter>> Interpreter::Create() {
  RETURN_IF_ERROR(SelfTestOnce());
  return std::unique_ptr<Interpreter>(new Interpreter());
}

std::string_view Interpreter::BuildId() { return internal::WasmBuildId(); }

absl::StatusOr<std::unique_ptr<Session>> Interpreter::NewSession(SessionOptions options) const {
  ASSIGN_OR_RETURN(std::unique_ptr<SessionImpl> session, SessionImpl::Create(std::move(options)));
  return std::unique_ptr<Session>(new Session(std::move(session)));
}

absl::StatusOr<std::unique_ptr<Session>> Interpreter::Restore(std::string_view snapshot,
                                                              SessionOptions options) const {
  ASSIGN_OR_RETURN(Decoded d,
                   Decode(snapshot, options.hmac_key, internal::BuildCheck::kSameBuild, "restore"));
  ASSIGN_OR_RETURN(std::unique_ptr<SessionImpl> session,
                   SessionImpl::FromSnapshot(d.host_state, d.image.pages, d.image.bitmap,
                                             d.image.data, std::move(options)),
                   "restore");
  return std::unique_ptr<Session>(new Session(std::move(session)));
}

absl::StatusOr<std::unique_ptr<Session>> Interpreter::Replay(std::string_view snapshot,
                                                             SessionOptions options) const {
  ASSIGN_OR_RETURN(Decoded d,
                   Decode(snapshot, options.hmac_key, internal::BuildCheck::kAnyBuild, "replay"));
  ASSIGN_OR_RETURN(std::unique_ptr<SessionImpl> session,
                   SessionImpl::ForReplay(d.host_state, std::move(options)), "replay");
  ASSIGN_OR_RETURN(RunResult r, session->Run(session->script()), "replay");
  if (r.outcome != Outcome::kPaused) {
    return FailedPrecondition(fmt::format("replay: the script ended {} instead of pausing: {}",
                                          ToString(r.outcome), r.error));
  }
  session->EndReplay();
  return std::unique_ptr<Session>(new Session(std::move(session)));
}

}  // namespace airlock::interp
