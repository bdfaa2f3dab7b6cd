// Layer application: OCI semantics (whiteouts, opaque directories, replacement, links) and the
// path attacks a hostile layer can make. Each layer is a real tar archive written by libarchive.
#include "image/internal/unpack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/files.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "image/testing/image_builder.h"

namespace airlock::image::internal {
namespace {

using testing::Compression;
using testing::Entry;

class UnpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/airlock-unpack-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    root_ = base_ + "/root";
    outside_ = base_ + "/outside";
    ASSERT_TRUE(MakeDirs(root_, 0755).ok());
    ASSERT_TRUE(MakeDirs(outside_, 0755).ok());
    ASSERT_TRUE(WriteFileAtomic(outside_ + "/secret", "host secret").ok());
  }
  void TearDown() override { (void)RemoveTree(base_); }

  // Applies each layer in order with a fresh unpacker; returns the first error.
  absl::Status Apply(const std::vector<std::vector<Entry>>& layers,
                     Compression compression = Compression::kNone) {
    auto u = Unpacker::Create(root_, options_);
    if (!u.ok()) return u.status();
    unpacker_ = std::move(*u);
    int n = 0;
    for (const auto& entries : layers) {
      std::string path = fmt::format("{}/layer{}", base_, ++n);
      if (!WriteFileAtomic(path, testing::Compress(testing::Tar(entries), compression)).ok()) {
        return absl::InternalError("write layer");
      }
      UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
      absl::Status s = unpacker_->Apply(fd.get(), fmt::format("layer {}/{}", n, layers.size()));
      if (!s.ok()) return s;
    }
    return unpacker_->Finish();
  }

  bool InRoot(const std::string& path) const {
    struct stat st;
    return lstat((root_ + "/" + path).c_str(), &st) == 0;
  }
  std::string Read(const std::string& path) const {
    return ReadFile(root_ + "/" + path).value_or("<missing>");
  }
  struct stat Lstat(const std::string& path) const {
    struct stat st = {};
    EXPECT_EQ(lstat((root_ + "/" + path).c_str(), &st), 0) << path;
    return st;
  }
  // The host file the attacks aim at is untouched, and nothing new appeared beside it.
  void ExpectOutsideUntouched() const {
    EXPECT_EQ(ReadFile(outside_ + "/secret").value_or(""), "host secret");
    struct stat st;
    ASSERT_EQ(stat((outside_ + "/secret").c_str(), &st), 0);
    EXPECT_EQ(st.st_nlink, 1u) << "a hard link to the host file was made";
    EXPECT_NE(access((outside_ + "/planted").c_str(), F_OK), 0) << "a file was planted outside";
  }
  // The refusal names the layer and the entry, and is of the expected kind.
  static void ExpectRefused(const absl::Status& s, const std::string& layer,
                            const std::string& entry, absl::StatusCode code) {
    EXPECT_EQ(s.code(), code) << s;
    std::string m(s.message());
    EXPECT_NE(m.find(layer), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("entry \"{}\"", entry)), std::string::npos) << m;
  }

  std::string base_, root_, outside_;
  UnpackOptions options_{.max_bytes = 1 << 30, .max_entries = 100000};
  std::unique_ptr<Unpacker> unpacker_;
};

TEST_F(UnpackTest, FilesDirectoriesSymlinksAndHardLinks) {
  Entry exe = testing::File("usr/bin/tool", "#!/bin/sh\n", 0755);
  exe.mtime = 1600000000;
  ASSERT_TRUE(Apply({{testing::Dir("usr"), testing::Dir("usr/bin"), exe,
                      testing::Symlink("bin", "usr/bin"), testing::Symlink("abs", "/etc/passwd"),
                      testing::Hardlink("usr/bin/alias", "usr/bin/tool"),
                      testing::File("etc/deep/file", "implicit parents")}})
                  .ok());
  EXPECT_EQ(Read("usr/bin/tool"), "#!/bin/sh\n");
  struct stat st = Lstat("usr/bin/tool");
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_mtime, 1600000000);
  char link[64] = {};
  ASSERT_GT(readlink((root_ + "/bin").c_str(), link, sizeof(link)), 0);
  EXPECT_STREQ(link, "usr/bin");
  // An absolute symlink is kept as data: it is resolved only inside a sandbox.
  EXPECT_TRUE(S_ISLNK(Lstat("abs").st_mode));
  EXPECT_EQ(Lstat("usr/bin/alias").st_ino, st.st_ino);
  EXPECT_EQ(Read("etc/deep/file"), "implicit parents");
  EXPECT_EQ(unpacker_->counters().entries, 7);
  EXPECT_EQ(unpacker_->counters().bytes, 10 + 16);
}

TEST_F(UnpackTest, WhiteoutsRemoveWhatLowerLayersAdded) {
  ASSERT_TRUE(Apply({{testing::File("a/keep", "k"), testing::File("a/gone", "g"),
                      testing::File("dir/sub/file", "f"), testing::Symlink("link", "/nowhere")},
                     {testing::File("a/.wh.gone", ""), testing::File(".wh.dir", ""),
                      testing::File(".wh.link", ""), testing::File("a/.wh.never-existed", "")}})
                  .ok());
  EXPECT_EQ(Read("a/keep"), "k");
  EXPECT_FALSE(InRoot("a/gone"));
  EXPECT_FALSE(InRoot("dir"));
  EXPECT_FALSE(InRoot("link"));
  EXPECT_FALSE(InRoot("a/.wh.gone")) << "whiteout markers are never materialized";
}

TEST_F(UnpackTest, OpaqueDirectoryHidesLowerLayersOnly) {
  // The marker comes after some of its own layer's entries and before others: both stay.
  ASSERT_TRUE(Apply({{testing::File("d/lower", "1"), testing::File("d/sub/lower", "2"),
                      testing::File("other/x", "3")},
                     {testing::File("d/early", "4"), testing::File("d/sub/new", "5"),
                      testing::File("d/.wh..wh..opq", ""), testing::File("d/late", "6")}})
                  .ok());
  EXPECT_FALSE(InRoot("d/lower"));
  EXPECT_FALSE(InRoot("d/sub/lower")) << "lower content below a directory the layer kept";
  EXPECT_EQ(Read("d/early"), "4");
  EXPECT_EQ(Read("d/sub/new"), "5");
  EXPECT_EQ(Read("d/late"), "6");
  EXPECT_EQ(Read("other/x"), "3");
  EXPECT_FALSE(InRoot("d/.wh..wh..opq"));
}

TEST_F(UnpackTest, LaterLayersReplaceEntriesOfAnotherType) {
  absl::Status s =
      Apply({{testing::File("f2d", "file"), testing::File("d2f/inner", "x"),
              testing::Symlink("l2f", outside_ + "/secret"), testing::Hardlink("hl", "f2d")},
             {testing::Dir("f2d"), testing::File("f2d/now-a-dir", "y"),
              testing::File("d2f", "now a file"), testing::File("l2f", "replaces the symlink"),
              testing::File("hl", "own content")}});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Read("f2d/now-a-dir"), "y");
  EXPECT_EQ(Read("d2f"), "now a file");
  EXPECT_TRUE(S_ISREG(Lstat("l2f").st_mode));
  EXPECT_EQ(Read("l2f"), "replaces the symlink");
  EXPECT_EQ(Read("hl"), "own content");
  ExpectOutsideUntouched();
}

TEST_F(UnpackTest, ReadOnlyDirectoryStillTakesLaterLayers) {
  options_.set_owners = geteuid() == 0;
  ASSERT_TRUE(Apply({{testing::Dir("ro", 0555)}, {testing::File("ro/file", "later")}}).ok());
  EXPECT_EQ(Read("ro/file"), "later");
  // Unprivileged stores keep u+rwx, or they could not remove the tree later.
  mode_t want = options_.set_owners ? 0555 : 0755;
  EXPECT_EQ(Lstat("ro").st_mode & 07777, want);
}

TEST_F(UnpackTest, SetuidAndSetgidBitsAreDropped) {
  ASSERT_TRUE(Apply({{testing::File("su", "x", 04755), testing::File("sg", "x", 02711),
                      testing::File("sticky", "x", 01644)}})
                  .ok());
  EXPECT_EQ(Lstat("su").st_mode & 07777, 0755u);
  EXPECT_EQ(Lstat("sg").st_mode & 07777, 0711u);
  EXPECT_EQ(Lstat("sticky").st_mode & 07777, 01644u);
}

TEST_F(UnpackTest, DevicesFifosAndSocketsAreSkipped) {
  ASSERT_TRUE(Apply({{testing::CharDevice("dev/null"), testing::Fifo("run/fifo"),
                      testing::File("ok", "1")}})
                  .ok());
  EXPECT_FALSE(InRoot("dev/null"));
  EXPECT_FALSE(InRoot("run/fifo"));
  EXPECT_EQ(unpacker_->counters().skipped, 2);
}

TEST_F(UnpackTest, OwnersAreShiftedByTheIdOffset) {
  if (geteuid() != 0) GTEST_SKIP() << "chown needs root";
  options_.set_owners = true;
  options_.id_offset = 100000;
  Entry f = testing::File("owned", "x");
  f.uid = 1000;
  f.gid = 1001;
  Entry l = testing::Symlink("link", "owned");
  l.uid = 7;
  Entry d = testing::Dir("dir");
  d.uid = 5;
  ASSERT_TRUE(Apply({{f, l, d}}).ok());
  EXPECT_EQ(Lstat("owned").st_uid, 101000u);
  EXPECT_EQ(Lstat("owned").st_gid, 101001u);
  EXPECT_EQ(Lstat("link").st_uid, 100007u);
  EXPECT_EQ(Lstat("dir").st_uid, 100005u);
}

TEST_F(UnpackTest, CompressedLayers) {
  for (Compression c : {Compression::kGzip, Compression::kZstd}) {
    ASSERT_TRUE(RemoveTree(root_).ok());
    ASSERT_TRUE(MakeDirs(root_).ok());
    ASSERT_TRUE(Apply({{testing::File("a", "first")}, {testing::File("a", "second")}}, c).ok());
    EXPECT_EQ(Read("a"), "second");
  }
}

TEST_F(UnpackTest, GarbageIsRefusedWithTheLayerNamed) {
  std::string path = base_ + "/garbage";
  ASSERT_TRUE(WriteFileAtomic(path, std::string(4096, 'x')).ok());
  auto u = Unpacker::Create(root_, options_);
  ASSERT_TRUE(u.ok());
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  absl::Status s = (*u)->Apply(fd.get(), "layer 3/3 (sha256:abc)");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("layer 3/3 (sha256:abc)"), std::string::npos) << s;
}

// Attacks. Each names what a hostile layer tries and expects a refusal naming the entry and
// the layer, with the host untouched.

TEST_F(UnpackTest, AbsoluteNameIsRefused) {
  absl::Status s = Apply({{testing::File("ok", "1")}, {testing::File(outside_ + "/planted", "x")}});
  ExpectRefused(s, "layer 2/2", outside_ + "/planted", absl::StatusCode::kPermissionDenied);
  ExpectOutsideUntouched();
}

TEST_F(UnpackTest, DotDotIsRefused) {
  for (const std::string& name :
       std::vector<std::string>{"../outside/planted", "a/../../outside/planted", "a/.."}) {
    absl::Status s = Apply({{testing::File(name, "x")}});
    ExpectRefused(s, "layer 1/1", name, absl::StatusCode::kPermissionDenied);
  }
  ExpectOutsideUntouched();
}

TEST_F(UnpackTest, WritingThroughASymlinkFromAnEarlierLayerIsRefused) {
  absl::Status s =
      Apply({{testing::Symlink("evil", outside_)}, {testing::File("evil/planted", "x")}});
  ExpectRefused(s, "layer 2/2", "evil/planted", absl::StatusCode::kPermissionDenied);
  ExpectOutsideUntouched();
}

TEST_F(UnpackTest, WritingThroughASymlinkOfTheSameLayerIsRefused) {
  // Relative, climbing out of the root.
  absl::Status s = Apply({{testing::Dir("a"), testing::Symlink("a/up", "../../outside"),
                           testing::File("a/up/planted", "x")}});
  ExpectRefused(s, "layer 1/1", "a/up/planted", absl::StatusCode::kPermissionDenied);
  ExpectOutsideUntouched();
}

TEST_F(UnpackTest, EvenASymlinkThatStaysInsideIsNotWrittenThrough) {
  absl::Status s = Apply({{testing::Dir("usr/lib"), testing::Symlink("lib", "usr/lib"),
                           testing::File("lib/libc.so", "x")}});
  ExpectRefused(s, "layer 1/1", "lib/libc.so", absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(InRoot("usr/lib/libc.so"));
}

TEST_F(UnpackTest, DirectoryEntryOverASymlinkReplacesTheSymlink) {
  ASSERT_TRUE(
      Apply({{testing::Symlink("d", outside_)}, {testing::Dir("d"), testing::File("d/f", "in")}})
          .ok());
  EXPECT_TRUE(S_ISDIR(Lstat("d").st_mode));
  EXPECT_EQ(Read("d/f"), "in");
  ExpectOutsideUntouched();
}

TEST_F(UnpackTest, HardLinkOutOfTheRootIsRefused) {
  for (const std::string& target :
       std::vector<std::string>{outside_ + "/secret", "../outside/secret"}) {
    absl::Status s = Apply({{testing::Hardlink("stolen", target)}});
    ExpectRefused(s, "layer 1/1", "stolen", absl::StatusCode::kPermissionDenied);
  }
  // Through a planted symlink.
  absl::Status s =
      Apply({{testing::Symlink("evil", outside_)}, {testing::Hardlink("stolen", "evil/secret")}});
  ExpectRefused(s, "layer 2/2", "stolen", absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(InRoot("stolen"));
  ExpectOutsideUntouched();
}

TEST_F(UnpackTest, HardLinkToAMissingTargetIsRefused) {
  absl::Status s = Apply({{testing::Hardlink("x", "nowhere")}});
  ExpectRefused(s, "layer 1/1", "x", absl::StatusCode::kInvalidArgument);
}

TEST_F(UnpackTest, WhiteoutsThroughASymlinkDeleteNothingOutside) {
  absl::Status s =
      Apply({{testing::Symlink("evil", outside_)}, {testing::File("evil/.wh.secret", "")}});
  ExpectRefused(s, "layer 2/2", "evil/.wh.secret", absl::StatusCode::kPermissionDenied);
  s = Apply({{testing::Symlink("evil", outside_)}, {testing::File("evil/.wh..wh..opq", "")}});
  ExpectRefused(s, "layer 2/2", "evil/.wh..wh..opq", absl::StatusCode::kPermissionDenied);
  ExpectOutsideUntouched();
}

TEST_F(UnpackTest, SizeLimitStopsADecompressionBomb) {
  // 64 MiB of zeros, a few dozen KiB once compressed.
  options_.max_bytes = 4 << 20;
  absl::Status s =
      Apply({{testing::File("bomb", std::string(64 << 20, '\0'))}}, Compression::kGzip);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("size limit"), std::string::npos) << s;
  EXPECT_NE(s.message().find("entry \"bomb\""), std::string::npos) << s;
  EXPECT_FALSE(InRoot("bomb")) << "refused before a byte of it was written";
}

TEST_F(UnpackTest, EntryLimit) {
  options_.max_entries = 100;
  std::vector<Entry> many;
  for (int i = 0; i < 500; ++i) many.push_back(testing::File(fmt::format("f{}", i), ""));
  absl::Status s = Apply({many});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("more than 100 archive entries"), std::string::npos) << s;
}

TEST(CleanEntryPathTest, Normalizes) {
  EXPECT_EQ(*CleanEntryPath("./a//b/./c/"), "a/b/c");
  EXPECT_EQ(*CleanEntryPath("./"), "");
  EXPECT_EQ(CleanEntryPath("/a").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CleanEntryPath("a/../b").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CleanEntryPath(std::string(300, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace airlock::image::internal
