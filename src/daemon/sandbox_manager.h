// SandboxManager: the node's sandboxes, their lifecycle, commands, files and cleanup
// (docs/daemon.md). Every durable fact goes through the Store; every sandbox is owned by its
// own airlock-shim process, reached through shim::ShimClient.
//
// Methods block (database, shim) and are thread-safe: the HTTP layer calls them from a thread
// pool. Errors follow http/errors.h: NotFound for a sandbox the caller does not own or that does
// not exist, FailedPrecondition for a sandbox in the wrong state, InvalidArgument for a bad
// request, PermissionDenied for a refused path or release, ResourceExhausted for limits.
#ifndef AIRLOCK_DAEMON_SANDBOX_MANAGER_H_
#define AIRLOCK_DAEMON_SANDBOX_MANAGER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "command/command.h"
#include "common/ids.h"
#include "http/metrics.h"
#include "image/image_store.h"
#include "netproxy/policy.h"
#include "nlohmann/json.hpp"
#include "shim/client.h"
#include "spec/sandbox_spec.h"
#include "store/blob_store.h"
#include "store/store.h"

namespace airlock::daemon {

struct ManagerOptions {
  std::string data_dir;
  NodeId node;
  std::string tools_dir;    // airlock-init and the in-sandbox tools
  std::string shim_bin;     // airlock-shim
  std::string cgroup_base;  // default "airlock/<node>"
  netproxy::OperatorPolicy operator_policy;
  // Directories whose repositories workspace.git.repo may name by path (airlockd
  // --git-local-root). Empty: only https:// URLs. git runs on the host as the daemon's user, so a
  // path anywhere would let any caller clone another sandbox's workspace or any repository on the
  // node.
  std::vector<std::string> git_local_roots;
  // Tests: names the sandboxes' egress proxies resolve without DNS (and nothing else).
  std::map<std::string, std::vector<std::string>> proxy_hosts;

  absl::Duration default_ttl = absl::Hours(1);
  absl::Duration max_ttl = absl::Hours(24);
  // Setup states past their timeout fail the sandbox.
  absl::Duration timeout_preparing_image = absl::Minutes(10);
  absl::Duration timeout_mounting_workspace = absl::Minutes(5);
  absl::Duration timeout_starting = absl::Seconds(60);
  absl::Duration timeout_cleaning = absl::Minutes(2);
  absl::Duration timeout_collecting = absl::Minutes(10);

  uint64_t max_file_bytes = 1ull << 30;  // one upload or download
  int max_sandboxes = 1000;              // live sandboxes on this node
  // Sandbox starts (shim launch to ready) running at once; more wait their turn. Starts are
  // CPU-bound: on a small host a burst started all at once finishes all at once, late. 0: twice
  // the number of CPUs.
  int max_concurrent_starts = 0;
  // Warm pool (docs/daemon.md "Warm pool"): this many sandboxes of `warm_pool_template` are kept
  // started; a create whose effective spec equals theirs, and that asks for no workspace clone,
  // is handed one instead of starting its own. 0: no pool.
  int warm_pool = 0;
  std::string warm_pool_template = "default";
};

// Who is calling: the API key's id (sandboxes belong to it) and the audit actor.
struct Caller {
  ApiKeyId key;
  std::string actor;  // "key:ak-..."
};

struct WorkspaceSource {
  // An https:// URL without credentials, or a path (or file:// URL) beneath one of the
  // operator's ManagerOptions::git_local_roots.
  std::string repo;
  std::string commit;  // the pinned base commit (a full or abbreviated hash, or a ref)
};

struct CreateRequest {
  nlohmann::json spec;        // empty object with template_name set: from the template
  std::string template_name;  // "R0".."R5", "default", or DIR/templates/NAME.{yaml,json}
  std::optional<absl::Duration> ttl;
  std::optional<absl::Duration> idle_timeout;
  std::map<std::string, std::string> metadata;
  std::string idempotency_key;
  std::optional<WorkspaceSource> workspace;
};

struct CollectRequest {
  std::vector<std::string> paths;    // sandbox paths to collect; empty: the spec's artifacts.paths
  std::vector<std::string> secrets;  // values the secret scan looks for besides its detectors
};

struct ExecRequest {
  CommandSpec command;
  std::vector<std::string> secrets;  // values to redact from this command's output
  bool keep_background = false;
};

// What a streamed exec emits before its result: output chunks (already redacted) and events.
struct ExecFrame {
  enum class Kind { kStdout, kStderr, kEvent } kind;
  std::string data;  // output bytes, or the event as JSON
};
// Returns false when the receiver has gone (the command goes on; its result is stored).
using FrameSink = std::function<bool(const ExecFrame&)>;

struct FileEntryView {
  nlohmann::json json;  // {name, type, size, mode, mtime[, target]}
};

class SandboxManager {
 public:
  // `images` (may be null: then specs naming an image are refused) resolves spec.image at
  // create time and gives the sandbox its root; it must outlive the manager.
  SandboxManager(ManagerOptions options, store::Store* store, store::BlobStore* blobs,
                 http::Metrics* metrics, image::ImageStore* images = nullptr);
  ~SandboxManager();

  // Creates and starts a sandbox; returns it in Running (or the earlier sandbox with the same
  // idempotency key, with created = false).
  absl::StatusOr<store::CreateResult> Create(const Caller& caller, const CreateRequest& request);
  absl::StatusOr<store::SandboxRecord> Get(const Caller& caller, const SandboxId& id);
  absl::StatusOr<store::SandboxPage> List(const Caller& caller, store::SandboxQuery query);

  // Runs a command to its end. With a sink, its output streams there as it comes.
  absl::StatusOr<CommandResult> Exec(const Caller& caller, const SandboxId& id,
                                     const ExecRequest& request, const FrameSink& sink = nullptr);
  // Starts a command in the background; returns its record (state running).
  absl::StatusOr<store::CommandRecord> StartBackground(const Caller& caller, const SandboxId& id,
                                                       const ExecRequest& request);
  absl::StatusOr<store::CommandRecord> GetCommand(const Caller& caller, const SandboxId& id,
                                                  const CommandId& command);
  absl::StatusOr<std::vector<store::CommandRecord>> ListCommands(const Caller& caller,
                                                                 const SandboxId& id);
  // Streams a command's output (from what the shim still holds) until it ends.
  absl::StatusOr<store::CommandRecord> Attach(const Caller& caller, const SandboxId& id,
                                              const CommandId& command, const FrameSink& sink);
  absl::Status KillCommand(const Caller& caller, const SandboxId& id, const CommandId& command,
                           int signal);

  // Files. `path` is absolute in the sandbox or relative to /sandbox/workspace.
  absl::StatusOr<nlohmann::json> StatFile(const Caller& caller, const SandboxId& id,
                                          const std::string& path);
  absl::StatusOr<nlohmann::json> ListFiles(const Caller& caller, const SandboxId& id,
                                           const std::string& path);
  absl::Status MakeDirectory(const Caller& caller, const SandboxId& id, const std::string& path,
                             bool parents);
  absl::Status RemoveFile(const Caller& caller, const SandboxId& id, const std::string& path,
                          bool recursive);
  // An upload: Write the content in pieces, then Finish (which commits it atomically and
  // records a file_write event). Dropping it before Finish leaves the old file, if any.
  class FileWriter {
   public:
    absl::Status Write(std::string_view data);
    absl::StatusOr<nlohmann::json> Finish();

   private:
    friend class SandboxManager;
    SandboxManager* manager_ = nullptr;
    SandboxId id_;
    std::string actor_, path_;
    std::unique_ptr<shim::ShimClient::UploadStream> upload_;
  };
  absl::StatusOr<std::unique_ptr<FileWriter>> BeginWrite(const Caller& caller, const SandboxId& id,
                                                         const std::string& path, uint32_t mode,
                                                         bool parents);
  absl::StatusOr<nlohmann::json> ReadFile(const Caller& caller, const SandboxId& id,
                                          const std::string& path,
                                          const std::function<bool(std::string_view)>& sink);

  // Runs the sandbox's files (request.paths, or the spec's artifacts.paths) through the release
  // gate (src/artifact) while the sandbox is CollectingArtifacts; keeps released files in the
  // blob store and records every released or quarantined file. Returns the collection
  // (artifact::ToJson plus artifact_id per recorded file, policy_blocked and summary). A secret
  // in any file blocks the whole collection: nothing is released and the run is POLICY_BLOCKED.
  absl::StatusOr<nlohmann::json> CollectArtifacts(const Caller& caller, const SandboxId& id,
                                                  const CollectRequest& request);
  absl::StatusOr<std::vector<store::ArtifactRecord>> ListArtifacts(const Caller& caller,
                                                                   const SandboxId& id);
  // A released artifact's record and content; FailedPrecondition for a quarantined one.
  absl::StatusOr<std::pair<store::ArtifactRecord, std::string>> ReadArtifact(
      const Caller& caller, const SandboxId& id, const ArtifactId& artifact);
  // `git diff --binary` of /sandbox/workspace (untracked files included) against the pinned base
  // commit, made inside the sandbox with hooks, fsmonitor, external diff and textconv off,
  // written to /sandbox/artifacts/workspace.diff and collected as an artifact (so scanned like
  // any other). FailedPrecondition for a sandbox created without workspace.git.
  absl::StatusOr<nlohmann::json> WorkspaceDiff(const Caller& caller, const SandboxId& id);

  absl::StatusOr<store::SandboxRecord> Pause(const Caller& caller, const SandboxId& id);
  absl::StatusOr<store::SandboxRecord> Resume(const Caller& caller, const SandboxId& id);
  absl::StatusOr<store::SandboxRecord> ExtendTtl(const Caller& caller, const SandboxId& id,
                                                 absl::Duration ttl);
  absl::StatusOr<store::SandboxRecord> UpdateNetwork(const Caller& caller, const SandboxId& id,
                                                     const nlohmann::json& network,
                                                     bool may_loosen);
  absl::StatusOr<std::vector<store::AuditEvent>> Events(const Caller& caller, const SandboxId& id,
                                                        int64_t after_seq, int limit);
  // Terminates the sandbox: kills everything, removes it, keeps its records. Idempotent.
  absl::StatusOr<store::SandboxRecord> Destroy(const Caller& caller, const SandboxId& id,
                                               std::string_view reason);

  // Starts keeping the warm pool filled (ManagerOptions::warm_pool); call it after the first
  // Reconcile, which re-adopted what a previous daemon kept ready: of those, sandboxes of another
  // spec or beyond the pool's size are destroyed. An error names the pool's template when it
  // does not give a spec this node runs (nothing is started then). OK without a pool.
  absl::Status StartWarmPool();
  // Stops refilling the pool and destroys the sandboxes still waiting in it (they are the
  // node's, never a user's). Idempotent; the destructor calls it.
  void StopWarmPool();
  // The owner of the sandboxes waiting in the pool (in the store until one is claimed).
  static const ApiKeyId& WarmPoolOwner();

  // The daemon is stopping: every call waiting on a shim (a command run to its end, a stream,
  // an attach) ends now instead of when its command does. The commands go on in their shims;
  // their records stay running, and the next daemon learns their ends from the shims (Adopt).
  void InterruptWaits() { shim_connections_.Interrupt(); }

  // Re-adopts live shims, finishes interrupted work and removes leftovers (docs/daemon.md,
  // "Reaper and re-adoption"). Called at start and periodically; never throws away audit events.
  void Reconcile();

  // Number of sandboxes by state (for /metrics) and whether the node can take work (/readyz).
  std::map<std::string, int64_t> CountByState();
  absl::Status Ready();

  const ManagerOptions& options() const { return options_; }

 private:
  struct Live;  // what the manager holds per running sandbox (in memory, rebuilt on adopt)

  absl::StatusOr<store::SandboxRecord> Owned(const Caller& caller, const SandboxId& id);
  absl::StatusOr<store::SandboxRecord> OwnedRunning(const Caller& caller, const SandboxId& id);
  // The spec of a create request (its spec or template), parsed; *doc gets the document it was
  // parsed from.
  absl::StatusOr<spec::SandboxSpec> ResolveSpec(const CreateRequest& request, nlohmann::json* doc);
  // ResolveSpec, then the image's resolution as `owner` sees the images (into *lease) and
  // configuration.
  absl::StatusOr<spec::SandboxSpec> EffectiveSpec(const CreateRequest& request,
                                                  const ApiKeyId& owner, image::ImageLease* lease);
  // OK when the node may take one more sandbox (max_sandboxes); ResourceExhausted otherwise.
  absl::Status CheckRoom();
  // A created sandbox, or a retry of an earlier create once that create has finished.
  absl::StatusOr<store::CreateResult> AfterCreate(store::CreateResult created);
  absl::Status Start(const store::SandboxRecord& record, const spec::SandboxSpec& spec,
                     const CreateRequest& request, const std::string& actor);
  // Start, and on failure the sandbox marked Failed with nothing left of it on the node.
  absl::Status StartOrFail(const store::SandboxRecord& record, const spec::SandboxSpec& spec,
                           const CreateRequest& request, const std::string& actor);
  // Warm pool (warm_pool.cc). ClaimWarm hands `request`'s owner a pooled sandbox of the same
  // spec: nullopt when the pool has none.
  absl::StatusOr<std::optional<store::CreateResult>> ClaimWarm(const store::NewSandbox& request);
  void FillWarmPool();
  // The pool template's effective spec (its image resolved into *lease).
  absl::StatusOr<spec::SandboxSpec> WarmPoolSpec(image::ImageLease* lease);
  // This node's sandboxes in the store as the pool's (Running or Paused).
  absl::StatusOr<std::vector<store::SandboxRecord>> ListWarmPool();
  // The pool's sandboxes in the store, sorted out: those of the pool's spec stay (up to its
  // size) and are the ready list, the rest are destroyed. Returns how many stay.
  size_t SortWarmPool();
  absl::Status StartPooled();
  // Sets airlock_warm_pool_ready to the ready list's size (pool_.mu held).
  void ShowWarmPoolReady();
  absl::Status PrepareWorkspace(const SandboxId& id, const WorkspaceSource& source,
                                spec::SandboxSpec* spec);
  absl::StatusOr<nlohmann::json> LaunchShim(const SandboxId& id, const spec::SandboxSpec& spec);
  absl::StatusOr<store::SandboxRecord> Transition(const SandboxId& id,
                                                  std::vector<store::SandboxState> from,
                                                  store::SandboxState to, std::string actor,
                                                  std::string reason,
                                                  std::optional<std::string> error = std::nullopt);
  // Removes everything a sandbox has on the node: its shim (told, then killed), cgroups, run and
  // state directories. OK when nothing was left.
  absl::Status RemoveLeftovers(const store::SandboxRecord& record);
  absl::StatusOr<store::SandboxRecord> Teardown(const store::SandboxRecord& record,
                                                std::string actor, std::string reason);
  // Records that a command ended; when another caller recorded it first, returns that record.
  absl::StatusOr<store::CommandRecord> RecordEnd(const CommandId& command,
                                                 store::CommandState state,
                                                 const nlohmann::json& result);
  void Adopt(const store::SandboxRecord& record, bool after_restart);
  void ExpireIdle();
  void RemoveOrphans();
  absl::StatusOr<store::CommandRecord> RunCommand(const Caller& caller,
                                                  const store::SandboxRecord& record,
                                                  const ExecRequest& request, bool background,
                                                  const FrameSink& sink);
  absl::StatusOr<std::string> SandboxPath(const std::string& path) const;
  shim::ShimClient ClientFor(const store::SandboxRecord& record);
  std::string StateDir(const SandboxId& id) const;
  void NoteActivity(const SandboxId& id);

  ManagerOptions options_;
  store::Store* store_;
  store::BlobStore* blobs_;
  http::Metrics* metrics_;
  image::ImageStore* images_ = nullptr;
  http::Histogram* exec_latency_ = nullptr;
  http::Counter* reaper_actions_ = nullptr;

  shim::ShimConnections shim_connections_;  // idle connections to the shims, kept between calls

  std::mutex start_mu_;
  std::condition_variable start_cv_;
  int starting_ = 0;  // LaunchShim calls in progress (at most max_concurrent_starts)

  std::mutex mu_;
  std::map<SandboxId, int> busy_;  // commands and streams in flight per sandbox
  std::set<CommandId> in_flight_;  // commands whose exec call this daemon is making
  std::map<SandboxId, int64_t> last_cpu_us_;
  bool first_reconcile_ = true;

  struct WarmPool {
    std::mutex mu;
    std::condition_variable cv;
    nlohmann::json spec;           // the pooled sandboxes' effective spec (null: no pool)
    std::deque<SandboxId> ready;   // started, in the store as the pool's, not being claimed
    std::set<SandboxId> claiming;  // taken from `ready` by a create that is claiming it
    bool running = false;  // StartWarmPool started the filler and StopWarmPool has not ended
    bool stop = false;
    bool wake = false;  // a claim took a sandbox: the filler looks again at once
    std::thread filler;
    http::Gauge* ready_gauge = nullptr;
    http::Counter* claims = nullptr;
  } pool_;
};

}  // namespace airlock::daemon

#endif  // AIRLOCK_DAEMON_SANDBOX_MANAGER_H_
