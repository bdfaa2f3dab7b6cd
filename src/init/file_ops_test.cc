// File operations of airlock-init's workers, on a temporary directory standing in for a sandbox
// file area: transfers, commits, limits, and every way a planted symlink could lead out.
#include "init/file_ops.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <functional>
#include <iterator>
#include <optional>
#include <thread>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include "gtest/gtest.h"

namespace airlock::init {
namespace {

// Plain helpers: this test links no other airlock library (the directory builds without
// sanitizers, like the static airlock-init it tests).
std::optional<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WriteWhole(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  return static_cast<bool>(out);
}

class FileOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/airlock-fileops-XXXXXX";
    base_ = mkdtemp(tmpl);
    root_ = base_ + "/root";
    outside_ = base_ + "/outside";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(outside_.c_str(), 0755), 0);
    ASSERT_TRUE(WriteWhole(outside_ + "/secret", "host secret\n"));
    root_fd_ = ::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(root_fd_, 0);
  }
  void TearDown() override {
    ::close(root_fd_);
    (void)!std::system(("rm -rf '" + base_ + "'").c_str());
  }

  FileDone Op(FileOp op, const std::string& rel, uint32_t flags = 0) {
    FileRequest req{.id = 1, .op = op, .path = rel, .mode = 0644, .flags = flags};
    FileDone done;
    RunFileOp(root_fd_, rel, req, -1, -1, &done);
    return done;
  }

  // A write fed `content`, then `commit` on the commit socket (0: the socket just closes).
  FileDone Write(const std::string& rel, const std::string& content, char commit = 'C',
                 uint64_t max_bytes = 0, uint32_t flags = 0) {
    int data[2], ctl[2];
    EXPECT_EQ(::pipe(data), 0);
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, ctl), 0);
    std::thread feeder([&] {
      (void)!::write(data[1], content.data(), content.size());
      ::close(data[1]);
      if (commit != 0) (void)!::write(ctl[1], &commit, 1);
      ::close(ctl[1]);
    });
    FileRequest req{.id = 7,
                    .op = FileOp::kWrite,
                    .path = rel,
                    .mode = 0640,
                    .flags = flags,
                    .max_bytes = max_bytes};
    FileDone done;
    RunFileOp(root_fd_, rel, req, data[0], ctl[0], &done);
    feeder.join();
    ::close(data[0]);
    ::close(ctl[0]);
    return done;
  }

  std::pair<FileDone, std::string> Read(const std::string& rel, uint64_t max_bytes = 0) {
    int data[2];
    EXPECT_EQ(::pipe(data), 0);
    std::string got;
    std::thread reader([&] {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(data[0], buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
    });
    FileRequest req{.id = 3, .op = FileOp::kRead, .path = rel, .max_bytes = max_bytes};
    FileDone done;
    RunFileOp(root_fd_, rel, req, data[1], -1, &done);
    ::close(data[1]);
    reader.join();
    ::close(data[0]);
    return {done, got};
  }

  std::string base_, root_, outside_;
  int root_fd_ = -1;
};

TEST(SplitFileRootTest, AcceptsOnlyTheSandboxFileAreas) {
  std::string root, rest;
  EXPECT_TRUE(SplitFileRoot("/sandbox/workspace/src/a.c", &root, &rest));
  EXPECT_EQ(root, "/sandbox/workspace");
  EXPECT_EQ(rest, "src/a.c");
  EXPECT_TRUE(SplitFileRoot("/sandbox/artifacts", &root, &rest));
  EXPECT_EQ(rest, "");
  EXPECT_TRUE(SplitFileRoot("/sandbox/tmp//x/", &root, &rest));
  EXPECT_EQ(rest, "x");
  for (const char* bad : {"", "relative", "/etc/passwd", "/sandbox/workspacex/a",
                          "/sandbox/workspace/../control/spec.json", "/sandbox/tools/airlock-init",
                          "/sandbox/workspace/a/../../x", "/sandbox/control/spec.json"}) {
    EXPECT_FALSE(SplitFileRoot(bad, &root, &rest)) << bad;
  }
  EXPECT_FALSE(SplitFileRoot(std::string("/sandbox/tmp/a\0b", 16), &root, &rest));
  EXPECT_FALSE(SplitFileRoot("/sandbox/tmp/" + std::string(5000, 'a'), &root, &rest));
}

TEST_F(FileOpsTest, WriteCommitsAtomicallyAndReadsBack) {
  FileDone w = Write("dir/sub/hello.txt", "hello world\n", 'C', 0, kFileParents);
  ASSERT_EQ(w.err, 0) << w.message;
  struct stat st;
  ASSERT_EQ(::stat((root_ + "/dir/sub/hello.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  auto [r, content] = Read("dir/sub/hello.txt");
  EXPECT_EQ(r.err, 0) << r.message;
  EXPECT_EQ(content, "hello world\n");
  ASSERT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(r.entries[0].size, 12u);
  // Without kFileParents a missing directory is an error.
  EXPECT_EQ(Write("nodir/x", "x").err, ENOENT);
}

TEST_F(FileOpsTest, AnAbandonedUploadLeavesNothing) {
  ASSERT_EQ(Write("keep.txt", "old").err, 0);
  FileDone w = Write("keep.txt", "half of a new vers", 0);
  EXPECT_EQ(w.err, ECANCELED);
  EXPECT_EQ(ReadAll(root_ + "/keep.txt").value_or("?"), "old");
  FileDone list = Op(FileOp::kList, "");
  ASSERT_EQ(list.err, 0);
  ASSERT_EQ(list.entries.size(), 1u) << "a temporary file was left behind";
}

TEST_F(FileOpsTest, LimitsAreEnforcedBothWays) {
  FileDone w = Write("big.bin", std::string(5000, 'x'), 'C', 4096);
  EXPECT_EQ(w.err, EFBIG);
  EXPECT_NE(::access((root_ + "/big.bin").c_str(), F_OK), 0);
  ASSERT_EQ(Write("ok.bin", std::string(5000, 'x')).err, 0);
  EXPECT_EQ(Read("ok.bin", 4096).first.err, EFBIG);
}

// Attack: symlinks planted by the sandbox that point out of the file area. Outcome: every
// operation through them fails (EXDEV from openat2) or acts on the link itself; the host file
// is never read, written or removed.
TEST_F(FileOpsTest, PlantedSymlinksNeverLeadOut) {
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/out").c_str()), 0);
  ASSERT_EQ(::symlink((outside_ + "/secret").c_str(), (root_ + "/secret-link").c_str()), 0);
  ASSERT_EQ(::symlink("../outside/secret", (root_ + "/rel-link").c_str()), 0);
  EXPECT_EQ(Read("out/secret").first.err, EXDEV);
  EXPECT_EQ(Read("secret-link").first.err, EXDEV);
  EXPECT_EQ(Read("rel-link").first.err, EXDEV);
  EXPECT_EQ(Write("out/planted", "x").err, EXDEV);
  EXPECT_NE(::access((outside_ + "/planted").c_str(), F_OK), 0);
  EXPECT_EQ(Op(FileOp::kList, "out").err, EXDEV);
  // Writing to the link's own name replaces the link; the file it pointed to is untouched.
  ASSERT_EQ(Write("secret-link", "replaced").err, 0);
  EXPECT_EQ(ReadAll(outside_ + "/secret").value_or("?"), "host secret\n");
  struct stat st;
  ASSERT_EQ(::lstat((root_ + "/secret-link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  // stat shows a link as a link, with its target, without following it.
  FileDone s = Op(FileOp::kStat, "rel-link");
  ASSERT_EQ(s.err, 0) << s.message;
  EXPECT_EQ(s.entries[0].type, FileType::kSymlink);
  EXPECT_EQ(s.entries[0].target, "../outside/secret");
  // Removing a directory tree that holds a link to the host removes the link, not the host.
  ASSERT_EQ(Write("tree/a/b.txt", "b", 'C', 0, kFileParents).err, 0);
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/tree/a/host").c_str()), 0);
  EXPECT_EQ(Op(FileOp::kRemove, "tree").err, ENOTEMPTY);
  EXPECT_EQ(Op(FileOp::kRemove, "tree", kFileRecursive).err, 0);
  EXPECT_NE(::access((root_ + "/tree").c_str(), F_OK), 0);
  EXPECT_EQ(ReadAll(outside_ + "/secret").value_or("?"), "host secret\n");
  EXPECT_EQ(Op(FileOp::kRemove, "out").err, 0);  // the link goes, the directory stays
  EXPECT_EQ(::access(outside_.c_str(), F_OK), 0);
  EXPECT_EQ(Op(FileOp::kRemove, "").err, EBUSY);
}

// Runs `body` on a thread whose seccomp filter answers openat2 with ENOSYS, as the sandbox's
// profile does, so that the file operations take their component-by-component walk.
void WithoutOpenat2(const std::function<void()>& body) {
  std::thread t([&] {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {static_cast<unsigned short>(std::size(code)), code};
    ASSERT_EQ(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
    ASSERT_EQ(::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog), 0);
    struct open_how how = {};
    ASSERT_LT(::syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof(how)), 0);
    ASSERT_EQ(errno, ENOSYS);
    body();
  });
  t.join();
}

// The same attack where openat2 answers ENOSYS (inside every sandbox). Outcome: every symlink on
// the way is refused (ELOOP), ".." too (EXDEV); ordinary nested paths work.
TEST_F(FileOpsTest, PlantedSymlinksNeverLeadOutWithoutOpenat2) {
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/out").c_str()), 0);
  ASSERT_EQ(::symlink((outside_ + "/secret").c_str(), (root_ + "/secret-link").c_str()), 0);
  ASSERT_EQ(::mkdir((root_ + "/d").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("../d", (root_ + "/d/up").c_str()), 0);
  WithoutOpenat2([&] {
    EXPECT_EQ(Read("out/secret").first.err, ELOOP);
    EXPECT_EQ(Read("secret-link").first.err, ELOOP);
    EXPECT_EQ(Read("d/up/x").first.err, ELOOP);
    EXPECT_EQ(Read("d/../secret-link").first.err, EXDEV);
    EXPECT_EQ(Write("out/planted", "x").err, ELOOP);
    EXPECT_EQ(Op(FileOp::kList, "out").err, ELOOP);
    ASSERT_EQ(Write("d/e/f.txt", "nested", 'C', 0, kFileParents).err, 0);
    EXPECT_EQ(Read("d/e/f.txt").second, "nested");
    EXPECT_EQ(Read("./d//e/f.txt").second, "nested");
    FileDone list = Op(FileOp::kList, "d");
    EXPECT_EQ(list.err, 0) << list.message;
    EXPECT_EQ(list.entries.size(), 2u);  // e and up
  });
  EXPECT_NE(::access((outside_ + "/planted").c_str(), F_OK), 0);
  EXPECT_EQ(ReadAll(outside_ + "/secret").value_or("?"), "host secret\n");
}

TEST_F(FileOpsTest, ListStatAndMkdir) {
  EXPECT_EQ(Op(FileOp::kMkdir, "a/b/c").err, ENOENT);
  ASSERT_EQ(Op(FileOp::kMkdir, "a/b/c", kFileParents).err, 0);
  EXPECT_EQ(Op(FileOp::kMkdir, "a").err, EEXIST);
  ASSERT_EQ(Write("a/f.txt", "12345").err, 0);
  FileDone list = Op(FileOp::kList, "a");
  ASSERT_EQ(list.err, 0);
  ASSERT_EQ(list.entries.size(), 2u);
  for (const FileEntry& e : list.entries) {
    if (e.name == "f.txt") {
      EXPECT_EQ(e.type, FileType::kFile);
      EXPECT_EQ(e.size, 5u);
    } else {
      EXPECT_EQ(e.name, "b");
      EXPECT_EQ(e.type, FileType::kDirectory);
    }
  }
  EXPECT_EQ(Op(FileOp::kStat, "a/nope").err, ENOENT);
  EXPECT_EQ(Op(FileOp::kStat, "a/f.txt").entries[0].size, 5u);
  EXPECT_EQ(Read("a").first.err, EISDIR);
}

TEST(FileDoneCodingTest, RoundTripsAndRefusesGarbage) {
  FileDone d;
  d.id = 9;
  d.err = ENOENT;
  d.message = "open x";
  d.entries.push_back({"x", FileType::kSymlink, 3, 0777, 1700000000, "../y"});
  FileDone back;
  ASSERT_TRUE(DecodeFileDone(EncodeFileDone(d), &back));
  EXPECT_EQ(back.id, 9u);
  EXPECT_EQ(back.err, ENOENT);
  EXPECT_EQ(back.entries[0].target, "../y");
  std::string enc = EncodeFileDone(d);
  EXPECT_FALSE(DecodeFileDone(enc.substr(0, enc.size() - 1), &back));
  std::string huge_count = enc;
  huge_count[8 + 4 + 4 + 6 + 3] = '\x7f';  // the high byte of the entry count
  EXPECT_FALSE(DecodeFileDone(huge_count, &back));
}

}  // namespace
}  // namespace airlock::init
