#include "image/internal/manifest.h"

#include "gtest/gtest.h"

namespace airlock::image::internal {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'b');

std::string ManifestWithLayerType(const std::string& type) {
  return R"({"schemaVersion":2,"config":{"mediaType":"application/vnd.oci.image.config.v1+json",
    "digest":")" +
         kDigest + R"(","size":10},"layers":[{"mediaType":")" + type + R"(","digest":")" + kDigest +
         R"(","size":5}]})";
}

TEST(ManifestTest, AcceptsTarLayersOnly) {
  for (const char* ok :
       {"application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.v1.tar+zstd",
        "application/vnd.docker.image.rootfs.diff.tar.gzip"}) {
    auto m = ParseManifest(ManifestWithLayerType(ok));
    ASSERT_TRUE(m.ok()) << ok << ": " << m.status();
    EXPECT_EQ(m->layers.size(), 1u);
    EXPECT_EQ(m->layers[0].size, 5);
    EXPECT_EQ(m->config.digest.str(), kDigest);
  }
  for (const char* bad : {"application/vnd.oci.image.layer.v1.tar+gzip+encrypted",
                          "application/vnd.oci.image.layer.v1.tar+lz4", "text/plain"}) {
    auto m = ParseManifest(ManifestWithLayerType(bad));
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_NE(m.status().message().find("layers[0]"), std::string::npos) << m.status();
  }
}

TEST(ManifestTest, BadDescriptorsNameTheField) {
  auto m = ParseManifest(R"({"config":{"digest":"sha256:12","size":1},"layers":[]})");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("config.digest"), std::string::npos) << m.status();
  m = ParseManifest(R"({"config":{"digest":")" + kDigest + R"(","size":-1},"layers":[]})");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("config.size"), std::string::npos) << m.status();
  EXPECT_FALSE(ParseManifest("[1,2]").ok());
  EXPECT_FALSE(ParseManifest("{not json").ok());
}

TEST(ManifestTest, ConfigFieldsAndDiffIds) {
  auto c = ParseConfig(R"({"os":"linux","architecture":"amd64","created":"2026-01-01T00:00:00Z",
    "config":{"Env":["PATH=/bin","A=1"],"WorkingDir":"/app","User":"1000:1000",
    "Entrypoint":["/init"],"Cmd":["sh"]},"rootfs":{"type":"layers","diff_ids":[")" +
                       kDigest + R"("]}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config.env, (std::vector<std::string>{"PATH=/bin", "A=1"}));
  EXPECT_EQ(c->config.working_dir, "/app");
  EXPECT_EQ(c->config.user, "1000:1000");
  EXPECT_EQ(c->config.entrypoint, std::vector<std::string>{"/init"});
  EXPECT_EQ(c->config.cmd, std::vector<std::string>{"sh"});
  ASSERT_EQ(c->diff_ids.size(), 1u);
  auto wrong = ParseConfig(R"({"config":{"Env":"PATH=/bin"}})");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("Env"), std::string::npos) << wrong.status();
}

TEST(ManifestTest, CanonicalManifestIsStable) {
  auto d = Digest::Parse(kDigest);
  Descriptor config{std::string(kOciConfigType), *d, 10, {}, {}};
  Descriptor layer{std::string(kOciLayerType), *d, 5, {}, {}};
  std::string a = CanonicalManifest(config, {layer});
  EXPECT_EQ(a, CanonicalManifest(config, {layer}));
  auto parsed = ParseManifest(a);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->layers[0].media_type, kOciLayerType);
}

TEST(ManifestTest, DockerManifestNeedsConfig) {
  auto m =
      ParseDockerManifest(R"([{"Config":"a.json","RepoTags":["x:1"],"Layers":["l/layer.tar"]}])");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)[0].layers, std::vector<std::string>{"l/layer.tar"});
  EXPECT_FALSE(ParseDockerManifest(R"([{"RepoTags":[]}])").ok());
  EXPECT_FALSE(ParseDockerManifest(R"({"Config":"a"})").ok());
}

}  // namespace
}  // namespace airlock::image::internal
