// `airlock interp run` and `airlock interp resume`: the level-0 interpreter from the command line.
// The logic lives in RunInterpScript/ResumeInterpSnapshot so tests can call it without a process;
// AddInterpCommands (commands.h) only parses flags into these structs.
#ifndef AIRLOCK_CLI_INTERP_COMMANDS_H_
#define AIRLOCK_CLI_INTERP_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

namespace airlock::cli {

struct InterpCommonArgs {
  std::string snapshot_dir;  // empty: $XDG_STATE_HOME/airlock/interp/snapshots (or ~/.local/state)
  std::string key_file;      // empty: interp::DefaultKeyFilePath()
  bool json = false;         // one JSON object on stdout instead of the plain output
};

struct InterpRunArgs {
  InterpCommonArgs common;
  std::string script;                // a file, or "-" for standard input
  std::vector<std::string> tools;    // allowlist, from the CLI's catalog (human_approval, echo)
  std::string memory = "32M";        // QuickJS heap limit
  std::string timeout = "5s";        // execution time
  std::string wall_timeout = "60s";  // one run, including waits for tools
};

struct InterpResumeArgs {
  InterpCommonArgs common;
  std::string snapshot;  // a file written by `interp run` or `interp resume`
  std::string call_id;
  std::string result_json;  // the answer, or
  std::string error;        // an error message for the call
  bool replay = false;      // rebuild from the journal (a snapshot of another build)
};

// Exit codes: 0 the script completed or paused (a snapshot was written), 1 the script failed
// (error, timeout, memory...), 2 bad flags or input, 125 the host failed. `out` gets the result
// (or the JSON object), `err` the console output and messages.
int RunInterpScript(const InterpRunArgs& args, std::ostream& out, std::ostream& err);
int ResumeInterpSnapshot(const InterpResumeArgs& args, std::ostream& out, std::ostream& err);

}  // namespace airlock::cli

#endif  // AIRLOCK_CLI_INTERP_COMMANDS_H_
