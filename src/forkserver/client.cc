#include "forkserver/client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"
#include "init/protocol.h"
#include "nlohmann/json.hpp"

namespace airlock::forkserver {

absl::StatusOr<CommandResult> RunRaw(const std::string& socket_path, uint32_t frame_type,
                                     const std::string& payload) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument(fmt::format("socket path {} is too long", socket_path));
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) return ErrnoStatus(errno, "socket");
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        fmt::format("connect to fork-server {}: {}", socket_path, std::strerror(errno)));
  }
  if (int e = init::SendFrame(sock.get(), frame_type, payload); e != 0) {
    return absl::UnavailableError(
        fmt::format("send to fork-server {}: {}", socket_path, std::strerror(e)));
  }
  uint32_t type = 0;
  std::string reply;
  int e = init::ReceiveFrame(sock.get(), &type, &reply);
  if (e != 0) {
    return absl::UnavailableError(fmt::format("fork-server {} hung up without a reply: {}",
                                              socket_path,
                                              e < 0 ? "end of stream" : std::strerror(e)));
  }
  if (type == static_cast<uint32_t>(FrameType::kError)) return DecodeError(reply);
  if (type != static_cast<uint32_t>(FrameType::kResult)) {
    return Internal(fmt::format("fork-server: unexpected reply frame type {}", type));
  }
  nlohmann::json j = nlohmann::json::parse(reply, nullptr, false);
  if (j.is_discarded()) return Internal("fork-server: reply is not valid JSON");
  return CommandResultFromJson(j);
}

absl::StatusOr<CommandResult> Run(const std::string& socket_path, const RunRequest& request) {
  return RunRaw(socket_path, static_cast<uint32_t>(FrameType::kRun), EncodeRunRequest(request));
}

}  // namespace airlock::forkserver
