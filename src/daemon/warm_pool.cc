// The warm pool: sandboxes started ahead of time and handed to creates of the same spec
// (docs/daemon.md "Warm pool").
//
// Who gets a pooled sandbox is decided by the store: Store::ClaimSandbox moves it from the pool's
// owner to the caller in one transaction, so a sandbox is never handed out twice, even to two
// daemons sharing a store. The list kept here only says which sandboxes are worth trying. The
// filler thread rebuilds that list from the store while holding pool_.mu, and a create removes a
// sandbox from `claiming` under the same lock only after its claim committed; so the filler
// never takes a sandbox that a create is claiming, or has just claimed, for one of its own to
// destroy.
#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "common/status.h"
#include "daemon/sandbox_manager.h"
#include "fmt/format.h"
#include "spec/parse.h"

namespace airlock::daemon {
namespace {

using store::SandboxState;

const Logger& Log() {
  static const Logger& log = GetLogger("daemon");
  return log;
}

constexpr char kPoolActor[] = "warm-pool";

// After a failed start the filler waits this long before the next, so a broken template does
// not spin.
constexpr std::chrono::seconds kRetryAfterFailure{5};
// The filler also looks again this often without being woken (a pooled sandbox reaped at its TTL
// is replaced).
constexpr std::chrono::seconds kRecheck{10};

}  // namespace

const ApiKeyId& SandboxManager::WarmPoolOwner() {
  // Not an API key's id (those are "ak-" and 12 hex digits): no caller owns these sandboxes.
  static const ApiKeyId* owner = new ApiKeyId("ak-warm-pool");
  return *owner;
}

absl::StatusOr<spec::SandboxSpec> SandboxManager::WarmPoolSpec(image::ImageLease* lease) {
  CreateRequest request;
  request.template_name = options_.warm_pool_template;
  ASSIGN_OR_RETURN(spec::SandboxSpec s, EffectiveSpec(request, WarmPoolOwner(), lease),
                   fmt::format("--warm-pool-template {}", options_.warm_pool_template));
  return s;
}

absl::StatusOr<std::vector<store::SandboxRecord>> SandboxManager::ListWarmPool() {
  store::SandboxQuery q;
  q.owner = WarmPoolOwner();
  q.states = {SandboxState::kRunning, SandboxState::kPaused};
  q.limit = 1000;
  ASSIGN_OR_RETURN(store::SandboxPage page, store_->ListSandboxes(q), "list the warm pool");
  std::erase_if(page.sandboxes,
                [&](const store::SandboxRecord& r) { return r.node != options_.node; });
  return std::move(page.sandboxes);
}

void SandboxManager::ShowWarmPoolReady() {
  if (pool_.ready_gauge != nullptr) {
    pool_.ready_gauge->Set({}, static_cast<double>(pool_.ready.size()));
  }
}

absl::Status SandboxManager::StartWarmPool() {
  if (options_.warm_pool <= 0) return absl::OkStatus();
  if (options_.warm_pool > 1000) return InvalidArgument("--warm-pool: at most 1000 sandboxes");
  image::ImageLease lease;
  ASSIGN_OR_RETURN(spec::SandboxSpec s, WarmPoolSpec(&lease));
  std::lock_guard lock(pool_.mu);
  if (pool_.running) return FailedPrecondition("the warm pool is already running");
  pool_.spec = spec::ToJson(s);
  pool_.stop = false;
  pool_.running = true;
  pool_.filler = std::thread([this] { FillWarmPool(); });
  return absl::OkStatus();
}

void SandboxManager::StopWarmPool() {
  {
    std::unique_lock lock(pool_.mu);
    if (!pool_.running || pool_.stop) return;
    pool_.stop = true;
    pool_.cv.notify_all();
  }
  pool_.filler.join();
  {
    // A claim under way finishes first: what it took is its caller's. No claim starts after.
    std::unique_lock lock(pool_.mu);
    pool_.cv.wait(lock, [&] { return pool_.claiming.empty(); });
    pool_.ready.clear();
    ShowWarmPoolReady();
  }
  absl::StatusOr<std::vector<store::SandboxRecord>> pooled = ListWarmPool();
  if (!pooled.ok()) {
    Log().Warn("warm pool: cannot stop its sandboxes",
               {{"error", std::string(Message(pooled.status()))}});
  } else {
    for (const store::SandboxRecord& r : *pooled) {
      (void)Teardown(r, kPoolActor, "warm pool stopped");
    }
  }
  std::lock_guard lock(pool_.mu);
  pool_.running = false;
}

absl::StatusOr<std::optional<store::CreateResult>> SandboxManager::ClaimWarm(
    const store::NewSandbox& request) {
  if (options_.warm_pool <= 0) return std::nullopt;
  for (;;) {
    SandboxId id;
    {
      std::lock_guard lock(pool_.mu);
      if (pool_.stop || !pool_.running) return std::nullopt;
      if (pool_.spec != request.spec) {
        if (pool_.claims != nullptr) pool_.claims->Inc({"other_spec"});
        return std::nullopt;
      }
      if (pool_.ready.empty()) {
        if (pool_.claims != nullptr) pool_.claims->Inc({"empty"});
        return std::nullopt;
      }
      id = pool_.ready.front();
      pool_.ready.pop_front();
      pool_.claiming.insert(id);
    }
    // A sandbox whose shim died since the reaper last looked is left to the reaper, not handed
    // out (one round trip on the kept connection).
    absl::StatusOr<store::CreateResult> claimed =
        shim::ShimClient(StateDir(id) + "/shim.sock", &shim_connections_)
                .Call({{"op", "hello"}}, std::chrono::milliseconds(2000))
                .ok()
            ? store_->ClaimSandbox(id, WarmPoolOwner(), request)
            : absl::FailedPreconditionError("its shim does not answer");
    {
      std::lock_guard lock(pool_.mu);
      pool_.claiming.erase(id);
      // A retry of an earlier create got that sandbox: the pooled one stays in the pool.
      if (claimed.ok() && !claimed->created) pool_.ready.push_front(id);
      ShowWarmPoolReady();
      pool_.wake = true;
      pool_.cv.notify_all();
    }
    if (claimed.ok()) {
      if (claimed->created && pool_.claims != nullptr) pool_.claims->Inc({"hit"});
      return std::optional<store::CreateResult>(*std::move(claimed));
    }
    // Taken by another daemon on the same store, or reaped at its TTL meanwhile: try the next.
    absl::StatusCode code = claimed.status().code();
    if (code != absl::StatusCode::kFailedPrecondition && code != absl::StatusCode::kNotFound) {
      return claimed.status();
    }
  }
}

size_t SandboxManager::SortWarmPool() {
  std::vector<store::SandboxRecord> retire;
  size_t ready = 0;
  {
    std::lock_guard lock(pool_.mu);
    absl::StatusOr<std::vector<store::SandboxRecord>> pooled = ListWarmPool();
    if (!pooled.ok()) {
      Log().Warn("warm pool: cannot sort its sandboxes",
                 {{"error", std::string(Message(pooled.status()))}});
      return 0;
    }
    pool_.ready.clear();
    const absl::Time now = absl::Now();
    for (store::SandboxRecord& r : *pooled) {
      if (pool_.claiming.count(r.id) > 0) continue;
      if (r.state == SandboxState::kRunning && r.spec == pool_.spec && r.expires_at > now &&
          static_cast<int>(pool_.ready.size()) < options_.warm_pool) {
        pool_.ready.push_back(r.id);
      } else {
        retire.push_back(std::move(r));  // of another spec, past its TTL, or beyond the size
      }
    }
    ShowWarmPoolReady();
    ready = pool_.ready.size();
  }
  // No create can claim these: they are in no list of ours.
  for (const store::SandboxRecord& r : retire) {
    (void)Teardown(r, kPoolActor,
                   r.expires_at <= absl::Now() ? "warm pool: waited its TTL"
                                               : "warm pool: not of its spec or beyond its size");
  }
  return ready;
}

absl::Status SandboxManager::StartPooled() {
  image::ImageLease lease;
  ASSIGN_OR_RETURN(spec::SandboxSpec s, WarmPoolSpec(&lease));
  store::NewSandbox n;
  n.owner = WarmPoolOwner();
  n.spec = spec::ToJson(s);
  n.template_name = options_.warm_pool_template;
  n.image_digest = s.image;
  n.ttl = options_.default_ttl;  // a sandbox waits in the pool at most this long
  n.node = options_.node;
  n.actor = kPoolActor;
  {
    std::lock_guard lock(pool_.mu);
    // A tag that moved since: the pool follows it (the older sandboxes are retired next round).
    pool_.spec = n.spec;
  }
  ASSIGN_OR_RETURN(store::CreateResult created, store_->CreateSandbox(n));
  return StartOrFail(created.sandbox, s, CreateRequest{}, kPoolActor);
}

void SandboxManager::FillWarmPool() {
  std::chrono::seconds wait = kRecheck;
  for (;;) {
    bool room = static_cast<int>(SortWarmPool()) < options_.warm_pool;
    if (room) room = CheckRoom().ok();
    bool user_starting;
    {
      std::lock_guard lock(start_mu_);
      user_starting = starting_ > 0;
    }
    {
      std::unique_lock lock(pool_.mu);
      if (pool_.stop) return;
      // Callers' own starts go first: the pool refills when none is under way.
      if (room && user_starting) {
        pool_.cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return pool_.stop; });
        continue;
      }
      if (!room || wait != kRecheck) {
        pool_.cv.wait_for(lock, wait, [&] { return pool_.stop || pool_.wake; });
        pool_.wake = false;
        wait = kRecheck;
        continue;
      }
    }
    if (absl::Status started = StartPooled(); !started.ok()) {
      Log().Warn(
          "warm pool: a sandbox did not start; retrying later",
          {{"template", options_.warm_pool_template}, {"error", std::string(Message(started))}});
      wait = kRetryAfterFailure;
    }
  }
}

}  // namespace airlock::daemon
