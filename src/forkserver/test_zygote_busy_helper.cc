// A zygote for forkserver_test (started as the "python" template's zygote program): it keeps one
// helper thread parked in a futex wait, as node keeps its platform threads, and makes it wake at
// the worst moment. Every other fork attempt (every attempt with `--preload every`), after
// ForkWorker has found the helper parked and just before the clone, the helper is woken and
// takes a mutex, which it holds until that fork attempt is over. A worker cloned then inherits
// that mutex locked forever; ForkWorker must discard it and the fork-server ask again.
//
// A worker prints whether it could take the mutex and how many fork attempts the zygote had made
// when it was cloned (discarded ones included), and exits 0 if it could, 1 if not.
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string_view>

#include "forkserver/internal/zygote_side.h"

namespace {

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
std::atomic<uint32_t> g_wake{0};     // futex word: bumped to wake the helper
std::atomic<bool> g_holding{false};  // the helper holds the mutex
std::atomic<bool> g_release{false};  // the attempt is over: the helper lets go
long g_attempts = 0;

void* Helper(void*) {
  // `seen` is the last value acted on: a wake-up that finds it unchanged is spurious, and the wait
  // resumes on that same value, so a bump that lands meanwhile is not lost.
  uint32_t seen = g_wake.load();
  for (;;) {
    ::syscall(SYS_futex, &g_wake, FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
    uint32_t now = g_wake.load();
    if (now == seen) continue;
    seen = now;
    // Held (the helper running) until released, however the two threads are scheduled.
    pthread_mutex_lock(&g_mutex);
    g_holding = true;
    while (!g_release.exchange(false)) ::sched_yield();
    pthread_mutex_unlock(&g_mutex);
    g_holding = false;
  }
  return nullptr;
}

bool g_every_attempt = false;  // `--preload every`: no fork ever succeeds

void WakeHelper() {
  if (++g_attempts % 2 == 0 && !g_every_attempt) return;
  g_wake.fetch_add(1);
  ::syscall(SYS_futex, &g_wake, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  while (!g_holding.load()) ::sched_yield();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace airlock::forkserver::internal;
  if (!HasForkServerSocket()) return 2;
  g_every_attempt =
      argc == 3 && std::string_view(argv[1]) == "--preload" && std::string_view(argv[2]) == "every";
  pthread_t helper;
  if (pthread_create(&helper, nullptr, Helper, nullptr) != 0) return 2;
  if (!SendReady()) return 0;
  ForkHooks hooks;
  hooks.before_clone = WakeHelper;
  // The next attempt starts once the helper has let go of the mutex.
  hooks.after = [] {
    if (!g_holding.load()) return;
    g_release = true;
    while (g_holding.load()) ::sched_yield();
  };
  if (!ServeForks(2, hooks)) return 0;
  // The worker.
  struct timespec deadline;
  ::clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 2;
  const bool free = pthread_mutex_timedlock(&g_mutex, &deadline) == 0;
  std::printf("mutex %s after %ld attempts\n", free ? "free" : "inherited locked", g_attempts);
  std::fflush(stdout);
  int32_t status = free ? 0 : 1;
  ::close(1);
  ::close(2);
  (void)!::write(3, &status, sizeof(status));
  _exit(status);
}
