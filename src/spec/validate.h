// Semantic validation of a SandboxSpec: every rule of docs/spec.md, with the field path of each
// problem. Works on a typed spec from any source (parsed, built in code, merged from flags).
//
// Pure function; thread-safe.
#ifndef AIRLOCK_SPEC_VALIDATE_H_
#define AIRLOCK_SPEC_VALIDATE_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spec/field_error.h"
#include "spec/sandbox_spec.h"

namespace airlock::spec {

// Every problem of `spec`, in field order (empty when the spec is valid). Includes
// CheckRiskClass (spec/risk.h): a spec must be at least as tight as its risk class.
std::vector<FieldError> Validate(const SandboxSpec& spec);

// Why the absolute host path `source` may not be bind-mounted into a sandbox ("must not be the
// host's \"/\"", "must not be on or under /proc (...)"), or empty when it may. The engine asks
// again of the path a source resolves to when it is opened.
std::string HostSourceProblem(std::string_view source);

// The level a runtime runs at (interp 0, gvisor 3, microvm 4); nullopt for native and traced,
// which run levels 1 and 2.
std::optional<Level> LevelOfRuntime(Runtime runtime);

// The runtime a level derives when the spec names none: 0 interp, 1/2 native (traced when
// process.supervisor is not none), 3 gvisor, 4 microvm.
Runtime DeriveRuntime(Level level, SupervisorMode supervisor);

}  // namespace airlock::spec

#endif  // AIRLOCK_SPEC_VALIDATE_H_
