// A tolerant parser for the shell text of `sh -c '...'` and friends: enough of the POSIX shell
// and bash grammar to find every simple command, the pipelines between them, the command and
// process substitutions inside their words, redirections and here-documents. Private to
// src/cmdpolicy (the policy's rules are applied to what it finds).
//
// It never executes or expands anything: a word keeps its expansions as written ("$HOME",
// "$(curl x)") with its quotes removed, and records whether it had any (Word::literal) and the
// parsed scripts of its substitutions. What it cannot parse with confidence (an unterminated
// quote, substitution or here-document, nesting deeper than kMaxShellDepth, text longer than
// kMaxShellBytes) is reported in ShellParse::problems while everything before the problem is
// still returned, so rules can be applied to what could be parsed.
//
// Bounded: at most kMaxShellBytes of text are read, nesting is cut at kMaxShellDepth, and the
// parse is linear in the text for each level of nesting. Never throws, thread-safe.
#ifndef AIRLOCK_CMDPOLICY_INTERNAL_SHELL_H_
#define AIRLOCK_CMDPOLICY_INTERNAL_SHELL_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::cmdpolicy::internal {

inline constexpr size_t kMaxShellBytes = 256 << 10;
inline constexpr size_t kMaxShellDepth = 32;

struct Script;

struct Word {
  // The word with quotes and line continuations removed; expansions stay as written.
  std::string text;
  // No parameter expansion, command or process substitution or arithmetic: `text` is exactly
  // the argument the program would see (quoting aside, pathname globbing is not modelled).
  bool literal = true;
  // The whole word is a process substitution, <(...) or >(...).
  bool process_substitution = false;
  // The parsed scripts of the command and process substitutions in the word, in order.
  std::vector<Script> substitutions;
};

struct Redirect {
  std::string op;  // "<", ">", ">>", "<<", "<<-", "<<<", "<&", ">&", "&>", "&>>", "<>", ">|"
  Word target;     // the file, descriptor, here-string or here-document delimiter
  // Here-documents: the body, and its expansions (none when the delimiter was quoted).
  std::string heredoc;
  std::vector<Script> heredoc_substitutions;
};

// One stage of a pipeline: a simple command, or a compound command ("( ... )", "{ ...; }",
// if/while/until/for/select/case, a function definition) whose inner commands are in `body`.
struct Command {
  bool compound = false;
  std::vector<Word> assignments;  // simple: NAME=value words before the program
  std::vector<Word> words;        // simple: the program and its arguments
  std::vector<Word> data;         // compound: words that are not commands (for-lists, patterns)
  std::vector<Script> body;       // compound: the lists inside, in order
  std::vector<Redirect> redirects;
};

struct Pipeline {
  std::vector<Command> stages;  // "a | b | c" has three
};

struct Script {
  std::vector<Pipeline> pipelines;  // in order, whatever separated them (; && || & newline)
};

struct ShellParse {
  Script script;
  // What could not be parsed with confidence, e.g. "unterminated single quote at byte 12".
  std::vector<std::string> problems;
};

ShellParse ParseShell(std::string_view text);

// `word` quoted for a shell so that it parses back to exactly `word` (single quotes unless it
// needs none).
std::string QuoteWord(std::string_view word);

}  // namespace airlock::cmdpolicy::internal

#endif  // AIRLOCK_CMDPOLICY_INTERNAL_SHELL_H_
