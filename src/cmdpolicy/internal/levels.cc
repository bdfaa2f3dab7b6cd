#include "cmdpolicy/internal/levels.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

namespace airlock::cmdpolicy::internal {
namespace {

constexpr size_t kNone = std::string::npos;

// How a wrapper's options look: the letters whose short option takes the next word (or the
// rest of its cluster) as its value, the long options that take the next word (a value given
// with '=' needs no listing), and how many operands come before the command it runs.
struct OptionSpec {
  std::string_view short_with_value;
  std::initializer_list<std::string_view> long_with_value;
  int operands = 0;
};

struct Parsed {
  size_t command = kNone;               // index of the command in args, kNone when there is none
  std::string flags;                    // every short option letter seen
  std::vector<std::string_view> longs;  // every long option seen, without its "=value"
  std::vector<std::pair<char, size_t>> values;  // short options with a value: letter, arg index
  bool Has(char flag) const { return flags.find(flag) != std::string::npos; }
  bool HasLong(std::string_view name) const {
    return std::find(longs.begin(), longs.end(), name) != longs.end();
  }
};

// Options end at the first operand or "--" (GNU wrappers stop there so that the command's own
// options are not theirs).
Parsed ParseOptions(const std::vector<Arg>& args, const OptionSpec& spec, size_t from = 1) {
  Parsed parsed;
  int operands = spec.operands;
  size_t i = from;
  while (i < args.size()) {
    const std::string& a = args[i].text;
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;
    if (a[1] == '-') {
      std::string_view name = std::string_view(a).substr(0, a.find('='));
      parsed.longs.push_back(name);
      const bool takes_value = a.find('=') == std::string::npos &&
                               std::find(spec.long_with_value.begin(), spec.long_with_value.end(),
                                         name) != spec.long_with_value.end();
      i += takes_value ? 2 : 1;
      continue;
    }
    size_t next = i + 1;
    for (size_t j = 1; j < a.size(); ++j) {
      parsed.flags.push_back(a[j]);
      if (spec.short_with_value.find(a[j]) != std::string_view::npos) {
        if (j + 1 == a.size()) {
          parsed.values.emplace_back(a[j], i + 1);
          next = i + 2;
        } else {
          parsed.values.emplace_back(a[j], i);
        }
        break;
      }
    }
    i = next;
  }
  while (i < args.size() && operands > 0) {
    ++i;
    --operands;
  }
  if (i < args.size() && operands == 0) parsed.command = i;
  return parsed;
}

Level Sub(const Level& level, size_t from) {
  Level sub;
  sub.env = level.env;
  sub.args.assign(level.args.begin() + static_cast<std::ptrdiff_t>(from), level.args.end());
  return sub;
}

Level Shell(const Level& level) {
  Level sub;
  sub.env = level.env;
  sub.args.push_back({"sh", nullptr});
  return sub;
}

bool IsIdentifier(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool IsOneOf(std::string_view s, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

// env [-i] [-u NAME] [-C DIR] [-S STRING] [NAME=VALUE]... [COMMAND [ARG]...]
std::optional<Level> UnwrapEnv(const Level& level) {
  Level out;
  out.env = level.env;
  std::vector<Arg> rest(level.args.begin() + 1, level.args.end());
  size_t i = 0;
  bool options = true;
  while (i < rest.size()) {
    const std::string a = rest[i].text;
    if (options && a == "--") {
      options = false;
      ++i;
      continue;
    }
    if (options && (a == "-" || a == "-i" || a == "-0" || a == "-v" || a == "--null" ||
                    a == "--ignore-environment" || a == "--debug" ||
                    a.rfind("--block-signal", 0) == 0 || a.rfind("--default-signal", 0) == 0 ||
                    a.rfind("--ignore-signal", 0) == 0 || a.rfind("--unset=", 0) == 0 ||
                    a.rfind("--chdir=", 0) == 0 || a.rfind("--argv0=", 0) == 0)) {
      ++i;
      continue;
    }
    if (options && (a == "-u" || a == "-C" || a == "-a" || a == "--unset" || a == "--chdir" ||
                    a == "--argv0")) {
      i += 2;
      continue;
    }
    if (options && (a == "-S" || a.rfind("-S", 0) == 0 || a == "--split-string" ||
                    a.rfind("--split-string=", 0) == 0)) {
      std::string text;
      size_t consumed = 1;
      if (a == "-S" || a == "--split-string") {
        if (i + 1 < rest.size()) text = rest[i + 1].text;
        consumed = 2;
      } else {
        text = a.substr(a[1] == 'S' ? 2 : std::string_view("--split-string=").size());
      }
      // The split words take the place of the option, then env goes on with them.
      ShellParse split = ParseShell(text);
      std::vector<Arg> words;
      if (!split.script.pipelines.empty() && !split.script.pipelines[0].stages.empty()) {
        const Command& first = split.script.pipelines[0].stages[0];
        for (const Word& w : first.assignments) words.push_back({w.text, nullptr});
        for (const Word& w : first.words) words.push_back({w.text, nullptr});
      }
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i),
                 rest.begin() + static_cast<std::ptrdiff_t>(std::min(i + consumed, rest.size())));
      rest.insert(rest.begin() + static_cast<std::ptrdiff_t>(i), words.begin(), words.end());
      continue;
    }
    if (options && a.size() > 1 && a[0] == '-') {
      ++i;  // another flag of a newer env
      continue;
    }
    options = false;
    const size_t eq = a.find('=');
    if (eq != std::string::npos && eq > 0 && IsIdentifier(std::string_view(a).substr(0, eq))) {
      out.env[a.substr(0, eq)] = a.substr(eq + 1);
      ++i;
      continue;
    }
    break;
  }
  if (i >= rest.size()) return std::nullopt;
  out.args.assign(rest.begin() + static_cast<std::ptrdiff_t>(i), rest.end());
  return out;
}

// python [options] -m pip ...: the level of pip.
std::optional<Level> UnwrapPythonModule(const Level& level) {
  const std::vector<Arg>& args = level.args;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i].text;
    if (a == "-c" || a == "--" || a.empty() || a[0] != '-') return std::nullopt;
    if (a == "-W" || a == "-X") {
      ++i;
      continue;
    }
    if (a.rfind("-W", 0) == 0 || a.rfind("-X", 0) == 0) continue;  // value attached
    std::string module;
    size_t rest = 0;
    if (a == "-m") {
      if (i + 1 >= args.size()) return std::nullopt;
      module = args[i + 1].text;
      rest = i + 2;
    } else if (a.rfind("-m", 0) == 0) {
      module = a.substr(2);
      rest = i + 1;
    } else if (a.find('c') != std::string::npos || a.find('m') != std::string::npos) {
      return std::nullopt;  // a cluster ending in -c or -m with its value attached: not pip
    } else {
      continue;
    }
    if (module != "pip" && !IsVersioned(module, "pip")) return std::nullopt;
    Level sub;
    sub.env = level.env;
    sub.args.push_back({"pip", nullptr});
    sub.args.insert(sub.args.end(), args.begin() + static_cast<std::ptrdiff_t>(rest), args.end());
    return sub;
  }
  return std::nullopt;
}

bool IsPython(std::string_view p) { return IsVersioned(p, "python") || IsVersioned(p, "pypy"); }
bool IsNode(std::string_view p) { return p == "node" || p == "nodejs"; }

// Interpreters that run a script from stdin when given none, and their options that give the
// code on the command line instead (and whose value is that code).
struct Interpreter {
  std::string_view code_options;  // short option letters
  std::initializer_list<std::string_view> code_longs;
  std::string_view short_with_value;  // other options taking a value
};

std::optional<Interpreter> InterpreterOf(std::string_view p) {
  if (IsPython(p)) return Interpreter{"cm", {}, "WX"};
  if (IsVersioned(p, "perl")) return Interpreter{"eE", {}, "IMm"};
  if (IsVersioned(p, "ruby")) return Interpreter{"e", {}, "IrC"};
  if (IsNode(p)) return Interpreter{"ep", {"--eval", "--print"}, "r"};
  if (IsVersioned(p, "php")) return Interpreter{"rBRFE", {}, "cdfz"};
  return std::nullopt;
}

struct ShellArgs {
  bool has_c = false;
  bool has_s = false;
  size_t operand = kNone;  // first operand: the -c string, or the script
};

ShellArgs ParseShellArgs(const Level& level) {
  ShellArgs out;
  const std::vector<Arg>& args = level.args;
  size_t i = 1;
  while (i < args.size()) {
    const std::string& a = args[i].text;
    if (a == "--" || a == "-") {
      if (a == "--") ++i;
      break;
    }
    if (a.size() < 2 || (a[0] != '-' && a[0] != '+')) break;
    if (a.rfind("--", 0) == 0) {
      if (a == "--command") {
        out.has_c = true;
        out.operand = i + 1 < args.size() ? i + 1 : kNone;
        return out;
      }
      if (a == "--init-command" || a == "--rcfile" || a == "--init-file") {
        i += 2;
        continue;
      }
      if (a.rfind("--command=", 0) == 0) {
        out.has_c = true;
        out.operand = i;  // fish --command=CODE: the code is inside the word
        return out;
      }
      ++i;
      continue;
    }
    size_t next = i + 1;
    for (size_t j = 1; j < a.size(); ++j) {
      if (a[j] == 'c') out.has_c = true;
      if (a[j] == 's') out.has_s = true;
      if (a[j] == 'o' || a[j] == 'O') next = i + 2;
    }
    i = next;
  }
  if (i < args.size()) out.operand = i;
  return out;
}

bool IsStdinPath(std::string_view s) {
  return s == "-" || s == "/dev/stdin" || s == "/dev/fd/0" || s == "/proc/self/fd/0";
}

// For an interpreter: the index of its code argument (-c CODE, -e CODE, --eval CODE), or of
// its first operand (the script); `code_option` says which it was.
size_t InterpreterCode(const Level& level, const Interpreter& in, bool* code_option) {
  *code_option = false;
  const std::vector<Arg>& args = level.args;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i].text;
    if (a == "--") return i + 1 < args.size() ? i + 1 : kNone;
    if (a.size() < 2 || a[0] != '-') return i;
    if (a[1] == '-') {
      std::string_view name = std::string_view(a).substr(0, a.find('='));
      if (std::find(in.code_longs.begin(), in.code_longs.end(), name) != in.code_longs.end()) {
        *code_option = true;
        if (a.find('=') != std::string::npos) return i;
        return i + 1 < args.size() ? i + 1 : kNone;
      }
      continue;
    }
    for (size_t j = 1; j < a.size(); ++j) {
      if (in.code_options.find(a[j]) != std::string_view::npos) {
        *code_option = true;
        if (j + 1 < a.size()) return i;  // attached: -e'print 1'
        return i + 1 < args.size() ? i + 1 : kNone;
      }
      if (in.short_with_value.find(a[j]) != std::string_view::npos) {
        if (j + 1 == a.size()) ++i;
        break;
      }
    }
  }
  return kNone;
}

}  // namespace

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view Level::program() const {
  return args.empty() ? std::string_view() : Basename(args[0].text);
}

std::vector<std::string> Level::Argv() const {
  std::vector<std::string> argv;
  argv.reserve(args.size());
  for (const Arg& a : args) argv.push_back(a.text);
  return argv;
}

bool IsVersioned(std::string_view name, std::string_view base) {
  if (name.substr(0, base.size()) != base) return false;
  std::string_view rest = name.substr(base.size());
  if (rest.empty()) return true;
  if (rest[0] == '-') rest.remove_prefix(1);
  if (rest.empty() || rest[0] < '0' || rest[0] > '9') return false;
  for (char c : rest) {
    if (!((c >= '0' && c <= '9') || c == '.')) return false;
  }
  return true;
}

bool IsShell(std::string_view p) {
  return IsOneOf(p, {"sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "ash", "yash",
                     "posh", "rbash", "fish", "csh", "tcsh"});
}

bool IsDownloader(std::string_view p) {
  return IsOneOf(p, {"curl", "wget", "wget2", "fetch", "http", "https", "xh", "xhs", "curlie",
                     "lwp-request", "GET"});
}

std::string_view MentionedDownloader(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto word_char = [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-' || c == '.';
    };
    while (i < text.size() && !word_char(text[i])) ++i;
    size_t start = i;
    while (i < text.size() && word_char(text[i])) ++i;
    if (i > start && IsDownloader(text.substr(start, i - start))) {
      return text.substr(start, i - start);
    }
  }
  return {};
}

std::optional<Level> Unwrap(const Level& level) {
  const std::string_view p = level.program();
  if (p.empty()) return std::nullopt;
  auto wrapped = [&](const OptionSpec& spec) -> std::optional<Level> {
    Parsed parsed = ParseOptions(level.args, spec);
    if (parsed.command == kNone) return std::nullopt;
    return Sub(level, parsed.command);
  };
  if (p == "env") return UnwrapEnv(level);
  if (IsOneOf(p, {"nohup", "catchsegv", "unbuffer", "setsid", "builtin"})) return wrapped({});
  if (p == "nice") return wrapped({"n", {"--adjustment"}});
  if (p == "timeout") return wrapped({"sk", {"--signal", "--kill-after"}, 1});
  if (p == "stdbuf") return wrapped({"ioe", {"--input", "--output", "--error"}});
  if (p == "time") return wrapped({"fo", {"--format", "--output"}});
  if (p == "exec") return wrapped({"a", {}});
  if (p == "fakeroot") return wrapped({"lsi", {"--lib", "--faked"}});
  if (p == "xvfb-run") {
    return wrapped({"efnpsw",
                    {"--error-file", "--auth-file", "--server-num", "--xauth-protocol",
                     "--server-args", "--wait"}});
  }
  if (p == "strace" || p == "ltrace") return wrapped({"abeEIoOpPsSuUXnxAD", {}});
  if (p == "command") {
    Parsed parsed = ParseOptions(level.args, {});
    if (parsed.Has('v') || parsed.Has('V') || parsed.command == kNone) return std::nullopt;
    return Sub(level, parsed.command);
  }
  if (p == "ionice") {
    Parsed parsed =
        ParseOptions(level.args, {"cnpPu", {"--class", "--classdata", "--pid", "--pgid", "--uid"}});
    if (parsed.Has('p') || parsed.Has('P') || parsed.Has('u') || parsed.command == kNone) {
      return std::nullopt;
    }
    return Sub(level, parsed.command);
  }
  if (p == "taskset" || p == "chrt") {
    Parsed parsed = ParseOptions(level.args, {p == "chrt" ? "TPD" : "", {}, 1});
    if (parsed.Has('p') || parsed.HasLong("--pid") || parsed.command == kNone) return std::nullopt;
    return Sub(level, parsed.command);
  }
  if (p == "xargs") {
    return wrapped({"adEILnPs",
                    {"--arg-file", "--delimiter", "--max-lines", "--max-args", "--max-procs",
                     "--max-chars", "--process-slot-var"}});
  }
  if (p == "busybox" || p == "toybox") {
    if (level.args.size() < 2 || level.args[1].text.empty() || level.args[1].text[0] == '-') {
      return std::nullopt;
    }
    return Sub(level, 1);
  }
  if (p == "flock") {
    Parsed parsed =
        ParseOptions(level.args, {"wEc", {"--timeout", "--conflict-exit-code", "--command"}, 1});
    if (parsed.Has('c') || parsed.HasLong("--command") || parsed.command == kNone) {
      return std::nullopt;
    }
    return Sub(level, parsed.command);
  }
  if (p == "watch") {
    Parsed parsed = ParseOptions(level.args, {"n", {"--interval"}});
    if (!(parsed.Has('x') || parsed.HasLong("--exec")) || parsed.command == kNone) {
      return std::nullopt;
    }
    return Sub(level, parsed.command);
  }
  if (p == "sudo") {
    Parsed parsed = ParseOptions(
        level.args, {"CDgpRrTtUu",
                     {"--close-from", "--chdir", "--group", "--prompt", "--chroot", "--role",
                      "--type", "--command-timeout", "--other-user", "--user", "--host"}});
    if (parsed.command != kNone && !parsed.Has('e') && !parsed.HasLong("--edit")) {
      return Sub(level, parsed.command);
    }
    if (parsed.Has('s') || parsed.Has('i') || parsed.HasLong("--shell") ||
        parsed.HasLong("--login")) {
      return Shell(level);
    }
    return std::nullopt;
  }
  if (p == "doas") {
    Parsed parsed = ParseOptions(level.args, {"Cu", {}});
    if (parsed.command != kNone) return Sub(level, parsed.command);
    if (parsed.Has('s')) return Shell(level);
    return std::nullopt;
  }
  if (p == "pkexec" || p == "run0") {
    Parsed parsed =
        ParseOptions(level.args, {"ugD",
                                  {"--user", "--group", "--nice", "--chdir", "--setenv", "--unit",
                                   "--property", "--description", "--slice", "--machine"}});
    if (parsed.command != kNone) return Sub(level, parsed.command);
    return Shell(level);
  }
  if (p == "su" || p == "runuser") {
    Parsed parsed =
        ParseOptions(level.args, {"cCgGsuw",
                                  {"--command", "--session-command", "--group", "--supp-group",
                                   "--shell", "--user", "--whitelist-environment"}});
    if (parsed.Has('c') || parsed.Has('C') || parsed.HasLong("--command") ||
        parsed.HasLong("--session-command")) {
      return std::nullopt;  // the command is a shell string: ShellCodeOf
    }
    if (p == "runuser" && parsed.Has('u') && parsed.command != kNone) {
      return Sub(level, parsed.command);
    }
    return Shell(level);
  }
  if (p == "chroot") {
    Parsed parsed = ParseOptions(level.args, {"", {"--userspec", "--groups"}, 1});
    if (parsed.command != kNone) return Sub(level, parsed.command);
    return level.args.size() >= 2 ? std::optional<Level>(Shell(level)) : std::nullopt;
  }
  if (IsPython(p)) return UnwrapPythonModule(level);
  return std::nullopt;
}

std::optional<ShellCode> ShellCodeOf(const Level& level) {
  const std::string_view p = level.program();
  const std::vector<Arg>& args = level.args;
  if (IsShell(p)) {
    ShellArgs sa = ParseShellArgs(level);
    if (!sa.has_c || sa.operand == kNone) return std::nullopt;
    const std::string& text = args[sa.operand].text;
    if (text.rfind("--command=", 0) == 0) {
      return ShellCode{text.substr(std::string_view("--command=").size()), nullptr};
    }
    return ShellCode{text, args[sa.operand].word};
  }
  auto joined = [&](size_t from) -> std::optional<ShellCode> {
    if (from >= args.size()) return std::nullopt;
    ShellCode code;
    for (size_t i = from; i < args.size(); ++i) {
      if (i > from) code.text.push_back(' ');
      code.text += args[i].text;
    }
    if (from + 1 == args.size()) code.word = args[from].word;
    return code;
  };
  if (p == "eval") return joined(1);
  if (p == "watch") {
    Parsed parsed = ParseOptions(level.args, {"n", {"--interval"}});
    if (parsed.Has('x') || parsed.HasLong("--exec") || parsed.command == kNone) {
      return std::nullopt;
    }
    return joined(parsed.command);
  }
  if (p == "su" || p == "runuser" || p == "flock" || p == "script") {
    for (size_t i = 1; i < args.size(); ++i) {
      const std::string& a = args[i].text;
      if (a == "--") break;
      if ((a == "-c" || a == "-C" || a == "--command" || a == "--session-command") &&
          i + 1 < args.size()) {
        return ShellCode{args[i + 1].text, args[i + 1].word};
      }
      if (a.rfind("--command=", 0) == 0) {
        return ShellCode{a.substr(std::string_view("--command=").size()), nullptr};
      }
      // A cluster ending in c: su -lc 'cmd'.
      if (a.size() > 2 && a[0] == '-' && a[1] != '-' && a.back() == 'c' && i + 1 < args.size()) {
        return ShellCode{args[i + 1].text, args[i + 1].word};
      }
    }
  }
  return std::nullopt;
}

std::vector<Level> FindActions(const Level& level) {
  std::vector<Level> actions;
  if (level.program() != "find") return actions;
  const std::vector<Arg>& args = level.args;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i].text;
    if (!IsOneOf(a, {"-exec", "-execdir", "-ok", "-okdir"})) continue;
    Level action;
    action.env = level.env;
    size_t j = i + 1;
    while (j < args.size() && args[j].text != ";" && args[j].text != "+") {
      action.args.push_back(args[j]);
      ++j;
    }
    if (!action.args.empty()) actions.push_back(std::move(action));
    i = j;
  }
  return actions;
}

bool ReadsCodeFromStdin(const Level& level) {
  const std::string_view p = level.program();
  if (IsShell(p)) {
    ShellArgs sa = ParseShellArgs(level);
    if (sa.has_c) return false;
    if (sa.has_s || sa.operand == kNone) return true;
    return IsStdinPath(level.args[sa.operand].text);
  }
  if (p == "source" || p == ".") {
    return level.args.size() >= 2 && IsStdinPath(level.args[1].text);
  }
  if (std::optional<Interpreter> in = InterpreterOf(p)) {
    bool code_option = false;
    size_t code = InterpreterCode(level, *in, &code_option);
    if (code_option) return false;
    return code == kNone || IsStdinPath(level.args[code].text);
  }
  return false;
}

std::vector<const Arg*> CodeArgs(const Level& level) {
  std::vector<const Arg*> out;
  if (level.args.empty()) return out;
  if (!level.args[0].literal()) out.push_back(&level.args[0]);
  const std::string_view p = level.program();
  if (IsShell(p)) {
    ShellArgs sa = ParseShellArgs(level);
    if (sa.operand != kNone) out.push_back(&level.args[sa.operand]);
  } else if (p == "source" || p == "." || p == "eval") {
    for (size_t i = 1; i < level.args.size() && (p == "eval" || i == 1); ++i) {
      out.push_back(&level.args[i]);
    }
  } else if (std::optional<Interpreter> in = InterpreterOf(p)) {
    bool code_option = false;
    size_t code = InterpreterCode(level, *in, &code_option);
    if (code != kNone) out.push_back(&level.args[code]);
  }
  return out;
}

}  // namespace airlock::cmdpolicy::internal
