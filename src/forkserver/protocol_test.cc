#include "forkserver/protocol.h"

#include "absl/status/status.h"
#include "forkserver/internal/zygote_protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace airlock::forkserver {
namespace {

using ::testing::HasSubstr;

std::string MessageOf(const absl::Status& s) { return std::string(s.message()); }

TEST(ProtocolTest, RunRequestRoundTrips) {
  RunRequest in{
      .template_name = "python", .code = "print('é')", .timeout = std::chrono::milliseconds(2500)};
  auto out = DecodeRunRequest(EncodeRunRequest(in));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->template_name, "python");
  EXPECT_EQ(out->code, "print('é')");
  EXPECT_EQ(out->timeout, std::chrono::milliseconds(2500));
  auto no_timeout = DecodeRunRequest(R"({"template":"python","code":""})");
  ASSERT_TRUE(no_timeout.ok()) << no_timeout.status();
  EXPECT_FALSE(no_timeout->timeout.has_value());
}

TEST(ProtocolTest, BadRequestsNameTheField) {
  struct Case {
    const char* payload;
    const char* message;
  } cases[] = {
      {"[1]", "expected a JSON object"},
      {"{", "not valid JSON"},
      {R"({"code":"1"})", "request.template: missing"},
      {R"({"template":"python"})", "request.code: missing"},
      {R"({"template":1,"code":"1"})", "request.template: expected a string"},
      {R"({"template":"python","code":1})", "request.code: expected a string"},
      {R"({"template":"python","code":"1","timeoutSeconds":"5"})", "expected a number"},
      {R"({"template":"python","code":"1","timeoutSeconds":0})", "is not in (0, 3600]"},
      {R"({"template":"python","code":"1","timeoutSeconds":3601})", "is not in (0, 3600]"},
      {R"({"template":"python","code":"1","argv":[]})", "request.argv: unknown field"},
  };
  for (const Case& c : cases) {
    auto r = DecodeRunRequest(c.payload);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.payload;
    EXPECT_THAT(MessageOf(r.status()), HasSubstr(c.message)) << c.payload;
  }
  auto big = DecodeRunRequest(
      EncodeRunRequest({.template_name = "python", .code = std::string(kMaxCodeBytes + 1, 'x')}));
  EXPECT_THAT(MessageOf(big.status()), HasSubstr("more than the limit of 1048576"));
  EXPECT_TRUE(DecodeRunRequest(EncodeRunRequest({.template_name = "python",
                                                 .code = std::string(kMaxCodeBytes, 'x')}))
                  .ok());
}

TEST(ProtocolTest, ErrorsRoundTripWithTheirCode) {
  absl::Status s = DecodeError(EncodeError(absl::UnavailableError("zygote gone")));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(MessageOf(s), "zygote gone");
  EXPECT_EQ(DecodeError("nonsense").code(), absl::StatusCode::kInternal);
}

TEST(ProtocolTest, ZygoteFramesRoundTripAndRefuseTrailingBytes) {
  internal::ForkRequest in{"plan\0bytes", {"A=1", "B=2"}, "code"};
  internal::ForkRequest out;
  std::string encoded = internal::EncodeForkRequest(in);
  ASSERT_TRUE(internal::DecodeForkRequest(encoded, &out));
  EXPECT_EQ(out.plan, in.plan);
  EXPECT_EQ(out.env, in.env);
  EXPECT_EQ(out.code, "code");
  EXPECT_FALSE(internal::DecodeForkRequest(encoded + "x", &out));
  EXPECT_FALSE(internal::DecodeForkRequest(encoded.substr(0, encoded.size() - 1), &out));
  internal::ForkReply reply{.err = 0, .message = "", .pid = 4242}, back;
  ASSERT_TRUE(internal::DecodeForkReply(internal::EncodeForkReply(reply), &back));
  EXPECT_EQ(back.pid, 4242);
}

}  // namespace
}  // namespace airlock::forkserver
