// airlockd's node role, assembled: the store, the blob store, the SandboxManager, the HTTP API
// (docs/api/openapi.yaml) and the reaper thread.
//
//   ASSIGN_OR_RETURN(auto d, Daemon::Start(options));
//   ... d->port() ...
//   d.reset();  // stops serving; sandboxes keep running in their shims
//
// Thread-safe; the destructor stops the reaper and the server, and leaves every sandbox running
// (a new daemon on the same data directory re-adopts them).
#ifndef AIRLOCK_DAEMON_DAEMON_H_
#define AIRLOCK_DAEMON_DAEMON_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/sandbox_manager.h"

namespace airlock::daemon {

struct DaemonOptions {
  std::string listen = "127.0.0.1:7878";
  ManagerOptions manager;  // data_dir, node, tools, limits, timeouts
  int http_threads = 2;
  int worker_threads = 64;  // blocking work: database, shims, git (two pools of this size)
  // Long requests (commands run to the end, streams, file transfers, sandbox starts, artifact
  // collections) one API key may have running at once; beyond, 429. 0: half the workers.
  int max_long_requests_per_key = 0;
  // Bytes of images one key may hold (ImagesApiOptions); 0: no limit.
  int64_t max_image_bytes_per_key = int64_t{64} << 30;
  std::chrono::seconds reap_interval{10};
};

class Daemon {
 public:
  // Opens (creating) the data directory and its store, reconciles what a previous daemon left,
  // then serves.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  ~Daemon();

  uint16_t port() const;
  SandboxManager& manager();

  class Impl;

 private:
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The node id of a data directory: kept in DIR/node-id, made on first use.
absl::StatusOr<NodeId> NodeIdFor(const std::string& data_dir);

// Where the airlock binaries are: next to the running program (bin/) and its tools directory.
std::string DefaultShimBinary();

}  // namespace airlock::daemon

#endif  // AIRLOCK_DAEMON_DAEMON_H_
