#include "artifact/gate.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "artifact/internal/classify.h"
#include "common/sha256.h"
#include "common/status.h"
#include "common/units.h"
#include "fmt/format.h"
#include "spec/patterns.h"

namespace airlock::artifact {
namespace {

constexpr size_t kMinChunk = 4 << 10;
constexpr size_t kSummaryFiles = 30;

FileVerdict Refused(const Candidate& file, std::string rule, std::string detail) {
  FileVerdict v;
  v.path = file.path;
  v.outcome = Outcome::kRefused;
  v.rule = std::move(rule);
  v.detail = std::move(detail);
  return v;
}

// What to do about a refusal, for the model.
const char* Advice(std::string_view rule) {
  if (rule == "outside-allowed-paths") return "write artifacts under artifacts.paths";
  if (rule == "size-cap") return "make it smaller or split it; artifacts.maxSizeMb caps the total";
  if (rule == "binary-without-reason") {
    return "declare it in artifacts.allowBinaries with a reason, or leave it out";
  }
  if (rule == "symlink") return "copy the file itself into the artifacts directory";
  if (rule.starts_with("never-leave/")) return "this kind of file never leaves a sandbox";
  return "";
}

}  // namespace

const char* ToString(Outcome outcome) {
  switch (outcome) {
    case Outcome::kReleased:
      return "released";
    case Outcome::kWithheld:
      return "withheld";
    case Outcome::kRefused:
      return "refused";
    case Outcome::kQuarantined:
      return "quarantined";
  }
  return "refused";
}

absl::StatusOr<size_t> StringReader::Read(std::span<char> buffer) {
  const size_t n = std::min(buffer.size(), data_.size());
  std::copy_n(data_.data(), n, buffer.data());
  data_.remove_prefix(n);
  return n;
}

FdReader::~FdReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<size_t> FdReader::Read(std::span<char> buffer) {
  while (true) {
    ssize_t n = ::read(fd_, buffer.data(), buffer.size());
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return ErrnoStatus(errno, "read");
  }
}

absl::StatusOr<ReleaseGate> ReleaseGate::Create(const spec::Artifacts& spec, Redactor redactor,
                                                GateOptions options) {
  if (spec.max_size_mb <= 0) return InvalidArgument("artifacts.maxSizeMb: must be > 0");
  if (spec.binary_threshold_kb < 0) {
    return InvalidArgument("artifacts.binaryThresholdKb: must be >= 0");
  }
  for (size_t i = 0; i < spec.allow_binaries.size(); ++i) {
    std::string problem = spec::PathGlobProblem(spec.allow_binaries[i].path);
    if (!problem.empty()) {
      return InvalidArgument(fmt::format("artifacts.allowBinaries[{}].path: {}", i, problem));
    }
  }
  for (size_t i = 0; i < spec.paths.size(); ++i) {
    if (!internal::IsNormalizedAbsolute(spec.paths[i])) {
      return InvalidArgument(fmt::format("artifacts.paths[{}]: not a normalized absolute path", i));
    }
  }
  options.chunk_bytes = std::max(options.chunk_bytes, kMinChunk);
  options.head_bytes = std::clamp<size_t>(options.head_bytes, 1, options.chunk_bytes);
  options.max_hits_per_file = std::max<size_t>(options.max_hits_per_file, 1);
  return ReleaseGate(spec, std::move(redactor), options);
}

namespace {

// One file read through the gate: sniffed, hashed, scanned and copied to the sink as it is read.
class FileInspection {
 public:
  FileInspection(const Candidate& file, const spec::Artifacts& spec, const Redactor& redactor,
                 const GateOptions& options, uint64_t room, ArtifactSink* sink)
      : file_(file), spec_(spec), options_(options), room_(room), sink_(sink), scanner_(redactor) {
    verdict_.path = file.path;
  }

  absl::StatusOr<FileVerdict> Run() {
    if (!file_.open) return FailedPrecondition("no way to open the file");
    ASSIGN_OR_RETURN(std::unique_ptr<ContentReader> reader, file_.open(), "open");
    if (sink_ != nullptr) RETURN_IF_ERROR(sink_->Begin(file_), "artifact sink");
    RETURN_IF_ERROR(ReadAll(*reader));
    RETURN_IF_ERROR(sink_status_, "artifact sink");
    if (sink_ != nullptr) RETURN_IF_ERROR(sink_->End(verdict_), "artifact sink");
    return std::move(verdict_);
  }

 private:
  absl::Status ReadAll(ContentReader& reader) {
    std::string buffer(options_.chunk_bytes, '\0');
    std::string head;
    bool sniffed = false;
    while (true) {
      ASSIGN_OR_RETURN(size_t n, reader.Read(std::span<char>(buffer.data(), buffer.size())),
                       "read");
      if (n > buffer.size()) return Internal("read: the reader returned more than asked for");
      const std::string_view chunk(buffer.data(), n);
      if (!sniffed) {
        head.append(chunk);
        if (n != 0 && head.size() < options_.head_bytes) continue;
        sniffed = true;
        if (!Sniff(head, /*whole=*/n == 0)) return absl::OkStatus();
        if (!Feed(head)) return absl::OkStatus();
        head.clear();
        head.shrink_to_fit();
      } else if (n != 0 && !Feed(chunk)) {
        return absl::OkStatus();
      }
      if (n == 0) break;
    }
    Finish();
    return absl::OkStatus();
  }

  // Decides on the head of the content; false when that refuses the file.
  bool Sniff(std::string_view head, bool whole) {
    internal::HeadKind kind = internal::SniffHead(head);
    if (!kind.private_key.empty()) {
      Refuse("never-leave/private-key", fmt::format("content is a {}", kind.private_key));
      return false;
    }
    verdict_.binary = std::move(kind.binary);
    return CheckBinarySize(whole ? head.size() : std::max<uint64_t>(file_.size, head.size()));
  }

  // A binary over the threshold needs an allowBinaries entry.
  bool CheckBinarySize(uint64_t size) {
    if (verdict_.binary.empty()) return true;
    const uint64_t threshold = static_cast<uint64_t>(spec_.binary_threshold_kb) << 10;
    if (size <= threshold) return true;
    for (const spec::BinaryAllowance& allowance : spec_.allow_binaries) {
      if (spec::MatchPathGlob(allowance.path, file_.path)) {
        verdict_.binary_reason = allowance.reason;
        return true;
      }
    }
    Refuse("binary-without-reason",
           fmt::format("{}, {}, over artifacts.binaryThresholdKb ({} KiB) with no "
                       "artifacts.allowBinaries entry",
                       verdict_.binary, FormatBytes(static_cast<int64_t>(size)),
                       spec_.binary_threshold_kb));
    return false;
  }

  // Scans, hashes and copies `data`; false when reading should stop.
  bool Feed(std::string_view data) {
    if (data.empty()) return true;
    bytes_ += data.size();
    verdict_.bytes = bytes_;
    if (bytes_ > room_) {
      Refuse("size-cap", fmt::format("grew past {} while read, over artifacts.maxSizeMb",
                                     FormatBytes(static_cast<int64_t>(room_))));
      return false;
    }
    if (spec_.secret_scan) {
      scanner_.Write(data, nullptr);
      if (scanner_.finding_count() >= options_.max_hits_per_file) {
        Quarantine();
        return false;
      }
    }
    sha_.Update(data);
    if (sink_ != nullptr) {
      sink_status_ = sink_->Write(data);
      if (!sink_status_.ok()) return false;
    }
    return true;
  }

  void Finish() {
    if (spec_.secret_scan) {
      scanner_.Finish(nullptr);
      if (scanner_.finding_count() > 0) {
        Quarantine();
        return;
      }
    }
    if (!CheckBinarySize(bytes_)) return;
    verdict_.outcome = Outcome::kReleased;
    verdict_.sha256 = sha_.HexDigest();
  }

  void Quarantine() {
    verdict_.outcome = Outcome::kQuarantined;
    verdict_.rule = "secret-found";
    for (const StreamFinding& f : scanner_.findings()) {
      if (verdict_.hits.size() >= options_.max_hits_per_file) break;
      verdict_.hits.push_back({ToString(f.kind), f.offset, f.line, f.length});
    }
    const uint64_t count = scanner_.finding_count();
    if (!verdict_.hits.empty()) {
      const SecretHit& first = verdict_.hits.front();
      verdict_.detail =
          fmt::format("{} at line {} (byte {}){}", first.detector, first.line, first.offset,
                      count > 1 ? fmt::format(", and {} more", count - 1) : "");
    } else {
      verdict_.detail = fmt::format("{} secrets", count);
    }
  }

  void Refuse(std::string rule, std::string detail) {
    verdict_.outcome = Outcome::kRefused;
    verdict_.rule = std::move(rule);
    verdict_.detail = std::move(detail);
  }

  const Candidate& file_;
  const spec::Artifacts& spec_;
  const GateOptions& options_;
  const uint64_t room_;
  ArtifactSink* sink_;
  StreamRedactor scanner_;
  Sha256 sha_;
  uint64_t bytes_ = 0;
  FileVerdict verdict_;
  absl::Status sink_status_;
};

std::string FileType(uint32_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return fmt::format("file type {:o}", mode & S_IFMT);
}

}  // namespace

absl::StatusOr<Collection> ReleaseGate::Inspect(const std::vector<Candidate>& files,
                                                ArtifactSink* sink) const {
  Collection collection;
  const uint64_t cap = static_cast<uint64_t>(spec_.max_size_mb) << 20;
  uint64_t total = 0;
  for (const Candidate& file : files) {
    if (S_ISLNK(file.mode)) {
      collection.files.push_back(
          Refused(file, "symlink", "a symbolic link: never followed, never collected"));
      continue;
    }
    if (!S_ISREG(file.mode)) {
      collection.files.push_back(Refused(file, "not-regular-file", FileType(file.mode)));
      continue;
    }
    if (!internal::IsNormalizedAbsolute(file.path)) {
      collection.files.push_back(
          Refused(file, "outside-allowed-paths", "not a normalized absolute path"));
      continue;
    }
    if (std::optional<internal::Refusal> r = internal::NeverLeaveByPath(file.path)) {
      collection.files.push_back(Refused(file, std::move(r->rule), std::move(r->detail)));
      continue;
    }
    const bool allowed =
        std::any_of(spec_.paths.begin(), spec_.paths.end(),
                    [&](const std::string& dir) { return internal::IsAtOrUnder(file.path, dir); });
    if (!allowed) {
      collection.files.push_back(
          Refused(file, "outside-allowed-paths", "not under any of artifacts.paths"));
      continue;
    }
    if (file.size > cap) {
      collection.files.push_back(
          Refused(file, "size-cap",
                  fmt::format("{}, over artifacts.maxSizeMb ({} MiB)",
                              FormatBytes(static_cast<int64_t>(file.size)), spec_.max_size_mb)));
      continue;
    }
    if (total + file.size > cap) {
      collection.files.push_back(
          Refused(file, "size-cap",
                  fmt::format("{} would bring the collection past artifacts.maxSizeMb ({} MiB)",
                              FormatBytes(static_cast<int64_t>(file.size)), spec_.max_size_mb)));
      continue;
    }
    FileInspection inspection(file, spec_, redactor_, options_, cap - total, sink);
    absl::StatusOr<FileVerdict> verdict = inspection.Run();
    if (!verdict.ok()) {
      return Annotate(verdict.status(), fmt::format("inspect artifact {}", file.path));
    }
    if (verdict->outcome == Outcome::kReleased) total += verdict->bytes;
    if (verdict->outcome == Outcome::kQuarantined) collection.blocked = true;
    collection.files.push_back(std::move(*verdict));
  }
  if (collection.blocked) {
    for (FileVerdict& v : collection.files) {
      if (v.outcome == Outcome::kReleased) v.outcome = Outcome::kWithheld;
    }
  }
  collection.released_bytes = total;
  return collection;
}

nlohmann::json ToJson(const Collection& collection) {
  nlohmann::json files = nlohmann::json::array();
  for (const FileVerdict& v : collection.files) {
    nlohmann::json hits = nlohmann::json::array();
    for (const SecretHit& h : v.hits) {
      hits.push_back(
          {{"detector", h.detector}, {"offset", h.offset}, {"line", h.line}, {"length", h.length}});
    }
    files.push_back({{"path", v.path},
                     {"outcome", ToString(v.outcome)},
                     {"rule", v.rule},
                     {"detail", v.detail},
                     {"bytes", v.bytes},
                     {"sha256", v.sha256},
                     {"binary", v.binary},
                     {"binary_reason", v.binary_reason},
                     {"hits", std::move(hits)}});
  }
  return {{"blocked", collection.blocked},
          {"released_bytes", collection.released_bytes},
          {"files", std::move(files)}};
}

std::string Summary(const Collection& collection) {
  size_t counts[4] = {};
  for (const FileVerdict& v : collection.files) ++counts[static_cast<int>(v.outcome)];
  std::string out;
  if (collection.blocked) {
    out += fmt::format(
        "artifacts: BLOCKED, nothing released: {} quarantined (a secret was found), {} "
        "withheld, {} refused; the run is POLICY_BLOCKED\n",
        counts[static_cast<int>(Outcome::kQuarantined)],
        counts[static_cast<int>(Outcome::kWithheld)], counts[static_cast<int>(Outcome::kRefused)]);
  } else {
    out += fmt::format("artifacts: {} released ({}), {} refused\n",
                       counts[static_cast<int>(Outcome::kReleased)],
                       FormatBytes(static_cast<int64_t>(collection.released_bytes)),
                       counts[static_cast<int>(Outcome::kRefused)]);
  }
  size_t shown = 0, hidden = 0;
  for (const FileVerdict& v : collection.files) {
    if (v.outcome != Outcome::kRefused && v.outcome != Outcome::kQuarantined) continue;
    if (shown == kSummaryFiles) {
      ++hidden;
      continue;
    }
    ++shown;
    const char* advice = Advice(v.rule);
    out += fmt::format("  {} {}: {} ({}){}{}\n", ToString(v.outcome), v.path, v.rule, v.detail,
                       *advice != '\0' ? "; " : "", advice);
  }
  if (hidden > 0) out += fmt::format("  ... and {} more\n", hidden);
  if (collection.blocked) {
    out +=
        "remove the secrets from the quarantined files (never write credentials into artifacts), "
        "then collect again\n";
  }
  return out;
}

}  // namespace airlock::artifact
