// The WorkerPlan on the wire between the fork-server and its zygote (plan.h). The zygote is
// trusted (the fork-server started it), so this guards against a garbled message rather than an
// attacker; every descriptor index is still checked against what arrived.
#include <string>
#include <vector>

#include "engine/internal/plan.h"
#include "init/protocol.h"

namespace airlock::engine::internal {
namespace {

void Fd(init::Writer& w, int fd, std::vector<int>* fds) {
  if (fd < 0) {
    w.I32(-1);
    return;
  }
  w.I32(static_cast<int32_t>(fds->size()));
  fds->push_back(fd);
}

bool Fd(init::Reader& r, const int* fds, int nfds, int* out) {
  int32_t index = r.I32();
  if (index < -1 || index >= nfds) return false;
  *out = index < 0 ? -1 : fds[index];
  return true;
}

}  // namespace

std::string EncodeWorkerPlan(const WorkerPlan& worker, std::vector<int>* fds) {
  const SetupPlan& p = worker.setup;
  init::Writer w;
  w.U32(p.uid);
  w.U32(p.gid);
  w.U32(p.new_cgroup_namespace ? 1 : 0);
  w.U32(static_cast<uint32_t>(p.cgroup_join_fds.size()));
  for (int fd : p.cgroup_join_fds) Fd(w, fd, fds);
  w.Bytes(p.hostname);
  w.Bytes(p.staging_dir);
  w.Bytes(p.staging_options);
  w.Bytes(p.scratch_dir);
  w.Bytes(p.scratch_options);
  w.U32(static_cast<uint32_t>(p.mounts.size()));
  for (const MountOp& op : p.mounts) {
    w.U32(static_cast<uint32_t>(op.kind));
    w.Bytes(op.source);
    w.Bytes(op.target);
    w.Bytes(op.data);
    w.U64(op.attr);
    w.U64(op.flags);
    w.U32(op.mode);
    w.U32((op.optional ? 1 : 0) | (op.scratch ? 2 : 0));
    Fd(w, op.kind == MountOp::Kind::kBindFd ? op.fd : -1, fds);
  }
  w.U32(p.read_only_root ? 1 : 0);
  w.I32(p.landlock_abi);
  w.Strings(p.landlock_writable);
  w.Strings(p.landlock_devices);
  Fd(w, p.sync_fd, fds);
  Fd(w, p.error_fd, fds);
  for (int fd : worker.stdio) Fd(w, fd, fds);
  Fd(w, worker.status_fd, fds);
  w.Bytes(worker.workdir);
  w.U32(static_cast<uint32_t>(worker.rlimits.size()));
  for (const init::Rlimit& r : worker.rlimits) {
    w.U32(r.resource);
    w.U64(r.soft);
    w.U64(r.hard);
  }
  w.Bytes(worker.seccomp_filter);
  w.Bytes(worker.policy_filter);
  Fd(w, worker.cgroup_fd, fds);
  return w.data();
}

bool DecodeWorkerPlan(std::string_view payload, const int* fds, int nfds, WorkerPlan* worker) {
  constexpr uint32_t kMaxItems = 4096;
  SetupPlan& p = worker->setup;
  init::Reader r(payload);
  p.uid = r.U32();
  p.gid = r.U32();
  p.new_cgroup_namespace = r.U32() != 0;
  uint32_t joins = r.U32();
  if (!r.ok() || joins > static_cast<uint32_t>(init::kMaxFds)) return false;
  p.cgroup_join_fds.assign(joins, -1);
  for (int& fd : p.cgroup_join_fds) {
    if (!Fd(r, fds, nfds, &fd)) return false;
  }
  p.hostname = r.Bytes();
  p.staging_dir = r.Bytes();
  p.staging_options = r.Bytes();
  p.scratch_dir = r.Bytes();
  p.scratch_options = r.Bytes();
  uint32_t mounts = r.U32();
  if (!r.ok() || mounts > kMaxItems) return false;
  p.mounts.resize(mounts);
  for (MountOp& op : p.mounts) {
    uint32_t kind = r.U32();
    if (kind > static_cast<uint32_t>(MountOp::Kind::kWriteFile)) return false;
    op.kind = static_cast<MountOp::Kind>(kind);
    op.source = r.Bytes();
    op.target = r.Bytes();
    op.data = r.Bytes();
    op.attr = r.U64();
    op.flags = static_cast<unsigned long>(r.U64());
    op.mode = r.U32();
    uint32_t bits = r.U32();
    op.optional = (bits & 1) != 0;
    op.scratch = (bits & 2) != 0;
    if (!Fd(r, fds, nfds, &op.fd)) return false;
  }
  p.read_only_root = r.U32() != 0;
  p.landlock_abi = r.I32();
  p.landlock_writable = r.Strings();
  p.landlock_devices = r.Strings();
  if (!Fd(r, fds, nfds, &p.sync_fd) || !Fd(r, fds, nfds, &p.error_fd)) return false;
  for (int& fd : worker->stdio) {
    if (!Fd(r, fds, nfds, &fd)) return false;
  }
  if (!Fd(r, fds, nfds, &worker->status_fd)) return false;
  worker->workdir = r.Bytes();
  uint32_t limits = r.U32();
  if (!r.ok() || limits > kMaxItems) return false;
  worker->rlimits.resize(limits);
  for (init::Rlimit& l : worker->rlimits) {
    l.resource = r.U32();
    l.soft = r.U64();
    l.hard = r.U64();
  }
  worker->seccomp_filter = r.Bytes();
  worker->policy_filter = r.Bytes();
  if (!Fd(r, fds, nfds, &worker->cgroup_fd)) return false;
  return r.done() && p.sync_fd >= 0 && p.error_fd >= 0;
}

}  // namespace airlock::engine::internal
