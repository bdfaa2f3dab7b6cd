// A syscall-heavy loop for bench/supervisor_bench: N rounds of stat, open, read, fstat and close
// on files every root file system has. Static, so it runs the same inside and outside a sandbox.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  long rounds = argc > 1 ? std::atol(argv[1]) : 100000;
  const char* files[] = {"/usr/bin/sh", "/usr/lib/os-release", "/usr/bin/env"};
  char buf[64];
  long failures = 0;
  for (long i = 0; i < rounds; ++i) {
    const char* f = files[i % 3];
    struct stat st;
    if (stat(f, &st) != 0) ++failures;
    int fd = open(f, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      ++failures;
      continue;
    }
    if (read(fd, buf, sizeof(buf)) < 0 || fstat(fd, &st) != 0) ++failures;
    close(fd);
  }
  if (failures != 0) {
    std::fprintf(stderr, "syscall_workload: %ld failures\n", failures);
    return 1;
  }
  return 0;
}
