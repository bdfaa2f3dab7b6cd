// Hostile scripts: each ends in a clear outcome, and the host (and the next session) is unharmed.
#include <chrono>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "interp/internal/guest.h"
#include "interp/internal/wasm_rt.h"
#include "interp/internal/watchdog.h"
#include "interp/test_util.h"

namespace airlock::interp {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

struct Case {
  const char* name;
  const char* script;
  Outcome outcome;
  const char* error;  // a substring of RunResult::error
  // The execution-time limit: short for scripts meant to time out, long for those that must hit
  // another limit first even on a loaded machine.
  int exec_ms = 300;
};

constexpr int kLong = 20000;

RunResult RunHostile(const char* script, int exec_ms = 300) {
  SessionOptions options;
  options.limits.exec_time = std::chrono::milliseconds(exec_ms);
  options.limits.backstop_grace = std::chrono::milliseconds(300);
  options.limits.memory_bytes = 32 << 20;
  auto session = test::NewSession(std::move(options));
  return test::Run(*session, script);
}

void ExpectHostStillWorks() {
  auto session = test::NewSession({});
  RunResult r = test::Run(*session, "return [1, 2, 3].map((x) => x * x).join();");
  EXPECT_EQ(r.result_json, "\"1,4,9\"");
}

class HostileTest : public ::testing::TestWithParam<Case> {};

TEST_P(HostileTest, EndsClearly) {
  const Case& c = GetParam();
  auto start = std::chrono::steady_clock::now();
  RunResult r = RunHostile(c.script, c.exec_ms);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.outcome, c.outcome) << ToString(r.outcome) << ": " << r.error;
  EXPECT_THAT(r.error, HasSubstr(c.error));
  // Nothing runs much past its time limit, whatever it does.
  if (c.exec_ms < kLong) {
    EXPECT_LT(took, std::chrono::seconds(3));
  }
  ExpectHostStillWorks();
}

const Case kCases[] = {
    {"BusyLoop", "for (;;) {}", Outcome::kTimeout, "time limit"},
    {"BusyLoopInTryCatch", "for (;;) { try { for (;;) {} } catch (e) {} finally {} }",
     Outcome::kTimeout, "time limit"},
    {"AwaitLoop", "for (;;) await null;", Outcome::kTimeout, "time limit"},
    // Each job queues the next and nothing accumulates: only the time limit can end it.
    {"MicrotaskFlood",
     "const f = () => { Promise.resolve().then(f); }; f(); await new Promise(() => {});",
     Outcome::kTimeout, "time limit"},
    // Each job's promise waits for the next one's: the chain grows until QuickJS cannot queue the
    // next job (which it drops without an exception), or the time limit, whichever comes first.
    {"PromiseChainBomb",
     "const f = () => Promise.resolve().then(f); f(); await new Promise(() => {});",
     Outcome::kMemoryLimit, "out of memory", kLong},
    {"AllocationBomb", "const a = []; for (;;) a.push(new Array(100000).fill(a.length));",
     Outcome::kMemoryLimit, "out of memory", kLong},
    {"StringBomb", "let s = 'x'; for (;;) s += s;", Outcome::kScriptError, "string too long",
     kLong},
    {"AllocationBombThatCatches",
     "const a = []; for (;;) { try { a.push(new Array(100000).fill(1)); } catch (e) {} }",
     Outcome::kTimeout, "time limit"},
    {"DeepRecursion", "function f(n) { return f(n + 1) + 1; } f(0);", Outcome::kScriptError,
     "stack overflow", kLong},
    {"DeepJsonParse", "JSON.parse('['.repeat(1e6));", Outcome::kScriptError, "stack overflow",
     kLong},
    {"ObjectBomb", "let o = {}; for (let i = 0; i < 1e7; i++) o = {o};", Outcome::kMemoryLimit,
     "out of memory", kLong},
    // JSON.stringify of deep nesting is quadratic and does not poll the interrupt handler: only
    // the watchdog stops it.
    {"DeepJsonStringify", "let o = {}; for (let i = 0; i < 1e5; i++) o = {o}; JSON.stringify(o);",
     Outcome::kTimeout, "stopped by the watchdog"},
    // The parser recurses natively until the thread's stack runs out: a trap, caught.
    {"DeepEvalNesting", "eval('('.repeat(3e5) + '1' + ')'.repeat(3e5));", Outcome::kTrapped,
     "native call stack exhausted", kLong},
    {"DeepArrayToString", "let a = []; for (let i = 0; i < 3e5; i++) a = [a]; String(a);",
     Outcome::kScriptError, "more frames", kLong},
    {"CatastrophicRegex", "/^(a+)+$/.test('a'.repeat(40) + 'b');", Outcome::kTimeout, "time limit"},
    {"HugeString", "'x'.repeat(2 ** 29);", Outcome::kMemoryLimit, "out of memory", kLong},
    {"HugeArrayBuffer", "new ArrayBuffer(2 ** 30);", Outcome::kMemoryLimit, "out of memory", kLong},
    {"ManyArrayBuffers", "const a = []; for (;;) a.push(new ArrayBuffer(1 << 20));",
     Outcome::kMemoryLimit, "out of memory", kLong},
    {"ProxyRecursion", "const p = new Proxy({}, {get(t, k, r) { return r[k]; }}); p.x;",
     Outcome::kScriptError, "stack overflow", kLong},
    {"CyclicToString", "const a = []; a[0] = a; a.toString = () => String(a); String(a);",
     Outcome::kScriptError, "stack overflow", kLong},
    {"Require", "require('fs');", Outcome::kScriptError,
     "ReferenceError: 'require' is not defined"},
    {"Process", "process.exit(1);", Outcome::kScriptError, "'process' is not defined"},
    {"Fetch", "await fetch('http://169.254.169.254/');", Outcome::kScriptError,
     "'fetch' is not defined"},
    {"DynamicImport", "await import('fs');", Outcome::kScriptError, "could not load module"},
    {"StdAndOs", "return [typeof std, typeof os, typeof print, typeof scriptArgs];",
     Outcome::kCompleted, ""},
    {"FunctionConstructorGlobal",
     "const g = (0, eval)('this'); const h = Function('return this')();"
     "if (g !== globalThis || h !== globalThis) throw new Error('new global');"
     "return typeof h.__airlock_host;",
     Outcome::kCompleted, ""},
    {"ConstructorChain", "return [].constructor.constructor('return typeof process')();",
     Outcome::kCompleted, ""},
};

INSTANTIATE_TEST_SUITE_P(Scripts, HostileTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return std::string(param.param.name);
                         });

TEST(HostileValuesTest, CapabilityProbesSeeNothing) {
  EXPECT_EQ(
      RunHostile("return [typeof std, typeof os, typeof print, typeof scriptArgs];").result_json,
      "[\"undefined\",\"undefined\",\"undefined\",\"undefined\"]");
  EXPECT_EQ(RunHostile("return typeof Function('return this')().__airlock_host;").result_json,
            "\"undefined\"");
  EXPECT_EQ(RunHostile("return [].constructor.constructor('return typeof process')();").result_json,
            "\"undefined\"");
}

TEST(HostileValuesTest, ToolsCannotBeSubvertedThroughPrototypes) {
  SessionOptions options;
  options.tools = {test::FnTool(
      "echo", [](const nlohmann::json& a) -> absl::StatusOr<nlohmann::json> { return a; })};
  auto session = test::NewSession(std::move(options));
  RunResult r = test::Run(*session, R"JS(
    JSON.parse = () => 'hijacked';
    JSON.stringify = () => '"hijacked"';
    Promise.prototype.then = function () { return 'hijacked'; };
    const r = await tools.call('echo', {x: 1});
    return r;
  )JS");
  EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.error;
}

// A guest stuck where the engine never polls the interrupt handler: here a host that never
// interrupts, so only the watchdog can stop it.
class NeverInterrupt : public internal::GuestHost {
 public:
  uint32_t OnHostCall(internal::Guest&, std::string_view, std::string_view,
                      std::string_view) override {
    return 0;
  }
  bool ShouldInterrupt(internal::Guest&) override { return false; }
};

TEST(WatchdogTest, StopsAGuestThatIgnoresTheInterruptHandler) {
  NeverInterrupt host;
  auto guest = internal::Guest::Boot({}, &host);
  ASSERT_TRUE(guest.ok()) << guest.status();
  (*guest)->set_backstop_budget(std::chrono::milliseconds(100));
  uint64_t before = internal::Watchdog::Get().revocations();
  auto start = std::chrono::steady_clock::now();
  auto r = (*guest)->Eval("for (;;) {}", "stuck.js");
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(Message(r.status())), HasSubstr("stopped by the watchdog"));
  EXPECT_TRUE((*guest)->revoked());
  EXPECT_TRUE((*guest)->broken());
  EXPECT_EQ(internal::Watchdog::Get().revocations(), before + 1);
  EXPECT_LT(took, std::chrono::seconds(2));
  // The broken guest refuses further work; others are fine.
  EXPECT_FALSE((*guest)->Eval("1", "again.js").ok());
  ExpectHostStillWorks();
}

TEST(GuestMemoryTest, ReadsOfGarbagePointersAreErrors) {
  NeverInterrupt host;
  auto guest = internal::Guest::Boot({}, &host);
  ASSERT_TRUE(guest.ok()) << guest.status();
  internal::Guest& g = **guest;
  uint32_t size = g.memory().size();
  EXPECT_FALSE(g.ReadCString(0, 10).ok());
  EXPECT_FALSE(g.ReadCString(size, 10).ok());
  EXPECT_FALSE(g.ReadCString(0xffffffff, 10).ok());
  EXPECT_FALSE(g.ReadU32(size - 2).ok());
  EXPECT_FALSE(g.WriteBytes(size - 1, "ab").ok());
  // A string without its NUL at the very end of memory.
  ASSERT_TRUE(g.WriteBytes(size - 3, "abc").ok());
  EXPECT_FALSE(g.ReadCString(size - 3, 100).ok());
  // Longer than allowed.
  ASSERT_TRUE(g.WriteBytes(size - 100, std::string(99, 'a') + '\0').ok());
  EXPECT_EQ(g.ReadCString(size - 100, 10).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*g.ReadCString(size - 100, 99), std::string(99, 'a'));
}

TEST(GuestMemoryTest, LinearMemoryNeverGrowsPastItsCap) {
  NeverInterrupt host;
  internal::GuestConfig config;
  config.max_pages = 512;                  // 32 MiB
  config.quickjs_memory_limit = 1u << 30;  // only the hard cap applies
  auto guest = internal::Guest::Boot(config, &host);
  ASSERT_TRUE(guest.ok()) << guest.status();
  auto r = (*guest)->Eval("const a = []; for (;;) a.push(new Array(100000).fill(1));", "bomb.js");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->threw);
  EXPECT_THAT(r->exception, HasSubstr("out of memory"));
  EXPECT_LE((*guest)->memory().pages(), 512u);
}

TEST(GuestMemoryTest, ATrapDiscardsOnlyThatGuest) {
  NeverInterrupt host;
  auto guest = internal::Guest::Boot({}, &host);
  ASSERT_TRUE(guest.ok()) << guest.status();
  // Revoking the memory makes the next access fault: the same path as any out-of-bounds trap.
  (*guest)->memory().Revoke();
  auto r = (*guest)->Eval("1 + 1", "x.js");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(Message(r.status())), HasSubstr("guest trapped: out of bounds"));
  ExpectHostStillWorks();
}

// Guest memory is addressed through the GS segment while guest code runs (tune_wasm2c.py): GS must
// point at that guest's memory during the call and at nothing of it afterwards, trap or not, also
// when a host call runs a second guest in between.
class GsProbe : public internal::GuestHost {
 public:
  uint32_t OnHostCall(internal::Guest&, std::string_view op, std::string_view,
                      std::string_view) override {
    if (op != "log") return 0;
    during = internal::CurrentGsBase();
    if (nested != nullptr) {
      nested_result = ValueOf(*nested, "[1, 2, 3].map((x) => x * x).join()");
      after_nested = internal::CurrentGsBase();
    }
    return 0;
  }
  bool ShouldInterrupt(internal::Guest&) override { return false; }

  // The JSON of a script's completion value, or the error.
  static std::string ValueOf(internal::Guest& guest, const char* script) {
    auto r = guest.Eval(script, "probe.js");
    if (!r.ok()) return std::string(Message(r.status()));
    if (r->threw) return r->exception;
    auto json = guest.Dump(r->value);
    EXPECT_TRUE(guest.FreeValue(r->value).ok());
    return json.ok() ? *json : std::string(Message(json.status()));
  }

  uintptr_t during = 0;
  uintptr_t after_nested = 0;
  internal::Guest* nested = nullptr;
  std::string nested_result;
};

constexpr char kSumAndLog[] =
    "let s = 0; for (let i = 0; i < 1000; i++) s += i; console.log(s); "
    "for (let i = 0; i < 10; i++) s += i; s";

uintptr_t BaseOf(internal::Guest& guest) {
  return reinterpret_cast<uintptr_t>(guest.memory().data());
}

void ExpectGsFollowsTheGuest() {
  const uintptr_t before = internal::CurrentGsBase();
  GsProbe host;
  auto guest = internal::Guest::Boot({}, &host);
  ASSERT_TRUE(guest.ok()) << guest.status();
  EXPECT_EQ(GsProbe::ValueOf(**guest, kSumAndLog), "499545");
#if defined(__x86_64__)
  EXPECT_EQ(host.during, BaseOf(**guest));
#endif
  EXPECT_EQ(internal::CurrentGsBase(), before);
  // A trap unwinds past the guest's frames; GS is put back all the same.
  (*guest)->memory().Revoke();
  EXPECT_THAT(GsProbe::ValueOf(**guest, "1 + 1"), HasSubstr("guest trapped"));
  EXPECT_EQ(internal::CurrentGsBase(), before);
}

TEST(GuestMemoryTest, GsAddressesTheGuestOnlyWhileItRuns) { ExpectGsFollowsTheGuest(); }

TEST(GuestMemoryTest, GsMovedThroughArchPrctlWorksTheSame) {
  internal::UseArchPrctlForGsBase(true);
  EXPECT_FALSE(internal::UsesGsBaseInstructions());
  ExpectGsFollowsTheGuest();
  internal::UseArchPrctlForGsBase(false);
}

// The outer guest's script runs the inner guest from its host call (console.log), then keeps
// computing in its own memory; `inner_traps` revokes the inner guest's memory first.
void ExpectOuterGuestIntactAroundANestedOne(bool inner_traps) {
  const uintptr_t before = internal::CurrentGsBase();
  GsProbe inner_host;
  auto inner = internal::Guest::Boot({}, &inner_host);
  ASSERT_TRUE(inner.ok()) << inner.status();
  if (inner_traps) (*inner)->memory().Revoke();  // its next access traps
  GsProbe outer_host;
  outer_host.nested = inner->get();
  auto outer = internal::Guest::Boot({}, &outer_host);
  ASSERT_TRUE(outer.ok()) << outer.status();
  EXPECT_EQ(GsProbe::ValueOf(**outer, kSumAndLog), "499545");
  if (inner_traps) {
    EXPECT_THAT(outer_host.nested_result, HasSubstr("guest trapped"));
    EXPECT_TRUE((*inner)->broken());
  } else {
    EXPECT_EQ(outer_host.nested_result, "\"1,4,9\"");
  }
  EXPECT_FALSE((*outer)->broken());
#if defined(__x86_64__)
  EXPECT_EQ(outer_host.during, BaseOf(**outer));
  EXPECT_EQ(outer_host.after_nested, BaseOf(**outer));
  EXPECT_NE(BaseOf(**outer), BaseOf(**inner));
#endif
  EXPECT_EQ(internal::CurrentGsBase(), before);
}

TEST(GuestMemoryTest, AGuestRunFromAnotherGuestsHostCallLeavesBothIntact) {
  ExpectOuterGuestIntactAroundANestedOne(/*inner_traps=*/false);
}

TEST(GuestMemoryTest, AGuestTrappingInsideAnotherGuestsHostCallLeavesTheOuterOneIntact) {
  ExpectOuterGuestIntactAroundANestedOne(/*inner_traps=*/true);
}

}  // namespace
}  // namespace airlock::interp
