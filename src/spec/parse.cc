#include "spec/parse.h"

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"
#include "spec/internal/decode.h"
#include "spec/internal/encode.h"
#include "spec/internal/readers.h"

namespace airlock::spec {
namespace {

using nlohmann::json;

bool IsAtOrBelow(const std::string& path, const std::string& ancestor) {
  if (path.size() < ancestor.size() || path.compare(0, ancestor.size(), ancestor) != 0) {
    return false;
  }
  return path.size() == ancestor.size() || path[ancestor.size()] == '.' ||
         path[ancestor.size()] == '[';
}

// Validation errors about a field whose decoding already failed only repeat the problem with the
// field's default value; drop them.
void AppendUnlessDecodeFailed(std::vector<FieldError> more, size_t decode_errors,
                              std::vector<FieldError>* errors) {
  for (FieldError& error : more) {
    bool covered = false;
    for (size_t i = 0; i < decode_errors && !covered; ++i) {
      covered = IsAtOrBelow(error.path, (*errors)[i].path) && !(*errors)[i].path.empty();
    }
    if (!covered) errors->push_back(std::move(error));
  }
}

bool HasKey(const json& object, const char* key) {
  return object.is_object() && object.contains(key);
}

Format FormatOfText(std::string_view text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{' ? Format::kJson : Format::kYaml;
}

template <typename Json>
Json StringsToJson(const std::vector<std::string>& strings) {
  Json out = Json::array();
  for (const std::string& s : strings) out.push_back(s);
  return out;
}

template <typename Json>
Json SyscallRuleToJson(const SyscallRule& rule) {
  Json args = Json::array();
  for (const SyscallArgCondition& arg : rule.args) {
    args.push_back(
        {{"index", arg.index}, {"op", arg.op}, {"value", arg.value}, {"mask", arg.mask}});
  }
  return {{"names", StringsToJson<Json>(rule.names)},
          {"args", std::move(args)},
          {"action", rule.action}};
}

// Shared by ToJson (nlohmann::json, keys sorted) and ToOrderedJson (keys in struct order).
template <typename Json>
Json SpecToJson(const SandboxSpec& spec) {
  Json mounts = Json::array();
  for (const Mount& mount : spec.filesystem.mounts) {
    mounts.push_back(
        {{"source", mount.source}, {"target", mount.target}, {"mode", ToString(mount.mode)}});
  }
  Json tmpfs = Json::array();
  for (const Tmpfs& t : spec.filesystem.tmpfs) {
    tmpfs.push_back(
        {{"target", t.target}, {"sizeMb", t.size_mb}, {"inodes", t.inodes}, {"noexec", t.noexec}});
  }
  Json syscalls = Json::array();
  for (const SyscallRule& rule : spec.process.syscalls) {
    syscalls.push_back(SyscallRuleToJson<Json>(rule));
  }
  Json http_rules = Json::array();
  for (const HttpRule& rule : spec.network.http_rules) {
    http_rules.push_back({{"host", rule.host},
                          {"methods", StringsToJson<Json>(rule.methods)},
                          {"pathPrefixes", StringsToJson<Json>(rule.path_prefixes)}});
  }
  Json leases = Json::array();
  for (const SecretLease& lease : spec.secrets.leases) {
    leases.push_back({{"name", lease.name},
                      {"purpose", lease.purpose},
                      {"ttlSeconds", lease.ttl_seconds},
                      {"mountPath", lease.mount_path}});
  }
  Json env = Json::object();
  for (const auto& [name, value] : spec.env) env[name] = value;
  Json allow_binaries = Json::array();
  for (const BinaryAllowance& allowance : spec.artifacts.allow_binaries) {
    allow_binaries.push_back({{"path", allowance.path}, {"reason", allowance.reason}});
  }
  Json deny = Json::array();
  for (const CommandDenyRule& rule : spec.command_policy.deny) {
    deny.push_back(
        {{"name", rule.name}, {"argv", StringsToJson<Json>(rule.argv)}, {"reason", rule.reason}});
  }

  const Filesystem& fs = spec.filesystem;
  const Process& process = spec.process;
  const Resources& r = spec.resources;
  return Json{
      {"version", spec.version},
      {"riskClass", spec.risk_class.has_value() ? Json(ToString(*spec.risk_class)) : Json()},
      {"level", static_cast<int>(spec.level)},
      {"runtime", ToString(spec.runtime)},
      {"image", spec.image},
      {"rootfs", spec.rootfs},
      {"user", {{"uid", spec.user.uid}, {"gid", spec.user.gid}}},
      {"workdir", spec.workdir},
      {"hostname", spec.hostname},
      {"env", std::move(env)},
      {"filesystem",
       {{"readOnlyRoot", fs.read_only_root},
        {"workspace", fs.workspace},
        {"workspaceSizeMb", fs.workspace_size_mb},
        {"workspaceMode", ToString(fs.workspace_mode)},
        {"tmpSizeMb", fs.tmp_size_mb},
        {"homeSizeMb", fs.home_size_mb},
        {"tmpNoexec", fs.tmp_noexec},
        {"mounts", std::move(mounts)},
        {"tmpfs", std::move(tmpfs)}}},
      {"process",
       {{"noNewPrivs", process.no_new_privs},
        {"capabilities", StringsToJson<Json>(process.capabilities)},
        {"seccompProfile", process.seccomp_profile},
        {"pidsLimit", process.pids_limit},
        {"openFiles", process.open_files},
        {"stackMb", process.stack_mb},
        {"supervisor", ToString(process.supervisor)},
        {"syscalls", std::move(syscalls)},
        {"syscallDefaultAction", process.syscall_default_action}}},
      {"resources",
       {{"cpu", r.cpu},
        {"memoryMb", r.memory_mb},
        {"diskMb", r.disk_mb},
        {"commandTimeoutSeconds", r.command_timeout_seconds},
        {"runTimeoutSeconds", r.run_timeout_seconds},
        {"cpuTimeSeconds", r.cpu_time_seconds},
        {"maxLogBytes", r.max_log_bytes},
        {"outputLimitAction", ToString(r.output_limit_action)}}},
      {"network",
       {{"profile", ToString(spec.network.profile)},
        {"allowHosts", StringsToJson<Json>(spec.network.allow_hosts)},
        {"httpRules", std::move(http_rules)},
        {"denyCidrs", StringsToJson<Json>(spec.network.deny_cidrs)}}},
      {"secrets", {{"leases", std::move(leases)}}},
      {"cache", {{"mode", ToString(spec.cache.mode)}, {"key", spec.cache.key}}},
      {"artifacts",
       {{"paths", StringsToJson<Json>(spec.artifacts.paths)},
        {"maxSizeMb", spec.artifacts.max_size_mb},
        {"secretScan", spec.artifacts.secret_scan},
        {"binaryThresholdKb", spec.artifacts.binary_threshold_kb},
        {"allowBinaries", std::move(allow_binaries)}}},
      {"commandPolicy",
       {{"deny", std::move(deny)}, {"strictShell", spec.command_policy.strict_shell}}},
      {"approval", ToString(spec.approval)},
  };
}

// Every line of the message starts with "<prefix>: ", like a compiler's diagnostics.
absl::Status PrefixLines(const absl::Status& status, std::string_view prefix) {
  std::string message;
  std::string_view rest = Message(status);
  while (!rest.empty()) {
    size_t newline = rest.find('\n');
    if (!message.empty()) message += '\n';
    message += fmt::format("{}: {}", prefix, rest.substr(0, newline));
    rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
  }
  return absl::Status(status.code(), message);
}

}  // namespace

namespace internal {
nlohmann::ordered_json ToOrderedJson(const SandboxSpec& spec) {
  return SpecToJson<nlohmann::ordered_json>(spec);
}
}  // namespace internal

absl::StatusOr<SandboxSpec> ParseSpecJson(const nlohmann::json& doc, const ParseOptions& options) {
  std::vector<FieldError> errors;
  SandboxSpec spec;
  try {
    internal::DecodeSpec(doc, &spec, &errors);
    if (!doc.is_object()) return InvalidArgument(FormatFieldErrors(errors));
    size_t decode_errors = errors.size();

    ExplicitFields explicit_fields;
    explicit_fields.level = HasKey(doc, "level");
    explicit_fields.network_profile = HasKey(doc, "network") && HasKey(doc["network"], "profile");
    explicit_fields.approval = HasKey(doc, "approval");
    explicit_fields.workspace_mode =
        HasKey(doc, "filesystem") && HasKey(doc["filesystem"], "workspaceMode");
    bool runtime_set = HasKey(doc, "runtime");
    if (!explicit_fields.level && runtime_set) {
      // interp, gvisor and microvm name their level; it then counts as set by the caller.
      if (std::optional<Level> level = LevelOfRuntime(spec.runtime)) {
        spec.level = *level;
        explicit_fields.level = true;
      }
    }
    AppendUnlessDecodeFailed(ApplyRiskClass(explicit_fields, options.host, &spec), decode_errors,
                             &errors);
    if (!runtime_set) spec.runtime = DeriveRuntime(spec.level, spec.process.supervisor);
    AppendUnlessDecodeFailed(Validate(spec), decode_errors, &errors);
  } catch (const std::exception& e) {
    // Nothing above is expected to throw; an adapter bug must not escape as an exception.
    return Internal(fmt::format("parse spec: {}", e.what()));
  }
  if (!errors.empty()) return InvalidArgument(FormatFieldErrors(errors));
  return spec;
}

absl::StatusOr<json> ReadSpecDocument(std::string_view text, Format format) {
  if (text.size() > kMaxSpecBytes) {
    return InvalidArgument(
        fmt::format("spec is {} bytes; the limit is {} bytes (1 MiB)", text.size(), kMaxSpecBytes));
  }
  constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
  if (text.substr(0, kUtf8Bom.size()) == kUtf8Bom) text.remove_prefix(kUtf8Bom.size());
  if (format == Format::kAuto) format = FormatOfText(text);
  return format == Format::kJson ? internal::ReadJson(text) : internal::ReadYaml(text);
}

absl::StatusOr<SandboxSpec> ParseSpec(std::string_view text, Format format,
                                      const ParseOptions& options) {
  ASSIGN_OR_RETURN(json doc, ReadSpecDocument(text, format));
  return ParseSpecJson(doc, options);
}

absl::StatusOr<json> LoadSpecDocument(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxSpecBytes), "load spec");
  Format format = Format::kAuto;
  if (path.ends_with(".json")) {
    format = Format::kJson;
  } else if (path.ends_with(".yaml") || path.ends_with(".yml")) {
    format = Format::kYaml;
  }
  absl::StatusOr<json> doc = ReadSpecDocument(text, format);
  if (!doc.ok()) return PrefixLines(doc.status(), path);
  return doc;
}

absl::StatusOr<SandboxSpec> LoadSpecFile(const std::string& path, const ParseOptions& options) {
  ASSIGN_OR_RETURN(json doc, LoadSpecDocument(path));
  absl::StatusOr<SandboxSpec> spec = ParseSpecJson(doc, options);
  if (!spec.ok()) return PrefixLines(spec.status(), path);
  return spec;
}

json ToJson(const SandboxSpec& spec) { return SpecToJson<json>(spec); }

json ToJson(const SyscallRule& rule) { return SyscallRuleToJson<json>(rule); }

}  // namespace airlock::spec
