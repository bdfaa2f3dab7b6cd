#include "common/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

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

}  // namespace
}  // namespace airlock
