#include "interp/interpreter.h"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "interp/internal/wasm_rt.h"
#include "interp/test_util.h"

namespace airlock::interp {
namespace {

using ::testing::HasSubstr;

TEST(InterpreterTest, RunsAScriptAndReturnsItsValue) {
  auto session = test::NewSession({});
  RunResult r = test::Run(*session, "console.log('hi', {a: 1}, [2], null); return 1 + 2;");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(r.result_json, "3");
  EXPECT_EQ(session->console(), "hi {\"a\":1} [2] null\n");
  EXPECT_EQ(session->state(), SessionState::kFinished);
}

TEST(InterpreterTest, UndefinedResultIsNull) {
  auto session = test::NewSession({});
  RunResult r = test::Run(*session, "let x = 1;");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(r.result_json, "null");
}

TEST(InterpreterTest, TopLevelAwaitAndModernSyntax) {
  auto session = test::NewSession({});
  RunResult r = test::Run(*session, R"JS(
    const {a, ...rest} = {a: 1, b: 2, c: 3};
    const xs = [1, 2, 3].map((x) => x * 2);
    const v = await Promise.all([Promise.resolve(a), (async () => 5)()]);
    class P { #x = 7; get x() { return this.#x; } }
    return `${xs.join(',')}|${Object.keys(rest)}|${v}|${new P().x}|${10n ** 20n}|${[1,[2]].flat()}`;
  )JS");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(r.result_json, "\"2,4,6|b,c|1,5|7|100000000000000000000|1,2\"");
}

TEST(InterpreterTest, SyntaxErrorIsAScriptError) {
  auto session = test::NewSession({});
  RunResult r = test::Run(*session, "let = = 3;");
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_THAT(r.error, HasSubstr("SyntaxError"));
}

TEST(InterpreterTest, UncaughtErrorNamesTheLine) {
  auto session = test::NewSession({});
  RunResult r = test::Run(*session, "const a = 1;\nthrow new TypeError('bad thing');");
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_THAT(r.error, HasSubstr("TypeError: bad thing"));
  EXPECT_THAT(r.error, HasSubstr("script.js:2"));
}

TEST(InterpreterTest, ThrownNonErrorIsShown) {
  auto session = test::NewSession({});
  RunResult r = test::Run(*session, "throw {code: 42};");
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_THAT(r.error, HasSubstr("42"));
}

TEST(InterpreterTest, RunsOnlyOnce) {
  auto session = test::NewSession({});
  test::Run(*session, "1");
  EXPECT_EQ(session->Run("2").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(InterpreterTest, ScriptLargerThanTheLimitIsRefused) {
  SessionOptions options;
  options.limits.max_script_bytes = 10;
  auto session = test::NewSession(std::move(options));
  EXPECT_EQ(session->Run("return 'a long script';").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InterpreterTest, ConsoleOutputIsCapped) {
  SessionOptions options;
  options.limits.max_console_bytes = 100;
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, "for (let i = 0; i < 1000; i++) console.log('line', i);");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_LT(session->console().size(), 200u);
  EXPECT_THAT(session->console(), HasSubstr("[console output truncated]"));
}

TEST(InterpreterTest, ConsoleKeepsNulBytesVisible) {
  auto session = test::NewSession({});
  test::Run(*session, "console.log('a\\0b');");
  EXPECT_EQ(session->console(), "a\\0b\n");
}

TEST(InterpreterTest, ScriptSeesOnlyToolsAndConsole) {
  auto session = test::NewSession({});
  RunResult r = test::Run(*session, R"JS(
    const standard = new Set(['Object', 'Function', 'Array', 'Number', 'parseFloat', 'parseInt',
      'Infinity', 'NaN', 'undefined', 'Boolean', 'String', 'Symbol', 'Date', 'Promise', 'RegExp',
      'Error', 'AggregateError', 'EvalError', 'RangeError', 'ReferenceError', 'SyntaxError',
      'TypeError', 'URIError', 'globalThis', 'JSON', 'Math', 'Reflect', 'Proxy', 'Map', 'Set',
      'WeakMap', 'WeakSet', 'WeakRef', 'FinalizationRegistry', 'ArrayBuffer', 'SharedArrayBuffer',
      'DataView', 'Int8Array', 'Uint8Array', 'Uint8ClampedArray', 'Int16Array', 'Uint16Array',
      'Int32Array', 'Uint32Array', 'BigInt64Array', 'BigUint64Array', 'Float16Array',
      'Float32Array', 'Float64Array', 'BigInt', 'eval', 'isNaN', 'isFinite', 'decodeURI',
      'decodeURIComponent', 'encodeURI', 'encodeURIComponent', 'escape', 'unescape', 'Atomics',
      'Iterator', 'TypedArray', 'Generator', 'AsyncFunction', 'AsyncGeneratorFunction',
      'GeneratorFunction', 'AsyncIterator', 'Error', 'InternalError', 'Arguments',
      'tools', 'console']);
    return Object.getOwnPropertyNames(globalThis).filter((n) => !standard.has(n));
  )JS");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(r.result_json, "[]");
}

TEST(InterpreterTest, ToolsAndConsoleCannotBeReplaced) {
  auto session = test::NewSession({});
  RunResult r = test::Run(*session, R"JS(
    'use strict';
    const errors = [];
    try { tools.call = () => 1; } catch (e) { errors.push(e.name); }
    try { globalThis.tools = {}; } catch (e) { errors.push(e.name); }
    try { delete globalThis.console; } catch (e) { errors.push(e.name); }
    return errors;
  )JS");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(r.result_json, "[\"TypeError\",\"TypeError\",\"TypeError\"]");
}

TEST(InterpreterTest, DatesAreUtc) {
  auto session = test::NewSession({});
  RunResult r =
      test::Run(*session,
                "const d = new Date(86400000); return [d.getHours(), d.getTimezoneOffset(), "
                "d.toISOString(), Date.now() > 1.7e12];");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  EXPECT_EQ(r.result_json, "[0,0,\"1970-01-02T00:00:00.000Z\",true]");
}

TEST(InterpreterTest, UnsettledPromiseIsStalled) {
  auto session = test::NewSession({});
  RunResult r = test::Run(*session, "await new Promise(() => {});");
  EXPECT_EQ(r.outcome, Outcome::kStalled);
  EXPECT_THAT(r.error, HasSubstr("nothing can settle"));
}

TEST(InterpreterTest, LimitsAreValidated) {
  SessionOptions options;
  options.limits.memory_bytes = 1000;
  EXPECT_EQ(test::Interp().NewSession(std::move(options)).status().code(),
            absl::StatusCode::kInvalidArgument);
  SessionOptions stack;
  stack.limits.stack_bytes = 64 << 20;
  EXPECT_EQ(test::Interp().NewSession(std::move(stack)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InterpreterTest, LimitsFromALevelZeroSpec) {
  spec::SandboxSpec spec;
  EXPECT_FALSE(LimitsFromSpec(spec).ok());  // the default level is 2
  spec.level = spec::Level::kInterp;
  spec.resources.memory_mb = 64;
  spec.resources.command_timeout_seconds = 3;
  auto limits = LimitsFromSpec(spec);
  ASSERT_TRUE(limits.ok()) << limits.status();
  EXPECT_EQ(limits->memory_bytes, 64 << 20);
  EXPECT_EQ(limits->exec_time, std::chrono::seconds(3));
}

TEST(InterpreterTest, ManySessionsOneAfterAnother) {
  for (int i = 0; i < 200; ++i) {
    auto session = test::NewSession({});
    RunResult r = test::Run(*session, "return [1,2,3].reduce((a, b) => a + b);");
    ASSERT_EQ(r.result_json, "6");
  }
}

TEST(InterpreterTest, SessionsRunOnManyThreadsAtOnce) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&ok, t] {
      for (int i = 0; i < 10; ++i) {
        auto session = test::NewSession({});
        std::string script = fmt::format(
            "let s = 0; for (let i = 0; i < 100000; i++) s += i % {}; return s;", t + 2);
        RunResult r = test::Run(*session, script);
        if (r.outcome == Outcome::kCompleted) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 40);
}

TEST(InterpreterTest, AHostileSessionDoesNotDisturbOthersOnOtherThreads) {
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::thread busy([&] {
    while (!stop.load()) {
      auto session = test::NewSession({});
      RunResult r = test::Run(*session, "return JSON.stringify({a: [1, 2, 3]});");
      if (r.outcome == Outcome::kCompleted) ++ok;
    }
  });
  for (int i = 0; i < 3; ++i) {
    SessionOptions options;
    options.limits.exec_time = std::chrono::milliseconds(50);
    auto hostile = test::NewSession(std::move(options));
    RunResult r = test::Run(*hostile, "const a = []; for (;;) a.push(new Array(1000));");
    EXPECT_TRUE(r.outcome == Outcome::kTimeout || r.outcome == Outcome::kMemoryLimit)
        << ToString(r.outcome) << ": " << r.error;
  }
  stop.store(true);
  busy.join();
  EXPECT_GT(ok.load(), 0);
}

TEST(InterpreterTest, ATrapOnOneThreadLeavesTheOthersRunning) {
  // The trap state is thread-local: a guest that traps (native stack exhaustion in the parser)
  // unwinds only its own thread while guests on other threads keep computing.
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::vector<std::thread> busy;
  for (int t = 0; t < 2; ++t) {
    busy.emplace_back([&] {
      while (!stop.load()) {
        auto session = test::NewSession({});
        RunResult r =
            test::Run(*session, "let s = 0; for (let i = 0; i < 1e5; i++) s += i; return s;");
        if (r.result_json == "4999950000") ++ok;
      }
    });
  }
  for (int i = 0; i < 3; ++i) {
    auto session = test::NewSession({});
    RunResult r = test::Run(*session, "eval('('.repeat(3e5) + '1' + ')'.repeat(3e5));");
    EXPECT_EQ(r.outcome, Outcome::kTrapped) << r.error;
  }
  stop.store(true);
  for (auto& t : busy) t.join();
  EXPECT_GT(ok.load(), 0);
}

TEST(InterpreterTest, CancelStopsARunningScript) {
  SessionOptions options;
  options.limits.exec_time = std::chrono::seconds(30);
  auto session = test::NewSession(std::move(options));
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    session->Cancel();
  });
  RunResult r = test::Run(*session, "for (;;) {}");
  canceller.join();
  EXPECT_EQ(r.outcome, Outcome::kCancelled);
}

}  // namespace
}  // namespace airlock::interp

namespace airlock::interp {
namespace {

// AnonHugePages of the mapping that contains `address` (from /proc/self/smaps), in KiB; -1 when
// not found.
long HugePagesKbAt(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) inside = at >= lo && at < hi;
    long kb = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) return kb;
  }
  return -1;
}

bool TransparentHugePagesOff() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(f, mode);
  return mode.empty() || mode.find("[never]") != std::string::npos;
}

// Moving a memory in use to huge pages keeps every byte where it was, the memory stays usable and
// growable, and (where the kernel has transparent huge pages) its pages in use become huge pages.
TEST(LinearMemoryTest, HugePagesKeepTheContent) {
  internal::LinearMemory memory;
  ASSERT_TRUE(memory.Allocate(256, 1024).ok());  // 16 MiB accessible, 64 MiB at most
  ASSERT_EQ(reinterpret_cast<uintptr_t>(memory.data()) % (2 << 20), 0u) << "not 2 MiB aligned";
  // A byte pattern in scattered pages of three 2 MiB regions; the rest stays untouched (zero).
  const size_t offsets[] = {0, 4096 * 3 + 17, (2 << 20) + 5, (2 << 20) + 4096 * 100, (6 << 20) - 1};
  for (size_t i = 0; i < std::size(offsets); ++i) {
    memory.data()[offsets[i]] = static_cast<uint8_t>(0xA0 + i);
  }
  EXPECT_FALSE(memory.prefers_huge_pages());
  memory.PreferHugePages();
  EXPECT_TRUE(memory.prefers_huge_pages());
  for (size_t i = 0; i < std::size(offsets); ++i) {
    EXPECT_EQ(memory.data()[offsets[i]], static_cast<uint8_t>(0xA0 + i)) << "offset " << offsets[i];
  }
  size_t nonzero = 0;
  for (size_t i = 0; i < memory.size(); ++i) nonzero += memory.data()[i] != 0;
  EXPECT_EQ(nonzero, std::size(offsets));
  if (!TransparentHugePagesOff()) {
    EXPECT_GE(HugePagesKbAt(memory.data()), 2048) << "no huge page after the move";
  }
  ASSERT_TRUE(memory.Grow(16));
  memory.data()[memory.size() - 1] = 7;
  EXPECT_EQ(memory.data()[memory.size() - 1], 7);
  memory.PreferHugePages();  // a second call changes nothing
  EXPECT_EQ(memory.data()[offsets[1]], 0xA1);
}

// A script that computes for longer than the threshold moves to huge pages mid-run and still
// computes exactly; a short one keeps 4 KiB pages.
TEST(InterpreterTest, ALongRunMovesToHugePagesAndComputesTheSame) {
  auto long_run = test::NewSession({});
  RunResult r = test::Run(*long_run,
                          "const a = []; for (let i = 0; i < 200000; i++) a.push(i % 97);"
                          "let s = 0; for (let k = 0; k < 20; k++) for (const v of a) s += v;"
                          "return s;");
  ASSERT_EQ(r.outcome, Outcome::kCompleted) << r.error;
  long long expected = 0;
  for (int i = 0; i < 200000; ++i) expected += i % 97;
  EXPECT_EQ(r.result_json, std::to_string(expected * 20));
  auto short_run = test::NewSession({});
  RunResult quick = test::Run(*short_run, "return 6 * 7;");
  EXPECT_EQ(quick.result_json, "42");
}

}  // namespace
}  // namespace airlock::interp
