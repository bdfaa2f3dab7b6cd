#include "cli/interp_commands.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
#include <utility>

#include "cli/commands.h"
#include "common/files.h"
#include "common/status.h"
#include "common/units.h"
#include "fmt/format.h"
#include "interp/interpreter.h"
#include "interp/snapshot_store.h"
#include "nlohmann/json.hpp"

namespace airlock::cli {
namespace {

using interp::Outcome;
using interp::RunResult;
using nlohmann::json;

constexpr int kExitScriptFailed = 1;

// Tools a script run from the command line can be allowed. Host functions are registered
// through the C++ API; sandbox.exec and llm.call come with the daemon.
std::vector<std::shared_ptr<interp::Tool>> Catalog() {
  interp::ToolInfo echo;
  echo.name = "echo";
  echo.description = "Answers with its arguments.";
  return {interp::MakeHumanApprovalTool(),
          interp::MakeHostFunctionTool(
              echo, [](const json& args) -> absl::StatusOr<json> { return args; })};
}

std::string CatalogNames() {
  std::string names;
  for (const auto& t : Catalog()) names += (names.empty() ? "" : ", ") + t->info().name;
  return names;
}

std::string DefaultSnapshotDir() {
  if (const char* p = std::getenv("XDG_STATE_HOME"); p != nullptr && *p == '/') {
    return fmt::format("{}/airlock/interp/snapshots", p);
  }
  const char* home = std::getenv("HOME");
  return fmt::format("{}/.local/state/airlock/interp/snapshots", home != nullptr ? home : "");
}

struct Host {
  std::unique_ptr<interp::Interpreter> interp;
  std::unique_ptr<interp::SnapshotStore> store;
  std::string snapshot_dir;
  std::string key;
};

absl::StatusOr<Host> OpenHost(const InterpCommonArgs& args) {
  Host host;
  ASSIGN_OR_RETURN(host.interp, interp::Interpreter::Create());
  host.snapshot_dir = args.snapshot_dir.empty() ? DefaultSnapshotDir() : args.snapshot_dir;
  ASSIGN_OR_RETURN(host.store, interp::FileSnapshotStore::Open(host.snapshot_dir));
  std::string key_file = args.key_file.empty() ? interp::DefaultKeyFilePath() : args.key_file;
  ASSIGN_OR_RETURN(host.key, interp::LoadOrCreateKeyFile(key_file), "snapshot key");
  return host;
}

json PendingJson(const RunResult& r) {
  json pending = json::array();
  for (const auto& p : r.pending) {
    json args = json::parse(p.args_json, nullptr, false);
    pending.push_back({{"id", p.id}, {"name", p.name}, {"args", args}});
  }
  return pending;
}

// Reports a finished or paused run; writes the snapshot of a paused one.
int Report(Host& host, interp::Session& session, const RunResult& r, const InterpCommonArgs& args,
           std::ostream& out, std::ostream& err) {
  std::string snapshot_path;
  if (r.outcome == Outcome::kPaused) {
    absl::StatusOr<std::string> snap = session.Snapshot();
    std::string name = fmt::format("{}.{}", session.id().value(), session.journal().size());
    absl::Status stored = snap.ok() ? host.store->Put(name, *snap) : snap.status();
    if (!stored.ok()) {
      err << "airlock interp: store snapshot: " << Message(stored) << "\n";
      return kExitSandboxError;
    }
    snapshot_path = fmt::format("{}/{}.snap", host.snapshot_dir, name);
  }
  const int code =
      r.outcome == Outcome::kCompleted || r.outcome == Outcome::kPaused ? 0 : kExitScriptFailed;
  if (args.json) {
    json j = {{"session", session.id().value()},
              {"outcome", interp::ToString(r.outcome)},
              {"console", session.console()},
              {"guest_ms", static_cast<double>(r.guest_time.count()) / 1e6}};
    if (r.outcome == Outcome::kCompleted) j["result"] = json::parse(r.result_json, nullptr, false);
    if (!r.error.empty()) j["error"] = r.error;
    if (r.outcome == Outcome::kPaused) {
      j["snapshot"] = snapshot_path;
      j["pending"] = PendingJson(r);
    }
    out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    return code;
  }
  err << session.console();
  switch (r.outcome) {
    case Outcome::kCompleted:
      out << r.result_json << "\n";
      break;
    case Outcome::kPaused:
      out << json({{"snapshot", snapshot_path}, {"pending", PendingJson(r)}}).dump() << "\n";
      for (const auto& p : r.pending) {
        err << fmt::format(
            "airlock interp: paused on {} ({}); answer with: airlock interp resume {} --call {} "
            "--result JSON\n",
            p.name, p.id, snapshot_path, p.id);
      }
      break;
    default:
      err << fmt::format("airlock interp: {}: {}\n", interp::ToString(r.outcome), r.error);
  }
  return code;
}

absl::StatusOr<std::string> ReadScript(const std::string& path) {
  if (path == "-") {
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return text;
  }
  return ReadFile(path, 16 << 20);
}

}  // namespace

int RunInterpScript(const InterpRunArgs& args, std::ostream& out, std::ostream& err) {
  interp::SessionOptions options;
  absl::StatusOr<int64_t> memory = ParseBytes(args.memory);
  absl::StatusOr<std::chrono::milliseconds> timeout = ParseDuration(args.timeout);
  absl::StatusOr<std::chrono::milliseconds> wall = ParseDuration(args.wall_timeout);
  for (const absl::Status& s : {memory.status(), timeout.status(), wall.status()}) {
    if (!s.ok()) {
      err << "airlock interp run: " << Message(s) << "\n";
      return kExitUsage;
    }
  }
  options.limits.memory_bytes = *memory;
  options.limits.exec_time = *timeout;
  options.limits.wall_time = *wall;
  auto catalog = Catalog();
  for (const std::string& name : args.tools) {
    auto it = std::find_if(catalog.begin(), catalog.end(),
                           [&](const auto& t) { return t->info().name == name; });
    if (it == catalog.end()) {
      err << fmt::format("airlock interp run: unknown tool '{}' (available: {})\n", name,
                         CatalogNames());
      return kExitUsage;
    }
    options.tools.push_back(*it);
  }
  absl::StatusOr<std::string> script = ReadScript(args.script);
  if (!script.ok()) {
    err << "airlock interp run: " << Message(script.status()) << "\n";
    return kExitUsage;
  }
  absl::StatusOr<Host> host = OpenHost(args.common);
  if (!host.ok()) {
    err << "airlock interp run: " << Message(host.status()) << "\n";
    return kExitSandboxError;
  }
  options.hmac_key = host->key;
  auto session = host->interp->NewSession(std::move(options));
  if (!session.ok()) {
    err << "airlock interp run: " << Message(session.status()) << "\n";
    return session.status().code() == absl::StatusCode::kInternal ? kExitSandboxError : kExitUsage;
  }
  absl::StatusOr<RunResult> r = (*session)->Run(*script);
  if (!r.ok()) {
    err << "airlock interp run: " << Message(r.status()) << "\n";
    return kExitUsage;
  }
  return Report(*host, **session, *r, args.common, out, err);
}

int ResumeInterpSnapshot(const InterpResumeArgs& args, std::ostream& out, std::ostream& err) {
  if (args.result_json.empty() == args.error.empty()) {
    err << "airlock interp resume: give exactly one of --result JSON and --error MESSAGE\n";
    return kExitUsage;
  }
  if (!args.result_json.empty() && !json::accept(args.result_json)) {
    err << "airlock interp resume: --result is not JSON\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> snap = ReadFile(args.snapshot, size_t{1} << 31);
  if (!snap.ok()) {
    err << "airlock interp resume: " << Message(snap.status()) << "\n";
    return kExitUsage;
  }
  absl::StatusOr<Host> host = OpenHost(args.common);
  if (!host.ok()) {
    err << "airlock interp resume: " << Message(host.status()) << "\n";
    return kExitSandboxError;
  }
  interp::SessionOptions options;
  options.tools = Catalog();
  options.hmac_key = host->key;
  auto session = args.replay ? host->interp->Replay(*snap, std::move(options))
                             : host->interp->Restore(*snap, std::move(options));
  if (!session.ok()) {
    err << "airlock interp resume: " << Message(session.status()) << "\n";
    return kExitUsage;
  }
  interp::ToolResult answer = args.error.empty() ? interp::ToolResult::Value(args.result_json)
                                                 : interp::ToolResult::Error(args.error);
  absl::StatusOr<RunResult> r = (*session)->Resume(args.call_id, answer);
  if (!r.ok()) {
    err << "airlock interp resume: " << Message(r.status()) << "\n";
    return kExitUsage;
  }
  return Report(*host, **session, *r, args.common, out, err);
}

void AddInterpCommands(CLI::App& app, int* exit_code) {
  CLI::App* interp = app.add_subcommand(
      "interp", "Run JavaScript orchestration scripts in the level-0 interpreter");
  interp->require_subcommand(1);

  auto add_common = [](CLI::App* cmd, InterpCommonArgs* common) {
    cmd->add_option("--snapshot-dir", common->snapshot_dir,
                    "Where paused runs are written (default: ~/.local/state/airlock/interp/"
                    "snapshots)");
    cmd->add_option("--key-file", common->key_file,
                    "HMAC key for snapshots (default: $AIRLOCK_INTERP_KEY_FILE or "
                    "~/.local/state/airlock/interp.key, created when missing)");
    cmd->add_flag("--json", common->json, "Print one JSON object with everything");
  };

  auto run_args = std::make_shared<InterpRunArgs>();
  CLI::App* run = interp->add_subcommand("run", "Run a script (a file, or - for stdin)");
  run->add_option("script", run_args->script, "The script: the body of an async function")
      ->required();
  run->add_option("--tools", run_args->tools, "Tools the script may call (human_approval, echo)")
      ->delimiter(',')
      ->allow_extra_args(false);
  run->add_option("--memory", run_args->memory, "Heap limit (default 32M)");
  run->add_option("--timeout", run_args->timeout, "Execution-time limit (default 5s)");
  run->add_option("--wall-timeout", run_args->wall_timeout,
                  "Wall-time limit of this run (default 60s)");
  add_common(run, &run_args->common);
  run->callback(
      [run_args, exit_code] { *exit_code = RunInterpScript(*run_args, std::cout, std::cerr); });

  auto resume_args = std::make_shared<InterpResumeArgs>();
  CLI::App* resume =
      interp->add_subcommand("resume", "Answer a paused run's durable call and continue it");
  resume->add_option("snapshot", resume_args->snapshot, "The snapshot file")->required();
  resume->add_option("--call", resume_args->call_id, "The call to answer (call-N)")->required();
  resume->add_option("--result", resume_args->result_json, "The answer, as JSON");
  resume->add_option("--error", resume_args->error, "Fail the call with this message instead");
  resume->add_flag("--replay", resume_args->replay,
                   "Rebuild the run from its journal (a snapshot of another build)");
  add_common(resume, &resume_args->common);
  resume->callback([resume_args, exit_code] {
    *exit_code = ResumeInterpSnapshot(*resume_args, std::cout, std::cerr);
  });
}

}  // namespace airlock::cli
