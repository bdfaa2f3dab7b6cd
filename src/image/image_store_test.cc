// The image store on real files: imports of OCI layouts (directories and tarballs) and docker
// save archives written by libarchive, verification, limits, concurrency, tags and removal.
#include "image/image_store.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "common/files.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "image/internal/manifest.h"
#include "image/testing/image_builder.h"
#include "nlohmann/json.hpp"

namespace airlock::image {
namespace {

using testing::Compression;
using testing::Image;
using testing::Layer;

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  return out;
}

// A two-layer image: a base, and a layer that deletes and adds.
Image TwoLayers(Compression compression = Compression::kGzip) {
  Image img;
  img.layers.push_back(
      {testing::Tar({testing::Dir("bin"), testing::File("bin/hello", "hi\n", 0755),
                     testing::File("etc/os-release", "ID=test\n"), testing::File("tmp-junk", "x")}),
       compression});
  img.layers.push_back({testing::Tar({testing::File(".wh.tmp-junk", ""),
                                      testing::File("app/main.py", "print(1)\n")}),
                        compression});
  img.env = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"};
  img.working_dir = "/app";
  img.user = "1000:1000";
  img.tags = {"example/app:1.0"};
  return img;
}

class ImageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/airlock-images-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    store_ = OpenStore();
  }
  void TearDown() override {
    store_.reset();
    (void)RemoveTree(base_);
  }
  std::unique_ptr<ImageStore> OpenStore(ImportLimits limits = {}) {
    auto s = ImageStore::Open({.dir = base_ + "/store", .limits = limits});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::string WriteLayoutDir(const testing::Layout& layout, const std::string& name = "layout") {
    std::string dir = base_ + "/" + name;
    testing::WriteTree(dir, layout.files);
    return dir;
  }
  ImageInfo ImportOne(const std::string& path, ImportOptions options = {}) {
    auto got = store_->Import(path, options);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok() || got->size() != 1) {
      ADD_FAILURE() << "expected one image";
      return {};
    }
    return (*got)[0];
  }
  std::string Rootfs(const ImageInfo& info) const { return store_->RootfsPath(info.digest); }
  // Nothing of a failed import is left: no root, no blob, no work directory, no index entry.
  void ExpectStoreEmpty() {
    EXPECT_TRUE(Entries(base_ + "/store/roots").empty());
    EXPECT_TRUE(Entries(base_ + "/store/blobs/sha256").empty());
    EXPECT_TRUE(Entries(base_ + "/store/tmp").empty());
    auto list = store_->List();
    ASSERT_TRUE(list.ok()) << list.status();
    EXPECT_TRUE(list->empty());
  }

  std::string base_;
  std::unique_ptr<ImageStore> store_;
};

TEST_F(ImageStoreTest, ImportsAnOciLayoutDirectory) {
  testing::Layout layout = testing::OciLayout(TwoLayers());
  ImageInfo info = ImportOne(WriteLayoutDir(layout));
  EXPECT_EQ(info.digest.str(), layout.manifest_digest);
  EXPECT_EQ(info.config_digest.str(), layout.config_digest);
  EXPECT_EQ(info.layers.size(), 2u);
  EXPECT_EQ(info.tags, std::vector<std::string>{"example/app:1.0"});
  EXPECT_EQ(info.config.env, (std::vector<std::string>{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}));
  EXPECT_EQ(info.config.working_dir, "/app");
  EXPECT_EQ(info.config.user, "1000:1000");
  EXPECT_EQ(info.unpacked_bytes, 3 + 8 + 1 + 9);
  EXPECT_GT(info.blob_bytes, 0);

  std::string root = Rootfs(info);
  EXPECT_EQ(*ReadFile(root + "/bin/hello"), "hi\n");
  EXPECT_EQ(*ReadFile(root + "/app/main.py"), "print(1)\n");
  EXPECT_NE(access((root + "/tmp-junk").c_str(), F_OK), 0) << "whited out by layer 2";
  for (const Digest& d : info.layers) {
    EXPECT_EQ(access(fmt::format("{}/store/blobs/sha256/{}", base_, d.hex()).c_str(), F_OK), 0);
  }
  EXPECT_TRUE(Entries(base_ + "/store/tmp").empty());
  struct stat st;
  ASSERT_EQ(stat((base_ + "/store").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "the store holds other users' files";

  // Resolution by tag, by digest, by pinned reference, and with docker's default names.
  EXPECT_EQ(*store_->Resolve("example/app:1.0"), info.digest);
  EXPECT_EQ(*store_->Resolve("docker.io/example/app:1.0"), info.digest);
  EXPECT_EQ(*store_->Resolve(info.digest.str()), info.digest);
  EXPECT_EQ(*store_->Resolve("whatever:tag@" + info.digest.str()), info.digest);
  auto list = store_->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].digest, info.digest);
}

TEST_F(ImageStoreTest, OciTarballsPlainOrCompressedGiveTheSameImage) {
  testing::Layout layout = testing::OciLayout(TwoLayers(Compression::kZstd));
  std::string plain = base_ + "/image.tar";
  std::string gz = base_ + "/image.tar.gz";
  testing::WriteArchive(plain, layout.files);
  testing::WriteArchive(gz, layout.files, Compression::kGzip);
  ImageInfo a = ImportOne(plain);
  EXPECT_EQ(a.digest.str(), layout.manifest_digest);
  struct stat before;
  ASSERT_EQ(stat((Rootfs(a) + "/bin/hello").c_str(), &before), 0);
  // The second import finds the image and does not unpack it again.
  std::atomic<int> unpacking{0};
  ImageInfo b = ImportOne(gz, {.progress = [&](const ImportProgress& p) {
                            if (p.stage == ImportProgress::Stage::kUnpacking) ++unpacking;
                          }});
  EXPECT_EQ(b.digest, a.digest);
  EXPECT_EQ(unpacking, 0);
  struct stat after;
  ASSERT_EQ(stat((Rootfs(b) + "/bin/hello").c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
}

TEST_F(ImageStoreTest, ImportsADockerSaveTarball) {
  Image img = TwoLayers(Compression::kNone);
  img.tags = {"busybox:latest", "docker.io/library/busybox:1.35"};
  testing::Layout save = testing::DockerSave(img);
  std::string path = base_ + "/save.tar";
  testing::WriteArchive(path, save.files);
  ImageInfo info = ImportOne(path);
  EXPECT_EQ(info.config_digest.str(), save.config_digest);
  EXPECT_EQ(info.tags, (std::vector<std::string>{"busybox:1.35", "busybox:latest"}));
  EXPECT_EQ(*store_->Resolve("busybox"), info.digest);
  EXPECT_EQ(*ReadFile(Rootfs(info) + "/app/main.py"), "print(1)\n");
  // Its manifest is the canonical one the store wrote, so the digest is reproducible.
  auto manifest = ReadFile(fmt::format("{}/store/blobs/sha256/{}", base_, info.digest.hex()));
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(testing::Sha256Digest(*manifest), info.digest.str());
  auto parsed = internal::ParseManifest(*manifest);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->layers.size(), 2u);

  store_.reset();
  ASSERT_TRUE(RemoveTree(base_ + "/store").ok());
  store_ = OpenStore();
  EXPECT_EQ(ImportOne(path).digest, info.digest);
}

TEST_F(ImageStoreTest, LayoutWithImagesForSeveralPlatformsImportsTheHostOne) {
  Image host = TwoLayers();
  Image other = TwoLayers();
  other.architecture = internal::HostPlatform().architecture == "s390x" ? "amd64" : "s390x";
  other.layers[1].tar = testing::Tar({testing::File("other", "x")});
  testing::Layout a = testing::OciLayout(host);
  testing::Layout b = testing::OciLayout(other);
  using Json = nlohmann::json;
  auto entry = [](const testing::Layout& l, const std::string& arch) {
    const std::string& m = l.files.at("blobs/sha256/" + l.manifest_digest.substr(7));
    return Json{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                {"digest", l.manifest_digest},
                {"size", m.size()},
                {"platform", {{"os", "linux"}, {"architecture", arch}}}};
  };
  std::string nested =
      Json{{"schemaVersion", 2},
           {"mediaType", "application/vnd.oci.image.index.v1+json"},
           {"manifests",
            {entry(b, other.architecture), entry(a, internal::HostPlatform().architecture)}}}
          .dump();
  std::map<std::string, std::string> files = a.files;
  files.insert(b.files.begin(), b.files.end());
  files["blobs/sha256/" + testing::Sha256Digest(nested).substr(7)] = nested;
  files["index.json"] =
      Json{{"schemaVersion", 2},
           {"manifests",
            {{{"mediaType", "application/vnd.oci.image.index.v1+json"},
              {"digest", testing::Sha256Digest(nested)},
              {"size", nested.size()},
              {"annotations", {{"io.containerd.image.name", "docker.io/library/multi:1"}}}}}}}
          .dump();
  ImageInfo info = ImportOne(WriteLayoutDir({files, "", ""}));
  EXPECT_EQ(info.digest.str(), a.manifest_digest);

  // With only the other platform's image, the import says which platforms it found.
  auto got = store_->Import(WriteLayoutDir(b, "other"));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
  EXPECT_NE(got.status().message().find(other.architecture), std::string::npos) << got.status();
}

TEST_F(ImageStoreTest, ABlobWhoseContentDoesNotMatchItsDigestIsRefused) {
  testing::Layout layout = testing::OciLayout(TwoLayers());
  std::string dir = WriteLayoutDir(layout);
  // Swap the content of layer 2's blob for other bytes (same name, same size).
  auto manifest =
      internal::ParseManifest(layout.files.at("blobs/sha256/" + layout.manifest_digest.substr(7)));
  ASSERT_TRUE(manifest.ok());
  std::string blob = fmt::format("{}/blobs/sha256/{}", dir, manifest->layers[1].digest.hex());
  std::string content = *ReadFile(blob);
  content[content.size() / 2] ^= 0x5a;
  ASSERT_TRUE(WriteFileAtomic(blob, content).ok());
  auto got = store_->Import(dir);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find(std::string(manifest->layers[1].digest.hex())),
            std::string::npos)
      << got.status();
  ExpectStoreEmpty();
}

TEST_F(ImageStoreTest, ADockerSaveLayerThatIsNotTheConfigsIsRefused) {
  Image img = TwoLayers(Compression::kNone);
  testing::Layout save = testing::DockerSave(img);
  save.files[fmt::format("{:064x}/layer.tar", 2)] = testing::Tar({testing::File("evil", "x")});
  std::string path = base_ + "/save.tar";
  testing::WriteArchive(path, save.files);
  auto got = store_->Import(path);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("but the config lists"), std::string::npos) << got.status();
  ExpectStoreEmpty();

  // A config whose content does not match the digest in its name.
  testing::Layout renamed = testing::DockerSave(img);
  std::string config_name = save.config_digest.substr(7) + ".json";
  renamed.files[config_name] = renamed.files[config_name] + " ";
  testing::WriteArchive(path, renamed.files);
  got = store_->Import(path);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  ExpectStoreEmpty();
}

TEST_F(ImageStoreTest, AHostileLayerLeavesNothingHalfImported) {
  Image img = TwoLayers();
  img.layers.push_back({testing::Tar({testing::File("fine", "1"), testing::File("../escape", "x")}),
                        Compression::kGzip});
  auto got = store_->Import(WriteLayoutDir(testing::OciLayout(img)));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  EXPECT_NE(got.status().message().find("layer 3/3"), std::string::npos) << got.status();
  EXPECT_NE(got.status().message().find("entry \"../escape\""), std::string::npos) << got.status();
  EXPECT_NE(access((base_ + "/escape").c_str(), F_OK), 0);
  ExpectStoreEmpty();
}

TEST_F(ImageStoreTest, TheArchiveAnImageComesInIsGuardedToo) {
  std::map<std::string, std::string> files = testing::OciLayout(TwoLayers()).files;
  files["../../planted"] = "x";
  std::string path = base_ + "/evil.tar";
  testing::WriteArchive(path, files);
  auto got = store_->Import(path);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  EXPECT_NE(got.status().message().find("entry \"../../planted\""), std::string::npos);
  ExpectStoreEmpty();
}

TEST_F(ImageStoreTest, LimitsStopABombWithAClearErrorAndLeaveNothing) {
  store_ = OpenStore({.max_unpacked_bytes = 8 << 20, .max_entries = 1000});
  Image bomb;
  bomb.layers.push_back(
      {testing::Tar({testing::File("zeros", std::string(64 << 20, '\0'))}), Compression::kGzip});
  testing::Layout layout = testing::OciLayout(bomb);
  EXPECT_LT(testing::Compress(bomb.layers[0].tar, Compression::kGzip).size(), 1u << 20);
  auto got = store_->Import(WriteLayoutDir(layout));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_NE(got.status().message().find("exceed 8388608 bytes"), std::string::npos) << got.status();
  ExpectStoreEmpty();

  Image many;
  std::vector<testing::Entry> entries;
  for (int i = 0; i < 2000; ++i) entries.push_back(testing::File(fmt::format("f{}", i), ""));
  many.layers.push_back({testing::Tar(entries), Compression::kNone});
  got = store_->Import(WriteLayoutDir(testing::OciLayout(many), "many"));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_NE(got.status().message().find("more than 1000 archive entries"), std::string::npos);
  ExpectStoreEmpty();
}

TEST_F(ImageStoreTest, ConcurrentImportsOfTheSameImageUnpackItOnce) {
  std::string dir = WriteLayoutDir(testing::OciLayout(TwoLayers()));
  std::string tarball = base_ + "/image.tar";
  testing::WriteArchive(tarball, testing::OciLayout(TwoLayers()).files);
  constexpr int kImporters = 6;
  std::atomic<int> unpacked{0};
  std::vector<std::string> digests(kImporters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kImporters; ++i) {
    threads.emplace_back([&, i] {
      // Half share the store object, half have their own (as another process would).
      std::unique_ptr<ImageStore> own = i % 2 ? OpenStore() : nullptr;
      ImageStore& store = own ? *own : *store_;
      bool counted = false;
      auto got = store.Import(i % 3 ? dir : tarball, {.progress = [&](const ImportProgress& p) {
                                if (p.stage == ImportProgress::Stage::kUnpacking && !counted) {
                                  counted = true;
                                  ++unpacked;
                                }
                              }});
      ASSERT_TRUE(got.ok()) << got.status();
      digests[i] = (*got)[0].digest.str();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(unpacked, 1);
  for (const std::string& d : digests) EXPECT_EQ(d, digests[0]);
  EXPECT_EQ(Entries(base_ + "/store/roots").size(), 1u);
  EXPECT_TRUE(Entries(base_ + "/store/tmp").empty());
  auto list = store_->List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
}

TEST_F(ImageStoreTest, TagsMoveAndResolve) {
  ImageInfo a = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers()), "a"));
  Image other = TwoLayers();
  other.env = {"OTHER=1"};
  other.tags = {};
  ImageInfo b = ImportOne(WriteLayoutDir(testing::OciLayout(other), "b"), {.tags = {"mine"}});
  EXPECT_EQ(b.tags, std::vector<std::string>{"mine:latest"});
  EXPECT_EQ(*store_->Resolve("mine"), b.digest);

  ASSERT_TRUE(store_->Tag(a.digest, "mine:latest").ok());  // moves the tag
  EXPECT_EQ(*store_->Resolve("mine"), a.digest);
  EXPECT_TRUE(store_->Get(b.digest)->tags.empty());
  ASSERT_TRUE(store_->Untag("mine").ok());
  auto gone = store_->Resolve("mine");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("mine:latest"), std::string::npos) << gone.status();
  EXPECT_EQ(store_->Untag("mine").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Resolve("sha256:" + std::string(64, '0')).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Resolve("Not A Ref").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Tag(*Digest::Parse("sha256:" + std::string(64, '0')), "x").code(),
            absl::StatusCode::kNotFound);
}

// Two API keys on one store. The attack: key B gives its own image the tag key A runs
// ("example/app:1.0"), hoping A's next sandbox runs B's code, then removes A's image. Neither
// works: each key's tags are its own, and B cannot see, tag or remove A's image even by digest.
TEST_F(ImageStoreTest, AKeysImagesAndTagsAreItsOwn) {
  const std::string alice = "ak-000000000001", bob = "ak-000000000002";
  ImageInfo a = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers()), "a"), {.owner = alice});
  Image other = TwoLayers();
  other.env = {"OTHER=1"};
  ImageInfo b = ImportOne(WriteLayoutDir(testing::OciLayout(other), "b"),
                          {.tags = {"example/app:1.0"}, .owner = bob});
  ASSERT_NE(a.digest, b.digest);
  EXPECT_EQ(*store_->Resolve("example/app:1.0", alice), a.digest);
  EXPECT_EQ(*store_->Resolve("example/app:1.0", bob), b.digest);
  EXPECT_EQ(store_->Get(a.digest, alice)->tags, std::vector<std::string>{"example/app:1.0"});

  // By digest, Alice's image is not there for Bob (nor for the node), as if never imported.
  for (const std::string& viewer : {bob, std::string(kNodeImages)}) {
    absl::StatusOr<Digest> seen = store_->Resolve(a.digest.str(), viewer);
    EXPECT_EQ(seen.status().code(), absl::StatusCode::kNotFound) << viewer;
    EXPECT_EQ(seen.status().message(),
              fmt::format("image {} is not in the image store", a.digest.str()));
    EXPECT_EQ(store_->Get(a.digest, viewer).status().code(), absl::StatusCode::kNotFound);
  }
  EXPECT_EQ(store_->Tag(a.digest, "stolen:1", bob).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Remove(a.digest.str(), bob).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Untag("example/app:1.0", bob).code(), absl::StatusCode::kOk);  // Bob's own
  EXPECT_EQ(*store_->Resolve("example/app:1.0", alice), a.digest);
  auto listed = store_->List(bob);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].digest, b.digest);
  EXPECT_EQ(access(Rootfs(a).c_str(), F_OK), 0);

  // The same image imported by both is stored once; it goes with its last owner.
  Image same = TwoLayers();
  same.tags = {};  // the layout's annotations: the manifest, and so the digest, is the same
  ImageInfo shared =
      ImportOne(WriteLayoutDir(testing::OciLayout(same), "a2"), {.tags = {"copy:1"}, .owner = bob});
  EXPECT_EQ(shared.digest, a.digest);
  EXPECT_EQ(shared.tags, std::vector<std::string>{"copy:1"}) << "Bob sees only his own tags";
  ASSERT_TRUE(store_->Remove("copy:1", bob).ok());
  EXPECT_EQ(store_->Resolve(a.digest.str(), bob).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*store_->Resolve("example/app:1.0", alice), a.digest) << "Alice's stays";
  EXPECT_EQ(access(Rootfs(a).c_str(), F_OK), 0);
  ASSERT_TRUE(store_->Remove("example/app:1.0", alice).ok());
  EXPECT_NE(access(Rootfs(a).c_str(), F_OK), 0);
}

// The node's images: every key sees them and may tag them for itself, a key's own tag wins over
// the node's, and only the node removes them.
TEST_F(ImageStoreTest, TheNodesImagesAreSeenByEveryKeyAndRemovedOnlyByTheNode) {
  const std::string alice = "ak-000000000001";
  ImageInfo base =
      ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers()), "base"), {.tags = {"base:1"}});
  EXPECT_EQ(*store_->Resolve("base:1", alice), base.digest);
  EXPECT_EQ(*store_->Resolve(base.digest.str(), alice), base.digest);
  EXPECT_EQ(store_->Get(base.digest, alice)->tags,
            (std::vector<std::string>{"base:1", "example/app:1.0"}));
  absl::Status refused = store_->Remove("base:1", alice);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_NE(refused.message().find("airlockd admin remove-image"), std::string::npos) << refused;

  Image mine = TwoLayers();
  mine.env = {"MINE=1"};
  mine.tags = {};
  ImageInfo own = ImportOne(WriteLayoutDir(testing::OciLayout(mine), "mine"),
                            {.tags = {"base:1"}, .owner = alice});
  EXPECT_EQ(*store_->Resolve("base:1", alice), own.digest);
  EXPECT_EQ(*store_->Resolve("base:1"), base.digest) << "the node's tag is unchanged";
  EXPECT_EQ(store_->Get(base.digest, alice)->tags, std::vector<std::string>{"example/app:1.0"})
      << "the node's base:1 is overridden for Alice";
  ASSERT_TRUE(store_->Tag(base.digest, "pinned:1", alice).ok());
  EXPECT_EQ(*store_->Resolve("pinned:1", alice), base.digest);
  EXPECT_EQ(store_->Resolve("pinned:1").status().code(), absl::StatusCode::kNotFound);

  // Alice imports the node's image too, then removes it: her tag goes with her hold, though she
  // still sees the image as the node's.
  Image same = TwoLayers();
  same.tags = {};
  ImportOne(WriteLayoutDir(testing::OciLayout(same), "same"), {.tags = {"mine:1"}, .owner = alice});
  ASSERT_TRUE(store_->Remove("mine:1", alice).ok());
  EXPECT_EQ(store_->Resolve("mine:1", alice).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*store_->Resolve(base.digest.str(), alice), base.digest);

  ASSERT_TRUE(store_->Remove("base:1").ok());
  EXPECT_EQ(store_->Resolve("pinned:1", alice).status().code(), absl::StatusCode::kNotFound)
      << "a key's tag on a node image goes with it";
  EXPECT_EQ(*store_->Resolve("base:1", alice), own.digest);
}

// The attack: Bob knows the digests and sizes of the layers of Alice's image (a secret baked
// into it) and sends a layout that names them without their content, hoping the store fills
// them in from Alice's copy. The import fails for want of the blobs. Alice herself may leave
// out layers of images she has.
TEST_F(ImageStoreTest, ALayerIsNeverGivenForItsDigestAlone) {
  const std::string alice = "ak-000000000001", bob = "ak-000000000002";
  ImageInfo a = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers()), "a"), {.owner = alice});
  auto without_layers = [&](Image img, const std::string& name) {
    img.tags = {};
    testing::Layout layout = testing::OciLayout(img);
    for (const Digest& l : a.layers) layout.files.erase("blobs/sha256/" + std::string(l.hex()));
    return WriteLayoutDir(layout, name);
  };
  Image bobs = TwoLayers();
  bobs.env = {"BOB=1"};  // his own config, so his own manifest, naming Alice's layers
  absl::StatusOr<std::vector<ImageInfo>> got =
      store_->Import(without_layers(bobs, "bob"), {.owner = bob});
  ASSERT_FALSE(got.ok()) << "Bob was given Alice's layers for their digests";
  EXPECT_NE(got.status().message().find(std::string(a.layers[0].hex())), std::string::npos)
      << got.status();
  EXPECT_TRUE(store_->List(bob)->empty());

  Image alices = TwoLayers();
  alices.env = {"ALICE=2"};
  EXPECT_TRUE(store_->Import(without_layers(alices, "alice"), {.owner = alice}).ok());
}

// The owner's quota is checked as each image is committed: an image beyond it is refused and
// leaves the owner's images and tags as they were, a tag the refused import would have moved
// included. An image the owner holds already never counts twice.
TEST_F(ImageStoreTest, AnImageBeyondItsOwnersQuotaIsRefusedWhenCommitted) {
  const std::string alice = "ak-000000000001";
  ImageInfo first = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers()), "a"),
                              {.tags = {"keep:1"}, .owner = alice});
  const int64_t size = first.unpacked_bytes + first.blob_bytes;
  EXPECT_EQ(*store_->HeldBytes(alice), size);
  EXPECT_EQ(*store_->HeldBytes("ak-000000000002"), 0);
  Image other = TwoLayers();
  other.env = {"OTHER=1"};
  other.tags = {};
  const std::string other_dir = WriteLayoutDir(testing::OciLayout(other), "b");
  absl::StatusOr<std::vector<ImageInfo>> refused = store_->Import(
      other_dir, {.tags = {"keep:1"}, .owner = alice, .max_owner_bytes = size + size / 2});
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("image quota"), std::string::npos);
  EXPECT_EQ(*store_->Resolve("keep:1", alice), first.digest) << "the refused import moved a tag";
  EXPECT_EQ(store_->List(alice)->size(), 1u);

  EXPECT_TRUE(store_
                  ->Import(WriteLayoutDir(testing::OciLayout(TwoLayers()), "again"),
                           {.owner = alice, .max_owner_bytes = 1})
                  .ok())
      << "a re-import of a held image adds nothing";
  EXPECT_TRUE(store_->Import(other_dir, {.owner = alice, .max_owner_bytes = 3 * size}).ok());
  EXPECT_EQ(store_->List(alice)->size(), 2u);
  absl::StatusOr<std::vector<ImageInfo>> held = store_->List(alice);
  EXPECT_EQ(*store_->HeldBytes(alice), (*held)[0].unpacked_bytes + (*held)[0].blob_bytes +
                                           (*held)[1].unpacked_bytes + (*held)[1].blob_bytes);
}

// The index every owner shares stays bounded: one owner's tags are limited (4096), so a key
// cannot grow it until no owner can load it.
TEST_F(ImageStoreTest, AnOwnersTagsAreLimited) {
  std::vector<std::string> many;
  for (int i = 0; i <= 4096; ++i) many.push_back(fmt::format("t/{}:1", i));
  absl::StatusOr<std::vector<ImageInfo>> got = store_->Import(
      WriteLayoutDir(testing::OciLayout(TwoLayers())), {.tags = many, .owner = "ak-000000000001"});
  ASSERT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_NE(got.status().message().find("too many tags"), std::string::npos);
  EXPECT_TRUE(store_->List("ak-000000000001")->empty());
  many.pop_back();
  many.pop_back();  // 4095 with the layout's own tag
  EXPECT_TRUE(store_
                  ->Import(WriteLayoutDir(testing::OciLayout(TwoLayers()), "again"),
                           {.tags = many, .owner = "ak-000000000001"})
                  .ok());
}

// Each holder sees its own import time, never another's: Bob's re-import of Alice's image does
// not tell him when she imported it.
TEST_F(ImageStoreTest, EachHolderSeesItsOwnImportTime) {
  const std::string alice = "ak-000000000001", bob = "ak-000000000002";
  ImageInfo a = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers()), "a"), {.owner = alice});
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // import times are in seconds
  ImageInfo b = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers()), "b"), {.owner = bob});
  ASSERT_EQ(a.digest, b.digest);
  EXPECT_GT(b.imported, a.imported);
  EXPECT_EQ(store_->Get(a.digest, alice)->imported, a.imported);
}

// A store written before owners existed (index version 1): its images become the node's.
TEST_F(ImageStoreTest, AVersionOneIndexHoldsTheNodesImages) {
  ImageInfo a = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers())));
  store_.reset();
  const std::string index = base_ + "/store/index.json";
  nlohmann::json j = nlohmann::json::parse(*ReadFile(index));
  ASSERT_EQ(j["version"], 2);
  nlohmann::json& img = j["images"][a.digest.str()];
  img.erase("owners");
  img["tags"] = nlohmann::json::array({"example/app:1.0"});
  j["version"] = 1;
  ASSERT_TRUE(WriteFileAtomic(index, j.dump(), 0600).ok());
  store_ = OpenStore();
  EXPECT_EQ(*store_->Resolve("example/app:1.0", "ak-000000000001"), a.digest);
  EXPECT_EQ(store_->Remove(a.digest.str(), "ak-000000000001").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(store_->Remove("example/app:1.0").ok());
}

TEST_F(ImageStoreTest, RemoveWaitsForLeasesAndKeepsSharedBlobs) {
  Image first = TwoLayers();
  Image second = TwoLayers();  // shares layer 1
  second.layers[1].tar = testing::Tar({testing::File("second", "2")});
  second.tags = {"second:1"};
  ImageInfo a = ImportOne(WriteLayoutDir(testing::OciLayout(first), "a"));
  ImageInfo b = ImportOne(WriteLayoutDir(testing::OciLayout(second), "b"));
  ASSERT_EQ(a.layers[0], b.layers[0]);

  auto lease = store_->Acquire(a.digest);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->rootfs(), Rootfs(a));
  EXPECT_EQ(store_->Leases(a.digest), 1);
  absl::Status s = store_->Remove("example/app:1.0");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("in use by 1 sandbox"), std::string::npos) << s;
  EXPECT_EQ(*ReadFile(lease->rootfs() + "/bin/hello"), "hi\n");

  lease->Release();
  EXPECT_EQ(store_->Leases(a.digest), 0);
  ASSERT_TRUE(store_->Remove("example/app:1.0").ok());
  EXPECT_NE(access(Rootfs(a).c_str(), F_OK), 0);
  auto blob = [&](const Digest& d) {
    return access(fmt::format("{}/store/blobs/sha256/{}", base_, d.hex()).c_str(), F_OK) == 0;
  };
  EXPECT_FALSE(blob(a.digest));
  EXPECT_FALSE(blob(a.layers[1]));
  EXPECT_TRUE(blob(a.layers[0])) << "still used by the second image";
  EXPECT_EQ(store_->Resolve(a.digest.str()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Acquire(a.digest).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Entries(base_ + "/store/tmp").empty());
  EXPECT_EQ(*ReadFile(Rootfs(b) + "/second"), "2");
}

// Two processes on one store (the daemon, and `airlockd admin remove-image`), here two store
// objects: a lease taken by one (a sandbox being created) holds the image against a removal by
// the other; once released, the removal goes through.
TEST_F(ImageStoreTest, ALeaseHoldsTheImageAgainstRemovalByAnotherProcess) {
  ImageInfo a = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers())));
  std::unique_ptr<ImageStore> other = OpenStore();
  ASSERT_NE(other, nullptr);
  absl::StatusOr<ImageLease> lease = store_->Acquire(a.digest);
  ASSERT_TRUE(lease.ok()) << lease.status();
  absl::Status refused = other->Remove(a.digest.str());
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("another process"), std::string::npos) << refused;
  EXPECT_EQ(access(Rootfs(a).c_str(), F_OK), 0);
  lease->Release();
  EXPECT_TRUE(other->Remove(a.digest.str()).ok());
  EXPECT_NE(access(Rootfs(a).c_str(), F_OK), 0);
  EXPECT_TRUE(Entries(base_ + "/store/leases").empty()) << "the lease file stayed";
}

TEST_F(ImageStoreTest, RemoveAsksTheOwnersInUseHook) {
  ImageInfo a = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers())));
  bool busy = true;
  std::vector<std::string> asked;
  auto s = ImageStore::Open(
      {.dir = base_ + "/store",
       .in_use = [&](const Digest& d, const std::optional<std::string>& owner) {
         asked.push_back(fmt::format("{} {}", d.str(), owner ? "owner:" + *owner : "any"));
         return busy && !owner;
       }});
  ASSERT_TRUE(s.ok());
  absl::Status r = (*s)->Remove(a.digest.str());
  EXPECT_EQ(r.code(), absl::StatusCode::kFailedPrecondition) << r;
  EXPECT_EQ(asked, (std::vector<std::string>{a.digest.str() + " owner:", a.digest.str() + " any"}));
  busy = false;
  EXPECT_TRUE((*s)->Remove(a.digest.str()).ok());
}

// Two keys hold one image and Bob's sandbox runs it. Bob cannot drop his hold from under his
// sandbox (which would leave the image pinned on Alice, and tell her someone uses it); Alice
// drops hers at once, and the image stays for Bob.
TEST_F(ImageStoreTest, AKeyKeepsItsHoldWhileItsOwnSandboxUsesTheImage) {
  const std::string alice = "ak-000000000001", bob = "ak-000000000002";
  auto s = ImageStore::Open({.dir = base_ + "/store",
                             .in_use = [&](const Digest&, const std::optional<std::string>& owner) {
                               return !owner || *owner == bob;
                             }});
  ASSERT_TRUE(s.ok());
  store_ = *std::move(s);
  ImageInfo a = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers()), "a"), {.owner = alice});
  ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers()), "b"), {.owner = bob});
  absl::Status refused = store_->Remove(a.digest.str(), bob);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("a sandbox of its owner"), std::string::npos) << refused;
  EXPECT_TRUE(store_->Remove(a.digest.str(), alice).ok());
  EXPECT_EQ(store_->Resolve(a.digest.str(), alice).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*store_->Resolve(a.digest.str(), bob), a.digest);
  EXPECT_EQ(access(Rootfs(a).c_str(), F_OK), 0);
}

TEST_F(ImageStoreTest, ProgressIsReportedByStageAndLayer) {
  std::vector<ImportProgress> seen;
  std::string path = base_ + "/image.tar";
  testing::WriteArchive(path, testing::OciLayout(TwoLayers()).files);
  ImportOne(path, {.progress = [&](const ImportProgress& p) { seen.push_back(p); }});
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().stage, ImportProgress::Stage::kReadingArchive);
  EXPECT_EQ(seen.back().stage, ImportProgress::Stage::kDone);
  std::vector<int> layers;
  for (const ImportProgress& p : seen) {
    if (p.stage == ImportProgress::Stage::kUnpacking) {
      EXPECT_EQ(p.layers, 2);
      if (layers.empty() || layers.back() != p.layer) layers.push_back(p.layer);
    }
  }
  EXPECT_EQ(layers, (std::vector<int>{1, 2}));
}

TEST_F(ImageStoreTest, AnImageForAnotherPlatformIsRefused) {
  Image img = TwoLayers();
  img.architecture = internal::HostPlatform().architecture == "riscv64" ? "amd64" : "riscv64";
  auto got = store_->Import(WriteLayoutDir(testing::OciLayout(img)));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
  EXPECT_NE(got.status().message().find("is for linux/" + img.architecture), std::string::npos);
  ExpectStoreEmpty();
}

TEST_F(ImageStoreTest, OpenRemovesRootsNoImageReferences) {
  ImageInfo a = ImportOne(WriteLayoutDir(testing::OciLayout(TwoLayers())));
  std::string orphan = base_ + "/store/roots/" + std::string(64, 'c');
  ASSERT_TRUE(MakeDirs(orphan + "/usr").ok());
  std::string orphan_blob = base_ + "/store/blobs/sha256/" + std::string(64, 'd');
  ASSERT_TRUE(WriteFileAtomic(orphan_blob, "x").ok());
  store_ = OpenStore();
  EXPECT_NE(access(orphan.c_str(), F_OK), 0);
  EXPECT_NE(access(orphan_blob.c_str(), F_OK), 0);
  EXPECT_EQ(access(Rootfs(a).c_str(), F_OK), 0);
  EXPECT_TRUE(store_->Get(a.digest).ok());
}

TEST_F(ImageStoreTest, NotAnImageSaysWhatWasExpected) {
  ASSERT_TRUE(MakeDirs(base_ + "/empty").ok());
  auto got = store_->Import(base_ + "/empty");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("neither an OCI image layout"), std::string::npos)
      << got.status();
  got = store_->Import(base_ + "/missing.tar");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  ExpectStoreEmpty();
}

}  // namespace
}  // namespace airlock::image
