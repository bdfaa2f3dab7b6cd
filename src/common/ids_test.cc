#include "common/ids.h"

#include <set>
#include <type_traits>

#include "gtest/gtest.h"

namespace airlock {
namespace {

TEST(IdsTest, NewIdsHavePrefixAndAreDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    SandboxId id = SandboxId::New();
    ASSERT_EQ(id.value().rfind("sb-", 0), 0u);
    ASSERT_EQ(id.value().size(), 3u + 12u);
    ASSERT_TRUE(seen.insert(id.value()).second);
  }
  EXPECT_EQ(CommandId::New().value().rfind("cmd-", 0), 0u);
  EXPECT_EQ(ApiKeyId::New().value().rfind("ak-", 0), 0u);
  EXPECT_EQ(ArtifactId::New().value().rfind("art-", 0), 0u);
  EXPECT_EQ(NodeId::New().value().rfind("node-", 0), 0u);
  EXPECT_EQ(InterpSessionId::New().value().rfind("is-", 0), 0u);
}

TEST(IdsTest, DistinctTypes) {
  static_assert(!std::is_convertible_v<SandboxId, CommandId>);
  static_assert(!std::is_convertible_v<ApiKeyId, ArtifactId>);
  static_assert(!std::is_convertible_v<std::string, SandboxId>);
  EXPECT_EQ(SandboxId("sb-x"), SandboxId("sb-x"));
  EXPECT_NE(SandboxId("sb-x"), SandboxId("sb-y"));
}

}  // namespace
}  // namespace airlock
