// Real sandboxes running commands on an imported image (busybox-static in a layer), with
// spec.image set to the image's digest and the engine given the store's unpacked root.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "common/files.h"
#include "engine/native_sandbox.h"
#include "engine/testing/sandbox_fixture.h"
#include "fmt/format.h"
#include "image/image_store.h"
#include "image/testing/image_builder.h"

namespace airlock {
namespace {

using engine::testing::SandboxTest;
namespace it = image::testing;

constexpr const char* kBusybox = "/bin/busybox";

class ImageSandboxTest : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    char tmpl[] = "/tmp/airlock-image-sandbox-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    auto store = image::ImageStore::Open({.dir = base_ + "/images", .id_offset = 0});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    auto busybox = ReadFile(kBusybox, 8 << 20);
    ASSERT_TRUE(busybox.ok()) << busybox.status()
                              << " (install busybox-static: scripts/install-deps)";
    busybox_ = *std::move(busybox);
  }
  void TearDown() override {
    store_.reset();
    if (!base_.empty()) (void)RemoveTree(base_);
  }

  // A small distribution: busybox and its applet links in layer 1, files in layer 2.
  it::Image BusyboxImage(std::vector<it::Entry> extra) {
    std::vector<it::Entry> base = {it::Dir("bin"), it::File("bin/busybox", busybox_, 0755),
                                   it::Dir("etc"), it::Dir("usr"), it::Dir("usr/bin")};
    for (const char* applet : {"sh", "cat", "ls", "id", "touch", "grep", "stat", "echo"}) {
      base.push_back(it::Symlink(fmt::format("bin/{}", applet), "busybox"));
    }
    base.push_back(it::File("etc/junk", "removed by layer 2"));
    it::Image img;
    img.layers.push_back({it::Tar(base), it::Compression::kGzip});
    extra.push_back(it::File("etc/.wh.junk", ""));
    img.layers.push_back({it::Tar(extra), it::Compression::kZstd});
    img.env = {"PATH=/bin"};
    img.tags = {"test/busybox:1"};
    return img;
  }

  image::ImageInfo Import(const it::Image& img) {
    std::string path = fmt::format("{}/image-{}.tar", base_, ++n_);
    it::WriteArchive(path, it::OciLayout(img).files);
    auto got = store_->Import(path);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? (*got)[0] : image::ImageInfo{};
  }

  absl::StatusOr<std::unique_ptr<engine::NativeSandbox>> CreateOn(const spec::SandboxSpec& s,
                                                                  const std::string& rootfs) {
    engine::SandboxOptions options;
    options.spec = s;
    options.image_rootfs = rootfs;
    options.tools_dir = AIRLOCK_TEST_TOOLS_DIR;
    options.cgroups = cgroups_.get();
    return engine::NativeSandbox::Create(std::move(options));
  }

  CommandResult RunOn(const image::ImageInfo& info, const std::string& script,
                      const std::string& tag = "test/busybox:1") {
    // The daemon's sequence: resolve the tag at create time, keep the digest in the spec, hold
    // a lease while the sandbox lives.
    auto digest = store_->Resolve(tag);
    EXPECT_TRUE(digest.ok()) << digest.status();
    EXPECT_EQ(*digest, info.digest);
    auto lease = store_->Acquire(*digest);
    EXPECT_TRUE(lease.ok()) << lease.status();
    if (!lease.ok()) return {};
    spec::SandboxSpec s = TestSpec();
    s.image = digest->str();
    auto sandbox = CreateOn(s, lease->rootfs());
    EXPECT_TRUE(sandbox.ok()) << sandbox.status();
    if (!sandbox.ok()) return {};
    auto r = (*sandbox)->Exec({.argv = {"/bin/sh", "-c", script}}, {});
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(store_->Remove(digest->str()).code(), absl::StatusCode::kFailedPrecondition)
        << "an image in use must not be removable";
    DestroyAndCheckGone(std::move(*sandbox));
    return r.ok() ? *r : CommandResult{};
  }

  std::string base_;
  std::string busybox_;
  std::unique_ptr<image::ImageStore> store_;
  int n_ = 0;
};

TEST_F(ImageSandboxTest, RunsACommandOnAnImportedImage) {
  image::ImageInfo info = Import(BusyboxImage({it::File("etc/motd", "hello from the image\n")}));
  CommandResult r = RunOn(info,
                          "cat /etc/motd; ls /etc/junk 2>/dev/null || echo junk-gone; "
                          "grep -o '\"image\": *\"[^\"]*\"' /sandbox/control/spec.json; "
                          "touch /bin/new 2>/dev/null || echo root-read-only; id -u");
  EXPECT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_EQ(r.stdout_preview, fmt::format("hello from the image\njunk-gone\n\"image\": \"{}\"\n"
                                          "root-read-only\n10001\n",
                                          info.digest.str()));
}

TEST_F(ImageSandboxTest, TheImagesOwnPasswdEntriesAreKept) {
  image::ImageInfo info =
      Import(BusyboxImage({it::File("etc/passwd",
                                    "root:x:0:0::/root:/bin/sh\nimagesvc:x:100:100::/:/bin/sh\n"
                                    "human:x:1000:1000::/home/human:/bin/sh\n")}));
  CommandResult r = RunOn(info, "cat /etc/passwd");
  EXPECT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_EQ(r.stdout_preview,
            "root:x:0:0::/root:/bin/sh\nimagesvc:x:100:100::/:/bin/sh\n"
            "sandbox:x:10001:10001:sandbox:/sandbox/home:/bin/sh\n");
}

// Attack: the image's etc/passwd is an absolute symlink to a host file, at a path that the
// image holds too. The engine reads passwd/group to build the sandbox's own; resolving the
// link on the host would copy the host file's lines into the sandbox. It must resolve it inside
// the image, as the sandbox would, and read the image's file.
TEST_F(ImageSandboxTest, AnImagePasswdSymlinkNeverReadsTheHostsFile) {
  char tmpl[] = "/var/tmp/airlock-passwd-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string host_dir = tmpl;
  ASSERT_TRUE(WriteFileAtomic(host_dir + "/passwd", "hostleak:x:5:5::/:/bin/sh\n", 0600).ok());
  std::string in_image = host_dir.substr(1) + "/passwd";
  image::ImageInfo info =
      Import(BusyboxImage({it::Symlink("etc/passwd", host_dir + "/passwd"),
                           it::File(in_image, "imagefile:x:6:6::/:/bin/sh\n")}));
  CommandResult r = RunOn(info, "cat /etc/passwd");
  (void)RemoveTree(host_dir);
  EXPECT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_EQ(r.stdout_preview.find("hostleak"), std::string::npos) << r.stdout_preview;
  EXPECT_EQ(r.stdout_preview,
            "imagefile:x:6:6::/:/bin/sh\nsandbox:x:10001:10001:sandbox:/sandbox/home:/bin/sh\n");
}

// Attack: a setuid-root binary in the image. The bit is dropped on import, and the root is
// mounted nosuid in any case, so running it gives no privilege.
TEST_F(ImageSandboxTest, SetuidFilesInTheImageGrantNothing) {
  image::ImageInfo info = Import(BusyboxImage({it::File("bin/busybox-suid", busybox_, 04755)}));
  struct stat st;
  ASSERT_EQ(stat((store_->RootfsPath(info.digest) + "/bin/busybox-suid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  CommandResult r =
      RunOn(info, "/bin/busybox-suid id -u; grep ' /bin ' /proc/mounts | grep -c 'ro,nosuid'");
  EXPECT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_EQ(r.stdout_preview, "10001\n1\n");
}

// The image scripts/build-base-image makes; scripts/test builds it and sets AIRLOCK_BASE_IMAGE.
TEST_F(ImageSandboxTest, BaseImageRunsGitAndPython) {
  const char* path = std::getenv("AIRLOCK_BASE_IMAGE");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP()
        << "AIRLOCK_BASE_IMAGE is not set (scripts/test builds the base image and sets it)";
  }
  auto got = store_->Import(path);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  const image::ImageInfo& info = (*got)[0];
  EXPECT_EQ(info.tags, std::vector<std::string>{"agent-runner-base:latest"});
  EXPECT_EQ(info.config.working_dir, "/sandbox/workspace");
  CommandResult r = RunOn(info,
                          "python3 -c 'print(6*7)'; git --version | cut -d' ' -f1-2; "
                          "ls /usr/local/libexec/airlock; cut -d. -f1 /etc/debian_version; "
                          "test -e /etc/ssl/certs/ca-certificates.crt && echo certs",
                          "agent-runner-base");
  EXPECT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_EQ(r.stdout_preview, "42\ngit version\nairlock-forwarder\nairlock-init\n12\ncerts\n");
}

TEST_F(ImageSandboxTest, AnImageNeedsItsResolvedRootAndDigest) {
  spec::SandboxSpec s = TestSpec();
  s.image = "sha256:" + std::string(64, 'a');
  auto sandbox = CreateOn(s, "");
  ASSERT_FALSE(sandbox.ok());
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kFailedPrecondition) << sandbox.status();
  EXPECT_NE(sandbox.status().message().find("image_rootfs"), std::string::npos);

  s.image = "test/busybox:1";  // a tag must be resolved first, so the stored spec pins it
  sandbox = CreateOn(s, base_);
  ASSERT_FALSE(sandbox.ok());
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kInvalidArgument) << sandbox.status();
  EXPECT_NE(sandbox.status().message().find("resolve the tag"), std::string::npos);

  s.image.clear();
  sandbox = CreateOn(s, base_);
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kInvalidArgument) << sandbox.status();
}

}  // namespace
}  // namespace airlock
