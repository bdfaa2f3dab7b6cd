#include "cli/spec_flags.h"

#include <cctype>
#include <charconv>

#include "common/status.h"
#include "common/units.h"
#include "engine/native_sandbox.h"
#include "fmt/format.h"
#include "spec/kernel_names.h"
#include "spec/parse.h"
#include "supervisor/policy.h"

namespace airlock::cli {

void AddSpecFlags(CLI::App* app, SpecFlags* f) {
  app->add_option("--spec", f->spec_file, "SandboxSpec file (JSON or YAML)");
  app->add_option("--level", f->level, "Isolation level (1 or 2 for the native backend)");
  app->add_option("--risk", f->risk, "Risk class R0..R5 (derives level, network and approval)");
  app->add_option("--memory", f->memory, "Memory limit including swap, e.g. 512M");
  app->add_option("--cpu", f->cpu, "CPU limit in cores, e.g. 0.5");
  app->add_option("--pids", f->pids, "Maximum number of processes");
  app->add_option("--network", f->network, "Network profile (none)");
  app->add_option("--rootfs", f->rootfs, "Directory to use as the root file system");
  app->add_option("--workspace", f->workspace,
                  "Host directory mounted at /sandbox/workspace (read-write; read-only under "
                  "risk class R0 or filesystem.workspaceMode ro)");
  app->add_option("--mount", f->mounts,
                  "Bind mount SRC:DST[:ro|rw] (read-only by default); repeatable")
      ->allow_extra_args(false);
  app->add_option("--env", f->env, "Environment variable K=V for the command; repeatable")
      ->allow_extra_args(false);
  app->add_option("--supervisor", f->supervisor,
                  "Syscall supervisor: none, notify (seccomp user notification) or ptrace; "
                  "without --trace, --trace-all or rules it reports programs run, files opened "
                  "and connections tried");
  app->add_option("--trace", f->trace,
                  "System calls to route to the supervisor (recorded, then run), e.g. "
                  "openat,connect; repeatable")
      ->delimiter(',')
      ->allow_extra_args(false);
  app->add_flag("--trace-all", f->trace_all,
                "Route every system call to the supervisor (a full audit; slower)");
  app->add_option("--deny", f->deny,
                  "Deny a system call and those that do the same (openat: open and creat; "
                  "connect: sendmsg, sendmmsg and sendto with an address; docs/supervisor.md): "
                  "NAME (EPERM) or NAME=ERRNO, e.g. connect=EACCES; repeatable, before the "
                  "spec's own rules")
      ->delimiter(',')
      ->allow_extra_args(false);
}

namespace {

absl::StatusOr<int64_t> ParseInt(const std::string& flag, const std::string& text) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    return InvalidArgument(fmt::format("{} {}: expected an integer", flag, text));
  }
  return v;
}

// The names a supervisor traces when it is asked for and given nothing to trace: what an agent
// most wants to know a command did. sendmsg and sendto with an address reach endpoints without
// connect (UDP, TCP Fast Open); sendto without one is send() on a connected socket, not routed.
// (openat2 is not among them: every sandbox answers it ENOSYS, and libraries use openat.)
constexpr const char* kFeedbackSyscalls[] = {"execve", "execveat", "connect", "sendmsg",
                                             "open",   "openat",   "creat"};

// `obj[key]` if it is a string, else `fallback` (a value of another type is the parser's to
// report, with its field path).
std::string StringField(const nlohmann::json& obj, const char* key, const std::string& fallback) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

absl::Status ApplySyscallFlags(const SpecFlags& f, nlohmann::json& doc) {
  if (doc.contains("process") && !doc["process"].is_object()) return absl::OkStatus();
  if (!f.supervisor.empty()) doc["process"]["supervisor"] = f.supervisor;
  nlohmann::json process = doc.value("process", nlohmann::json::object());
  std::string mode = StringField(process, "supervisor", "none");
  nlohmann::json rules = process.value("syscalls", nlohmann::json::array());
  if (!rules.is_array()) return absl::OkStatus();  // the spec's own error, reported by parsing
  nlohmann::json denied = nlohmann::json::array();
  for (const std::string& d : f.deny) {
    size_t eq = d.find('=');
    std::string name = d.substr(0, eq);
    std::string err = eq == std::string::npos ? "EPERM" : d.substr(eq + 1);
    if (name.empty() || err.empty()) {
      return InvalidArgument(fmt::format("--deny {}: expected NAME or NAME=ERRNO", d));
    }
    for (const spec::SyscallRule& rule :
         supervisor::RulesRestricting(name, fmt::format("errno({})", err))) {
      denied.push_back(spec::ToJson(rule));
    }
  }
  const bool routes = !f.trace.empty() || f.trace_all;
  if (routes && mode != "notify" && mode != "ptrace") {
    return InvalidArgument("--trace and --trace-all need --supervisor notify or ptrace");
  }
  const std::string route = mode == "ptrace" ? "trace" : "notify";
  if ((mode == "notify" || mode == "ptrace") && !routes && rules.empty() &&
      StringField(process, "syscallDefaultAction", "").empty()) {
    nlohmann::json names = nlohmann::json::array();
    for (const char* n : kFeedbackSyscalls) names.push_back(n);
    rules.push_back({{"names", names}, {"action", route}});
    rules.push_back(spec::ToJson(supervisor::AddressedSendto(route)));
  }
  // A traced call runs once the supervisor has seen it: where the spec's own default (kill, an
  // errno) or the engine's profile would refuse it, a flag would let it run.
  const std::string own_default = StringField(process, "syscallDefaultAction", "");
  const bool strict_default =
      !own_default.empty() && own_default != route && own_default != "allow";
  if (!f.trace.empty()) {
    if (strict_default) {
      return InvalidArgument(fmt::format(
          "--trace {}: the spec's syscallDefaultAction is {}, and a traced call it does not name "
          "would run instead; route it with a rule in the spec",
          fmt::join(f.trace, ","), own_default));
    }
    for (const std::string& name : f.trace) {
      if (engine::ProfileTreatmentOf(name) == supervisor::ProfileTreatment::kNotAllowed &&
          spec::IsKnownSyscall(name)) {
        return InvalidArgument(fmt::format(
            "--trace {}: the sandbox's seccomp profile does not allow {}, and tracing it would let "
            "it run; name it in the spec's rules to widen the profile",
            name, name));
      }
    }
    rules.push_back({{"names", f.trace}, {"action", route}});
  }
  if (f.trace_all) {
    // The spec's own default would be replaced by one that lets calls run.
    if (strict_default) {
      return InvalidArgument(fmt::format(
          "--trace-all: the spec's syscallDefaultAction is {}, which --trace-all would replace "
          "with {}; remove one of them",
          own_default, route));
    }
    doc["process"]["syscallDefaultAction"] = route;
  }
  denied.insert(denied.end(), rules.begin(), rules.end());
  if (!denied.empty()) doc["process"]["syscalls"] = std::move(denied);
  return absl::OkStatus();
}

absl::Status ApplyFlags(const SpecFlags& f, nlohmann::json& doc) {
  if (!f.level.empty()) {
    ASSIGN_OR_RETURN(int64_t level, ParseInt("--level", f.level));
    doc["level"] = level;
  }
  if (!f.risk.empty()) {
    // A risk class is only ever raised by the caller: a flag below the spec's own would loosen
    // what the spec's author asked for. (Malformed values are the parser's to report.)
    auto is_class = [](const std::string& r) {
      return r.size() == 2 && r[0] == 'R' && r[1] >= '0' && r[1] <= '5';
    };
    const nlohmann::json& own = doc.contains("riskClass") ? doc["riskClass"] : nlohmann::json();
    // A malformed class in the file would be replaced unseen (and what it meant to derive lost).
    if (!own.is_null() && !(own.is_string() && is_class(own.get<std::string>()))) {
      return InvalidArgument(
          fmt::format("riskClass: {} is not one of: R0, R1, R2, R3, R4, R5", own.dump()));
    }
    if (own.is_string() && is_class(own.get<std::string>()) && is_class(f.risk) &&
        f.risk < own.get<std::string>()) {
      return InvalidArgument(fmt::format(
          "--risk {}: lower than the spec's riskClass {}; a risk class can only be raised", f.risk,
          own.get<std::string>()));
    }
    // What R0 derives and no later class does: a read-only workspace. Raising the class keeps it.
    if (own.is_string() && own.get<std::string>() == "R0" && f.risk != "R0") {
      nlohmann::json& fs = doc["filesystem"];
      if (fs.is_null()) fs = nlohmann::json::object();
      if (fs.is_object() && !fs.contains("workspaceMode")) fs["workspaceMode"] = "ro";
    }
    doc["riskClass"] = f.risk;
  }
  if (!f.memory.empty()) {
    ASSIGN_OR_RETURN(int64_t bytes, ParseBytes(f.memory), "--memory");
    // "512" would be 512 bytes, not the 512 MiB of the spec's memoryMb: a unit is required.
    if (std::isdigit(static_cast<unsigned char>(f.memory.back())) || bytes < (1 << 20)) {
      return InvalidArgument(fmt::format(
          "--memory {}: expected a size of at least 1 MiB with its unit (512M, 2G)", f.memory));
    }
    doc["resources"]["memoryMb"] = (bytes + (1 << 20) - 1) >> 20;
  }
  if (!f.cpu.empty()) {
    double cores = 0;
    auto [ptr, ec] = std::from_chars(f.cpu.data(), f.cpu.data() + f.cpu.size(), cores);
    if (ec != std::errc() || ptr != f.cpu.data() + f.cpu.size()) {
      return InvalidArgument(fmt::format("--cpu {}: expected a number of cores", f.cpu));
    }
    doc["resources"]["cpu"] = cores;
  }
  if (!f.pids.empty()) {
    ASSIGN_OR_RETURN(int64_t pids, ParseInt("--pids", f.pids));
    doc["process"]["pidsLimit"] = pids;
  }
  if (!f.network.empty()) doc["network"]["profile"] = f.network;
  if (!f.rootfs.empty()) doc["rootfs"] = f.rootfs;
  if (!f.workspace.empty()) doc["filesystem"]["workspace"] = f.workspace;
  for (const std::string& m : f.mounts) {
    size_t a = m.find(':');
    size_t b = a == std::string::npos ? a : m.find(':', a + 1);
    if (a == std::string::npos) {
      return InvalidArgument(fmt::format("--mount {}: expected SRC:DST[:ro|rw]", m));
    }
    std::string mode = b == std::string::npos ? "ro" : m.substr(b + 1);
    doc["filesystem"]["mounts"].push_back(
        {{"source", m.substr(0, a)},
         {"target", m.substr(a + 1, b == std::string::npos ? b : b - a - 1)},
         {"mode", mode}});
  }
  for (const std::string& e : f.env) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument(fmt::format("--env {}: expected K=V", e));
    }
    doc["env"][e.substr(0, eq)] = e.substr(eq + 1);
  }
  return ApplySyscallFlags(f, doc);
}

}  // namespace

absl::StatusOr<nlohmann::json> SpecDocument(const SpecFlags& f) {
  nlohmann::json doc = nlohmann::json::object();
  if (!f.spec_file.empty()) {
    ASSIGN_OR_RETURN(doc, spec::LoadSpecDocument(f.spec_file));
  }
  nlohmann::json with_flags = doc;
  try {
    RETURN_IF_ERROR(ApplyFlags(f, with_flags));
  } catch (const nlohmann::json::exception&) {
    // A flag met a part of the spec of another type than its own (`resources: 5` and --memory):
    // that part of the spec is the error, and parsing the spec as written names it.
    absl::StatusOr<spec::SandboxSpec> own = spec::ParseSpecJson(doc, spec::ParseOptions{});
    if (!own.ok()) return own.status();
    return InvalidArgument("the spec's document cannot take the flags given");
  }
  return with_flags;
}

absl::StatusOr<spec::SandboxSpec> LoadSpecWithFlags(const SpecFlags& f) {
  ASSIGN_OR_RETURN(nlohmann::json doc, SpecDocument(f));
  return spec::ParseSpecJson(doc, spec::ParseOptions{});
}

}  // namespace airlock::cli
