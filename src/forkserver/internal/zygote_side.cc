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

// Every later worker is forked from the zygote's memory: a request's code and environment must
// not stay in it, freed but readable, for the next worker to find. The payload and the decoded
// request are the only copies (each one allocation: ReceiveFrame sizes the payload once, the
// request's fields are built from it in one copy each).
void Wipe(std::string& s) {
  if (!s.empty()) ::explicit_bzero(s.data(), s.size());
}

void Wipe(std::string& payload, ForkRequest& request) {
  Wipe(payload);
  Wipe(request.plan);
  for (std::string& e : request.env) Wipe(e);
  Wipe(request.code);
}

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
      Wipe(payload, request);
      reply.err = EINVAL;
      reply.message = "malformed fork request";
      if (Reply(reply, -1) != 0) return std::nullopt;
      continue;
    }
    if (hooks.before) hooks.before();
    absl::StatusOr<engine::ForkedWorker> worker =
        engine::ForkWorker(request.plan, fds, nfds, threads, hooks.before_clone);
    if (worker.ok() && worker->pid == 0) return request;
    Wipe(payload, request);
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

namespace {

// Calls `on_line` for each line of a /proc file (a line longer than the buffer is cut there; the
// rest of it is skipped). False when the file cannot be opened.
template <typename OnLine>
bool ForEachLine(const char* path, OnLine on_line) {
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char line[512];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    on_line(line);
    while (std::strchr(line, '\n') == nullptr && std::fgets(line, sizeof(line), f) != nullptr) {
    }
  }
  std::fclose(f);
  return true;
}

struct Mapping {
  unsigned long start = 0, end = 0;
  char perms[5] = {};
};

bool ParseMapping(const char* line, Mapping* m) {
  return std::sscanf(line, "%lx-%lx %4s", &m->start, &m->end, m->perms) == 3;
}

}  // namespace

bool KeepSharedMappingsFromWorkers(bool share_private) {
  bool any_shared = false;
  bool read = ForEachLine("/proc/self/maps", [&](const char* line) {
    Mapping m;
    if (!ParseMapping(line, &m)) return;
    if (m.perms[3] != 'p') {
      any_shared = true;
    } else if (share_private) {
      ::madvise(reinterpret_cast<void*>(m.start), m.end - m.start, MADV_DOFORK);
    }
  });
  if (!read) return false;
  if (!any_shared) return true;
  // Which shared mappings may be written: VmFlags "mw" (may write; a read-only mapping of a
  // file opened read-only has none, and stays: numpy.load(mmap_mode='r'), model weights).
  Mapping current;
  bool in_shared = false;
  return ForEachLine("/proc/self/smaps", [&](const char* line) {
    if (Mapping m; ParseMapping(line, &m)) {
      current = m;
      in_shared = m.perms[3] != 'p';
      return;
    }
    if (!in_shared || std::strncmp(line, "VmFlags:", 8) != 0) return;
    if (std::strstr(line, " mw") != nullptr) {
      ::madvise(reinterpret_cast<void*>(current.start), current.end - current.start, MADV_DONTFORK);
    }
  });
}

}  // namespace airlock::forkserver::internal
