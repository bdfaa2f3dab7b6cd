#include "spec/risk.h"

#include <string>

#include "fmt/format.h"

namespace airlock::spec {
namespace {

constexpr RiskRule kRiskTable[] = {
    {RiskClass::kR0, "mechanical read-only", Level::kBasic, LevelChoice::kFixed,
     NetworkProfile::kNone, ApprovalRequirement::kNone, false},
    {RiskClass::kR1, "safe internal patch", Level::kHardened, LevelChoice::kFixed,
     NetworkProfile::kNone, ApprovalRequirement::kNone, false},
    {RiskClass::kR2, "dependency upgrade", Level::kHardened, LevelChoice::kFixed,
     NetworkProfile::kDependencyEgress, ApprovalRequirement::kBeforePr, false},
    {RiskClass::kR3, "migration of many files", Level::kHardened, LevelChoice::kUpperIfAny,
     NetworkProfile::kRestrictedHttp, ApprovalRequirement::kNone, false},
    {RiskClass::kR4, "untrusted repository", Level::kGvisor, LevelChoice::kUpperOnly,
     NetworkProfile::kNone, ApprovalRequirement::kMandatory, false},
    {RiskClass::kR5, "secret-bearing operation", Level::kGvisor, LevelChoice::kUpperOnly,
     NetworkProfile::kNone, ApprovalRequirement::kSecurity, true},
};

}  // namespace

std::span<const RiskRule> RiskTable() { return kRiskTable; }

const RiskRule& RuleFor(RiskClass risk) {
  for (const RiskRule& rule : kRiskTable) {
    if (rule.risk_class == risk) return rule;
  }
  // Only reachable with a value cast from outside the enum; the strictest row is the safe answer.
  return kRiskTable[std::size(kRiskTable) - 1];
}

int NetworkLooseness(NetworkProfile profile) {
  switch (profile) {
    case NetworkProfile::kNone:
      return 0;
    case NetworkProfile::kDependencyEgress:
      return 1;
    case NetworkProfile::kRepoEgress:
      return 2;
    case NetworkProfile::kRestrictedHttp:
      return 3;
    case NetworkProfile::kOpen:
      return 4;
  }
  return 4;
}

int ApprovalStrength(ApprovalRequirement approval) {
  switch (approval) {
    case ApprovalRequirement::kNone:
      return 0;
    case ApprovalRequirement::kBeforePr:
      return 1;
    case ApprovalRequirement::kMandatory:
      return 2;
    case ApprovalRequirement::kSecurity:
      return 3;
  }
  return 0;
}

std::optional<Level> DeriveLevel(RiskClass risk, const HostLevels& host, FieldError* error) {
  const RiskRule& rule = RuleFor(risk);
  switch (rule.level_choice) {
    case LevelChoice::kFixed:
      return rule.min_level;
    case LevelChoice::kUpperIfAny:
      return host.gvisor ? Level::kGvisor : rule.min_level;
    case LevelChoice::kUpperOnly:
      if (host.gvisor) return Level::kGvisor;
      if (host.microvm) return Level::kMicroVm;
      if (error != nullptr) {
        *error = {"riskClass",
                  fmt::format("{} ({}) needs level 3 (gvisor) or 4 (microvm) and this host offers "
                              "neither; it never runs weaker",
                              ToString(risk), rule.task)};
      }
      return std::nullopt;
  }
  return std::nullopt;
}

std::vector<FieldError> ApplyRiskClass(const ExplicitFields& explicit_fields,
                                       const HostLevels& host, SandboxSpec* spec) {
  std::vector<FieldError> errors;
  if (!spec->risk_class.has_value()) return errors;
  const RiskRule& rule = RuleFor(*spec->risk_class);
  if (!explicit_fields.level) {
    FieldError error;
    std::optional<Level> level = DeriveLevel(rule.risk_class, host, &error);
    if (level.has_value()) {
      spec->level = *level;
    } else {
      // The spec is refused; its minimum keeps validation from repeating the problem.
      spec->level = rule.min_level;
      errors.push_back(std::move(error));
    }
  }
  if (!explicit_fields.network_profile) spec->network.profile = rule.network;
  if (!explicit_fields.approval) spec->approval = rule.approval;
  if (!explicit_fields.workspace_mode && rule.risk_class == RiskClass::kR0) {
    spec->filesystem.workspace_mode = MountMode::kReadOnly;
  }
  return errors;
}

std::vector<FieldError> CheckRiskClass(const SandboxSpec& spec) {
  std::vector<FieldError> errors;
  if (!spec.risk_class.has_value()) return errors;
  const RiskRule& rule = RuleFor(*spec.risk_class);
  const char* risk = ToString(rule.risk_class);

  if (static_cast<int>(spec.level) < static_cast<int>(rule.min_level)) {
    errors.push_back({"level", fmt::format("{} is weaker than risk class {} allows (minimum {})",
                                           static_cast<int>(spec.level), risk,
                                           static_cast<int>(rule.min_level))});
  }
  if (NetworkLooseness(spec.network.profile) > NetworkLooseness(rule.network)) {
    errors.push_back({"network.profile",
                      fmt::format("{} is looser than risk class {} allows (at most {})",
                                  ToString(spec.network.profile), risk, ToString(rule.network))});
  }
  if (ApprovalStrength(spec.approval) < ApprovalStrength(rule.approval)) {
    errors.push_back(
        {"approval", fmt::format("{} is weaker than risk class {} requires (at least {})",
                                 ToString(spec.approval), risk, ToString(rule.approval))});
  }
  if (!spec.secrets.leases.empty() && rule.risk_class != RiskClass::kR5) {
    errors.push_back({"secrets.leases",
                      fmt::format("secret leases need risk class R5 (secret-bearing operation), "
                                  "not {}",
                                  risk)});
  }
  if (rule.risk_class == RiskClass::kR0) {
    if (spec.filesystem.workspace_mode == MountMode::kReadWrite) {
      errors.push_back(
          {"filesystem.workspaceMode", "rw is not allowed with risk class R0 (read-only)"});
    }
    for (size_t i = 0; i < spec.filesystem.mounts.size(); ++i) {
      if (spec.filesystem.mounts[i].mode == MountMode::kReadWrite) {
        errors.push_back({fmt::format("filesystem.mounts[{}].mode", i),
                          "rw is not allowed with risk class R0 (read-only)"});
      }
    }
  }
  if ((rule.risk_class == RiskClass::kR4 || rule.risk_class == RiskClass::kR5) &&
      spec.cache.mode == CacheMode::kReadWrite) {
    errors.push_back(
        {"cache.mode", fmt::format("rw is not allowed with risk class {} (the code could poison a "
                                   "cache that later runs trust); use ro or none",
                                   risk)});
  }
  return errors;
}

}  // namespace airlock::spec
