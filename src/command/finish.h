// The last step of every command: making its output safe to leave. Previews and the kept raw
// log are redacted (explicit secret values of the run and the format detectors), then the
// private unredacted copy is deleted. Nothing of a command's output reaches a caller, a model
// or a log file without passing through here.
#ifndef AIRLOCK_COMMAND_FINISH_H_
#define AIRLOCK_COMMAND_FINISH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "command/capture.h"
#include "command/command.h"
#include "redact/redactor.h"

namespace airlock {

// A redactor with the format detectors and `secrets`. Without secrets, a shared instance
// compiled once per process is returned.
absl::StatusOr<Redactor> RedactorFor(const std::vector<std::string>& secrets);

// Fills r->stdout_preview/stderr_preview (redacted), writes the redacted kept output from
// `raw_path` to `log_path` (mode 0600; no file, and r->raw_log left empty, when nothing was
// kept; `raw_path` need not exist then), removes `raw_path`, sets r->raw_log, and fills the
// failure analysis and the report (command/report.h) from the redacted output. Call it once
// r->classification and the other fields are final.
absl::Status FinishOutput(const CommandSpec& command, const Redactor& redactor,
                          const OutputCapture& capture, const std::string& raw_path,
                          const std::string& log_path, CommandResult* r);

// Redacts the fields of `r` that carry text from the sandbox other than its output and the
// syscall report (which the supervisor redacts as it decodes): the violations (detail, and every
// string in data; a string ending in "..." as cut there), failure_detail, key_lines and error.
// Call it before the report is rendered (FinishOutput renders it), so that no line the report
// shortens to its width keeps part of a secret.
void RedactResultFields(const Redactor& redactor, CommandResult* r);

}  // namespace airlock

#endif  // AIRLOCK_COMMAND_FINISH_H_
