// JSON document -> SandboxSpec, field by field, collecting every problem instead of stopping at
// the first: unknown fields, wrong types (naming expected and actual type), enum values outside
// their names, integers outside their type, strings with NUL or invalid UTF-8.
#ifndef AIRLOCK_SPEC_INTERNAL_DECODE_H_
#define AIRLOCK_SPEC_INTERNAL_DECODE_H_

#include <vector>

#include "nlohmann/json.hpp"
#include "spec/field_error.h"
#include "spec/sandbox_spec.h"

namespace airlock::spec::internal {

// Fills `spec` (normally default-constructed) from `doc`; a field with a problem keeps the value
// it had and adds one FieldError to `errors`. Semantic checks (ranges, paths, cross-field rules)
// are Validate's.
void DecodeSpec(const nlohmann::json& doc, SandboxSpec* spec, std::vector<FieldError>* errors);

// The type of `value` as messages name it: null, boolean, integer, number, string, array, object.
const char* JsonTypeName(const nlohmann::json& value);

}  // namespace airlock::spec::internal

#endif  // AIRLOCK_SPEC_INTERNAL_DECODE_H_
