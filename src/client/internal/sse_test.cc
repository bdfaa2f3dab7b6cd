#include "client/internal/sse.h"

#include "gtest/gtest.h"

namespace airlock::client::internal {
namespace {

TEST(SseParserTest, EventsSplitAcrossChunksComeOutWhole) {
  SseParser p;
  std::string stream =
      "event: stdout\ndata: {\"text\":\"a\"}\n\n: keep-alive\n\nevent: result\r\ndata: 1\r\n"
      "data: 2\r\n\r\n";
  std::vector<SseEvent> got;
  for (char c : stream) {
    for (SseEvent& e : p.Feed(std::string_view(&c, 1))) got.push_back(std::move(e));
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].event, "stdout");
  EXPECT_EQ(got[0].data, "{\"text\":\"a\"}");
  EXPECT_EQ(got[1].event, "result");
  EXPECT_EQ(got[1].data, "1\n2");
}

TEST(SseParserTest, AnUnfinishedEventIsHeldBack) {
  SseParser p;
  EXPECT_TRUE(p.Feed("event: x\ndata: y\n").empty());
  std::vector<SseEvent> got = p.Feed("\n");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].event, "x");
}

}  // namespace
}  // namespace airlock::client::internal
