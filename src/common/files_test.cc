#include "common/files.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace airlock {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/airlock-files-test-XXXXXX";
  return std::string(mkdtemp(tmpl));
}

TEST(FilesTest, WriteReadRoundTrip) {
  std::string dir = TempDir();
  std::string path = dir + "/a/b/c.txt";
  ASSERT_TRUE(MakeDirs(dir + "/a/b").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "hello", 0600).ok());
  EXPECT_EQ(*ReadFile(path), "hello");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadFile(path, 3).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ReadFile(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(RemoveTree(dir).ok());
  EXPECT_NE(access(dir.c_str(), F_OK), 0);
}

TEST(FilesTest, RemoveTreeDoesNotFollowSymlinks) {
  std::string dir = TempDir();
  std::string keep = TempDir();
  ASSERT_TRUE(WriteFileAtomic(keep + "/precious", "x").ok());
  ASSERT_EQ(symlink(keep.c_str(), (dir + "/link").c_str()), 0);
  ASSERT_TRUE(RemoveTree(dir).ok());
  EXPECT_EQ(*ReadFile(keep + "/precious"), "x");
  ASSERT_TRUE(RemoveTree(keep).ok());
}

// Attack: a sandbox leaves a workspace 2,000 directories deep with 250-byte names. A recursive
// removal held two descriptors and the whole path per level (about 500 MB at once, or EMFILE,
// or a stack overflow deeper still); this one keeps one directory open and the names waiting.
TEST(FilesTest, RemoveTreeOfADeepTreeStaysSmall) {
  std::string dir = TempDir();
  const std::string name(250, 'd');
  {
    UniqueFd cur(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    for (int i = 0; i < 2000; ++i) {
      ASSERT_EQ(mkdirat(cur.get(), name.c_str(), 0700), 0) << i;
      if (i % 100 == 0) {
        ASSERT_EQ(close(openat(cur.get(), "f", O_CREAT | O_WRONLY | O_CLOEXEC, 0600)), 0);
      }
      cur = UniqueFd(openat(cur.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      ASSERT_TRUE(cur);
    }
  }
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  ASSERT_TRUE(RemoveTree(dir).ok());
  getrusage(RUSAGE_SELF, &after);
  EXPECT_NE(access(dir.c_str(), F_OK), 0);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 32 * 1024) << "KiB of peak memory added";
}

// A directory that is a mount point is left alone, reported, and everything else goes.
TEST(FilesTest, RemoveTreeStopsAtMountPoints) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount";
  std::string dir = TempDir();
  ASSERT_TRUE(MakeDirs(dir + "/a/m").ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/a/file", "x").ok());
  ASSERT_EQ(mount("tmpfs", (dir + "/a/m").c_str(), "tmpfs", 0, "size=1m"), 0);
  ASSERT_TRUE(WriteFileAtomic(dir + "/a/m/inside", "y").ok());
  absl::Status s = RemoveTree(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.ToString().find(dir + "/a/m: is a mount point"), std::string::npos) << s;
  EXPECT_EQ(*ReadFile(dir + "/a/m/inside"), "y");
  EXPECT_NE(access((dir + "/a/file").c_str(), F_OK), 0);
  ASSERT_EQ(umount((dir + "/a/m").c_str()), 0);
  ASSERT_TRUE(RemoveTree(dir).ok());
}

}  // namespace
}  // namespace airlock
