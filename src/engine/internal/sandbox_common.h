// Helpers shared by NativeSandbox (native_sandbox.cc) and ForkedSandbox (forked_sandbox.cc).
#ifndef AIRLOCK_ENGINE_INTERNAL_SANDBOX_COMMON_H_
#define AIRLOCK_ENGINE_INTERNAL_SANDBOX_COMMON_H_

#include <errno.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "command/capture.h"
#include "command/command.h"
#include "engine/cgroup.h"
#include "engine/internal/plan_builder.h"
#include "engine/native_sandbox.h"
#include "init/protocol.h"
#include "spec/sandbox_spec.h"
#include "supervisor/policy.h"

namespace airlock::engine::internal::common {

bool Allowed(const std::vector<std::string>& allow, std::string_view name);

// Features of the spec this backend does not provide yet fail here, by name.
absl::Status CheckSpecSupported(const spec::SandboxSpec& s);

// spec.image runs only on the root file system the caller resolved for it.
absl::Status CheckImage(const spec::SandboxSpec& s, const std::string& image_rootfs);

// The spec's syscall policy, checked against the built-in profile and the kernel.
absl::StatusOr<std::shared_ptr<const supervisor::SyscallPolicy>> CompileSyscallPolicy(
    const spec::Process& process);

// Fails closed when the host lacks a protection the spec needs, unless the caller allowed it
// by name; returns the names of the allowed missing protections.
absl::StatusOr<std::vector<std::string>> CheckHost(const spec::SandboxSpec& s,
                                                   const CgroupDriver& cgroups,
                                                   const std::vector<std::string>& allow);

// /run/airlock as root, else $XDG_RUNTIME_DIR/airlock or /tmp/airlock-UID.
std::string DefaultRunDirBase();

// Writes setgroups=deny and the one-id uid/gid maps of `pid`, checked alive through `pidfd`
// after its /proc directory is opened, so a recycled pid is never written to.
absl::Status WriteIdMaps(pid_t pid, int pidfd, uid_t uid, gid_t gid, uid_t host_uid,
                         gid_t host_gid);

// A command's environment: the minimal set, the spec's, the command's; with an egress proxy
// (proxy_port != 0), the proxy variables, whose URL names `proxy_client` as its user
// ("http://cmd-3:@127.0.0.1:3128") when it is not empty: the clients that send it (curl,
// requests/pip, Go) tell the proxy which command made each request.
std::vector<std::string> CommandEnv(const spec::SandboxSpec& s, const CommandSpec& c,
                                    uint16_t proxy_port, std::string_view proxy_client = {});

// NOFILE, FSIZE, CORE=0 and STACK from the spec.
std::vector<init::Rlimit> CommandRlimits(const spec::SandboxSpec& s);

// Reads what `fd` (non-blocking) has into `deliver`, bounded per call; false on a read error.
template <typename Deliver>
bool ReadAvailable(int fd, OutputCapture::Stream stream, Deliver& deliver, bool* eof) {
  char buf[65536];
  // Bounded per wake-up so one stream cannot starve the other or the deadline check.
  for (int i = 0; i < 16; ++i) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      deliver(stream, std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n == 0) *eof = true;
    if (n < 0 && errno == EINTR) continue;
    return n >= 0 || errno == EAGAIN;
  }
  return true;
}

// The host uid and gid a sandbox's ids map to: host_id_base + spec.user as root, else the
// caller's own. InvalidArgument when the sum leaves the host's id space (it would wrap onto a
// real host account, root among them).
absl::StatusOr<std::pair<uid_t, gid_t>> HostIds(const SandboxOptions& options);

// The mount plan's inputs for a sandbox whose run directory is `run_dir` (Landlock at level 2
// unless degraded), with the run directory's root/ and setup/ mount points made.
absl::StatusOr<PlanInputs> PreparePlanInputs(const SandboxOptions& options,
                                             const std::string& run_dir,
                                             const std::vector<std::string>& degraded);

// The cgroup limits of the spec, without those the caller allowed to be missing.
CgroupLimits LimitsOf(const spec::SandboxSpec& s, const std::vector<std::string>& degraded);

// Fills a finished command's usage from its cgroup, its output counts and hashes from the capture
// (FinishSha256: call once), and its classification.
void FillResult(const CgroupStats& stats, OutputCapture& capture, bool output_killed,
                bool cpu_exceeded, CommandResult& result);

// How a command ended (docs/engine.md, "How a command ends").
Classification Classify(const CommandResult& r, const CgroupStats& stats, bool output_killed,
                        bool cpu_exceeded);

}  // namespace airlock::engine::internal::common

#endif  // AIRLOCK_ENGINE_INTERNAL_SANDBOX_COMMON_H_
