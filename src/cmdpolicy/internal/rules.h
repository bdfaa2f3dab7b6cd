// The built-in rules of the command policy, applied to one Level at a time (see levels.h).
// Private to src/cmdpolicy; the public catalogue is cmdpolicy::BuiltinRules().
#ifndef AIRLOCK_CMDPOLICY_INTERNAL_RULES_H_
#define AIRLOCK_CMDPOLICY_INTERNAL_RULES_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmdpolicy/internal/levels.h"

namespace airlock::cmdpolicy::internal {

struct Hit {
  std::string rule;                  // "system-package-install/apt"
  std::vector<std::string> matched;  // {"apt-get", "install"}
};

// Privilege escalation (sudo, doas, su, runuser, pkexec, run0) at this level.
std::optional<Hit> CheckPrivilege(const Level& level);

// System package managers, global and user installs at this level.
std::optional<Hit> CheckInstalls(const Level& level);

// The one-line reason and the advice of a built-in rule name ("" for unknown names).
std::string RuleReason(std::string_view rule);
std::string RuleInstead(std::string_view rule);

}  // namespace airlock::cmdpolicy::internal

#endif  // AIRLOCK_CMDPOLICY_INTERNAL_RULES_H_
