#include "command/finish.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "command/report.h"
#include "common/files.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"

namespace airlock {

absl::StatusOr<Redactor> RedactorFor(const std::vector<std::string>& secrets) {
  if (secrets.empty()) {
    static const absl::StatusOr<Redactor>* shared =
        new absl::StatusOr<Redactor>(Redactor::Create({}));
    return *shared;
  }
  return Redactor::Create(secrets);
}

namespace {

// The failure analysis and the report, from redacted text only (the command line and the error
// are redacted as the report quotes them).
absl::Status AnalyzeInto(const CommandSpec& command, const Redactor& redactor,
                         const std::string& text, CommandResult* r) {
  FailureAnalysis analysis = AnalyzeOutput(r->classification, r->exit_code, text);
  r->failure = analysis.kind;
  r->failure_detail = std::move(analysis.detail);
  r->key_lines = std::move(analysis.key_lines);
  r->report = RenderReport(command, *r, &redactor);
  return absl::OkStatus();
}

// Redacts the raw file (OutputCapture's records) into `out_fd`. Each stream goes through a
// redactor of its own, so that stderr arriving in the middle of a secret printed on stdout (or
// the reverse) does not split it out of sight; the redacted bytes are written in the order they
// come out, which keeps the streams' interleaving except where a redactor holds bytes back. With
// `cut`, the log was cut (at its cap, or where writing it failed) and either stream may end inside
// a secret; a last record cut short by a failed write ends the log there.
absl::Status RedactRecords(const Redactor& redactor, int in_fd, int out_fd, bool cut) {
  CutStreamRedactor streams[2] = {{redactor, cut}, {redactor, cut}};
  std::string buffer;  // bytes read and not yet taken
  size_t taken = 0;
  bool eof = false;
  // Makes at least `n` bytes available after `taken` unless the file ends first.
  auto fill = [&](size_t n) -> absl::Status {
    while (!eof && buffer.size() - taken < n) {
      buffer.erase(0, taken);
      taken = 0;
      char chunk[64 << 10];
      ssize_t r = ::read(in_fd, chunk, sizeof(chunk));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoStatus(errno, "read raw log");
      if (r == 0) eof = true;
      buffer.append(chunk, static_cast<size_t>(r));
    }
    return absl::OkStatus();
  };
  std::string out;
  for (;;) {
    RETURN_IF_ERROR(fill(OutputCapture::kRecordHeaderBytes));
    if (buffer.size() - taken < OutputCapture::kRecordHeaderBytes) break;  // the end, or cut
    OutputCapture::Stream stream;
    uint32_t length = 0;
    if (!OutputCapture::ParseRecordHeader(buffer.data() + taken, &stream, &length)) {
      return absl::DataLossError("raw log: a record of no stream");
    }
    taken += OutputCapture::kRecordHeaderBytes;
    while (length > 0) {
      RETURN_IF_ERROR(fill(1));
      size_t n = std::min<size_t>(length, buffer.size() - taken);
      if (n == 0) break;  // cut short
      out.clear();
      streams[stream].Write(std::string_view(buffer).substr(taken, n), &out);
      RETURN_IF_ERROR(WriteAll(out_fd, out));
      taken += n;
      length -= static_cast<uint32_t>(n);
    }
  }
  for (CutStreamRedactor& s : streams) {
    out.clear();
    s.Finish(&out);
    RETURN_IF_ERROR(WriteAll(out_fd, out));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FinishOutput(const CommandSpec& command, const Redactor& redactor,
                          const OutputCapture& capture, const std::string& raw_path,
                          const std::string& log_path, CommandResult* r) {
  auto redact = [&](std::string_view text, bool cut_before, bool cut_after) {
    return redactor.RedactCut(text, cut_before, cut_after);
  };
  r->stdout_preview = capture.Preview(OutputCapture::kStdout, redact);
  r->stderr_preview = capture.Preview(OutputCapture::kStderr, redact);

  // A command that printed nothing keeps no log: creating an empty file on the log directory's
  // file system was a large share of a quiet command's cost (raw_log stays empty). Its raw file
  // may not exist either (OutputCapture opens it with the first byte).
  if (capture.kept() == 0) {
    ::unlink(raw_path.c_str());
    return AnalyzeInto(command, redactor, r->stdout_preview + "\n" + r->stderr_preview, r);
  }
  UniqueFd in(::open(raw_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in && !capture.status().ok()) return Annotate(capture.status(), "raw log");
  if (!in) return ErrnoStatus(errno, fmt::format("open {}", raw_path));
  UniqueFd out(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out) return ErrnoStatus(errno, fmt::format("create {}", log_path));
  // A log cut at maxLogBytes, or where writing it failed, may end inside a secret.
  absl::Status s =
      RedactRecords(redactor, in.get(), out.get(), capture.truncated() || !capture.status().ok());
  in.Reset();
  // The unredacted copy goes whatever happened; a half-written log is removed too.
  ::unlink(raw_path.c_str());
  if (!s.ok()) {
    ::unlink(log_path.c_str());
    return Annotate(s, fmt::format("redact raw log into {}", log_path));
  }
  r->raw_log = log_path;
  // The analysis reads only redacted text: the kept log (bounded by maxLogBytes), else the
  // previews.
  std::string text =
      ReadFile(log_path, static_cast<size_t>(std::max<int64_t>(capture.kept(), 0)) + 1)
          .value_or(r->stdout_preview + "\n" + r->stderr_preview);
  if (capture.truncated()) text += "\n" + r->stdout_preview + "\n" + r->stderr_preview;
  return AnalyzeInto(command, redactor, text, r);
}

namespace {

void RedactInPlace(const Redactor& redactor, std::string& text) {
  if (!text.empty()) text = redactor.Redact(text);
}

void RedactJsonStrings(const Redactor& redactor, nlohmann::json& j) {
  if (j.is_string()) {
    j = RedactMarkedText(redactor, j.get<std::string>());
  } else if (j.is_structured()) {
    for (nlohmann::json& child : j) RedactJsonStrings(redactor, child);
  }
}

}  // namespace

void RedactResultFields(const Redactor& redactor, CommandResult* r) {
  for (Violation& v : r->violations) {
    // A denied call's data comes from the syscall report, which the supervisor redacted as it
    // decoded each call (SupervisorOptions::redactor).
    if (v.kind == kSyscallViolation) continue;
    RedactInPlace(redactor, v.detail);
    RedactJsonStrings(redactor, v.data);
  }
  RedactInPlace(redactor, r->failure_detail);
  for (std::string& line : r->key_lines) RedactInPlace(redactor, line);
  RedactInPlace(redactor, r->error);
}

}  // namespace airlock
