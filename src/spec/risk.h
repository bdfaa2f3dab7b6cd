// Risk classes R0-R5: what each one derives (isolation level, network profile, approval) and the
// rule that a caller may only tighten what a risk class derives, never loosen it.
//
// | class | task                     | level                    | network           | approval  |
// | ----- | ------------------------ | ------------------------ | ----------------- | --------- |
// | R0    | mechanical read-only     | 1                        | none              | none      |
// | R1    | safe internal patch      | 2                        | none              | none      |
// | R2    | dependency upgrade       | 2                        | dependency-egress | beforePr  |
// | R3    | migration of many files  | 2 (3 when gVisor exists) | restricted-http   | none      |
// | R4    | untrusted repository     | 3 or 4 (at least 3)      | none              | mandatory |
// | R5    | secret-bearing operation | 3 or 4 (at least 3)      | none, broker only | security  |
//
// Strictness orders (strictest first):
//   level:    4 > 3 > 2 > 1 > 0 (a higher level is a stronger boundary)
//   network:  none < dependency-egress < repo-egress < restricted-http < open, by how much may
//             leave: nothing; fetches from package registries; fetch and push to the source host (a
//             write path out); caller-named hosts, methods and paths; anything public.
//   approval: none < beforePr < mandatory < security
//
// "Broker only" (R5) is the profile none: the sandbox has no network at all, and the only way out
// is the control plane's brokered channel (LLM proxy, presigned URLs, secret leases delivered as
// read-only files), which is not a network profile and exists at every level. It is the tightest
// network setting; R5 differs from R4 in that it may hold secret leases.
//
// Other rules tied to a risk class (checked by CheckRiskClass, hence by Validate):
//   - secret leases need R5 when a risk class is set;
//   - R0 (read-only): the workspace is read-only (filesystem.workspaceMode derives ro, and rw
//     is refused) and every filesystem.mounts entry is mode ro;
//   - R4, R5: cache.mode rw is refused (untrusted code could poison a cache later runs trust).
//
// Pure functions over constant data; thread-safe.
#ifndef AIRLOCK_SPEC_RISK_H_
#define AIRLOCK_SPEC_RISK_H_

#include <optional>
#include <span>
#include <vector>

#include "spec/field_error.h"
#include "spec/sandbox_spec.h"

namespace airlock::spec {

// Which upper levels the host offers. Used only to derive a level from a risk class ("3 when
// available", "3 or 4"); a spec that names a level explicitly is checked against the host by the
// backend that runs it. For a host-independent check, set both.
struct HostLevels {
  bool gvisor = false;
  bool microvm = false;
};

// How a risk class picks its level.
enum class LevelChoice {
  kFixed,       // min_level
  kUpperIfAny,  // 3 when gVisor is available, else min_level (R3)
  kUpperOnly,   // 3 when gVisor is available, else 4 when a micro-VM is, else an error (R4, R5)
};

struct RiskRule {
  RiskClass risk_class;
  const char* task;  // "dependency upgrade"
  Level min_level;   // the weakest level allowed
  LevelChoice level_choice;
  NetworkProfile network;        // the derived profile, and the loosest allowed
  ApprovalRequirement approval;  // the derived approval, and the weakest allowed
  bool broker_only;              // network none, outside calls only through the control plane
};

// The table above, one row per class in order R0..R5.
std::span<const RiskRule> RiskTable();
const RiskRule& RuleFor(RiskClass risk);

// Position in the strictness orders above: 0 is the strictest network (none) and the weakest
// approval (none).
int NetworkLooseness(NetworkProfile profile);
int ApprovalStrength(ApprovalRequirement approval);

// The level `risk` derives on `host`; FieldError at "riskClass" when the host offers no level
// the class accepts (R4/R5 without gVisor or a micro-VM).
std::optional<Level> DeriveLevel(RiskClass risk, const HostLevels& host, FieldError* error);

// Which of the risk-governed fields the caller wrote (in the document or through flags).
struct ExplicitFields {
  bool level = false;
  bool network_profile = false;
  bool approval = false;
  bool workspace_mode = false;
};

// Fills the fields of `spec` that `explicit_fields` says the caller did not set with what
// spec->risk_class derives on `host`. Does nothing without a risk class. Explicit values are left
// for CheckRiskClass to judge. Returns the derivation errors (see DeriveLevel).
std::vector<FieldError> ApplyRiskClass(const ExplicitFields& explicit_fields,
                                       const HostLevels& host, SandboxSpec* spec);

// Every way `spec` is looser than its risk class allows (empty without a risk class), e.g.
// {"level", "1 is weaker than risk class R2 allows (minimum 2)"}.
std::vector<FieldError> CheckRiskClass(const SandboxSpec& spec);

}  // namespace airlock::spec

#endif  // AIRLOCK_SPEC_RISK_H_
