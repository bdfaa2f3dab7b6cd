#include "spec/patterns.h"

#include <string>

#include "fmt/format.h"
#include "spec/internal/text.h"

namespace airlock::spec {
namespace {

using internal::Quote;

constexpr size_t kMaxPathBytes = 4095;
constexpr std::string_view kShellOperators[] = {"|", "||", "&&", ";", "&", "|&", ";;"};

std::vector<std::string_view> SplitWords(std::string_view text) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t') ++i;
    if (i > start) words.push_back(text.substr(start, i - start));
  }
  return words;
}

std::vector<std::string_view> SplitSegments(std::string_view path) {
  std::vector<std::string_view> segments;
  size_t start = 1;  // after the leading '/'
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    segments.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return segments;
}

bool HasControl(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool WordMatches(const PatternWord& word, std::string_view arg) {
  return word.kind == PatternWord::Kind::kOne || MatchWordGlob(word.text, arg);
}

constexpr size_t kNoMatch = std::string::npos;

// The two-pointer wildcard match: pattern items [0, n_pattern) against text items [0, n_text),
// where is_star(i) says pattern item i stands for any run of text items and matches(i, j)
// whether pattern item i matches text item j. On a mismatch only the most recent star needs to
// take one more item, so the match is O(n_pattern × n_text) at worst, never exponential. With
// `prefix`, the pattern need only match a prefix of the text. Returns the number of text items
// up to the last one matched by a non-star item (the whole text without `prefix`), or kNoMatch.
template <typename IsStar, typename Matches>
size_t Wildcard(size_t n_pattern, size_t n_text, IsStar is_star, Matches matches, bool prefix) {
  size_t pi = 0, ti = 0;
  size_t star_pi = kNoMatch, star_ti = 0;
  size_t last_end = 0;
  while (true) {
    if (prefix && pi == n_pattern) return last_end;
    if (!prefix && ti == n_text) {
      while (pi < n_pattern && is_star(pi)) ++pi;
      return pi == n_pattern ? n_text : kNoMatch;
    }
    if (pi < n_pattern && is_star(pi)) {
      star_pi = pi++;
      star_ti = ti;
      continue;
    }
    if (pi < n_pattern && ti < n_text && matches(pi, ti)) {
      ++pi;
      last_end = ++ti;
      continue;
    }
    if (star_pi != kNoMatch && star_ti < n_text) {
      pi = star_pi + 1;
      ti = ++star_ti;
      continue;
    }
    return kNoMatch;
  }
}

// The argv index after the last word `pattern` matched, or kNoMatch.
size_t MatchFrom(const ArgvPattern& pattern, const std::vector<std::string>& argv) {
  if (pattern.words.empty() || argv.empty()) return kNoMatch;
  if (!MatchWordGlob(pattern.words[0].text, Basename(argv[0]))) return kNoMatch;
  const std::vector<PatternWord>& p = pattern.words;
  size_t end = Wildcard(
      p.size() - 1, argv.size() - 1,
      [&](size_t i) { return p[i + 1].kind == PatternWord::Kind::kAnyCount; },
      [&](size_t i, size_t j) { return WordMatches(p[i + 1], argv[j + 1]); }, /*prefix=*/true);
  return end == kNoMatch ? kNoMatch : end + 1;
}

}  // namespace

std::string ArgvPatternProblem(std::string_view text) {
  if (text.size() > kMaxPatternBytes) {
    return fmt::format("must be at most {} bytes", kMaxPatternBytes);
  }
  if (text.find_first_of("\r\n") != std::string_view::npos) return "must be on one line";
  for (char c : text) {
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
      return "must not contain control characters";
    }
  }
  std::vector<std::string_view> words = SplitWords(text);
  if (words.empty()) return "must not be empty";
  if (words.size() > kMaxPatternWords) {
    return fmt::format("{} has {} words; the limit is {}", Quote(text), words.size(),
                       kMaxPatternWords);
  }
  for (std::string_view word : words) {
    for (std::string_view op : kShellOperators) {
      if (word == op) {
        return fmt::format(
            "{}: {} is a shell operator; a pattern matches the argv of one command (shell "
            "strings are split into commands before matching, and pipes into a shell are "
            "refused by the built-in pipe-to-shell rules)",
            Quote(text), Quote(word));
      }
    }
  }
  std::string_view program = words[0];
  if (program.find('*') != std::string_view::npos) {
    return fmt::format("{}: the first word must be a program name, without '*'", Quote(text));
  }
  if (program.find('/') != std::string_view::npos) {
    return fmt::format(
        "{}: the first word must be a program name without '/' (it is compared with the "
        "basename of argv[0])",
        Quote(text));
  }
  if (program.find('=') != std::string_view::npos) {
    return fmt::format(
        "{}: the first word must be a program name, not a variable assignment (assignments "
        "before a command are not part of its argv)",
        Quote(text));
  }
  for (size_t i = 1; i < words.size(); ++i) {
    std::string_view word = words[i];
    if (word != "**" && word.find("**") != std::string_view::npos) {
      return fmt::format(
          "{}: \"**\" must be a word of its own (it stands for any number of "
          "arguments)",
          Quote(text));
    }
  }
  return "";
}

ArgvPattern ParseArgvPattern(std::string_view text) {
  ArgvPattern pattern;
  for (std::string_view word : SplitWords(text)) {
    PatternWord w;
    if (!pattern.words.empty() && word == "**") {
      w.kind = PatternWord::Kind::kAnyCount;
    } else if (!pattern.words.empty() && word == "*") {
      w.kind = PatternWord::Kind::kOne;
    }
    w.text = std::string(word);
    pattern.words.push_back(std::move(w));
  }
  return pattern;
}

bool MatchArgvPattern(const ArgvPattern& pattern, const std::vector<std::string>& argv) {
  return MatchFrom(pattern, argv) != kNoMatch;
}

size_t MatchedArgvWords(const ArgvPattern& pattern, const std::vector<std::string>& argv) {
  size_t end = MatchFrom(pattern, argv);
  return end == kNoMatch ? 0 : end;
}

std::string PathGlobProblem(std::string_view glob) {
  if (glob.empty()) return "must not be empty";
  if (glob.size() > kMaxPathBytes) return fmt::format("must be at most {} bytes", kMaxPathBytes);
  if (glob[0] != '/') return fmt::format("{} is not an absolute path", Quote(glob));
  if (HasControl(glob)) return "must not contain NUL or control characters";
  if (glob.find("//") != std::string_view::npos) return "must not contain \"//\"";
  if (glob.size() > 1 && glob.back() == '/') return "must not end with \"/\"";
  for (std::string_view segment : SplitSegments(glob)) {
    if (segment == "..") return "must not contain \"..\"";
    if (segment == ".") return "must not contain \".\" segments";
    if (segment != "**" && segment.find("**") != std::string_view::npos) {
      return fmt::format("{}: \"**\" must be a whole path segment", Quote(glob));
    }
  }
  return "";
}

bool MatchPathGlob(std::string_view glob, std::string_view path) {
  if (glob.empty() || path.empty() || glob[0] != '/' || path[0] != '/') return false;
  const std::vector<std::string_view> p = SplitSegments(glob);
  const std::vector<std::string_view> a = SplitSegments(path);
  return Wildcard(
             p.size(), a.size(), [&](size_t i) { return p[i] == "**"; },
             [&](size_t i, size_t j) { return MatchWordGlob(p[i], a[j]); },
             /*prefix=*/false) != kNoMatch;
}

bool MatchWordGlob(std::string_view glob, std::string_view text) {
  return Wildcard(
             glob.size(), text.size(), [&](size_t i) { return glob[i] == '*'; },
             [&](size_t i, size_t j) { return glob[i] == text[j]; }, /*prefix=*/false) != kNoMatch;
}

}  // namespace airlock::spec
