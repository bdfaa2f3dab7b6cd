#include "common/status.h"

#include <cerrno>

#include "absl/strings/cord.h"
#include "gtest/gtest.h"

namespace airlock {
namespace {

absl::StatusOr<int> Half(int v) {
  if (v % 2 != 0) return absl::InvalidArgumentError("odd");
  return v / 2;
}

absl::StatusOr<int> Quarter(int v) {
  ASSIGN_OR_RETURN(int h, Half(v), "first half");
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status Check(bool fail) {
  RETURN_IF_ERROR(fail ? absl::NotFoundError("gone") : absl::OkStatus(), "check thing");
  return absl::OkStatus();
}

TEST(StatusTest, ErrnoStatusCarriesCodeAndText) {
  absl::Status s = ErrnoStatus(ENOENT, "open /x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "open /x: No such file or directory");
  EXPECT_EQ(ErrnoStatus(EPERM, "mount").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(ENOSPC, "write").code(), absl::StatusCode::kResourceExhausted);
}

TEST(StatusTest, AssignOrReturnAddsContextOutermostFirst) {
  EXPECT_EQ(*Quarter(8), 2);
  absl::StatusOr<int> r = Quarter(3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "first half: odd");
  r = Quarter(6);  // 6/2 = 3 fails in the second step, which has no context.
  EXPECT_EQ(r.status().message(), "odd");
}

TEST(StatusTest, ReturnIfErrorCtx) {
  EXPECT_TRUE(Check(false).ok());
  absl::Status s = Check(true);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "check thing: gone");
}

TEST(StatusTest, AnnotateKeepsOk) { EXPECT_TRUE(Annotate(absl::OkStatus(), "ctx").ok()); }

TEST(StatusTest, AnnotateKeepsPayloads) {
  absl::Status s = absl::InvalidArgumentError("too big");
  s.SetPayload("airlock/reason", absl::Cord("payload_too_large"));
  absl::Status a = Annotate(s, "upload");
  EXPECT_EQ(a.message(), "upload: too big");
  ASSERT_TRUE(a.GetPayload("airlock/reason").has_value());
  EXPECT_EQ(std::string(*a.GetPayload("airlock/reason")), "payload_too_large");
}

}  // namespace
}  // namespace airlock
