// The report a model reads about a command: one screen, never the raw output.
//
// AnalyzeOutput reads a command's (redacted) stdout and stderr and says what most likely went
// wrong and which lines show it; RenderReport turns a CommandResult into at most kReportLines
// lines of at most kReportColumns columns.
#ifndef AIRLOCK_COMMAND_REPORT_H_
#define AIRLOCK_COMMAND_REPORT_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "command/command.h"

namespace airlock {

class Redactor;

inline constexpr size_t kMaxKeyLines = 20;
inline constexpr size_t kMaxKeyLineBytes = 200;  // bytes, "..." included
inline constexpr size_t kReportLines = 40;
inline constexpr size_t kReportColumns = 100;

struct FailureAnalysis {
  FailureKind kind = FailureKind::kNone;
  // The lines that show the failure, in output order (stderr's before stdout's), without
  // duplicates, at most kMaxKeyLines of at most kMaxKeyLineBytes bytes, free of control
  // characters. Where a toolchain prints a location apart from its message (Python tracebacks,
  // node, Java and Go stack traces, Maven's "[ERROR] F.java:[12,5] msg"), the line is written
  // "file:line[:col]: message". When nothing matched, the last non-blank lines of output.
  std::vector<std::string> key_lines;
  // What is missing or failed, when the output names it: the module, header, package or command
  // (missing dependency, command not found), the host (network required), "file:line" of the
  // first error (compilation error), the first failing test (test failure).
  std::string detail;
};

// What most likely went wrong. The classification decides timeouts, the sandbox's memory and
// pids limits, policy blocks and network blocks; for a plain non-zero exit (or an output limit)
// the output decides, in this order of precedence: exit code 127 is kCommandNotFound; then
// network errors (they cause missing-dependency errors downstream); missing dependencies (a
// module, header, package or artifact, or a command a script needed: "x: command not found"
// with another exit code); compilation errors; test failures; the program's own out-of-memory
// errors; otherwise kUnknown. A successful command is kNone with no key lines.
//
// Pass redacted text: key lines quote it. Linear in the input (32 MiB of output takes under a
// second); toolchains that colour their output are read with the colour codes removed.
FailureAnalysis AnalyzeOutput(Classification classification, int exit_code,
                              std::string_view stdout_text, std::string_view stderr_text);

// The same for output whose streams are already merged (the command wrapper's kept log).
FailureAnalysis AnalyzeOutput(Classification classification, int exit_code,
                              std::string_view output);

// The report: the command, how it ended (exit code or signal, duration, classification, CPU
// time), the likely failure and its detail, limits reached, setup errors and policy
// violations, the key lines (or, when there are none, the last lines of the previews), output
// sizes and truncation, and the raw log reference. It quotes only result.key_lines, previews and
// fields of `result`, which are redacted already; `redactor`, when given, also redacts the command
// line and the error text.
std::string RenderReport(const CommandSpec& command, const CommandResult& result,
                         const Redactor* redactor = nullptr);

}  // namespace airlock

#endif  // AIRLOCK_COMMAND_REPORT_H_
