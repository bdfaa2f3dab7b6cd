// The contract of store.h, run against every Store implementation. A new implementation joins
// by adding one StoreFactory to kFactories below (PostgreSQL: a fresh database per location).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "command/command.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/parse.h"
#include "store/latency.h"
#include "store/sqlite_store.h"
#include "store/store.h"
#include "store/test_util.h"

namespace airlock::store {
namespace {

using test::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

struct StoreFactory {
  std::string name;
  // Opens a Store on the database identified by `location` (an empty directory made for the
  // test). Opening the same location again gives another Store on the same database.
  std::function<absl::StatusOr<std::unique_ptr<Store>>(const std::string& location,
                                                       const StoreOptions& options)>
      open;
};

void PrintTo(const StoreFactory& factory, std::ostream* os) { *os << factory.name; }

const StoreFactory kFactories[] = {
    {"Sqlite",
     [](const std::string& location, const StoreOptions& options) {
       SqliteStoreOptions sqlite;
       sqlite.store = options;
       return OpenSqliteStore(location, sqlite);
     }},
};

constexpr absl::Duration kTtl = absl::Hours(1);

class StoreContractTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    auto opened = Open();
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = std::move(*opened);
  }

  absl::StatusOr<std::unique_ptr<Store>> Open(StoreObserver observer = nullptr) {
    return GetParam().open(dir_.path(),
                           StoreOptions{.clock = clock_.AsFunction(), .observer = observer});
  }

  NewSandbox Request(std::string owner = "ak-owner000001") {
    return NewSandbox{.owner = ApiKeyId(std::move(owner)),
                      .spec = SpecJson(),
                      .ttl = kTtl,
                      .node = NodeId("node-test"),
                      .actor = "test"};
  }

  // A real effective spec, as the daemon stores it.
  static nlohmann::json SpecJson() {
    auto spec = spec::ParseSpec("workdir: /sandbox/workspace\n", spec::Format::kYaml, {});
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? spec::ToJson(*spec) : nlohmann::json::object();
  }

  SandboxRecord MustCreate(NewSandbox request) {
    auto created = store_->CreateSandbox(request);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? created->sandbox : SandboxRecord{};
  }

  // Transition that must succeed.
  void Move(const SandboxId& id, SandboxState from, SandboxState to) {
    auto moved = store_->Transition({.id = id, .from = {from}, .to = to, .actor = "t"});
    EXPECT_TRUE(moved.ok()) << moved.status();
  }

  // Running -> Cleaning -> Gone.
  void Retire(const SandboxId& id) {
    Move(id, SandboxState::kRunning, SandboxState::kCleaning);
    Move(id, SandboxState::kCleaning, SandboxState::kGone);
  }

  // Walks a new sandbox from Allocating to `to` along the lifecycle.
  SandboxRecord CreateIn(SandboxState to, NewSandbox request) {
    SandboxRecord s = MustCreate(std::move(request));
    const SandboxState path[] = {SandboxState::kPreparingImage, SandboxState::kMountingWorkspace,
                                 SandboxState::kStarting, SandboxState::kRunning};
    for (SandboxState next : path) {
      if (s.state == to) break;
      auto moved = store_->Transition({.id = s.id, .from = {s.state}, .to = next, .actor = "t"});
      EXPECT_TRUE(moved.ok()) << moved.status();
      if (!moved.ok()) break;
      s = *moved;
    }
    return s;
  }

  std::vector<AuditEvent> EventsOf(const SandboxId& id) {
    auto events = store_->ListEvents({.sandbox = id});
    EXPECT_TRUE(events.ok()) << events.status();
    return events.ok() ? *events : std::vector<AuditEvent>{};
  }

  TempDir dir_;
  test::FakeClock clock_;
  std::unique_ptr<Store> store_;
};

// --- Sandboxes: create and get --------------------------------------------------------------

TEST_P(StoreContractTest, CreateThenGetReturnsEveryField) {
  NewSandbox request = Request();
  request.template_name = "python";
  request.image_digest = "sha256:" + std::string(64, 'a');
  request.metadata = {{"team", "infra"}, {"run", "42"}};
  request.idle_timeout = absl::Minutes(10);
  request.idempotency_key = "req-1";
  ASSERT_OK_AND_ASSIGN(CreateResult created, store_->CreateSandbox(request));
  EXPECT_TRUE(created.created);
  const SandboxRecord& s = created.sandbox;
  EXPECT_THAT(s.id.value(), HasSubstr("sb-"));
  EXPECT_EQ(s.state, SandboxState::kAllocating);
  EXPECT_EQ(s.owner, request.owner);
  EXPECT_EQ(s.spec, request.spec);
  EXPECT_EQ(s.spec.at("workdir"), "/sandbox/workspace");
  EXPECT_EQ(s.template_name, "python");
  EXPECT_EQ(s.image_digest, request.image_digest);
  EXPECT_EQ(s.metadata, request.metadata);
  EXPECT_EQ(s.ttl, kTtl);
  EXPECT_EQ(s.idle_timeout, absl::Minutes(10));
  EXPECT_EQ(s.created_at, clock_.Now());
  EXPECT_EQ(s.updated_at, clock_.Now());
  EXPECT_EQ(s.last_activity_at, clock_.Now());
  EXPECT_EQ(s.expires_at, clock_.Now() + kTtl);
  EXPECT_EQ(s.idempotency_key, "req-1");
  EXPECT_EQ(s.node, NodeId("node-test"));
  EXPECT_EQ(s.runtime, RuntimeInfo{});
  EXPECT_EQ(s.last_error, "");

  ASSERT_OK_AND_ASSIGN(SandboxRecord got, store_->GetSandbox(s.id));
  EXPECT_EQ(got.id, s.id);
  EXPECT_EQ(got.spec, s.spec);
  EXPECT_EQ(got.metadata, s.metadata);
  EXPECT_EQ(got.expires_at, s.expires_at);
  EXPECT_EQ(got.idempotency_key, "req-1");
}

TEST_P(StoreContractTest, CreateRecordsTheFirstTransitionInTheSameCall) {
  SandboxRecord s = MustCreate(Request());
  std::vector<AuditEvent> events = EventsOf(s.id);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, AuditKind::kStateTransition);
  EXPECT_EQ(events[0].from, std::nullopt);
  EXPECT_EQ(events[0].to, SandboxState::kAllocating);
  EXPECT_EQ(events[0].actor, "test");
  EXPECT_EQ(events[0].time, clock_.Now());
  EXPECT_GT(events[0].seq, 0);
}

TEST_P(StoreContractTest, CreateWithATakenIdIsAlreadyExists) {
  NewSandbox request = Request();
  request.id = SandboxId("sb-fixed000001");
  MustCreate(request);
  auto again = store_->CreateSandbox(request);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  EXPECT_THAT(again.status().message(), HasSubstr("sb-fixed000001"));
}

TEST_P(StoreContractTest, CreateRefusesMalformedRequests) {
  NewSandbox no_owner = Request();
  no_owner.owner = ApiKeyId();
  NewSandbox no_ttl = Request();
  no_ttl.ttl = absl::ZeroDuration();
  NewSandbox no_actor = Request();
  no_actor.actor.clear();
  NewSandbox empty_key = Request();
  empty_key.metadata = {{"", "x"}};
  for (const NewSandbox& r : {no_owner, no_ttl, no_actor, empty_key}) {
    EXPECT_EQ(store_->CreateSandbox(r).status().code(), absl::StatusCode::kInvalidArgument);
  }
  ASSERT_OK_AND_ASSIGN(SandboxPage page, store_->ListSandboxes({}));
  EXPECT_TRUE(page.sandboxes.empty());
}

TEST_P(StoreContractTest, GetUnknownSandboxIsNotFound) {
  auto got = store_->GetSandbox(SandboxId("sb-nothere"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr("sb-nothere"));
}

// --- Idempotency -----------------------------------------------------------------------------

TEST_P(StoreContractTest, SameIdempotencyKeyReturnsTheFirstSandbox) {
  NewSandbox first = Request();
  first.idempotency_key = "key-1";
  first.metadata = {{"attempt", "1"}};
  ASSERT_OK_AND_ASSIGN(CreateResult a, store_->CreateSandbox(first));
  NewSandbox retry = first;
  retry.metadata = {{"attempt", "2"}};
  retry.template_name = "other";
  clock_.Advance(absl::Seconds(5));
  ASSERT_OK_AND_ASSIGN(CreateResult b, store_->CreateSandbox(retry));
  EXPECT_TRUE(a.created);
  EXPECT_FALSE(b.created);
  EXPECT_EQ(b.sandbox.id, a.sandbox.id);
  EXPECT_EQ(b.sandbox.metadata, first.metadata);  // the first request's, not the retry's
  EXPECT_EQ(b.sandbox.created_at, a.sandbox.created_at);
  EXPECT_EQ(EventsOf(a.sandbox.id).size(), 1u);

  // The key is per owner, and no key means no deduplication.
  ASSERT_OK_AND_ASSIGN(CreateResult other_owner, store_->CreateSandbox([&] {
    NewSandbox r = first;
    r.owner = ApiKeyId("ak-otherowner01");
    return r;
  }()));
  EXPECT_TRUE(other_owner.created);
  EXPECT_NE(other_owner.sandbox.id, a.sandbox.id);
  EXPECT_TRUE(store_->CreateSandbox(Request()).value().created);
  EXPECT_TRUE(store_->CreateSandbox(Request()).value().created);
  ASSERT_OK_AND_ASSIGN(SandboxPage page, store_->ListSandboxes({}));
  EXPECT_EQ(page.sandboxes.size(), 4u);
}

// Retries of one create race from 3 Store objects x 8 threads each: every key yields exactly one
// sandbox, every caller gets that sandbox, and exactly one caller per key sees created = true.
TEST_P(StoreContractTest, ConcurrentCreatesWithOneKeyCreateExactlyOne) {
  constexpr int kStores = 3, kThreadsPerStore = 8, kKeys = 10;
  std::vector<std::unique_ptr<Store>> stores;
  for (int i = 0; i < kStores; ++i) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> s, Open());
    stores.push_back(std::move(s));
  }
  std::mutex mu;
  std::map<std::string, std::set<std::string>> ids_by_key;
  std::map<std::string, int> created_by_key;
  std::atomic<int> failures{0};
  std::barrier start(kStores * kThreadsPerStore);
  std::vector<std::thread> threads;
  for (int t = 0; t < kStores * kThreadsPerStore; ++t) {
    threads.emplace_back([&, t] {
      Store& store = *stores[static_cast<size_t>(t % kStores)];
      start.arrive_and_wait();
      for (int k = 0; k < kKeys; ++k) {
        NewSandbox r = Request();
        r.idempotency_key = "retry-" + std::to_string(k);
        auto result = store.CreateSandbox(r);
        if (!result.ok()) {
          ++failures;
          ADD_FAILURE() << result.status();
          continue;
        }
        std::lock_guard lock(mu);
        ids_by_key[r.idempotency_key].insert(result->sandbox.id.value());
        created_by_key[r.idempotency_key] += result->created ? 1 : 0;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(ids_by_key.size(), static_cast<size_t>(kKeys));
  for (const auto& [key, ids] : ids_by_key) {
    EXPECT_EQ(ids.size(), 1u) << key;
    EXPECT_EQ(created_by_key[key], 1) << key;
    EXPECT_EQ(EventsOf(SandboxId(*ids.begin())).size(), 1u) << key;
  }
  ASSERT_OK_AND_ASSIGN(SandboxPage page, store_->ListSandboxes({}));
  EXPECT_EQ(page.sandboxes.size(), static_cast<size_t>(kKeys));
}

// Two processes write at once: each creates 40 sandboxes of its own and walks them to Running,
// and both retry the same 20 idempotent creates. Nothing is lost, nothing doubled, and the audit
// sequence is strictly increasing.
TEST_P(StoreContractTest, TwoProcessesWritingAtOnce) {
  constexpr int kOwn = 40, kShared = 20, kProcesses = 2;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(ready[1]);
      char go;
      if (::read(ready[0], &go, 1) != 0) ::_exit(10);  // start together when the pipe closes
      auto store = Open();
      if (!store.ok()) ::_exit(11);
      for (int i = 0; i < kOwn + kShared; ++i) {
        NewSandbox r = Request("ak-process00000" + std::to_string(p));
        if (i >= kOwn) {
          r.owner = ApiKeyId("ak-shared000000");
          r.idempotency_key = "shared-" + std::to_string(i);
        }
        auto created = (*store)->CreateSandbox(r);
        if (!created.ok()) ::_exit(12);
        if (i >= kOwn) continue;
        SandboxState state = SandboxState::kAllocating;
        for (SandboxState next : {SandboxState::kPreparingImage, SandboxState::kMountingWorkspace,
                                  SandboxState::kStarting, SandboxState::kRunning}) {
          auto moved = (*store)->Transition(
              {.id = created->sandbox.id, .from = {state}, .to = next, .actor = "child"});
          if (!moved.ok()) ::_exit(13);
          state = next;
        }
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  ::close(ready[0]);
  ::close(ready[1]);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }

  ASSERT_OK_AND_ASSIGN(SandboxPage running,
                       store_->ListSandboxes({.states = {SandboxState::kRunning}, .limit = 1000}));
  EXPECT_EQ(running.sandboxes.size(), static_cast<size_t>(kOwn * kProcesses));
  ASSERT_OK_AND_ASSIGN(SandboxPage shared,
                       store_->ListSandboxes({.owner = ApiKeyId("ak-shared000000")}));
  EXPECT_EQ(shared.sandboxes.size(), static_cast<size_t>(kShared));
  ASSERT_OK_AND_ASSIGN(std::vector<AuditEvent> events, store_->ListEvents({.limit = 10000}));
  EXPECT_EQ(events.size(), static_cast<size_t>(kOwn * kProcesses * 5 + kShared));
  for (size_t i = 1; i < events.size(); ++i) ASSERT_GT(events[i].seq, events[i - 1].seq);
}

// --- Transitions -------------------------------------------------------------------------------

TEST_P(StoreContractTest, TransitionWalksTheLifecycleAndAuditsEveryStep) {
  SandboxRecord s = MustCreate(Request());
  const SandboxState steps[] = {SandboxState::kPreparingImage,
                                SandboxState::kMountingWorkspace,
                                SandboxState::kStarting,
                                SandboxState::kRunning,
                                SandboxState::kPaused,
                                SandboxState::kRunning,
                                SandboxState::kCollectingArtifacts,
                                SandboxState::kCleaning,
                                SandboxState::kGone};
  SandboxState from = s.state;
  for (SandboxState to : steps) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK_AND_ASSIGN(SandboxRecord moved,
                         store_->Transition({.id = s.id,
                                             .from = {from},
                                             .to = to,
                                             .actor = "manager",
                                             .reason = std::string(ToString(to)) + " reason",
                                             .data = {{"step", ToString(to)}}}));
    EXPECT_EQ(moved.state, to);
    EXPECT_EQ(moved.updated_at, clock_.Now());
    from = to;
  }
  std::vector<AuditEvent> events = EventsOf(s.id);
  ASSERT_EQ(events.size(), 1 + std::size(steps));
  SandboxState before = SandboxState::kAllocating;
  for (size_t i = 0; i < std::size(steps); ++i) {
    const AuditEvent& e = events[i + 1];
    EXPECT_EQ(e.kind, AuditKind::kStateTransition);
    EXPECT_EQ(e.from, before);
    EXPECT_EQ(e.to, steps[i]);
    EXPECT_EQ(e.actor, "manager");
    EXPECT_EQ(e.reason, std::string(ToString(steps[i])) + " reason");
    EXPECT_EQ(e.data.at("step"), ToString(steps[i]));
    before = steps[i];
  }
}

TEST_P(StoreContractTest, TransitionFromAStaleStateFailsAndChangesNothing) {
  SandboxRecord s = CreateIn(SandboxState::kRunning, Request());
  size_t events_before = EventsOf(s.id).size();
  auto stale = store_->Transition({.id = s.id,
                                   .from = {SandboxState::kStarting},
                                   .to = SandboxState::kFailed,
                                   .actor = "manager"});
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.status().message(), HasSubstr("Running"));   // found
  EXPECT_THAT(stale.status().message(), HasSubstr("Starting"));  // expected
  EXPECT_THAT(stale.status().message(), HasSubstr(s.id.value()));
  EXPECT_EQ(store_->GetSandbox(s.id)->state, SandboxState::kRunning);
  EXPECT_EQ(EventsOf(s.id).size(), events_before);
}

TEST_P(StoreContractTest, TransitionAcceptsAnyOfSeveralExpectedStatesAndRecordsTheActualOne) {
  SandboxRecord s = CreateIn(SandboxState::kRunning, Request());
  ASSERT_OK_AND_ASSIGN(SandboxRecord moved,
                       store_->Transition({.id = s.id,
                                           .from = {SandboxState::kRunning, SandboxState::kPaused},
                                           .to = SandboxState::kCleaning,
                                           .actor = "reaper"}));
  EXPECT_EQ(moved.state, SandboxState::kCleaning);
  EXPECT_EQ(EventsOf(s.id).back().from, SandboxState::kRunning);
}

TEST_P(StoreContractTest, TransitionRefusesEdgesOutsideTheLifecycle) {
  SandboxRecord s = MustCreate(Request());
  auto skip = store_->Transition({.id = s.id,
                                  .from = {SandboxState::kAllocating},
                                  .to = SandboxState::kRunning,
                                  .actor = "manager"});
  EXPECT_EQ(skip.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(skip.status().message(), HasSubstr("Allocating -> Running"));
  auto revive = store_->Transition(
      {.id = s.id, .from = {SandboxState::kGone}, .to = SandboxState::kRunning, .actor = "x"});
  EXPECT_EQ(revive.status().code(), absl::StatusCode::kFailedPrecondition);
  auto nothing = store_->Transition({.id = s.id, .from = {}, .to = SandboxState::kCleaning});
  EXPECT_EQ(nothing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetSandbox(s.id)->state, SandboxState::kAllocating);
}

TEST_P(StoreContractTest, TransitionOfUnknownSandboxIsNotFound) {
  auto r = store_->Transition({.id = SandboxId("sb-nothere"),
                               .from = {SandboxState::kRunning},
                               .to = SandboxState::kPaused,
                               .actor = "x"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreContractTest, ConcurrentTransitionsFromOneStateHaveOneWinner) {
  SandboxRecord s = CreateIn(SandboxState::kRunning, Request());
  constexpr int kThreads = 16;
  std::atomic<int> won{0}, lost{0};
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      auto r = store_->Transition({.id = s.id,
                                   .from = {SandboxState::kRunning},
                                   .to = i % 2 ? SandboxState::kPaused : SandboxState::kCleaning,
                                   .actor = "racer"});
      if (r.ok()) {
        ++won;
      } else if (r.status().code() == absl::StatusCode::kFailedPrecondition) {
        ++lost;
      } else {
        ADD_FAILURE() << r.status();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(lost.load(), kThreads - 1);
  std::vector<AuditEvent> events = EventsOf(s.id);
  EXPECT_EQ(std::count_if(events.begin(), events.end(),
                          [](const AuditEvent& e) { return e.actor == "racer"; }),
            1);
}

TEST_P(StoreContractTest, TransitionSetsAndClearsTheLastError) {
  SandboxRecord s = CreateIn(SandboxState::kStarting, Request());
  ASSERT_OK_AND_ASSIGN(SandboxRecord failed,
                       store_->Transition({.id = s.id,
                                           .from = {SandboxState::kStarting},
                                           .to = SandboxState::kFailed,
                                           .actor = "manager",
                                           .reason = "setup failed",
                                           .error = "mount workspace: Permission denied"}));
  EXPECT_EQ(failed.state, SandboxState::kFailed);
  EXPECT_EQ(failed.last_error, "mount workspace: Permission denied");

  SandboxRecord t = CreateIn(SandboxState::kRunning, Request());
  ASSERT_OK(store_
                ->Transition({.id = t.id,
                              .from = {SandboxState::kRunning},
                              .to = SandboxState::kCleaning,
                              .actor = "reaper",
                              .error = "remove cgroup: Device or resource busy"})
                .status());
  ASSERT_OK_AND_ASSIGN(SandboxRecord gone, store_->Transition({.id = t.id,
                                                               .from = {SandboxState::kCleaning},
                                                               .to = SandboxState::kGone,
                                                               .actor = "reaper",
                                                               .error = ""}));
  EXPECT_EQ(gone.last_error, "");
}

// --- Activity, TTL, expiry ---------------------------------------------------------------------

TEST_P(StoreContractTest, ListExpiredFindsSandboxesPastTtlOrIdleTimeout) {
  const absl::Time t0 = clock_.Now();
  NewSandbox idle = Request();
  idle.idle_timeout = absl::Minutes(10);
  SandboxRecord a = CreateIn(SandboxState::kRunning, idle);  // idle deadline t0+10m
  NewSandbox short_ttl = Request();
  short_ttl.ttl = absl::Minutes(30);
  SandboxRecord b = CreateIn(SandboxState::kRunning, short_ttl);  // expires t0+30m
  SandboxRecord c = CreateIn(SandboxState::kRunning, Request());  // expires t0+60m
  auto expired_at = [&](absl::Time now) {
    std::vector<std::string> ids;
    auto list = store_->ListExpired(now, 100);
    EXPECT_TRUE(list.ok()) << list.status();
    for (const SandboxRecord& s : list.value_or(std::vector<SandboxRecord>{})) {
      ids.push_back(s.id.value());
    }
    return ids;
  };
  EXPECT_THAT(expired_at(t0 + absl::Minutes(9)), ElementsAre());
  EXPECT_THAT(expired_at(t0 + absl::Minutes(10)), ElementsAre(a.id.value()));

  // Activity pushes the idle deadline, never backwards.
  ASSERT_OK(store_->Touch(a.id, t0 + absl::Minutes(8)));
  ASSERT_OK(store_->Touch(a.id, t0 + absl::Minutes(2)));
  EXPECT_EQ(store_->GetSandbox(a.id)->last_activity_at, t0 + absl::Minutes(8));
  EXPECT_THAT(expired_at(t0 + absl::Minutes(17)), ElementsAre());
  EXPECT_THAT(expired_at(t0 + absl::Minutes(31)), ElementsAre(a.id.value(), b.id.value()));
  EXPECT_THAT(expired_at(t0 + absl::Minutes(61)),
              ElementsAre(a.id.value(), b.id.value(), c.id.value()));
  auto limited = store_->ListExpired(t0 + absl::Minutes(61), 1);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->size(), 1u);

  // A sandbox that is gone is never reaped again; one being cleaned still is (retries).
  Move(b.id, SandboxState::kRunning, SandboxState::kCleaning);
  Move(c.id, SandboxState::kRunning, SandboxState::kCleaning);
  Move(c.id, SandboxState::kCleaning, SandboxState::kGone);
  EXPECT_THAT(expired_at(t0 + absl::Minutes(61)), ElementsAre(a.id.value(), b.id.value()));
  EXPECT_EQ(store_->ListExpired(t0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreContractTest, StartingAndFinishingACommandCountsAsActivity) {
  const absl::Time t0 = clock_.Now();
  NewSandbox idle = Request();
  idle.idle_timeout = absl::Minutes(10);
  SandboxRecord s = CreateIn(SandboxState::kRunning, idle);
  auto expired_at = [&](absl::Time now) {
    auto list = store_->ListExpired(now, 100);
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? list->size() : size_t{99};
  };
  clock_.Advance(absl::Minutes(4));
  CommandRecord cmd{.id = CommandId("cmd-00000000000a"), .sandbox = s.id, .argv = {"true"}};
  ASSERT_OK(store_->PutCommand(cmd, "key:ak-x"));
  EXPECT_EQ(store_->GetSandbox(s.id)->last_activity_at, t0 + absl::Minutes(4));
  EXPECT_EQ(expired_at(t0 + absl::Minutes(13)), 0u);
  EXPECT_EQ(expired_at(t0 + absl::Minutes(14)), 1u);

  clock_.Advance(absl::Minutes(3));
  ASSERT_OK(store_->FinishCommand(cmd.id, CommandState::kFinished, {{"exit_code", 0}}).status());
  EXPECT_EQ(store_->GetSandbox(s.id)->last_activity_at, t0 + absl::Minutes(7));
  EXPECT_EQ(expired_at(t0 + absl::Minutes(16)), 0u);
  EXPECT_EQ(expired_at(t0 + absl::Minutes(17)), 1u);

  // A refused finish (the command already ended) records nothing.
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(store_->FinishCommand(cmd.id, CommandState::kKilled, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->GetSandbox(s.id)->last_activity_at, t0 + absl::Minutes(7));
}

TEST_P(StoreContractTest, CountSandboxesCountsByState) {
  SandboxRecord a = CreateIn(SandboxState::kRunning, Request());
  CreateIn(SandboxState::kRunning, Request());
  CreateIn(SandboxState::kStarting, Request());
  Retire(a.id);
  auto count = [&](std::vector<SandboxState> states) {
    auto n = store_->CountSandboxes(states);
    EXPECT_TRUE(n.ok()) << n.status();
    return n.value_or(-1);
  };
  EXPECT_EQ(count({SandboxState::kRunning}), 1);
  EXPECT_EQ(count({SandboxState::kRunning, SandboxState::kStarting}), 2);
  EXPECT_EQ(count({SandboxState::kGone}), 1);
  EXPECT_EQ(count({SandboxState::kPaused}), 0);
  EXPECT_EQ(count({}), 3);
}

TEST_P(StoreContractTest, TouchOfUnknownSandboxIsNotFound) {
  EXPECT_EQ(store_->Touch(SandboxId("sb-nothere"), clock_.Now()).code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreContractTest, ExtendTtlMovesExpiryForwardOnlyAndIsAudited) {
  const absl::Time t0 = clock_.Now();
  SandboxRecord s = CreateIn(SandboxState::kRunning, Request());
  ASSERT_OK_AND_ASSIGN(SandboxRecord later, store_->ExtendTtl(s.id, t0 + absl::Hours(3), "user"));
  EXPECT_EQ(later.expires_at, t0 + absl::Hours(3));
  EXPECT_EQ(later.ttl, absl::Hours(3));
  ASSERT_OK_AND_ASSIGN(SandboxRecord same, store_->ExtendTtl(s.id, t0 + absl::Hours(2), "user"));
  EXPECT_EQ(same.expires_at, t0 + absl::Hours(3));
  EXPECT_TRUE(store_->ListExpired(t0 + absl::Hours(2), 10)->empty());
  EXPECT_EQ(store_->ListExpired(t0 + absl::Hours(3), 10)->size(), 1u);
  const AuditEvent e = EventsOf(s.id).back();
  EXPECT_EQ(e.kind, AuditKind::kTtlExtended);
  EXPECT_EQ(e.actor, "user");

  Retire(s.id);
  auto gone = store_->ExtendTtl(s.id, t0 + absl::Hours(9), "user");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(gone.status().message(), HasSubstr("Gone"));
  EXPECT_EQ(store_->ExtendTtl(SandboxId("sb-nothere"), t0, "user").status().code(),
            absl::StatusCode::kNotFound);
}

// --- Sandboxes: the warm pool's hand-over ----------------------------------------------------

const ApiKeyId kPoolOwner("ak-warm-pool");

TEST_P(StoreContractTest, ClaimHandsAPooledSandboxToItsNewOwnerOnce) {
  SandboxRecord pooled = CreateIn(SandboxState::kRunning, Request(kPoolOwner.value()));
  const RuntimeInfo rt{.shim_pid = 4242, .shim_socket = "/s.sock", .cgroup_path = "airlock/x"};
  ASSERT_TRUE(store_->UpdateRuntime(pooled.id, rt).ok());
  const size_t events_before = EventsOf(pooled.id).size();
  clock_.Advance(absl::Minutes(10));
  const absl::Time claimed_at = clock_.Now();
  NewSandbox request = Request();
  request.template_name = "default";
  request.metadata = {{"task", "t-1"}};
  request.ttl = absl::Hours(2);
  request.idle_timeout = absl::Minutes(5);
  request.idempotency_key = "key-claim";
  request.actor = "key:ak-owner000001";
  ASSERT_OK_AND_ASSIGN(CreateResult claimed, store_->ClaimSandbox(pooled.id, kPoolOwner, request));
  EXPECT_TRUE(claimed.created);
  EXPECT_EQ(claimed.sandbox.id, pooled.id);
  ASSERT_OK_AND_ASSIGN(SandboxRecord got, store_->GetSandbox(pooled.id));
  for (const SandboxRecord& r : {claimed.sandbox, got}) {
    EXPECT_EQ(r.owner, request.owner);
    EXPECT_EQ(r.state, SandboxState::kRunning);
    EXPECT_EQ(r.metadata, request.metadata);
    EXPECT_EQ(r.template_name, "default");
    EXPECT_EQ(r.idempotency_key, "key-claim");
    EXPECT_EQ(r.created_at, claimed_at);  // the TTL counts from the hand-over
    EXPECT_EQ(r.expires_at, claimed_at + absl::Hours(2));
    EXPECT_EQ(r.ttl, absl::Hours(2));
    EXPECT_EQ(r.idle_timeout, absl::Minutes(5));
    EXPECT_EQ(r.runtime, rt);
    EXPECT_EQ(r.spec, pooled.spec);
  }
  // The trail from the pool's start is kept, and the hand-over is its own event.
  std::vector<AuditEvent> events = EventsOf(pooled.id);
  ASSERT_EQ(events.size(), events_before + 1);
  EXPECT_EQ(events.back().kind, AuditKind::kSandboxClaimed);
  EXPECT_EQ(events.back().actor, "key:ak-owner000001");
  EXPECT_EQ(events.back().data.value("owner", ""), "ak-owner000001");
  EXPECT_EQ(events.back().data.value("from_owner", ""), kPoolOwner.value());
  // The idle clock starts at the hand-over too.
  EXPECT_TRUE(store_->ListExpired(claimed_at + absl::Minutes(4), 10)->empty());
  EXPECT_EQ(store_->ListExpired(claimed_at + absl::Minutes(5), 10)->size(), 1u);

  // Never handed out twice: the pool no longer owns it.
  NewSandbox other = Request("ak-otherowner01");
  auto again = store_->ClaimSandbox(pooled.id, kPoolOwner, other);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition) << again.status();
  ASSERT_OK_AND_ASSIGN(SandboxPage pool, store_->ListSandboxes({.owner = kPoolOwner}));
  EXPECT_TRUE(pool.sandboxes.empty());
  ASSERT_OK_AND_ASSIGN(SandboxPage mine, store_->ListSandboxes({.owner = request.owner}));
  ASSERT_EQ(mine.sandboxes.size(), 1u);
  EXPECT_EQ(mine.sandboxes[0].id, pooled.id);
}

TEST_P(StoreContractTest, ClaimWithAKeyUsedBeforeReturnsThatSandboxAndLeavesThePoolAlone) {
  NewSandbox request = Request();
  request.idempotency_key = "key-1";
  ASSERT_OK_AND_ASSIGN(CreateResult first, store_->CreateSandbox(request));
  SandboxRecord pooled = CreateIn(SandboxState::kRunning, Request(kPoolOwner.value()));
  ASSERT_OK_AND_ASSIGN(CreateResult retry, store_->ClaimSandbox(pooled.id, kPoolOwner, request));
  EXPECT_FALSE(retry.created);
  EXPECT_EQ(retry.sandbox.id, first.sandbox.id);
  ASSERT_OK_AND_ASSIGN(SandboxRecord still, store_->GetSandbox(pooled.id));
  EXPECT_EQ(still.owner, kPoolOwner);
  EXPECT_NE(EventsOf(pooled.id).back().kind, AuditKind::kSandboxClaimed);
}

TEST_P(StoreContractTest, ClaimRefusesASandboxNotReadyOrOfAnotherSpec) {
  SandboxRecord starting = CreateIn(SandboxState::kStarting, Request(kPoolOwner.value()));
  auto r = store_->ClaimSandbox(starting.id, kPoolOwner, Request());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("Starting"));

  SandboxRecord ready = CreateIn(SandboxState::kRunning, Request(kPoolOwner.value()));
  NewSandbox other_spec = Request();
  other_spec.spec["hostname"] = "elsewhere";
  r = store_->ClaimSandbox(ready.id, kPoolOwner, other_spec);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("spec"));
  // Someone else's sandbox is not the pool's to hand out.
  SandboxRecord users = CreateIn(SandboxState::kRunning, Request("ak-otherowner01"));
  r = store_->ClaimSandbox(users.id, kPoolOwner, Request());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ(store_->GetSandbox(users.id)->owner, ApiKeyId("ak-otherowner01"));
  NewSandbox no_ttl = Request();
  no_ttl.ttl = absl::ZeroDuration();
  EXPECT_EQ(store_->ClaimSandbox(ready.id, kPoolOwner, no_ttl).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ClaimSandbox(SandboxId("sb-nothere"), kPoolOwner, Request()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetSandbox(ready.id)->owner, kPoolOwner);
}

// Eight callers race for one pooled sandbox from two Store objects: exactly one gets it.
TEST_P(StoreContractTest, ConcurrentClaimsOfOneSandboxHaveOneWinner) {
  SandboxRecord pooled = CreateIn(SandboxState::kRunning, Request(kPoolOwner.value()));
  auto second = Open();
  ASSERT_TRUE(second.ok()) << second.status();
  std::atomic<int> won{0}, refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      Store& s = i % 2 == 0 ? *store_ : **second;
      auto r = s.ClaimSandbox(pooled.id, kPoolOwner, Request(fmt::format("ak-claimer{:05d}", i)));
      if (r.ok() && r->created) ++won;
      if (!r.ok() && r.status().code() == absl::StatusCode::kFailedPrecondition) ++refused;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(refused.load(), 7);
  int claimed_events = 0;
  for (const AuditEvent& e : EventsOf(pooled.id)) {
    claimed_events += e.kind == AuditKind::kSandboxClaimed;
  }
  EXPECT_EQ(claimed_events, 1);
}

TEST_P(StoreContractTest, UpdateSpecIsStoredWithItsEventInOneStep) {
  SandboxRecord s = CreateIn(SandboxState::kRunning, Request());
  nlohmann::json spec = s.spec;
  spec["network"] = {{"profile", "none"}};
  AuditEvent change{.actor = "user",
                    .kind = AuditKind::kNetworkPolicyChanged,
                    .reason = "policy tightened",
                    .data = {{"network", spec["network"]}}};
  ASSERT_OK_AND_ASSIGN(SandboxRecord updated, store_->UpdateSpec(s.id, spec, change));
  EXPECT_EQ(updated.spec, spec);
  EXPECT_EQ(store_->GetSandbox(s.id)->spec, spec);
  const AuditEvent e = EventsOf(s.id).back();
  EXPECT_EQ(e.kind, AuditKind::kNetworkPolicyChanged);
  EXPECT_EQ(e.sandbox, s.id);
  EXPECT_EQ(e.data, change.data);

  AuditEvent anonymous = change;
  anonymous.actor = "";
  EXPECT_EQ(store_->UpdateSpec(s.id, s.spec, anonymous).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetSandbox(s.id)->spec, spec) << "a refused update changes nothing";
  EXPECT_EQ(store_->UpdateSpec(SandboxId("sb-nothere"), spec, change).status().code(),
            absl::StatusCode::kNotFound);
  Retire(s.id);
  EXPECT_EQ(store_->UpdateSpec(s.id, s.spec, change).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->GetSandbox(s.id)->spec, spec);
}

TEST_P(StoreContractTest, UpdateRuntimeIsStored) {
  SandboxRecord s = MustCreate(Request());
  RuntimeInfo rt{.shim_pid = 4242,
                 .shim_socket = "/run/airlock/sb/shim.sock",
                 .cgroup_path = "/sys/fs/cgroup/airlock/sb"};
  ASSERT_OK(store_->UpdateRuntime(s.id, rt));
  EXPECT_EQ(store_->GetSandbox(s.id)->runtime, rt);
  EXPECT_EQ(store_->UpdateRuntime(SandboxId("sb-nothere"), rt).code(), absl::StatusCode::kNotFound);
}

// --- Listing -------------------------------------------------------------------------------------

TEST_P(StoreContractTest, ListFiltersByOwnerStateAndMetadata) {
  NewSandbox a = Request("ak-alice000001");
  a.metadata = {{"team", "infra"}, {"env", "ci"}};
  NewSandbox b = Request("ak-alice000001");
  b.metadata = {{"team", "infra"}, {"env", "dev"}};
  NewSandbox c = Request("ak-bob00000001");
  c.metadata = {{"team", "infra"}, {"env", "ci"}};
  SandboxRecord sa = CreateIn(SandboxState::kRunning, a);
  SandboxRecord sb = MustCreate(b);
  SandboxRecord sc = CreateIn(SandboxState::kRunning, c);
  auto ids = [&](const SandboxQuery& q) {
    std::set<std::string> out;
    auto page = store_->ListSandboxes(q);
    EXPECT_TRUE(page.ok()) << page.status();
    if (page.ok()) {
      for (const SandboxRecord& s : page->sandboxes) out.insert(s.id.value());
    }
    return out;
  };
  using Ids = std::set<std::string>;
  EXPECT_EQ(ids({.owner = ApiKeyId("ak-alice000001")}), (Ids{sa.id.value(), sb.id.value()}));
  EXPECT_EQ(ids({.states = {SandboxState::kRunning}}), (Ids{sa.id.value(), sc.id.value()}));
  EXPECT_EQ(ids({.states = {SandboxState::kAllocating, SandboxState::kPaused}}),
            (Ids{sb.id.value()}));
  EXPECT_EQ(ids({.metadata = {{"env", "ci"}}}), (Ids{sa.id.value(), sc.id.value()}));
  EXPECT_EQ(ids({.metadata = {{"team", "infra"}, {"env", "dev"}}}), (Ids{sb.id.value()}));
  EXPECT_EQ(ids({.metadata = {{"team", "ci"}}}), Ids{});
  EXPECT_EQ(ids({.owner = ApiKeyId("ak-alice000001"),
                 .states = {SandboxState::kRunning},
                 .metadata = {{"env", "ci"}}}),
            (Ids{sa.id.value()}));
  auto page = store_->ListSandboxes({.metadata = {{"env", "ci"}}});
  ASSERT_TRUE(page.ok());
  for (const SandboxRecord& s : page->sandboxes) EXPECT_EQ(s.metadata.size(), 2u);
}

TEST_P(StoreContractTest, ListPagesThroughEverySandboxOnceInCreationOrder) {
  std::vector<std::string> created;
  for (int i = 0; i < 7; ++i) {
    if (i % 3 == 0) clock_.Advance(absl::Milliseconds(1));  // some share a creation time
    created.push_back(MustCreate(Request()).id.value());
  }
  std::vector<std::string> seen;
  std::string cursor;
  int pages = 0;
  do {
    ASSERT_OK_AND_ASSIGN(SandboxPage page, store_->ListSandboxes({.cursor = cursor, .limit = 3}));
    EXPECT_LE(page.sandboxes.size(), 3u);
    for (const SandboxRecord& s : page.sandboxes) seen.push_back(s.id.value());
    cursor = page.next_cursor;
    ++pages;
  } while (!cursor.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  // Creation order; among equal creation times, id order.
  std::vector<std::string> expected = created;
  std::stable_sort(expected.begin(), expected.end(), [&](const auto& x, const auto& y) {
    auto tx = store_->GetSandbox(SandboxId(x))->created_at;
    auto ty = store_->GetSandbox(SandboxId(y))->created_at;
    return tx != ty ? tx < ty : x < y;
  });
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(store_->ListSandboxes({.cursor = "garbage"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ListSandboxes({.limit = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- Audit
// -----------------------------------------------------------------------------------------

TEST_P(StoreContractTest, AuditEventsAppendAndListBySandboxAndRange) {
  SandboxRecord a = MustCreate(Request());
  SandboxRecord b = MustCreate(Request());
  std::vector<int64_t> seqs;
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK_AND_ASSIGN(
        int64_t seq,
        store_->AppendEvent({.sandbox = i % 2 ? b.id : a.id,
                             .actor = "key:ak-x",
                             .kind = i % 3 ? AuditKind::kExec : AuditKind::kPolicyBlocked,
                             .reason = "rule sudo",
                             .data = {{"i", i}, {"argv", {"sudo", "true"}}}}));
    if (!seqs.empty()) {
      EXPECT_GT(seq, seqs.back());
    }
    seqs.push_back(seq);
  }
  ASSERT_OK_AND_ASSIGN(std::vector<AuditEvent> of_a, store_->ListEvents({.sandbox = a.id}));
  ASSERT_EQ(of_a.size(), 4u);  // its creation and i = 0, 2, 4
  EXPECT_EQ(of_a[1].kind, AuditKind::kPolicyBlocked);
  EXPECT_EQ(of_a[1].data.at("argv"), nlohmann::json({"sudo", "true"}));
  EXPECT_EQ(of_a[1].reason, "rule sudo");
  EXPECT_EQ(of_a[2].data.at("i"), 2);
  EXPECT_EQ(of_a[3].time, clock_.Now() - absl::Seconds(1));

  ASSERT_OK_AND_ASSIGN(std::vector<AuditEvent> range,
                       store_->ListEvents({.after_seq = seqs[1], .until_seq = seqs[4]}));
  ASSERT_EQ(range.size(), 3u);
  EXPECT_EQ(range.front().seq, seqs[2]);
  EXPECT_EQ(range.back().seq, seqs[4]);
  ASSERT_OK_AND_ASSIGN(std::vector<AuditEvent> first_two, store_->ListEvents({.limit = 2}));
  EXPECT_EQ(first_two.size(), 2u);
  EXPECT_EQ(store_->AppendEvent({.sandbox = a.id, .kind = AuditKind::kExec}).status().code(),
            absl::StatusCode::kInvalidArgument);  // no actor
}

// --- Commands ----------------------------------------------------------------------------------

TEST_P(StoreContractTest, CommandsRunFinishAndOutliveTheirSandbox) {
  SandboxRecord s = CreateIn(SandboxState::kRunning, Request());
  CommandRecord cmd{.id = CommandId("cmd-000000000001"),
                    .sandbox = s.id,
                    .argv = {"python3", "-c", "print(6*7)"},
                    .background = false};
  ASSERT_OK(store_->PutCommand(cmd, "key:ak-x"));
  ASSERT_OK_AND_ASSIGN(CommandRecord running, store_->GetCommand(cmd.id));
  EXPECT_EQ(running.state, CommandState::kRunning);
  EXPECT_EQ(running.argv, cmd.argv);
  EXPECT_EQ(running.started_at, clock_.Now());
  EXPECT_FALSE(running.finished_at.has_value());
  EXPECT_FALSE(running.result.has_value());
  const AuditEvent exec = EventsOf(s.id).back();
  EXPECT_EQ(exec.kind, AuditKind::kExec);
  EXPECT_EQ(exec.data.at("command_id"), "cmd-000000000001");
  EXPECT_EQ(exec.data.at("argv"), nlohmann::json(cmd.argv));

  CommandResult result;
  result.command_id = cmd.id;
  result.exit_code = 0;
  result.duration_ms = 21;
  result.stdout_preview = "42\n";
  result.usage.memory_peak_bytes = 5 << 20;
  clock_.Advance(absl::Milliseconds(21));
  ASSERT_OK_AND_ASSIGN(CommandRecord done,
                       store_->FinishCommand(cmd.id, CommandState::kFinished, ToJson(result)));
  EXPECT_EQ(done.state, CommandState::kFinished);
  EXPECT_EQ(done.finished_at, clock_.Now());
  ASSERT_TRUE(done.result.has_value());
  ASSERT_OK_AND_ASSIGN(CommandResult back, CommandResultFromJson(*done.result));
  EXPECT_EQ(back.stdout_preview, "42\n");
  EXPECT_EQ(back.usage.memory_peak_bytes, 5 << 20);

  auto twice = store_->FinishCommand(cmd.id, CommandState::kKilled, nlohmann::json::object());
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twice.status().message(), HasSubstr("finished"));
  EXPECT_EQ(store_->FinishCommand(cmd.id, CommandState::kRunning, {}).status().code(),
            absl::StatusCode::kInvalidArgument);

  CommandRecord bg{.id = CommandId("cmd-000000000002"),
                   .sandbox = s.id,
                   .argv = {"sleep", "100"},
                   .background = true};
  clock_.Advance(absl::Seconds(1));
  ASSERT_OK(store_->PutCommand(bg, "key:ak-x"));
  ASSERT_OK(store_->FinishCommand(bg.id, CommandState::kKilled, {{"signal", 9}}).status());

  // The sandbox goes; its commands stay.
  Retire(s.id);
  ASSERT_OK_AND_ASSIGN(std::vector<CommandRecord> list, store_->ListCommands(s.id));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, cmd.id);
  EXPECT_EQ(list[1].id, bg.id);
  EXPECT_TRUE(list[1].background);
  EXPECT_EQ(list[1].state, CommandState::kKilled);
  EXPECT_EQ(list[1].result->at("signal"), 9);
}

TEST_P(StoreContractTest, CommandErrors) {
  SandboxRecord s = MustCreate(Request());
  CommandRecord cmd{.id = CommandId("cmd-1"), .sandbox = s.id, .argv = {"true"}};
  ASSERT_OK(store_->PutCommand(cmd, "x"));
  absl::Status dup = store_->PutCommand(cmd, "x");
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(dup.message(), HasSubstr("cmd-1"));
  CommandRecord orphan{
      .id = CommandId("cmd-2"), .sandbox = SandboxId("sb-nothere"), .argv = {"true"}};
  EXPECT_EQ(store_->PutCommand(orphan, "x").code(), absl::StatusCode::kNotFound);
  CommandRecord no_argv{.id = CommandId("cmd-3"), .sandbox = s.id};
  EXPECT_EQ(store_->PutCommand(no_argv, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetCommand(CommandId("cmd-nothere")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(
      store_->FinishCommand(CommandId("cmd-nothere"), CommandState::kFinished, {}).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->ListCommands(SandboxId("sb-nothere"))->empty());
}

// --- API keys ----------------------------------------------------------------------------------

TEST_P(StoreContractTest, ApiKeysAuthenticateUntilRevoked) {
  ASSERT_OK_AND_ASSIGN(NewApiKey key, store_->CreateApiKey("ci bot", "admin"));
  EXPECT_THAT(key.token, ::testing::MatchesRegex("ak_[0-9a-f]{12}_[0-9a-f]{64}"));
  EXPECT_EQ(key.token.substr(3, 12), key.key.id.value().substr(3));
  EXPECT_EQ(key.key.name, "ci bot");
  EXPECT_EQ(key.key.created_at, clock_.Now());

  clock_.Advance(absl::Seconds(5));
  ASSERT_OK_AND_ASSIGN(ApiKey who, store_->Authenticate(key.token));
  EXPECT_EQ(who.id, key.key.id);
  EXPECT_EQ(who.last_used_at, clock_.Now());
  EXPECT_EQ(store_->GetApiKey(key.key.id)->last_used_at, clock_.Now());
  // Within the minute, use is not written again.
  clock_.Advance(absl::Seconds(30));
  ASSERT_OK(store_->Authenticate(key.token).status());
  EXPECT_EQ(store_->GetApiKey(key.key.id)->last_used_at, clock_.Now() - absl::Seconds(30));

  // A wrong secret, a malformed token and an unknown key are all Unauthenticated, and no
  // message repeats what was presented.
  std::string wrong = key.token;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  std::string unknown = "ak_000000000000_" + key.token.substr(16);
  for (const std::string& bad : {wrong, unknown, std::string("ak_short"), key.token + "0",
                                 std::string("Bearer ") + key.token}) {
    auto r = store_->Authenticate(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_THAT(r.status().message(), Not(HasSubstr(key.token.substr(16)))) << bad;
  }

  ASSERT_OK(store_->RevokeApiKey(key.key.id, "admin"));
  auto revoked = store_->Authenticate(key.token);
  EXPECT_EQ(revoked.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(revoked.status().message(), HasSubstr("revoked"));
  EXPECT_EQ(store_->RevokeApiKey(key.key.id, "admin").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->RevokeApiKey(ApiKeyId("ak-000000000000"), "admin").code(),
            absl::StatusCode::kNotFound);

  ASSERT_OK_AND_ASSIGN(NewApiKey second, store_->CreateApiKey("human", "admin"));
  ASSERT_OK_AND_ASSIGN(std::vector<ApiKey> keys, store_->ListApiKeys());
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].id, key.key.id);
  EXPECT_TRUE(keys[0].revoked_at.has_value());
  EXPECT_EQ(keys[1].id, second.key.id);
  EXPECT_FALSE(keys[1].revoked_at.has_value());

  ASSERT_OK_AND_ASSIGN(std::vector<AuditEvent> events, store_->ListEvents({}));
  std::vector<AuditKind> kinds;
  for (const AuditEvent& e : events) kinds.push_back(e.kind);
  EXPECT_THAT(kinds, ElementsAre(AuditKind::kApiKeyCreated, AuditKind::kApiKeyRevoked,
                                 AuditKind::kApiKeyCreated));
  EXPECT_EQ(events[1].data.at("key_id"), key.key.id.value());
  for (const AuditEvent& e : events) EXPECT_THAT(e.data.dump(), Not(HasSubstr(key.token)));
  EXPECT_EQ(store_->CreateApiKey("", "admin").status().code(), absl::StatusCode::kInvalidArgument);
}

// --- Artifacts ---------------------------------------------------------------------------------

TEST_P(StoreContractTest, ArtifactsAreStoredWithTheirAuditEvent) {
  SandboxRecord s = CreateIn(SandboxState::kRunning, Request());
  ArtifactRecord report{.id = ArtifactId("art-1"),
                        .sandbox = s.id,
                        .path = "/sandbox/artifacts/report.html",
                        .size = 1234,
                        .sha256 = std::string(64, 'b'),
                        .status = ArtifactStatus::kReleased,
                        .blob_key = "sha256:" + std::string(64, 'b')};
  ArtifactRecord leaked{.id = ArtifactId("art-2"),
                        .sandbox = s.id,
                        .path = "/sandbox/artifacts/.env",
                        .size = 40,
                        .sha256 = std::string(64, 'c'),
                        .status = ArtifactStatus::kQuarantined,
                        .reason = "aws_access_key",
                        .blob_key = "sha256:" + std::string(64, 'c')};
  ASSERT_OK(store_->PutArtifact(report, "collector"));
  clock_.Advance(absl::Seconds(1));
  ASSERT_OK(store_->PutArtifact(leaked, "collector"));
  ASSERT_OK_AND_ASSIGN(ArtifactRecord got, store_->GetArtifact(leaked.id));
  EXPECT_EQ(got.path, leaked.path);
  EXPECT_EQ(got.size, 40);
  EXPECT_EQ(got.sha256, leaked.sha256);
  EXPECT_EQ(got.status, ArtifactStatus::kQuarantined);
  EXPECT_EQ(got.reason, "aws_access_key");
  EXPECT_EQ(got.blob_key, leaked.blob_key);
  EXPECT_EQ(got.created_at, clock_.Now());
  ASSERT_OK_AND_ASSIGN(std::vector<ArtifactRecord> list, store_->ListArtifacts(s.id));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, report.id);
  EXPECT_EQ(list[1].id, leaked.id);

  std::vector<AuditEvent> events = EventsOf(s.id);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2].kind, AuditKind::kArtifactReleased);
  EXPECT_EQ(events.back().kind, AuditKind::kArtifactQuarantined);
  EXPECT_EQ(events.back().reason, "aws_access_key");
  EXPECT_EQ(events.back().data.at("path"), "/sandbox/artifacts/.env");

  EXPECT_EQ(store_->PutArtifact(report, "collector").code(), absl::StatusCode::kAlreadyExists);
  ArtifactRecord orphan = report;
  orphan.id = ArtifactId("art-3");
  orphan.sandbox = SandboxId("sb-nothere");
  EXPECT_EQ(store_->PutArtifact(orphan, "collector").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetArtifact(ArtifactId("art-nothere")).status().code(),
            absl::StatusCode::kNotFound);
}

// --- Interpreter sessions ----------------------------------------------------------------------

TEST_P(StoreContractTest, InterpreterSessionsUpdateByVersion) {
  InterpSession session{.id = InterpSessionId("is-1"),
                        .owner = ApiKeyId("ak-owner000001"),
                        .state = "running",
                        .console_output = "hello\n"};
  ASSERT_OK_AND_ASSIGN(InterpSession v1, store_->PutInterpSession(session));
  EXPECT_EQ(v1.version, 1);
  EXPECT_EQ(v1.created_at, clock_.Now());
  EXPECT_EQ(store_->PutInterpSession(session).status().code(), absl::StatusCode::kAlreadyExists);

  clock_.Advance(absl::Seconds(2));
  InterpSession paused = v1;
  paused.state = "paused";
  paused.snapshot_blob = "sha256:" + std::string(64, 'd');
  paused.console_output += "waiting for approval\n";
  ASSERT_OK_AND_ASSIGN(InterpSession v2, store_->UpdateInterpSession(paused));
  EXPECT_EQ(v2.version, 2);
  EXPECT_EQ(v2.updated_at, clock_.Now());
  EXPECT_EQ(v2.created_at, v1.created_at);

  // A writer still holding version 1 loses.
  InterpSession stale = v1;
  stale.state = "finished";
  auto lost = store_->UpdateInterpSession(stale);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(lost.status().message(), HasSubstr("version 2, not 1"));

  ASSERT_OK_AND_ASSIGN(InterpSession got, store_->GetInterpSession(session.id));
  EXPECT_EQ(got.state, "paused");
  EXPECT_EQ(got.snapshot_blob, paused.snapshot_blob);
  EXPECT_EQ(got.console_output, "hello\nwaiting for approval\n");
  EXPECT_EQ(got.version, 2);
  EXPECT_EQ(got.owner, session.owner);
  EXPECT_EQ(store_->GetInterpSession(InterpSessionId("is-nothere")).status().code(),
            absl::StatusCode::kNotFound);
  InterpSession unknown = v1;
  unknown.id = InterpSessionId("is-nothere");
  EXPECT_EQ(store_->UpdateInterpSession(unknown).status().code(), absl::StatusCode::kNotFound);
}

// --- Durability, observation -------------------------------------------------------------------

TEST_P(StoreContractTest, EverythingSurvivesReopening) {
  SandboxRecord s = CreateIn(SandboxState::kRunning, Request());
  ASSERT_OK_AND_ASSIGN(NewApiKey key, store_->CreateApiKey("k", "admin"));
  ASSERT_OK(store_->PutCommand({.id = CommandId("cmd-1"), .sandbox = s.id, .argv = {"true"}}, "x"));
  size_t events = EventsOf(s.id).size();
  store_.reset();
  ASSERT_OK_AND_ASSIGN(store_, Open());
  EXPECT_EQ(store_->GetSandbox(s.id)->state, SandboxState::kRunning);
  EXPECT_EQ(EventsOf(s.id).size(), events);
  EXPECT_TRUE(store_->Authenticate(key.token).ok());
  EXPECT_EQ(store_->ListCommands(s.id)->size(), 1u);
}

TEST_P(StoreContractTest, EveryCallIsReportedToTheObserver) {
  StoreLatencyRecorder recorder;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> observed, Open(recorder.Observer()));
  ASSERT_OK(observed->CreateSandbox(Request()).status());
  EXPECT_FALSE(observed->GetSandbox(SandboxId("sb-nothere")).ok());
  ASSERT_OK(observed->ListEvents({}).status());
  std::map<std::string, StoreLatencyRecorder::OpStats> ops;
  for (const auto& op : recorder.Snapshot()) ops[op.op] = op;
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops["sandbox.create"].count, 1u);
  EXPECT_EQ(ops["sandbox.create"].errors, 0u);
  EXPECT_EQ(ops["sandbox.get"].errors, 1u);
  EXPECT_EQ(ops["audit.list"].count, 1u);
  EXPECT_GT(ops["sandbox.create"].sum_seconds, 0);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContractTest, ::testing::ValuesIn(kFactories),
                         [](const auto& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace airlock::store
