// Looking through wrappers: `env FOO=1 timeout 5 sudo apt install x` runs env, which runs
// timeout, which runs sudo, which runs apt. Each of those is a Level; the rules are applied to
// every level. Also: which levels run shell code given as a string (sh -c, eval, watch, ...)
// and which read code from their standard input (a shell or interpreter with no script).
// Private to src/cmdpolicy.
#ifndef AIRLOCK_CMDPOLICY_INTERNAL_LEVELS_H_
#define AIRLOCK_CMDPOLICY_INTERNAL_LEVELS_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmdpolicy/internal/shell.h"

namespace airlock::cmdpolicy::internal {

// One argument: its text and, when it came from parsed shell text, the parsed word (for its
// substitutions); null for argv given directly and words made up by unwrapping.
struct Arg {
  std::string text;
  const Word* word = nullptr;

  bool literal() const { return word == nullptr || word->literal; }
};

struct Level {
  std::vector<Arg> args;                   // args[0] is the program as written
  std::map<std::string, std::string> env;  // assignments in effect (NAME=value prefixes, env)

  // The program's basename ("" when there is no program).
  std::string_view program() const;
  std::vector<std::string> Argv() const;
};

std::string_view Basename(std::string_view path);

// The level a wrapper runs, if `level` is one (env, nohup, nice, ionice, timeout, stdbuf, time,
// command, exec, setsid, xargs, busybox/toybox applets, sudo/doas/pkexec/run0/runuser/su,
// chroot, taskset, chrt, flock, strace/ltrace, xvfb-run, unbuffer, fakeroot, catchsegv,
// `python -m pip`); a privilege wrapper without a command runs a shell ("sh"). nullopt when
// `level` runs nothing further.
std::optional<Level> Unwrap(const Level& level);

// Shell code that `level` runs given as a string: the string of sh/bash/... -c, fish
// --command, su -c, flock -c, the joined arguments of eval and watch. `word` is the argument
// it came from (null when joined or when the level came from argv).
struct ShellCode {
  std::string text;
  const Word* word = nullptr;
};
std::optional<ShellCode> ShellCodeOf(const Level& level);

// The commands of find's -exec/-execdir/-ok/-okdir actions.
std::vector<Level> FindActions(const Level& level);

// A shell or interpreter that would read the code it runs from its standard input: no -c (or
// -e, -m, ...) and no script operand, or an explicit "-", "/dev/stdin", `sh -s`, and source or
// "." of /dev/stdin.
bool ReadsCodeFromStdin(const Level& level);

// The arguments whose content `level` runs as code: the -c string of a shell, the code of
// python -c / perl -e / node -e / ..., the script operand of a shell or interpreter, the file
// of source/".", every argument of eval. For a level whose program is itself an argument
// (args[0]) that is computed, args[0].
std::vector<const Arg*> CodeArgs(const Level& level);

bool IsShell(std::string_view program);
bool IsDownloader(std::string_view program);

// The downloader `text` names as a word ("curl" in "x=$(curl -s u)"), or "": a cheap textual
// check used where parsing the text again would be wasteful.
std::string_view MentionedDownloader(std::string_view text);

// `name` is `base` or `base` followed by a version: "pip3", "pip3.12", "python3.11".
bool IsVersioned(std::string_view name, std::string_view base);

}  // namespace airlock::cmdpolicy::internal

#endif  // AIRLOCK_CMDPOLICY_INTERNAL_LEVELS_H_
