// Artifact collection and the workspace diff (docs/daemon.md, "Artifacts"): the shim runs the
// release gate over the sandbox's files and stages what it read; the daemon keeps the released
// files in the blob store and records every verdict in the store.
#include <fcntl.h>
#include <unistd.h>

#include <cctype>

#include "common/files.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "daemon/sandbox_manager.h"
#include "fmt/format.h"

namespace airlock::daemon {

using nlohmann::json;
using std::chrono::milliseconds;
using store::SandboxState;

namespace {

constexpr const char* kDiffPath = "/sandbox/artifacts/workspace.diff";

bool IsHexCommit(const std::string& s) {
  if (s.size() < 40 || s.size() > 64) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<json> SandboxManager::CollectArtifacts(const Caller& caller, const SandboxId& id,
                                                      const CollectRequest& request) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  RETURN_IF_ERROR(Transition(id, {SandboxState::kRunning}, SandboxState::kCollectingArtifacts,
                             caller.actor, "collect artifacts")
                      .status());
  NoteActivity(id);
  std::string staging = fmt::format("{}/staging-{}", StateDir(id), ArtifactId::New().value());
  absl::StatusOr<json> result = [&]() -> absl::StatusOr<json> {
    RETURN_IF_ERROR(MakeDirs(staging, 0700));
    ASSIGN_OR_RETURN(json answer,
                     ClientFor(record).Call({{"op", "collect"},
                                             {"paths", request.paths},
                                             {"secrets", request.secrets},
                                             {"staging_dir", staging}},
                                            milliseconds(600000)),
                     "collect");
    json collection = answer["collection"];
    const json& staged = answer["staged"];
    const bool blocked = collection.value("blocked", false);
    for (json& f : collection["files"]) {
      std::string outcome = f.value("outcome", "");
      std::string path = f.value("path", "");
      if (outcome != "released" && outcome != "quarantined") continue;
      store::ArtifactRecord a;
      a.id = ArtifactId::New();
      a.sandbox = id;
      a.path = path;
      a.size = f.value("bytes", int64_t{0});
      a.sha256 = f.value("sha256", "");
      if (outcome == "released" && !blocked) {
        a.status = store::ArtifactStatus::kReleased;
        UniqueFd fd(::open(staged.value(path, "").c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) return ErrnoStatus(errno, fmt::format("staged copy of {}", path));
        ASSIGN_OR_RETURN(a.blob_key, blobs_->PutFromFd(fd.get(), UINT64_MAX), path);
      } else if (outcome == "quarantined") {
        // The content is never kept: the record says where the secret is, not what it is.
        a.status = store::ArtifactStatus::kQuarantined;
        std::string detectors;
        for (const json& hit : f.value("hits", json::array())) {
          if (!detectors.empty()) detectors += ",";
          detectors += hit.value("detector", "");
        }
        a.reason = "secret-found: " + detectors;
      } else {
        continue;  // withheld: released only when nothing was quarantined
      }
      RETURN_IF_ERROR(store_->PutArtifact(a, caller.actor));
      f["artifact_id"] = a.id.value();
    }
    if (blocked) {
      store::AuditEvent e;
      e.sandbox = id;
      e.actor = "daemon";
      e.kind = store::AuditKind::kPolicyBlocked;
      e.reason = "artifact collection blocked: a file holds a secret";
      (void)store_->AppendEvent(e);
    }
    collection["policy_blocked"] = blocked;
    collection["summary"] = answer.value("summary", "");
    return collection;
  }();
  (void)RemoveTree(staging);
  absl::StatusOr<store::SandboxRecord> back =
      Transition(id, {SandboxState::kCollectingArtifacts}, SandboxState::kRunning, "daemon",
                 "artifacts collected");
  if (result.ok() && !back.ok()) return back.status();
  return result;
}

absl::StatusOr<std::vector<store::ArtifactRecord>> SandboxManager::ListArtifacts(
    const Caller& caller, const SandboxId& id) {
  RETURN_IF_ERROR(Owned(caller, id).status());
  return store_->ListArtifacts(id);
}

absl::StatusOr<std::pair<store::ArtifactRecord, std::string>> SandboxManager::ReadArtifact(
    const Caller& caller, const SandboxId& id, const ArtifactId& artifact) {
  RETURN_IF_ERROR(Owned(caller, id).status());
  absl::StatusOr<store::ArtifactRecord> a = store_->GetArtifact(artifact);
  if (!a.ok() || a->sandbox != id) {
    return NotFound(fmt::format("no artifact {} in sandbox {}", artifact.value(), id.value()));
  }
  if (a->status != store::ArtifactStatus::kReleased) {
    return FailedPrecondition(fmt::format("artifact {} is quarantined ({}); it is never released",
                                          artifact.value(), a->reason));
  }
  ASSIGN_OR_RETURN(std::string content, blobs_->Get(a->blob_key, UINT64_MAX));
  return std::make_pair(*std::move(a), std::move(content));
}

absl::StatusOr<json> SandboxManager::WorkspaceDiff(const Caller& caller, const SandboxId& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  absl::StatusOr<std::string> meta = airlock::ReadFile(StateDir(id) + "/workspace.json", 1 << 16);
  if (!meta.ok()) {
    return FailedPrecondition(
        fmt::format("sandbox {} has no git workspace (create it with workspace.git)", id.value()));
  }
  json ws = json::parse(*meta, nullptr, false);
  std::string base = ws.is_object() ? ws.value("base_commit", "") : "";
  if (!IsHexCommit(base)) return Internal("workspace.json: no base commit");
  // git runs inside the sandbox, never on the host: the repository's config and hooks are the
  // sandbox's to change. A private index, so the sandbox's own index is left alone; every
  // file in the work tree counts, untracked ones too.
  std::string script = fmt::format(
      "set -e; cd /sandbox/workspace; export GIT_INDEX_FILE=/sandbox/tmp/.airlock-diff-index;"
      " g() {{ git -c core.hooksPath=/dev/null -c core.fsmonitor=false \"$@\"; }};"
      " g read-tree {0}; g add -A; mkdir -p /sandbox/artifacts;"
      " g diff --cached --binary --no-ext-diff --no-textconv {0} > {1}; rm -f \"$GIT_INDEX_FILE\"",
      base, kDiffPath);
  ExecRequest exec;
  exec.command.argv = {"/bin/sh", "-c", script};
  exec.command.timeout = milliseconds(120000);
  ASSIGN_OR_RETURN(store::CommandRecord done, RunCommand(caller, record, exec, false, nullptr),
                   "git diff");
  json r = done.result.value_or(json::object());
  if (r.value("exit_code", -1) != 0) {
    return FailedPrecondition(fmt::format("git diff in the sandbox failed (exit {}): {}",
                                          r.value("exit_code", -1), r.value("stderr_preview", "")));
  }
  CollectRequest c;
  c.paths = {kDiffPath};
  ASSIGN_OR_RETURN(json collection, CollectArtifacts(caller, id, c));
  collection["base_commit"] = base;
  return collection;
}

}  // namespace airlock::daemon
