// Remove never crosses a mount point. Needs CAP_SYS_ADMIN: the test moves into its own mount
// namespace (so nothing leaks to the host) and skips when it cannot.
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include <string>

#include "common/files.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "pathguard/path_guard.h"

namespace airlock {
namespace {

TEST(PathGuardMountTest, RemoveStopsAtMountPoints) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount";
  if (unshare(CLONE_NEWNS) != 0) GTEST_SKIP() << "unshare(CLONE_NEWNS): " << strerror(errno);
  ASSERT_EQ(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << strerror(errno);
  char tmpl[] = "/tmp/airlock-pathguard-mount-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  ASSERT_TRUE(MakeDirs(root + "/tree/tmpfs").ok());
  ASSERT_TRUE(MakeDirs(root + "/tree/bind").ok());
  ASSERT_TRUE(MakeDirs(root + "/source").ok());
  ASSERT_TRUE(WriteFileAtomic(root + "/source/keep", "k").ok());
  if (mount("tmpfs", (root + "/tree/tmpfs").c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "mount tmpfs: " << strerror(errno);
  }
  ASSERT_TRUE(WriteFileAtomic(root + "/tree/tmpfs/keep", "k").ok());
  // A bind mount of the same file system: same st_dev, found by statx's mount-root flag.
  ASSERT_EQ(
      mount((root + "/source").c_str(), (root + "/tree/bind").c_str(), nullptr, MS_BIND, nullptr),
      0)
      << strerror(errno);

  for (ResolveMode mode : {ResolveMode::kAuto, ResolveMode::kComponentWalk}) {
    absl::StatusOr<PathGuard> guard = PathGuard::Open(root, mode);
    ASSERT_TRUE(guard.ok()) << Message(guard.status());
    absl::Status status = guard->Remove("tree", /*recursive=*/true);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << Message(status);
    EXPECT_NE(Message(status).find("mount point"), std::string_view::npos) << Message(status);
    EXPECT_EQ(guard->Remove("tree/tmpfs", true).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(guard->Remove("tree/bind", true).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(guard->Remove("tree/bind", false).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(*ReadFile(root + "/tree/tmpfs/keep"), "k");
    EXPECT_EQ(*ReadFile(root + "/source/keep"), "k");
  }
  ASSERT_EQ(umount2((root + "/tree/bind").c_str(), MNT_DETACH), 0);
  ASSERT_EQ(umount2((root + "/tree/tmpfs").c_str(), MNT_DETACH), 0);
  ASSERT_TRUE(RemoveTree(root).ok());
}

}  // namespace
}  // namespace airlock
