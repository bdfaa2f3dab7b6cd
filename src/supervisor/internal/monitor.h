// What the notify and ptrace monitors share: the thread, the hand-over of the target, the
// decision on a routed call and the bounded record of what was seen.
#ifndef AIRLOCK_SUPERVISOR_INTERNAL_MONITOR_H_
#define AIRLOCK_SUPERVISOR_INTERNAL_MONITOR_H_

#include <linux/seccomp.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "command/syscalls.h"
#include "common/unique_fd.h"
#include "supervisor/internal/decode.h"
#include "supervisor/supervisor.h"

namespace airlock::supervisor::internal {

class Monitor : public Supervisor {
 public:
  Monitor(SupervisorOptions options, const char* mode_name);
  ~Monitor() override;  // Shutdown() must have run (subclasses call it)

  absl::Status Attach(const Target& target) override;
  bool WaitDone(std::chrono::milliseconds timeout) override;
  SyscallReport Report() const override;
  void StopEvents() override;

 protected:
  // What to do with a routed call.
  struct Decision {
    enum class What { kContinue, kFail, kKill } what = What::kContinue;
    int err = 0;  // kFail
  };

  void StartThread();
  // Stops the thread: kills the command if processes are still supervised, wakes the thread
  // (Wake) and joins it. Idempotent; called by the subclass's destructor.
  void Shutdown();

  // On the thread: the body (Attached must be called once a target arrives; Run returns when
  // nothing is left to supervise or stopping() turns true).
  virtual void Run() = 0;
  // Makes a blocked Run notice stopping() (notify: an eventfd); may be called from any thread.
  virtual void Wake() {}

  // On the thread: waits for Attach; nullopt when stopping before any target came.
  std::optional<Target> WaitForTarget();
  // On the thread: the result Attach returns.
  void Attached(absl::Status status);
  bool stopping() const;

  // Evaluates, records and decides a call the filter routed here; `mem` may be null.
  Decision Decide(const seccomp_data& call, MemoryReader* mem);
  // Kills the command and records why (the supervisor could not go on).
  void Fail(std::string why);
  const SyscallPolicy& policy() const { return *options_.policy; }

 private:
  void Record(const SyscallEvent& decoded);
  void KillCommand(std::string why);

  SupervisorOptions options_;
  std::thread thread_;
  std::mutex events_mu_;  // held while options_.events is called or cleared

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Target> target_;  // set by Attach, taken by the thread
  std::optional<absl::Status> attached_;
  bool stopping_ = false;
  bool done_ = false;
  std::vector<int64_t> counts_;  // by syscall number
  SyscallReportBuilder builder_;
};

// The two implementations (notify_monitor.cc, ptrace_monitor.cc), started.
std::unique_ptr<Supervisor> StartNotifyMonitor(SupervisorOptions options);
std::unique_ptr<Supervisor> StartPtraceMonitor(SupervisorOptions options);

}  // namespace airlock::supervisor::internal

#endif  // AIRLOCK_SUPERVISOR_INTERNAL_MONITOR_H_
