// The spec as a JSON document with its keys in field order, for renderings meant to be read.
#ifndef AIRLOCK_SPEC_INTERNAL_ENCODE_H_
#define AIRLOCK_SPEC_INTERNAL_ENCODE_H_

#include "nlohmann/json.hpp"
#include "spec/sandbox_spec.h"

namespace airlock::spec::internal {

// ToJson (spec/parse.h) with the keys in the order of SandboxSpec's fields.
nlohmann::ordered_json ToOrderedJson(const SandboxSpec& spec);

}  // namespace airlock::spec::internal

#endif  // AIRLOCK_SPEC_INTERNAL_ENCODE_H_
