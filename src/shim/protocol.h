// The protocol between airlockd and the per-sandbox shim (airlock-shim).
//
// One shim process owns one sandbox (it is the parent of the sandbox's airlock-init), so the
// daemon can be restarted or upgraded while sandboxes keep running: a new daemon finds each shim
// by its socket and re-adopts it. The shim listens on a unix stream socket (mode 0600, in the
// daemon's data directory). A connection carries one request at a time, and further requests
// after each answer (the daemon keeps connections open; an upload's connection is closed after
// its answer):
//
//   client -> shim   kRequest  {"op": ..., ...}            (JSON)
//   client -> shim   kData ... kEnd                         (file uploads only)
//   shim -> client   kStdout / kStderr (raw bytes) and kEvent (JSON) while a command runs,
//                    kData ... (file downloads),
//   shim -> client   kResponse {"ok": true, ...} | {"ok": false, "code": "NOT_FOUND",
//                                                    "message": "..."}       (always last)
//
// Frames use the wire format of the init protocol (init::SendFrame: u32 type, u32 length,
// payload, optional SCM_RIGHTS). Operations (fields in docs/daemon.md):
//   hello        the sandbox's state, init pid, degraded protections, commands known
//   exec         run a command: streams output unless "background"; the response holds the
//                CommandResult, or {"command_id"} at once for a background command
//   command      state and (once finished) result of a command: "command_id"
//   attach       a running command's output from now on, then its result: "command_id"
//   kill         signal a running command's process tree: "command_id", "signal"
//   pause/resume freeze or thaw the whole sandbox (its cgroup)
//   stats        cgroup usage of the sandbox and the number of running commands
//   files        a file operation: "file_op" = read | write | list | stat | mkdir | remove
//   network      replace the network policy: "network" (spec section), "may_loosen"
//   destroy      kill everything, remove the sandbox; the shim answers, then exits
#ifndef AIRLOCK_SHIM_PROTOCOL_H_
#define AIRLOCK_SHIM_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace airlock::shim {

inline constexpr int kProtocolVersion = 1;

enum class Frame : uint32_t {
  kRequest = 101,
  kResponse = 102,
  kStdout = 103,
  kStderr = 104,
  kEvent = 105,
  kData = 106,
  kEnd = 107,
};

// Sends a JSON frame. Errors name the operation.
absl::Status SendJson(int sock, Frame type, const nlohmann::json& body);
absl::Status SendBytes(int sock, Frame type, std::string_view bytes);

struct Received {
  Frame type;
  std::string payload;
};
// Receives one frame; OutOfRange at a clean end of stream.
absl::StatusOr<Received> Receive(int sock);

// The final response for a failed operation, and back.
nlohmann::json ErrorResponse(const absl::Status& status);
absl::Status StatusFromResponse(const nlohmann::json& response);

}  // namespace airlock::shim

#endif  // AIRLOCK_SHIM_PROTOCOL_H_
