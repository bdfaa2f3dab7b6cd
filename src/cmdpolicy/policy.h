// The command permission policy for autonomous runs: argv patterns refused before a command
// runs (docs/policy.md).
//
// This is a guard-rail against an agent's mistakes, NOT a security boundary. It catches an
// agent reaching for `sudo`, `apt install`, `curl … | sh`, `npm install -g` or
// `pip install --user` and tells it what to do instead; a determined program can always run
// what it wants (a script file, python -c, a renamed binary, a computed command name), and the
// sandbox (no privileges, read-only root, no network unless granted) is what contains it.
//
// Check looks at argv, not a string: the program by basename, then its options and
// subcommands. It looks through wrappers (env, nohup, timeout, nice, xargs, sudo, busybox,
// python -m pip, find -exec, ...) and into shell code given as a string (sh -c, bash -lc, eval,
// su -c, watch, flock -c): the string is parsed (cmdpolicy/internal/shell.h) and every simple
// command in it, in pipelines, lists, compound commands and command substitutions, is checked
// the same way. Pipelines and substitutions that feed downloaded content to a shell or an
// interpreter (`curl … | sh`, `wget -qO- … | sudo bash`, `sh <(curl …)`,
// `bash -c "$(curl …)"`, `eval "$(curl …)"`) are refused as pipe-to-shell.
//
// Shell text that cannot be parsed with confidence (unbalanced quotes, a computed program
// name, too deep or too long) is noted in Decision::notes; by default the rules are applied to
// what could be parsed, and with commandPolicy.strictShell the command is refused with rule
// "unparseable-shell".
//
// Immutable after Create; Check is const and thread-safe. Check is linear in the size of the
// argv for each level of nesting, and bounded (shell text beyond 256 KiB or nested deeper than
// 32 levels is not parsed, and says so).
#ifndef AIRLOCK_CMDPOLICY_POLICY_H_
#define AIRLOCK_CMDPOLICY_POLICY_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "command/command.h"
#include "redact/redactor.h"
#include "spec/sandbox_spec.h"

namespace airlock::cmdpolicy {

// What Check decided about one command.
struct Decision {
  bool allowed = true;
  // The refusing rule: a built-in name ("privilege-escalation/sudo", "pipe-to-shell/curl"),
  // "spec/<name>" for a rule of the spec, or "unparseable-shell". Empty when allowed.
  std::string rule;
  // The words the rule matched, e.g. {"apt-get", "install"}, {"curl", "|", "sh"}.
  std::vector<std::string> matched;
  // The simple command (or pipeline) it matched in, shell-quoted and cut to 200 bytes; it may
  // be nested in the argv's shell text.
  std::string command;
  // One line for the model: why the command was refused.
  std::string reason;
  // What to do instead; empty for spec rules.
  std::string instead;
  // What could not be parsed with confidence (empty when everything was), e.g.
  // "sh -c text: unterminated single quote at byte 12". Set on allowed decisions too.
  std::vector<std::string> notes;
};

// A built-in rule, for documentation and tests.
struct BuiltinRule {
  std::string_view name;
  std::string_view reason;
  std::string_view instead;
};
std::span<const BuiltinRule> BuiltinRules();

class Policy {
 public:
  // The built-in rules plus the spec's (spec::Validate has checked them; a pattern that is
  // still invalid is InvalidArgument naming its field, "commandPolicy.deny[0].argv[1]: ...").
  static absl::StatusOr<Policy> Create(const spec::CommandPolicy& spec);

  // Allowed, or the first rule that refuses `argv` (rules in order: pipe-to-shell, then for
  // each command and each wrapper level privilege-escalation, the spec's rules, installs).
  Decision Check(const std::vector<std::string>& argv) const;

  struct Rules;  // compiled spec rules; defined in policy.cc

 private:
  explicit Policy(std::shared_ptr<const Rules> rules) : rules_(std::move(rules)) {}
  std::shared_ptr<const Rules> rules_;
};

// The result of a command the policy refused, which never ran: classification POLICY_BLOCKED,
// exit code 126, a violation of kind kCommandPolicyViolation naming the rule (data: rule,
// matched, command, reason, instead, notes), failure kPolicyBlocked with the rule as its
// detail, and the report (command/report.h) telling the agent what was refused and what to do
// instead. `decision` must be a refusal. The command line is quoted through `redactor` (the
// run's secret values and detectors) wherever it appears. The caller sets command_id.
CommandResult BlockedResult(const CommandSpec& command, const Decision& decision,
                            const Redactor& redactor);

}  // namespace airlock::cmdpolicy

#endif  // AIRLOCK_CMDPOLICY_POLICY_H_
