// The report a model reads instead of raw output: what ran, how it ended, the likely failure and
// the key error lines pulled from the output of common toolchains (gcc/clang, make, javac and
// Maven, Gradle, Python tracebacks and pytest, node/npm, go), at most one screen.
//
// Inputs are the already redacted previews and kept log, so nothing here can reintroduce a
// secret. Linear in the size of the output; bounded results.
#ifndef AIRLOCK_COMMAND_REPORT_H_
#define AIRLOCK_COMMAND_REPORT_H_

#include <string>
#include <string_view>
#include <vector>

#include "command/command.h"

namespace airlock {

struct FailureAnalysis {
  FailureKind kind = FailureKind::kNone;
  std::vector<std::string> key_lines;  // at most kMaxKeyLines, each at most kMaxKeyLineBytes
  std::string detail;  // the missing module/header/host, or the failing test, when known
};

inline constexpr size_t kMaxKeyLines = 20;
inline constexpr size_t kMaxKeyLineBytes = 200;

// The likely failure of a command from how it ended and what it printed (`output`: its kept,
// redacted output, both streams).
FailureAnalysis AnalyzeOutput(Classification classification, int exit_code,
                              std::string_view output);

// One screen (at most ~40 lines of at most 100 columns) for a model.
std::string RenderReport(const CommandSpec& command, const CommandResult& result);

}  // namespace airlock

#endif  // AIRLOCK_COMMAND_REPORT_H_
