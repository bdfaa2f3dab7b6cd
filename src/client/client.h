// The C++ client of airlockd's REST API (docs/daemon.md, docs/clients.md): typed calls for every
// endpoint, on the synchronous HTTP client of src/http.
//
//   ASSIGN_OR_RETURN(auto c, client::Client::Create({.url = "http://127.0.0.1:7878",
//                                                   .api_key = key}));
//   ASSIGN_OR_RETURN(client::Sandbox sb, c->CreateSandbox({.template_name = "R1"}));
//   ASSIGN_OR_RETURN(CommandResult r, c->Exec(sb.id, {.argv = {"make", "test"}}));
//   RETURN_IF_ERROR(c->DestroySandbox(sb.id).status());
//
// Errors: a transport failure is Unavailable naming the server. An error answer of the server
// becomes an absl::Status whose code follows the HTTP status (422 InvalidArgument, 401
// Unauthenticated, 403 PermissionDenied, 404 NotFound, 409 FailedPrecondition, 413/429
// ResourceExhausted, 5xx Internal or Unavailable) and whose message is the server's; ErrorOf()
// gives back the HTTP status, the error body's code and its request id.
//
// Not thread-safe: one Client per thread (it keeps one connection alive).
#ifndef AIRLOCK_CLIENT_CLIENT_H_
#define AIRLOCK_CLIENT_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "command/command.h"
#include "nlohmann/json.hpp"

namespace airlock::http {
class Client;
}

namespace airlock::client {

struct ClientOptions {
  std::string url;      // http://HOST:PORT; empty: $AIRLOCK_URL, else http://127.0.0.1:7878
  std::string api_key;  // empty: $AIRLOCK_API_KEY
  // Each connect, read and write of a request. Exec waits for its result as long as the command
  // may run (its timeout_seconds, else the longest a spec allows) plus a minute; streams get a
  // keep-alive from the server when quiet. TCP keep-alive finds a vanished server meanwhile.
  std::chrono::milliseconds timeout{300'000};
};

// What the server said about an error (from an absl::Status this client returned).
struct ApiError {
  int http_status = 0;     // 0: the error did not come from an answer (transport, local)
  std::string code;        // the error body's code: "not_found", "invalid_argument", ...
  std::string message;     // the error body's message
  std::string request_id;  // the server's id of the request, for its logs
};
ApiError ErrorOf(const absl::Status& status);

struct Sandbox {
  std::string id;
  std::string state;  // "Running", "Paused", "Gone", ...
  std::string template_name;
  std::string image_digest;
  std::map<std::string, std::string> metadata;
  int64_t ttl_seconds = 0;
  int64_t idle_timeout_seconds = 0;
  std::string expires_at, created_at, updated_at, last_activity_at;  // RFC 3339, UTC
  std::string last_error;
  nlohmann::json spec;  // the effective SandboxSpec
  nlohmann::json raw;   // the whole answer
};

struct GitWorkspace {
  std::string repo;
  std::string commit;
};

struct CreateSandboxRequest {
  nlohmann::json spec;        // a SandboxSpec document; null: none (then template_name)
  std::string template_name;  // "R0".."R5", "default" or an operator template
  std::optional<int64_t> ttl_seconds;
  std::optional<int64_t> idle_timeout_seconds;
  std::map<std::string, std::string> metadata;
  std::string idempotency_key;  // the same key returns the same sandbox
  std::optional<GitWorkspace> workspace;
};

struct ListSandboxesRequest {
  std::vector<std::string> states;              // empty: any
  std::map<std::string, std::string> metadata;  // every pair must match
  int limit = 0;                                // 0: the server's default
  std::string cursor;
};

struct SandboxList {
  std::vector<Sandbox> sandboxes;
  std::string next_cursor;  // empty: no more
};

struct ExecRequest {
  std::vector<std::string> argv;
  std::optional<int64_t> timeout_seconds;
  std::map<std::string, std::string> env;
  std::string workdir;
  std::string stdin_data;
  std::vector<std::string> secrets;  // values to redact from the output
};

// One server-sent event of a command's stream.
struct ExecEvent {
  enum class Kind { kStdout, kStderr, kEvent, kResult, kError };
  Kind kind = Kind::kEvent;
  std::string text;     // stdout / stderr chunk (already redacted by the server)
  nlohmann::json data;  // the event's JSON (event, result, error)
};
// Returns false to stop reading the stream (the command goes on in the sandbox).
using ExecEventHandler = std::function<bool(const ExecEvent&)>;

struct Command {
  std::string command_id;
  std::string sandbox_id;
  std::vector<std::string> argv;
  bool background = false;
  std::string state;  // "running", "finished", "killed", ...
  std::string started_at, finished_at;
  std::optional<CommandResult> result;
  nlohmann::json raw;
};

struct FileEntry {
  std::string name;  // the base name (list) or the path asked for (stat)
  std::string type;  // "file", "dir", "symlink", ...
  int64_t size = 0;
  uint32_t mode = 0;
  std::string mtime;
  std::string target;  // symlinks
  nlohmann::json raw;
};

struct Image {
  std::string digest;
  std::vector<std::string> tags;
  int64_t unpacked_bytes = 0;
  int64_t blob_bytes = 0;
  int64_t layers = 0;
  std::string imported_at;
  bool node_image = false;  // one of the node's images (every key sees it), not this key's own
  nlohmann::json raw;       // config, layers, ...
};

// A recorded artifact of a run (released, or quarantined: its content never kept).
struct Artifact {
  std::string id;  // "art-…"
  std::string path;
  int64_t size = 0;
  std::string sha256;
  std::string status;  // "released" or "quarantined"
  std::string reason;
  std::string created_at;
};

struct ImportProgress {
  enum class Stage { kUploading, kReadingArchive, kVerifying, kUnpacking, kDone };
  Stage stage = Stage::kUploading;
  int64_t bytes_sent = 0;   // of the archive, while uploading
  int64_t bytes_total = 0;  // the archive's size
  int layer = 0;            // 1-based, while unpacking
  int layers = 0;
  int64_t bytes_read = 0;     // the server's, in the current stage
  int64_t bytes_written = 0;  // the server's, in the current stage
};
std::string_view StageName(ImportProgress::Stage stage);

class Client {
 public:
  // InvalidArgument for a malformed URL; does not connect yet.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client();

  const ClientOptions& options() const { return options_; }

  // Sandboxes.
  absl::StatusOr<Sandbox> CreateSandbox(const CreateSandboxRequest& request);
  absl::StatusOr<Sandbox> GetSandbox(std::string_view id);
  absl::StatusOr<SandboxList> ListSandboxes(const ListSandboxesRequest& request = {});
  absl::StatusOr<Sandbox> DestroySandbox(std::string_view id);
  absl::StatusOr<Sandbox> Pause(std::string_view id);
  absl::StatusOr<Sandbox> Resume(std::string_view id);
  absl::StatusOr<Sandbox> ExtendTtl(std::string_view id, int64_t ttl_seconds);
  // Audit events after sequence number `after` (the answer's "events" array).
  absl::StatusOr<nlohmann::json> Events(std::string_view id, int64_t after = 0);

  // Replaces a running sandbox's network policy (`network`: the spec's network section); a
  // looser policy than the current one needs `loosen`. Returns the sandbox with its new spec.
  absl::StatusOr<Sandbox> SetNetwork(std::string_view id, const nlohmann::json& network,
                                     bool loosen = false);

  // Artifacts (docs/daemon.md). CollectArtifacts runs `paths` (empty: the spec's
  // artifacts.paths) through the release gate and returns its answer (ArtifactCollection in
  // docs/api/openapi.yaml: blocked, policy_blocked, released_bytes, summary, files with one
  // outcome each). WorkspaceDiff collects the git workspace's diff against its pinned commit the
  // same way (plus base_commit). DownloadArtifact hands a released artifact to `sink` as it
  // arrives and returns its size; a quarantined one is FailedPrecondition.
  absl::StatusOr<nlohmann::json> CollectArtifacts(std::string_view id,
                                                  const std::vector<std::string>& paths = {},
                                                  const std::vector<std::string>& secrets = {});
  absl::StatusOr<nlohmann::json> WorkspaceDiff(std::string_view id);
  absl::StatusOr<std::vector<Artifact>> ListArtifacts(std::string_view id);
  absl::StatusOr<int64_t> DownloadArtifact(
      std::string_view id, std::string_view artifact_id,
      const std::function<absl::Status(std::string_view)>& sink);

  // Interpreter sessions (docs/interp.md, "REST"); answers as the API gives them.
  // CreateInterpreter takes {limits?, tools?, declared?}; Eval and the Resume calls return the
  // run's result (outcome, result, error, pending, console, state).
  absl::StatusOr<nlohmann::json> CreateInterpreter(const nlohmann::json& request);
  absl::StatusOr<nlohmann::json> Eval(std::string_view session, std::string_view script);
  absl::StatusOr<nlohmann::json> ResumeWithResult(std::string_view session,
                                                  std::string_view call_id,
                                                  const nlohmann::json& result);
  absl::StatusOr<nlohmann::json> ResumeWithError(std::string_view session, std::string_view call_id,
                                                 std::string_view error);
  absl::StatusOr<nlohmann::json> GetInterpreter(std::string_view session);
  absl::StatusOr<nlohmann::json> DeleteInterpreter(std::string_view session);

  // Commands. Exec waits for the result. ExecStream hands every event (stdout, stderr, event,
  // and the final result) to `on_event` as it arrives and returns the result; a stream the
  // handler stops is Cancelled.
  absl::StatusOr<CommandResult> Exec(std::string_view id, const ExecRequest& request);
  absl::StatusOr<CommandResult> ExecStream(std::string_view id, const ExecRequest& request,
                                           const ExecEventHandler& on_event);
  absl::StatusOr<Command> StartBackground(std::string_view id, const ExecRequest& request);
  absl::StatusOr<Command> GetCommand(std::string_view id, std::string_view command_id);
  absl::StatusOr<std::vector<Command>> ListCommands(std::string_view id);
  // A command's output from what the sandbox still holds until it ends; returns the final
  // event's JSON (the CommandResult, or {"state"} for a command without one).
  absl::StatusOr<nlohmann::json> StreamCommand(std::string_view id, std::string_view command_id,
                                               const ExecEventHandler& on_event);
  // `signal`: "TERM", "KILL", ... or a number as text.
  absl::Status KillCommand(std::string_view id, std::string_view command_id,
                           std::string_view signal = "KILL");

  // Files. Paths are absolute in the sandbox or relative to /sandbox/workspace.
  // Upload sends what `next` returns (an empty string ends it) without holding it whole.
  absl::StatusOr<FileEntry> Upload(std::string_view id, std::string_view path,
                                   const std::function<absl::StatusOr<std::string>()>& next,
                                   uint32_t mode = 0644);
  absl::StatusOr<FileEntry> WriteFile(std::string_view id, std::string_view path, std::string data,
                                      uint32_t mode = 0644);
  absl::StatusOr<FileEntry> UploadFrom(std::string_view id, std::string_view path,
                                       const std::string& local_path, uint32_t mode = 0644);
  // Download hands the file to `sink` as it arrives; returns the size the server announced.
  absl::StatusOr<int64_t> Download(std::string_view id, std::string_view path,
                                   const std::function<absl::Status(std::string_view)>& sink);
  absl::StatusOr<std::string> ReadFile(std::string_view id, std::string_view path,
                                       size_t max_bytes = 64 << 20);
  absl::StatusOr<std::vector<FileEntry>> ListFiles(std::string_view id, std::string_view path);
  absl::StatusOr<FileEntry> StatFile(std::string_view id, std::string_view path);
  absl::Status MakeDirectory(std::string_view id, std::string_view path, bool parents = false);
  absl::Status RemoveFile(std::string_view id, std::string_view path, bool recursive = false);

  // Images. ImportImage uploads the archive at `local_path` (an OCI layout tarball or a docker
  // save tarball), reporting the upload and then the server's stages to `progress`.
  absl::StatusOr<std::vector<Image>> ImportImage(
      const std::string& local_path, const std::vector<std::string>& tags = {},
      const std::function<void(const ImportProgress&)>& progress = nullptr);
  absl::StatusOr<std::vector<Image>> ListImages();
  absl::StatusOr<Image> GetImage(std::string_view reference);
  absl::Status RemoveImage(std::string_view reference);

  // Readiness (/readyz): OK when the node takes work.
  absl::Status Ready();

 private:
  explicit Client(ClientOptions options, std::unique_ptr<http::Client> http);
  absl::Status Reconnect();
  absl::StatusOr<nlohmann::json> Call(int method, std::string_view target,
                                      const nlohmann::json* body,
                                      std::chrono::milliseconds answer_timeout = {});
  absl::StatusOr<nlohmann::json> Stream(int method, std::string_view target,
                                        const nlohmann::json* body,
                                        const ExecEventHandler& on_event);

  ClientOptions options_;
  std::unique_ptr<http::Client> http_;
};

// "a b/c" -> "a%20b%2Fc": for query values and path segments.
std::string UrlEncode(std::string_view s);

}  // namespace airlock::client

#endif  // AIRLOCK_CLIENT_CLIENT_H_
