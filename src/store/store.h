// The store: every piece of durable state of a node daemon (DESIGN.md, "Where state lives").
//
// A daemon keeps caches at most; sandboxes, their audit trail, commands and their results, API
// keys, artifacts and interpreter sessions live here, so any daemon may be killed at any moment
// without losing any of them. Blobs (artifact contents, raw logs, snapshots) live in the
// BlobStore (store/blob_store.h); records here refer to them by key.
//
// Store is the seam between the daemon and its database: SQLite for the embedded default
// (store/sqlite_store.h), PostgreSQL when several daemons share one database. Both run the same
// contract test suite (store_contract_test.cc). docs/store.md describes the schema.
//
// Every method is thread-safe: one Store may be shared by all threads of a process, and several
// Store objects (in one or several processes) may use the same database at once. Each method is
// one transaction; a method that changes a sandbox and records an audit event does both or
// neither.
//
// Errors, the same for every implementation:
//   NotFound            the record does not exist
//   AlreadyExists       a record with that id exists already
//   FailedPrecondition  the record is not in the state the call expects (a lost compare-and-set,
//                       a transition the lifecycle does not allow, a revoked key); the message
//                       names the state found and the state expected
//   InvalidArgument     a malformed request (bad cursor, empty id, unknown state name)
//   Unauthenticated     Authenticate: a malformed, unknown, wrong or revoked API key
//   Unavailable         the database is busy beyond the busy timeout, or cannot be reached;
//                       the call may be retried
//   DataLoss            the database holds something this code cannot read back
//   Internal            anything else
// Times are stored with millisecond precision.
#ifndef AIRLOCK_STORE_STORE_H_
#define AIRLOCK_STORE_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/ids.h"
#include "nlohmann/json.hpp"

namespace airlock::store {

// ---------------------------------------------------------------------------------------------
// Sandboxes

// The lifecycle of DESIGN.md. kFailed is the end of a sandbox that never reached kRunning;
// kGone the end of every other. Both are terminal.
enum class SandboxState {
  kAllocating,
  kPreparingImage,
  kMountingWorkspace,
  kStarting,
  kRunning,
  kPaused,
  kCollectingArtifacts,
  kCleaning,
  kGone,
  kFailed,
};

// "Allocating", "PreparingImage", ... (the names of the API and of the database).
std::string_view ToString(SandboxState state);
std::optional<SandboxState> SandboxStateFromString(std::string_view name);

// True for kGone and kFailed.
bool IsTerminal(SandboxState state);

// The edges of the lifecycle that Transition accepts:
//   Allocating -> PreparingImage -> MountingWorkspace -> Starting -> Running
//   Running <-> Paused;  Running | Paused -> CollectingArtifacts -> Running | Cleaning
//   any state before Running -> Failed (setup failed, nothing left to clean)
//   any non-terminal state -> Cleaning;  Cleaning -> Gone | Failed
bool IsAllowedTransition(SandboxState from, SandboxState to);

// What the node needs to find a running sandbox again after a restart.
struct RuntimeInfo {
  int64_t shim_pid = 0;     // 0: no shim
  std::string shim_socket;  // the shim's control socket
  std::string cgroup_path;  // the sandbox's cgroup

  friend bool operator==(const RuntimeInfo&, const RuntimeInfo&) = default;
};

struct SandboxRecord {
  SandboxId id;
  SandboxState state = SandboxState::kAllocating;
  ApiKeyId owner;
  nlohmann::json spec = nlohmann::json::object();  // the effective SandboxSpec (spec::ToJson)
  std::string template_name;                       // empty: created from a spec
  std::string image_digest;                        // "sha256:..."; empty before it is resolved
  std::map<std::string, std::string> metadata;
  absl::Duration ttl = absl::ZeroDuration();           // expires_at - created_at
  absl::Duration idle_timeout = absl::ZeroDuration();  // zero: no idle timeout
  absl::Time expires_at;
  absl::Time last_activity_at;
  absl::Time created_at;
  absl::Time updated_at;        // last change of state, runtime, TTL or error
  std::string idempotency_key;  // empty: none
  NodeId node;
  RuntimeInfo runtime;
  std::string last_error;  // empty: none
};

struct NewSandbox {
  SandboxId id;  // empty: the store makes one (SandboxId::New())
  ApiKeyId owner;
  nlohmann::json spec = nlohmann::json::object();
  std::string template_name;
  std::string image_digest;
  std::map<std::string, std::string> metadata;
  absl::Duration ttl = absl::Hours(1);  // must be > 0
  absl::Duration idle_timeout = absl::ZeroDuration();
  // Unique per owner: a second Create with the same (owner, key) creates nothing and returns
  // the first sandbox, whatever else the request says. Empty: every Create creates.
  std::string idempotency_key;
  NodeId node;
  std::string actor;  // who asks, for the audit event ("key:ak-...", "daemon", "reaper")
};

struct CreateResult {
  SandboxRecord sandbox;
  bool created = false;  // false: an earlier Create with the same idempotency key made it
};

struct SandboxQuery {
  std::optional<ApiKeyId> owner;
  std::vector<SandboxState> states;             // empty: any state
  std::map<std::string, std::string> metadata;  // every pair must match
  std::string cursor;  // next_cursor of the previous page; empty: from the start
  int limit = 100;     // 1..1000
};

struct SandboxPage {
  std::vector<SandboxRecord> sandboxes;  // oldest first (created_at, then id)
  std::string next_cursor;               // empty: this was the last page
};

struct TransitionRequest {
  SandboxId id;
  std::vector<SandboxState> from;  // the states the caller believes the sandbox is in
  SandboxState to = SandboxState::kAllocating;
  std::string actor;
  std::string reason;
  std::optional<std::string> error;                // when set, replaces last_error ("" clears it)
  nlohmann::json data = nlohmann::json::object();  // extra fields for the audit event
};

// ---------------------------------------------------------------------------------------------
// Audit events: append-only; nothing in airlock updates or deletes them (the SQLite schema
// refuses it with triggers).

enum class AuditKind {
  kStateTransition,  // from/to set; the first one of a sandbox has no from-state
  kExec,
  kFileWrite,
  kArtifactReleased,
  kArtifactQuarantined,
  kPolicyBlocked,
  kCleanupFailed,
  kNetworkPolicyChanged,
  kTtlExtended,
  kSandboxAdopted,  // a restarted daemon took over a live shim
  kSandboxClaimed,  // a sandbox the node kept ready (warm pool) was handed to its owner
  kApiKeyCreated,
  kApiKeyRevoked,
};

// "state_transition", "exec", ... (the names of the API and of the database).
std::string_view ToString(AuditKind kind);
std::optional<AuditKind> AuditKindFromString(std::string_view name);

struct AuditEvent {
  int64_t seq = 0;    // set by the store: increasing, never reused
  absl::Time time;    // set by the store
  SandboxId sandbox;  // empty for events about no sandbox (API keys)
  std::string actor;
  AuditKind kind = AuditKind::kStateTransition;
  std::optional<SandboxState> from;
  std::optional<SandboxState> to;
  std::string reason;
  nlohmann::json data = nlohmann::json::object();
};

struct AuditQuery {
  std::optional<SandboxId> sandbox;  // empty: every sandbox
  int64_t after_seq = 0;             // events with seq > after_seq
  int64_t until_seq = 0;             // and seq <= until_seq; 0: no upper bound
  int limit = 1000;                  // 1..10000
};

// ---------------------------------------------------------------------------------------------
// Commands

enum class CommandState { kRunning, kFinished, kKilled };
std::string_view ToString(CommandState state);  // "running", "finished", "killed"
std::optional<CommandState> CommandStateFromString(std::string_view name);

struct CommandRecord {
  CommandId id;
  SandboxId sandbox;
  std::vector<std::string> argv;
  bool background = false;
  CommandState state = CommandState::kRunning;
  absl::Time started_at;                  // set by PutCommand
  std::optional<absl::Time> finished_at;  // set by FinishCommand
  std::optional<nlohmann::json> result;   // the CommandResult (command/command.h ToJson)
};

// ---------------------------------------------------------------------------------------------
// API keys. A key is shown once, as the token "ak_<12 hex>_<64 hex>": the first part is the
// key's id ("ak-<12 hex>"), the second its 32-byte secret. The store keeps only a salted
// HMAC-SHA256 of the secret, never the secret, and never puts the token in an error message.

struct ApiKey {
  ApiKeyId id;
  std::string name;
  absl::Time created_at;
  std::optional<absl::Time> revoked_at;
  std::optional<absl::Time> last_used_at;  // updated by Authenticate at most once a minute
};

struct NewApiKey {
  ApiKey key;
  std::string token;  // the only copy of the secret: show it to the user and forget it
};

// ---------------------------------------------------------------------------------------------
// Artifacts

enum class ArtifactStatus { kReleased, kQuarantined };
std::string_view ToString(ArtifactStatus status);  // "released", "quarantined"
std::optional<ArtifactStatus> ArtifactStatusFromString(std::string_view name);

struct ArtifactRecord {
  ArtifactId id;
  SandboxId sandbox;
  std::string path;  // the path inside the sandbox
  int64_t size = 0;
  std::string sha256;  // hex
  ArtifactStatus status = ArtifactStatus::kReleased;
  std::string reason;     // quarantined: the detector or rule that hit
  std::string blob_key;   // the BlobStore key of the content
  absl::Time created_at;  // set by PutArtifact
};

// ---------------------------------------------------------------------------------------------
// Interpreter sessions (level 0, issue 6): a small versioned record per session.

struct InterpSession {
  InterpSessionId id;
  ApiKeyId owner;
  std::string state;          // defined by the interpreter's API ("running", "paused", ...)
  std::string snapshot_blob;  // BlobStore key of the latest snapshot; empty: none
  std::string console_output;
  int64_t version = 0;    // set by the store: 1 after Put, +1 per Update
  absl::Time created_at;  // set by the store
  absl::Time updated_at;  // set by the store
};

// ---------------------------------------------------------------------------------------------
// Observing latency: every call reports its name ("sandbox.create", "audit.list", ...), how long
// it took and how it ended. Called on the caller's thread after the transaction; it must be
// thread-safe and quick. store/latency.h has a recorder the daemon can export.

struct StoreCall {
  std::string_view op;
  absl::Duration latency;
  absl::StatusCode code;
};
using StoreObserver = std::function<void(const StoreCall&)>;

// What every implementation takes.
struct StoreOptions {
  std::function<absl::Time()> clock;  // empty: absl::Now
  StoreObserver observer;             // empty: none
};

class Store {
 public:
  virtual ~Store() = default;

  // Sandboxes -----------------------------------------------------------------------------

  // Creates a sandbox in kAllocating with expires_at = now + ttl and last_activity_at = now,
  // and its first audit event (state_transition to Allocating), atomically. With an
  // idempotency key, concurrent or repeated calls by the same owner create exactly one sandbox
  // and all return it. AlreadyExists when `id` is taken; InvalidArgument for an empty owner or
  // a ttl <= 0.
  [[nodiscard]] virtual absl::StatusOr<CreateResult> CreateSandbox(const NewSandbox& request) = 0;

  // Hands a sandbox the node started ahead of time (a warm pool's: state Running, owned by
  // `from_owner`) to the owner of `request`, atomically: owner, template, metadata, TTL and idle
  // timeout (both counted from now, and created_at becomes now), idempotency key and actor come
  // from `request`; spec, image, runtime and the audit trail stay, and a sandbox_claimed event is
  // appended. `request.spec` must equal the sandbox's spec. When the request's owner already used
  // its idempotency key, nothing changes and that sandbox is returned with created = false, as
  // CreateSandbox does. FailedPrecondition when the sandbox is no longer Running or no longer
  // `from_owner`'s (claimed or reaped meanwhile: a sandbox is never handed out twice), or when
  // the specs differ; InvalidArgument for a request CreateSandbox would refuse.
  [[nodiscard]] virtual absl::StatusOr<CreateResult> ClaimSandbox(const SandboxId& id,
                                                                  const ApiKeyId& from_owner,
                                                                  const NewSandbox& request) = 0;

  [[nodiscard]] virtual absl::StatusOr<SandboxRecord> GetSandbox(const SandboxId& id) = 0;

  [[nodiscard]] virtual absl::StatusOr<SandboxPage> ListSandboxes(const SandboxQuery& query) = 0;

  // How many sandboxes are in one of `states` (every sandbox when empty), without reading them.
  [[nodiscard]] virtual absl::StatusOr<int64_t> CountSandboxes(
      const std::vector<SandboxState>& states) = 0;

  // Compare-and-set of the state: moves the sandbox to `to` when its state is one of `from`
  // and the lifecycle allows the edge, and appends the state_transition event in the same
  // transaction. FailedPrecondition, naming the state found and the states expected, when the
  // state moved; FailedPrecondition naming both states when the edge is not allowed.
  // Returns the record after the change.
  [[nodiscard]] virtual absl::StatusOr<SandboxRecord> Transition(
      const TransitionRequest& request) = 0;

  // Records activity at `at` (last_activity_at only ever moves forward).
  [[nodiscard]] virtual absl::Status Touch(const SandboxId& id, absl::Time at) = 0;

  // Moves expires_at to `expires_at` (never earlier than it is) and records a ttl_extended
  // event. FailedPrecondition for a terminal sandbox.
  [[nodiscard]] virtual absl::StatusOr<SandboxRecord> ExtendTtl(const SandboxId& id,
                                                                absl::Time expires_at,
                                                                std::string_view actor) = 0;

  [[nodiscard]] virtual absl::Status UpdateRuntime(const SandboxId& id,
                                                   const RuntimeInfo& runtime) = 0;

  // Replaces the effective spec of a live sandbox (a running sandbox's network policy changed)
  // and appends `event` (its sandbox set to `id`) in the same transaction, so the record and the
  // audit trail never disagree. FailedPrecondition for a terminal sandbox; InvalidArgument for
  // an empty actor. Returns the record after the change.
  [[nodiscard]] virtual absl::StatusOr<SandboxRecord> UpdateSpec(const SandboxId& id,
                                                                 const nlohmann::json& spec,
                                                                 const AuditEvent& event) = 0;

  // Non-terminal sandboxes past their TTL (expires_at <= now) or idle past their idle timeout
  // (last_activity_at + idle_timeout <= now), oldest expiry first, at most `limit` (1..1000).
  [[nodiscard]] virtual absl::StatusOr<std::vector<SandboxRecord>> ListExpired(absl::Time now,
                                                                               int limit) = 0;

  // Audit ---------------------------------------------------------------------------------

  // Appends `event` (seq and time are set by the store; InvalidArgument for an empty actor) and
  // returns its seq.
  [[nodiscard]] virtual absl::StatusOr<int64_t> AppendEvent(const AuditEvent& event) = 0;

  // Events in seq order.
  [[nodiscard]] virtual absl::StatusOr<std::vector<AuditEvent>> ListEvents(
      const AuditQuery& query) = 0;

  // Commands ------------------------------------------------------------------------------

  // Records a started command (state kRunning, started_at = now) and its exec audit event, and
  // counts as the sandbox's activity at that time (as Touch), in one transaction. NotFound when
  // the sandbox does not exist; AlreadyExists for a known id.
  [[nodiscard]] virtual absl::Status PutCommand(const CommandRecord& command,
                                                std::string_view actor) = 0;

  // Moves a running command to kFinished or kKilled with its result and, in the same
  // transaction, records the sandbox's activity at that time (as Touch). FailedPrecondition
  // when it is not running (or `state` is kRunning).
  [[nodiscard]] virtual absl::StatusOr<CommandRecord> FinishCommand(
      const CommandId& id, CommandState state, const nlohmann::json& result) = 0;

  [[nodiscard]] virtual absl::StatusOr<CommandRecord> GetCommand(const CommandId& id) = 0;

  // A sandbox's commands, oldest first; kept after the sandbox is Gone.
  [[nodiscard]] virtual absl::StatusOr<std::vector<CommandRecord>> ListCommands(
      const SandboxId& sandbox) = 0;

  // API keys ------------------------------------------------------------------------------

  // A new key named `name` (1-200 characters) and an api_key_created event.
  [[nodiscard]] virtual absl::StatusOr<NewApiKey> CreateApiKey(std::string_view name,
                                                               std::string_view actor) = 0;

  // The key whose token this is. Unauthenticated when the token is malformed, the key unknown
  // or revoked, or the secret wrong; the message never contains the token. The secret is
  // compared in constant time.
  [[nodiscard]] virtual absl::StatusOr<ApiKey> Authenticate(std::string_view token) = 0;

  [[nodiscard]] virtual absl::StatusOr<ApiKey> GetApiKey(const ApiKeyId& id) = 0;

  // Revokes a key (and records api_key_revoked). FailedPrecondition when already revoked.
  [[nodiscard]] virtual absl::Status RevokeApiKey(const ApiKeyId& id, std::string_view actor) = 0;

  // Every key, revoked ones included, oldest first.
  [[nodiscard]] virtual absl::StatusOr<std::vector<ApiKey>> ListApiKeys() = 0;

  // Artifacts -----------------------------------------------------------------------------

  // Records an artifact (created_at = now) and its artifact_released or artifact_quarantined
  // event. NotFound when the sandbox does not exist; AlreadyExists for a known id.
  [[nodiscard]] virtual absl::Status PutArtifact(const ArtifactRecord& artifact,
                                                 std::string_view actor) = 0;

  [[nodiscard]] virtual absl::StatusOr<ArtifactRecord> GetArtifact(const ArtifactId& id) = 0;

  // Oldest first.
  [[nodiscard]] virtual absl::StatusOr<std::vector<ArtifactRecord>> ListArtifacts(
      const SandboxId& sandbox) = 0;

  // Interpreter sessions ------------------------------------------------------------------

  // Stores a new session (version 1). AlreadyExists for a known id.
  [[nodiscard]] virtual absl::StatusOr<InterpSession> PutInterpSession(
      const InterpSession& session) = 0;

  [[nodiscard]] virtual absl::StatusOr<InterpSession> GetInterpSession(
      const InterpSessionId& id) = 0;

  // Replaces state, snapshot_blob and console_output when the stored version equals
  // `session.version` (compare-and-set), and returns the record with the next version.
  // FailedPrecondition naming both versions when it moved.
  [[nodiscard]] virtual absl::StatusOr<InterpSession> UpdateInterpSession(
      const InterpSession& session) = 0;
};

}  // namespace airlock::store

#endif  // AIRLOCK_STORE_STORE_H_
