#include "shim/client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"

namespace airlock::shim {
namespace {

absl::StatusOr<UniqueFd> Connect(const std::string& path) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return InvalidArgument("shim socket path too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus(errno, "socket");
  if (::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        fmt::format("the sandbox's shim is not reachable at {}: {}", path, std::strerror(errno)));
  }
  return fd;
}

absl::StatusOr<Received> ReceiveWithin(int fd, std::chrono::milliseconds timeout) {
  struct pollfd p = {fd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return absl::DeadlineExceededError("the sandbox's shim did not answer in time");
  absl::StatusOr<Received> r = Receive(fd);
  if (!r.ok() && r.status().code() == absl::StatusCode::kOutOfRange) {
    return absl::UnavailableError("the sandbox's shim closed the connection (it may have died)");
  }
  return r;
}

absl::StatusOr<nlohmann::json> Final(const Received& r) {
  nlohmann::json j = nlohmann::json::parse(r.payload, nullptr, false);
  if (!j.is_object()) return Internal("shim protocol: malformed response");
  RETURN_IF_ERROR(StatusFromResponse(j));
  return j;
}

}  // namespace

absl::StatusOr<nlohmann::json> ShimClient::Call(const nlohmann::json& request,
                                                std::chrono::milliseconds timeout) {
  return Stream(
      request, [](Frame, std::string_view) { return true; }, timeout);
}

absl::StatusOr<nlohmann::json> ShimClient::Stream(
    const nlohmann::json& request,
    const std::function<bool(Frame type, std::string_view payload)>& on_frame,
    std::chrono::milliseconds idle_timeout) {
  ASSIGN_OR_RETURN(UniqueFd fd, Connect(socket_path_));
  RETURN_IF_ERROR(SendJson(fd.get(), Frame::kRequest, request));
  for (;;) {
    ASSIGN_OR_RETURN(Received r, ReceiveWithin(fd.get(), idle_timeout));
    if (r.type == Frame::kResponse) return Final(r);
    if (!on_frame(r.type, r.payload)) return absl::CancelledError("the reader stopped");
  }
}

absl::StatusOr<std::unique_ptr<ShimClient::UploadStream>> ShimClient::BeginUpload(
    const nlohmann::json& request) {
  ASSIGN_OR_RETURN(UniqueFd fd, Connect(socket_path_));
  RETURN_IF_ERROR(SendJson(fd.get(), Frame::kRequest, request));
  return std::unique_ptr<UploadStream>(new UploadStream(fd.Release()));
}

ShimClient::UploadStream::~UploadStream() {
  if (fd_ >= 0) ::close(fd_);  // without an end frame: the shim abandons the write
}

absl::Status ShimClient::UploadStream::Write(std::string_view data) {
  // The shim may have answered early (a refused path, a limit): Finish reads why.
  if (!broken_ && !SendBytes(fd_, Frame::kData, data).ok()) broken_ = true;
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> ShimClient::UploadStream::Finish(std::chrono::milliseconds timeout) {
  if (!broken_) (void)SendBytes(fd_, Frame::kEnd, {});
  ASSIGN_OR_RETURN(Received r, ReceiveWithin(fd_, timeout));
  ::close(fd_);
  fd_ = -1;
  if (r.type != Frame::kResponse) return Internal("shim protocol: expected the upload's answer");
  return Final(r);
}

absl::StatusOr<nlohmann::json> ShimClient::Upload(
    const nlohmann::json& request, const std::function<absl::StatusOr<std::string>()>& next,
    std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(std::unique_ptr<UploadStream> up, BeginUpload(request));
  for (;;) {
    absl::StatusOr<std::string> chunk = next();
    if (!chunk.ok()) return chunk.status();  // dropping `up` abandons the write
    if (chunk->empty()) break;
    RETURN_IF_ERROR(up->Write(*chunk));
  }
  return up->Finish(timeout);
}

}  // namespace airlock::shim
