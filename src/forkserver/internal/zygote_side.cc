#include "forkserver/internal/zygote_side.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
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

void KeepSharedMappingsFromWorkers(bool share_private) {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return;
  char line[512];
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    unsigned long start = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &start, &end, perms) == 3) {
      if (perms[3] != 'p') {
        ::madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTFORK);
      } else if (share_private) {
        ::madvise(reinterpret_cast<void*>(start), end - start, MADV_DOFORK);
      }
    }
    // The rest of a line longer than the buffer is not a mapping's start.
    while (std::strchr(line, '\n') == nullptr && std::fgets(line, sizeof(line), maps) != nullptr) {
    }
  }
  std::fclose(maps);
}

}  // namespace airlock::forkserver::internal
