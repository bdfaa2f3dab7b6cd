// Runs a program outside any sandbox the way airlock-init runs a command (the policy filter and
// the profile installed last, the notify listener handed over, the supervisor attached before
// the program starts), for the supervisor's tests and benchmark. The program's parent is a
// reaper of its own, as airlock-init is in a sandbox: the supervisor's process is never the
// parent of what it traces.
#ifndef AIRLOCK_SUPERVISOR_TESTING_LAUNCH_H_
#define AIRLOCK_SUPERVISOR_TESTING_LAUNCH_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "command/syscalls.h"
#include "common/unique_fd.h"
#include "supervisor/policy.h"

namespace airlock::supervisor::testing {

// A process waiting to run argv.
struct Launched {
  pid_t pid = -1;     // the program
  pid_t reaper = -1;  // its parent; exits with the program's status (128 + signal if killed)
  UniqueFd pidfd;
  UniqueFd start;   // write one byte to start it
  UniqueFd output;  // its stdout (stderr goes to /dev/null unless keep_stderr)
};

// `profile` may be empty (no profile filter).
absl::StatusOr<Launched> Launch(std::string_view profile, const SyscallPolicy& policy,
                                const std::vector<std::string>& argv, bool keep_stderr = true);

// Waits for the reaper: the program's exit code, 128 + signal, or -1.
int WaitReaper(pid_t reaper);

struct HostRun {
  int exit_code = -1;
  std::string output;
  SyscallReport report;  // empty without a supervisor
};

// Launches argv under `policy`, with a supervisor when its mode asks for one (which kills the
// program's process group for a kill rule), runs it to the end and collects its report.
absl::StatusOr<HostRun> RunUnderPolicy(std::string_view profile,
                                       std::shared_ptr<const SyscallPolicy> policy,
                                       const std::vector<std::string>& argv,
                                       SyscallEventSink* events = nullptr);

}  // namespace airlock::supervisor::testing

#endif  // AIRLOCK_SUPERVISOR_TESTING_LAUNCH_H_
