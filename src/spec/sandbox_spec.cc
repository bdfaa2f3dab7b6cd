#include "spec/sandbox_spec.h"

#include "spec/internal/enum_names.h"

namespace airlock::spec {

// Levels are written as integers in a spec; these names are for messages and `spec explain`.
const char* ToString(Level level) {
  switch (level) {
    case Level::kInterp:
      return "interp";
    case Level::kBasic:
      return "basic";
    case Level::kHardened:
      return "hardened";
    case Level::kGvisor:
      return "gvisor";
    case Level::kMicroVm:
      return "microvm";
  }
  return "?";
}

const char* ToString(Runtime runtime) { return internal::NameOf(runtime); }
const char* ToString(RiskClass risk) { return internal::NameOf(risk); }
const char* ToString(NetworkProfile profile) { return internal::NameOf(profile); }
const char* ToString(ApprovalRequirement approval) { return internal::NameOf(approval); }
const char* ToString(MountMode mode) { return internal::NameOf(mode); }
const char* ToString(CacheMode mode) { return internal::NameOf(mode); }
const char* ToString(SupervisorMode mode) { return internal::NameOf(mode); }
const char* ToString(OutputLimitAction action) { return internal::NameOf(action); }

}  // namespace airlock::spec
