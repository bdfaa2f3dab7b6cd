#include "redact/redactor.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"
#include "re2/re2.h"
#include "re2/set.h"
#include "redact/internal/detectors.h"

namespace airlock {

using redact_internal::Check;
using redact_internal::DetectorSpec;
using redact_internal::Tail;

namespace {

// Patterns whose matches have no length bound are handled by the streaming fail-closed rule;
// every other match (the longest detector match with a bounded length is well under 1 KiB) must
// fit in this many bytes, which a stream always holds back.
constexpr size_t kMinHoldBack = 4 << 10;
// Raw bytes kept before the held-back window, for the boundary assertions in the patterns.
constexpr size_t kContextBytes = 16;

RE2::Options PatternOptions() {
  RE2::Options options;
  options.set_encoding(RE2::Options::EncodingLatin1);
  options.set_log_errors(false);
  return options;
}

[[noreturn]] void BrokenBuild(const char* what) {
  std::fprintf(stderr, "redactor: the built-in %s does not compile (a broken build)\n", what);
  std::abort();
}

// The format detectors, the same for every Redactor: compiled once per process, on first use
// (output that is empty, the common case of a build step, never pays for them), and each
// detector's own expression only once the set, made of their loosened forms (LoosePattern: a
// quarter of the compile time), says it may match. The patterns are constants
// (detectors_test compiles every one), so a failure to compile is a broken build and aborts
// rather than let output through unredacted.
class DetectorSet {
 public:
  class Detector {
   public:
    explicit Detector(const DetectorSpec* spec) : spec_(spec) {}
    const DetectorSpec& spec() const { return *spec_; }
    const RE2& re() const {
      std::call_once(once_, [this] {
        re_ = std::make_unique<RE2>(spec_->pattern, PatternOptions());
        if (!re_->ok()) BrokenBuild("detector");
      });
      return *re_;
    }

   private:
    const DetectorSpec* spec_;
    mutable std::once_flag once_;
    mutable std::unique_ptr<RE2> re_;
  };

  static const DetectorSet& Get() {
    static const DetectorSet* set = new DetectorSet();  // never destroyed
    return *set;
  }

  const RE2::Set& prefilter() const { return prefilter_; }
  const Detector& detector(size_t i) const { return *detectors_[i]; }
  size_t size() const { return detectors_.size(); }
  const RE2& pem_end() const { return pem_end_; }

 private:
  DetectorSet()
      : prefilter_(PatternOptions(), RE2::UNANCHORED),
        pem_end_(redact_internal::PemEndPattern(), PatternOptions()) {
    for (const DetectorSpec& spec : redact_internal::DetectorSpecs()) {
      if (prefilter_.Add(redact_internal::LoosePattern(spec.pattern), nullptr) < 0) {
        BrokenBuild("detector set");
      }
      detectors_.push_back(std::make_unique<Detector>(&spec));
    }
    if (!prefilter_.Compile()) BrokenBuild("detector set");
    if (!pem_end_.ok()) BrokenBuild("private key END pattern");
  }

  RE2::Set prefilter_;  // all detectors: which may match at all
  std::vector<std::unique_ptr<Detector>> detectors_;
  RE2 pem_end_;
};

}  // namespace

struct Redactor::State {
  RedactorOptions options;
  bool detectors = false;                // options.detectors == kAll
  std::unique_ptr<RE2> explicit_values;  // null when none were given
  std::vector<std::string> literals;     // what explicit_values matches, for cut secrets
  size_t hold_back = kMinHoldBack;       // every bounded match fits in this many bytes
  size_t window = 0;
};

// A match of one detector: [begin, end) is everything the pattern matched, [secret_begin,
// secret_end) the part that is redacted. `incomplete`: the match reaches the end of a text
// that is not the end of the input, so more input could change it.
struct redact_internal::StreamMatch {
  SecretKind kind;
  size_t begin;
  size_t end;
  size_t secret_begin;
  size_t secret_end;
  Tail tail;
  bool incomplete;
};

namespace {

using Match = redact_internal::StreamMatch;

// At most 3 capture groups per detector (credential values: double-quoted, single-quoted, bare).
constexpr int kMaxGroups = 3;

// What replaces a secret.
std::string Marker(SecretKind kind) { return fmt::format("[REDACTED:{}]", ToString(kind)); }

void FindDetectorMatches(const DetectorSet::Detector& d, std::string_view text, size_t start,
                         bool partial, std::vector<Match>* out) {
  const RE2& re = d.re();
  const DetectorSpec& spec = d.spec();
  const int groups = std::min(re.NumberOfCapturingGroups(), kMaxGroups);
  re2::StringPiece sub[1 + kMaxGroups];
  const re2::StringPiece whole(text.data(), text.size());
  size_t pos = start;
  while (pos < text.size() && re.Match(whole, pos, text.size(), RE2::UNANCHORED, sub, 1 + groups)) {
    const size_t begin = static_cast<size_t>(sub[0].data() - text.data());
    const size_t end = begin + sub[0].size();
    size_t secret_begin = begin, secret_end = end;
    for (int g = 1; g <= groups; ++g) {
      if (sub[g].data() != nullptr) {
        secret_begin = static_cast<size_t>(sub[g].data() - text.data());
        secret_end = secret_begin + sub[g].size();
        break;
      }
    }
    const bool incomplete = partial && end == text.size();
    const std::string_view secret = text.substr(secret_begin, secret_end - secret_begin);
    if (secret_end > secret_begin && (incomplete || redact_internal::Passes(spec.check, secret))) {
      out->push_back({spec.kind, begin, end, secret_begin, secret_end, spec.tail, incomplete});
      // The boundary byte after a token may be the one before the next token.
      pos = secret_end;
    } else {
      // Any match starting before the secret ends at the same separator with the same value.
      pos = std::max(begin + 1, secret_begin);
    }
  }
}

// All matches starting at or after `start` in `text`; bytes before `start` are context only.
std::vector<Match> FindMatches(const Redactor::State& state, std::string_view text, size_t start,
                               bool partial) {
  std::vector<Match> matches;
  if (state.explicit_values != nullptr) {
    re2::StringPiece m;
    const re2::StringPiece whole(text.data(), text.size());
    size_t pos = start;
    while (pos < text.size() &&
           state.explicit_values->Match(whole, pos, text.size(), RE2::UNANCHORED, &m, 1)) {
      const size_t begin = static_cast<size_t>(m.data() - text.data());
      matches.push_back({SecretKind::kExplicitValue, begin, begin + m.size(), begin,
                         begin + m.size(), Tail::kNone, false});
      pos = begin + 1;  // occurrences may overlap ("abcabc" twice in "abcabcabc")
    }
  }
  if (!state.detectors || start >= text.size()) return matches;
  const DetectorSet& detectors = DetectorSet::Get();
  std::vector<int> hits;
  RE2::Set::ErrorInfo error{RE2::Set::kNoError};
  const std::string_view tail = text.substr(start);
  if (!detectors.prefilter().Match(re2::StringPiece(tail.data(), tail.size()), &hits, &error)) {
    if (error.kind == RE2::Set::kNoError) return matches;
    // The set's DFA ran out of memory: run every detector.
    hits.clear();
    for (size_t i = 0; i < detectors.size(); ++i) hits.push_back(static_cast<int>(i));
  }
  std::sort(hits.begin(), hits.end());
  for (int i : hits) {
    FindDetectorMatches(detectors.detector(static_cast<size_t>(i)), text, start, partial, &matches);
  }
  return matches;
}

// Where a scan of text[start, end) that is not the end of the input may stop: everything but
// the last `hold_back` bytes, except that a match crossing that point is held back whole (it is
// found again with more input), as is one that reaches `end` and may still grow. Returns
// `start` when a match spans the whole range. Sorts `matches` by descending start.
size_t ReleasePoint(std::vector<Match>& matches, size_t start, size_t end, size_t hold_back) {
  size_t cut = end - std::min(end - start, hold_back);
  std::sort(matches.begin(), matches.end(),
            [](const Match& a, const Match& b) { return a.begin > b.begin; });
  for (const Match& m : matches) {
    if (m.begin < cut && (m.end > cut || m.incomplete)) cut = m.begin;
  }
  return cut;
}

// All matches in `text`, found window by window: the detector prefilter then rules out most
// detectors for most windows, where on the whole text every detector that matches anywhere
// would run over all of it. A match longer than a window widens the window until it fits.
std::vector<Match> FindAllMatches(const Redactor::State& state, std::string_view text) {
  std::vector<Match> all;
  size_t pos = 0;
  size_t window = state.window;
  while (pos < text.size()) {
    const size_t limit = text.size() - pos <= window ? text.size() : pos + window;
    std::vector<Match> matches =
        FindMatches(state, text.substr(0, limit), pos, /*partial=*/limit < text.size());
    if (limit == text.size()) {
      all.insert(all.end(), matches.begin(), matches.end());
      break;
    }
    const size_t cut = ReleasePoint(matches, pos, limit, state.hold_back);
    if (cut == pos) {
      window *= 2;
      continue;
    }
    for (const Match& m : matches) {
      if (m.end <= cut) all.push_back(m);
    }
    pos = cut;
    window = state.window;
  }
  return all;
}

// Appends text[from, to) to `out` with each secret span replaced by its marker. `matches` must
// lie within [from, to) (secret spans only are used); overlapping spans become one marker.
void AppendRedacted(std::string_view text, size_t from, size_t to, std::vector<Match> matches,
                    std::string* out) {
  std::sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    if (a.secret_begin != b.secret_begin) return a.secret_begin < b.secret_begin;
    if (a.secret_end != b.secret_end) return a.secret_end > b.secret_end;
    return a.kind < b.kind;
  });
  size_t pos = from;
  size_t i = 0;
  while (i < matches.size()) {
    const Match& first = matches[i];
    size_t span_end = first.secret_end;
    size_t j = i + 1;
    while (j < matches.size() && matches[j].secret_begin < span_end) {
      span_end = std::max(span_end, matches[j].secret_end);
      ++j;
    }
    out->append(text.substr(pos, first.secret_begin - pos));
    out->append(Marker(first.kind));
    pos = span_end;
    i = j;
  }
  if (to > pos) out->append(text.substr(pos, to - pos));
}

}  // namespace

const char* ToString(SecretKind kind) {
  switch (kind) {
    case SecretKind::kExplicitValue:
      return "secret";
    case SecretKind::kAwsAccessKey:
      return "aws_access_key";
    case SecretKind::kAwsSecretKey:
      return "aws_secret_key";
    case SecretKind::kGithubToken:
      return "github_token";
    case SecretKind::kGitlabToken:
      return "gitlab_token";
    case SecretKind::kSlackToken:
      return "slack_token";
    case SecretKind::kSlackWebhook:
      return "slack_webhook";
    case SecretKind::kLlmApiKey:
      return "llm_api_key";
    case SecretKind::kGoogleApiKey:
      return "google_api_key";
    case SecretKind::kStripeKey:
      return "stripe_key";
    case SecretKind::kNpmToken:
      return "npm_token";
    case SecretKind::kPypiToken:
      return "pypi_token";
    case SecretKind::kJwt:
      return "jwt";
    case SecretKind::kPrivateKey:
      return "private_key";
    case SecretKind::kAuthorization:
      return "authorization";
    case SecretKind::kUrlPassword:
      return "url_password";
    case SecretKind::kCredential:
      return "credential";
  }
  return "secret";
}

absl::StatusOr<Redactor> Redactor::Create(std::vector<std::string> secret_values,
                                          RedactorOptions options) {
  if (options.min_secret_length < kMinSecretLengthFloor) {
    return InvalidArgument(fmt::format("redactor: min_secret_length {} is below the floor of {}",
                                       options.min_secret_length, kMinSecretLengthFloor));
  }
  auto state = std::make_shared<State>();
  state->options = options;

  std::vector<std::string> literals;
  for (size_t i = 0; i < secret_values.size(); ++i) {
    const std::string& value = secret_values[i];
    if (value.size() < options.min_secret_length) {
      return InvalidArgument(fmt::format(
          "redactor: secret value #{} is {} bytes long; the minimum is {} (a shorter value "
          "would redact ordinary output)",
          i, value.size(), options.min_secret_length));
    }
    literals.push_back(value);
    for (std::string& form : redact_internal::EncodedForms(value, options.min_secret_length)) {
      literals.push_back(std::move(form));
    }
  }
  std::sort(literals.begin(), literals.end());
  literals.erase(std::unique(literals.begin(), literals.end()), literals.end());
  if (!literals.empty()) {
    std::string pattern;
    for (const std::string& literal : literals) {
      if (!pattern.empty()) pattern.push_back('|');
      pattern.append(RE2::QuoteMeta(re2::StringPiece(literal.data(), literal.size())));
      state->hold_back = std::max(state->hold_back, literal.size());
    }
    RE2::Options re_options = PatternOptions();
    // Longest at each position, so a value that is a prefix of another never hides it.
    re_options.set_longest_match(true);
    re_options.set_max_mem(int64_t{64} << 20);
    state->explicit_values = std::make_unique<RE2>(pattern, re_options);
    if (!state->explicit_values->ok()) {
      return Internal(
          fmt::format("redactor: compile explicit values: {}", state->explicit_values->error()));
    }
    state->literals = std::move(literals);
  }

  state->detectors = options.detectors == Detectors::kAll;
  state->window = std::max(options.stream_window, 2 * state->hold_back);
  return Redactor(std::move(state));
}

std::vector<Finding> Redactor::Scan(std::string_view text) const {
  std::vector<Match> matches = FindAllMatches(*state_, text);
  std::vector<Finding> findings;
  findings.reserve(matches.size());
  for (const Match& m : matches) {
    findings.push_back({m.kind, m.secret_begin, m.secret_end - m.secret_begin});
  }
  std::sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    if (a.offset != b.offset) return a.offset < b.offset;
    if (a.length != b.length) return a.length > b.length;
    return a.kind < b.kind;
  });
  // The same span found by two detectors is one finding, of the more specific kind (kinds are
  // declared most specific first).
  findings.erase(std::unique(findings.begin(), findings.end(),
                             [](const Finding& a, const Finding& b) {
                               return a.offset == b.offset && a.length == b.length;
                             }),
                 findings.end());
  return findings;
}

std::string Redactor::Redact(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  AppendRedacted(text, 0, text.size(), FindAllMatches(*state_, text), &out);
  return out;
}

namespace {

// The length of the longest proper prefix of `word` that ends `text`: the prefix function
// (Knuth-Morris-Pratt) of `word`, run over the last |word| - 1 bytes of `text`. O(|word|).
size_t OverlapAtEnd(std::string_view text, std::string_view word) {
  if (word.size() < 2) return 0;
  std::vector<size_t> fail(word.size(), 0);
  for (size_t i = 1, k = 0; i < word.size(); ++i) {
    while (k > 0 && word[i] != word[k]) k = fail[k - 1];
    if (word[i] == word[k]) ++k;
    fail[i] = k;
  }
  size_t k = 0;
  for (char c : text.substr(text.size() - std::min(text.size(), word.size() - 1))) {
    while (k > 0 && c != word[k]) k = fail[k - 1];
    if (c == word[k]) ++k;
    if (k == word.size()) k = fail[k - 1];  // a whole word is Redact's, not a cut
  }
  return k;
}

// The longest part of one of `literals` cut at the end of `text` (OverlapAtEnd); `at_start`:
// at the start of `text` instead, the same question on the reversed text and values.
size_t LongestCut(const std::vector<std::string>& literals, std::string_view text, bool at_start) {
  if (literals.empty()) return 0;
  const std::string reversed = at_start ? std::string(text.rbegin(), text.rend()) : std::string();
  size_t longest = 0;
  for (const std::string& literal : literals) {
    longest = std::max(
        longest, at_start ? OverlapAtEnd(reversed, std::string(literal.rbegin(), literal.rend()))
                          : OverlapAtEnd(text, literal));
  }
  return longest;
}

// A detected format (a token, a key) cut at an edge no longer matches its detector, and what is
// left of it may be nearly all of it. So a run of token characters at a cut edge, kTokenRunMin
// bytes or more, is taken for a cut secret: its last (or first) kTokenRunMax bytes at most, which
// is longer than any token the detectors know.
constexpr size_t kTokenRunMin = 8;
constexpr size_t kTokenRunMax = 512;

bool IsTokenByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '+' || c == '/' || c == '=' || c == '.';
}

size_t TokenRunAtEdge(std::string_view text, bool at_start) {
  size_t n = 0;
  while (n < text.size() && n < kTokenRunMax &&
         IsTokenByte(at_start ? text[n] : text[text.size() - 1 - n])) {
    ++n;
  }
  return n >= kTokenRunMin ? n : 0;
}

// How much of a cut edge of `text` to redact: a registered value's start (or end), or a run of
// token characters.
size_t CutAtEdge(const std::vector<std::string>& literals, std::string_view text, bool at_start) {
  return std::max(LongestCut(literals, text, at_start), TokenRunAtEdge(text, at_start));
}

}  // namespace

size_t Redactor::CutSecretAtEnd(std::string_view text) const {
  return CutAtEdge(state_->literals, text, false);
}

std::string Redactor::RedactCut(std::string_view text, bool cut_before, bool cut_after) const {
  // Whole secrets first: a secret that ends the piece may itself end with the start of a
  // registered value, and must still be redacted whole. What is left raw at either edge is then
  // looked at for a cut one.
  std::string out = Redact(text);
  size_t tail = cut_after ? CutAtEdge(state_->literals, out, false) : 0;
  size_t head = cut_before ? CutAtEdge(state_->literals, out, true) : 0;
  if (head == 0 && tail == 0) return out;
  const std::string marker = Marker(SecretKind::kExplicitValue);
  if (head + tail >= out.size()) return marker;
  std::string cut = head > 0 ? marker : std::string();
  cut.append(out, head, out.size() - head - tail);
  if (tail > 0) cut += marker;
  return cut;
}

size_t Redactor::stream_window() const { return state_->window; }

StreamRedactor::StreamRedactor(const Redactor& redactor) : state_(redactor.state_) {
  pending_.reserve(state_->window);
}

void StreamRedactor::Write(std::string_view chunk, std::string* out) {
  while (!chunk.empty()) {
    if (cont_tail_ != 0) {
      chunk = Continue(chunk);
      continue;
    }
    const size_t n = std::min(chunk.size(), state_->window - pending_.size());
    pending_.append(chunk.substr(0, n));
    bytes_in_ += n;
    chunk.remove_prefix(n);
    if (pending_.size() >= state_->window) Process(/*final=*/false, out);
  }
}

void StreamRedactor::Finish(std::string* out) {
  if (cont_tail_ != 0) {
    Record(cont_kind_, cont_start_, bytes_in_ - cont_start_, cont_line_);
    cont_tail_ = 0;
    return;
  }
  Process(/*final=*/true, out);
}

void StreamRedactor::Record(SecretKind kind, uint64_t offset, uint64_t length, uint64_t line) {
  ++finding_count_;
  if (findings_.size() < state_->options.max_stream_findings) {
    findings_.push_back({kind, offset, length, line});
  }
}

uint64_t StreamRedactor::LineAt(uint64_t offset) const {
  // Only kept findings need a line: the count stays bounded by max_stream_findings windows.
  if (findings_.size() >= state_->options.max_stream_findings) return 0;
  const size_t n =
      static_cast<size_t>(std::min<uint64_t>(offset - pending_offset_, pending_.size()));
  return lines_before_pending_ +
         static_cast<uint64_t>(std::count(pending_.begin(), pending_.begin() + n, '\n')) + 1;
}

void StreamRedactor::DropPending(size_t n) {
  lines_before_pending_ +=
      static_cast<uint64_t>(std::count(pending_.begin(), pending_.begin() + n, '\n'));
  pending_.erase(0, n);
  pending_offset_ += n;
}

void StreamRedactor::SetContext(std::string_view released) {
  if (released.size() >= kContextBytes) {
    context_.assign(released.substr(released.size() - kContextBytes));
    return;
  }
  context_.append(released);
  if (context_.size() > kContextBytes) context_.erase(0, context_.size() - kContextBytes);
}

void StreamRedactor::Release(std::string_view text, size_t ctx, size_t upto,
                             std::vector<Match> released, std::string* out) {
  std::sort(released.begin(), released.end(),
            [](const Match& a, const Match& b) { return a.secret_begin < b.secret_begin; });
  for (const Match& m : released) {
    const uint64_t offset = pending_offset_ + (m.secret_begin - ctx);
    Record(m.kind, offset, m.secret_end - m.secret_begin, LineAt(offset));
  }
  if (out != nullptr) AppendRedacted(text, ctx, upto, std::move(released), out);
  SetContext(text.substr(ctx, upto - ctx));
  DropPending(upto - ctx);
}

void StreamRedactor::Flush(std::string* out) {
  if (cont_tail_ != 0) return;
  const size_t newline = pending_.rfind('\n');
  if (newline == std::string::npos) return;
  const size_t ctx = context_.size();
  std::string text = context_;
  text.append(pending_);
  std::vector<Match> matches = FindMatches(*state_, text, ctx, /*partial=*/true);
  // Up to the last newline, but never through a match that crosses the cut or may still grow:
  // such a match stays held back whole. Moving the cut back can make another match cross it.
  size_t cut = ctx + newline + 1;
  for (bool moved = true; moved;) {
    moved = false;
    for (const Match& m : matches) {
      if (m.begin < cut && (m.end > cut || m.incomplete)) {
        cut = m.begin;
        moved = true;
      }
    }
  }
  if (cut <= ctx) return;
  std::vector<Match> released;
  for (const Match& m : matches) {
    if (m.end <= cut) released.push_back(m);
  }
  Release(text, ctx, cut, std::move(released), out);
}

void StreamRedactor::Process(bool final, std::string* out) {
  // The patterns see the released context before the held-back bytes.
  const size_t ctx = context_.size();
  std::string text = context_;
  text.append(pending_);
  std::vector<Match> matches = FindMatches(*state_, text, ctx, /*partial=*/!final);
  const size_t end = text.size();

  auto record = [&](const Match& m) {
    const uint64_t offset = pending_offset_ + (m.secret_begin - ctx);
    Record(m.kind, offset, m.secret_end - m.secret_begin, LineAt(offset));
  };
  auto release = [&](size_t upto, std::vector<Match> released) {
    Release(text, ctx, upto, std::move(released), out);
  };

  if (final) {
    release(end, std::move(matches));
    return;
  }

  const size_t cut = ReleasePoint(matches, ctx, end, state_->hold_back);
  if (cut > ctx) {
    std::vector<Match> released;
    for (const Match& m : matches) {
      if (m.end <= cut) released.push_back(m);
    }
    release(cut, std::move(released));
    return;
  }

  // One match spans the whole window. If it may still grow, fail closed: redact from its secret
  // to the end and keep swallowing input while it continues.
  const Match* growing = nullptr;
  for (const Match& m : matches) {
    if (m.incomplete && (growing == nullptr || m.begin < growing->begin)) growing = &m;
  }
  if (growing != nullptr) {
    // Matches that overlap the open span merge into its marker; only those wholly before it
    // are findings of their own.
    std::vector<Match> released;
    for (const Match& m : matches) {
      if (&m == growing) continue;
      if (m.secret_end <= growing->secret_begin) record(m);
      released.push_back(m);
    }
    Match open = *growing;
    open.secret_end = end;
    const uint64_t start = pending_offset_ + (growing->secret_begin - ctx);
    const SecretKind kind = growing->kind;
    const Tail tail = growing->tail == Tail::kNone ? Tail::kNonSpace : growing->tail;
    cont_line_ = LineAt(start);
    released.push_back(open);
    if (out != nullptr) AppendRedacted(text, ctx, end, std::move(released), out);
    SetContext(std::string_view(text).substr(ctx));
    cont_carry_ = tail == Tail::kPemEnd ? context_ : std::string();
    DropPending(pending_.size());
    cont_tail_ = static_cast<int>(tail);
    cont_kind_ = kind;
    cont_start_ = start;
    return;
  }

  // Complete matches longer than the window: release through the last of those chained from
  // the start, redacted.
  std::sort(matches.begin(), matches.end(),
            [](const Match& a, const Match& b) { return a.begin < b.begin; });
  size_t upto = ctx;
  for (const Match& m : matches) {
    if (m.begin > upto) break;
    upto = std::max(upto, m.end);
  }
  std::vector<Match> released;
  for (const Match& m : matches) {
    if (m.end <= upto) released.push_back(m);
  }
  release(upto, std::move(released));
}

std::string_view StreamRedactor::Continue(std::string_view chunk) {
  const Tail tail = static_cast<Tail>(cont_tail_);
  size_t consumed = chunk.size();
  bool done = false;
  if (tail == Tail::kPemEnd) {
    std::string text = cont_carry_;
    text.append(chunk);
    re2::StringPiece m;
    if (DetectorSet::Get().pem_end().Match(re2::StringPiece(text.data(), text.size()), 0,
                                           text.size(), RE2::UNANCHORED, &m, 1)) {
      const size_t match_end = static_cast<size_t>(m.data() - text.data()) + m.size();
      consumed = match_end > cont_carry_.size() ? match_end - cont_carry_.size() : 0;
      done = true;
    } else {
      // An END line is under 64 bytes: keep enough to find one split across chunks.
      constexpr size_t kCarry = 128;
      cont_carry_ = text.size() > kCarry ? text.substr(text.size() - kCarry) : text;
    }
  } else {
    size_t i = 0;
    while (i < chunk.size() && redact_internal::IsTailByte(tail, chunk[i])) ++i;
    consumed = i;
    done = i < chunk.size();
  }
  bytes_in_ += consumed;
  lines_before_pending_ +=
      static_cast<uint64_t>(std::count(chunk.begin(), chunk.begin() + consumed, '\n'));
  SetContext(chunk.substr(0, consumed));
  if (done) {
    Record(cont_kind_, cont_start_, bytes_in_ - cont_start_, cont_line_);
    cont_tail_ = 0;
    cont_carry_.clear();
    pending_offset_ = bytes_in_;
  }
  return chunk.substr(consumed);
}

CutStreamRedactor::CutStreamRedactor(const Redactor& redactor, bool cut_at_end)
    : redactor_(redactor), stream_(redactor), cut_at_end_(cut_at_end) {}

void CutStreamRedactor::Write(std::string_view chunk, std::string* out) {
  if (!cut_at_end_) {
    stream_.Write(chunk, out);
    return;
  }
  stream_.Write(chunk, &held_);
  const size_t keep = redactor_.stream_window();
  if (held_.size() <= keep) return;
  out->append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

void CutStreamRedactor::Finish(std::string* out) {
  if (!cut_at_end_) {
    stream_.Finish(out);
    return;
  }
  stream_.Finish(&held_);
  if (size_t cut = redactor_.CutSecretAtEnd(held_); cut > 0) {
    held_.resize(held_.size() - cut);
    held_ += Marker(SecretKind::kExplicitValue);
  }
  out->append(held_);
  held_.clear();
}

absl::Status RedactStream(const Redactor& redactor, int in_fd, int out_fd, bool cut_at_end) {
  CutStreamRedactor stream(redactor, cut_at_end);
  std::string buffer(64 << 10, '\0');
  std::string out;
  while (true) {
    ssize_t n = ::read(in_fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "redact stream: read input");
    }
    if (n == 0) break;
    out.clear();
    stream.Write(std::string_view(buffer.data(), static_cast<size_t>(n)), &out);
    RETURN_IF_ERROR_CTX(WriteAll(out_fd, out), "redact stream: write output");
  }
  out.clear();
  stream.Finish(&out);
  RETURN_IF_ERROR_CTX(WriteAll(out_fd, out), "redact stream: write output");
  return absl::OkStatus();
}

}  // namespace airlock
