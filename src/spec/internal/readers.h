// Strict readers that turn spec text into a JSON document for the decoder. Both refuse duplicate
// keys, nesting deeper than kMaxDepth and documents of more than kMaxNodes values (for YAML,
// counted after alias expansion, so an alias bomb stops early); neither throws.
#ifndef AIRLOCK_SPEC_INTERNAL_READERS_H_
#define AIRLOCK_SPEC_INTERNAL_READERS_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace airlock::spec::internal {

// Limits on the shape of a document (its size is bounded by the caller, see kMaxSpecBytes).
inline constexpr size_t kMaxDepth = 32;       // nested objects and arrays
inline constexpr size_t kMaxNodes = 100'000;  // values, after YAML alias expansion

// RFC 8259 JSON (no comments). Errors are InvalidArgument with one "path: problem" line, e.g.
// `filesystem.mounts[0].target: duplicate key`, or "JSON parse error at line 1, column 9: ...".
absl::StatusOr<nlohmann::json> ReadJson(std::string_view text);

// One YAML document, typed by the YAML 1.2 core schema: plain scalars become null (~, null,
// empty), booleans (true/false in three spellings), integers (decimal, 0x, 0o), floats (1.5,
// 1e3, .inf, .nan) or strings; quoted and block scalars always stay strings; "yes"/"no"/"on"/"off"
// stay strings. Tags !!str, !!int, !!float, !!bool, !!null, !!map, !!seq are honoured, others
// are errors; keys must be scalars; strings must be valid UTF-8. More than one document is an
// error; so is an empty one.
absl::StatusOr<nlohmann::json> ReadYaml(std::string_view text);

// What a plain (unquoted, untagged) YAML scalar means under the rules of ReadYaml: null, boolean,
// integer, float or, failing those, the string itself.
nlohmann::json ResolvePlainYamlScalar(const std::string& text);

}  // namespace airlock::spec::internal

#endif  // AIRLOCK_SPEC_INTERNAL_READERS_H_
