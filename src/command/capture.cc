#include "command/capture.h"

#include <algorithm>

#include "common/files.h"
#include "fmt/format.h"

namespace airlock {

OutputCapture::OutputCapture(int raw_fd, int64_t max_kept, size_t preview_bytes,
                             size_t context_bytes)
    : raw_fd_(raw_fd),
      max_kept_(max_kept),
      preview_bytes_(preview_bytes),
      window_(preview_bytes + context_bytes) {}

OutputCapture::OutputCapture(std::function<absl::StatusOr<int>()> open_raw, int64_t max_kept,
                             size_t preview_bytes, size_t context_bytes)
    : OutputCapture(-1, max_kept, preview_bytes, context_bytes) {
  open_raw_ = std::move(open_raw);
}

void OutputCapture::AppendRecordHeader(Stream s, uint32_t length, std::string* out) {
  out->push_back(static_cast<char>(s));
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((length >> (8 * i)) & 0xff));
}

bool OutputCapture::ParseRecordHeader(const char* header, Stream* s, uint32_t* length) {
  const auto stream = static_cast<uint8_t>(header[0]);
  if (stream != kStdout && stream != kStderr) return false;
  *s = static_cast<Stream>(stream);
  *length = 0;
  for (int i = 0; i < 4; ++i) {
    *length |= static_cast<uint32_t>(static_cast<uint8_t>(header[1 + i])) << (8 * i);
  }
  return true;
}

void OutputCapture::Add(Stream s, std::string_view data) {
  StreamState& st = streams_[s];
  st.bytes += static_cast<int64_t>(data.size());
  st.sha.Update(data);

  if (st.head.size() < window_) st.head.append(data.substr(0, window_ - st.head.size()));
  // The tail ring only needs the last window_ bytes of this chunk.
  std::string_view last = data.size() > window_ ? data.substr(data.size() - window_) : data;
  for (char c : last) {
    if (st.tail.size() < window_) {
      st.tail.push_back(c);
    } else {
      st.tail[st.tail_pos] = c;
      st.tail_pos = (st.tail_pos + 1) % window_;
    }
  }

  if (kept_ < max_kept_) {
    std::string_view keep =
        data.substr(0, static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(data.size()),
                                                             max_kept_ - kept_)));
    if (open_raw_ && !keep.empty()) {
      absl::StatusOr<int> fd = open_raw_();
      open_raw_ = nullptr;
      if (fd.ok()) {
        raw_fd_ = *fd;
      } else {
        status_ = fd.status();
      }
    }
    if (raw_fd_ >= 0 && status_.ok() && !keep.empty()) {
      record_.clear();
      AppendRecordHeader(s, static_cast<uint32_t>(keep.size()), &record_);
      record_.append(keep);
      status_ = WriteAll(raw_fd_, record_);
    }
    kept_ += static_cast<int64_t>(keep.size());
    if (keep.size() < data.size()) truncated_ = true;
  } else if (!data.empty()) {
    truncated_ = true;
  }
}

std::string OutputCapture::Preview(Stream s, const Redact& redact) const {
  const StreamState& st = streams_[s];
  std::string tail = st.tail.size() < window_
                         ? st.tail
                         : st.tail.substr(st.tail_pos) + st.tail.substr(0, st.tail_pos);
  if (st.bytes <= static_cast<int64_t>(st.head.size() + tail.size())) {
    // Head and tail together hold the whole stream (they may overlap).
    size_t rest = static_cast<size_t>(st.bytes) - st.head.size();
    std::string all = redact(st.head + tail.substr(tail.size() - rest), false, false);
    if (all.size() <= 2 * preview_bytes_) return ToValidUtf8(all);
    size_t omitted = all.size() - 2 * preview_bytes_;
    return ToValidUtf8(fmt::format("{}\n[... {} bytes omitted ...]\n{}",
                                   all.substr(0, preview_bytes_), omitted,
                                   all.substr(all.size() - preview_bytes_)));
  }
  std::string head = redact(st.head, false, true);
  std::string end = redact(tail, true, false);
  head.resize(std::min(head.size(), preview_bytes_));
  if (end.size() > preview_bytes_) end = end.substr(end.size() - preview_bytes_);
  int64_t omitted = st.bytes - static_cast<int64_t>(2 * preview_bytes_);
  return ToValidUtf8(fmt::format("{}\n[... {} bytes omitted ...]\n{}", head, omitted, end));
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xe  ? 3
                 : (c >> 3) == 0x1e ? 4
                                    : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    }
    if (ok && len > 1) {
      // Reject overlong forms, surrogates and values past U+10FFFF.
      uint32_t cp = c & (0xff >> (len + 1));
      for (size_t k = 1; k < len; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
      static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[len] && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append("\xef\xbf\xbd");
      ++i;
    }
  }
  return out;
}

}  // namespace airlock
