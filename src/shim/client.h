// The daemon's side of the shim protocol (protocol.h): blocking calls with deadlines. A call
// takes an idle connection from a ShimConnections pool when it is given one (and returns it
// after a complete answer), else connects. Thread-safe.
#ifndef AIRLOCK_SHIM_CLIENT_H_
#define AIRLOCK_SHIM_CLIENT_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "nlohmann/json.hpp"
#include "shim/protocol.h"

namespace airlock::shim {

// Idle connections to shims, by socket path, so that a call costs no connect (and no thread in
// the shim). A connection is kept only after a complete answer; one the shim closed meanwhile
// (it exited or was restarted) is dropped when taken. Thread-safe.
class ShimConnections {
 public:
  // Concurrent calls to one shim beyond `max_idle_per_shim` connect afresh and close after.
  explicit ShimConnections(size_t max_idle_per_shim = 1, size_t max_idle = 256);

  // An idle connection to `socket_path` that is still open, or an invalid fd.
  UniqueFd Take(const std::string& socket_path);
  // Keeps `fd` for the next call, or closes it when `socket_path` (or the pool) already holds
  // as many idle connections as it keeps.
  void Give(const std::string& socket_path, UniqueFd fd);
  // Closes every idle connection to `socket_path` (its sandbox is gone).
  void Forget(const std::string& socket_path);
  size_t idle() const;

  // The daemon is stopping and must not wait for commands, which go on in their shims: from now
  // on a call through this pool is not sent (Aborted, nothing done), and the long waits of
  // Stream calls already sent (an exec run to its end, an attach, a download) end with Aborted.
  // Short Calls already sent wait for their answer, so what they did is known.
  void Interrupt();
  bool interrupted() const { return interrupted_.load(std::memory_order_acquire); }
  int interrupt_fd() const { return interrupt_.get(); }

 private:
  const size_t max_idle_per_shim_, max_idle_;
  UniqueFd interrupt_;  // an eventfd, readable once Interrupt ran: wakes the waits in poll
  std::atomic<bool> interrupted_{false};  // the same, for the check before each call
  mutable std::mutex mu_;
  size_t idle_count_ = 0;
  std::map<std::string, std::vector<UniqueFd>> idle_;
};

class ShimClient {
 public:
  explicit ShimClient(std::string socket_path, ShimConnections* pool = nullptr)
      : socket_path_(std::move(socket_path)), pool_(pool) {}

  // One request, one response. Unavailable when the shim cannot be reached (it is gone).
  absl::StatusOr<nlohmann::json> Call(const nlohmann::json& request,
                                      std::chrono::milliseconds timeout);

  // A request whose answer is preceded by frames (output, events, file data): `on_frame` gets
  // each; returning false stops reading (the connection closes; the shim's work goes on).
  // `idle_timeout` bounds the wait for each frame. Through an interrupted pool, Aborted.
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
  // Call and Stream: the wait for the answer ends on the pool's interrupt when `interruptible`.
  absl::StatusOr<nlohmann::json> Exchange(
      const nlohmann::json& request,
      const std::function<bool(Frame type, std::string_view payload)>& on_frame,
      std::chrono::milliseconds idle_timeout, bool interruptible);

  std::string socket_path_;
  ShimConnections* pool_;
};

}  // namespace airlock::shim

#endif  // AIRLOCK_SHIM_CLIENT_H_
