#include "client/client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/cord.h"
#include "client/internal/sse.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"
#include "http/client.h"
#include "http/server.h"
#include "spec/sandbox_spec.h"

namespace airlock::client {

using nlohmann::json;
namespace bhttp = boost::beast::http;

namespace {

constexpr char kCodePayload[] = "airlock.dev/error/code";
constexpr char kRequestIdPayload[] = "airlock.dev/error/request_id";
constexpr char kHttpStatusPayload[] = "airlock.dev/error/http_status";

absl::StatusCode CodeForHttp(int status) {
  switch (status) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
    case 405:
      return absl::StatusCode::kNotFound;
    case 409:
      return absl::StatusCode::kFailedPrecondition;
    case 413:
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 503:
      return absl::StatusCode::kUnavailable;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return status >= 500 ? absl::StatusCode::kInternal : absl::StatusCode::kUnknown;
  }
}

// The absl code a body's code names ("not_found"; see http/errors.h), else the HTTP status's.
absl::StatusCode CodeFor(std::string_view code, int http_status) {
  // The reasons that refine an absl code (http/errors.h), for errors inside a stream, whose
  // HTTP status says only 500.
  if (code == "payload_too_large") return absl::StatusCode::kResourceExhausted;
  if (code == "malformed_body") return absl::StatusCode::kInvalidArgument;
  for (int c = 1; c <= 16; ++c) {
    std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(c));
    for (char& ch : name) ch = static_cast<char>(std::tolower(ch));
    if (name == code) return static_cast<absl::StatusCode>(c);
  }
  return CodeForHttp(http_status);
}

// An error body ({code, message, request_id}) as a Status.
absl::Status ErrorFromBody(int http_status, const json& body, std::string_view raw) {
  std::string message, code, request_id;
  if (body.is_object()) {
    message = body.value("message", "");
    code = body.value("code", "");
    request_id = body.value("request_id", "");
  }
  if (message.empty()) {
    message = fmt::format("HTTP {}: {}", http_status, raw.substr(0, 200));
  }
  absl::Status s(CodeFor(code, http_status), message);
  s.SetPayload(kCodePayload, absl::Cord(code));
  s.SetPayload(kRequestIdPayload, absl::Cord(request_id));
  s.SetPayload(kHttpStatusPayload, absl::Cord(std::to_string(http_status)));
  return s;
}

absl::Status ErrorFromResponse(const http::ClientResponse& r) {
  return ErrorFromBody(r.status, json::parse(r.body, nullptr, false), r.body);
}

template <typename T>
T Get(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

Sandbox SandboxFrom(const json& j) {
  Sandbox s;
  s.id = Get<std::string>(j, "id", "");
  s.state = Get<std::string>(j, "state", "");
  s.template_name = Get<std::string>(j, "template", "");
  s.image_digest = Get<std::string>(j, "image_digest", "");
  s.metadata = Get<std::map<std::string, std::string>>(j, "metadata", {});
  s.ttl_seconds = Get<int64_t>(j, "ttl_seconds", 0);
  s.idle_timeout_seconds = Get<int64_t>(j, "idle_timeout_seconds", 0);
  s.expires_at = Get<std::string>(j, "expires_at", "");
  s.created_at = Get<std::string>(j, "created_at", "");
  s.updated_at = Get<std::string>(j, "updated_at", "");
  s.last_activity_at = Get<std::string>(j, "last_activity_at", "");
  s.last_error = Get<std::string>(j, "last_error", "");
  s.spec = j.contains("spec") ? j["spec"] : json::object();
  s.raw = j;
  return s;
}

absl::StatusOr<CommandResult> ResultFrom(const json& j) {
  ASSIGN_OR_RETURN(CommandResult r, CommandResultFromJson(j), "the server's command result");
  return r;
}

Command CommandFrom(const json& j) {
  Command c;
  c.command_id = Get<std::string>(j, "command_id", "");
  c.sandbox_id = Get<std::string>(j, "sandbox_id", "");
  c.argv = Get<std::vector<std::string>>(j, "argv", {});
  c.background = Get<bool>(j, "background", false);
  c.state = Get<std::string>(j, "state", "");
  c.started_at = Get<std::string>(j, "started_at", "");
  c.finished_at = Get<std::string>(j, "finished_at", "");
  if (j.contains("result") && j["result"].is_object()) {
    if (absl::StatusOr<CommandResult> r = CommandResultFromJson(j["result"]); r.ok()) {
      c.result = *std::move(r);
    }
  }
  c.raw = j;
  return c;
}

FileEntry FileFrom(const json& j) {
  FileEntry f;
  f.name = Get<std::string>(j, "name", Get<std::string>(j, "path", ""));
  f.type = Get<std::string>(j, "type", "");
  f.size = Get<int64_t>(j, "size", 0);
  f.mode = Get<uint32_t>(j, "mode", 0);
  f.mtime = j.contains("mtime")
                ? (j["mtime"].is_string() ? j["mtime"].get<std::string>() : j["mtime"].dump())
                : "";
  f.target = Get<std::string>(j, "target", "");
  f.raw = j;
  return f;
}

Image ImageFrom(const json& j) {
  Image i;
  i.digest = Get<std::string>(j, "digest", "");
  i.tags = Get<std::vector<std::string>>(j, "tags", {});
  i.unpacked_bytes = Get<int64_t>(j, "unpacked_bytes", 0);
  i.blob_bytes = Get<int64_t>(j, "blob_bytes", 0);
  i.layers =
      j.contains("layers") && j["layers"].is_array() ? static_cast<int64_t>(j["layers"].size()) : 0;
  i.imported_at = Get<std::string>(j, "imported_at", "");
  i.node_image = Get<bool>(j, "node_image", false);
  i.raw = j;
  return i;
}

std::vector<Image> ImagesFrom(const json& j) {
  std::vector<Image> out;
  if (j.contains("images") && j["images"].is_array()) {
    for (const json& i : j["images"]) out.push_back(ImageFrom(i));
  }
  return out;
}

json ExecBody(const ExecRequest& r) {
  json b = {{"argv", r.argv}};
  if (r.timeout_seconds) b["timeout_seconds"] = *r.timeout_seconds;
  if (!r.env.empty()) b["env"] = r.env;
  if (!r.workdir.empty()) b["workdir"] = r.workdir;
  if (!r.stdin_data.empty()) b["stdin"] = r.stdin_data;
  if (!r.secrets.empty()) b["secrets"] = r.secrets;
  return b;
}

// How long the answer to a call the server runs as long work may take to begin: a create with
// a workspace clone (clone and checkout up to five minutes each, then the start), an artifact
// collection (up to ten minutes), an interpreter's evaluation (wall time up to ten minutes).
constexpr std::chrono::minutes kLongWorkAnswer(30);

std::string SandboxPath(std::string_view id) { return "/v1/sandboxes/" + UrlEncode(id); }

std::string FilesTarget(std::string_view id, std::string_view op, std::string_view path) {
  return fmt::format("{}/files{}?path={}", SandboxPath(id), op, UrlEncode(path));
}

// GETs `target` into `sink` and returns the bytes received. The caller has made sure first (a
// stat, a listing) that the answer is the content, never an error answer taken for it: `what`
// names the transfer in errors, `checked` that first call.
absl::StatusOr<int64_t> GetInto(http::Client& http, const std::string& target,
                                const std::function<absl::Status(std::string_view)>& sink,
                                std::string_view what, std::string_view checked) {
  absl::Status sunk;
  int64_t size = 0;
  ASSIGN_OR_RETURN(http::ClientResponse r,
                   http.SendStreaming(bhttp::verb::get, target, "", "", [&](std::string_view data) {
                     size += static_cast<int64_t>(data.size());
                     sunk = sink(data);
                     return sunk.ok();
                   }));
  if (r.status >= 300) {
    return absl::UnavailableError(
        fmt::format("{}: the server answered {} after {}", what, r.status, checked));
  }
  RETURN_IF_ERROR(sunk, what);
  return size;
}

ExecEvent EventFrom(const internal::SseEvent& e) {
  ExecEvent out;
  out.data = json::parse(e.data, nullptr, false);
  if (e.event == "stdout" || e.event == "stderr") {
    out.kind = e.event == "stdout" ? ExecEvent::Kind::kStdout : ExecEvent::Kind::kStderr;
    out.text = out.data.is_object() ? out.data.value("text", "") : "";
  } else if (e.event == "result") {
    out.kind = ExecEvent::Kind::kResult;
  } else if (e.event == "error") {
    out.kind = ExecEvent::Kind::kError;
  } else {
    out.kind = ExecEvent::Kind::kEvent;
  }
  return out;
}

}  // namespace

ApiError ErrorOf(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  if (auto v = status.GetPayload(kHttpStatusPayload))
    e.http_status = std::atoi(std::string(*v).c_str());
  if (auto v = status.GetPayload(kCodePayload)) e.code = std::string(*v);
  if (auto v = status.GetPayload(kRequestIdPayload)) e.request_id = std::string(*v);
  return e;
}

std::string_view StageName(ImportProgress::Stage stage) {
  switch (stage) {
    case ImportProgress::Stage::kUploading:
      return "uploading";
    case ImportProgress::Stage::kReadingArchive:
      return "reading archive";
    case ImportProgress::Stage::kVerifying:
      return "verifying";
    case ImportProgress::Stage::kUnpacking:
      return "unpacking";
    case ImportProgress::Stage::kDone:
      return "done";
  }
  return "";
}

std::string UrlEncode(std::string_view s) { return http::PercentEncode(s); }

Client::Client(ClientOptions options, std::unique_ptr<http::Client> http)
    : options_(std::move(options)), http_(std::move(http)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (options.url.empty()) {
    const char* env = std::getenv("AIRLOCK_URL");
    options.url = env != nullptr && *env != '\0' ? env : "http://127.0.0.1:7878";
  }
  if (options.api_key.empty()) {
    if (const char* env = std::getenv("AIRLOCK_API_KEY")) options.api_key = env;
  }
  http::ClientOptions ho;
  ho.base_url = options.url;
  ho.api_key = options.api_key;
  ho.timeout = options.timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<http::Client> http, http::Client::Create(ho));
  return std::unique_ptr<Client>(new Client(std::move(options), std::move(http)));
}

// A server that refuses an upload answers before reading the whole body and then closes the
// connection, possibly after this client has looked at it: start the next request afresh.
absl::Status Client::Reconnect() {
  http::ClientOptions ho = http_->options();
  ASSIGN_OR_RETURN(http_, http::Client::Create(ho));
  return absl::OkStatus();
}

absl::StatusOr<json> Client::Call(int method, std::string_view target, const json* body,
                                  std::chrono::milliseconds answer_timeout) {
  std::string text = body != nullptr ? body->dump() : "";
  ASSIGN_OR_RETURN(http::ClientResponse r,
                   http_->Send(static_cast<bhttp::verb>(method), target, std::move(text),
                               body != nullptr ? "application/json" : "", {}, answer_timeout));
  if (r.status >= 300) return ErrorFromResponse(r);
  json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) {
    return absl::InternalError(fmt::format("the server's answer to {} is not JSON", target));
  }
  return j;
}

absl::StatusOr<json> Client::Stream(int method, std::string_view target, const json* body,
                                    const ExecEventHandler& on_event) {
  internal::SseParser parser;
  json final_data;
  bool final_seen = false, stopped = false;
  std::string error_text;
  absl::Status error;
  ASSIGN_OR_RETURN(
      http::ClientResponse r,
      http_->SendStreaming(static_cast<bhttp::verb>(method), target,
                           body != nullptr ? body->dump() : "",
                           body != nullptr ? "application/json" : "", [&](std::string_view data) {
                             if (error_text.size() < (1 << 16))
                               error_text.append(data.substr(0, 1 << 16));
                             for (const internal::SseEvent& e : parser.Feed(data)) {
                               ExecEvent ev = EventFrom(e);
                               if (ev.kind == ExecEvent::Kind::kError) {
                                 // A failure after the stream began: the status line said 200
                                 // already.
                                 error = ErrorFromBody(500, ev.data, e.data);
                                 final_seen = true;
                               }
                               if (ev.kind == ExecEvent::Kind::kResult) {
                                 final_data = ev.data;
                                 final_seen = true;
                               }
                               if (on_event && !on_event(ev)) {
                                 stopped = true;
                                 return false;
                               }
                             }
                             return true;
                           }));
  if (r.status >= 300) {
    return ErrorFromBody(r.status, json::parse(error_text, nullptr, false), error_text);
  }
  if (!error.ok()) return error;
  if (stopped && !final_seen) return absl::CancelledError("the stream was stopped by its reader");
  if (!final_seen) {
    return absl::UnavailableError(fmt::format("the stream of {} ended without a result", target));
  }
  return final_data;
}

absl::StatusOr<Sandbox> Client::CreateSandbox(const CreateSandboxRequest& request) {
  json body = json::object();
  if (!request.spec.is_null()) body["spec"] = request.spec;
  if (!request.template_name.empty()) body["template"] = request.template_name;
  if (request.ttl_seconds) body["ttl_seconds"] = *request.ttl_seconds;
  if (request.idle_timeout_seconds) body["idle_timeout_seconds"] = *request.idle_timeout_seconds;
  if (!request.metadata.empty()) body["metadata"] = request.metadata;
  if (!request.idempotency_key.empty()) body["idempotency_key"] = request.idempotency_key;
  if (request.workspace) {
    body["workspace"] = {
        {"git", {{"repo", request.workspace->repo}, {"commit", request.workspace->commit}}}};
  }
  ASSIGN_OR_RETURN(
      json j, Call(static_cast<int>(bhttp::verb::post), "/v1/sandboxes", &body, kLongWorkAnswer));
  return SandboxFrom(j);
}

absl::StatusOr<Sandbox> Client::GetSandbox(std::string_view id) {
  ASSIGN_OR_RETURN(json j, Call(static_cast<int>(bhttp::verb::get), SandboxPath(id), nullptr));
  return SandboxFrom(j);
}

absl::StatusOr<SandboxList> Client::ListSandboxes(const ListSandboxesRequest& request) {
  std::vector<std::string> q;
  if (!request.states.empty()) {
    std::string states;
    for (const std::string& s : request.states) states += (states.empty() ? "" : ",") + s;
    q.push_back("state=" + UrlEncode(states));
  }
  for (const auto& [k, v] : request.metadata)
    q.push_back("metadata." + UrlEncode(k) + "=" + UrlEncode(v));
  if (request.limit > 0) q.push_back(fmt::format("limit={}", request.limit));
  if (!request.cursor.empty()) q.push_back("cursor=" + UrlEncode(request.cursor));
  std::string target = "/v1/sandboxes";
  for (size_t i = 0; i < q.size(); ++i) target += (i == 0 ? "?" : "&") + q[i];
  ASSIGN_OR_RETURN(json j, Call(static_cast<int>(bhttp::verb::get), target, nullptr));
  SandboxList out;
  if (j.contains("sandboxes") && j["sandboxes"].is_array()) {
    for (const json& s : j["sandboxes"]) out.sandboxes.push_back(SandboxFrom(s));
  }
  out.next_cursor = Get<std::string>(j, "next_cursor", "");
  return out;
}

absl::StatusOr<Sandbox> Client::DestroySandbox(std::string_view id) {
  ASSIGN_OR_RETURN(json j, Call(static_cast<int>(bhttp::verb::delete_), SandboxPath(id), nullptr));
  return SandboxFrom(j);
}

absl::StatusOr<Sandbox> Client::Pause(std::string_view id) {
  ASSIGN_OR_RETURN(json j,
                   Call(static_cast<int>(bhttp::verb::post), SandboxPath(id) + "/pause", nullptr));
  return SandboxFrom(j);
}

absl::StatusOr<Sandbox> Client::Resume(std::string_view id) {
  ASSIGN_OR_RETURN(json j,
                   Call(static_cast<int>(bhttp::verb::post), SandboxPath(id) + "/resume", nullptr));
  return SandboxFrom(j);
}

absl::StatusOr<Sandbox> Client::ExtendTtl(std::string_view id, int64_t ttl_seconds) {
  json body = {{"ttl_seconds", ttl_seconds}};
  ASSIGN_OR_RETURN(json j,
                   Call(static_cast<int>(bhttp::verb::post), SandboxPath(id) + "/ttl", &body));
  return SandboxFrom(j);
}

absl::StatusOr<json> Client::Events(std::string_view id, int64_t after) {
  ASSIGN_OR_RETURN(json j,
                   Call(static_cast<int>(bhttp::verb::get),
                        fmt::format("{}/events?after={}", SandboxPath(id), after), nullptr));
  return j.value("events", json::array());
}

absl::StatusOr<Sandbox> Client::SetNetwork(std::string_view id, const json& network, bool loosen) {
  json body = {{"network", network}, {"loosen", loosen}};
  ASSIGN_OR_RETURN(json j,
                   Call(static_cast<int>(bhttp::verb::put), SandboxPath(id) + "/network", &body));
  return SandboxFrom(j);
}

absl::StatusOr<json> Client::CollectArtifacts(std::string_view id,
                                              const std::vector<std::string>& paths,
                                              const std::vector<std::string>& secrets) {
  json body = json::object();
  if (!paths.empty()) body["paths"] = paths;
  if (!secrets.empty()) body["secrets"] = secrets;
  return Call(static_cast<int>(bhttp::verb::post), SandboxPath(id) + "/artifacts:collect", &body,
              kLongWorkAnswer);
}

absl::StatusOr<json> Client::WorkspaceDiff(std::string_view id) {
  json body = json::object();
  return Call(static_cast<int>(bhttp::verb::post), SandboxPath(id) + "/workspace:diff", &body,
              kLongWorkAnswer);
}

absl::StatusOr<std::vector<Artifact>> Client::ListArtifacts(std::string_view id) {
  ASSIGN_OR_RETURN(
      json j, Call(static_cast<int>(bhttp::verb::get), SandboxPath(id) + "/artifacts", nullptr));
  std::vector<Artifact> out;
  for (const json& a : j.value("artifacts", json::array())) {
    out.push_back({.id = Get<std::string>(a, "id", ""),
                   .path = Get<std::string>(a, "path", ""),
                   .size = Get<int64_t>(a, "size", 0),
                   .sha256 = Get<std::string>(a, "sha256", ""),
                   .status = Get<std::string>(a, "status", ""),
                   .reason = Get<std::string>(a, "reason", ""),
                   .created_at = Get<std::string>(a, "created_at", "")});
  }
  return out;
}

absl::StatusOr<int64_t> Client::DownloadArtifact(
    std::string_view id, std::string_view artifact_id,
    const std::function<absl::Status(std::string_view)>& sink) {
  // The listing first (as Download stats first): an error answer is then an ordinary one,
  // never taken for the artifact's bytes.
  ASSIGN_OR_RETURN(std::vector<Artifact> all, ListArtifacts(id));
  auto it =
      std::find_if(all.begin(), all.end(), [&](const Artifact& a) { return a.id == artifact_id; });
  if (it == all.end()) {
    return absl::NotFoundError(
        fmt::format("artifact {} is not one of this sandbox's", artifact_id));
  }
  if (it->status != "released") {
    return FailedPrecondition(
        fmt::format("artifact {} is {}: its content was never kept", artifact_id, it->status));
  }
  return GetInto(*http_, fmt::format("{}/artifacts/{}", SandboxPath(id), UrlEncode(artifact_id)),
                 sink, fmt::format("download artifact {}", artifact_id), "listing it");
}

namespace {
std::string InterpreterPath(std::string_view session) {
  return "/v1/interpreters/" + UrlEncode(session);
}
}  // namespace

absl::StatusOr<json> Client::CreateInterpreter(const json& request) {
  return Call(static_cast<int>(bhttp::verb::post), "/v1/interpreters", &request);
}

absl::StatusOr<json> Client::Eval(std::string_view session, std::string_view script) {
  json body = {{"script", script}};
  return Call(static_cast<int>(bhttp::verb::post), InterpreterPath(session) + "/eval", &body,
              kLongWorkAnswer);
}

absl::StatusOr<json> Client::ResumeWithResult(std::string_view session, std::string_view call_id,
                                              const json& result) {
  json body = {{"call_id", call_id}, {"result", result}};
  return Call(static_cast<int>(bhttp::verb::post), InterpreterPath(session) + "/resume", &body,
              kLongWorkAnswer);
}

absl::StatusOr<json> Client::ResumeWithError(std::string_view session, std::string_view call_id,
                                             std::string_view error) {
  json body = {{"call_id", call_id}, {"error", error}};
  return Call(static_cast<int>(bhttp::verb::post), InterpreterPath(session) + "/resume", &body,
              kLongWorkAnswer);
}

absl::StatusOr<json> Client::GetInterpreter(std::string_view session) {
  return Call(static_cast<int>(bhttp::verb::get), InterpreterPath(session), nullptr);
}

absl::StatusOr<json> Client::DeleteInterpreter(std::string_view session) {
  return Call(static_cast<int>(bhttp::verb::delete_), InterpreterPath(session), nullptr);
}

absl::StatusOr<CommandResult> Client::Exec(std::string_view id, const ExecRequest& request) {
  json body = ExecBody(request);
  // The answer comes when the command ends: as late as its timeout (else the longest one a spec
  // allows), plus a minute for the server's own work.
  const std::chrono::seconds runs_for(
      request.timeout_seconds.value_or(spec::kMaxCommandTimeoutSeconds));
  ASSIGN_OR_RETURN(json j, Call(static_cast<int>(bhttp::verb::post), SandboxPath(id) + "/exec",
                                &body, runs_for + std::chrono::minutes(1)));
  return ResultFrom(j);
}

absl::StatusOr<CommandResult> Client::ExecStream(std::string_view id, const ExecRequest& request,
                                                 const ExecEventHandler& on_event) {
  json body = ExecBody(request);
  body["stream"] = true;
  ASSIGN_OR_RETURN(json j, Stream(static_cast<int>(bhttp::verb::post), SandboxPath(id) + "/exec",
                                  &body, on_event));
  return ResultFrom(j);
}

absl::StatusOr<Command> Client::StartBackground(std::string_view id, const ExecRequest& request) {
  json body = ExecBody(request);
  body["background"] = true;
  ASSIGN_OR_RETURN(json j,
                   Call(static_cast<int>(bhttp::verb::post), SandboxPath(id) + "/exec", &body));
  return CommandFrom(j);
}

absl::StatusOr<Command> Client::GetCommand(std::string_view id, std::string_view command_id) {
  ASSIGN_OR_RETURN(json j, Call(static_cast<int>(bhttp::verb::get),
                                SandboxPath(id) + "/commands/" + UrlEncode(command_id), nullptr));
  return CommandFrom(j);
}

absl::StatusOr<std::vector<Command>> Client::ListCommands(std::string_view id) {
  ASSIGN_OR_RETURN(
      json j, Call(static_cast<int>(bhttp::verb::get), SandboxPath(id) + "/commands", nullptr));
  std::vector<Command> out;
  if (j.contains("commands") && j["commands"].is_array()) {
    for (const json& c : j["commands"]) out.push_back(CommandFrom(c));
  }
  return out;
}

absl::StatusOr<json> Client::StreamCommand(std::string_view id, std::string_view command_id,
                                           const ExecEventHandler& on_event) {
  return Stream(static_cast<int>(bhttp::verb::get),
                SandboxPath(id) + "/commands/" + UrlEncode(command_id) + "/stream", nullptr,
                on_event);
}

absl::Status Client::KillCommand(std::string_view id, std::string_view command_id,
                                 std::string_view signal) {
  json body = json::object();
  int number = 0;
  if (!signal.empty() && std::all_of(signal.begin(), signal.end(), ::isdigit)) {
    number = std::atoi(std::string(signal).c_str());
    body["signal"] = number;
  } else if (!signal.empty()) {
    body["signal"] = std::string(signal);
  }
  return Call(static_cast<int>(bhttp::verb::post),
              SandboxPath(id) + "/commands/" + UrlEncode(command_id) + "/kill", &body)
      .status();
}

absl::StatusOr<FileEntry> Client::Upload(std::string_view id, std::string_view path,
                                         const std::function<absl::StatusOr<std::string>()>& next,
                                         uint32_t mode) {
  std::string target = FilesTarget(id, "", path) + fmt::format("&mode={:o}", mode);
  ASSIGN_OR_RETURN(http::ClientResponse r,
                   http_->Upload(bhttp::verb::put, target, next, "application/octet-stream"));
  if (r.status >= 300) {
    RETURN_IF_ERROR(Reconnect());
    return ErrorFromResponse(r);
  }
  return FileFrom(json::parse(r.body, nullptr, false));
}

absl::StatusOr<FileEntry> Client::WriteFile(std::string_view id, std::string_view path,
                                            std::string data, uint32_t mode) {
  bool sent = false;
  return Upload(
      id, path,
      [&]() -> absl::StatusOr<std::string> {
        if (sent) return std::string();
        sent = true;
        return std::move(data);
      },
      mode);
}

absl::StatusOr<FileEntry> Client::UploadFrom(std::string_view id, std::string_view path,
                                             const std::string& local_path, uint32_t mode) {
  UniqueFd fd(::open(local_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus(errno, fmt::format("open {}", local_path));
  std::string buf(1 << 20, '\0');
  return Upload(
      id, path,
      [&]() -> absl::StatusOr<std::string> {
        ssize_t n;
        do {
          n = ::read(fd.get(), buf.data(), buf.size());
        } while (n < 0 && errno == EINTR);
        if (n < 0) return ErrnoStatus(errno, fmt::format("read {}", local_path));
        return std::string(buf.data(), static_cast<size_t>(n));
      },
      mode);
}

absl::StatusOr<int64_t> Client::Download(
    std::string_view id, std::string_view path,
    const std::function<absl::Status(std::string_view)>& sink) {
  // A stat first: an error answer is then an ordinary one, never taken for the file's bytes.
  ASSIGN_OR_RETURN(FileEntry info, StatFile(id, path));
  if (info.type != "file") {
    return FailedPrecondition(fmt::format("{} is a {}, not a file", path, info.type));
  }
  RETURN_IF_ERROR(GetInto(*http_, FilesTarget(id, "", path), sink, fmt::format("download {}", path),
                          "the file was found")
                      .status());
  return info.size;
}

absl::StatusOr<std::string> Client::ReadFile(std::string_view id, std::string_view path,
                                             size_t max_bytes) {
  std::string out;
  RETURN_IF_ERROR(Download(id, path, [&](std::string_view d) -> absl::Status {
                    if (out.size() + d.size() > max_bytes) {
                      return absl::ResourceExhaustedError(
                          fmt::format("the file is larger than {} bytes", max_bytes));
                    }
                    out.append(d);
                    return absl::OkStatus();
                  }).status());
  return out;
}

absl::StatusOr<std::vector<FileEntry>> Client::ListFiles(std::string_view id,
                                                         std::string_view path) {
  ASSIGN_OR_RETURN(
      json j, Call(static_cast<int>(bhttp::verb::get), FilesTarget(id, ":list", path), nullptr));
  std::vector<FileEntry> out;
  if (j.contains("entries") && j["entries"].is_array()) {
    for (const json& e : j["entries"]) out.push_back(FileFrom(e));
  }
  return out;
}

absl::StatusOr<FileEntry> Client::StatFile(std::string_view id, std::string_view path) {
  ASSIGN_OR_RETURN(
      json j, Call(static_cast<int>(bhttp::verb::get), FilesTarget(id, ":stat", path), nullptr));
  FileEntry f = FileFrom(j);
  if (f.name.empty()) f.name = std::string(path);
  return f;
}

absl::Status Client::MakeDirectory(std::string_view id, std::string_view path, bool parents) {
  return Call(static_cast<int>(bhttp::verb::post),
              FilesTarget(id, ":mkdir", path) + (parents ? "&parents=true" : ""), nullptr)
      .status();
}

absl::Status Client::RemoveFile(std::string_view id, std::string_view path, bool recursive) {
  return Call(static_cast<int>(bhttp::verb::delete_),
              FilesTarget(id, "", path) + (recursive ? "&recursive=true" : ""), nullptr)
      .status();
}

absl::StatusOr<std::vector<Image>> Client::ImportImage(
    const std::string& local_path, const std::vector<std::string>& tags,
    const std::function<void(const ImportProgress&)>& progress) {
  UniqueFd fd(::open(local_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus(errno, fmt::format("open {}", local_path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", local_path));
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(fmt::format("{}: not a file (pass an image tarball)", local_path));
  }
  std::string target = "/v1/images";
  for (size_t i = 0; i < tags.size(); ++i)
    target += (i == 0 ? "?tag=" : "&tag=") + UrlEncode(tags[i]);
  ImportProgress p;
  p.bytes_total = st.st_size;
  std::string buf(1 << 20, '\0');
  auto next = [&]() -> absl::StatusOr<std::string> {
    ssize_t n;
    do {
      n = ::read(fd.get(), buf.data(), buf.size());
    } while (n < 0 && errno == EINTR);
    if (n < 0) return ErrnoStatus(errno, fmt::format("read {}", local_path));
    p.bytes_sent += n;
    if (progress) progress(p);
    return std::string(buf.data(), static_cast<size_t>(n));
  };
  // The answer is a stream of progress events ending with the result (or an error), read as
  // it comes so the server's stages are reported live. An error answer is JSON, kept whole.
  internal::SseParser parser;
  std::string raw;
  std::optional<absl::StatusOr<std::vector<Image>>> outcome;
  auto on_data = [&](std::string_view data) {
    if (raw.size() < (1 << 16)) raw.append(data);
    for (const internal::SseEvent& e : parser.Feed(data)) {
      json j = json::parse(e.data, nullptr, false);
      if (e.event == "progress" && j.is_object()) {
        std::string stage = j.value("stage", "");
        p.stage = stage == "reading_archive" ? ImportProgress::Stage::kReadingArchive
                  : stage == "verifying"     ? ImportProgress::Stage::kVerifying
                  : stage == "unpacking"     ? ImportProgress::Stage::kUnpacking
                                             : ImportProgress::Stage::kDone;
        p.layer = j.value("layer", 0);
        p.layers = j.value("layers", 0);
        p.bytes_read = j.value("bytes_read", int64_t{0});
        p.bytes_written = j.value("bytes_written", int64_t{0});
        if (progress) progress(p);
      } else if (e.event == "result") {
        outcome = ImagesFrom(j);
      } else if (e.event == "error") {
        outcome = ErrorFromBody(500, j, e.data);
      }
    }
    return true;
  };
  ASSIGN_OR_RETURN(
      http::ClientResponse r,
      http_->UploadStreaming(bhttp::verb::post, target, next, "application/octet-stream", on_data,
                             {{"Accept", "text/event-stream"}}),
      fmt::format("import {}", local_path));
  if (r.status >= 300) {
    RETURN_IF_ERROR(Reconnect());
    return ErrorFromBody(r.status, json::parse(raw, nullptr, false), raw);
  }
  if (outcome) return *std::move(outcome);
  return absl::UnavailableError(
      fmt::format("import {}: the server's answer ended without a result", local_path));
}

absl::StatusOr<std::vector<Image>> Client::ListImages() {
  ASSIGN_OR_RETURN(json j, Call(static_cast<int>(bhttp::verb::get), "/v1/images", nullptr));
  return ImagesFrom(j);
}

namespace {
// A reference in the path: its slashes stay segment separators (the routes join them).
std::string ReferencePath(std::string_view reference) {
  std::string out = "/v1/images";
  size_t i = 0;
  while (i <= reference.size()) {
    size_t j = reference.find('/', i);
    if (j == std::string_view::npos) j = reference.size();
    out += "/" + UrlEncode(reference.substr(i, j - i));
    i = j + 1;
  }
  return out;
}
}  // namespace

absl::StatusOr<Image> Client::GetImage(std::string_view reference) {
  ASSIGN_OR_RETURN(json j,
                   Call(static_cast<int>(bhttp::verb::get), ReferencePath(reference), nullptr));
  return ImageFrom(j);
}

absl::Status Client::RemoveImage(std::string_view reference) {
  return Call(static_cast<int>(bhttp::verb::delete_), ReferencePath(reference), nullptr).status();
}

absl::Status Client::Ready() {
  ASSIGN_OR_RETURN(http::ClientResponse r, http_->Send(bhttp::verb::get, "/readyz"));
  if (r.status == 200) return absl::OkStatus();
  json j = json::parse(r.body, nullptr, false);
  return absl::UnavailableError(
      fmt::format("the node is not ready: {}", j.is_object() ? j.value("reason", "") : r.body));
}

}  // namespace airlock::client
