#include "command/command.h"

#include "common/status.h"
#include "fmt/format.h"

namespace airlock {
namespace {

constexpr std::pair<Classification, const char*> kClassNames[] = {
    {Classification::kOk, "OK"},
    {Classification::kExitNonzero, "EXIT_NONZERO"},
    {Classification::kCommandTimeout, "COMMAND_TIMEOUT"},
    {Classification::kResourceExhaustedMemory, "RESOURCE_EXHAUSTED_MEMORY"},
    {Classification::kResourceExhaustedPids, "RESOURCE_EXHAUSTED_PIDS"},
    {Classification::kOutputLimit, "OUTPUT_LIMIT"},
    {Classification::kPolicyBlocked, "POLICY_BLOCKED"},
    {Classification::kNetworkRequired, "NETWORK_REQUIRED"},
    {Classification::kSandboxError, "SANDBOX_ERROR"},
};

constexpr std::pair<FailureKind, const char*> kFailureNames[] = {
    {FailureKind::kNone, "none"},
    {FailureKind::kCompilationError, "compilation_error"},
    {FailureKind::kTestFailure, "test_failure"},
    {FailureKind::kMissingDependency, "missing_dependency"},
    {FailureKind::kNetworkRequired, "network_required"},
    {FailureKind::kOutOfMemory, "out_of_memory"},
    {FailureKind::kTimeout, "timeout"},
    {FailureKind::kPolicyBlocked, "policy_blocked"},
    {FailureKind::kCommandNotFound, "command_not_found"},
    {FailureKind::kUnknown, "unknown"},
};

std::optional<FailureKind> FailureFromString(std::string_view s) {
  for (const auto& [k, name] : kFailureNames) {
    if (s == name) return k;
  }
  return std::nullopt;
}

}  // namespace

const char* ToString(Classification c) {
  for (const auto& [k, name] : kClassNames) {
    if (k == c) return name;
  }
  return "SANDBOX_ERROR";
}

std::optional<Classification> ClassificationFromString(std::string_view s) {
  for (const auto& [k, name] : kClassNames) {
    if (s == name) return k;
  }
  return std::nullopt;
}

const char* ToString(FailureKind k) {
  for (const auto& [kind, name] : kFailureNames) {
    if (kind == k) return name;
  }
  return "unknown";
}

nlohmann::json ToJson(const CommandResult& r) {
  nlohmann::json violations = nlohmann::json::array();
  for (const Violation& v : r.violations) {
    violations.push_back({{"kind", v.kind}, {"detail", v.detail}, {"data", v.data}});
  }
  nlohmann::json j = {
      {"command_id", r.command_id.value()},
      {"classification", ToString(r.classification)},
      {"exit_code", r.exit_code},
      {"signal", r.signal},
      {"duration_ms", r.duration_ms},
      {"timed_out", r.timed_out},
      {"truncated", r.truncated},
      {"stdout_bytes", r.stdout_bytes},
      {"stderr_bytes", r.stderr_bytes},
      {"stdout_preview", r.stdout_preview},
      {"stderr_preview", r.stderr_preview},
      {"stdout_sha256", r.stdout_sha256},
      {"stderr_sha256", r.stderr_sha256},
      {"raw_log", r.raw_log},
      {"usage",
       {{"cpu_user_ms", r.usage.cpu_user_ms},
        {"cpu_system_ms", r.usage.cpu_system_ms},
        {"memory_peak_bytes", r.usage.memory_peak_bytes},
        {"pids_peak", r.usage.pids_peak},
        {"io_read_bytes", r.usage.io_read_bytes},
        {"io_write_bytes", r.usage.io_write_bytes},
        {"oom_kills", r.usage.oom_kills}}},
      {"violations", std::move(violations)},
      {"degraded", r.degraded},
      {"failure", ToString(r.failure)},
      {"failure_detail", r.failure_detail},
      {"key_lines", r.key_lines},
      {"report", r.report},
  };
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.syscalls.supervisor.empty()) j["syscalls"] = ToJson(r.syscalls);
  return j;
}

absl::StatusOr<CommandResult> CommandResultFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("command result: not a JSON object");
  CommandResult r;
  try {
    r.command_id = CommandId(j.at("command_id").get<std::string>());
    auto c = ClassificationFromString(j.at("classification").get<std::string>());
    if (!c) return InvalidArgument("command result: unknown classification");
    r.classification = *c;
    r.exit_code = j.at("exit_code").get<int>();
    r.signal = j.value("signal", 0);
    r.duration_ms = j.at("duration_ms").get<int64_t>();
    r.timed_out = j.value("timed_out", false);
    r.truncated = j.value("truncated", false);
    r.stdout_bytes = j.value("stdout_bytes", int64_t{0});
    r.stderr_bytes = j.value("stderr_bytes", int64_t{0});
    r.stdout_preview = j.value("stdout_preview", "");
    r.stderr_preview = j.value("stderr_preview", "");
    r.stdout_sha256 = j.value("stdout_sha256", "");
    r.stderr_sha256 = j.value("stderr_sha256", "");
    r.raw_log = j.value("raw_log", "");
    if (j.contains("usage")) {
      const auto& u = j.at("usage");
      r.usage.cpu_user_ms = u.value("cpu_user_ms", int64_t{0});
      r.usage.cpu_system_ms = u.value("cpu_system_ms", int64_t{0});
      r.usage.memory_peak_bytes = u.value("memory_peak_bytes", int64_t{0});
      r.usage.pids_peak = u.value("pids_peak", int64_t{0});
      r.usage.io_read_bytes = u.value("io_read_bytes", int64_t{0});
      r.usage.io_write_bytes = u.value("io_write_bytes", int64_t{0});
      r.usage.oom_kills = u.value("oom_kills", int64_t{0});
    }
    for (const auto& v : j.value("violations", nlohmann::json::array())) {
      r.violations.push_back(
          {v.value("kind", ""), v.value("detail", ""), v.value("data", nlohmann::json::object())});
    }
    r.degraded = j.value("degraded", std::vector<std::string>{});
    r.failure = FailureFromString(j.value("failure", "none")).value_or(FailureKind::kUnknown);
    r.failure_detail = j.value("failure_detail", "");
    r.key_lines = j.value("key_lines", std::vector<std::string>{});
    r.report = j.value("report", "");
    r.error = j.value("error", "");
    if (j.contains("syscalls")) {
      ASSIGN_OR_RETURN(r.syscalls, SyscallReportFromJson(j.at("syscalls")), "command result");
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(fmt::format("command result: {}", e.what()));
  }
  return r;
}

}  // namespace airlock
