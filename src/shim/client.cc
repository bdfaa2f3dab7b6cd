#include "shim/client.h"

#include <poll.h>
#include <sys/eventfd.h>
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

// The next frame on `fd` within `timeout`. While none has come, Aborted as soon as
// `interrupt_fd` (when >= 0) is readable; a frame already there is read first.
absl::StatusOr<Received> ReceiveWithin(int fd, std::chrono::milliseconds timeout,
                                       int interrupt_fd = -1) {
  struct pollfd p[2] = {{fd, POLLIN, 0}, {interrupt_fd, POLLIN, 0}};
  int rc;
  do {
    rc = ::poll(p, interrupt_fd >= 0 ? 2 : 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return absl::DeadlineExceededError("the sandbox's shim did not answer in time");
  if (interrupt_fd >= 0 && p[0].revents == 0 && p[1].revents != 0) {
    return absl::AbortedError("airlockd is stopping; the sandbox's work goes on in its shim");
  }
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
  return Exchange(
      request, [](Frame, std::string_view) { return true; }, timeout, /*interruptible=*/false);
}

absl::StatusOr<nlohmann::json> ShimClient::Stream(
    const nlohmann::json& request,
    const std::function<bool(Frame type, std::string_view payload)>& on_frame,
    std::chrono::milliseconds idle_timeout) {
  return Exchange(request, on_frame, idle_timeout, /*interruptible=*/true);
}

absl::StatusOr<nlohmann::json> ShimClient::Exchange(
    const nlohmann::json& request,
    const std::function<bool(Frame type, std::string_view payload)>& on_frame,
    std::chrono::milliseconds idle_timeout, bool interruptible) {
  // After an interrupt no request is sent: it fails with nothing done in the shim.
  if (pool_ != nullptr && pool_->interrupted()) {
    return absl::AbortedError("airlockd is stopping; the request was not sent to the shim");
  }
  UniqueFd fd = pool_ != nullptr ? pool_->Take(socket_path_) : UniqueFd();
  bool pooled = static_cast<bool>(fd);
  const int interrupt = pool_ != nullptr && interruptible ? pool_->interrupt_fd() : -1;
  absl::StatusOr<Received> r = absl::UnknownError("");
  for (;;) {
    if (!fd) {
      ASSIGN_OR_RETURN(fd, Connect(socket_path_));
    }
    absl::Status sent = SendJson(fd.get(), Frame::kRequest, request);
    r = sent.ok() ? ReceiveWithin(fd.get(), idle_timeout, interrupt)
                  : absl::StatusOr<Received>(sent);
    // A kept connection the shim closed after Take looked at it fails before any answer; the
    // shim never reads a request without answering it, so sending again cannot run it twice.
    if (r.ok() || !pooled || r.status().code() == absl::StatusCode::kDeadlineExceeded ||
        r.status().code() == absl::StatusCode::kAborted) {
      break;
    }
    fd.Reset();
    pooled = false;
  }
  for (;;) {
    if (!r.ok()) return r.status();
    if (r->type == Frame::kResponse) {
      absl::StatusOr<nlohmann::json> answer = Final(*r);
      if (pool_ != nullptr) pool_->Give(socket_path_, std::move(fd));
      return answer;
    }
    if (!on_frame(r->type, r->payload)) return absl::CancelledError("the reader stopped");
    r = ReceiveWithin(fd.get(), idle_timeout, interrupt);
  }
}

ShimConnections::ShimConnections(size_t max_idle_per_shim, size_t max_idle)
    : max_idle_per_shim_(max_idle_per_shim),
      max_idle_(max_idle),
      interrupt_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void ShimConnections::Interrupt() {
  interrupted_.store(true, std::memory_order_release);
  uint64_t one = 1;
  if (interrupt_ && ::write(interrupt_.get(), &one, sizeof(one)) < 0) {
    // EAGAIN only: the counter is already far from zero, readable as it should be.
  }
}

UniqueFd ShimConnections::Take(const std::string& socket_path) {
  for (;;) {
    UniqueFd fd;
    {
      std::lock_guard lock(mu_);
      auto it = idle_.find(socket_path);
      if (it == idle_.end()) return UniqueFd();
      fd = std::move(it->second.back());
      it->second.pop_back();
      --idle_count_;
      if (it->second.empty()) idle_.erase(it);
    }
    // An idle connection has nothing to read: readable means the shim closed it.
    struct pollfd p = {fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) == 0) return fd;
  }
}

void ShimConnections::Give(const std::string& socket_path, UniqueFd fd) {
  std::lock_guard lock(mu_);
  if (idle_count_ >= max_idle_) return;
  std::vector<UniqueFd>& list = idle_[socket_path];
  if (list.size() >= max_idle_per_shim_) return;
  list.push_back(std::move(fd));
  ++idle_count_;
}

void ShimConnections::Forget(const std::string& socket_path) {
  std::vector<UniqueFd> closing;
  std::lock_guard lock(mu_);
  auto it = idle_.find(socket_path);
  if (it == idle_.end()) return;
  closing = std::move(it->second);
  idle_.erase(it);
  idle_count_ -= closing.size();
}

size_t ShimConnections::idle() const {
  std::lock_guard lock(mu_);
  return idle_count_;
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
