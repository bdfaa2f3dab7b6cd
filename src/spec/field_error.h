// One problem found in a spec, located by its field path.
#ifndef AIRLOCK_SPEC_FIELD_ERROR_H_
#define AIRLOCK_SPEC_FIELD_ERROR_H_

#include <string>
#include <vector>

namespace airlock::spec {

// `path` names the field the way it is written in JSON/YAML: "resources.memoryMb",
// "filesystem.mounts[2].target", "env.PATH", `env["bad name"]`; empty for the document itself.
// `message` says what is wrong: "must be > 0".
struct FieldError {
  std::string path;
  std::string message;

  friend bool operator==(const FieldError&, const FieldError&) = default;
};

// "path: message" (just the message when the path is empty).
std::string ToString(const FieldError& error);

// Every error on its own line, in order; past `max_lines` errors the rest are counted in a last
// line ("... and 12 more problems").
std::string FormatFieldErrors(const std::vector<FieldError>& errors, size_t max_lines = 50);

}  // namespace airlock::spec

#endif  // AIRLOCK_SPEC_FIELD_ERROR_H_
