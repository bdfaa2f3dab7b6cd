// Subcommands of the `airlock` command-line client. Each Add*Command registers its subcommands
// on `app`; their callbacks store the process exit code in *exit_code.
//
// Exit codes shared by every subcommand: 0 success, 2 bad flags or input (one clear line on
// stderr), 125 sandbox error; `airlock run` otherwise exits with the command's own exit code.
// The commands of a running airlockd (`sandbox`, `image`) exit 1 when the server refuses or
// cannot be reached (one line naming the cause), and `sandbox exec` with the command's code.
#ifndef AIRLOCK_CLI_COMMANDS_H_
#define AIRLOCK_CLI_COMMANDS_H_

#include "CLI/CLI.hpp"
#include "command/command.h"

namespace airlock::cli {

inline constexpr int kExitUsage = 2;
inline constexpr int kExitSandboxError = 125;
inline constexpr int kExitRemoteError = 1;
// `airlock sandbox collect|diff`: the release gate found a secret and blocked the collection.
inline constexpr int kExitPolicyBlocked = 3;

void AddRunCommand(CLI::App& app, int* exit_code);
void AddSpecCommands(CLI::App& app, int* exit_code);
void AddInterpCommands(CLI::App& app, int* exit_code);
void AddSandboxCommands(CLI::App& app, int* exit_code);  // remote_commands.cc
void AddImageCommands(CLI::App& app, int* exit_code);
void AddForkServerCommands(CLI::App& app, int* exit_code);  // forkserver_commands.cc

// How `airlock run` shows a result: the output previews on stdout/stderr, then one summary line
// (and the failure report) on stderr; and the exit code it ends with (the command's, 128+signal,
// or kExitSandboxError).
void PrintHuman(const CommandResult& r);
int ExitCodeOf(const CommandResult& r);
// PrintHuman, or the CommandResult as JSON on stdout; returns ExitCodeOf(r).
int PrintResult(const CommandResult& r, bool json);

}  // namespace airlock::cli

#endif  // AIRLOCK_CLI_COMMANDS_H_
