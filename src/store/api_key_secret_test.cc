#include "store/internal/api_key_secret.h"

#include "gtest/gtest.h"

namespace airlock::store::internal {
namespace {

const std::string kSecret(64, 'a');

TEST(ApiKeySecretTest, TokenRoundTrip) {
  ApiKeyId id("ak-0123456789ab");
  std::string token = FormatToken(id, kSecret);
  EXPECT_EQ(token, "ak_0123456789ab_" + kSecret);
  auto parsed = ParseToken(token);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->id, id);
  EXPECT_EQ(parsed->secret, kSecret);
}

TEST(ApiKeySecretTest, MalformedTokensAreUnauthenticatedWithoutEchoingThem) {
  const std::string good = "ak_0123456789ab_" + kSecret;
  for (const std::string& bad :
       {std::string(""), good.substr(1), good + "a", "ak-0123456789ab_" + kSecret,
        "ak_0123456789ab-" + kSecret, "ak_0123456789AB_" + kSecret,
        "ak_0123456789ab_" + std::string(63, 'a') + "g", "ak_01234/6789ab_" + kSecret}) {
    auto parsed = ParseToken(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_EQ(parsed.status().message(), "malformed API key");
  }
}

TEST(ApiKeySecretTest, HashDependsOnSaltAndSecretAndMatchesOnlyItself) {
  std::string h = HashSecret("salt-1", kSecret);
  EXPECT_EQ(h.size(), 64u);
  EXPECT_NE(h, HashSecret("salt-2", kSecret));
  EXPECT_NE(h, HashSecret("salt-1", std::string(64, 'b')));
  EXPECT_TRUE(SecretMatches("salt-1", kSecret, h));
  EXPECT_FALSE(SecretMatches("salt-2", kSecret, h));
  EXPECT_FALSE(SecretMatches("salt-1", kSecret, h.substr(1)));
  EXPECT_FALSE(SecretMatches("salt-1", kSecret, ""));
}

}  // namespace
}  // namespace airlock::store::internal
