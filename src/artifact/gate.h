// The artifact release gate: decides, file by file, what of a sandbox's output may leave
// (docs/artifacts.md).
//
// Every candidate file goes through these rules, in order; the first that applies decides:
//   symlink                        a symbolic link (never followed, never collected)
//   not-regular-file               a directory, device, FIFO or socket
//   outside-allowed-paths          a path that is not absolute and normalized
//   never-leave/home-directory     under /sandbox/home, /home or /root
//   never-leave/dependency-cache   node_modules, .venv, site-packages, __pycache__, .m2,
//                                  .gradle, .cache, /sandbox/cache, ... (anywhere in the path)
//   never-leave/private-key        id_rsa & co., *.key, *.p12, *.pfx, *.jks, *.ppk, anything
//                                  under .ssh or .gnupg; or, by content, a file that starts with
//                                  a private key (PEM, OpenSSH, PuTTY, PGP, Java keystore)
//   never-leave/env-file           .env, .env.* (not .env.example/.sample/.template/.dist),
//                                  .envrc, *.env
//   never-leave/token-file         .netrc, .npmrc, .pypirc, .git-credentials, .pgpass,
//                                  .docker/config.json, .kube/config, .aws/credentials,
//                                  *.tfstate, credentials.json, ...
//   outside-allowed-paths          not at or under one of artifacts.paths
//   size-cap                       the file, or the collection with it, would pass
//                                  artifacts.maxSizeMb (declared size first, then bytes read)
//   binary-without-reason          binary by content (ELF, Mach-O, PE, WebAssembly, archive
//                                  magic, or a NUL byte in the first 8 KiB) larger than
//                                  artifacts.binaryThresholdKb, with no artifacts.allowBinaries
//                                  entry matching its path
// A file that passes them is read once, as a stream in bounded memory, and scanned for secrets
// by the redactor's detectors (and the run's explicit secret values) when artifacts.secretScan
// is on. A finding quarantines the file (rule "secret-found"; the verdict says which detector,
// at which offset and line, never the secret itself), blocks the whole collection (nothing is
// released) and means the run is POLICY_BLOCKED. Refused files do not block the others.
//
// Thread-safe: Inspect is const and may run concurrently on different collections.
#ifndef AIRLOCK_ARTIFACT_GATE_H_
#define AIRLOCK_ARTIFACT_GATE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "redact/redactor.h"
#include "spec/sandbox_spec.h"

namespace airlock::artifact {

// One file's content as a stream. The node daemon implements it over a file it opened inside
// the sandbox (through the path guard); tests over memory. Used by one thread at a time.
class ContentReader {
 public:
  virtual ~ContentReader() = default;
  // Reads up to buffer.size() next bytes into `buffer`; returns how many, 0 at the end.
  virtual absl::StatusOr<size_t> Read(std::span<char> buffer) = 0;
};

// A ContentReader over bytes in memory (they must outlive it).
class StringReader : public ContentReader {
 public:
  explicit StringReader(std::string_view data) : data_(data) {}
  absl::StatusOr<size_t> Read(std::span<char> buffer) override;

 private:
  std::string_view data_;
};

// A ContentReader over a file descriptor it owns (closed on destruction); EINTR is retried.
class FdReader : public ContentReader {
 public:
  explicit FdReader(int fd) : fd_(fd) {}
  ~FdReader() override;
  FdReader(const FdReader&) = delete;
  FdReader& operator=(const FdReader&) = delete;
  absl::StatusOr<size_t> Read(std::span<char> buffer) override;

 private:
  int fd_;
};

struct Candidate {
  std::string path;   // absolute sandbox path
  uint64_t size = 0;  // st_size as listed
  uint32_t mode = 0;  // st_mode from lstat: file type and permission bits
  // Opens the content. Called at most once, and only for a regular file that the path and
  // size rules let through.
  std::function<absl::StatusOr<std::unique_ptr<ContentReader>>()> open;
};

enum class Outcome {
  kReleased,     // passed every rule; may leave
  kWithheld,     // passed every rule, but another file's quarantine blocked the collection
  kRefused,      // a rule refused it (Verdict::rule)
  kQuarantined,  // a secret was found in it; the collection is blocked
};
const char* ToString(Outcome outcome);  // "released", "withheld", "refused", "quarantined"

// Where a secret is, never what it is.
struct SecretHit {
  std::string detector;  // redactor kind: "aws_access_key", "private_key", "secret", ...
  uint64_t offset = 0;   // byte offset in the file
  uint64_t line = 0;     // 1-based line
  uint64_t length = 0;
};

struct FileVerdict {
  std::string path;
  Outcome outcome = Outcome::kRefused;
  std::string rule;    // refused: the rule's name; quarantined: "secret-found"; else empty
  std::string detail;  // one line: what matched, e.g. "basename .env", "ELF executable, 3.0 MiB"
  uint64_t bytes = 0;  // bytes read (released and withheld: the whole content)
  std::string sha256;  // hex digest of the bytes read, when the whole file was read
  std::string binary;  // the content's binary kind ("ELF executable"), empty for text
  std::string binary_reason;    // the allowBinaries reason that let a binary through
  std::vector<SecretHit> hits;  // quarantined: at most GateOptions::max_hits_per_file
};

struct Collection {
  std::vector<FileVerdict> files;  // in the order of the candidates
  // A file was quarantined: nothing is released and the run is POLICY_BLOCKED.
  bool blocked = false;
  uint64_t released_bytes = 0;  // of released (or, when blocked, withheld) files
};

// Receives the bytes of every file the gate reads, as it reads them, so the daemon can stage a
// copy that is exactly what was scanned (one read; nothing can change between the scan and the
// release). Begin/Write*/End for each file that is read, in order; a file refused before it is
// read gets no call. On an error the gate stops and returns it.
class ArtifactSink {
 public:
  virtual ~ArtifactSink() = default;
  virtual absl::Status Begin(const Candidate& file) = 0;
  virtual absl::Status Write(std::string_view chunk) = 0;
  // The file's verdict (released, refused or quarantined; withholding is decided at the end,
  // see Collection::blocked).
  virtual absl::Status End(const FileVerdict& verdict) = 0;
};

struct GateOptions {
  size_t chunk_bytes = 64 << 10;  // read size; at least 4 KiB
  size_t head_bytes = 8 << 10;    // content sniffed for binaries and key headers
  // Secrets reported per quarantined file; reading stops once this many are found.
  size_t max_hits_per_file = 16;
};

class ReleaseGate {
 public:
  // `redactor` brings the detectors and the run's explicit secret values (the same redactor
  // that redacts the run's output). InvalidArgument when the spec's artifacts section is
  // invalid (spec::Validate catches that first), naming the field.
  static absl::StatusOr<ReleaseGate> Create(const spec::Artifacts& spec, Redactor redactor,
                                            GateOptions options = {});

  // The verdict on every candidate. Memory stays bounded whatever the files' sizes (a chunk, the
  // head and the redactor's stream window per file). Errors: a failing open or read, or a sink
  // error, annotated with the file's path; nothing may be released then.
  absl::StatusOr<Collection> Inspect(const std::vector<Candidate>& files,
                                     ArtifactSink* sink = nullptr) const;

 private:
  ReleaseGate(spec::Artifacts spec, Redactor redactor, GateOptions options)
      : spec_(std::move(spec)), redactor_(std::move(redactor)), options_(options) {}

  spec::Artifacts spec_;
  Redactor redactor_;
  GateOptions options_;
};

// The collection for the API and the audit trail: {blocked, released_bytes, files: [{path,
// outcome, rule, detail, bytes, sha256, binary, binary_reason, hits: [{detector, offset, line,
// length}]}]}.
nlohmann::json ToJson(const Collection& collection);

// A few lines for the model: counts, then each file that was not released and why, and, when
// blocked, that nothing was released and what to do.
std::string Summary(const Collection& collection);

}  // namespace airlock::artifact

#endif  // AIRLOCK_ARTIFACT_GATE_H_
