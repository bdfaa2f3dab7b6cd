#include "shim/protocol.h"

#include <cerrno>

#include "common/status.h"
#include "fmt/format.h"
#include "init/protocol.h"

namespace airlock::shim {

absl::Status SendBytes(int sock, Frame type, std::string_view bytes) {
  int err = init::SendFrame(sock, static_cast<uint32_t>(type), bytes);
  if (err != 0) return ErrnoStatus(err, "shim socket send");
  return absl::OkStatus();
}

absl::Status SendJson(int sock, Frame type, const nlohmann::json& body) {
  return SendBytes(sock, type, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

absl::StatusOr<Received> Receive(int sock) {
  uint32_t type = 0;
  Received r;
  int err = init::ReceiveFrame(sock, &type, &r.payload);
  if (err == -1) return absl::OutOfRangeError("shim socket closed");
  if (err != 0) return ErrnoStatus(err, "shim socket receive");
  if (type < static_cast<uint32_t>(Frame::kRequest) || type > static_cast<uint32_t>(Frame::kEnd)) {
    return Internal(fmt::format("shim protocol: unknown frame type {}", type));
  }
  r.type = static_cast<Frame>(type);
  return r;
}

nlohmann::json ErrorResponse(const absl::Status& status) {
  return {{"ok", false},
          {"code", absl::StatusCodeToString(status.code())},
          {"message", std::string(status.message())}};
}

absl::Status StatusFromResponse(const nlohmann::json& response) {
  if (!response.is_object()) return Internal("shim protocol: response is not an object");
  if (response.value("ok", false)) return absl::OkStatus();
  std::string code = response.value("code", "INTERNAL");
  std::string message = response.value("message", "shim error");
  for (int c = 1; c <= 16; ++c) {
    auto sc = static_cast<absl::StatusCode>(c);
    if (absl::StatusCodeToString(sc) == code) return absl::Status(sc, message);
  }
  return Internal(message);
}

}  // namespace airlock::shim
