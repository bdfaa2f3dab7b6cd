#include "client/internal/sse.h"

namespace airlock::client::internal {

std::vector<SseEvent> SseParser::Feed(std::string_view chunk) {
  std::vector<SseEvent> out;
  pending_.append(chunk);
  size_t start = 0;
  for (;;) {
    size_t nl = pending_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(pending_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    Line(line, &out);
    start = nl + 1;
  }
  pending_.erase(0, start);
  return out;
}

void SseParser::Line(std::string_view line, std::vector<SseEvent>* out) {
  if (line.empty()) {
    if (has_data_) out->push_back(std::move(current_));
    current_ = SseEvent{};
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // a comment (keep-alive)
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "event") {
    current_.event = std::string(value);
  } else if (field == "data") {
    if (has_data_) current_.data += '\n';
    current_.data.append(value);
    has_data_ = true;
  }
}

}  // namespace airlock::client::internal
