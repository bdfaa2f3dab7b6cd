// libFuzzer target for the command policy's shell parser. Any input must parse without a crash,
// a hang or unbounded problems; a parse without problems must survive the quoting round trip
// (shell_roundtrip.h); and the policy must decide on the input as `sh -c` text and on the input
// split at NUL bytes as an argv, consistently (refused exactly when a rule is named).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cmdpolicy/internal/shell.h"
#include "cmdpolicy/internal/shell_roundtrip.h"
#include "cmdpolicy/policy.h"

namespace {

using airlock::cmdpolicy::Decision;
using airlock::cmdpolicy::Policy;
namespace internal = airlock::cmdpolicy::internal;

[[noreturn]] void Fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "shell_fuzz: %s\ninput: %.*s\n", what, static_cast<int>(input.size()),
               input.data());
  std::abort();
}

const Policy& ThePolicy() {
  static const Policy* policy = [] {
    airlock::spec::CommandPolicy spec;
    spec.strict_shell = true;
    spec.deny = {{"terraform", {"terraform ** apply"}, ""}};
    absl::StatusOr<Policy> p = Policy::Create(spec);
    if (!p.ok()) std::abort();
    return new Policy(*p);
  }();
  return *policy;
}

void CheckDecision(const Decision& d, std::string_view input) {
  if (d.allowed != d.rule.empty()) Fail("allowed disagrees with the rule", input);
  if (!d.allowed && d.reason.empty()) Fail("a refusal without a reason", input);
  if (d.notes.size() > 8) Fail("unbounded notes", input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  internal::ShellParse parse = internal::ParseShell(text);
  if (parse.problems.size() > 16) Fail("unbounded problems", text);
  if (parse.problems.empty()) {
    const auto commands = internal::TopLevelCommands(parse.script);
    internal::ShellParse again = internal::ParseShell(internal::Requote(commands));
    if (!again.problems.empty()) Fail("quoted commands do not parse", text);
    if (internal::TopLevelCommands(again.script) != commands) {
      Fail("quoted commands parse to other words", text);
    }
  }
  CheckDecision(ThePolicy().Check({"sh", "-c", std::string(text)}), text);
  std::vector<std::string> argv(1);
  for (char c : text) {
    if (c == '\0') {
      argv.emplace_back();
    } else {
      argv.back().push_back(c);
    }
  }
  CheckDecision(ThePolicy().Check(argv), text);
  return 0;
}
