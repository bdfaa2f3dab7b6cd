// Secret redaction before anything leaves a sandbox: command output, previews, logs, artifacts.
//
// A Redactor finds two sorts of secrets:
//   - explicit values registered for the run (leased secrets, tokens the platform handed in), in
//     their raw form and in the encodings a program commonly prints them in (see Create);
//   - well-known credential formats, found by detectors (see SecretKind for the list and
//     docs in redactor.cc for each detector's false-positive policy).
// Scan() reports where secrets are (kind, offset, length; never the secret itself) so that the
// artifact API can refuse a release; Redact() replaces each secret with "[REDACTED:<kind>]".
// StreamRedactor and RedactStream do the same for inputs of any size in bounded memory.
//
// Every regular expression is RE2 (linear time in the input, no backtracking), matched on bytes
// (binary input is fine). Scanning costs time linear in the input plus a fixed cost (about a
// microsecond) per candidate match: ordinary logs redact at a few hundred MB/s
// (bench/redact_bench), while input made of nothing but back-to-back candidates ("password="
// repeated, or a periodic explicit value repeated, since occurrences of explicit values are
// found at every offset so that overlapping ones are all caught) runs at a few MB/s.
#ifndef AIRLOCK_REDACT_REDACTOR_H_
#define AIRLOCK_REDACT_REDACTOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace airlock {

namespace redact_internal {
struct StreamMatch;  // redactor.cc
}  // namespace redact_internal

// What a finding is. ToString gives the stable name used in "[REDACTED:<name>]".
enum class SecretKind {
  kExplicitValue,  // "secret": a value registered with Create, or an encoding of it
  kAwsAccessKey,   // "aws_access_key": AKIA/ASIA/... key ids
  kAwsSecretKey,   // "aws_secret_key": 40 base64 characters after an aws secret key name
  kGithubToken,    // "github_token": ghp_/gho_/ghu_/ghs_/ghr_ and github_pat_ tokens
  kGitlabToken,    // "gitlab_token": glpat-/gldt-/glrt-/... and runner registration tokens
  kSlackToken,     // "slack_token": xoxb-/xoxp-/xoxa-/xoxr-/xoxs-/xoxo- and xapp- tokens
  kSlackWebhook,   // "slack_webhook": the secret path of a hooks.slack.com URL
  kLlmApiKey,      // "llm_api_key": sk-..., sk-ant-..., sk-proj-... keys
  kGoogleApiKey,   // "google_api_key": AIza...
  kStripeKey,      // "stripe_key": sk_live_/rk_live_/sk_test_/rk_test_
  kNpmToken,       // "npm_token": npm_...
  kPypiToken,      // "pypi_token": pypi-AgEIcHlwaS5vcmc...
  kJwt,            // "jwt": header.payload[.signature]
  kPrivateKey,     // "private_key": a whole PEM/OpenSSH/PGP private key block
  kAuthorization,  // "authorization": the credential of an Authorization header
  kUrlPassword,    // "url_password": the password of scheme://user:password@host
  kCredential,     // "credential": a high-entropy value assigned to password=, token:, ...
};
const char* ToString(SecretKind kind);

// One secret in a scanned text. Offsets are in bytes of the scanned input.
struct Finding {
  SecretKind kind;
  size_t offset;
  size_t length;

  friend bool operator==(const Finding&, const Finding&) = default;
};

// One finding of a StreamRedactor, located in the raw input stream.
struct StreamFinding {
  SecretKind kind;
  uint64_t offset;
  uint64_t length;
  uint64_t line;  // 1-based line of `offset` (lines end with '\n')

  friend bool operator==(const StreamFinding&, const StreamFinding&) = default;
};

// Which detectors run besides explicit values. Turning the format detectors off weakens
// redaction, so it is a named value rather than a bool.
enum class Detectors {
  kAll,
  kExplicitValuesOnly,
};

struct RedactorOptions {
  // Explicit values shorter than this are refused by Create: a short value (a common word, a
  // small number) would redact ordinary output. Must be at least kMinSecretLengthFloor.
  size_t min_secret_length = 8;
  Detectors detectors = Detectors::kAll;
  // Most bytes a StreamRedactor holds back. Raised at Create to twice the longest pattern it
  // must see whole (the longest encoded explicit value, at least 4 KiB), so at least 8 KiB.
  size_t stream_window = 64 << 10;
  // Most findings a StreamRedactor keeps (finding_count() counts them all).
  size_t max_stream_findings = 1024;
};

inline constexpr size_t kMinSecretLengthFloor = 4;

// Immutable after Create; copies share the compiled state. All const methods are thread-safe.
class Redactor {
 public:
  // Builds a redactor for `secret_values` (duplicates are fine). Errors: InvalidArgument when a
  // value is shorter than options.min_secret_length (the message gives its index and length,
  // never the value) or the options are out of range; Internal if the explicit values' pattern
  // fails to compile. The format detectors are shared by every Redactor and compiled once per
  // process, on the first non-empty input (so Create is cheap and empty output costs nothing).
  //
  // Besides each value itself, Create registers the encodings a program commonly prints it in:
  // percent-encoding (as in a URL or a form body; only when it differs from the value), and
  // base64 in both the standard and the URL-safe alphabet at all three byte alignments, so the
  // value is caught inside a larger base64 text such as "Authorization: Basic <user:value>".
  // For base64 only the characters that depend on the value alone are matched (and redacted);
  // an encoding is registered only when that part is at least min_secret_length long.
  static absl::StatusOr<Redactor> Create(std::vector<std::string> secret_values,
                                         RedactorOptions options = {});

  // Every secret in `text`, ordered by offset (then longest first). Findings may overlap
  // ("secret=abc/AKIA...": a credential containing an aws_access_key); a span found by two
  // detectors is reported once, as the more specific kind ("token=<jwt>" is a jwt).
  std::vector<Finding> Scan(std::string_view text) const;

  // `text` with each secret replaced by "[REDACTED:<kind>]". Overlapping findings become one
  // marker, named after the one that starts first (the longest, then the more specific, when
  // they start together).
  // A private key block with no END line is redacted to the end of the text.
  std::string Redact(std::string_view text) const;

  // Redact() for a piece cut out of a longer output (a preview's head or tail, a log cut at its
  // cap), where a registered secret may be cut in two: with `cut_before`, a start of `text`
  // that is the end of a registered value (or of an encoding of one) is redacted too; with
  // `cut_after`, an end of `text` that is the start of one. Any length counts, down to one
  // byte, so no part of a cut secret survives; a piece the size of one byte may therefore be
  // redacted that was not a secret. A detected format (a token) cut there no longer matches its
  // detector, so a run of 8 or more token characters at a cut edge is redacted too (its 512 bytes
  // nearest the cut at most; CutSecretAtEnd). A piece that begins after a secret's start and ends
  // before its end is not recognized: the pieces airlock cuts (a preview's head or tail, a capped
  // log) always begin or end where their stream does.
  std::string RedactCut(std::string_view text, bool cut_before, bool cut_after) const;

  // How many bytes at the end of `text`, where it was cut, to redact as a cut secret: the longest
  // end that is a proper start of a registered value or encoding, or a run of 8 or more token
  // characters (letters, digits, "_-+/=.": what is left of a detected token cut there; its last
  // 512 bytes at most); 0 when neither.
  size_t CutSecretAtEnd(std::string_view text) const;

  // Bytes a StreamRedactor may hold back (options.stream_window, raised as Create says).
  size_t stream_window() const;

  struct State;  // Compiled patterns; defined in redactor.cc.

 private:
  explicit Redactor(std::shared_ptr<const State> state) : state_(std::move(state)) {}

  std::shared_ptr<const State> state_;

  friend class StreamRedactor;
};

// Redacts a stream given in chunks, holding back at most redactor.stream_window() bytes so that
// a secret split across chunk boundaries is still caught. Not thread-safe (one per stream); it
// keeps the redactor's compiled state alive.
//
// Fail-closed rule: when a secret that is still growing at the end of the held-back window (a
// private key block whose END line has not arrived, a token longer than the window) would make
// the stream hold back more than the window, everything from the secret's start is redacted
// as one marker and the stream keeps discarding input while it still continues the secret (up
// to and including the END line of a private key, or to the first byte that cannot be part of
// a token). So a stream may redact a little more than Redact() would on the whole input, never
// less, except for one documented limit: a JWT whose header alone is longer than 4 KiB, or a
// quoted "password = '...'" value longer than 4 KiB, may be missed.
//
// With a null `out`, Write and Finish only find: nothing is produced, and findings() says where
// the secrets are (the artifact gate scans files this way, in the same bounded memory).
class StreamRedactor {
 public:
  explicit StreamRedactor(const Redactor& redactor);

  // Appends `chunk` to the stream and appends to `*out` (unless null) the redacted bytes that
  // are final.
  void Write(std::string_view chunk, std::string* out);

  // Appends to `*out` the held-back bytes through the last complete line, redacted, unless a
  // secret that may still grow (or that crosses the line end) is among them: that secret and
  // what follows stay held back. For live output, so a finished line is not kept waiting for
  // the window to fill; a partial line is still held back (a secret split across writes).
  void Flush(std::string* out);

  // Ends the stream: appends everything still held back, redacted, to `*out` (unless null).
  // Write must not follow.
  void Finish(std::string* out);

  // Findings among the bytes released so far, with offsets and lines in the raw input stream;
  // at most options.max_stream_findings of them, in the order they were released (by offset
  // within a release). A fail-closed finding appears once its end is known.
  const std::vector<StreamFinding>& findings() const { return findings_; }
  uint64_t finding_count() const { return finding_count_; }

  // Raw input bytes consumed / bytes currently held back.
  uint64_t bytes_in() const { return bytes_in_; }
  size_t held_back() const { return pending_.size(); }

 private:
  void Process(bool final, std::string* out);
  void Release(std::string_view text, size_t ctx, size_t upto,
               std::vector<redact_internal::StreamMatch> released, std::string* out);
  // Swallows the start of `chunk` while it continues a fail-closed secret; returns the rest.
  std::string_view Continue(std::string_view chunk);
  void Record(SecretKind kind, uint64_t offset, uint64_t length, uint64_t line);
  // The line of stream offset `offset`, which must lie in the held-back bytes.
  uint64_t LineAt(uint64_t offset) const;
  // Drops the first `n` held-back bytes (counting their lines).
  void DropPending(size_t n);
  void SetContext(std::string_view released);

  std::shared_ptr<const Redactor::State> state_;
  std::string pending_;          // raw bytes not yet released
  std::string context_;          // the last raw bytes released, for boundary assertions
  uint64_t pending_offset_ = 0;  // stream offset of pending_[0]
  uint64_t bytes_in_ = 0;
  // Fail-closed continuation: active when cont_tail_ != 0 (a detector tail id).
  int cont_tail_ = 0;
  SecretKind cont_kind_ = SecretKind::kCredential;
  uint64_t cont_start_ = 0;
  std::string cont_carry_;  // the last bytes swallowed, to find an END line split in two
  uint64_t cont_line_ = 0;
  uint64_t lines_before_pending_ = 0;  // '\n' bytes before pending_offset_
  std::vector<StreamFinding> findings_;
  uint64_t finding_count_ = 0;
};

// A StreamRedactor for an input that may have been cut at its end (a log kept up to its cap):
// with `cut_at_end`, the last stream_window() bytes of output (longer than any registered value)
// wait for Finish, which redacts what CutSecretAtEnd finds there as "[REDACTED:secret]". Without,
// it is a StreamRedactor.
class CutStreamRedactor {
 public:
  CutStreamRedactor(const Redactor& redactor, bool cut_at_end);
  // Appends to `*out` the redacted bytes that are final.
  void Write(std::string_view chunk, std::string* out);
  // Ends the stream: appends the rest to `*out`.
  void Finish(std::string* out);

 private:
  Redactor redactor_;
  StreamRedactor stream_;
  bool cut_at_end_;
  std::string held_;
};

// Copies `in_fd` to `out_fd` through a StreamRedactor until end of input. Retries EINTR and
// short writes; errors name the failing side ("read input: ...", "write output: ...").
// `cut_at_end`: the input was cut there (a log kept up to its cap), so an end that is the start
// of a registered value is redacted as in Redactor::RedactCut.
absl::Status RedactStream(const Redactor& redactor, int in_fd, int out_fd, bool cut_at_end = false);

}  // namespace airlock

#endif  // AIRLOCK_REDACT_REDACTOR_H_
