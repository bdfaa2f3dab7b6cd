#include "command/report.h"

#include <string.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <unordered_set>
#include <utility>

#include "command/internal/output_rules.h"
#include "common/units.h"
#include "fmt/format.h"
#include "re2/re2.h"
#include "re2/set.h"
#include "redact/redactor.h"

namespace airlock {
namespace {

using command_internal::LineRule;
using command_internal::Role;
using command_internal::Signal;
using command_internal::Tier;

// Lines are tested against the rules only inside blocks that some rule matches somewhere, so
// most of a long log is read once by one DFA.
constexpr size_t kBlockBytes = 4096;
// An error line is placed at a stack frame only if the frame follows within this many lines.
constexpr size_t kMaxFrameGap = 40;
// Lines quoted when no rule matched.
constexpr size_t kTailLines = 5;
constexpr int kMaxGroups = 16;

// ---- Text helpers.

// Removes terminal escape sequences (CSI "ESC [ ... final", OSC "ESC ] ... BEL or ESC \"), never
// a newline, so line counts stay.
std::string StripAnsi(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '\x1b') {
      out.push_back(s[i++]);
      continue;
    }
    ++i;
    if (i >= s.size()) break;
    const char kind = s[i++];
    if (kind == '[') {
      while (i < s.size() && s[i] != '\n' && !(s[i] >= 0x40 && s[i] <= 0x7e)) ++i;
      if (i < s.size() && s[i] != '\n') ++i;
    } else if (kind == ']') {
      while (i < s.size() && s[i] != '\n' && s[i] != '\a' && s[i] != '\x1b') ++i;
      if (i < s.size() && s[i] == '\a') ++i;
      if (i + 1 < s.size() && s[i] == '\x1b' && s[i + 1] == '\\') i += 2;
    }
  }
  return out;
}

// Cuts `s` to at most `max` bytes, "..." included, at a UTF-8 character boundary.
std::string TruncateBytes(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
  s.resize(cut);
  s += "...";
  return s;
}

// One line fit to quote: trimmed, tabs and control characters replaced, at most `max` bytes.
std::string CleanLine(std::string_view s, size_t max) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  std::string out;
  out.reserve(std::min(s.size(), max + 1));
  for (size_t i = 0; i < s.size() && out.size() <= max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\t' || c == '\n' || c == '\r') {
      out.push_back(' ');
    } else if (c < 0x20 || c == 0x7f) {
      out.push_back('?');
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return TruncateBytes(std::move(out), max);
}

// The number of display columns of UTF-8 `s`, approximated as its code points.
size_t Columns(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

// `s` on one line of at most `columns` columns (its indentation kept).
std::string FitColumns(std::string_view s, size_t columns) {
  size_t indent = 0;
  while (indent < s.size() && indent < columns / 2 && s[indent] == ' ') ++indent;
  std::string line = std::string(indent, ' ') + CleanLine(s.substr(indent), 4 * columns);
  if (Columns(line) <= columns) return line;
  size_t keep = 0, cols = 0;
  while (keep < line.size()) {
    size_t next = keep + 1;
    while (next < line.size() && (static_cast<unsigned char>(line[next]) & 0xc0) == 0x80) ++next;
    if (cols + 1 > columns - 3) break;
    ++cols;
    keep = next;
  }
  line.resize(keep);
  return line + "...";
}

// ---- The compiled rules.

// '$' also matches before a '\r' (output written with CRLF line ends).
std::string AllowCarriageReturn(std::string_view pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      out.push_back(pattern[i]);
      out.push_back(pattern[++i]);
    } else if (pattern[i] == '$') {
      out += "\\r?$";
    } else {
      out.push_back(pattern[i]);
    }
  }
  return out;
}

class Rules {
 public:
  struct Compiled {
    const LineRule* rule;
    std::unique_ptr<RE2> re;
    int groups = 0;
    int detail = -1, text = -1, file = -1, line = -1, col = -1, func = -1, msg = -1;
  };

  static const Rules& Get() {
    static const Rules* rules = new Rules();
    return *rules;
  }

  // The first rule matching `line`, or nullptr.
  const Compiled* Classify(std::string_view line) const {
    std::vector<int> hits;
    RE2::Set::ErrorInfo error{RE2::Set::kNoError};
    if (line_set_->Match(re2::StringPiece(line.data(), line.size()), &hits, &error)) {
      return &rules_[*std::min_element(hits.begin(), hits.end())];
    }
    if (error.kind == RE2::Set::kNoError) return nullptr;
    // The set's DFA ran out of memory on this line: try the rules one by one.
    for (const Compiled& c : rules_) {
      if (RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), *c.re)) return &c;
    }
    return nullptr;
  }

  // Whether any rule may match a line of `block` (several whole lines).
  bool BlockMayMatch(std::string_view block) const {
    RE2::Set::ErrorInfo error{RE2::Set::kNoError};
    return block_set_->Match(re2::StringPiece(block.data(), block.size()), nullptr, &error) ||
           error.kind != RE2::Set::kNoError;
  }

 private:
  Rules() {
    RE2::Options options;
    options.set_log_errors(false);
    options.set_max_mem(int64_t{32} << 20);
    line_set_ = std::make_unique<RE2::Set>(options, RE2::UNANCHORED);
    block_set_ = std::make_unique<RE2::Set>(options, RE2::UNANCHORED);
    for (const LineRule& rule : command_internal::LineRules()) {
      const std::string pattern = AllowCarriageReturn(rule.pattern);
      Compiled c{&rule, std::make_unique<RE2>(pattern, options)};
      // The rules are constants checked by the tests; a broken one would be a build mistake.
      if (!c.re->ok()) abort();
      c.groups = std::min(c.re->NumberOfCapturingGroups(), kMaxGroups - 1);
      for (const auto& [name, index] : c.re->NamedCapturingGroups()) {
        int* slot = name == "detail" ? &c.detail
                    : name == "text" ? &c.text
                    : name == "file" ? &c.file
                    : name == "line" ? &c.line
                    : name == "col"  ? &c.col
                    : name == "func" ? &c.func
                    : name == "msg"  ? &c.msg
                                     : nullptr;
        if (slot != nullptr) *slot = index;
      }
      if (line_set_->Add(pattern, nullptr) < 0 || block_set_->Add("(?m)" + pattern, nullptr) < 0) {
        abort();
      }
      rules_.push_back(std::move(c));
    }
    if (!line_set_->Compile() || !block_set_->Compile()) abort();
  }

  std::vector<Compiled> rules_;
  std::unique_ptr<RE2::Set> line_set_;
  std::unique_ptr<RE2::Set> block_set_;
};

// ---- Scanning.

struct Frame {
  std::string location;  // "file:line[:col]"
  size_t line_no = 0;
};

bool IsLibraryPath(std::string_view file) {
  for (std::string_view marker :
       {"/lib/python", "site-packages", "dist-packages", "<frozen", "/node_modules/",
        "node:", "/src/runtime/", "/usr/lib/go", "/usr/local/go/"}) {
    if (file.find(marker) != std::string_view::npos) return true;
  }
  return false;
}

bool IsLibraryFunction(std::string_view func) {
  for (std::string_view prefix : {"java.", "javax.", "jdk.", "sun.", "org.junit.", "junit.",
                                  "org.opentest4j.", "org.apache.maven.", "org.gradle."}) {
    if (func.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

class Scanner {
 public:
  // Scans one stream; streams are scanned one after the other.
  void Scan(std::string_view text) {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = std::min(text.size(), pos + kBlockBytes);
      if (end < text.size()) {
        const void* nl = memchr(text.data() + end, '\n', text.size() - end);
        end = nl == nullptr ? text.size()
                            : static_cast<size_t>(static_cast<const char*>(nl) - text.data()) + 1;
      }
      std::string_view block = text.substr(pos, end - pos);
      std::string stripped;
      if (block.find('\x1b') != std::string_view::npos) {
        stripped = StripAnsi(block);
        block = stripped;
      }
      if (rules_.BlockMayMatch(block)) {
        size_t start = 0;
        while (start < block.size()) {
          size_t nl = block.find('\n', start);
          size_t line_end = nl == std::string_view::npos ? block.size() : nl;
          OnLine(block.substr(start, line_end - start));
          ++line_no_;
          start = line_end + 1;
        }
      } else {
        line_no_ += static_cast<size_t>(std::count(block.begin(), block.end(), '\n'));
        if (!block.empty() && block.back() != '\n') ++line_no_;
      }
      pos = end;
    }
    FlushPending();
    py_frame_.reset();
    line_no_ += kMaxFrameGap + 1;  // nothing carries over to the next stream
  }

  bool saw(Signal s) const { return seen_[static_cast<size_t>(s)]; }
  const std::string& detail(Signal s) const { return details_[static_cast<size_t>(s)]; }

  std::vector<std::string> KeyLines() const {
    std::vector<const Quoted*> picked;
    for (const Quoted& q : key_) picked.push_back(&q);
    for (const Quoted& q : context_) {
      if (picked.size() >= kMaxKeyLines) break;
      picked.push_back(&q);
    }
    std::sort(picked.begin(), picked.end(),
              [](const Quoted* a, const Quoted* b) { return a->order < b->order; });
    std::vector<std::string> lines;
    for (const Quoted* q : picked) lines.push_back(q->text);
    return lines;
  }

 private:
  struct Quoted {
    size_t order;
    std::string text;
  };
  struct Pending {
    Tier tier;
    size_t line_no;
    std::string text;
  };

  void OnLine(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (pending_ && line_no_ - pending_->line_no > kMaxFrameGap) FlushPending();
    const Rules::Compiled* c = rules_.Classify(line);
    if (c == nullptr) return;
    const LineRule& rule = *c->rule;
    if (rule.signal == Signal::kIgnore) return;

    std::array<re2::StringPiece, kMaxGroups> g;
    c->re->Match(re2::StringPiece(line.data(), line.size()), 0, line.size(), RE2::UNANCHORED,
                 g.data(), c->groups + 1);
    auto group = [&](int index) -> std::string_view {
      if (index < 0 || g[index].data() == nullptr) return {};
      return std::string_view(g[index].data(), g[index].size());
    };
    std::string location(group(c->file));
    if (!location.empty() && !group(c->line).empty()) {
      location += fmt::format(":{}", group(c->line));
      if (!group(c->col).empty()) location += fmt::format(":{}", group(c->col));
    }
    std::string text;
    if (c->msg >= 0 && !location.empty()) {
      text = fmt::format("{}: {}", location, group(c->msg));
    } else if (!group(c->text).empty()) {
      text = std::string(group(c->text));
    } else {
      text = std::string(line);
    }

    switch (rule.role) {
      case Role::kTracebackStart:
        FlushPending();
        py_frame_.reset();
        return;
      case Role::kPythonFrame:
        // The innermost frame outside the standard library and installed packages, else the
        // innermost frame.
        if (!py_frame_ || !IsLibraryPath(group(c->file)) || py_frame_is_library_ ||
            line_no_ - py_frame_->line_no > kMaxFrameGap) {
          py_frame_ = Frame{location, line_no_};
          py_frame_is_library_ = IsLibraryPath(group(c->file));
        } else {
          py_frame_->line_no = line_no_;
        }
        return;
      case Role::kStackFrame:
        if (pending_ && !IsLibraryPath(group(c->file)) && !IsLibraryFunction(group(c->func))) {
          pending_->text = fmt::format("{}: {}", location, pending_->text);
          FlushPending();
        }
        return;
      case Role::kException:
        FlushPending();
        Note(rule.signal, group(c->detail), line, text);
        if (py_frame_ && line_no_ - py_frame_->line_no <= kMaxFrameGap) {
          Quote(rule.tier, line_no_, fmt::format("{}: {}", py_frame_->location, text));
          py_frame_.reset();
        } else {
          pending_ = Pending{rule.tier, line_no_, std::move(text)};
        }
        return;
      case Role::kLine:
        FlushPending();
        Note(rule.signal, group(c->detail), line, text);
        Quote(rule.tier, line_no_, std::move(text));
        return;
    }
  }

  void FlushPending() {
    if (!pending_) return;
    Quote(pending_->tier, pending_->line_no, std::move(pending_->text));
    pending_.reset();
  }

  void Quote(Tier tier, size_t order, std::string text) {
    if (tier == Tier::kSignal) return;
    std::vector<Quoted>& list = tier == Tier::kKey ? key_ : context_;
    if (list.size() >= kMaxKeyLines) return;
    std::string line = CleanLine(text, kMaxKeyLineBytes);
    if (line.empty() || !quoted_.insert(line).second) return;
    list.push_back({order, std::move(line)});
  }

  // Records that a rule of `signal` matched, with its detail (the first one found wins).
  void Note(Signal signal, std::string_view detail, std::string_view line, std::string_view text) {
    if (signal == Signal::kNone || signal == Signal::kIgnore) return;
    const size_t s = static_cast<size_t>(signal);
    seen_[s] = true;
    if (!details_[s].empty()) return;
    std::string found(detail);
    if (found.empty() && signal == Signal::kNetwork) {
      static const RE2 host(R"re((?:host='|https?://)([A-Za-z0-9][A-Za-z0-9.\-]*[A-Za-z0-9]))re");
      RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), host, &found);
    }
    if (found.empty() && signal == Signal::kCompilationError) {
      static const RE2 location(R"re(^((?:\./)?[^ :()]+:\d+))re");
      RE2::PartialMatch(re2::StringPiece(text.data(), text.size()), location, &found);
    }
    while (!found.empty() && strchr(".,;:'\"`", found.back()) != nullptr) found.pop_back();
    details_[s] = CleanLine(found, kMaxKeyLineBytes);
  }

  const Rules& rules_ = Rules::Get();
  size_t line_no_ = 0;
  std::array<bool, 8> seen_{};
  std::array<std::string, 8> details_;
  std::vector<Quoted> key_;
  std::vector<Quoted> context_;
  std::unordered_set<std::string> quoted_;
  std::optional<Pending> pending_;
  std::optional<Frame> py_frame_;
  bool py_frame_is_library_ = false;
};

// The last non-blank lines of `text`, oldest first.
std::vector<std::string> TailLines(std::string_view text, size_t count) {
  std::vector<std::string> lines;
  size_t end = text.size();
  while (end > 0 && lines.size() < count) {
    size_t nl = text.rfind('\n', end - 1);
    size_t start = nl == std::string_view::npos ? 0 : nl + 1;
    std::string_view raw = text.substr(start, end - start);
    std::string line =
        CleanLine(raw.find('\x1b') == std::string_view::npos ? std::string(raw) : StripAnsi(raw),
                  kMaxKeyLineBytes);
    if (!line.empty()) lines.push_back(std::move(line));
    if (nl == std::string_view::npos) break;
    end = nl;
  }
  std::reverse(lines.begin(), lines.end());
  return lines;
}

// ---- Rendering.

std::string ShellQuote(std::string_view arg) {
  if (arg.empty()) return "''";
  bool plain = true;
  for (char c : arg) {
    plain &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             strchr("_@%+=:,./-", c) != nullptr;
  }
  if (plain) return std::string(arg);
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

std::string FormatDuration(int64_t ms) {
  if (ms < 1000) return fmt::format("{} ms", ms);
  if (ms < 60'000) return fmt::format("{:.1f} s", static_cast<double>(ms) / 1000);
  return fmt::format("{} min {} s", ms / 60'000, (ms % 60'000) / 1000);
}

std::string KindWords(FailureKind kind) {
  std::string words = ToString(kind);
  std::replace(words.begin(), words.end(), '_', ' ');
  return words;
}

// What the output says, strongest evidence first: a network failure makes dependencies
// missing downstream, a missing dependency makes compilation fail, and so on.
constexpr std::pair<Signal, FailureKind> kPrecedence[] = {
    {Signal::kNetwork, FailureKind::kNetworkRequired},
    {Signal::kMissingDependency, FailureKind::kMissingDependency},
    {Signal::kToolNotFound, FailureKind::kMissingDependency},
    {Signal::kCompilationError, FailureKind::kCompilationError},
    {Signal::kTestFailure, FailureKind::kTestFailure},
    {Signal::kOutOfMemory, FailureKind::kOutOfMemory},
};

}  // namespace

FailureAnalysis AnalyzeOutput(Classification classification, int exit_code,
                              std::string_view stdout_text, std::string_view stderr_text) {
  FailureAnalysis analysis;
  if (classification == Classification::kOk) return analysis;

  Scanner scanner;
  scanner.Scan(stderr_text);
  scanner.Scan(stdout_text);
  analysis.key_lines = scanner.KeyLines();

  auto from = [&](FailureKind kind, Signal signal) {
    analysis.kind = kind;
    analysis.detail = scanner.detail(signal);
  };
  switch (classification) {
    case Classification::kCommandTimeout:
      analysis.kind = FailureKind::kTimeout;
      break;
    case Classification::kResourceExhaustedMemory:
      analysis.kind = FailureKind::kOutOfMemory;
      break;
    case Classification::kResourceExhaustedPids:
      analysis.kind = FailureKind::kUnknown;
      analysis.detail = "the process limit was reached";
      break;
    case Classification::kPolicyBlocked:
      analysis.kind = FailureKind::kPolicyBlocked;
      break;
    case Classification::kNetworkRequired:
      from(FailureKind::kNetworkRequired, Signal::kNetwork);
      break;
    case Classification::kSandboxError:
      analysis.kind = FailureKind::kUnknown;
      break;
    case Classification::kOk:
    case Classification::kExitNonzero:
    case Classification::kOutputLimit:
      if (exit_code == 127) {
        from(FailureKind::kCommandNotFound, Signal::kToolNotFound);
        break;
      }
      analysis.kind = FailureKind::kUnknown;
      for (const auto& [signal, kind] : kPrecedence) {
        if (scanner.saw(signal)) {
          from(kind, signal);
          break;
        }
      }
      break;
  }
  if (analysis.key_lines.empty()) {
    analysis.key_lines = TailLines(stderr_text, kTailLines);
    if (analysis.key_lines.empty()) analysis.key_lines = TailLines(stdout_text, kTailLines);
  }
  return analysis;
}

FailureAnalysis AnalyzeOutput(Classification classification, int exit_code,
                              std::string_view output) {
  return AnalyzeOutput(classification, exit_code, output, std::string_view());
}

std::string RenderReport(const CommandSpec& spec, const CommandResult& result,
                         const Redactor* redactor) {
  auto redacted = [&](std::string text) {
    return redactor == nullptr ? text : redactor->Redact(text);
  };
  std::vector<std::string> head;
  std::vector<std::string> tail;
  auto add = [](std::vector<std::string>& to, std::string_view line) {
    to.push_back(FitColumns(line, kReportColumns));
  };

  std::string command = "$";
  for (const std::string& arg : spec.argv) command += " " + ShellQuote(arg);
  add(head, redacted(command));
  if (!spec.workdir.empty()) add(head, "  in " + spec.workdir);

  std::string ended;
  const std::string duration = FormatDuration(result.duration_ms);
  const bool refused_before_run =
      std::any_of(result.violations.begin(), result.violations.end(),
                  [](const Violation& v) { return v.kind == kCommandPolicyViolation; });
  if (refused_before_run) {
    ended = "not run: refused by the command policy";
  } else if (result.timed_out) {
    ended = "timed out after " + duration;
    if (spec.timeout) ended += " (limit " + FormatDuration(spec.timeout->count()) + ")";
  } else if (result.classification == Classification::kCommandTimeout) {
    // Not the wall clock: the command used up its CPU time (resources.cpuTimeSeconds).
    ended = "stopped at its CPU time limit after " + duration;
  } else if (result.signal != 0) {
    const char* name = sigabbrev_np(result.signal);
    ended = name != nullptr ? fmt::format("killed by SIG{} after {}", name, duration)
                            : fmt::format("killed by signal {} after {}", result.signal, duration);
  } else {
    ended = fmt::format("exit {} after {}", result.exit_code, duration);
  }
  const int64_t cpu_ms = result.usage.cpu_user_ms + result.usage.cpu_system_ms;
  add(head, fmt::format("{} [{}]{}", ended, ToString(result.classification),
                        cpu_ms > 0 ? "; cpu " + FormatDuration(cpu_ms) : ""));

  const bool failed =
      result.classification != Classification::kOk || result.failure != FailureKind::kNone;
  if (failed) {
    add(head, fmt::format("likely failure: {}{}", KindWords(result.failure),
                          result.failure_detail.empty() ? "" : ": " + result.failure_detail));
  }
  switch (result.classification) {
    case Classification::kResourceExhaustedMemory:
      add(head, fmt::format("memory: the sandbox's limit was reached (peak {}, {} OOM kill{})",
                            FormatBytes(result.usage.memory_peak_bytes), result.usage.oom_kills,
                            result.usage.oom_kills == 1 ? "" : "s"));
      break;
    case Classification::kResourceExhaustedPids:
      add(head, fmt::format("processes: the sandbox's limit was reached (peak {})",
                            result.usage.pids_peak));
      break;
    case Classification::kOutputLimit:
      add(head, "output: the sandbox's log limit was reached");
      break;
    default:
      break;
  }
  if (!result.error.empty()) {
    add(head,
        (result.classification == Classification::kSandboxError ? "sandbox error: " : "error: ") +
            redacted(result.error));
  }
  constexpr size_t kMaxViolations = 3;
  for (size_t i = 0; i < result.violations.size() && i < kMaxViolations; ++i) {
    const Violation& v = result.violations[i];
    add(head,
        redacted(fmt::format("blocked: {}{}{}", v.kind, v.detail.empty() ? "" : ": ", v.detail)));
    if (v.data.is_object() && v.data.contains("instead") && v.data["instead"].is_string() &&
        !v.data["instead"].get_ref<const std::string&>().empty()) {
      add(head, redacted("instead: " + v.data["instead"].get<std::string>()));
    }
  }
  if (result.violations.size() > kMaxViolations) {
    add(head, fmt::format("blocked: {} more", result.violations.size() - kMaxViolations));
  }
  if (!result.degraded.empty()) {
    std::string names;
    for (const std::string& d : result.degraded) names += (names.empty() ? "" : ", ") + d;
    add(head, "degraded protections: " + names);
  }

  add(tail, fmt::format("output: stdout {}, stderr {}{}", FormatBytes(result.stdout_bytes),
                        FormatBytes(result.stderr_bytes),
                        result.truncated ? "; truncated at the log limit" : ""));
  if (!result.raw_log.empty()) {
    add(tail, "raw log: " + result.raw_log + " (redacted; not quoted here)");
  }

  // The quoted lines get what is left of the screen.
  const size_t room =
      std::max<size_t>(2, kReportLines - std::min(kReportLines, head.size() + tail.size()));
  std::vector<std::string> body;
  if (!result.key_lines.empty()) {
    add(body, "key lines:");
    for (const std::string& line : result.key_lines) add(body, "  " + line);
  } else if (failed) {
    const bool use_stderr = !TailLines(result.stderr_preview, 1).empty();
    std::vector<std::string> lines = TailLines(
        use_stderr ? result.stderr_preview : result.stdout_preview, std::min<size_t>(room, 8));
    if (!lines.empty()) {
      add(body, use_stderr ? "last lines of stderr:" : "last lines of stdout:");
      for (const std::string& line : lines) add(body, "  " + line);
    }
  }
  if (body.size() > room) {
    const size_t cut = body.size() - room + 1;
    body.resize(room - 1);
    add(body, fmt::format("  ({} more)", cut));
  }

  std::string report;
  for (const auto* part : {&head, &body, &tail}) {
    for (const std::string& line : *part) report += line + "\n";
  }
  return report;
}

}  // namespace airlock
