#include "cli/spec_flags.h"

#include <charconv>

#include "common/status.h"
#include "common/units.h"
#include "fmt/format.h"
#include "spec/parse.h"

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
  app->add_option("--workspace", f->workspace, "Host directory mounted read-write at /sandbox/workspace");
  app->add_option("--mount", f->mounts, "Bind mount SRC:DST[:ro|rw] (read-only by default); repeatable")
      ->allow_extra_args(false);
  app->add_option("--env", f->env, "Environment variable K=V for the command; repeatable")
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

}  // namespace

absl::StatusOr<nlohmann::json> SpecDocument(const SpecFlags& f) {
  nlohmann::json doc = nlohmann::json::object();
  if (!f.spec_file.empty()) {
    ASSIGN_OR_RETURN(doc, spec::LoadSpecDocument(f.spec_file));
  }
  if (!f.level.empty()) {
    ASSIGN_OR_RETURN(int64_t level, ParseInt("--level", f.level));
    doc["level"] = level;
  }
  if (!f.risk.empty()) doc["riskClass"] = f.risk;
  if (!f.memory.empty()) {
    ASSIGN_OR_RETURN(int64_t bytes, ParseBytes(f.memory), "--memory");
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
    doc["filesystem"]["mounts"].push_back({{"source", m.substr(0, a)},
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
  return doc;
}

absl::StatusOr<spec::SandboxSpec> LoadSpecWithFlags(const SpecFlags& f) {
  ASSIGN_OR_RETURN(nlohmann::json doc, SpecDocument(f));
  return spec::ParseSpecJson(doc, spec::ParseOptions{});
}

}  // namespace airlock::cli
