#include "command/syscalls.h"

#include <thread>

#include "command/command.h"
#include "fmt/format.h"
#include "gtest/gtest.h"

namespace airlock {
namespace {

SyscallEvent File(std::string path, std::string mode) {
  return {.kind = SyscallEventKind::kFileOpened,
          .syscall = "openat",
          .path = std::move(path),
          .mode = std::move(mode)};
}

TEST(SyscallReportTest, MergesRepeatsAndBoundsEveryList) {
  SyscallReportBuilder b("ptrace");
  b.Add(File("/etc/passwd", "r"));
  b.Add(File("/etc/passwd", "r"));
  b.Add(File("/etc/passwd", "w+create"));  // another mode is another entry
  for (size_t i = 0; i < SyscallReport::kMaxFiles + 10; ++i)
    b.Add(File(fmt::format("/f{}", i), "r"));
  for (size_t i = 0; i < SyscallReport::kMaxDenied + 5; ++i) {
    b.Add({.kind = SyscallEventKind::kDenied,
           .syscall = "connect",
           .action = "errno(EPERM)",
           .rule = 0,
           .address = "10.0.0.1:443"});
  }
  b.Add({.kind = SyscallEventKind::kConnect, .syscall = "connect", .address = "10.0.0.1:443"});
  b.Add({.kind = SyscallEventKind::kConnect, .syscall = "connect", .address = "10.0.0.1:443"});
  b.CountSeen(1000);
  SyscallReport r = b.Build({{"read", 5}, {"openat", 900}, {"close", 5}, {"never", 0}});

  EXPECT_EQ(r.supervisor, "ptrace");
  EXPECT_EQ(r.seen, 1000);
  ASSERT_EQ(r.files.size(), SyscallReport::kMaxFiles);
  EXPECT_EQ(r.files[0], (FileAccess{"/etc/passwd", "r", 2}));
  EXPECT_EQ(r.files[1], (FileAccess{"/etc/passwd", "w+create", 1}));
  EXPECT_EQ(r.denied, static_cast<int64_t>(SyscallReport::kMaxDenied + 5));
  EXPECT_EQ(r.denied_calls.size(), SyscallReport::kMaxDenied);
  // Files beyond the cap (12: 2 of the 64 slots went to /etc/passwd) and denied calls beyond it.
  EXPECT_EQ(r.dropped, 12 + 5);
  ASSERT_EQ(r.endpoints.size(), 1u);
  EXPECT_EQ(r.endpoints[0].count, 2);
  // Most frequent first, ties by name, zero counts left out.
  EXPECT_EQ(r.counts, (std::vector<SyscallCount>{{"openat", 900}, {"close", 5}, {"read", 5}}));
}

// Attack: make the report, which reaches the agent's context, as large as possible: long paths
// and arguments full of control characters (each six bytes of JSON), as many of each list as
// fits. Expected: paths and arguments are cut (ending in "..."), the lists together stay under
// kMaxBytes of JSON, and what was left out is counted.
TEST(SyscallReportTest, StaysSmallWhateverTheCommandDoes) {
  for (char filler : {'\x01', '\xff'}) {
    SyscallReportBuilder b("notify");
    const std::string junk(4000, filler);
    for (int i = 0; i < 200; ++i) {
      b.Add(File(fmt::format("/{}{}", i, junk), "r"));
      b.Add({.kind = SyscallEventKind::kExec,
             .syscall = "execve",
             .path = fmt::format("/bin/{}{}", i, junk),
             .argv = std::vector<std::string>(8, junk)});
      b.Add({.kind = SyscallEventKind::kDenied,
             .syscall = "openat",
             .action = "errno(EACCES)",
             .path = junk,
             .detail = junk});
      b.Add({.kind = SyscallEventKind::kConnect,
             .syscall = "connect",
             .address = fmt::format("unix:@{}{}", i, junk)});
    }
    SyscallReport r = b.Build({});
    CommandResult result;
    result.syscalls = r;
    const std::string json =
        ToJson(result).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    EXPECT_LT(json.size(), SyscallReport::kMaxBytes + 16 * 1024) << json.size();
    ASSERT_FALSE(r.files.empty());
    EXPECT_EQ(r.files[0].path.size(), SyscallReport::kMaxPathBytes + 3);
    EXPECT_TRUE(r.files[0].path.ends_with("..."));
    ASSERT_FALSE(r.execs.empty());
    EXPECT_EQ(r.execs[0].argv[0].size(), SyscallReport::kMaxArgBytes + 3);
    EXPECT_EQ(r.denied, 200);
    const size_t kept =
        r.files.size() + r.execs.size() + r.denied_calls.size() + r.endpoints.size();
    EXPECT_EQ(static_cast<size_t>(r.dropped) + kept, 800u);
    EXPECT_GT(r.dropped, 0);
  }
  // A cut never splits a UTF-8 character.
  SyscallReportBuilder b("notify");
  b.Add(File("/" + std::string(SyscallReport::kMaxPathBytes, 'a').substr(1) + "é", "r"));
  SyscallReport r = b.Build({});
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].path, "/" + std::string(SyscallReport::kMaxPathBytes - 1, 'a') + "...");
}

TEST(SyscallReportTest, CountsKeepOnlyTheMostFrequent) {
  SyscallReportBuilder b("notify");
  std::vector<SyscallCount> counts;
  for (int i = 0; i < 100; ++i) counts.push_back({fmt::format("call{:03}", i), i + 1});
  SyscallReport r = b.Build(counts);
  ASSERT_EQ(r.counts.size(), SyscallReport::kMaxCounts);
  EXPECT_EQ(r.counts.front(), (SyscallCount{"call099", 100}));
  EXPECT_EQ(r.counts.back(), (SyscallCount{"call068", 69}));
}

TEST(SyscallReportTest, JsonRoundTripsInsideACommandResult) {
  SyscallReportBuilder b("notify");
  b.Add({.kind = SyscallEventKind::kDenied,
         .syscall = "openat",
         .action = "errno(EACCES)",
         .rule = 3,
         .path = "/etc/shadow",
         .mode = "r"});
  b.Add({.kind = SyscallEventKind::kExec,
         .syscall = "execve",
         .path = "/usr/bin/python3",
         .argv = {"python3", "-c", "print(1)"}});
  b.Add({.kind = SyscallEventKind::kConnect, .syscall = "connect", .address = "[::1]:80"});
  b.Add(File("/tmp/x", "w+create+trunc"));
  b.CountSeen(7);
  b.MarkKilled("a kill rule matched");
  CommandResult r;
  r.command_id = CommandId("cmd-1");
  r.syscalls = b.Build({{"openat", 4}, {"execve", 1}});

  nlohmann::json j = ToJson(r);
  ASSERT_TRUE(j.contains("syscalls"));
  EXPECT_EQ(j["syscalls"]["denied_calls"][0], (nlohmann::json{{"kind", "denied"},
                                                              {"syscall", "openat"},
                                                              {"action", "errno(EACCES)"},
                                                              {"rule", 3},
                                                              {"path", "/etc/shadow"},
                                                              {"mode", "r"}}));
  auto back = CommandResultFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->syscalls, r.syscalls);
}

TEST(SyscallReportTest, AbsentWithoutASupervisor) {
  CommandResult r;
  r.command_id = CommandId("cmd-1");
  EXPECT_FALSE(ToJson(r).contains("syscalls"));
  nlohmann::json j = ToJson(r);
  j["syscalls"] = {{"seen", 1}};  // no supervisor named
  EXPECT_FALSE(CommandResultFromJson(j).ok());
}

TEST(BoundedSyscallEventQueueTest, DropsAndCountsWhenFull) {
  BoundedSyscallEventQueue q(3);
  std::thread producer([&] {
    for (int i = 0; i < 10; ++i) q.OnSyscallEvent(File(fmt::format("/f{}", i), "r"));
  });
  producer.join();
  EXPECT_EQ(q.dropped(), 7);
  std::vector<SyscallEvent> first = q.Drain(2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].path, "/f0");
  EXPECT_EQ(first[1].path, "/f1");
  q.OnSyscallEvent(File("/again", "r"));  // room again after draining
  std::vector<SyscallEvent> rest = q.Drain();
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[1].path, "/again");
  EXPECT_EQ(q.dropped(), 7);
}

}  // namespace
}  // namespace airlock
