// A command to run in a sandbox, and how it ended.
//
// CommandResult is a value, not an error: a command that timed out or was killed by the memory
// limit still has a result (with its classification), and only a failure of airlock itself is
// an absl::Status. Its JSON form (ToJson) is the public wire format: the field names are fixed by
// the API and by `airlock run --json`.
#ifndef AIRLOCK_COMMAND_COMMAND_H_
#define AIRLOCK_COMMAND_COMMAND_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "command/syscalls.h"
#include "common/ids.h"
#include "nlohmann/json.hpp"

namespace airlock {

struct CommandSpec {
  std::vector<std::string> argv;
  std::string workdir;                     // empty: the sandbox's workdir
  std::map<std::string, std::string> env;  // on top of the minimal environment and spec.env
  std::optional<std::chrono::milliseconds> timeout;  // empty: resources.commandTimeoutSeconds
  std::string stdin_data;  // bytes fed to stdin; stdin is /dev/null when empty
};

enum class Classification {
  kOk,
  kExitNonzero,
  kCommandTimeout,
  kResourceExhaustedMemory,
  kResourceExhaustedPids,
  kOutputLimit,
  kPolicyBlocked,
  kNetworkRequired,
  kSandboxError,
};

// "OK", "EXIT_NONZERO", ... as in the API.
const char* ToString(Classification c);
std::optional<Classification> ClassificationFromString(std::string_view s);

// What the likely cause of a failure is, from the classification and the output.
enum class FailureKind {
  kNone,
  kCompilationError,
  kTestFailure,
  kMissingDependency,
  kNetworkRequired,
  kOutOfMemory,
  kTimeout,
  kPolicyBlocked,
  kCommandNotFound,
  kUnknown,
};
const char* ToString(FailureKind k);  // "compilation_error", "test_failure", ...

struct Usage {
  int64_t cpu_user_ms = 0;
  int64_t cpu_system_ms = 0;
  int64_t memory_peak_bytes = 0;
  int64_t pids_peak = 0;
  int64_t io_read_bytes = 0;
  int64_t io_write_bytes = 0;
  int64_t oom_kills = 0;
};

// Something the sandbox refused: a seccomp kill, a blocked network connection, a refused
// command. `kind` is a stable name ("seccomp", "BlockedNetworkEgress", "command_policy", ...).
// RenderReport shows data["instead"], when it is a string, as advice for the model.
struct Violation {
  std::string kind;
  std::string detail;
  nlohmann::json data = nlohmann::json::object();
};

// The kind of the violation of a command the command policy refused before it ran
// (src/cmdpolicy); its report says the command did not run.
inline constexpr char kCommandPolicyViolation[] = "command_policy";
// The kind of the violation of a call the syscall policy denied (its data is the denied call).
inline constexpr char kSyscallViolation[] = "syscall";

struct CommandResult {
  CommandId command_id;
  Classification classification = Classification::kOk;
  int exit_code = 0;  // -1 when killed by a signal
  int signal = 0;     // the terminating signal, 0 if none
  int64_t duration_ms = 0;
  bool timed_out = false;
  bool truncated = false;    // output passed max_log_bytes
  int64_t stdout_bytes = 0;  // everything the command wrote, kept or not
  int64_t stderr_bytes = 0;
  std::string stdout_preview;  // head and tail, redacted
  std::string stderr_preview;
  std::string stdout_sha256;  // of every byte written to stdout, before redaction
  std::string stderr_sha256;
  std::string raw_log;  // reference to the kept, redacted log (a path for `airlock run`)
  Usage usage;
  std::vector<Violation> violations;
  std::vector<std::string> degraded;  // named protections the caller allowed to be missing
  // What the syscall supervisor saw (process.supervisor notify or ptrace); in the JSON only
  // when a supervisor ran.
  SyscallReport syscalls;
  // Setup failures (SANDBOX_ERROR): the step that failed and why.
  std::string error;
  // The one-screen report for a model (see command/report.h).
  FailureKind failure = FailureKind::kNone;
  std::string failure_detail;  // the missing module/host/test, when known
  std::vector<std::string> key_lines;
  std::string report;
};

nlohmann::json ToJson(const CommandResult& r);
absl::StatusOr<CommandResult> CommandResultFromJson(const nlohmann::json& j);

}  // namespace airlock

#endif  // AIRLOCK_COMMAND_COMMAND_H_
