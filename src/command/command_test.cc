#include "command/command.h"

#include "gtest/gtest.h"

namespace airlock {
namespace {

TEST(CommandResultTest, JsonHasTheApiFieldNames) {
  CommandResult r;
  r.command_id = CommandId("cmd-1");
  r.classification = Classification::kResourceExhaustedMemory;
  r.exit_code = -1;
  r.signal = 9;
  r.usage.memory_peak_bytes = 1234;
  r.violations.push_back({"seccomp", "killed by SIGSYS", {{"syscall", "ptrace"}}});
  nlohmann::json j = ToJson(r);
  for (const char* key :
       {"command_id", "classification", "exit_code", "signal", "duration_ms", "timed_out",
        "truncated", "stdout_bytes", "stderr_bytes", "stdout_preview", "stderr_preview",
        "stdout_sha256", "raw_log", "usage", "violations", "degraded"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"cpu_user_ms", "cpu_system_ms", "memory_peak_bytes", "pids_peak"}) {
    EXPECT_TRUE(j["usage"].contains(key)) << key;
  }
  EXPECT_EQ(j["classification"], "RESOURCE_EXHAUSTED_MEMORY");
  EXPECT_FALSE(j.contains("error"));
  for (const char* key : {"failure", "failure_detail", "key_lines", "report"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

TEST(CommandResultTest, RoundTrips) {
  CommandResult r;
  r.command_id = CommandId("cmd-2");
  r.classification = Classification::kCommandTimeout;
  r.timed_out = true;
  r.stdout_preview = "hello";
  r.degraded = {"landlock"};
  r.failure = FailureKind::kTimeout;
  r.failure_detail = "a.c:1";
  r.key_lines = {"a.c:1: error: x"};
  auto back = CommandResultFromJson(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->command_id, r.command_id);
  EXPECT_EQ(back->classification, Classification::kCommandTimeout);
  EXPECT_TRUE(back->timed_out);
  EXPECT_EQ(back->stdout_preview, "hello");
  EXPECT_EQ(back->degraded, r.degraded);
  EXPECT_EQ(back->failure, FailureKind::kTimeout);
  EXPECT_EQ(back->failure_detail, "a.c:1");
  EXPECT_EQ(back->key_lines, r.key_lines);
}

TEST(CommandResultTest, RejectsBadJson) {
  EXPECT_FALSE(CommandResultFromJson(nlohmann::json::array()).ok());
  EXPECT_FALSE(CommandResultFromJson({{"command_id", 3}}).ok());
  nlohmann::json j = ToJson(CommandResult{});
  j["classification"] = "MAYBE";
  EXPECT_FALSE(CommandResultFromJson(j).ok());
}

}  // namespace
}  // namespace airlock
