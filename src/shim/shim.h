// The per-sandbox shim: one process that owns one sandbox and serves the daemon's requests for it
// (protocol.h). It is what lets airlockd restart while sandboxes keep running: the sandbox is
// the shim's child, not the daemon's, and dies with the shim (never outlives it unsupervised).
//
//   ASSIGN_OR_RETURN(auto shim, Shim::Create(options));   // builds the sandbox
//   shim->Serve(listen_fd);                                 // until "destroy" or SIGTERM
//
// Every request runs on its own thread. Commands run on their own threads too, so a command
// outlives the connection that started it: its result stays in the shim (up to
// kMaxFinishedCommands) until the daemon asks, e.g. after a restart.
#ifndef AIRLOCK_SHIM_SHIM_H_
#define AIRLOCK_SHIM_SHIM_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/ids.h"
#include "netproxy/policy.h"
#include "nlohmann/json.hpp"
#include "spec/sandbox_spec.h"

namespace airlock::shim {

inline constexpr size_t kMaxFinishedCommands = 1024;
inline constexpr size_t kMaxRecentOutputBytes = 1 << 20;  // per command, for attach
// Syscall events a streamed command sends at most (each also in the result's bounded report).
inline constexpr uint64_t kMaxStreamedSyscallEvents = 1000;
inline constexpr int kMaxConnections = 256;

struct ShimOptions {
  SandboxId sandbox_id;
  spec::SandboxSpec spec;
  std::string tools_dir;
  std::string run_dir_base;
  std::string log_dir;
  std::string cgroup_base = "airlock";
  std::vector<std::string> allow_degraded;
  netproxy::OperatorPolicy operator_policy;
  std::string image_rootfs;
  // Test hook for the egress proxy: names it resolves without DNS (hosts-only resolution).
  std::map<std::string, std::vector<std::string>> proxy_hosts;

  // The options file the daemon writes for a shim (JSON), and back.
  nlohmann::json ToJson() const;
  static absl::StatusOr<ShimOptions> FromJson(const nlohmann::json& j);
};

class Shim {
 public:
  static absl::StatusOr<std::unique_ptr<Shim>> Create(ShimOptions options);
  ~Shim();

  // What the daemon learns when the shim is ready (hello's answer).
  nlohmann::json Hello() const;

  // Accepts and serves connections on `listen_fd` until a destroy request or SIGTERM/SIGINT;
  // then kills every command and destroys the sandbox. Returns that destruction's status.
  absl::Status Serve(int listen_fd);

  class Impl;

 private:
  explicit Shim(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace airlock::shim

#endif  // AIRLOCK_SHIM_SHIM_H_
