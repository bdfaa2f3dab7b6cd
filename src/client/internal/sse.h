// Server-sent events (text/event-stream, the subset airlockd writes): `event:` and `data:` lines,
// an event ended by a blank line. Incremental: Feed takes the stream in any pieces.
#ifndef AIRLOCK_CLIENT_INTERNAL_SSE_H_
#define AIRLOCK_CLIENT_INTERNAL_SSE_H_

#include <string>
#include <string_view>
#include <vector>

namespace airlock::client::internal {

struct SseEvent {
  std::string event = "message";  // the `event:` field; "message" when none
  std::string data;               // `data:` lines joined with "\n"
};

class SseParser {
 public:
  // The events completed by `chunk` (possibly none).
  std::vector<SseEvent> Feed(std::string_view chunk);

 private:
  void Line(std::string_view line, std::vector<SseEvent>* out);

  std::string pending_;  // an unfinished line
  SseEvent current_;
  bool has_data_ = false;
};

}  // namespace airlock::client::internal

#endif  // AIRLOCK_CLIENT_INTERNAL_SSE_H_
