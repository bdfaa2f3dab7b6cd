// Output capture for a running command: counts and hashes every byte of stdout and stderr,
// keeps the first `max_kept` bytes (both streams, in arrival order) in a raw log file, and
// keeps a head and a tail of each stream for previews. Memory use is fixed, whatever the
// command writes.
#ifndef AIRLOCK_COMMAND_CAPTURE_H_
#define AIRLOCK_COMMAND_CAPTURE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sha256.h"

namespace airlock {

class OutputCapture {
 public:
  enum Stream { kStdout = 0, kStderr = 1 };

  // The raw file holds the kept bytes of both streams in the order they came, as records: the
  // stream (one byte, 0 or 1), the length (four bytes, little-endian), the bytes. It is never
  // shown as it is: FinishOutput redacts each stream on its own into the log, so output of one
  // stream that comes in the middle of a secret on the other does not hide it.
  static constexpr size_t kRecordHeaderBytes = 5;
  // Appends a record's header to `out`.
  static void AppendRecordHeader(Stream s, uint32_t length, std::string* out);
  // Reads a record's header (kRecordHeaderBytes at `header`); false when it names no stream.
  static bool ParseRecordHeader(const char* header, Stream* s, uint32_t* length);

  // raw_fd: where kept bytes are written (not owned); -1 keeps nothing. Previews show
  // preview_bytes of each end of a stream; context_bytes more are kept on the inner side so a
  // secret crossing a preview's edge is still seen whole by the redactor.
  OutputCapture(int raw_fd, int64_t max_kept, size_t preview_bytes = 2048,
                size_t context_bytes = 4096);
  // The same, with the raw log opened by `open_raw` when the first byte is kept (a command that
  // prints nothing makes no file). `open_raw` returns the descriptor (owned by its caller) or an
  // error, which becomes status().
  OutputCapture(std::function<absl::StatusOr<int>()> open_raw, int64_t max_kept,
                size_t preview_bytes = 2048, size_t context_bytes = 4096);

  void Add(Stream s, std::string_view data);

  // True once more was written than max_kept.
  bool truncated() const { return truncated_; }
  int64_t bytes(Stream s) const { return streams_[s].bytes; }
  int64_t kept() const { return kept_; }
  // SHA-256 of every byte of the stream. Call once, after the last Add.
  std::string FinishSha256(Stream s) { return streams_[s].sha.HexDigest(); }
  // Redacts a piece of a stream; `cut_before`/`cut_after`: the piece was cut out of the stream
  // there (Redactor::RedactCut).
  using Redact = std::function<std::string(std::string_view text, bool cut_before, bool cut_after)>;
  // The head and tail of the stream, with a marker for what lies between, made valid UTF-8.
  // `redact` is applied to the head and the tail (with their context) before they are cut to
  // preview_bytes, and told where they were cut out of the stream, so no part of a secret
  // survives at a cut, however long the secret.
  std::string Preview(Stream s, const Redact& redact) const;
  std::string Preview(Stream s) const {
    return Preview(s, [](std::string_view t, bool, bool) { return std::string(t); });
  }
  // The first error writing the raw log, if any (capture goes on without it).
  const absl::Status& status() const { return status_; }

 private:
  struct StreamState {
    int64_t bytes = 0;
    Sha256 sha;
    std::string head;
    std::string tail;  // ring buffer of the last window_ bytes
    size_t tail_pos = 0;
  };

  int raw_fd_;
  std::function<absl::StatusOr<int>()> open_raw_;  // until the raw log is opened
  int64_t max_kept_;
  size_t preview_bytes_;
  size_t window_;  // preview_bytes_ + context
  int64_t kept_ = 0;
  bool truncated_ = false;
  StreamState streams_[2];
  std::string record_;  // the record being written (reused)
  absl::Status status_;
};

// `s` with every invalid UTF-8 sequence replaced by U+FFFD (JSON needs valid UTF-8).
std::string ToValidUtf8(std::string_view s);

}  // namespace airlock

#endif  // AIRLOCK_COMMAND_CAPTURE_H_
