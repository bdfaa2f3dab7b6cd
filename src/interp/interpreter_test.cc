#include "interp/interpreter.h"

#include "gtest/gtest.h"

namespace airlock::interp {
namespace {

TEST(InterpreterTest, RunsAScript) {
  auto interp = Interpreter::Create();
  ASSERT_TRUE(interp.ok()) << interp.status();
  auto session = (*interp)->NewSession({});
  ASSERT_TRUE(session.ok()) << session.status();
  auto r = (*session)->Run("console.log('hi', {a: 1}); return 1 + 2;");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, Outcome::kCompleted) << r->error;
  EXPECT_EQ(r->result_json, "3");
  EXPECT_EQ((*session)->console(), "hi {\"a\":1}\n");
}

}  // namespace
}  // namespace airlock::interp
