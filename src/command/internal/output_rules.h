// The line rules behind AnalyzeOutput: what a line of compiler, build-tool, test-runner or
// runtime output says about a failure. Private to src/command.
#ifndef AIRLOCK_COMMAND_INTERNAL_OUTPUT_RULES_H_
#define AIRLOCK_COMMAND_INTERNAL_OUTPUT_RULES_H_

#include <span>

namespace airlock::command_internal {

// What a matching line is evidence of.
enum class Signal {
  kNone,
  kIgnore,  // a line that looks like an error but is not one ("0 failed", npm's log path)
  kNetwork,
  kMissingDependency,
  kToolNotFound,  // a command the run needed is missing: kCommandNotFound on exit 127
  kCompilationError,
  kTestFailure,
  kOutOfMemory,
};

// How a matching line takes part in multi-line structures.
enum class Role {
  kLine,            // a line on its own
  kTracebackStart,  // Python's "Traceback (most recent call last):"
  kPythonFrame,     // '  File "x.py", line 3, in f': (?P<file>) (?P<line>)
  kStackFrame,      // node/Java/Go frame after the error line: (?P<file>) (?P<line>) [(?P<col>)]
                    // [(?P<func>)]
  kException,       // an error or exception message, placed at the frame that raised it
};

enum class Tier {
  kKey,      // a key line
  kContext,  // a key line when there are fewer than the maximum
  kSignal,   // evidence only, never quoted
};

// One rule: an RE2 pattern matched against one line (without its newline). Named groups:
// (?P<detail>) the missing module, host, command or failing test; (?P<text>) the part of the
// line to quote (default: all of it); (?P<file>) (?P<line>) [(?P<col>)] (?P<msg>) to quote a
// line as "file:line[:col]: msg"; file/line/col/func for frames. '$' in a pattern also matches
// before a trailing '\r'.
struct LineRule {
  Signal signal;
  Role role;
  Tier tier;
  const char* pattern;
};

// In priority order: when several rules match a line, the first one decides.
std::span<const LineRule> LineRules();

}  // namespace airlock::command_internal

#endif  // AIRLOCK_COMMAND_INTERNAL_OUTPUT_RULES_H_
