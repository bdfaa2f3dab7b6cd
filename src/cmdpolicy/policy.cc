#include "cmdpolicy/policy.h"

#include <map>
#include <optional>
#include <utility>

#include "cmdpolicy/internal/levels.h"
#include "cmdpolicy/internal/rules.h"
#include "cmdpolicy/internal/shell.h"
#include "command/report.h"
#include "common/status.h"
#include "fmt/format.h"
#include "spec/patterns.h"

namespace airlock::cmdpolicy {

struct Policy::Rules {
  struct SpecRule {
    std::string name;  // "spec/<name>"
    std::string reason;
    std::vector<spec::ArgvPattern> patterns;
  };
  std::vector<SpecRule> spec_rules;
  bool strict_shell = false;
};

namespace {

using internal::Arg;
using internal::Command;
using internal::Level;
using internal::Pipeline;
using internal::Redirect;
using internal::Script;
using internal::Word;

using Env = std::map<std::string, std::string>;

// Wrappers deeper than this (nohup nohup nohup ...) are not looked through; shell code nested
// deeper than this (sh -c "sh -c '...'") is not parsed. Both say so in the notes.
constexpr size_t kMaxLevels = 32;
constexpr size_t kMaxDepth = 32;
constexpr size_t kMaxNotes = 8;
constexpr size_t kMaxCommandText = 200;

// `text` cut to at most `max` bytes without splitting a UTF-8 sequence.
std::string Cut(std::string text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max - 3;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text + "...";
}

std::string WordsText(const std::vector<Arg>& args) {
  std::string out;
  for (const Arg& a : args) {
    if (!out.empty()) out.push_back(' ');
    // A word with expansions is shown as written rather than quoted into a literal.
    out += a.literal() ? internal::QuoteWord(a.text) : a.text;
    if (out.size() > kMaxCommandText) break;
  }
  return Cut(std::move(out), kMaxCommandText);
}

std::string CommandText(const Command& c) {
  if (c.compound) return "{ ... }";
  std::vector<Arg> args;
  for (const Word& w : c.assignments) args.push_back({w.text, &w});
  for (const Word& w : c.words) args.push_back({w.text, &w});
  return WordsText(args);
}

std::string PipelineText(const Pipeline& p) {
  std::string out;
  for (const Command& c : p.stages) {
    if (!out.empty()) out += " | ";
    out += CommandText(c);
    if (out.size() > kMaxCommandText) break;
  }
  return Cut(std::move(out), kMaxCommandText);
}

// Where a rule matched: the simple command as written, shown in the decision. Rendered only
// for a refusal.
struct Where {
  const Command* command = nullptr;  // parsed shell text, or null for an argv
  const Level* level = nullptr;      // the argv (or find action) otherwise

  std::string Text() const {
    return command != nullptr ? CommandText(*command) : WordsText(level->args);
  }
};

Level LevelOf(const Command& c, const Env& env) {
  Level level;
  level.env = env;
  for (const Word& w : c.assignments) {
    size_t eq = w.text.find('=');
    std::string name = w.text.substr(0, eq);
    if (!name.empty() && name.back() == '+') name.pop_back();
    level.env[name] = eq == std::string::npos ? "" : w.text.substr(eq + 1);
  }
  level.args.reserve(c.words.size());
  for (const Word& w : c.words) level.args.push_back({w.text, &w});
  return level;
}

// The text a literal `echo` or `printf` writes, roughly (its words joined by spaces).
std::optional<std::string> EchoedText(const Command& c) {
  if (c.compound || c.words.empty()) return std::nullopt;
  const std::string_view program = internal::Basename(c.words[0].text);
  if (program != "echo" && program != "printf") return std::nullopt;
  std::string text;
  for (size_t i = 1; i < c.words.size(); ++i) {
    if (!c.words[i].literal) return std::nullopt;
    const std::string& w = c.words[i].text;
    if (program == "echo" && text.empty() && (w == "-n" || w == "-e" || w == "-E")) continue;
    if (!text.empty()) text.push_back(' ');
    text += w;
  }
  return text;
}

// The program's name is computed when the command runs ("$X install", "$(which pip) ...").
bool ComputedProgram(const Level& level) {
  if (level.args.empty() || level.args[0].literal()) return false;
  return level.program().find_first_of("$`(){}") != std::string_view::npos;
}

class Checker {
 public:
  explicit Checker(const Policy::Rules& rules) : rules_(rules) {}

  Decision Run(const std::vector<std::string>& argv) {
    Level level;
    for (const std::string& a : argv) level.args.push_back({a, nullptr});
    if (!level.args.empty()) CheckLevels(level, nullptr, 0, Where{nullptr, &level});
    if (!refused_ && rules_.strict_shell && !decision_.notes.empty()) {
      Refuse("unparseable-shell", {std::string(level.program())}, WordsText(level.args));
      decision_.reason =
          Cut(fmt::format("{} ({})", decision_.reason, decision_.notes[0]), 2 * kMaxCommandText);
    }
    return std::move(decision_);
  }

 private:
  void Note(std::string note) {
    if (decision_.notes.size() < kMaxNotes) decision_.notes.push_back(std::move(note));
  }

  void Refuse(std::string rule, std::vector<std::string> matched, std::string command) {
    refused_ = true;
    decision_.allowed = false;
    decision_.reason = internal::RuleReason(rule);
    decision_.instead = internal::RuleInstead(rule);
    decision_.rule = std::move(rule);
    decision_.matched = std::move(matched);
    decision_.command = Cut(std::move(command), kMaxCommandText);
  }

  void CheckScript(const Script& script, size_t depth, Env env) {
    if (depth > kMaxDepth) {
      Note(fmt::format("shell code nested deeper than {} levels was not checked", kMaxDepth));
      return;
    }
    for (const Pipeline& p : script.pipelines) {
      CheckPipeline(p, depth, env);
      if (refused_) return;
    }
  }

  void CheckPipeline(const Pipeline& p, size_t depth, Env& env) {
    std::string downloader;
    for (size_t i = 0; i < p.stages.size(); ++i) {
      const Command& stage = p.stages[i];
      std::string reader;
      if (i > 0 && StageReadsStdinCode(stage, env, &reader)) {
        if (!downloader.empty()) {
          Refuse("pipe-to-shell/" + downloader, {downloader, "|", reader}, PipelineText(p));
          return;
        }
        // `echo 'apt-get install -y x' | sh`: the echoed words are the shell's script.
        if (std::optional<std::string> code = EchoedText(p.stages[i - 1]);
            code && internal::IsShell(reader)) {
          CheckShellText(*code, fmt::format("text echoed to {}", reader), depth, env);
          if (refused_) return;
        }
      }
      if (downloader.empty()) downloader = StageDownloader(stage, env);
    }
    for (const Command& stage : p.stages) {
      CheckCommand(stage, depth, env);
      if (refused_) return;
    }
  }

  void CheckWordSubstitutions(const Word& w, size_t depth, const Env& env) {
    for (const Script& s : w.substitutions) {
      CheckScript(s, depth + 1, env);
      if (refused_) return;
    }
  }

  void CheckCommand(const Command& c, size_t depth, Env& env) {
    // Substitutions run before the command itself.
    for (const auto* words : {&c.assignments, &c.words, &c.data}) {
      for (const Word& w : *words) {
        CheckWordSubstitutions(w, depth, env);
        if (refused_) return;
      }
    }
    for (const Redirect& r : c.redirects) {
      CheckWordSubstitutions(r.target, depth, env);
      for (const Script& s : r.heredoc_substitutions) CheckScript(s, depth + 1, env);
      if (refused_) return;
    }
    if (c.compound) {
      for (const Script& body : c.body) {
        CheckScript(body, depth + 1, env);
        if (refused_) return;
      }
      return;
    }
    if (c.words.empty()) return;
    Level level = LevelOf(c, env);
    if (level.program() == "export") {
      for (size_t i = 1; i < level.args.size(); ++i) {
        const std::string& a = level.args[i].text;
        size_t eq = a.find('=');
        if (eq != std::string::npos && eq > 0) env[a.substr(0, eq)] = a.substr(eq + 1);
      }
    }
    CheckLevels(level, &c.redirects, depth, Where{&c, &level});
  }

  // Every level of `level0` (the command and what its wrappers run), with the code they run.
  void CheckLevels(const Level& level0, const std::vector<Redirect>* redirects, size_t depth,
                   const Where& where) {
    if (depth > kMaxDepth) {
      Note(fmt::format("shell code nested deeper than {} levels was not checked", kMaxDepth));
      return;
    }
    std::vector<Level> chain;
    chain.reserve(kMaxLevels);
    chain.push_back(level0);
    for (size_t i = 0; i < chain.size(); ++i) {
      const Level level = chain[i];
      if (level.args.empty()) continue;
      if (ComputedProgram(level)) {
        Note(fmt::format("the program of `{}` is only known when it runs",
                         Cut(WordsText(level.args), 60)));
      }
      if (CheckCodeSources(level, redirects, where)) return;
      if (std::optional<internal::Hit> hit = internal::CheckPrivilege(level)) {
        Refuse(std::move(hit->rule), std::move(hit->matched), where.Text());
        return;
      }
      if (CheckSpecRules(level, where)) return;
      if (std::optional<internal::Hit> hit = internal::CheckInstalls(level)) {
        Refuse(std::move(hit->rule), std::move(hit->matched), where.Text());
        return;
      }
      if (std::optional<internal::ShellCode> code = internal::ShellCodeOf(level)) {
        CheckShellText(code->text, fmt::format("{} text", level.program()), depth, level.env);
        if (refused_) return;
      }
      if (redirects != nullptr && internal::IsShell(level.program()) &&
          internal::ReadsCodeFromStdin(level)) {
        // A here-document fed to a shell is its script.
        for (const Redirect& r : *redirects) {
          if (r.op != "<<" && r.op != "<<-") continue;
          CheckShellText(r.heredoc, fmt::format("{} here-document", level.program()), depth,
                         level.env);
          if (refused_) return;
        }
      }
      for (const Level& action : internal::FindActions(level)) {
        CheckLevels(action, nullptr, depth + 1, Where{nullptr, &action});
        if (refused_) return;
      }
      if (std::optional<Level> next = internal::Unwrap(level)) {
        if (chain.size() >= kMaxLevels) {
          Note(fmt::format("more than {} wrapped commands; the rest was not checked", kMaxLevels));
          return;
        }
        chain.push_back(std::move(*next));
      }
    }
  }

  void CheckShellText(const std::string& text, const std::string& what, size_t depth,
                      const Env& env) {
    internal::ShellParse parse = internal::ParseShell(text);
    for (const std::string& problem : parse.problems) Note(fmt::format("{}: {}", what, problem));
    CheckScript(parse.script, depth + 1, env);
  }

  // Code this level runs that comes from a downloader: `bash -c "$(curl …)"`, `sh <(curl …)`,
  // `eval "$(wget -O- …)"`, `$(curl …)` as the program, a shell reading `< <(curl …)` or a
  // here-string or here-document made from a download.
  bool CheckCodeSources(const Level& level, const std::vector<Redirect>* redirects,
                        const Where& where) {
    for (const Arg* arg : internal::CodeArgs(level)) {
      if (arg->word == nullptr) continue;
      std::string downloader = WordDownloader(*arg->word);
      if (!downloader.empty()) {
        Refuse("pipe-to-shell/" + downloader, {downloader, "->", std::string(level.program())},
               where.Text());
        return true;
      }
    }
    if (redirects == nullptr || !internal::ReadsCodeFromStdin(level)) return false;
    for (const Redirect& r : *redirects) {
      std::string downloader;
      if (r.op == "<" || r.op == "<<<") downloader = WordDownloader(r.target);
      for (const Script& s : r.heredoc_substitutions) {
        if (downloader.empty()) downloader = ScriptDownloader(s, level.env);
      }
      if (!downloader.empty()) {
        Refuse("pipe-to-shell/" + downloader, {downloader, r.op, std::string(level.program())},
               where.Text());
        return true;
      }
    }
    return false;
  }

  bool CheckSpecRules(const Level& level, const Where& where) {
    if (rules_.spec_rules.empty()) return false;
    const std::vector<std::string> argv = level.Argv();
    for (const Policy::Rules::SpecRule& rule : rules_.spec_rules) {
      for (const spec::ArgvPattern& pattern : rule.patterns) {
        size_t n = spec::MatchedArgvWords(pattern, argv);
        if (n == 0) continue;
        std::vector<std::string> matched(argv.begin(), argv.begin() + static_cast<long>(n));
        matched[0] = std::string(level.program());
        Refuse(rule.name, std::move(matched), where.Text());
        decision_.reason =
            rule.reason.empty() ? "refused by the sandbox spec's command policy" : rule.reason;
        decision_.instead.clear();
        return true;
      }
    }
    return false;
  }

  // The first downloader a command runs anywhere (its levels, its substitutions, its body),
  // or "".
  std::string StageDownloader(const Command& c, const Env& env) {
    for (const auto* words : {&c.assignments, &c.words, &c.data}) {
      for (const Word& w : *words) {
        std::string d = WordDownloader(w);
        if (!d.empty()) return d;
      }
    }
    for (const Redirect& r : c.redirects) {
      std::string d = WordDownloader(r.target);
      for (const Script& s : r.heredoc_substitutions) {
        if (d.empty()) d = ScriptDownloader(s, env);
      }
      if (!d.empty()) return d;
    }
    for (const Script& body : c.body) {
      std::string d = ScriptDownloader(body, env);
      if (!d.empty()) return d;
    }
    if (c.compound || c.words.empty()) return "";
    return LevelsDownloader(LevelOf(c, env));
  }

  std::string LevelsDownloader(Level level) {
    for (size_t i = 0; i < kMaxLevels; ++i) {
      std::string_view p = level.program();
      if (internal::IsDownloader(p)) return std::string(p);
      if (std::optional<internal::ShellCode> code = internal::ShellCodeOf(level)) {
        std::string_view d = internal::MentionedDownloader(code->text);
        if (!d.empty()) return std::string(d);
      }
      for (const Level& action : internal::FindActions(level)) {
        if (internal::IsDownloader(action.program())) return std::string(action.program());
      }
      std::optional<Level> next = internal::Unwrap(level);
      if (!next) break;
      level = std::move(*next);
    }
    return "";
  }

  std::string WordDownloader(const Word& w) {
    for (const Script& s : w.substitutions) {
      std::string d = ScriptDownloader(s, {});
      if (!d.empty()) return d;
    }
    return "";
  }

  std::string ScriptDownloader(const Script& s, const Env& env) {
    for (const Pipeline& p : s.pipelines) {
      for (const Command& c : p.stages) {
        std::string d = StageDownloader(c, env);
        if (!d.empty()) return d;
      }
    }
    return "";
  }

  // Whether a pipeline stage runs a shell or interpreter that reads its code from stdin; its
  // program in *reader.
  bool StageReadsStdinCode(const Command& c, const Env& env, std::string* reader) {
    if (c.compound) {
      for (const Script& body : c.body) {
        for (const Pipeline& p : body.pipelines) {
          for (const Command& inner : p.stages) {
            if (StageReadsStdinCode(inner, env, reader)) return true;
          }
        }
      }
      return false;
    }
    if (c.words.empty()) return false;
    Level level = LevelOf(c, env);
    for (size_t i = 0; i < kMaxLevels; ++i) {
      if (internal::ReadsCodeFromStdin(level)) {
        *reader = std::string(level.program());
        return true;
      }
      std::optional<Level> next = internal::Unwrap(level);
      if (!next) break;
      level = std::move(*next);
    }
    return false;
  }

  const Policy::Rules& rules_;
  Decision decision_;
  bool refused_ = false;
};

}  // namespace

absl::StatusOr<Policy> Policy::Create(const spec::CommandPolicy& spec) {
  auto rules = std::make_shared<Rules>();
  rules->strict_shell = spec.strict_shell;
  for (size_t i = 0; i < spec.deny.size(); ++i) {
    const spec::CommandDenyRule& deny = spec.deny[i];
    Rules::SpecRule rule;
    rule.name = "spec/" + deny.name;
    rule.reason = deny.reason;
    if (deny.name.empty()) {
      return InvalidArgument(fmt::format("commandPolicy.deny[{}].name: required", i));
    }
    for (size_t j = 0; j < deny.argv.size(); ++j) {
      std::string problem = spec::ArgvPatternProblem(deny.argv[j]);
      if (!problem.empty()) {
        return InvalidArgument(fmt::format("commandPolicy.deny[{}].argv[{}]: {}", i, j, problem));
      }
      rule.patterns.push_back(spec::ParseArgvPattern(deny.argv[j]));
    }
    rules->spec_rules.push_back(std::move(rule));
  }
  return Policy(std::move(rules));
}

Decision Policy::Check(const std::vector<std::string>& argv) const {
  return Checker(*rules_).Run(argv);
}

CommandResult BlockedResult(const CommandSpec& command, const Decision& decision,
                            const Redactor& redactor) {
  CommandResult r;
  r.classification = Classification::kPolicyBlocked;
  r.exit_code = 126;
  std::string refused = redactor.Redact(decision.command);
  nlohmann::json data = {{"rule", decision.rule},       {"matched", decision.matched},
                         {"command", refused},          {"reason", decision.reason},
                         {"instead", decision.instead}, {"notes", decision.notes}};
  r.violations.push_back({kCommandPolicyViolation,
                          fmt::format("{}: {}", decision.rule, decision.reason), std::move(data)});
  r.failure = FailureKind::kPolicyBlocked;
  r.failure_detail = decision.rule;
  r.key_lines.push_back("refused: " + refused);
  for (const std::string& note : decision.notes) r.key_lines.push_back("note: " + note);
  r.report = RenderReport(command, r, &redactor);
  return r;
}

}  // namespace airlock::cmdpolicy
