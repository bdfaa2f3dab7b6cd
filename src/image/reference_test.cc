#include "image/reference.h"

#include "gtest/gtest.h"

namespace airlock::image {
namespace {

const std::string kHex(64, 'a');

TEST(ReferenceTest, BareDigest) {
  auto r = ParseReference("sha256:" + kHex);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->digest.str(), "sha256:" + kHex);
  EXPECT_EQ(r->tag, "");
}

TEST(ReferenceTest, TagsAreNormalized) {
  EXPECT_EQ(ParseReference("debian")->tag, "debian:latest");
  EXPECT_EQ(ParseReference("debian:12")->tag, "debian:12");
  EXPECT_EQ(ParseReference("docker.io/library/debian:12")->tag, "debian:12");
  EXPECT_EQ(ParseReference("docker.io/bitnami/redis:7")->tag, "bitnami/redis:7");
  EXPECT_EQ(ParseReference("registry.local:5000/team/app")->tag,
            "registry.local:5000/team/app:latest");
  EXPECT_EQ(ParseReference("localhost/app:v1.2_3")->tag, "localhost/app:v1.2_3");
}

TEST(ReferenceTest, PinnedDigestWinsAndKeepsTheName) {
  auto r = ParseReference("node:20@sha256:" + kHex);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->digest.str(), "sha256:" + kHex);
  EXPECT_EQ(r->tag, "node:20");
}

TEST(ReferenceTest, MalformedReferencesAreRefusedByName) {
  for (const std::string& bad : std::vector<std::string>{
           "", "Debian", "debian:", "sha256:abc", "sha256:" + std::string(64, 'A'), "a//b", "-a",
           "a:b:c", "debian@sha256:xyz", "a..b", "a b", std::string(300, 'a')}) {
    auto r = ParseReference(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseReference("Debian").status().message().find("\"Debian\""), std::string::npos);
}

TEST(ReferenceTest, NormalizeTagRefusesDigests) {
  EXPECT_EQ(*NormalizeTag("busybox"), "busybox:latest");
  EXPECT_FALSE(NormalizeTag("busybox@sha256:" + kHex).ok());
  EXPECT_FALSE(NormalizeTag("sha256:" + kHex).ok());
}

TEST(DigestTest, ParseAndShortForm) {
  auto d = Digest::Parse("sha256:" + kHex);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->hex(), kHex);
  EXPECT_EQ(d->Short(), "sha256:aaaaaaaaaaaa");
  EXPECT_FALSE(Digest::Parse("sha512:" + kHex).ok());
  EXPECT_FALSE(Digest::FromHex(kHex.substr(1)).ok());
}

}  // namespace
}  // namespace airlock::image
