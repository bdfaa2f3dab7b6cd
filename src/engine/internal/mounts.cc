// Child-side mount steps. Called between clone and exec: system calls only, no allocation.
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>

#include "engine/internal/plan.h"
#include "engine/internal/syscalls.h"

namespace airlock::engine::internal {
namespace {

constexpr uint64_t kResolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;

// Opens `path` (absolute inside the sandbox) beneath root_fd. Symlinks are followed but can
// never leave the root.
int Resolve(int root_fd, const char* path) {
  while (*path == '/') ++path;
  return Openat2(root_fd, *path ? path : ".", O_PATH | O_CLOEXEC, kResolve);
}

// Splits "/a/b/c" into the parent ("/a/b", in buf) and the leaf ("c").
const char* SplitParent(const char* path, char* buf, size_t size) {
  const char* slash = std::strrchr(path, '/');
  size_t len = slash ? static_cast<size_t>(slash - path) : 0;
  if (len >= size) len = size - 1;
  std::memcpy(buf, path, len);
  buf[len] = '\0';
  return slash ? slash + 1 : path;
}

// mkdir -p beneath root_fd. Usually only the last component is missing, so the parent is
// tried first and the path is walked up only when it is missing too.
int MkdirAll(int root_fd, const char* path, mode_t mode) {
  char parent[4096];
  const char* leaf = SplitParent(path, parent, sizeof(parent));
  int pfd = Resolve(root_fd, parent);
  if (pfd < 0) {
    if (errno != ENOENT || *parent == '\0') return errno;
    if (int err = MkdirAll(root_fd, parent, mode); err != 0) return err;
    pfd = Resolve(root_fd, parent);
    if (pfd < 0) return errno;
  }
  if (*leaf == '\0') {  // the root itself
    ::close(pfd);
    return 0;
  }
  int rc = ::mkdirat(pfd, leaf, mode);
  int err = errno;
  ::close(pfd);
  return rc != 0 && err != EEXIST ? err : 0;
}

int SetAttr(int mnt_fd, uint64_t attr) {
  struct mount_attr a = {};
  a.attr_set = attr;
  a.propagation = MS_PRIVATE;
  return ::mount_setattr(mnt_fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof(a)) == 0 ? 0 : errno;
}

int Attach(int mnt_fd, int target_fd) {
  if (::move_mount(mnt_fd, "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
    return errno;
  }
  return 0;
}

// mount(2) onto an already resolved target, through its /proc/self/fd magic link.
int MountAt(int target_fd, const char* fstype, unsigned long flags, const char* data) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", target_fd);
  return ::mount(fstype, path, fstype, flags, data) == 0 ? 0 : errno;
}

int RunOp(int root_fd, int scratch_fd, MountOp* op) {
  const char* target = op->target.c_str();
  switch (op->kind) {
    case MountOp::Kind::kMkdir:
      return MkdirAll(op->scratch ? scratch_fd : root_fd, target, op->mode);
    case MountOp::Kind::kFile:
    case MountOp::Kind::kSymlink: {
      char parent[4096];
      const char* leaf = SplitParent(target, parent, sizeof(parent));
      int pfd = Resolve(root_fd, parent);
      if (pfd < 0) return errno;
      int rc;
      if (op->kind == MountOp::Kind::kFile) {
        rc = ::openat(pfd, leaf, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, op->mode);
        if (rc >= 0) ::close(rc);
      } else {
        rc = ::symlinkat(op->source.c_str(), pfd, leaf);
      }
      int err = errno;
      ::close(pfd);
      return rc < 0 && err != EEXIST ? err : 0;
    }
    case MountOp::Kind::kBind:
    case MountOp::Kind::kBindFd: {
      if (op->fd < 0) return op->optional ? 0 : EBADF;
      int tfd = Resolve(root_fd, target);
      if (tfd < 0) return op->optional && errno == ENOENT ? 0 : errno;
      int err = Attach(op->fd, tfd);
      ::close(tfd);
      ::close(op->fd);
      op->fd = -1;
      return err;
    }
    case MountOp::Kind::kBindInRoot:
    case MountOp::Kind::kReadOnly: {
      const char* from = op->kind == MountOp::Kind::kReadOnly ? target : op->source.c_str();
      int tfd = Resolve(root_fd, target);
      if (tfd < 0) return op->optional && errno == ENOENT ? 0 : errno;
      int sfd = Resolve(op->scratch ? scratch_fd : root_fd, from);
      if (sfd < 0) {
        int err = errno;
        ::close(tfd);
        return err;
      }
      int mnt = static_cast<int>(
          ::open_tree(sfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE));
      int err = mnt < 0 ? errno : SetAttr(mnt, op->attr);
      if (err == 0) err = Attach(mnt, tfd);
      ::close(sfd);
      ::close(tfd);
      if (mnt >= 0) ::close(mnt);
      return err;
    }
    case MountOp::Kind::kWriteFile: {
      char parent[4096];
      const char* leaf = SplitParent(target, parent, sizeof(parent));
      int pfd = Resolve(op->scratch ? scratch_fd : root_fd, parent);
      if (pfd < 0) return errno;
      int fd = ::openat(pfd, leaf, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, op->mode);
      int err = fd < 0 ? errno : 0;
      ::close(pfd);
      const char* data = op->data.data();
      size_t left = op->data.size();
      while (err == 0 && left > 0) {
        ssize_t n = ::write(fd, data, left);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) err = errno;
        if (n > 0) {
          data += n;
          left -= static_cast<size_t>(n);
        }
      }
      if (fd >= 0) ::close(fd);
      return err;
    }
    case MountOp::Kind::kTmpfs:
    case MountOp::Kind::kProc:
    case MountOp::Kind::kDevpts: {
      int tfd = Resolve(root_fd, target);
      if (tfd < 0) return op->optional && errno == ENOENT ? 0 : errno;
      const char* fstype = op->kind == MountOp::Kind::kTmpfs  ? "tmpfs"
                           : op->kind == MountOp::Kind::kProc ? "proc"
                                                              : "devpts";
      int err = MountAt(tfd, fstype, op->flags, op->data.empty() ? nullptr : op->data.c_str());
      ::close(tfd);
      return err;
    }
  }
  return EINVAL;
}

}  // namespace

int OpenMountSources(SetupPlan* plan, int* failed_op) {
  for (size_t i = 0; i < plan->mounts.size(); ++i) {
    MountOp& op = plan->mounts[i];
    if (op.kind != MountOp::Kind::kBind) continue;
    *failed_op = static_cast<int>(i);
    op.fd = static_cast<int>(::open_tree(AT_FDCWD, op.source.c_str(),
                                         OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
    if (op.fd < 0) {
      if (op.optional && errno == ENOENT) continue;
      return errno;
    }
    if (int err = SetAttr(op.fd, op.attr); err != 0) return err;
  }
  *failed_op = -1;
  return 0;
}

int MountStagingRoot(const SetupPlan& plan, int* root_fd, int* scratch_fd) {
  if (::mount("tmpfs", plan.staging_dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              plan.staging_options.c_str()) != 0) {
    return errno;
  }
  *root_fd = ::open(plan.staging_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (*root_fd < 0) return errno;
  if (::mount("tmpfs", plan.scratch_dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              plan.scratch_options.c_str()) != 0) {
    return errno;
  }
  *scratch_fd = ::open(plan.scratch_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  return *scratch_fd < 0 ? errno : 0;
}

int RunMountOps(SetupPlan* plan, int root_fd, int scratch_fd, int* failed_op) {
  for (size_t i = 0; i < plan->mounts.size(); ++i) {
    *failed_op = static_cast<int>(i);
    if (int err = RunOp(root_fd, scratch_fd, &plan->mounts[i]); err != 0) return err;
  }
  *failed_op = -1;
  return 0;
}

int PivotIntoRoot(int root_fd) {
  // pivot_root(".", ".") stacks the old root on top of the new one; unmounting "." then detaches
  // the old root, so no path to the host's tree is left behind.
  if (::fchdir(root_fd) != 0) return errno;
  if (PivotRoot(".", ".") != 0) return errno;
  if (::umount2(".", MNT_DETACH) != 0) return errno;
  if (::chdir("/") != 0) return errno;
  return 0;
}

int MakeRootReadOnly() {
  struct mount_attr a = {};
  a.attr_set = MOUNT_ATTR_RDONLY;
  return ::mount_setattr(AT_FDCWD, "/", 0, &a, sizeof(a)) == 0 ? 0 : errno;
}

}  // namespace airlock::engine::internal
