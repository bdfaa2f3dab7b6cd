// The two pattern languages of a SandboxSpec, defined once here so that validation and the
// components that match them (src/cmdpolicy, src/artifact) agree on what a pattern means.
//
// Argv patterns (commandPolicy.deny[].argv) match the argv of one command, word by word:
//   "terraform ** apply"   "pip download *"   "git push --force*"
// Words are separated by spaces. The first word is a program name, compared with the basename
// of argv[0] ("terraform" matches "/usr/local/bin/terraform"); it has no '/' and no '*'. Every
// other word is one of:
//   *      exactly one argument
//   **     any number of arguments, none included
//   text   one argument equal to `text`, where each '*' inside the text stands for any run of
//          characters ("--force*" matches "--force" and "--force-with-lease")
// A pattern matches an argv that begins with it: trailing arguments are always allowed, so
// "npm publish" matches "npm publish --tag next". Shell operators (| || && ; & |&) are refused:
// a pattern is about one command, and shell strings are split into commands before matching.
//
// Path globs (artifacts.allowBinaries[].path) match absolute sandbox paths, segment by segment:
//   "/sandbox/artifacts/dist/*.whl"   "/sandbox/artifacts/**/*.png"
// A segment is literal text in which '*' stands for any run of characters other than '/', or
// "**", any number of whole segments (none included). The glob must match the whole path.
//
// Pure functions, thread-safe.
#ifndef AIRLOCK_SPEC_PATTERNS_H_
#define AIRLOCK_SPEC_PATTERNS_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::spec {

inline constexpr size_t kMaxPatternWords = 32;
inline constexpr size_t kMaxPatternBytes = 1024;

// One word of an argv pattern.
struct PatternWord {
  enum class Kind {
    kText,      // literal text, '*' inside standing for any run of characters
    kOne,       // "*"
    kAnyCount,  // "**"
  };
  Kind kind = Kind::kText;
  std::string text;

  friend bool operator==(const PatternWord&, const PatternWord&) = default;
};

struct ArgvPattern {
  std::vector<PatternWord> words;  // words[0] is the program name (kText without '*')

  friend bool operator==(const ArgvPattern&, const ArgvPattern&) = default;
};

// Why `text` is not an argv pattern ("" when it is one), e.g.
//   "\"curl * | sh\": \"|\" is a shell operator; a pattern matches the argv of one command".
std::string ArgvPatternProblem(std::string_view text);

// The pattern written as `text`; call only when ArgvPatternProblem(text) is empty (otherwise
// the result is unspecified but safe).
ArgvPattern ParseArgvPattern(std::string_view text);

// Whether `argv` begins with `pattern` (words[0] against the basename of argv[0]). Linear in
// argv.size() times pattern.words.size() at worst.
bool MatchArgvPattern(const ArgvPattern& pattern, const std::vector<std::string>& argv);

// The number of leading words of `argv` that `pattern` matched when MatchArgvPattern is true:
// the words up to and including the last one matched by a non-"**" word.
size_t MatchedArgvWords(const ArgvPattern& pattern, const std::vector<std::string>& argv);

// Why `glob` is not a path glob ("" when it is one): it must be an absolute, normalized path
// (no "//", "." or ".." segments, no trailing '/') of at most 4095 bytes, without control
// characters, where "**" is a whole segment.
std::string PathGlobProblem(std::string_view glob);

// Whether `path` (absolute, normalized) matches `glob` (valid by PathGlobProblem).
bool MatchPathGlob(std::string_view glob, std::string_view path);

// Whether `text` matches `glob`, in which '*' stands for any run of characters (none included)
// and every other character for itself. Linear-time two-pointer match, no backtracking blowup.
bool MatchWordGlob(std::string_view glob, std::string_view text);

}  // namespace airlock::spec

#endif  // AIRLOCK_SPEC_PATTERNS_H_
