// `airlock sandbox ...` and `airlock image ...`: a running airlockd's sandboxes and images, through
// the C++ client (src/client). Tables for people, --json for scripts.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>

#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "client/client.h"
#include "common/files.h"
#include "common/status.h"
#include "common/units.h"
#include "fmt/format.h"

namespace airlock::cli {
namespace {

using client::Client;
using nlohmann::json;

struct Connection {
  std::string server;
  std::string api_key;
  bool json = false;
};

void Fail(const std::string& message) { std::fprintf(stderr, "airlock: %s\n", message.c_str()); }

// One clear line for a failed call: what was asked, and what to do about the usual causes.
int Report(const absl::Status& s, std::string_view what, const Client* c) {
  client::ApiError e = client::ErrorOf(s);
  std::string url = c != nullptr ? c->options().url : "";
  std::string line = fmt::format("{}: {}", what, std::string(s.message()));
  if (e.http_status == 0 && s.code() == absl::StatusCode::kUnavailable) {
    line += fmt::format(" (is airlockd running? set AIRLOCK_URL or --server; tried {})", url);
  } else if (e.http_status == 401) {
    line += " (set AIRLOCK_API_KEY or --api-key to a key from `airlockd admin create-key`)";
  } else if (!e.request_id.empty() && e.http_status >= 500) {
    line += fmt::format(" (request {})", e.request_id);
  }
  Fail(line);
  return kExitRemoteError;
}

std::unique_ptr<Client> Connect(const Connection& conn, int* exit_code) {
  absl::StatusOr<std::unique_ptr<Client>> c =
      Client::Create({.url = conn.server, .api_key = conn.api_key});
  if (!c.ok()) {
    Fail(std::string(Message(c.status())));
    *exit_code = kExitUsage;
    return nullptr;
  }
  if ((*c)->options().api_key.empty()) {
    Fail("no API key: set AIRLOCK_API_KEY or pass --api-key (airlockd admin create-key makes one)");
    *exit_code = kExitUsage;
    return nullptr;
  }
  return std::move(*c);
}

void PrintJson(const json& j) { std::printf("%s\n", j.dump(2).c_str()); }

// The server's JSON of each item, as one array.
template <typename T>
void PrintRawList(const std::vector<T>& items) {
  json out = json::array();
  for (const T& i : items) out.push_back(i.raw);
  PrintJson(out);
}

// Left-aligned columns, two spaces apart.
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t i = 0; i < r.size(); ++i) {
      out += r[i];
      if (i + 1 < r.size()) out += std::string(width[i] - r[i].size() + 2, ' ');
    }
    std::printf("%s\n", out.c_str());
  };
  line(header);
  for (const auto& r : rows) line(r);
}

std::string ShortDigest(const std::string& d) { return d.size() > 19 ? d.substr(0, 19) : d; }

absl::StatusOr<std::map<std::string, std::string>> Pairs(const std::vector<std::string>& items,
                                                         std::string_view flag) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : items) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument(fmt::format("{} {}: expected KEY=VALUE", flag, kv));
    }
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

void AddConnectionFlags(CLI::App* cmd, Connection* conn) {
  cmd->add_option("--server", conn->server, "airlockd URL (default $AIRLOCK_URL)");
  cmd->add_option("--api-key", conn->api_key, "API key (default $AIRLOCK_API_KEY)");
  cmd->add_flag("--json", conn->json, "Print JSON for scripts");
}

void PrintSandboxes(const std::vector<client::Sandbox>& list) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : list) {
    std::vector<std::string> meta;
    for (const auto& [k, v] : s.metadata) meta.push_back(k + "=" + v);
    rows.push_back({s.id, s.state, s.template_name.empty() ? "-" : s.template_name,
                    s.image_digest.empty() ? "-" : ShortDigest(s.image_digest), s.created_at,
                    s.expires_at, meta.empty() ? "-" : absl::StrJoin(meta, ",")});
  }
  PrintTable({"ID", "STATE", "TEMPLATE", "IMAGE", "CREATED", "EXPIRES", "METADATA"}, rows);
}

void PrintSandbox(const client::Sandbox& s, bool as_json) {
  if (as_json) return PrintJson(s.raw);
  PrintSandboxes({s});
}

// Streams a command's events to stdout/stderr; returns the final event's JSON.
client::ExecEventHandler Printer() {
  return [](const client::ExecEvent& e) {
    if (e.kind == client::ExecEvent::Kind::kStdout) {
      std::fwrite(e.text.data(), 1, e.text.size(), stdout);
      std::fflush(stdout);
    } else if (e.kind == client::ExecEvent::Kind::kStderr) {
      std::fwrite(e.text.data(), 1, e.text.size(), stderr);
      std::fflush(stderr);
    }
    return true;
  };
}

// "sb-x:/path" -> ("sb-x", "/path"); a local path -> nullopt.
std::optional<std::pair<std::string, std::string>> Remote(const std::string& arg) {
  size_t colon = arg.find(':');
  if (arg.rfind("sb-", 0) != 0 || colon == std::string::npos) return std::nullopt;
  return std::pair{arg.substr(0, colon), arg.substr(colon + 1)};
}

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Writes what `fetch` hands its sink to `dest` through `dest`.airlock-part and a rename, so a
// failed transfer never leaves a partial file under the real name. Returns the bytes written.
absl::StatusOr<int64_t> DownloadTo(
    const std::string& dest, const std::function<absl::StatusOr<int64_t>(
                                 const std::function<absl::Status(std::string_view)>&)>& fetch) {
  std::string tmp = dest + ".airlock-part";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return absl::FailedPreconditionError(fmt::format("cannot write {}", tmp));
  absl::StatusOr<int64_t> n = fetch([&](std::string_view d) -> absl::Status {
    out.write(d.data(), static_cast<std::streamsize>(d.size()));
    return out ? absl::OkStatus() : absl::DataLossError("write " + tmp);
  });
  out.close();
  if (n.ok() && !out) n = absl::DataLossError("write " + tmp);
  if (n.ok() && ::rename(tmp.c_str(), dest.c_str()) != 0) {
    n = absl::InternalError(fmt::format("rename to {}: {}", dest, std::strerror(errno)));
  }
  if (!n.ok()) ::unlink(tmp.c_str());
  return n;
}

void AddArtifactCommands(CLI::App* sb, const std::shared_ptr<Connection>& conn, int* exit_code);

// The release gate's answer, one line per file, then its summary.
void PrintCollection(const json& c) {
  std::vector<std::vector<std::string>> rows;
  for (const json& f : c.value("files", json::array())) {
    std::string why = f.value("rule", "");
    if (std::string d = f.value("detail", ""); !d.empty()) why += why.empty() ? d : ": " + d;
    rows.push_back({f.value("path", ""), f.value("outcome", ""), why.empty() ? "-" : why,
                    f.value("artifact_id", "-")});
  }
  PrintTable({"PATH", "OUTCOME", "WHY", "ARTIFACT"}, rows);
  std::printf("%s\n", c.value("summary", "").c_str());
}

}  // namespace

void AddSandboxCommands(CLI::App& app, int* exit_code) {
  auto conn = std::make_shared<Connection>();
  CLI::App* sb = app.add_subcommand("sandbox", "Sandboxes of a running airlockd");
  sb->require_subcommand(1);
  sb->fallthrough();
  AddConnectionFlags(sb, conn.get());

  // create
  struct CreateFlags {
    std::string template_name, spec_file, image, idempotency_key;
    int64_t ttl = 0, idle = 0;
    std::vector<std::string> metadata;
  };
  auto cf = std::make_shared<CreateFlags>();
  CLI::App* create = sb->add_subcommand("create", "Create a sandbox and print it");
  create->add_option("--template", cf->template_name,
                     "Template: R0..R5, default, or an operator's");
  create->add_option("--spec", cf->spec_file,
                     "A SandboxSpec file (JSON or YAML as JSON; - for stdin)");
  create->add_option("--image", cf->image, "Image reference (tag or sha256 digest)");
  create->add_option("--ttl", cf->ttl, "Lifetime in seconds");
  create->add_option("--idle-timeout", cf->idle, "Idle timeout in seconds");
  create->add_option("--metadata", cf->metadata, "KEY=VALUE (repeatable)");
  create->add_option("--idempotency-key", cf->idempotency_key, "Same key, same sandbox");
  create->callback([conn, cf, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    client::CreateSandboxRequest req;
    if (!cf->spec_file.empty()) {
      std::string text;
      if (cf->spec_file == "-") {
        text.assign(std::istreambuf_iterator<char>(std::cin), {});
      } else {
        absl::StatusOr<std::string> t = ReadFile(cf->spec_file, 1 << 20);
        if (!t.ok()) {
          Fail(fmt::format("--spec {}: {}", cf->spec_file, std::string(t.status().message())));
          *exit_code = kExitUsage;
          return;
        }
        text = *t;
      }
      req.spec = json::parse(text, nullptr, false);
      if (!req.spec.is_object()) {
        Fail(fmt::format("--spec {}: not a JSON object", cf->spec_file));
        *exit_code = kExitUsage;
        return;
      }
    }
    if (!cf->image.empty()) {
      if (req.spec.is_null()) req.spec = json::object();
      req.spec["image"] = cf->image;
    }
    if (req.spec.is_null() && cf->template_name.empty()) req.spec = json::object();
    req.template_name = cf->template_name;
    if (cf->ttl > 0) req.ttl_seconds = cf->ttl;
    if (cf->idle > 0) req.idle_timeout_seconds = cf->idle;
    absl::StatusOr<std::map<std::string, std::string>> meta = Pairs(cf->metadata, "--metadata");
    if (!meta.ok()) {
      Fail(std::string(Message(meta.status())));
      *exit_code = kExitUsage;
      return;
    }
    req.metadata = *meta;
    req.idempotency_key = cf->idempotency_key;
    absl::StatusOr<client::Sandbox> s = c->CreateSandbox(req);
    if (!s.ok()) {
      *exit_code = Report(s.status(), "create sandbox", c.get());
      return;
    }
    PrintSandbox(*s, conn->json);
  });

  // list
  auto list_states = std::make_shared<std::vector<std::string>>();
  auto list_meta = std::make_shared<std::vector<std::string>>();
  auto list_all = std::make_shared<bool>(false);
  CLI::App* list = sb->add_subcommand("list", "List sandboxes (live ones unless --all or --state)");
  list->add_option("--state", *list_states, "Only these states (repeatable)");
  list->add_option("--metadata", *list_meta, "KEY=VALUE that must match (repeatable)");
  list->add_flag("--all", *list_all, "Include ended sandboxes (Gone, Failed)");
  list->callback([conn, list_states, list_meta, list_all, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    client::ListSandboxesRequest req;
    req.states = *list_states;
    if (req.states.empty() && !*list_all) {
      req.states = {"Allocating", "PreparingImage", "MountingWorkspace",   "Starting",
                    "Running",    "Paused",         "CollectingArtifacts", "Cleaning"};
    }
    absl::StatusOr<std::map<std::string, std::string>> meta = Pairs(*list_meta, "--metadata");
    if (!meta.ok()) {
      Fail(std::string(Message(meta.status())));
      *exit_code = kExitUsage;
      return;
    }
    req.metadata = *meta;
    std::vector<client::Sandbox> all;
    for (;;) {
      absl::StatusOr<client::SandboxList> page = c->ListSandboxes(req);
      if (!page.ok()) {
        *exit_code = Report(page.status(), "list sandboxes", c.get());
        return;
      }
      for (auto& s : page->sandboxes) all.push_back(std::move(s));
      if (page->next_cursor.empty()) break;
      req.cursor = page->next_cursor;
    }
    if (conn->json) return PrintRawList(all);
    PrintSandboxes(all);
  });

  // get, pause, resume, rm: one sandbox id each (rm takes several).
  auto one_id = std::make_shared<std::string>();
  CLI::App* get = sb->add_subcommand("get", "Show a sandbox");
  get->add_option("id", *one_id, "Sandbox id")->required();
  get->callback([conn, one_id, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    absl::StatusOr<client::Sandbox> s = c->GetSandbox(*one_id);
    if (!s.ok()) {
      *exit_code = Report(s.status(), "get " + *one_id, c.get());
      return;
    }
    if (conn->json) return PrintJson(s->raw);
    for (const char* k :
         {"id", "state", "template", "image_digest", "created_at", "expires_at", "last_activity_at",
          "ttl_seconds", "idle_timeout_seconds", "node", "last_error"}) {
      if (!s->raw.contains(k)) continue;
      const json& v = s->raw[k];
      std::printf("%-21s %s\n", (std::string(k) + ":").c_str(),
                  v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
    }
    for (const auto& [k, v] : s->metadata) std::printf("metadata.%s: %s\n", k.c_str(), v.c_str());
  });
  struct StateChange {
    const char* verb;
    const char* help;
    absl::StatusOr<client::Sandbox> (Client::*call)(std::string_view);
  };
  for (const StateChange& change :
       {StateChange{"pause", "Freeze a sandbox (no CPU while paused)", &Client::Pause},
        StateChange{"resume", "Thaw a paused sandbox", &Client::Resume}}) {
    CLI::App* cmd = sb->add_subcommand(change.verb, change.help);
    auto id = std::make_shared<std::string>();
    cmd->add_option("id", *id, "Sandbox id")->required();
    cmd->callback([conn, id, change, exit_code] {
      auto c = Connect(*conn, exit_code);
      if (!c) return;
      absl::StatusOr<client::Sandbox> s = ((*c).*change.call)(*id);
      if (!s.ok()) {
        *exit_code = Report(s.status(), fmt::format("{} {}", change.verb, *id), c.get());
        return;
      }
      PrintSandbox(*s, conn->json);
    });
  }
  auto rm_ids = std::make_shared<std::vector<std::string>>();
  CLI::App* rm = sb->add_subcommand("rm", "Destroy sandboxes (their records stay)");
  rm->add_option("ids", *rm_ids, "Sandbox ids")->required();
  rm->callback([conn, rm_ids, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    json out = json::array();
    for (const std::string& id : *rm_ids) {
      absl::StatusOr<client::Sandbox> s = c->DestroySandbox(id);
      if (!s.ok()) {
        *exit_code = Report(s.status(), "rm " + id, c.get());
        continue;
      }
      if (conn->json) {
        out.push_back(s->raw);
      } else {
        std::printf("%s %s\n", s->id.c_str(), s->state.c_str());
      }
    }
    if (conn->json) PrintJson(out);
  });

  // exec
  struct ExecFlags {
    std::string id, workdir;
    int64_t timeout = 0;
    std::vector<std::string> env, argv;
    bool background = false;
  };
  auto ef = std::make_shared<ExecFlags>();
  CLI::App* exec = sb->add_subcommand(
      "exec", "Run a command in a sandbox; its output streams here and its exit code is ours");
  exec->add_option("id", ef->id, "Sandbox id")->required();
  exec->add_option("--timeout", ef->timeout, "Seconds before the command is killed");
  exec->add_option("--env", ef->env, "NAME=VALUE (repeatable)");
  exec->add_option("--workdir", ef->workdir, "Working directory in the sandbox");
  exec->add_flag("--background", ef->background, "Start it and print its command id");
  exec->add_option("argv", ef->argv, "The command (after --)")->required();
  exec->callback([conn, ef, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    client::ExecRequest req;
    req.argv = ef->argv;
    if (ef->timeout > 0) req.timeout_seconds = ef->timeout;
    req.workdir = ef->workdir;
    absl::StatusOr<std::map<std::string, std::string>> env = Pairs(ef->env, "--env");
    if (!env.ok()) {
      Fail(std::string(Message(env.status())));
      *exit_code = kExitUsage;
      return;
    }
    req.env = *env;
    if (ef->background) {
      absl::StatusOr<client::Command> cmd = c->StartBackground(ef->id, req);
      if (!cmd.ok()) {
        *exit_code = Report(cmd.status(), "exec in " + ef->id, c.get());
        return;
      }
      if (conn->json) return PrintJson(cmd->raw);
      std::printf("%s\n", cmd->command_id.c_str());
      return;
    }
    absl::StatusOr<CommandResult> r =
        conn->json ? c->Exec(ef->id, req) : c->ExecStream(ef->id, req, Printer());
    if (!r.ok()) {
      *exit_code = Report(r.status(), "exec in " + ef->id, c.get());
      return;
    }
    if (conn->json) PrintJson(ToJson(*r));
    if (r->classification != Classification::kOk &&
        r->classification != Classification::kExitNonzero) {
      std::fprintf(stderr, "airlock: %s%s\n", std::string(ToString(r->classification)).c_str(),
                   r->failure_detail.empty() ? "" : (": " + r->failure_detail).c_str());
    }
    *exit_code = r->exit_code >= 0 ? r->exit_code : 128 + r->signal;
  });

  // logs
  auto logs_id = std::make_shared<std::string>();
  auto logs_cmd = std::make_shared<std::string>();
  CLI::App* logs = sb->add_subcommand(
      "logs",
      "Show a command's output (the last command's when none is named), following it "
      "while it runs");
  logs->add_option("id", *logs_id, "Sandbox id")->required();
  logs->add_option("command", *logs_cmd, "Command id (cmd-...)");
  logs->callback([conn, logs_id, logs_cmd, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    std::string cid = *logs_cmd;
    if (cid.empty()) {
      absl::StatusOr<std::vector<client::Command>> cmds = c->ListCommands(*logs_id);
      if (!cmds.ok()) {
        *exit_code = Report(cmds.status(), "logs of " + *logs_id, c.get());
        return;
      }
      if (cmds->empty()) {
        Fail(fmt::format("sandbox {} has run no command yet", *logs_id));
        *exit_code = kExitRemoteError;
        return;
      }
      cid = cmds->back().command_id;
    }
    bool output = false;
    client::ExecEventHandler print = Printer();
    absl::StatusOr<json> r = c->StreamCommand(*logs_id, cid, [&](const client::ExecEvent& e) {
      output |=
          e.kind == client::ExecEvent::Kind::kStdout || e.kind == client::ExecEvent::Kind::kStderr;
      return print(e);
    });
    if (!r.ok()) {
      *exit_code = Report(r.status(), fmt::format("logs of {} in {}", cid, *logs_id), c.get());
      return;
    }
    // A command that ended before the sandbox's buffer was read has only its result's previews.
    if (!output && r->is_object()) {
      std::string out = r->value("stdout_preview", ""), err = r->value("stderr_preview", "");
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fwrite(err.data(), 1, err.size(), stderr);
    }
    if (conn->json) PrintJson(*r);
  });

  // ls
  auto ls_id = std::make_shared<std::string>();
  auto ls_path = std::make_shared<std::string>("/sandbox/workspace");
  CLI::App* ls = sb->add_subcommand("ls", "List a directory in a sandbox");
  ls->add_option("id", *ls_id, "Sandbox id")->required();
  ls->add_option("path", *ls_path, "Directory (default /sandbox/workspace)");
  ls->callback([conn, ls_id, ls_path, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    absl::StatusOr<std::vector<client::FileEntry>> entries = c->ListFiles(*ls_id, *ls_path);
    if (!entries.ok()) {
      *exit_code = Report(entries.status(), fmt::format("ls {}:{}", *ls_id, *ls_path), c.get());
      return;
    }
    if (conn->json) return PrintRawList(*entries);
    std::vector<std::vector<std::string>> rows;
    for (const auto& e : *entries) {
      rows.push_back({e.type, std::to_string(e.size), fmt::format("{:04o}", e.mode),
                      e.target.empty() ? e.name : e.name + " -> " + e.target});
    }
    PrintTable({"TYPE", "SIZE", "MODE", "NAME"}, rows);
  });

  // cp
  auto cp_src = std::make_shared<std::string>();
  auto cp_dst = std::make_shared<std::string>();
  CLI::App* cp = sb->add_subcommand(
      "cp", "Copy a file into or out of a sandbox: cp LOCAL sb-x:PATH, or cp sb-x:PATH LOCAL");
  cp->add_option("source", *cp_src, "LOCAL or SANDBOX:PATH")->required();
  cp->add_option("destination", *cp_dst, "SANDBOX:PATH or LOCAL")->required();
  cp->callback([conn, cp_src, cp_dst, exit_code] {
    auto from = Remote(*cp_src);
    auto to = Remote(*cp_dst);
    if (from.has_value() == to.has_value()) {
      Fail("cp: exactly one of source and destination is SANDBOX:PATH (sb-...:/sandbox/...)");
      *exit_code = kExitUsage;
      return;
    }
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    if (to) {
      std::string dest = to->second;
      if (dest.empty() || dest.back() == '/') dest += BaseName(*cp_src);
      absl::StatusOr<client::FileEntry> f = c->UploadFrom(to->first, dest, *cp_src);
      if (!f.ok()) {
        *exit_code = Report(f.status(), fmt::format("cp {} {}", *cp_src, *cp_dst), c.get());
        return;
      }
      if (conn->json) PrintJson(f->raw);
      return;
    }
    std::string dest = *cp_dst;
    if (std::error_code ec; std::filesystem::is_directory(dest, ec))
      dest += "/" + BaseName(from->second);
    absl::StatusOr<int64_t> n = DownloadTo(
        dest, [&](const auto& sink) { return c->Download(from->first, from->second, sink); });
    if (!n.ok()) {
      *exit_code = Report(n.status(), fmt::format("cp {} {}", *cp_src, *cp_dst), c.get());
      return;
    }
    if (conn->json) PrintJson({{"path", dest}, {"size", *n}});
  });

  AddArtifactCommands(sb, conn, exit_code);
}

namespace {

// collect, diff, artifacts, artifact, network.
void AddArtifactCommands(CLI::App* sb, const std::shared_ptr<Connection>& conn, int* exit_code) {
  auto id = std::make_shared<std::string>();
  auto paths = std::make_shared<std::vector<std::string>>();
  auto secrets = std::make_shared<std::vector<std::string>>();
  CLI::App* collect = sb->add_subcommand(
      "collect", "Collect artifacts through the release gate (exit 3 when a secret blocks them)");
  collect->add_option("id", *id, "Sandbox id")->required();
  collect->add_option("paths", *paths, "Files or directories (default the spec's artifacts.paths)");
  collect->add_option("--secret", *secrets, "A value that must not leave (repeatable)");
  auto print = [conn, exit_code](const absl::StatusOr<json>& c, const std::string& what,
                                 const Client* client) {
    if (!c.ok()) {
      *exit_code = Report(c.status(), what, client);
      return;
    }
    if (conn->json) {
      PrintJson(*c);
    } else {
      PrintCollection(*c);
    }
    if (c->value("policy_blocked", false)) *exit_code = kExitPolicyBlocked;
  };
  collect->callback([conn, id, paths, secrets, exit_code, print] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    print(c->CollectArtifacts(*id, *paths, *secrets), "collect " + *id, c.get());
  });

  auto diff_id = std::make_shared<std::string>();
  CLI::App* diff = sb->add_subcommand(
      "diff", "The git workspace's diff against its pinned commit, collected as an artifact");
  diff->add_option("id", *diff_id, "Sandbox id")->required();
  diff->callback([conn, diff_id, exit_code, print] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    print(c->WorkspaceDiff(*diff_id), "diff " + *diff_id, c.get());
  });

  auto list_id = std::make_shared<std::string>();
  CLI::App* list = sb->add_subcommand("artifacts", "List a sandbox's recorded artifacts");
  list->add_option("id", *list_id, "Sandbox id")->required();
  list->callback([conn, list_id, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    absl::StatusOr<std::vector<client::Artifact>> all = c->ListArtifacts(*list_id);
    if (!all.ok()) {
      *exit_code = Report(all.status(), "artifacts " + *list_id, c.get());
      return;
    }
    std::vector<std::vector<std::string>> rows;
    json out = json::array();
    for (const client::Artifact& a : *all) {
      rows.push_back({a.id, a.status, std::to_string(a.size), a.path});
      out.push_back({{"id", a.id},
                     {"path", a.path},
                     {"size", a.size},
                     {"sha256", a.sha256},
                     {"status", a.status},
                     {"reason", a.reason},
                     {"created_at", a.created_at}});
    }
    if (conn->json) return PrintJson(out);
    PrintTable({"ID", "STATUS", "SIZE", "PATH"}, rows);
  });

  auto get_id = std::make_shared<std::string>();
  auto artifact = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  CLI::App* get = sb->add_subcommand("artifact", "Download a released artifact");
  get->add_option("id", *get_id, "Sandbox id")->required();
  get->add_option("artifact", *artifact, "Artifact id (art-...)")->required();
  get->add_option("-o,--output", *output, "Local file (default: standard output)");
  get->callback([conn, get_id, artifact, output, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    auto fetch = [&](const std::function<absl::Status(std::string_view)>& sink) {
      return c->DownloadArtifact(*get_id, *artifact, sink);
    };
    absl::StatusOr<int64_t> n = output->empty() ? fetch([](std::string_view d) {
      return std::fwrite(d.data(), 1, d.size(), stdout) == d.size()
                 ? absl::OkStatus()
                 : absl::DataLossError("write to standard output");
    })
                                                : DownloadTo(*output, fetch);
    if (!n.ok()) *exit_code = Report(n.status(), "artifact " + *artifact, c.get());
  });

  auto net_id = std::make_shared<std::string>();
  auto network = std::make_shared<std::string>();
  auto loosen = std::make_shared<bool>(false);
  CLI::App* net = sb->add_subcommand(
      "network", "Replace a running sandbox's network policy (the spec's network section, JSON)");
  net->add_option("id", *net_id, "Sandbox id")->required();
  net->add_option("network", *network, R"(e.g. '{"profile": "none"}')")->required();
  net->add_flag("--loosen", *loosen, "Allow a looser policy than the current one");
  net->callback([conn, net_id, network, loosen, exit_code] {
    json section = json::parse(*network, nullptr, false);
    if (!section.is_object()) {
      Fail("network: expected a JSON object, e.g. '{\"profile\": \"none\"}'");
      *exit_code = kExitUsage;
      return;
    }
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    absl::StatusOr<client::Sandbox> s = c->SetNetwork(*net_id, section, *loosen);
    if (!s.ok()) {
      *exit_code = Report(s.status(), "network " + *net_id, c.get());
      return;
    }
    if (conn->json) return PrintJson(s->raw);
    std::printf("%s\n", s->spec.value("network", json::object()).dump().c_str());
  });
}

}  // namespace

void AddImageCommands(CLI::App& app, int* exit_code) {
  auto conn = std::make_shared<Connection>();
  CLI::App* img = app.add_subcommand("image", "Images of a running airlockd");
  img->require_subcommand(1);
  img->fallthrough();
  AddConnectionFlags(img, conn.get());

  auto file = std::make_shared<std::string>();
  auto tags = std::make_shared<std::vector<std::string>>();
  CLI::App* import_cmd = img->add_subcommand(
      "import", "Import an OCI layout tarball or a docker save tarball, showing progress");
  import_cmd->add_option("file", *file, "The archive")->required();
  import_cmd->add_option("--tag", *tags, "Tag to give it, NAME[:TAG] (repeatable)");
  import_cmd->callback([conn, file, tags, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    bool tty = ::isatty(STDERR_FILENO) != 0;
    client::ImportProgress::Stage last = client::ImportProgress::Stage::kUploading;
    int last_percent = -1;
    absl::StatusOr<std::vector<client::Image>> got =
        c->ImportImage(*file, *tags, [&](const client::ImportProgress& p) {
          if (p.stage == client::ImportProgress::Stage::kUploading) {
            int percent =
                p.bytes_total > 0 ? static_cast<int>(100 * p.bytes_sent / p.bytes_total) : 100;
            if (percent == last_percent) return;
            last_percent = percent;
            std::fprintf(stderr, "%suploading %s / %s (%d%%)%s", tty ? "\r" : "",
                         FormatBytes((p.bytes_sent)).c_str(), FormatBytes((p.bytes_total)).c_str(),
                         percent, tty ? "" : "\n");
            if (percent == 100)
              std::fprintf(stderr, "%simporting on the server...\n", tty ? "\n" : "");
            return;
          }
          if (p.stage != last) {
            last = p.stage;
            std::fprintf(stderr, "%s\n", std::string(client::StageName(p.stage)).c_str());
          }
        });
    if (!got.ok()) {
      *exit_code = Report(got.status(), "image import " + *file, c.get());
      return;
    }
    if (conn->json) return PrintRawList(*got);
    for (const auto& i : *got) {
      std::printf("%s %s\n", i.digest.c_str(), absl::StrJoin(i.tags, ",").c_str());
    }
  });

  CLI::App* list = img->add_subcommand("list", "List images");
  list->callback([conn, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    absl::StatusOr<std::vector<client::Image>> got = c->ListImages();
    if (!got.ok()) {
      *exit_code = Report(got.status(), "image list", c.get());
      return;
    }
    if (conn->json) return PrintRawList(*got);
    std::vector<std::vector<std::string>> rows;
    for (const auto& i : *got) {
      rows.push_back({ShortDigest(i.digest), i.tags.empty() ? "-" : absl::StrJoin(i.tags, ","),
                      i.node_image ? "node" : "key", FormatBytes((i.unpacked_bytes)),
                      std::to_string(i.layers), i.imported_at});
    }
    PrintTable({"DIGEST", "TAGS", "OWNER", "SIZE", "LAYERS", "IMPORTED"}, rows);
  });

  auto refs = std::make_shared<std::vector<std::string>>();
  CLI::App* rm = img->add_subcommand("rm", "Remove images (refused while a sandbox uses one)");
  rm->add_option("refs", *refs, "Image references (tag or digest)")->required();
  rm->callback([conn, refs, exit_code] {
    auto c = Connect(*conn, exit_code);
    if (!c) return;
    for (const std::string& r : *refs) {
      absl::Status s = c->RemoveImage(r);
      if (!s.ok()) {
        *exit_code = Report(s, "image rm " + r, c.get());
        continue;
      }
      if (!conn->json) std::printf("removed %s\n", r.c_str());
    }
  });
}  // namespace airlock::cli

}  // namespace airlock::cli
