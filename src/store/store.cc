#include "store/store.h"

#include <array>
#include <utility>

namespace airlock::store {
namespace {

template <typename Enum, size_t N>
std::string_view NameOf(const std::array<std::pair<Enum, std::string_view>, N>& names, Enum e) {
  for (const auto& [value, name] : names) {
    if (value == e) return name;
  }
  return "unknown";
}

template <typename Enum, size_t N>
std::optional<Enum> ValueOf(const std::array<std::pair<Enum, std::string_view>, N>& names,
                            std::string_view name) {
  for (const auto& [value, n] : names) {
    if (n == name) return value;
  }
  return std::nullopt;
}

using S = SandboxState;
constexpr std::array<std::pair<S, std::string_view>, 10> kStateNames = {{
    {S::kAllocating, "Allocating"},
    {S::kPreparingImage, "PreparingImage"},
    {S::kMountingWorkspace, "MountingWorkspace"},
    {S::kStarting, "Starting"},
    {S::kRunning, "Running"},
    {S::kPaused, "Paused"},
    {S::kCollectingArtifacts, "CollectingArtifacts"},
    {S::kCleaning, "Cleaning"},
    {S::kGone, "Gone"},
    {S::kFailed, "Failed"},
}};

using K = AuditKind;
constexpr std::array<std::pair<K, std::string_view>, 13> kKindNames = {{
    {K::kStateTransition, "state_transition"},
    {K::kExec, "exec"},
    {K::kFileWrite, "file_write"},
    {K::kArtifactReleased, "artifact_released"},
    {K::kArtifactQuarantined, "artifact_quarantined"},
    {K::kPolicyBlocked, "policy_blocked"},
    {K::kCleanupFailed, "cleanup_failed"},
    {K::kNetworkPolicyChanged, "network_policy_changed"},
    {K::kTtlExtended, "ttl_extended"},
    {K::kSandboxAdopted, "sandbox_adopted"},
    {K::kSandboxClaimed, "sandbox_claimed"},
    {K::kApiKeyCreated, "api_key_created"},
    {K::kApiKeyRevoked, "api_key_revoked"},
}};

constexpr std::array<std::pair<CommandState, std::string_view>, 3> kCommandStateNames = {{
    {CommandState::kRunning, "running"},
    {CommandState::kFinished, "finished"},
    {CommandState::kKilled, "killed"},
}};

constexpr std::array<std::pair<ArtifactStatus, std::string_view>, 2> kArtifactStatusNames = {{
    {ArtifactStatus::kReleased, "released"},
    {ArtifactStatus::kQuarantined, "quarantined"},
}};

bool BeforeRunning(SandboxState s) {
  return s == S::kAllocating || s == S::kPreparingImage || s == S::kMountingWorkspace ||
         s == S::kStarting;
}

}  // namespace

std::string_view ToString(SandboxState state) { return NameOf(kStateNames, state); }
std::optional<SandboxState> SandboxStateFromString(std::string_view name) {
  return ValueOf(kStateNames, name);
}

std::string_view ToString(AuditKind kind) { return NameOf(kKindNames, kind); }
std::optional<AuditKind> AuditKindFromString(std::string_view name) {
  return ValueOf(kKindNames, name);
}

std::string_view ToString(CommandState state) { return NameOf(kCommandStateNames, state); }
std::optional<CommandState> CommandStateFromString(std::string_view name) {
  return ValueOf(kCommandStateNames, name);
}

std::string_view ToString(ArtifactStatus status) { return NameOf(kArtifactStatusNames, status); }
std::optional<ArtifactStatus> ArtifactStatusFromString(std::string_view name) {
  return ValueOf(kArtifactStatusNames, name);
}

bool IsTerminal(SandboxState state) { return state == S::kGone || state == S::kFailed; }

bool IsAllowedTransition(SandboxState from, SandboxState to) {
  if (IsTerminal(from) || from == to) return false;
  if (to == S::kCleaning) return true;
  if (to == S::kFailed) return BeforeRunning(from) || from == S::kCleaning;
  switch (from) {
    case S::kAllocating:
      return to == S::kPreparingImage;
    case S::kPreparingImage:
      return to == S::kMountingWorkspace;
    case S::kMountingWorkspace:
      return to == S::kStarting;
    case S::kStarting:
      return to == S::kRunning;
    case S::kRunning:
      return to == S::kPaused || to == S::kCollectingArtifacts;
    case S::kPaused:
      return to == S::kRunning || to == S::kCollectingArtifacts;
    case S::kCollectingArtifacts:
      return to == S::kRunning;
    case S::kCleaning:
      return to == S::kGone;
    case S::kGone:
    case S::kFailed:
      return false;
  }
  return false;
}

}  // namespace airlock::store
