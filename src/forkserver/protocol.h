// The fork-server's wire protocol (docs/forkserver.md): one request and one reply per
// connection on a unix stream socket, each a frame of airlock-init's framing (init/protocol.h:
// u32 type, u32 length, little-endian, then the payload) whose payload is JSON.
#ifndef AIRLOCK_FORKSERVER_PROTOCOL_H_
#define AIRLOCK_FORKSERVER_PROTOCOL_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "command/command.h"

namespace airlock::forkserver {

inline constexpr uint32_t kProtocolVersion = 1;

// Frame types.
enum class FrameType : uint32_t {
  kRun = 1,     // client -> server: a RunRequest
  kResult = 2,  // server -> client: a CommandResult (command.h ToJson)
  kError = 3,   // server -> client: {"code": "INVALID_ARGUMENT", "message": "..."}
};

// Limits the server enforces.
inline constexpr size_t kMaxCodeBytes = 1 << 20;     // the submitted code
inline constexpr size_t kMaxRequestBytes = 2 << 20;  // a request frame's payload
inline constexpr int64_t kMaxTimeoutSeconds = 3600;  // a request's timeout

struct RunRequest {
  std::string template_name;  // "python" or "node"; must be the server's template
  std::string code;           // UTF-8 source, run as __main__
  // Empty: the spec's resources.commandTimeoutSeconds.
  std::optional<std::chrono::milliseconds> timeout;
};

// JSON: {"template": "python", "code": "...", "timeoutSeconds": 5}. Parse errors are
// InvalidArgument naming the field.
std::string EncodeRunRequest(const RunRequest& request);
absl::StatusOr<RunRequest> DecodeRunRequest(std::string_view payload);

// An error reply: {"code": "<absl status code name>", "message": "..."}, and back.
std::string EncodeError(const absl::Status& status);
absl::Status DecodeError(std::string_view payload);

}  // namespace airlock::forkserver

#endif  // AIRLOCK_FORKSERVER_PROTOCOL_H_
