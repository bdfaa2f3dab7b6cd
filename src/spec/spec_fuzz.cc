// libFuzzer target for the spec parser. Any input must either parse or fail with
// InvalidArgument (never crash, hang or throw), and a spec that parses must come back unchanged
// through ToJson + ParseSpecJson and through ExplainSpec + ParseSpec.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "spec/parse.h"

namespace {

using airlock::spec::Format;
using airlock::spec::ParseOptions;
using airlock::spec::SandboxSpec;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "spec_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

void Check(std::string_view text, Format format, const ParseOptions& options) {
  absl::StatusOr<SandboxSpec> spec = airlock::spec::ParseSpec(text, format, options);
  if (!spec.ok()) {
    if (spec.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("parse failed with a code other than InvalidArgument", spec.status().ToString());
    }
    return;
  }
  nlohmann::json doc = airlock::spec::ToJson(*spec);
  absl::StatusOr<SandboxSpec> from_json = airlock::spec::ParseSpecJson(doc, options);
  if (!from_json.ok()) Fail("ToJson does not parse back", from_json.status().ToString());
  if (*from_json != *spec) Fail("ToJson does not round-trip", doc.dump());
  std::string explained = airlock::spec::ExplainSpec(*spec);
  absl::StatusOr<SandboxSpec> from_yaml =
      airlock::spec::ParseSpec(explained, Format::kYaml, options);
  if (!from_yaml.ok()) Fail("ExplainSpec does not parse back", from_yaml.status().ToString());
  if (*from_yaml != *spec) Fail("ExplainSpec does not round-trip", explained);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // The format the text looks like, on a host with every level; then YAML on a host with none
  // (JSON is mostly YAML, so JSON-looking inputs reach the YAML reader too).
  Check(text, Format::kAuto, ParseOptions{{.gvisor = true, .microvm = true}});
  Check(text, Format::kYaml, ParseOptions{});
  return 0;
}
