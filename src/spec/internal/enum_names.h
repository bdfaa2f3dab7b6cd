// The names of the spec's enums as written in JSON/YAML, as data: one table per enum, shared by
// ToString, the decoder (name -> value) and error messages (the accepted names).
#ifndef AIRLOCK_SPEC_INTERNAL_ENUM_NAMES_H_
#define AIRLOCK_SPEC_INTERNAL_ENUM_NAMES_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "spec/sandbox_spec.h"

namespace airlock::spec::internal {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// Specialised below for every enum of the spec that is written as a string.
template <typename E>
struct EnumTable;

template <>
struct EnumTable<Runtime> {
  static constexpr EnumName<Runtime> kNames[] = {
      {Runtime::kInterp, "interp"}, {Runtime::kNative, "native"},   {Runtime::kTraced, "traced"},
      {Runtime::kGvisor, "gvisor"}, {Runtime::kMicroVm, "microvm"},
  };
};

template <>
struct EnumTable<RiskClass> {
  static constexpr EnumName<RiskClass> kNames[] = {
      {RiskClass::kR0, "R0"}, {RiskClass::kR1, "R1"}, {RiskClass::kR2, "R2"},
      {RiskClass::kR3, "R3"}, {RiskClass::kR4, "R4"}, {RiskClass::kR5, "R5"},
  };
};

template <>
struct EnumTable<NetworkProfile> {
  static constexpr EnumName<NetworkProfile> kNames[] = {
      {NetworkProfile::kNone, "none"},
      {NetworkProfile::kDependencyEgress, "dependency-egress"},
      {NetworkProfile::kRepoEgress, "repo-egress"},
      {NetworkProfile::kRestrictedHttp, "restricted-http"},
      {NetworkProfile::kOpen, "open"},
  };
};

template <>
struct EnumTable<ApprovalRequirement> {
  static constexpr EnumName<ApprovalRequirement> kNames[] = {
      {ApprovalRequirement::kNone, "none"},
      {ApprovalRequirement::kBeforePr, "beforePr"},
      {ApprovalRequirement::kMandatory, "mandatory"},
      {ApprovalRequirement::kSecurity, "security"},
  };
};

template <>
struct EnumTable<MountMode> {
  static constexpr EnumName<MountMode> kNames[] = {
      {MountMode::kReadOnly, "ro"},
      {MountMode::kReadWrite, "rw"},
  };
};

template <>
struct EnumTable<CacheMode> {
  static constexpr EnumName<CacheMode> kNames[] = {
      {CacheMode::kNone, "none"},
      {CacheMode::kReadOnly, "ro"},
      {CacheMode::kReadWrite, "rw"},
  };
};

template <>
struct EnumTable<SupervisorMode> {
  static constexpr EnumName<SupervisorMode> kNames[] = {
      {SupervisorMode::kNone, "none"},
      {SupervisorMode::kNotify, "notify"},
      {SupervisorMode::kPtrace, "ptrace"},
  };
};

template <>
struct EnumTable<OutputLimitAction> {
  static constexpr EnumName<OutputLimitAction> kNames[] = {
      {OutputLimitAction::kTruncate, "truncate"},
      {OutputLimitAction::kKill, "kill"},
  };
};

template <typename E>
constexpr std::span<const EnumName<E>> Names() {
  return EnumTable<E>::kNames;
}

// The name of `value`, or "?" for a value outside the enum (a cast integer).
template <typename E>
const char* NameOf(E value) {
  for (const EnumName<E>& entry : Names<E>()) {
    if (entry.value == value) return entry.name;
  }
  return "?";
}

// The value named `name` (case-sensitive), if any.
template <typename E>
std::optional<E> FromName(std::string_view name) {
  for (const EnumName<E>& entry : Names<E>()) {
    if (name == entry.name) return entry.value;
  }
  return std::nullopt;
}

// "none, ro, rw": the accepted names, for error messages.
template <typename E>
std::string JoinedNames() {
  std::string out;
  for (const EnumName<E>& entry : Names<E>()) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

}  // namespace airlock::spec::internal

#endif  // AIRLOCK_SPEC_INTERNAL_ENUM_NAMES_H_
