// Name lookups with a lookup function that stands in for DNS servers: "slow*" names answer after
// a delay, the rest at once.
#include "netproxy/internal/lookups.h"

#include <netdb.h>

#include <chrono>
#include <future>
#include <thread>

#include "gtest/gtest.h"

namespace airlock::netproxy::internal {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

struct FakeDns {
  milliseconds slow{1500};
  std::mutex mu;
  std::map<std::string, int> running;  // by the name's first letter group ("slow", "fast")
  int most_slow_at_once = 0;

  int Lookup(const std::string& name, uint16_t, std::vector<IpAddress>* out) {
    bool is_slow = name.starts_with("slow");
    {
      std::lock_guard lock(mu);
      if (is_slow) most_slow_at_once = std::max(most_slow_at_once, ++running["slow"]);
    }
    if (is_slow) std::this_thread::sleep_for(slow);
    {
      std::lock_guard lock(mu);
      if (is_slow) --running["slow"];
    }
    if (name.starts_with("missing")) return EAI_NONAME;
    out->push_back(*IpAddress::Parse("192.0.2.7"));
    return 0;
  }
};

// Waits for `call`'s on_done (signalled through `done`) up to `limit`.
bool Finished(std::future<void>& done, milliseconds limit) {
  return done.wait_for(limit) == std::future_status::ready;
}

TEST(LookupsTest, ResultsAndErrorsArriveWithTheCallback) {
  FakeDns dns;
  Lookups lookups(4, 8, [&](auto&&... a) { return dns.Lookup(a...); });
  int key = 0;
  std::promise<void> p1, p2;
  auto f1 = p1.get_future(), f2 = p2.get_future();
  auto ok = lookups.Start(&key, "fast.test", 443, [&] { p1.set_value(); });
  auto missing = lookups.Start(&key, "missing.test", 443, [&] { p2.set_value(); });
  ASSERT_TRUE(Finished(f1, milliseconds(5000)));
  ASSERT_TRUE(Finished(f2, milliseconds(5000)));
  std::lock_guard l1(ok->mu);
  EXPECT_TRUE(ok->done);
  EXPECT_EQ(ok->error, 0);
  ASSERT_EQ(ok->addresses.size(), 1u);
  EXPECT_EQ(ok->addresses[0].ToString(), "192.0.2.7");
  std::lock_guard l2(missing->mu);
  EXPECT_EQ(missing->error, EAI_NONAME);
}

// Attack: a sandbox floods the proxy with lookups of names whose DNS server answers slowly.
// Expected: it never has more than its limit running at once, and another sandbox's lookup
// is answered at once instead of waiting behind the flood.
TEST(LookupsTest, ASandboxsSlowLookupsDoNotDelayAnotherSandbox) {
  FakeDns dns;
  Lookups lookups(2, 16, [&](auto&&... a) { return dns.Lookup(a...); });
  int attacker = 0, victim = 0;
  std::atomic<int> slow_done{0};
  for (int i = 0; i < 10; ++i) {
    lookups.Start(&attacker, "slow" + std::to_string(i) + ".test", 443, [&] { ++slow_done; });
  }
  std::promise<void> p;
  auto f = p.get_future();
  auto t0 = Clock::now();
  lookups.Start(&victim, "fast.test", 443, [&] { p.set_value(); });
  ASSERT_TRUE(Finished(f, milliseconds(5000)));
  EXPECT_LT(Clock::now() - t0, milliseconds(500)) << "the victim waited behind the flood";
  // Two at a time: the ten slow lookups take five rounds.
  for (int i = 0; i < 200 && slow_done < 10; ++i) std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(slow_done, 10);
  std::lock_guard lock(dns.mu);
  EXPECT_EQ(dns.most_slow_at_once, 2);
}

TEST(LookupsTest, AnAbandonedLookupThatHasNotStartedNeverRuns) {
  FakeDns dns;
  dns.slow = milliseconds(300);
  Lookups lookups(1, 4, [&](auto&&... a) { return dns.Lookup(a...); });
  int key = 0;
  std::promise<void> first_done, second_done;
  auto f1 = first_done.get_future(), f2 = second_done.get_future();
  lookups.Start(&key, "slow-a.test", 443, [&] { first_done.set_value(); });
  auto second = lookups.Start(&key, "slow-b.test", 443, [&] { second_done.set_value(); });
  second->abandoned = true;  // a timeout while it waits behind the first
  ASSERT_TRUE(Finished(f1, milliseconds(5000)));
  ASSERT_TRUE(Finished(f2, milliseconds(5000)));  // its callback still comes, without a result
  std::lock_guard lock(second->mu);
  EXPECT_FALSE(second->done);
  EXPECT_TRUE(second->addresses.empty());
}

TEST(LookupsTest, NoCallbackRunsAfterStop) {
  FakeDns dns;
  dns.slow = milliseconds(300);
  std::atomic<int> callbacks{0};
  {
    Lookups lookups(4, 4, [&](auto&&... a) { return dns.Lookup(a...); });
    int key = 0;
    lookups.Start(&key, "slow.test", 443, [&] { ++callbacks; });
    std::this_thread::sleep_for(milliseconds(50));  // it is running now
    lookups.Stop();
  }  // returns at once; the lookup's thread finishes on its own
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_EQ(callbacks, 0);
}

// The callbacks hold the caller's objects (a session's strand and timer, which need the proxy's
// io_context): when Stop() returns, none may be left to run or be destroyed later, whether its
// lookup is running or still waiting.
TEST(LookupsTest, StopDestroysEveryPendingCallback) {
  FakeDns dns;
  dns.slow = milliseconds(400);
  std::weak_ptr<int> held_weak;
  Lookups lookups(1, 4, [&](auto&&... a) { return dns.Lookup(a...); });
  int key = 0;
  {
    auto held = std::make_shared<int>(1);
    held_weak = held;
    lookups.Start(&key, "slow-running.test", 443, [held] {});
    lookups.Start(&key, "slow-waiting.test", 443, [held] {});
  }
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_FALSE(held_weak.expired());
  lookups.Stop();
  EXPECT_TRUE(held_weak.expired());
  std::this_thread::sleep_for(milliseconds(500));  // the running lookup ends on its own
}

TEST(LookupsTest, SystemLookupResolvesLocalhost) {
  std::vector<IpAddress> out;
  ASSERT_EQ(SystemLookup("localhost", 80, &out), 0);
  ASSERT_FALSE(out.empty());
  bool loopback = false;
  for (const IpAddress& a : out) loopback |= a.ToString() == "127.0.0.1" || a.ToString() == "::1";
  EXPECT_TRUE(loopback);
}

}  // namespace
}  // namespace airlock::netproxy::internal
