// Reading, writing and explaining SandboxSpecs (JSON or YAML; docs/spec.md is the reference).
//
// Parsing runs in four steps and reports every problem of the last step it reaches at once:
//   1. read the text (bounded: 1 MiB, 32 levels, 100000 values after YAML alias expansion;
//      duplicate keys refused);
//   2. decode into SandboxSpec (unknown fields, wrong types, bad enum names are errors; absent
//      fields keep their defaults);
//   3. derive from the risk class what the caller left out (level, network profile, approval;
//      spec/risk.h), then the runtime from the level when absent;
//   4. Validate (spec/validate.h), which also holds the spec to its risk class.
// Steps 2-4 all run, so a document with a typo and a bad value reports both. Errors are
// InvalidArgument with one "path: problem" line per problem, e.g.
//   resources.memoryMb: must be > 0
//   filesystem.mounts[2].target: must not be on or under /proc (reserved)
//
// Untrusted input is expected here: nothing throws, nothing recurses without bound, and the
// readers do not trust the document's size or shape. Thread-safe (no shared state).
#ifndef AIRLOCK_SPEC_PARSE_H_
#define AIRLOCK_SPEC_PARSE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "spec/field_error.h"
#include "spec/risk.h"
#include "spec/sandbox_spec.h"
#include "spec/validate.h"

namespace airlock::spec {

enum class Format {
  kAuto,  // JSON when the first non-blank character is '{', YAML otherwise
  kJson,
  kYaml,
};

struct ParseOptions {
  HostLevels host;  // what a risk class may derive on this host (see spec/risk.h)
};

// The largest spec text accepted (1 MiB).
inline constexpr size_t kMaxSpecBytes = 1 << 20;

// Parses, derives and validates a spec written as JSON or YAML.
absl::StatusOr<SandboxSpec> ParseSpec(std::string_view text, Format format,
                                      const ParseOptions& options);

// Steps 2-4 on a JSON document: what the CLI uses after merging its flags (--level, --memory,
// --network...) into the document, so flags get the same checks and risk tightening as the file.
// A field is "set by the caller" when its key is present in `doc`.
absl::StatusOr<SandboxSpec> ParseSpecJson(const nlohmann::json& doc, const ParseOptions& options);

// ParseSpec on a file; the format comes from the extension (.json, .yaml, .yml) or, for any
// other name, from the content. Every error line starts with the path: "spec.yaml: level: ...".
absl::StatusOr<SandboxSpec> LoadSpecFile(const std::string& path, const ParseOptions& options);

// Step 1 alone, for callers that edit the document before ParseSpecJson (the CLI merging its
// flags): the JSON document of a spec text or file, with the same limits and errors as above.
absl::StatusOr<nlohmann::json> ReadSpecDocument(std::string_view text, Format format);
absl::StatusOr<nlohmann::json> LoadSpecDocument(const std::string& path);

// The effective spec with every field (camelCase keys, as in a spec file). ParseSpecJson of the
// result gives back an equal spec. riskClass is null when the spec has none.
nlohmann::json ToJson(const SandboxSpec& spec);
// One process.syscalls rule, as in a spec file.
nlohmann::json ToJson(const SyscallRule& rule);

// The effective spec for `airlock spec explain`: YAML with every field, preceded by comments
// that say what the risk class derived and what each isolation-relevant value means. The text
// parses back (ParseSpec with Format::kYaml) to an equal spec.
std::string ExplainSpec(const SandboxSpec& spec);

}  // namespace airlock::spec

#endif  // AIRLOCK_SPEC_PARSE_H_
