// `airlock spec check FILE` and `airlock spec explain FILE`.
#include <cstdio>

#include "cli/commands.h"
#include "common/status.h"
#include "engine/native_sandbox.h"
#include "spec/parse.h"

namespace airlock::cli {

void AddSpecCommands(CLI::App& app, int* exit_code) {
  CLI::App* spec_cmd = app.add_subcommand("spec", "Check and explain SandboxSpec files");
  spec_cmd->require_subcommand(1);
  auto file = std::make_shared<std::string>();
  // The spec as a sandbox would take it: its syscall rules are also checked against the
  // engine's profile (which only Create would do otherwise).
  auto load = [file]() -> absl::StatusOr<spec::SandboxSpec> {
    ASSIGN_OR_RETURN(spec::SandboxSpec s, spec::LoadSpecFile(*file, spec::ParseOptions{}));
    RETURN_IF_ERROR(engine::CheckSyscallPolicy(s.process));
    return s;
  };
  CLI::App* check = spec_cmd->add_subcommand("check", "Validate a spec; list every problem");
  check->add_option("file", *file, "Spec file (JSON or YAML)")->required();
  check->callback([load, file, exit_code] {
    absl::StatusOr<spec::SandboxSpec> s = load();
    if (!s.ok()) {
      std::fprintf(stderr, "%s: invalid spec:\n%s\n", file->c_str(),
                   std::string(Message(s.status())).c_str());
      *exit_code = kExitUsage;
      return;
    }
    std::printf("%s: ok (level %d, network %s)\n", file->c_str(), static_cast<int>(s->level),
                spec::ToString(s->network.profile));
  });
  CLI::App* explain =
      spec_cmd->add_subcommand("explain", "Print the effective spec, every default filled in");
  explain->add_option("file", *file, "Spec file (JSON or YAML)")->required();
  explain->callback([load, file, exit_code] {
    absl::StatusOr<spec::SandboxSpec> s = load();
    if (!s.ok()) {
      std::fprintf(stderr, "%s: invalid spec:\n%s\n", file->c_str(),
                   std::string(Message(s.status())).c_str());
      *exit_code = kExitUsage;
      return;
    }
    std::printf("%s", spec::ExplainSpec(*s).c_str());
  });
}

}  // namespace airlock::cli
