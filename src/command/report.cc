#include "command/report.h"

#include <algorithm>
#include <set>

#include "common/units.h"
#include "fmt/format.h"
#include "re2/re2.h"

namespace airlock {
namespace {

// Evidence found in one line of output.
enum class Evidence { kNone, kCompile, kTest, kMissing, kNetwork, kNotFound };

struct Pattern {
  Evidence evidence;
  const char* keyword;  // cheap prefilter: the line must contain it
  const char* regex;    // RE2; group 1, when present, is the detail
  bool key_line;        // whether the line is worth showing
};

// Ordered: the first match of a line decides its evidence.
const Pattern kPatterns[] = {
    // Network (before "missing": a failed fetch often reads like a missing package).
    {Evidence::kNetwork, "resolve host", R"(Could not resolve host:? '?([^\s']+))", true},
    {Evidence::kNetwork, "ENOTFOUND", R"(getaddrinfo ENOTFOUND (\S+))", true},
    {Evidence::kNetwork, "EAI_AGAIN", R"(getaddrinfo EAI_AGAIN (\S+))", true},
    {Evidence::kNetwork, "name resolution", R"(Temporary failure in name resolution)", true},
    {Evidence::kNetwork, "unreachable", R"(Network is unreachable)", true},
    {Evidence::kNetwork, "new connection", R"(Failed to establish a new connection)", true},
    {Evidence::kNetwork, "unable to access", R"(unable to access '([^']+)')", true},
    {Evidence::kNetwork, "Could not transfer", R"(Could not transfer artifact.*from/to \S+ \(([^)]+)\))", true},
    // Missing dependencies.
    {Evidence::kMissing, "No module named", R"(No module named '?([\w.]+))", true},
    {Evidence::kMissing, "Cannot find module", R"(Cannot find module '([^']+)')", true},
    {Evidence::kMissing, "fatal error", R"(fatal error: ([^:]+): No such file or directory)", true},
    {Evidence::kMissing, "is not in", R"(package (\S+) is not in (?:GOROOT|std))", true},
    {Evidence::kMissing, "no required module", R"(no required module provides package (\S+))", true},
    {Evidence::kMissing, "npm ERR! 404", R"(npm ERR! 404 .*'([^']+)')", true},
    {Evidence::kMissing, "Could not resolve dependencies", R"(Could not resolve dependencies for project (\S+))", true},
    {Evidence::kMissing, "Could not find", R"(Could not find (?:artifact )?(\S+:\S+))", true},
    {Evidence::kMissing, "cannot find -l", R"(cannot find -l(\S+))", true},
    {Evidence::kNotFound, "command not found", R"((\S+): command not found)", true},
    {Evidence::kNotFound, "cannot run", R"(airlock: cannot run (\S+): No such file)", true},
    // Compilation errors (gcc/clang, javac, Maven, Kotlin/Gradle, go, make, python syntax).
    {Evidence::kCompile, "error", R"(^\S+:\d+(?::\d+)?: (?:fatal )?error: .*)", true},
    {Evidence::kCompile, "undefined reference", R"(undefined reference to .*)", true},
    {Evidence::kCompile, "[ERROR]", R"(^\[ERROR\] \S+\.(?:java|kt):\[\d+,\d+\] .*)", true},
    {Evidence::kCompile, "COMPILATION ERROR", R"(COMPILATION ERROR)", false},
    {Evidence::kCompile, "e: ", R"(^e: (?:file://)?\S+:\d+:\d+ .*)", true},
    {Evidence::kCompile, "compileJava", R"(Task :\S*compile\S* FAILED)", true},
    {Evidence::kCompile, ".go:", R"(^\S+\.go:\d+:\d+: .*)", true},
    {Evidence::kCompile, "SyntaxError", R"(^\s*SyntaxError: .*)", true},
    {Evidence::kCompile, "IndentationError", R"(^\s*IndentationError: .*)", true},
    // Test failures (pytest, unittest, Maven surefire, Gradle, go test, jest/mocha, node:test).
    {Evidence::kTest, "FAILED", R"(^FAILED (\S+::\S+).*)", true},
    {Evidence::kTest, "failed", R"(^=+ .*\b\d+ failed\b.*=+$)", true},
    {Evidence::kTest, "FAILED (", R"(^FAILED \((?:failures|errors)=\d+.*\))", true},
    {Evidence::kTest, "FAIL:", R"(^(?:FAIL|ERROR): (\w+) \(.*\))", true},
    {Evidence::kTest, "Tests run", R"(Tests run: \d+, Failures: (?:[1-9]\d*), .*|Tests run: \d+, Failures: \d+, Errors: [1-9]\d*.*)", true},
    {Evidence::kTest, "tests completed", R"(\d+ tests completed, \d+ failed.*)", true},
    {Evidence::kTest, "--- FAIL", R"(^--- FAIL: (\S+).*)", true},
    {Evidence::kTest, "Tests:", R"(^Tests:\s+\d+ failed.*)", true},
    {Evidence::kTest, "failing", R"(^\s*\d+ failing$)", true},
    {Evidence::kTest, "# fail", R"(^# fail [1-9]\d*$)", true},
    {Evidence::kTest, "AssertionError", R"(^\s*(?:E\s+)?AssertionError.*)", true},
};

// Lines worth showing that decide nothing on their own.
const Pattern kContext[] = {
    {Evidence::kNone, "Error", R"(^\w+(?:\.\w+)*(?:Error|Exception)(?::.*)?$)", true},  // python
    {Evidence::kNone, "make", R"(^make(?:\[\d+\])?: \*\*\* .*)", true},
    {Evidence::kNone, "npm ERR!", R"(^npm ERR! (?:code|errno|syscall) .*)", true},
    {Evidence::kNone, "E ", R"(^E\s{3,}\S.*)", true},  // pytest detail
    {Evidence::kNone, "error", R"(^(?:Error|error)(?:\[E\d+\])?: .*)", true},
};

struct Compiled {
  const Pattern* p;
  std::unique_ptr<RE2> re;
};

const std::vector<Compiled>& Patterns() {
  static const std::vector<Compiled>* compiled = [] {
    auto* v = new std::vector<Compiled>();
    RE2::Options opts;
    opts.set_log_errors(false);
    for (const Pattern& p : kPatterns) v->push_back({&p, std::make_unique<RE2>(p.regex, opts)});
    for (const Pattern& p : kContext) v->push_back({&p, std::make_unique<RE2>(p.regex, opts)});
    return v;
  }();
  return *compiled;
}

std::string Clip(std::string_view line, size_t max) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  if (line.size() <= max) return std::string(line);
  return std::string(line.substr(0, max - 3)) + "...";
}

FailureKind FromEvidence(Evidence e) {
  switch (e) {
    case Evidence::kCompile:
      return FailureKind::kCompilationError;
    case Evidence::kTest:
      return FailureKind::kTestFailure;
    case Evidence::kMissing:
      return FailureKind::kMissingDependency;
    case Evidence::kNetwork:
      return FailureKind::kNetworkRequired;
    case Evidence::kNotFound:
      return FailureKind::kCommandNotFound;
    case Evidence::kNone:
      break;
  }
  return FailureKind::kUnknown;
}

// Which evidence wins when several kinds appear: what blocks everything else first.
int Rank(Evidence e) {
  switch (e) {
    case Evidence::kNetwork:
      return 5;
    case Evidence::kMissing:
      return 4;
    case Evidence::kNotFound:
      return 3;
    case Evidence::kCompile:
      return 2;
    case Evidence::kTest:
      return 1;
    case Evidence::kNone:
      break;
  }
  return 0;
}

}  // namespace

FailureAnalysis AnalyzeOutput(Classification classification, int exit_code,
                              std::string_view output) {
  FailureAnalysis a;
  switch (classification) {
    case Classification::kOk:
      return a;
    case Classification::kCommandTimeout:
      a.kind = FailureKind::kTimeout;
      break;
    case Classification::kResourceExhaustedMemory:
      a.kind = FailureKind::kOutOfMemory;
      break;
    case Classification::kPolicyBlocked:
      a.kind = FailureKind::kPolicyBlocked;
      break;
    case Classification::kNetworkRequired:
      a.kind = FailureKind::kNetworkRequired;
      break;
    default:
      break;
  }
  Evidence best = Evidence::kNone;
  std::string best_detail;
  std::set<std::string> seen;
  size_t pos = 0;
  while (pos < output.size()) {
    size_t nl = output.find('\n', pos);
    std::string_view line = output.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? output.size() : nl + 1;
    if (line.size() > 4096) line = line.substr(0, 4096);  // bound the work per line
    for (const Compiled& c : Patterns()) {
      if (line.find(c.p->keyword) == std::string_view::npos) continue;
      std::string detail;
      re2::StringPiece sp(line.data(), line.size());
      bool matched = c.re->NumberOfCapturingGroups() > 0
                         ? RE2::PartialMatch(sp, *c.re, &detail)
                         : RE2::PartialMatch(sp, *c.re);
      if (!matched) continue;
      if (Rank(c.p->evidence) > Rank(best)) {
        best = c.p->evidence;
        best_detail = detail;
      }
      if (c.p->key_line && a.key_lines.size() < kMaxKeyLines) {
        std::string clipped = Clip(line, kMaxKeyLineBytes);
        if (seen.insert(clipped).second) a.key_lines.push_back(std::move(clipped));
      }
      break;
    }
  }
  if (a.kind == FailureKind::kNone) {
    if (best != Evidence::kNone) {
      a.kind = FromEvidence(best);
    } else if (exit_code == 127) {
      a.kind = FailureKind::kCommandNotFound;
    } else {
      a.kind = FailureKind::kUnknown;
    }
  }
  if (a.kind == FromEvidence(best)) a.detail = best_detail;
  return a;
}

namespace {

std::string Describe(FailureKind k) {
  switch (k) {
    case FailureKind::kNone:
      return "none";
    case FailureKind::kCompilationError:
      return "compilation error";
    case FailureKind::kTestFailure:
      return "test failure";
    case FailureKind::kMissingDependency:
      return "missing dependency";
    case FailureKind::kNetworkRequired:
      return "network required (the sandbox has no network for this host)";
    case FailureKind::kOutOfMemory:
      return "out of memory (killed at the memory limit)";
    case FailureKind::kTimeout:
      return "timeout (the whole command tree was killed)";
    case FailureKind::kPolicyBlocked:
      return "blocked by the sandbox policy";
    case FailureKind::kCommandNotFound:
      return "command not found";
    case FailureKind::kUnknown:
      return "unknown (see the key lines and the raw log)";
  }
  return "unknown";
}

}  // namespace

std::string RenderReport(const CommandSpec& command, const CommandResult& r) {
  std::string cmd;
  for (const std::string& a : command.argv) {
    if (!cmd.empty()) cmd += ' ';
    cmd += a.find_first_of(" \t'\"") == std::string::npos ? a : "'" + a + "'";
  }
  std::string out = fmt::format("$ {}\n", Clip(cmd, 98));
  std::string how = r.signal != 0 ? fmt::format("killed by signal {}", r.signal)
                                  : fmt::format("exit {}", r.exit_code);
  out += fmt::format("{} ({}) after {:.1f} s; cpu {:.1f} s; peak memory {}\n", how,
                     ToString(r.classification), static_cast<double>(r.duration_ms) / 1000,
                     static_cast<double>(r.usage.cpu_user_ms + r.usage.cpu_system_ms) / 1000,
                     FormatBytes(r.usage.memory_peak_bytes));
  if (r.classification != Classification::kOk) {
    out += fmt::format("likely failure: {}", Describe(r.failure));
    out += r.failure_detail.empty() ? "\n" : fmt::format(" ({})\n", Clip(r.failure_detail, 60));
  }
  if (!r.error.empty()) out += fmt::format("error: {}\n", Clip(r.error, 93));
  for (const Violation& v : r.violations) {
    out += fmt::format("blocked: {}: {}\n", v.kind, Clip(v.detail, 80));
  }
  if (!r.key_lines.empty()) {
    out += "key lines:\n";
    for (const std::string& l : r.key_lines) out += fmt::format("  {}\n", Clip(l, 98));
  }
  out += fmt::format("output: {} stdout, {} stderr{}; raw log: {}\n", FormatBytes(r.stdout_bytes),
                     FormatBytes(r.stderr_bytes), r.truncated ? " (truncated)" : "", r.raw_log);
  if (!r.degraded.empty()) {
    std::string d;
    for (const std::string& x : r.degraded) d += (d.empty() ? "" : ", ") + x;
    out += fmt::format("ran without: {}\n", d);
  }
  return out;
}

}  // namespace airlock
