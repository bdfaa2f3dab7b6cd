// Timing helpers shared by the benchmarks that run commands.
#ifndef AIRLOCK_BENCH_TIMING_H_
#define AIRLOCK_BENCH_TIMING_H_

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <vector>

extern char** environ;

namespace airlock::bench {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Wall time of running argv to completion on the host, output discarded; -1 if it failed.
inline double TimeCommand(const std::vector<std::string>& argv, const char* cwd = nullptr) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  if (cwd) posix_spawn_file_actions_addchdir_np(&fa, cwd);
  auto t0 = Clock::now();
  pid_t pid;
  if (posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ) != 0) return -1;
  int status;
  waitpid(pid, &status, 0);
  double ms = Ms(Clock::now() - t0);
  posix_spawn_file_actions_destroy(&fa);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? ms : -1;
}

}  // namespace airlock::bench

#endif  // AIRLOCK_BENCH_TIMING_H_
