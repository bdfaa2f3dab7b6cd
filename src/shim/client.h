// The daemon's side of the shim protocol (protocol.h): one connection per call, blocking, with
// deadlines. Thread-safe (no shared state but the socket path).
#ifndef AIRLOCK_SHIM_CLIENT_H_
#define AIRLOCK_SHIM_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "shim/protocol.h"

namespace airlock::shim {

class ShimClient {
 public:
  explicit ShimClient(std::string socket_path) : socket_path_(std::move(socket_path)) {}

  // One request, one response. Unavailable when the shim cannot be reached (it is gone).
  absl::StatusOr<nlohmann::json> Call(const nlohmann::json& request,
                                      std::chrono::milliseconds timeout);

  // A request whose answer is preceded by frames (output, events, file data): `on_frame` gets
  // each; returning false stops reading (the connection closes; the shim's work goes on).
  // `idle_timeout` bounds the wait for each frame.
  absl::StatusOr<nlohmann::json> Stream(
      const nlohmann::json& request,
      const std::function<bool(Frame type, std::string_view payload)>& on_frame,
      std::chrono::milliseconds idle_timeout);

  // An upload in progress: Write sends data frames, Finish the end frame and reads the answer.
  // Destroying it before Finish abandons the upload (the shim discards what it received).
  class UploadStream {
   public:
    ~UploadStream();
    absl::Status Write(std::string_view data);
    absl::StatusOr<nlohmann::json> Finish(std::chrono::milliseconds timeout);

   private:
    friend class ShimClient;
    explicit UploadStream(int fd) : fd_(fd) {}
    int fd_;
    bool broken_ = false;
  };
  absl::StatusOr<std::unique_ptr<UploadStream>> BeginUpload(const nlohmann::json& request);

  // A request followed by data frames from `next` (empty string: the end) and the end frame.
  absl::StatusOr<nlohmann::json> Upload(const nlohmann::json& request,
                                        const std::function<absl::StatusOr<std::string>()>& next,
                                        std::chrono::milliseconds timeout);

  const std::string& socket_path() const { return socket_path_; }

 private:
  std::string socket_path_;
};

}  // namespace airlock::shim

#endif  // AIRLOCK_SHIM_CLIENT_H_
