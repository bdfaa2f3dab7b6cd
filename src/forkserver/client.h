// A client of the fork-server (protocol.h): one request per connection.
//
//   ASSIGN_OR_RETURN(CommandResult r, forkserver::Run("/run/fs.sock", {.template_name = "python",
//                                                                    .code = "print(1)"}));
//
// Thread-safe (no shared state).
#ifndef AIRLOCK_FORKSERVER_CLIENT_H_
#define AIRLOCK_FORKSERVER_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "command/command.h"
#include "forkserver/protocol.h"

namespace airlock::forkserver {

// Sends `request` to the fork-server at `socket_path` and waits for the worker's result. The
// server's refusal comes back as its Status (InvalidArgument for a bad request, Unavailable when
// the zygote died, ...); a server that cannot be reached or hangs up is Unavailable naming the
// socket.
absl::StatusOr<CommandResult> Run(const std::string& socket_path, const RunRequest& request);

// The same with a raw request payload (tests of the server's refusals).
absl::StatusOr<CommandResult> RunRaw(const std::string& socket_path, uint32_t frame_type,
                                     const std::string& payload);

}  // namespace airlock::forkserver

#endif  // AIRLOCK_FORKSERVER_CLIENT_H_
