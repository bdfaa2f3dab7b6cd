#include "daemon/sandbox_manager.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/escaping.h"
#include "common/files.h"
#include "common/ids.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "daemon/image_config.h"
#include "engine/cgroup.h"
#include "fmt/format.h"
#include "netproxy/egress_proxy.h"
#include "netproxy/events.h"
#include "shim/shim.h"
#include "spec/parse.h"

extern char** environ;

namespace airlock::daemon {

using nlohmann::json;
using std::chrono::milliseconds;
using store::SandboxState;

namespace {

const Logger& Log() {
  static const Logger& log = GetLogger("daemon");
  return log;
}

milliseconds Ms(absl::Duration d) { return milliseconds(absl::ToInt64Milliseconds(d)); }

// workspace.git checked: the repository as git is to be given it (a local path resolved), or
// InvalidArgument naming the field. git runs on the host, as the daemon's user and with its
// network: only https:// without credentials (which would reach the process list, the log and
// the audit trail), or a repository beneath a root the operator opened.
absl::StatusOr<std::string> CheckGitSource(const WorkspaceSource& w,
                                           const std::vector<std::string>& roots) {
  if (w.repo.empty() || w.commit.empty()) {
    return InvalidArgument("workspace.git: repo and commit are both required");
  }
  const bool commit_ok = w.commit.size() <= 256 && w.commit.front() != '-' &&
                         std::all_of(w.commit.begin(), w.commit.end(), [](unsigned char c) {
                           return std::isalnum(c) || c == '.' || c == '_' || c == '/' || c == '-';
                         });
  if (!commit_ok) {
    return InvalidArgument(
        "workspace.git.commit: a commit hash or a ref name (letters, digits, '.', '_', '/' and "
        "'-', not starting with '-')");
  }
  if (std::any_of(w.repo.begin(), w.repo.end(),
                  [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
    return InvalidArgument("workspace.git.repo: control characters");
  }
  if (w.repo.starts_with("https://")) {
    std::string_view rest = std::string_view(w.repo).substr(8);
    std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
    if (authority.empty()) return InvalidArgument("workspace.git.repo: no host in the URL");
    if (authority.find('@') != std::string_view::npos) {
      return InvalidArgument(
          "workspace.git.repo: credentials in the URL are refused (they would reach the process "
          "list, the log and the audit trail)");
    }
    return w.repo;
  }
  std::string path = w.repo.starts_with("file://") ? w.repo.substr(7) : w.repo;
  if (!path.starts_with("/")) {
    return InvalidArgument(fmt::format(
        "workspace.git.repo: {:?} is neither an https:// URL nor an absolute path", w.repo));
  }
  // Resolved first, so that neither ".." nor a symlink leads out of a root; a path that does not
  // resolve gets the same answer as one outside every root.
  char real[PATH_MAX];
  if (::realpath(path.c_str(), real) != nullptr) {
    for (const std::string& root : roots) {
      char root_real[PATH_MAX];
      if (::realpath(root.c_str(), root_real) == nullptr) continue;
      std::string_view r(root_real), p(real);
      if (p == r || (p.starts_with(r) && (r == "/" || p[r.size()] == '/')))
        return std::string(real);
    }
  }
  return InvalidArgument(
      fmt::format("workspace.git.repo: {} is not beneath a --git-local-root of this node{}", path,
                  roots.empty() ? " (it has none: use an https:// URL)" : ""));
}

const std::vector<SandboxState> kLiveStates = {SandboxState::kAllocating,
                                               SandboxState::kPreparingImage,
                                               SandboxState::kMountingWorkspace,
                                               SandboxState::kStarting,
                                               SandboxState::kRunning,
                                               SandboxState::kPaused,
                                               SandboxState::kCollectingArtifacts,
                                               SandboxState::kCleaning};

bool BeforeRunning(SandboxState s) {
  return s == SandboxState::kAllocating || s == SandboxState::kPreparingImage ||
         s == SandboxState::kMountingWorkspace || s == SandboxState::kStarting;
}

bool ValidTemplateName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return name.front() != '.';
}

// Runs argv to completion (stdin /dev/null, output into `output`), for git. Returns its status.
absl::Status RunTool(const std::vector<std::string>& argv, std::string* output,
                     std::chrono::seconds timeout, const std::vector<std::string>& extra_env = {}) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  UniqueFd r(out[0]), w(out[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, w.get(), 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // A clean environment: no GIT_* of the daemon's, no credentials helpers prompting.
  std::vector<std::string> env_store = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent",
                                        "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1",
                                        "LANG=C.UTF-8"};
  env_store.insert(env_store.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> env;
  for (std::string& e : env_store) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return ErrnoStatus(rc, fmt::format("run {}", argv[0]));
  w.Reset();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    struct pollfd p = {r.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (n == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return absl::DeadlineExceededError(
          fmt::format("{} took longer than {} s", argv[0], timeout.count()));
    }
    ssize_t got = ::read(r.get(), buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (output->size() < (1 << 16)) output->append(buf, static_cast<size_t>(got));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string last = *output;
    if (last.size() > 500) last = last.substr(last.size() - 500);
    return FailedPrecondition(fmt::format("{} failed: {}", argv[0], last));
  }
  return absl::OkStatus();
}

// Whether `pid` is still the shim serving `socket` (its command line names the socket).
bool IsOurShim(int64_t pid, const std::string& socket) {
  if (pid <= 0) return false;
  absl::StatusOr<std::string> cmdline =
      airlock::ReadFile(fmt::format("/proc/{}/cmdline", pid), 1 << 16);
  if (!cmdline.ok()) return false;
  std::string flat = *cmdline;
  std::replace(flat.begin(), flat.end(), '\0', ' ');
  return flat.find("airlock-shim") != std::string::npos &&
         flat.find(" " + socket + " ") != std::string::npos;
}

}  // namespace

SandboxManager::SandboxManager(ManagerOptions options, store::Store* store, store::BlobStore* blobs,
                               http::Metrics* metrics, image::ImageStore* images)
    : options_(std::move(options)),
      store_(store),
      blobs_(blobs),
      metrics_(metrics),
      images_(images) {
  if (options_.cgroup_base.empty()) options_.cgroup_base = "airlock/" + options_.node.value();
  if (options_.max_concurrent_starts <= 0) {
    options_.max_concurrent_starts =
        2 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  if (metrics_ != nullptr) {
    exec_latency_ =
        &metrics_->AddHistogram("airlock_exec_seconds", "Time from an exec request to its result.",
                                http::Metrics::LatencyBuckets());
    reaper_actions_ = &metrics_->AddCounter("airlock_reaper_actions_total",
                                            "What the reaper did, by action.", {"action"});
    if (options_.warm_pool > 0) {
      pool_.ready_gauge =
          &metrics_->AddGauge("airlock_warm_pool_ready", "Sandboxes waiting in the warm pool.");
      pool_.claims = &metrics_->AddCounter(
          "airlock_warm_pool_claims_total",
          "Creates that looked in the warm pool, by result (hit, empty, other_spec).", {"result"});
    }
  }
}

SandboxManager::~SandboxManager() { StopWarmPool(); }

std::string SandboxManager::StateDir(const SandboxId& id) const {
  return fmt::format("{}/sandboxes/{}", options_.data_dir, id.value());
}

shim::ShimClient SandboxManager::ClientFor(const store::SandboxRecord& record) {
  return shim::ShimClient(record.runtime.shim_socket.empty() ? StateDir(record.id) + "/shim.sock"
                                                             : record.runtime.shim_socket,
                          &shim_connections_);
}

void SandboxManager::NoteActivity(const SandboxId& id) { (void)store_->Touch(id, absl::Now()); }

absl::StatusOr<store::SandboxRecord> SandboxManager::Owned(const Caller& caller,
                                                           const SandboxId& id) {
  absl::StatusOr<store::SandboxRecord> r = store_->GetSandbox(id);
  // Another owner's sandbox is reported exactly like one that does not exist.
  if ((!r.ok() && r.status().code() == absl::StatusCode::kNotFound) ||
      (r.ok() && r->owner != caller.key)) {
    return NotFound(fmt::format("no sandbox {}", id.value()));
  }
  return r;
}

absl::StatusOr<store::SandboxRecord> SandboxManager::OwnedRunning(const Caller& caller,
                                                                  const SandboxId& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord r, Owned(caller, id));
  if (r.state == SandboxState::kPaused) {
    return FailedPrecondition(fmt::format("sandbox {} is Paused; resume it first", id.value()));
  }
  if (r.state != SandboxState::kRunning) {
    return FailedPrecondition(
        fmt::format("sandbox {} is {}, not Running", id.value(), store::ToString(r.state)));
  }
  return r;
}

absl::StatusOr<store::SandboxRecord> SandboxManager::Transition(const SandboxId& id,
                                                                std::vector<SandboxState> from,
                                                                SandboxState to, std::string actor,
                                                                std::string reason,
                                                                std::optional<std::string> error) {
  store::TransitionRequest t;
  t.id = id;
  t.from = std::move(from);
  t.to = to;
  t.actor = std::move(actor);
  t.reason = std::move(reason);
  t.error = std::move(error);
  return store_->Transition(t);
}

absl::StatusOr<spec::SandboxSpec> SandboxManager::ResolveSpec(const CreateRequest& request,
                                                              json* doc_out) {
  json& doc = *doc_out;
  doc = request.spec.is_object() ? request.spec : json::object();
  if (!request.template_name.empty()) {
    if (!doc.empty()) return InvalidArgument("give either spec or template, not both");
    const std::string& name = request.template_name;
    if (name.size() == 2 && name[0] == 'R' && name[1] >= '0' && name[1] <= '5') {
      doc = {{"riskClass", name}};
    } else if (name != "default") {
      if (!ValidTemplateName(name)) {
        return InvalidArgument(fmt::format("template: \"{}\" is not a valid template name", name));
      }
      std::string base = fmt::format("{}/templates/{}", options_.data_dir, name);
      std::string path;
      for (const char* ext : {".yaml", ".yml", ".json"}) {
        if (::access((base + ext).c_str(), R_OK) == 0) {
          path = base + ext;
          break;
        }
      }
      if (path.empty()) return NotFound(fmt::format("template \"{}\" does not exist", name));
      ASSIGN_OR_RETURN(doc, spec::LoadSpecDocument(path), fmt::format("template {}", name));
    }
  }
  ASSIGN_OR_RETURN(spec::SandboxSpec s, spec::ParseSpecJson(doc, {}), "spec");
  if (!s.filesystem.workspace.empty()) {
    return InvalidArgument(
        "spec.filesystem.workspace: the daemon never mounts a host checkout; pass "
        "workspace.git {repo, commit} for a fresh clone, or upload files");
  }
  if (!s.filesystem.mounts.empty() || !s.rootfs.empty()) {
    return PermissionDenied(
        "spec.filesystem.mounts and spec.rootfs: host paths are not given to sandboxes through "
        "the API; use an image, a workspace clone or file uploads");
  }
  if (s.level != spec::Level::kBasic && s.level != spec::Level::kHardened) {
    return FailedPrecondition(fmt::format(
        "level {}: this node runs levels 1 and 2 (native); gVisor and micro-VM backends are not "
        "installed here",
        static_cast<int>(s.level)));
  }
  return s;
}

absl::StatusOr<spec::SandboxSpec> SandboxManager::EffectiveSpec(const CreateRequest& request,
                                                                const ApiKeyId& owner,
                                                                image::ImageLease* lease) {
  json doc;
  ASSIGN_OR_RETURN(spec::SandboxSpec s, ResolveSpec(request, &doc));
  if (s.image.empty()) return s;
  // A tag resolves here, once: the run stores the digest, and the lease keeps the image until
  // the sandbox's record (which names the digest) holds it instead. The image's Env, WorkingDir
  // and User fill what the spec left out, and the result is parsed (and validated) again.
  if (images_ == nullptr) return FailedPrecondition("spec.image: this node has no image store");
  const std::string shown = fmt::format("spec.image {}", s.image);
  ASSIGN_OR_RETURN(image::Digest digest, images_->Resolve(s.image, owner.value()), shown);
  ASSIGN_OR_RETURN(*lease, images_->Acquire(digest), shown);
  ASSIGN_OR_RETURN(image::ImageInfo info, images_->Get(digest, owner.value()), shown);
  RETURN_IF_ERROR(ApplyImageConfig(info.config, images_->RootfsPath(digest), &doc), shown);
  doc["image"] = digest.str();
  ASSIGN_OR_RETURN(s, spec::ParseSpecJson(doc, {}),
                   fmt::format("spec with the config of image {}", digest.str()));
  return s;
}

absl::StatusOr<store::CreateResult> SandboxManager::Create(const Caller& caller,
                                                           const CreateRequest& request) {
  image::ImageLease lease;
  ASSIGN_OR_RETURN(spec::SandboxSpec s, EffectiveSpec(request, caller.key, &lease));
  absl::Duration ttl = request.ttl.value_or(options_.default_ttl);
  if (ttl <= absl::ZeroDuration() || ttl > options_.max_ttl) {
    return InvalidArgument(fmt::format("ttl_seconds: must be between 1 and {}",
                                       absl::ToInt64Seconds(options_.max_ttl)));
  }
  CreateRequest checked = request;
  if (checked.workspace) {
    ASSIGN_OR_RETURN(checked.workspace->repo,
                     CheckGitSource(*checked.workspace, options_.git_local_roots));
  }
  store::NewSandbox n;
  n.owner = caller.key;
  n.spec = spec::ToJson(s);
  n.template_name = request.template_name;
  n.image_digest = s.image;
  n.metadata = request.metadata;
  n.ttl = ttl;
  n.idle_timeout = request.idle_timeout.value_or(absl::ZeroDuration());
  n.idempotency_key = request.idempotency_key;
  n.node = options_.node;
  n.actor = caller.actor;
  // A sandbox of the same spec kept ready takes no start (and adds none to the node's count).
  if (!request.workspace) {
    ASSIGN_OR_RETURN(std::optional<store::CreateResult> warm, ClaimWarm(n));
    if (warm) return AfterCreate(std::move(*warm));
  }
  RETURN_IF_ERROR(CheckRoom());
  ASSIGN_OR_RETURN(store::CreateResult created, store_->CreateSandbox(n));
  if (!created.created) return AfterCreate(std::move(created));
  RETURN_IF_ERROR(StartOrFail(created.sandbox, s, checked, caller.actor));
  ASSIGN_OR_RETURN(created.sandbox, store_->GetSandbox(created.sandbox.id));
  return created;
}

absl::Status SandboxManager::CheckRoom() {
  ASSIGN_OR_RETURN(int64_t live, store_->CountSandboxes(kLiveStates));
  if (live >= options_.max_sandboxes) {
    return ResourceExhausted(
        fmt::format("this node runs its maximum of {} sandboxes", options_.max_sandboxes));
  }
  return absl::OkStatus();
}

absl::StatusOr<store::CreateResult> SandboxManager::AfterCreate(store::CreateResult created) {
  if (created.created) return created;
  // A retry of an earlier create: wait for that create to finish, never start a second one.
  auto deadline = absl::Now() + options_.timeout_starting + options_.timeout_mounting_workspace;
  while (BeforeRunning(created.sandbox.state) && absl::Now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
    ASSIGN_OR_RETURN(created.sandbox, store_->GetSandbox(created.sandbox.id));
  }
  return created;
}

absl::Status SandboxManager::StartOrFail(const store::SandboxRecord& record,
                                         const spec::SandboxSpec& s, const CreateRequest& request,
                                         const std::string& actor) {
  absl::Status started = Start(record, s, request, actor);
  if (started.ok()) return started;
  Log().Warn("sandbox failed to start",
             {{"sandbox", record.id.value()}, {"error", std::string(Message(started))}});
  absl::StatusOr<store::SandboxRecord> now = store_->GetSandbox(record.id);
  if (now.ok() && !store::IsTerminal(now->state)) {
    (void)Transition(record.id, {now->state}, SandboxState::kFailed, "daemon", "start failed",
                     std::string(Message(started)));
  }
  if (now.ok()) (void)RemoveLeftovers(*now);
  return Annotate(started, fmt::format("start sandbox {}", record.id.value()));
}

absl::Status SandboxManager::Start(const store::SandboxRecord& record,
                                   const spec::SandboxSpec& spec_in, const CreateRequest& request,
                                   const std::string& actor) {
  spec::SandboxSpec s = spec_in;
  const SandboxId& id = record.id;
  RETURN_IF_ERROR(MakeDirs(StateDir(id), 0700), "state directory");
  RETURN_IF_ERROR(
      Transition(id, {SandboxState::kAllocating}, SandboxState::kPreparingImage, actor, "create")
          .status());
  RETURN_IF_ERROR(Transition(id, {SandboxState::kPreparingImage}, SandboxState::kMountingWorkspace,
                             actor,
                             s.image.empty() ? "no image: the host layout" : "image " + s.image)
                      .status());
  if (request.workspace) RETURN_IF_ERROR(PrepareWorkspace(id, *request.workspace, &s), "workspace");
  RETURN_IF_ERROR(Transition(id, {SandboxState::kMountingWorkspace}, SandboxState::kStarting, actor,
                             "workspace ready")
                      .status());
  absl::StatusOr<json> launched;
  {
    std::unique_lock lock(start_mu_);
    start_cv_.wait(lock, [&] { return starting_ < options_.max_concurrent_starts; });
    ++starting_;
  }
  launched = LaunchShim(id, s);
  {
    std::lock_guard lock(start_mu_);
    --starting_;
  }
  start_cv_.notify_one();
  ASSIGN_OR_RETURN(json hello, std::move(launched));
  store::RuntimeInfo rt;
  rt.shim_pid = hello.value("shim_pid", 0);
  rt.shim_socket = StateDir(id) + "/shim.sock";
  rt.cgroup_path = options_.cgroup_base + "/" + id.value();
  RETURN_IF_ERROR(store_->UpdateRuntime(id, rt));
  RETURN_IF_ERROR(
      Transition(id, {SandboxState::kStarting}, SandboxState::kRunning, actor, "started").status());
  return absl::OkStatus();
}

absl::Status SandboxManager::PrepareWorkspace(const SandboxId& id, const WorkspaceSource& source,
                                              spec::SandboxSpec* s) {
  std::string dir = StateDir(id) + "/workspace";
  std::string out;
  auto timeout = std::chrono::seconds(absl::ToInt64Seconds(options_.timeout_mounting_workspace));
  // A fresh clone at the pinned commit: never the caller's own checkout, no hooks, no checkout
  // until the commit is pinned.
  std::vector<std::string> clone = {"git", "-c", "core.hooksPath=/dev/null", "-c",
                                    "protocol.allow=never"};
  // git runs on the host, with the node's network. An https clone goes through an egress proxy
  // of its own (profile open, the node's operator policy), so that the node's loopback, private
  // and metadata addresses are as far out of a caller's reach as out of a sandbox's.
  netproxy::BlockedEventLog blocked;
  std::unique_ptr<netproxy::EgressProxy> proxy;
  std::vector<std::string> env;
  if (source.repo.starts_with("https://")) {
    netproxy::EgressProxy::Options po;
    po.on_event = blocked.Callback();
    po.ResolveOnlyFrom(options_.proxy_hosts);
    ASSIGN_OR_RETURN(proxy, netproxy::EgressProxy::Start(std::move(po)), "clone's egress proxy");
    ASSIGN_OR_RETURN(netproxy::Policy policy,
                     netproxy::Policy::Compile({.profile = spec::NetworkProfile::kOpen},
                                               options_.operator_policy),
                     "clone's egress policy");
    // Git 2.39 cannot use a unix-socket proxy, and any local user can connect to a TCP port: the
    // proxy takes only requests with this clone's credentials. They reach git in its
    // environment (readable by root alone), never on its command line, and git sends them at
    // once (proxyAuthMethod basic).
    const std::string secret = RandomHex(16);
    ASSIGN_OR_RETURN(uint16_t port,
                     proxy->AddSandboxTcp(id, std::move(policy), "127.0.0.1:0",
                                          "Basic " + absl::Base64Escape("clone:" + secret)),
                     "clone's egress proxy");
    clone.insert(clone.end(), {"-c", "protocol.https.allow=always"});
    env = {"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=http.proxy",
           fmt::format("GIT_CONFIG_VALUE_0=http://clone:{}@127.0.0.1:{}", secret, port),
           "GIT_CONFIG_KEY_1=http.proxyAuthMethod", "GIT_CONFIG_VALUE_1=basic"};
  } else {
    clone.insert(clone.end(), {"-c", "protocol.file.allow=always"});
  }
  clone.insert(clone.end(),
               {"clone", "--quiet", "--no-checkout", "--no-hardlinks", "--", source.repo, dir});
  absl::Status cloned = RunTool(clone, &out, timeout, env);
  proxy.reset();
  if (std::vector<netproxy::BlockedNetworkEgress> refused = blocked.Since(id, 0);
      !cloned.ok() && !refused.empty()) {
    store::AuditEvent e;
    e.sandbox = id;
    e.actor = "daemon";
    e.kind = store::AuditKind::kPolicyBlocked;
    e.reason = "workspace clone's egress blocked";
    e.data = netproxy::ToJson(netproxy::EgressEvent(refused.front()));
    (void)store_->AppendEvent(e);
    return PermissionDenied(fmt::format("workspace.git.repo: the clone's {}",
                                        netproxy::ToViolation(refused.front()).detail));
  }
  RETURN_IF_ERROR(cloned, "git clone");
  out.clear();
  RETURN_IF_ERROR(RunTool({"git", "-C", dir, "-c", "core.hooksPath=/dev/null", "checkout",
                           "--quiet", "--detach", source.commit},
                          &out, timeout),
                  fmt::format("git checkout {}", source.commit));
  out.clear();
  RETURN_IF_ERROR(
      RunTool({"git", "-C", dir, "config", "core.hooksPath", "/dev/null"}, &out, timeout));
  out.clear();
  RETURN_IF_ERROR(RunTool({"git", "-C", dir, "rev-parse", "HEAD"}, &out, timeout));
  std::string commit = out.substr(0, out.find('\n'));
  RETURN_IF_ERROR(WriteFileAtomic(StateDir(id) + "/workspace.json",
                                  json{{"repo", source.repo}, {"base_commit", commit}}.dump(),
                                  0600));
  store::AuditEvent e;
  e.sandbox = id;
  e.actor = "daemon";
  e.kind = store::AuditKind::kFileWrite;
  e.reason = "workspace cloned";
  e.data = {{"repo", source.repo}, {"base_commit", commit}};
  (void)store_->AppendEvent(e);
  s->filesystem.workspace = dir;
  return absl::OkStatus();
}

absl::StatusOr<json> SandboxManager::LaunchShim(const SandboxId& id, const spec::SandboxSpec& s) {
  std::string dir = StateDir(id);
  shim::ShimOptions o;
  o.sandbox_id = id;
  o.spec = s;
  o.tools_dir = options_.tools_dir;
  o.run_dir_base = options_.data_dir + "/run";
  o.log_dir = dir + "/logs";
  o.cgroup_base = options_.cgroup_base;
  o.operator_policy = options_.operator_policy;
  o.proxy_hosts = options_.proxy_hosts;
  if (!s.image.empty()) {
    ASSIGN_OR_RETURN(image::Digest digest, image::Digest::Parse(s.image), "spec.image");
    o.image_rootfs = images_->RootfsPath(digest);
  }
  std::string options_path = dir + "/shim.json";
  RETURN_IF_ERROR(WriteFileAtomic(options_path, o.ToJson().dump(), 0600));
  std::string socket = dir + "/shim.sock";
  std::string log = dir + "/shim.log";

  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  UniqueFd ready_r(ready[0]), ready_w(ready[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_adddup2(&fa, ready_w.get(), 3);
  posix_spawn_file_actions_addclosefrom_np(&fa, 4);
  std::vector<std::string> args = {options_.shim_bin, "--options", options_path, "--socket", socket,
                                   "--ready-fd",      "3",         "--detach"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, options_.shim_bin.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return ErrnoStatus(rc, fmt::format("start {}", options_.shim_bin));
  ready_w.Reset();
  ::waitpid(pid, nullptr, 0);  // the detaching parent exits at once

  std::string line;
  auto deadline = std::chrono::steady_clock::now() + Ms(options_.timeout_starting);
  for (;;) {
    auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError("the sandbox did not start within the Starting timeout");
    }
    struct pollfd p = {ready_r.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(ready_r.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
    if (line.find('\n') != std::string::npos) break;
  }
  json hello = json::parse(line, nullptr, false);
  if (!hello.is_object()) {
    std::string tail = airlock::ReadFile(log, 1 << 16).value_or("");
    return Internal(fmt::format("airlock-shim ended without a ready answer; its log: {}", tail));
  }
  RETURN_IF_ERROR(shim::StatusFromResponse(hello));
  return hello;
}

absl::StatusOr<store::SandboxRecord> SandboxManager::Get(const Caller& caller,
                                                         const SandboxId& id) {
  return Owned(caller, id);
}

absl::StatusOr<store::SandboxPage> SandboxManager::List(const Caller& caller,
                                                        store::SandboxQuery query) {
  query.owner = caller.key;
  return store_->ListSandboxes(query);
}

absl::StatusOr<store::CommandRecord> SandboxManager::RunCommand(const Caller& caller,
                                                                const store::SandboxRecord& record,
                                                                const ExecRequest& request,
                                                                bool background,
                                                                const FrameSink& sink) {
  auto t0 = std::chrono::steady_clock::now();
  store::CommandRecord cmd;
  cmd.id = CommandId::New();
  cmd.sandbox = record.id;
  cmd.argv = request.command.argv;
  cmd.background = background;
  // Registered before its row exists: the reaper must not take a command that is on its way to
  // the shim for one the shim has lost.
  {
    std::lock_guard lock(mu_);
    ++busy_[record.id];
    in_flight_.insert(cmd.id);
  }
  // PutCommand below and FinishCommand at the end stamp the sandbox's activity in their own
  // transactions; meanwhile the reaper counts the command through busy_.
  struct Idle {
    SandboxManager* m;
    SandboxId id;
    CommandId command;
    ~Idle() {
      std::lock_guard lock(m->mu_);
      if (--m->busy_[id] <= 0) m->busy_.erase(id);
      m->in_flight_.erase(command);
    }
  } idle{this, record.id, cmd.id};
  RETURN_IF_ERROR(store_->PutCommand(cmd, caller.actor));

  json command = {{"argv", request.command.argv}};
  if (!request.command.workdir.empty()) command["workdir"] = request.command.workdir;
  if (!request.command.env.empty()) command["env"] = request.command.env;
  if (request.command.timeout) command["timeout_ms"] = request.command.timeout->count();
  if (!request.command.stdin_data.empty()) command["stdin"] = request.command.stdin_data;
  json req = {{"op", "exec"},
              {"command", command},
              {"command_id", cmd.id.value()},
              {"secrets", request.secrets},
              {"background", background},
              {"stream", sink != nullptr},
              {"keep_background", request.keep_background}};
  shim::ShimClient client = ClientFor(record);
  if (background) {
    absl::StatusOr<json> r = client.Call(req, milliseconds(30000));
    if (!r.ok()) {
      (void)store_->FinishCommand(cmd.id, store::CommandState::kKilled,
                                  {{"error", std::string(Message(r.status()))}});
      return r.status();
    }
    return store_->GetCommand(cmd.id);
  }
  // The stored spec is the effective one (spec::ToJson), so the timeout is there: reading that
  // one field spares parsing the whole spec on every exec.
  static const json::json_pointer kTimeout("/resources/commandTimeoutSeconds");
  int64_t spec_timeout_s = spec::SandboxSpec().resources.command_timeout_seconds;
  if (record.spec.contains(kTimeout) && record.spec.at(kTimeout).is_number_integer()) {
    spec_timeout_s = record.spec.at(kTimeout).get<int64_t>();
  }
  milliseconds idle_wait =
      request.command.timeout.value_or(milliseconds(spec_timeout_s * 1000)) + milliseconds(60000);
  absl::StatusOr<json> r = client.Stream(
      req,
      [&](shim::Frame type, std::string_view payload) {
        if (!sink) return true;
        ExecFrame f{type == shim::Frame::kStdout   ? ExecFrame::Kind::kStdout
                    : type == shim::Frame::kStderr ? ExecFrame::Kind::kStderr
                                                   : ExecFrame::Kind::kEvent,
                    std::string(payload)};
        // A receiver that went away ends only the stream; the command runs on in the shim and
        // its result is collected below by asking the shim.
        return sink(f);
      },
      idle_wait);
  if (!r.ok() && r.status().code() == absl::StatusCode::kCancelled) {
    for (;;) {
      absl::StatusOr<json> state =
          client.Call({{"op", "command"}, {"command_id", cmd.id.value()}}, milliseconds(30000));
      if (!state.ok() || state->value("state", "") != "running") {
        r = state;
        break;
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
  }
  if (!r.ok() && r.status().code() == absl::StatusCode::kAborted) {
    // Interrupted by the daemon's stop: the command runs on, and stays recorded as running.
    return absl::UnavailableError(
        fmt::format("exec: airlockd is stopping; command {} goes on in the sandbox, and GET "
                    "/v1/sandboxes/{}/commands/{} gives its result once airlockd is back",
                    cmd.id.value(), record.id.value(), cmd.id.value()));
  }
  if (!r.ok()) {
    (void)store_->FinishCommand(cmd.id, store::CommandState::kKilled,
                                {{"error", std::string(Message(r.status()))}});
    return Annotate(r.status(), "exec");
  }
  json result = r->value("result", json());
  if (!result.is_object()) {
    (void)store_->FinishCommand(cmd.id, store::CommandState::kKilled,
                                {{"error", r->value("error", "no result")}});
    return Internal(fmt::format("exec: {}", r->value("error", "the shim returned no result")));
  }
  ASSIGN_OR_RETURN(store::CommandRecord done,
                   RecordEnd(cmd.id, store::CommandState::kFinished, result));
  if (exec_latency_ != nullptr) {
    exec_latency_->Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return done;
}

absl::StatusOr<store::CommandRecord> SandboxManager::RecordEnd(const CommandId& command,
                                                               store::CommandState state,
                                                               const json& result) {
  absl::StatusOr<store::CommandRecord> done = store_->FinishCommand(command, state, result);
  // Several parties learn that a command ended (its exec stream, a poll, an attach, the
  // reaper); the first records it and the others read what it recorded.
  if (done.status().code() == absl::StatusCode::kFailedPrecondition) {
    absl::StatusOr<store::CommandRecord> now = store_->GetCommand(command);
    if (now.ok() && now->state != store::CommandState::kRunning) return now;
  }
  return done;
}

absl::StatusOr<CommandResult> SandboxManager::Exec(const Caller& caller, const SandboxId& id,
                                                   const ExecRequest& request,
                                                   const FrameSink& sink) {
  if (request.command.argv.empty()) return InvalidArgument("argv: must not be empty");
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  ASSIGN_OR_RETURN(store::CommandRecord done, RunCommand(caller, record, request, false, sink));
  return CommandResultFromJson(done.result.value_or(json::object()));
}

absl::StatusOr<store::CommandRecord> SandboxManager::StartBackground(const Caller& caller,
                                                                     const SandboxId& id,
                                                                     const ExecRequest& request) {
  if (request.command.argv.empty()) return InvalidArgument("argv: must not be empty");
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  return RunCommand(caller, record, request, true, nullptr);
}

absl::StatusOr<store::CommandRecord> SandboxManager::GetCommand(const Caller& caller,
                                                                const SandboxId& id,
                                                                const CommandId& command) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, Owned(caller, id));
  absl::StatusOr<store::CommandRecord> c = store_->GetCommand(command);
  if (!c.ok() || c->sandbox != id) {
    return NotFound(fmt::format("no command {} in sandbox {}", command.value(), id.value()));
  }
  if (c->state != store::CommandState::kRunning || store::IsTerminal(record.state)) return c;
  // A background command: its result arrives in the shim first.
  absl::StatusOr<json> state = ClientFor(record).Call(
      {{"op", "command"}, {"command_id", command.value()}}, milliseconds(10000));
  if (state.ok() && state->value("state", "") == "finished" && state->contains("result")) {
    return RecordEnd(command, store::CommandState::kFinished, (*state)["result"]);
  }
  if (state.ok() && state->value("state", "") == "failed") {
    return RecordEnd(command, store::CommandState::kKilled, {{"error", state->value("error", "")}});
  }
  return c;
}

absl::StatusOr<std::vector<store::CommandRecord>> SandboxManager::ListCommands(
    const Caller& caller, const SandboxId& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, Owned(caller, id));
  return store_->ListCommands(id);
}

absl::StatusOr<store::CommandRecord> SandboxManager::Attach(const Caller& caller,
                                                            const SandboxId& id,
                                                            const CommandId& command,
                                                            const FrameSink& sink) {
  ASSIGN_OR_RETURN(store::CommandRecord c, GetCommand(caller, id, command));
  if (c.state != store::CommandState::kRunning) return c;
  ASSIGN_OR_RETURN(store::SandboxRecord record, Owned(caller, id));
  {
    std::lock_guard lock(mu_);
    ++busy_[id];
  }
  absl::StatusOr<json> r = ClientFor(record).Stream(
      {{"op", "attach"}, {"command_id", command.value()}},
      [&](shim::Frame type, std::string_view payload) {
        ExecFrame f{type == shim::Frame::kStdout   ? ExecFrame::Kind::kStdout
                    : type == shim::Frame::kStderr ? ExecFrame::Kind::kStderr
                                                   : ExecFrame::Kind::kEvent,
                    std::string(payload)};
        return sink(f);
      },
      Ms(options_.max_ttl));
  {
    std::lock_guard lock(mu_);
    if (--busy_[id] <= 0) busy_.erase(id);
  }
  NoteActivity(id);
  if (r.ok() && r->contains("result")) {
    return RecordEnd(command, store::CommandState::kFinished, (*r)["result"]);
  }
  RETURN_IF_ERROR(r.status(), "attach");
  return GetCommand(caller, id, command);
}

absl::Status SandboxManager::KillCommand(const Caller& caller, const SandboxId& id,
                                         const CommandId& command, int signal) {
  ASSIGN_OR_RETURN(store::CommandRecord c, GetCommand(caller, id, command));
  if (c.state != store::CommandState::kRunning) {
    return FailedPrecondition(fmt::format("command {} has already ended", command.value()));
  }
  ASSIGN_OR_RETURN(store::SandboxRecord record, Owned(caller, id));
  return ClientFor(record)
      .Call({{"op", "kill"}, {"command_id", command.value()}, {"signal", signal}},
            milliseconds(10000))
      .status();
}

absl::StatusOr<std::string> SandboxManager::SandboxPath(const std::string& path) const {
  if (path.empty()) return InvalidArgument("path: required");
  if (path.size() > 4096 || path.find('\0') != std::string::npos) {
    return InvalidArgument("path: too long or holds NUL");
  }
  std::string full = path.front() == '/' ? path : "/sandbox/workspace/" + path;
  for (size_t i = 0; i <= full.size();) {
    size_t j = full.find('/', i);
    if (j == std::string::npos) j = full.size();
    if (full.compare(i, j - i, "..") == 0 && j - i == 2) {
      return PermissionDenied(fmt::format("path {}: \"..\" is not allowed", path));
    }
    i = j + 1;
  }
  return full;
}

absl::StatusOr<json> SandboxManager::StatFile(const Caller& caller, const SandboxId& id,
                                              const std::string& path) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  ASSIGN_OR_RETURN(std::string p, SandboxPath(path));
  ASSIGN_OR_RETURN(json r,
                   ClientFor(record).Call({{"op", "files"}, {"file_op", "stat"}, {"path", p}},
                                          milliseconds(60000)));
  NoteActivity(id);
  return r["file"];
}

absl::StatusOr<json> SandboxManager::ListFiles(const Caller& caller, const SandboxId& id,
                                               const std::string& path) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  ASSIGN_OR_RETURN(std::string p, SandboxPath(path));
  ASSIGN_OR_RETURN(json r,
                   ClientFor(record).Call({{"op", "files"}, {"file_op", "list"}, {"path", p}},
                                          milliseconds(60000)));
  NoteActivity(id);
  return r["entries"];
}

absl::Status SandboxManager::MakeDirectory(const Caller& caller, const SandboxId& id,
                                           const std::string& path, bool parents) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  ASSIGN_OR_RETURN(std::string p, SandboxPath(path));
  NoteActivity(id);
  return ClientFor(record)
      .Call({{"op", "files"}, {"file_op", "mkdir"}, {"path", p}, {"parents", parents}},
            milliseconds(60000))
      .status();
}

absl::Status SandboxManager::RemoveFile(const Caller& caller, const SandboxId& id,
                                        const std::string& path, bool recursive) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  ASSIGN_OR_RETURN(std::string p, SandboxPath(path));
  NoteActivity(id);
  return ClientFor(record)
      .Call({{"op", "files"}, {"file_op", "remove"}, {"path", p}, {"recursive", recursive}},
            milliseconds(60000))
      .status();
}

absl::StatusOr<std::unique_ptr<SandboxManager::FileWriter>> SandboxManager::BeginWrite(
    const Caller& caller, const SandboxId& id, const std::string& path, uint32_t mode,
    bool parents) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  ASSIGN_OR_RETURN(std::string p, SandboxPath(path));
  if (mode > 0777) return InvalidArgument("mode: must be between 0 and 0777");
  auto w = std::make_unique<FileWriter>();
  w->manager_ = this;
  w->id_ = id;
  w->actor_ = caller.actor;
  w->path_ = p;
  ASSIGN_OR_RETURN(w->upload_,
                   ClientFor(record).BeginUpload({{"op", "files"},
                                                  {"file_op", "write"},
                                                  {"path", p},
                                                  {"mode", mode},
                                                  {"parents", parents},
                                                  {"max_bytes", options_.max_file_bytes}}));
  return w;
}

absl::Status SandboxManager::FileWriter::Write(std::string_view data) {
  return upload_->Write(data);
}

absl::StatusOr<json> SandboxManager::FileWriter::Finish() {
  ASSIGN_OR_RETURN(json r, upload_->Finish(milliseconds(300000)));
  store::AuditEvent e;
  e.sandbox = id_;
  e.actor = actor_;
  e.kind = store::AuditKind::kFileWrite;
  e.reason = "upload";
  e.data = {{"path", path_}, {"size", r["file"].value("size", 0)}};
  (void)manager_->store_->AppendEvent(e);
  manager_->NoteActivity(id_);
  return r["file"];
}

absl::StatusOr<json> SandboxManager::ReadFile(const Caller& caller, const SandboxId& id,
                                              const std::string& path,
                                              const std::function<bool(std::string_view)>& sink) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  ASSIGN_OR_RETURN(std::string p, SandboxPath(path));
  ASSIGN_OR_RETURN(json r, ClientFor(record).Stream(
                               {{"op", "files"},
                                {"file_op", "read"},
                                {"path", p},
                                {"max_bytes", options_.max_file_bytes}},
                               [&](shim::Frame type, std::string_view payload) {
                                 return type != shim::Frame::kData || sink(payload);
                               },
                               milliseconds(300000)));
  NoteActivity(id);
  return r["file"];
}

absl::StatusOr<store::SandboxRecord> SandboxManager::Pause(const Caller& caller,
                                                           const SandboxId& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  RETURN_IF_ERROR(ClientFor(record).Call({{"op", "pause"}}, milliseconds(30000)).status(), "pause");
  absl::StatusOr<store::SandboxRecord> r =
      Transition(id, {SandboxState::kRunning}, SandboxState::kPaused, caller.actor, "pause");
  if (!r.ok()) (void)ClientFor(record).Call({{"op", "resume"}}, milliseconds(30000));
  return r;
}

absl::StatusOr<store::SandboxRecord> SandboxManager::Resume(const Caller& caller,
                                                            const SandboxId& id) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, Owned(caller, id));
  if (record.state != SandboxState::kPaused) {
    return FailedPrecondition(
        fmt::format("sandbox {} is {}, not Paused", id.value(), store::ToString(record.state)));
  }
  RETURN_IF_ERROR(ClientFor(record).Call({{"op", "resume"}}, milliseconds(30000)).status(),
                  "resume");
  NoteActivity(id);
  return Transition(id, {SandboxState::kPaused}, SandboxState::kRunning, caller.actor, "resume");
}

absl::StatusOr<store::SandboxRecord> SandboxManager::ExtendTtl(const Caller& caller,
                                                               const SandboxId& id,
                                                               absl::Duration ttl) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, Owned(caller, id));
  if (ttl <= absl::ZeroDuration()) return InvalidArgument("ttl_seconds: must be > 0");
  absl::Time until = absl::Now() + ttl;
  absl::Time cap = record.created_at + options_.max_ttl;
  if (until > cap) {
    return InvalidArgument(
        fmt::format("ttl_seconds: a sandbox lives at most {} s from its creation",
                    absl::ToInt64Seconds(options_.max_ttl)));
  }
  return store_->ExtendTtl(id, until, caller.actor);
}

absl::StatusOr<store::SandboxRecord> SandboxManager::UpdateNetwork(const Caller& caller,
                                                                   const SandboxId& id,
                                                                   const json& network,
                                                                   bool may_loosen) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, OwnedRunning(caller, id));
  absl::StatusOr<json> called = ClientFor(record).Call(
      {{"op", "network"}, {"network", network}, {"may_loosen", may_loosen}}, milliseconds(30000));
  if (called.status().code() == absl::StatusCode::kPermissionDenied) {
    // A loosening without the caller's authority is refused, and the attempt is audited too.
    store::AuditEvent refused;
    refused.sandbox = id;
    refused.actor = caller.actor;
    refused.kind = store::AuditKind::kPolicyBlocked;
    refused.reason = "network policy change refused";
    refused.data = {{"network", network},
                    {"may_loosen", may_loosen},
                    {"error", std::string(Message(called.status()))}};
    (void)store_->AppendEvent(refused);
  }
  if (!called.ok()) return called.status();
  json r = *std::move(called);
  store::AuditEvent e;
  e.actor = caller.actor;
  e.kind = store::AuditKind::kNetworkPolicyChanged;
  // What the proxy decided (did the new policy allow anything the old did not), not what the
  // caller was allowed to do.
  bool loosened = r.value("loosened", false);
  e.reason = loosened ? "policy loosened" : "policy tightened";
  e.data = {{"network", r["network"]},
            {"previous_network", r.value("previous_network", json())},
            {"loosened", loosened},
            {"may_loosen", may_loosen}};
  // The record's spec is what the sandbox runs under from now on (GET shows it, and commands
  // stored from here are repeatable with it).
  json spec = record.spec;
  spec["network"] = r["network"];
  return store_->UpdateSpec(id, spec, e);
}

absl::StatusOr<std::vector<store::AuditEvent>> SandboxManager::Events(const Caller& caller,
                                                                      const SandboxId& id,
                                                                      int64_t after_seq,
                                                                      int limit) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, Owned(caller, id));
  store::AuditQuery q;
  q.sandbox = id;
  q.after_seq = after_seq;
  q.limit = limit;
  return store_->ListEvents(q);
}

absl::StatusOr<store::SandboxRecord> SandboxManager::Destroy(const Caller& caller,
                                                             const SandboxId& id,
                                                             std::string_view reason) {
  ASSIGN_OR_RETURN(store::SandboxRecord record, Owned(caller, id));
  if (store::IsTerminal(record.state)) return record;
  return Teardown(record, caller.actor, std::string(reason));
}

absl::StatusOr<store::SandboxRecord> SandboxManager::Teardown(const store::SandboxRecord& record,
                                                              std::string actor,
                                                              std::string reason) {
  const SandboxId& id = record.id;
  bool ran = !BeforeRunning(record.state);
  if (record.state != SandboxState::kCleaning) {
    absl::StatusOr<store::SandboxRecord> moved =
        Transition(id, {record.state}, SandboxState::kCleaning, actor, reason);
    if (!moved.ok()) {
      // Someone else moved it first (a concurrent delete or the reaper): report where it is.
      ASSIGN_OR_RETURN(store::SandboxRecord now, store_->GetSandbox(id));
      if (store::IsTerminal(now.state) || now.state == SandboxState::kCleaning) return now;
      return moved.status();
    }
  }
  absl::Status cleaned = RemoveLeftovers(record);
  // Commands still marked running did not survive the sandbox.
  if (auto commands = store_->ListCommands(id); commands.ok()) {
    for (const store::CommandRecord& c : *commands) {
      if (c.state == store::CommandState::kRunning) {
        (void)store_->FinishCommand(c.id, store::CommandState::kKilled,
                                    {{"error", "the sandbox was terminated"}});
      }
    }
  }
  if (!cleaned.ok()) {
    store::AuditEvent e;
    e.sandbox = id;
    e.actor = actor;
    e.kind = store::AuditKind::kCleanupFailed;
    e.reason = std::string(Message(cleaned));
    (void)store_->AppendEvent(e);
    if (reaper_actions_ != nullptr) reaper_actions_->Inc({"cleanup_failed"});
    Log().Warn("cleanup failed; the reaper retries",
               {{"sandbox", id.value()}, {"error", std::string(Message(cleaned))}});
    return store_->GetSandbox(id);
  }
  return Transition(id, {SandboxState::kCleaning},
                    ran ? SandboxState::kGone : SandboxState::kFailed, actor,
                    ran ? "removed" : "removed after a failed start");
}

absl::Status SandboxManager::RemoveLeftovers(const store::SandboxRecord& record) {
  const SandboxId& id = record.id;
  absl::Status status;
  std::string socket =
      record.runtime.shim_socket.empty() ? StateDir(id) + "/shim.sock" : record.runtime.shim_socket;
  shim_connections_.Forget(socket);
  shim::ShimClient client(socket);
  absl::StatusOr<json> destroyed = client.Call({{"op", "destroy"}}, Ms(options_.timeout_cleaning));
  // A shim that did not answer is killed (its sandbox dies with it); the cgroup removal below
  // then takes whatever is left.
  int64_t pid = record.runtime.shim_pid;
  if (pid <= 0) {
    // Not recorded yet (the start failed early): the shim leaves its pid beside its socket.
    pid = std::atoll(airlock::ReadFile(socket + ".pid", 64).value_or("0").c_str());
  }
  if (!destroyed.ok() && pid > 0) {
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
    if (pidfd >= 0) {
      if (IsOurShim(pid, socket)) {
        ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
        struct pollfd p = {pidfd, POLLIN, 0};
        ::poll(&p, 1, 5000);
        if (reaper_actions_ != nullptr) reaper_actions_->Inc({"kill_shim"});
      }
      ::close(pidfd);
    }
  }
  engine::CgroupOptions cg;
  cg.base = options_.cgroup_base;
  if (auto driver = engine::CgroupDriver::Detect(cg); driver.ok()) {
    if (auto group = (*driver)->Open(id.value()); group.ok()) {
      status.Update(Annotate((*group)->Destroy(), "remove cgroup"));
      if (reaper_actions_ != nullptr) reaper_actions_->Inc({"remove_cgroup"});
    }
  }
  std::string run = fmt::format("{}/run/{}", options_.data_dir, id.value());
  if (::access(run.c_str(), F_OK) == 0) status.Update(Annotate(RemoveTree(run), "remove run dir"));
  // The state directory goes, but for the kept command logs (the audit trail refers to them).
  std::string dir = StateDir(id);
  for (const char* leaf : {"shim.sock", "shim.sock.pid", "shim.json"}) {
    ::unlink((dir + "/" + leaf).c_str());
  }
  std::string ws = dir + "/workspace";
  if (::access(ws.c_str(), F_OK) == 0) status.Update(Annotate(RemoveTree(ws), "remove workspace"));
  return status;
}

void SandboxManager::Adopt(const store::SandboxRecord& record, bool after_restart) {
  shim::ShimClient client = ClientFor(record);
  absl::StatusOr<json> hello = client.Call({{"op", "hello"}}, milliseconds(5000));
  if (!hello.ok() || hello->value("sandbox_id", "") != record.id.value()) {
    Log().Warn("sandbox's shim is gone; cleaning up", {{"sandbox", record.id.value()}});
    if (reaper_actions_ != nullptr) reaper_actions_->Inc({"reap_lost"});
    (void)Teardown(record, "reaper", "the sandbox's shim is gone");
    return;
  }
  if (after_restart) {
    store::AuditEvent e;
    e.sandbox = record.id;
    e.actor = "daemon";
    e.kind = store::AuditKind::kSandboxAdopted;
    e.reason = "daemon restarted";
    e.data = {{"shim_pid", hello->value("shim_pid", 0)}, {"init_pid", hello->value("init_pid", 0)}};
    (void)store_->AppendEvent(e);
    if (reaper_actions_ != nullptr) reaper_actions_->Inc({"adopt"});
    Log().Info("adopted sandbox", {{"sandbox", record.id.value()}});
  }
  // The store's commands that were running: the shim knows how they ended.
  if (auto commands = store_->ListCommands(record.id); commands.ok()) {
    for (const store::CommandRecord& c : *commands) {
      if (c.state != store::CommandState::kRunning) continue;
      {
        // This daemon is running it (its exec may not have reached the shim yet): it records
        // the end itself.
        std::lock_guard lock(mu_);
        if (in_flight_.count(c.id) > 0) continue;
      }
      absl::StatusOr<json> st =
          client.Call({{"op", "command"}, {"command_id", c.id.value()}}, milliseconds(5000));
      if (st.ok() && st->value("state", "") == "finished" && st->contains("result")) {
        (void)store_->FinishCommand(c.id, store::CommandState::kFinished, (*st)["result"]);
      } else if (!st.ok() || st->value("state", "") == "failed") {
        (void)store_->FinishCommand(
            c.id, store::CommandState::kKilled,
            {{"error", st.ok() ? st->value("error", "") : "unknown to the shim"}});
      }
    }
  }
}

void SandboxManager::Reconcile() {
  bool after_restart;
  {
    std::lock_guard lock(mu_);
    after_restart = first_reconcile_;
    first_reconcile_ = false;
  }
  absl::Time now = absl::Now();
  store::SandboxQuery q;
  q.states = kLiveStates;
  q.limit = 1000;
  std::vector<store::SandboxRecord> live;
  for (;;) {
    absl::StatusOr<store::SandboxPage> page = store_->ListSandboxes(q);
    if (!page.ok()) {
      Log().Warn("reconcile: list sandboxes", {{"error", std::string(Message(page.status()))}});
      return;
    }
    for (auto& r : page->sandboxes) {
      if (r.node == options_.node) live.push_back(std::move(r));
    }
    if (page->next_cursor.empty()) break;
    q.cursor = page->next_cursor;
  }
  for (const store::SandboxRecord& r : live) {
    absl::Duration age = now - r.updated_at;
    switch (r.state) {
      case SandboxState::kAllocating:
      case SandboxState::kPreparingImage:
      case SandboxState::kMountingWorkspace:
      case SandboxState::kStarting: {
        absl::Duration limit =
            r.state == SandboxState::kPreparingImage      ? options_.timeout_preparing_image
            : r.state == SandboxState::kMountingWorkspace ? options_.timeout_mounting_workspace
                                                          : options_.timeout_starting;
        // After a restart no thread of ours is still creating it; otherwise only a stuck one.
        if (after_restart || age > limit) {
          if (reaper_actions_ != nullptr) reaper_actions_->Inc({"fail_stuck"});
          (void)Transition(
              r.id, {r.state}, SandboxState::kFailed, "reaper",
              after_restart ? "creation interrupted by a daemon restart" : "setup state timed out",
              std::string("setup did not finish"));
          (void)RemoveLeftovers(r);
        }
        break;
      }
      case SandboxState::kRunning:
      case SandboxState::kPaused:
        Adopt(r, after_restart);
        break;
      case SandboxState::kCollectingArtifacts:
        if (after_restart || age > options_.timeout_collecting) {
          (void)Transition(r.id, {r.state}, SandboxState::kRunning, "reaper",
                           "artifact collection interrupted");
        }
        break;
      case SandboxState::kCleaning:
        if (after_restart || age > options_.timeout_cleaning) {
          (void)Teardown(r, "reaper", "cleanup retried");
        }
        break;
      default:
        break;
    }
  }
  ExpireIdle();
  RemoveOrphans();
}

void SandboxManager::ExpireIdle() {
  absl::Time now = absl::Now();
  absl::StatusOr<std::vector<store::SandboxRecord>> expired = store_->ListExpired(now, 1000);
  if (!expired.ok()) return;
  for (const store::SandboxRecord& r : *expired) {
    // The pool retires its own sandboxes (a create may be claiming one: warm_pool.cc).
    if (r.node != options_.node || store::IsTerminal(r.state) ||
        r.state == SandboxState::kCleaning || r.owner == WarmPoolOwner()) {
      continue;
    }
    bool ttl = r.expires_at <= now;
    // Activity inside the sandbox counts: a command or stream in flight here, a command the
    // shim is running, or CPU used since the last look.
    bool busy;
    {
      std::lock_guard lock(mu_);
      busy = busy_.count(r.id) > 0;
    }
    if (!busy && (r.state == SandboxState::kRunning)) {
      absl::StatusOr<json> stats = ClientFor(r).Call({{"op", "stats"}}, milliseconds(5000));
      if (stats.ok()) {
        int64_t cpu =
            stats->value("cpu_user_us", int64_t{0}) + stats->value("cpu_system_us", int64_t{0});
        std::lock_guard lock(mu_);
        auto it = last_cpu_us_.find(r.id);
        bool used_cpu = it != last_cpu_us_.end() && cpu - it->second > 10'000;
        last_cpu_us_[r.id] = cpu;
        busy = stats->value("running_commands", 0) > 0 || used_cpu;
      }
    }
    bool hard_cap = now >= r.created_at + options_.max_ttl;
    if (busy && !hard_cap) {
      NoteActivity(r.id);  // idle clock restarts; a TTL past due gets another round
      if (reaper_actions_ != nullptr) reaper_actions_->Inc({"grace_busy"});
      continue;
    }
    if (reaper_actions_ != nullptr) reaper_actions_->Inc({ttl ? "expire_ttl" : "expire_idle"});
    (void)Teardown(r, "reaper", ttl ? "ttl expired" : "idle timeout");
    std::lock_guard lock(mu_);
    last_cpu_us_.erase(r.id);
  }
}

void SandboxManager::RemoveOrphans() {
  // Anything of ours on the node that no live sandbox owns: state directories with a socket,
  // run directories, cgroups under our base.
  auto dead = [&](const std::string& name) {
    if (name.rfind("sb-", 0) != 0) return false;
    absl::StatusOr<store::SandboxRecord> r = store_->GetSandbox(SandboxId(name));
    if (!r.ok()) return r.status().code() == absl::StatusCode::kNotFound;
    return store::IsTerminal(r->state);
  };
  std::set<std::string> names;
  std::error_code ec;
  for (const char* sub : {"/sandboxes", "/run"}) {
    for (const auto& e : std::filesystem::directory_iterator(options_.data_dir + sub, ec)) {
      names.insert(e.path().filename().string());
    }
  }
  engine::CgroupOptions cg;
  cg.base = options_.cgroup_base;
  std::unique_ptr<engine::CgroupDriver> driver;
  if (auto d = engine::CgroupDriver::Detect(cg); d.ok()) driver = std::move(*d);
  if (driver) {
    std::string root = fmt::format("/sys/fs/cgroup/{}{}",
                                   driver->version() == engine::CgroupVersion::kV1 ? "pids/" : "",
                                   options_.cgroup_base);
    for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
      if (e.is_directory()) names.insert(e.path().filename().string());
    }
  }
  for (const std::string& name : names) {
    if (!dead(name)) continue;
    std::string dir = StateDir(SandboxId(name));
    bool leftovers =
        ::access((dir + "/shim.sock").c_str(), F_OK) == 0 ||
        ::access((dir + "/workspace").c_str(), F_OK) == 0 ||
        ::access(fmt::format("{}/run/{}", options_.data_dir, name).c_str(), F_OK) == 0 ||
        (driver && driver->Open(name).ok());
    if (!leftovers) continue;
    store::SandboxRecord r;
    r.id = SandboxId(name);
    if (auto known = store_->GetSandbox(r.id); known.ok()) r = *known;
    if (reaper_actions_ != nullptr) reaper_actions_->Inc({"remove_orphan"});
    if (absl::Status s = RemoveLeftovers(r); !s.ok()) {
      store::AuditEvent e;
      e.sandbox = r.id;
      e.actor = "reaper";
      e.kind = store::AuditKind::kCleanupFailed;
      e.reason = std::string(Message(s));
      (void)store_->AppendEvent(e);
    }
  }
}

std::map<std::string, int64_t> SandboxManager::CountByState() {
  std::map<std::string, int64_t> counts;
  for (SandboxState s : kLiveStates) counts[std::string(store::ToString(s))] = 0;
  store::SandboxQuery q;
  q.states = kLiveStates;
  q.limit = 1000;
  for (;;) {
    absl::StatusOr<store::SandboxPage> page = store_->ListSandboxes(q);
    if (!page.ok()) break;
    for (const auto& r : page->sandboxes) ++counts[std::string(store::ToString(r.state))];
    if (page->next_cursor.empty()) break;
    q.cursor = page->next_cursor;
  }
  return counts;
}

absl::Status SandboxManager::Ready() {
  store::SandboxQuery q;
  q.limit = 1;
  RETURN_IF_ERROR(store_->ListSandboxes(q).status(), "store");
  if (::access(options_.shim_bin.c_str(), X_OK) != 0) {
    return absl::UnavailableError(fmt::format("{} is missing", options_.shim_bin));
  }
  if (::access((options_.tools_dir + "/airlock-init").c_str(), X_OK) != 0) {
    return absl::UnavailableError(fmt::format("airlock-init is missing in {}", options_.tools_dir));
  }
  return absl::OkStatus();
}

}  // namespace airlock::daemon
