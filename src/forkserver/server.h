// The fork-server: serves code-execution requests on a unix socket (protocol.h,
// docs/forkserver.md) from a zygote of one template (a Python interpreter with its preload
// loaded). Each request gets a worker forked from the zygote into a fresh sandbox built from the
// spec (engine/forked_sandbox.h); the reply is the worker's CommandResult.
//
//   ASSIGN_OR_RETURN(auto server, ForkServer::Start(options));  // zygote ready, socket bound
//   ...                                                         // clients connect
//   server->Stop();
//
// The zygote is re-created when it dies: a request in flight then gets an Unavailable error
// (its worker, the server's child, is not affected), the next one a new zygote.
//
// Threads: one internal thread accepts connections and (re)starts the zygote (the workers'
// parent-death signal follows it); each connection is served on a thread of its own, up to
// max_concurrent at once; forks are serialised at the zygote. Start and Stop from one thread.
#ifndef AIRLOCK_FORKSERVER_SERVER_H_
#define AIRLOCK_FORKSERVER_SERVER_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/cgroup.h"
#include "engine/forked_sandbox.h"
#include "spec/sandbox_spec.h"

namespace airlock::forkserver {

// The templates a fork-server can serve.
inline constexpr const char* kTemplates[] = {"python", "node"};

struct ForkServerOptions {
  std::string template_name = "python";
  std::string preload;  // code the zygote runs once, e.g. "import numpy"
  std::string socket_path;
  mode_t socket_mode = 0600;
  std::optional<gid_t> socket_group;        // sidecar use: the agent's group may connect
  spec::SandboxSpec spec;                   // effective and validated; every worker's sandbox
  engine::CgroupDriver* cgroups = nullptr;  // not owned; required
  std::string tools_dir;  // airlock-init's directory (engine::DefaultToolsDir when empty)
  // The zygote program. Empty: airlock-zygote-<template> next to the running binary (bin/; not
  // in the tools directory, which every sandbox sees at /sandbox/tools).
  std::string zygote_path;
  std::string run_dir_base;  // empty: the engine's default
  std::vector<std::string> allow_degraded;
  std::chrono::milliseconds zygote_start_timeout{60000};
  // Requests served at once (each in its own worker); more connections wait in the backlog.
  int max_concurrent = 4;
  // How long a connection may take to send its whole request; a slower one is dropped unanswered.
  std::chrono::milliseconds request_timeout{10000};
};

class ForkServer {
 public:
  // Checks the options, starts the zygote and waits until its preload ran, binds the socket.
  // Errors: an unknown template, a zygote that fails to start (its stderr is the server's),
  // a socket path in use.
  static absl::StatusOr<std::unique_ptr<ForkServer>> Start(ForkServerOptions options);
  ~ForkServer();  // Stop()
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

  // Stops serving (a request in flight finishes first), kills the zygote, removes the socket.
  void Stop();

  // The current zygote's host pid (tests), -1 between zygotes.
  pid_t zygote_pid() const { return zygote_pid_.load(); }
  // How many zygotes were started, the first included.
  int zygote_starts() const { return zygote_starts_.load(); }

 private:
  ForkServer() = default;
  absl::Status StartZygote();
  std::string StopZygote();  // how the zygote ended: "exit status N", "killed by signal N"
  bool ZygoteAlive();
  void ServeLoop();  // the internal thread
  void Wake();       // wakes ServeLoop
  void Shutdown();   // kills running workers, waits for the handlers, stops the zygote
  // The zygote, alive: restarted by ServeLoop's thread if it died (blocks until it did).
  absl::Status EnsureZygote();
  void ServeConnection(int conn);
  absl::StatusOr<std::string> Run(const std::string& payload,
                                  std::unique_ptr<engine::ForkedSandbox>* used);
  absl::StatusOr<std::unique_ptr<engine::ForkedSandbox>> PrepareSandbox();
  // Under zygote_mu_: when the zygote is gone, stops what is left of it and starts a new one.
  // Runs on the serve loop's thread only (the zygote's parent-death signal follows that thread).
  absl::Status ReplaceDeadZygote();
  // Removes the sandbox of the request just answered, and prepares the next one.
  void AfterReply(std::unique_ptr<engine::ForkedSandbox> used);
  // Sends one fork request to the zygote and reads its answer; *lost when the zygote is gone.
  absl::StatusOr<engine::ForkedWorker> Fork(const engine::WorkerLaunch& launch,
                                            const std::string& code, bool* lost);

  ForkServerOptions options_;
  UniqueFd listen_;
  UniqueFd stop_event_;
  UniqueFd zygote_sock_;
  UniqueFd zygote_pidfd_;
  std::atomic<pid_t> zygote_pid_{-1};
  std::atomic<int> zygote_starts_{0};
  UniqueFd wake_event_;
  std::mutex zygote_mu_;  // zygote_sock_ and zygote_pidfd_; held for a fork's round trip
  std::mutex mu_;         // what follows
  std::condition_variable cv_;
  int active_ = 0;  // connections being served
  bool stopping_ = false;
  bool restart_requested_ = false;
  uint64_t restart_generation_ = 0;
  absl::Status restart_status_;
  std::set<engine::ForkedSandbox*> running_;     // killed by Shutdown
  std::unique_ptr<engine::ForkedSandbox> next_;  // prepared for the next request
  std::thread thread_;
  bool stopped_ = false;
  bool bound_ = false;  // the socket's name is ours to remove
};

}  // namespace airlock::forkserver

#endif  // AIRLOCK_FORKSERVER_SERVER_H_
