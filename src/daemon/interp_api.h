// The level-0 interpreter's REST API on the node daemon (docs/interp.md, "REST"):
//
//   POST   /v1/interpreters               {limits, tools, declared} -> the session (state "new")
//   POST   /v1/interpreters/{id}/eval     {script}                   -> RunResult
//   POST   /v1/interpreters/{id}/resume   {call_id, result | error}  -> RunResult
//   GET    /v1/interpreters/{id}          -> state, pending calls, journal (and the result)
//   GET    /v1/interpreters/{id}/console  -> the script's console output
//   DELETE /v1/interpreters/{id}
//
// A session belongs to the API key that created it; for any other key it does not exist (404).
// Every session has an InterpSession record in the Store and one blob in the BlobStore (its
// creation options, then its signed snapshot while paused, then its result when finished), so a
// restarted daemon, or another daemon on the same data directory, serves it. Sessions held in
// memory are a cache: one that is not there is rebuilt from its blob.
//
// Each eval and resume first moves the record to "running" by compare-and-set on its version,
// so of two concurrent requests on the same paused session (in one daemon or several) exactly
// one runs; the other is refused (409) before the script continues.
//
// Tools a session may allow: "human_approval" (durable: the session pauses until resumed) and
// "sandbox.exec" (a command in a sandbox of the same API key, run on the daemon's pool).
//
// Snapshots are signed with a per-node key kept in DIR/interp.key (32 random bytes, mode 0600),
// created on first use; daemons sharing a data directory share it.
//
// Thread-safe. Methods block (store, blob store, the guest); the routes run them on the pool.
#ifndef AIRLOCK_DAEMON_INTERP_API_H_
#define AIRLOCK_DAEMON_INTERP_API_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "boost/asio/any_io_executor.hpp"
#include "daemon/sandbox_manager.h"
#include "http/server.h"
#include "interp/interpreter.h"
#include "interp/tool.h"
#include "nlohmann/json.hpp"
#include "store/blob_store.h"
#include "store/store.h"

namespace airlock::daemon {

inline constexpr char kSandboxExecToolName[] = "sandbox.exec";

// `tools.call("sandbox.exec", {sandbox_id, argv, timeout_seconds?})`: runs argv in a Running
// sandbox that `caller` owns, through SandboxManager::Exec on `executor` (an immediate tool whose
// answer arrives asynchronously), and answers with the CommandResult JSON. A sandbox of another
// key, or none, is the script's error "sandbox ... not found".
//
// Capabilities: kSeesUntrustedContent always (a command's output carries whatever the sandbox
// saw). A sandbox whose network profile is not "none" can communicate externally: the tool then
// needs `may_communicate` (the session declared changes-state, so the tool carries kChangesState
// and the rule of two gates it); without it such a call is refused with an error naming the
// profile.
std::shared_ptr<interp::Tool> MakeSandboxExecTool(SandboxManager* manager, Caller caller,
                                                  boost::asio::any_io_executor executor,
                                                  bool may_communicate);

struct InterpApiOptions {
  std::string data_dir;              // holds interp.key
  size_t max_cached_sessions = 256;  // paused sessions kept in memory; the rest are restored
  // Evals and resumes running at once; more are refused (ResourceExhausted, 429). Each holds a
  // thread of the daemon's pool while its script runs, and its sandbox.exec calls need others:
  // keep it well below the pool's size.
  int max_running = 16;
};

class InterpApi {
 public:
  // `store`, `blobs` and `manager` must outlive the InterpApi; `executor` runs the blocking work
  // of the routes and of sandbox.exec.
  InterpApi(InterpApiOptions options, store::Store* store, store::BlobStore* blobs,
            SandboxManager* manager, boost::asio::any_io_executor executor);
  ~InterpApi();

  // Adds the routes above to `router`. The InterpApi must outlive the server.
  void AddRoutes(http::Router& router);

  // The operations behind the routes, with their JSON bodies already parsed.
  absl::StatusOr<nlohmann::json> Create(const Caller& caller, const nlohmann::json& body);
  absl::StatusOr<nlohmann::json> Eval(const Caller& caller, const InterpSessionId& id,
                                      const nlohmann::json& body);
  absl::StatusOr<nlohmann::json> Resume(const Caller& caller, const InterpSessionId& id,
                                        const nlohmann::json& body);
  absl::StatusOr<nlohmann::json> Get(const Caller& caller, const InterpSessionId& id);
  absl::StatusOr<nlohmann::json> Console(const Caller& caller, const InterpSessionId& id);
  absl::StatusOr<nlohmann::json> Delete(const Caller& caller, const InterpSessionId& id);

 private:
  struct Settings;  // a session's creation options, kept in its blob
  struct Loaded;    // a record, its settings and the payload of its blob

  // The snapshot key (and the interpreter), made on first use.
  absl::StatusOr<std::string> Key();
  absl::StatusOr<interp::SessionOptions> OptionsFor(const Caller& caller, const Settings& settings);
  absl::StatusOr<Loaded> Load(const Caller& caller, const InterpSessionId& id, bool with_blob);
  // The session of a "new" or "paused" record: from the cache when it holds this version, else
  // rebuilt from the blob. The caller owns it until it gives it back with Keep.
  absl::StatusOr<std::unique_ptr<interp::Session>> Take(const Caller& caller, const Loaded& l);
  void Keep(const InterpSessionId& id, int64_t version, std::unique_ptr<interp::Session> session);
  // Moves the record to "running" (compare-and-set): FailedPrecondition when another request
  // got there first.
  absl::StatusOr<store::InterpSession> Claim(const store::InterpSession& record);
  // Counts a run against max_running while it lives; ResourceExhausted past it.
  class RunSlot;
  absl::StatusOr<RunSlot> StartRun();
  // Stores what a run left (snapshot or result) and moves the record out of "running".
  absl::StatusOr<nlohmann::json> Commit(const store::InterpSession& claimed,
                                        const store::InterpSession& before,
                                        const Settings& settings,
                                        std::unique_ptr<interp::Session> session,
                                        const interp::RunResult& result);
  // Puts a claimed record back as it was (the run did not start).
  void Unclaim(const store::InterpSession& claimed, const store::InterpSession& before);

  InterpApiOptions options_;
  store::Store* store_;
  store::BlobStore* blobs_;
  SandboxManager* manager_;
  boost::asio::any_io_executor executor_;

  std::mutex mu_;
  std::unique_ptr<interp::Interpreter> interp_;  // made on first use
  std::string key_;                              // loaded on first use
  struct Cached {
    int64_t version = 0;
    std::unique_ptr<interp::Session> session;
  };
  std::map<InterpSessionId, Cached> cache_;
  int running_ = 0;  // guarded by mu_
};

}  // namespace airlock::daemon

#endif  // AIRLOCK_DAEMON_INTERP_API_H_
