// airlock: the command-line client. Thin: builds the subcommands and runs the one asked for.
#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"airlock: run untrusted code in a sandbox", "airlock"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "airlock 0.1.0");
  int exit_code = 0;
  airlock::cli::AddRunCommand(app, &exit_code);
  airlock::cli::AddSpecCommands(app, &exit_code);
  airlock::cli::AddInterpCommands(app, &exit_code);
  airlock::cli::AddSandboxCommands(app, &exit_code);
  airlock::cli::AddImageCommands(app, &exit_code);
  airlock::cli::AddForkServerCommands(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "airlock: %s\n", e.what());
    return airlock::cli::kExitUsage;
  }
  return exit_code;
}
