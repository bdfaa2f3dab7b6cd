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
  // A log cut at maxLogBytes may end inside a registered secret.
  absl::Status s = RedactStream(redactor, in.get(), out.get(), capture.truncated());
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

}  // namespace airlock
