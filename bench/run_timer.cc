// airlock-bench-timer: runs a command once and prints its wall time in nanoseconds, so that
// run_bench measures a command's own run time the same way inside a sandbox and outside it
// (fork, exec, run, exit, wait; the command's output goes to /dev/null).
//
//   airlock-bench-timer /abs/path/program [args...]
//
// Prints "<ns>" and exits 0 when the command exited 0; prints "failed <wait status>" and exits 1
// otherwise. Static, so it runs in a sandbox's root file system as it is on the host.
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>

namespace {

long long NowNs() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] != '/') {
    std::fprintf(stderr, "usage: %s /abs/path/program [args...]\n", argv[0]);
    return 2;
  }
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return 2;
  long long t0 = NowNs();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(null_fd, 1);
    dup2(null_fd, 2);
    execv(argv[1], argv + 1);
    _exit(127);
  }
  if (pid < 0) return 2;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 2;
  long long ns = NowNs() - t0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("failed %d\n", status);
    return 1;
  }
  std::printf("%lld\n", ns);
  return 0;
}
