// airlock-bench-timer: runs a command once and prints its wall time and the CPU time of its
// process tree in nanoseconds, so that run_bench measures a command's own run the same way
// inside a sandbox and outside it (fork, exec, run, exit, wait; the command's output goes to
// /dev/null). CPU time (user + system, from wait4's rusage) moves far less than wall time when
// other work competes for the CPUs, so it shows the sandbox's own cost on a busy host.
//
//   airlock-bench-timer /abs/path/program [args...]
//
// Prints "<wall ns> <cpu ns>" and exits 0 when the command exited 0; prints "failed <wait
// status>" and exits 1 otherwise. Static, so it runs in a sandbox's root file system as it is on
// the host.
#include <fcntl.h>
#include <sys/resource.h>
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
  struct rusage ru {};
  if (wait4(pid, &status, 0, &ru) != pid) return 2;
  long long ns = NowNs() - t0;
  auto tv_ns = [](const struct timeval& tv) {
    return static_cast<long long>(tv.tv_sec) * 1000000000LL + tv.tv_usec * 1000LL;
  };
  long long cpu_ns = tv_ns(ru.ru_utime) + tv_ns(ru.ru_stime);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("failed %d\n", status);
    return 1;
  }
  std::printf("%lld %lld\n", ns, cpu_ns);
  return 0;
}
