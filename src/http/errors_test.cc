#include "http/errors.h"

#include "common/status.h"
#include "gtest/gtest.h"

namespace airlock::http {
namespace {

TEST(ErrorsTest, StatusCodesComeFromOneTable) {
  EXPECT_EQ(HttpStatusFor(InvalidArgument("x")), 422);
  EXPECT_EQ(HttpStatusFor(WithReason(InvalidArgument("x"), Reason::kMalformedBody)), 400);
  EXPECT_EQ(HttpStatusFor(absl::UnauthenticatedError("x")), 401);
  EXPECT_EQ(HttpStatusFor(PermissionDenied("x")), 403);
  EXPECT_EQ(HttpStatusFor(NotFound("x")), 404);
  EXPECT_EQ(HttpStatusFor(WithReason(NotFound("x"), Reason::kMethodNotAllowed)), 405);
  EXPECT_EQ(HttpStatusFor(absl::AlreadyExistsError("x")), 409);
  EXPECT_EQ(HttpStatusFor(FailedPrecondition("x")), 409);
  EXPECT_EQ(HttpStatusFor(WithReason(ResourceExhausted("x"), Reason::kPayloadTooLarge)), 413);
  EXPECT_EQ(HttpStatusFor(ResourceExhausted("x")), 429);
  EXPECT_EQ(HttpStatusFor(Internal("x")), 500);
  EXPECT_EQ(HttpStatusFor(absl::UnavailableError("x")), 503);
}

TEST(ErrorsTest, BodiesNameTheCodeAndHideInternals) {
  auto body = ErrorBody(InvalidArgument("argv: must not be empty"), "req-1");
  EXPECT_EQ(body["code"], "invalid_argument");
  EXPECT_EQ(body["message"], "argv: must not be empty");
  EXPECT_EQ(body["request_id"], "req-1");
  auto internal = ErrorBody(Internal("open /var/lib/x: EIO"), "req-2");
  EXPECT_EQ(internal["code"], "internal");
  EXPECT_EQ(internal["message"].get<std::string>().find("EIO"), std::string::npos);
  EXPECT_NE(internal["message"].get<std::string>().find("req-2"), std::string::npos);
  EXPECT_EQ(ErrorBody(WithReason(ResourceExhausted("big"), Reason::kPayloadTooLarge), "r")["code"],
            "payload_too_large");
}

}  // namespace
}  // namespace airlock::http
