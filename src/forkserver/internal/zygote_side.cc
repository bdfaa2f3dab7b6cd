#include "forkserver/internal/zygote_side.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/status.h"
#include "engine/fork_worker.h"
#include "init/protocol.h"

namespace airlock::forkserver::internal {
namespace {

int Reply(const ForkReply& reply, int pidfd) {
  return init::SendFrame(kZygoteFd, static_cast<uint32_t>(ZygoteFrame::kForked),
                         EncodeForkReply(reply), &pidfd, pidfd >= 0 ? 1 : 0);
}

}  // namespace

bool HasForkServerSocket() {
  struct stat st;
  return ::fstat(kZygoteFd, &st) == 0 && S_ISSOCK(st.st_mode);
}

bool SendReady() {
  init::Writer ready;
  ready.U32(kZygoteVersion);
  return init::SendFrame(kZygoteFd, static_cast<uint32_t>(ZygoteFrame::kReady), ready.data()) == 0;
}

std::optional<ForkRequest> ServeForks(int threads, const ForkHooks& hooks) {
  for (;;) {
    uint32_t type = 0;
    std::string payload;
    int fds[init::kMaxFds];
    int nfds = 0;
    if (init::ReceiveFrame(kZygoteFd, &type, &payload, fds, &nfds) != 0) return std::nullopt;
    ForkRequest request;
    ForkReply reply;
    if (type != static_cast<uint32_t>(ZygoteFrame::kFork) ||
        !DecodeForkRequest(payload, &request)) {
      for (int i = 0; i < nfds; ++i) ::close(fds[i]);
      reply.err = EINVAL;
      reply.message = "malformed fork request";
      if (Reply(reply, -1) != 0) return std::nullopt;
      continue;
    }
    if (hooks.before) hooks.before();
    absl::StatusOr<engine::ForkedWorker> worker =
        engine::ForkWorker(request.plan, fds, nfds, threads, hooks.before_clone);
    if (worker.ok() && worker->pid == 0) return request;
    if (hooks.after) hooks.after();
    for (int i = 0; i < nfds; ++i) ::close(fds[i]);
    int pidfd = -1;
    if (!worker.ok()) {
      reply.err = EINVAL;
      reply.message = std::string(Message(worker.status()));
    } else {
      reply.pid = worker->pid;
      pidfd = worker->pidfd.get();
      if (worker->discarded) {
        reply.err = EAGAIN;
        reply.message = "a helper thread ran while the worker was cloned; it was killed";
      }
    }
    if (Reply(reply, pidfd) != 0) return std::nullopt;
  }
}

}  // namespace airlock::forkserver::internal
