// Output capture for a running command: counts and hashes every byte of stdout and stderr,
// keeps the first `max_kept` bytes (both streams, in arrival order) in a raw log file, and
// keeps a head and a tail of each stream for previews. Memory use is fixed, whatever the
// command writes.
#ifndef AIRLOCK_COMMAND_CAPTURE_H_
#define AIRLOCK_COMMAND_CAPTURE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "common/sha256.h"

namespace airlock {

class OutputCapture {
 public:
  enum Stream { kStdout = 0, kStderr = 1 };

  // raw_fd: where kept bytes are written (not owned); -1 keeps nothing.
  OutputCapture(int raw_fd, int64_t max_kept, size_t preview_bytes = 2048);

  void Add(Stream s, std::string_view data);

  // True once more was written than max_kept.
  bool truncated() const { return truncated_; }
  int64_t bytes(Stream s) const { return streams_[s].bytes; }
  int64_t kept() const { return kept_; }
  // SHA-256 of every byte of the stream. Call once, after the last Add.
  std::string FinishSha256(Stream s) { return streams_[s].sha.HexDigest(); }
  // The head and tail of the stream, with a marker for what lies between, made valid UTF-8.
  std::string Preview(Stream s) const;
  // The first error writing the raw log, if any (capture goes on without it).
  const absl::Status& status() const { return status_; }

 private:
  struct StreamState {
    int64_t bytes = 0;
    Sha256 sha;
    std::string head;
    std::string tail;  // ring buffer of the last preview_bytes_ bytes
    size_t tail_pos = 0;
  };

  int raw_fd_;
  int64_t max_kept_;
  size_t preview_bytes_;
  int64_t kept_ = 0;
  bool truncated_ = false;
  StreamState streams_[2];
  absl::Status status_;
};

// `s` with every invalid UTF-8 sequence replaced by U+FFFD (JSON needs valid UTF-8).
std::string ToValidUtf8(std::string_view s);

}  // namespace airlock

#endif  // AIRLOCK_COMMAND_CAPTURE_H_
