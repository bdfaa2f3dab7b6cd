#include "supervisor/policy.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "init/protocol.h"
#include "supervisor/internal/bpf.h"

namespace airlock::supervisor {
namespace {

using spec::SupervisorMode;
using spec::SyscallArgCondition;
using spec::SyscallRule;

// A stand-in for the engine's profile: ptrace and mount always denied, personality not in it,
// ioctl filtered, everything else allowed.
ProfileTreatment TestProfile(std::string_view name) {
  if (name == "ptrace" || name == "mount") return ProfileTreatment::kAlwaysDenied;
  if (name == "personality" || name == "acct_like") return ProfileTreatment::kNotAllowed;
  if (name == "ioctl") return ProfileTreatment::kFiltered;
  return ProfileTreatment::kAllowed;
}

spec::Process Process(SupervisorMode mode, std::vector<SyscallRule> rules,
                      std::string default_action = "") {
  spec::Process p;
  p.supervisor = mode;
  p.syscalls = std::move(rules);
  p.syscall_default_action = std::move(default_action);
  return p;
}

SyscallPolicy CompileOrDie(const spec::Process& p) {
  auto policy = SyscallPolicy::Compile(p, TestProfile);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *std::move(policy) : SyscallPolicy();
}

seccomp_data Call(const char* name, std::initializer_list<uint64_t> args = {}) {
  seccomp_data d = {};
  d.nr = SyscallNumber(name);
  d.arch = NativeAuditArch();
  int i = 0;
  for (uint64_t a : args) d.args[i++] = a;
  return d;
}

TEST(SyscallPolicyTest, FirstMatchingRuleDecides) {
  SyscallPolicy p = CompileOrDie(
      Process(SupervisorMode::kNone,
              {SyscallRule{{"openat"}, {{2, "masked_eq", O_WRONLY, O_ACCMODE}}, "errno(EROFS)"},
               SyscallRule{{"openat", "read"}, {}, "allow"},
               SyscallRule{{"openat", "open", "creat"}, {}, "kill"}},  // never reached for openat
              "errno(ENOSYS)"));
  EXPECT_EQ(p.Evaluate(Call("openat", {0, 0, O_WRONLY | O_CREAT})),
            (Verdict{Verdict::Kind::kErrno, EROFS, 0}));
  EXPECT_EQ(p.Evaluate(Call("openat", {0, 0, O_RDONLY})), (Verdict{Verdict::Kind::kAllow, 0, 1}));
  EXPECT_EQ(p.Evaluate(Call("write")),
            (Verdict{Verdict::Kind::kErrno, ENOSYS, Verdict::kDefaultRule}));
  EXPECT_EQ(p.ActionName(p.Evaluate(Call("openat", {0, 0, O_WRONLY}))), "errno(EROFS)");
  EXPECT_FALSE(p.filter().empty());
}

TEST(SyscallPolicyTest, NoPolicyNoFilter) {
  EXPECT_TRUE(CompileOrDie(Process(SupervisorMode::kNone, {})).filter().empty());
  // A supervisor always has a filter: the handshake (notify) or the CLONE_UNTRACED check.
  EXPECT_FALSE(CompileOrDie(Process(SupervisorMode::kNotify, {})).filter().empty());
  EXPECT_FALSE(CompileOrDie(Process(SupervisorMode::kPtrace, {})).filter().empty());
}

TEST(SyscallPolicyTest, AlwaysDeniedCannotBeLetThrough) {
  for (const char* action : {"allow", "trace"}) {
    auto p = SyscallPolicy::Compile(
        Process(SupervisorMode::kPtrace, {SyscallRule{{"read"}, {}, "allow"},
                                          SyscallRule{{"openat", "ptrace"}, {}, action}}),
        TestProfile);
    ASSERT_FALSE(p.ok()) << action;
    EXPECT_EQ(p.status().message(),
              "process.syscalls[1].names[1]: ptrace is always denied; no rule can let it through "
              "(only errno and kill rules may name it)");
  }
  // Denying it again is fine (and changes nothing: the profile's errno stands or kill wins).
  EXPECT_TRUE(SyscallPolicy::Compile(
                  Process(SupervisorMode::kNone, {SyscallRule{{"mount"}, {}, "errno(EACCES)"}}),
                  TestProfile)
                  .ok());
}

TEST(SyscallPolicyTest, NamingACallOutsideTheProfileWidensItForThatCallOnly) {
  SyscallPolicy p = CompileOrDie(Process(
      SupervisorMode::kNone, {SyscallRule{{"personality"}, {{0, "eq", 0x0040000, 0}}, "allow"}}));
  EXPECT_EQ(p.widened(), std::vector<std::string>{"personality"});
  EXPECT_EQ(p.Evaluate(Call("personality", {0x0040000})).kind, Verdict::Kind::kAllow);
  // Any other personality call is killed, as the profile alone would have done.
  Verdict other = p.Evaluate(Call("personality", {0x0400000}));
  EXPECT_EQ(other.kind, Verdict::Kind::kKill);
  EXPECT_EQ(other.rule, Verdict::kBuiltinRule);
  EXPECT_EQ(p.FilterReturn(other), static_cast<uint32_t>(SECCOMP_RET_KILL_PROCESS));
}

TEST(SyscallPolicyTest, SupervisedRulesGoThroughTheSupervisor) {
  SyscallPolicy notify = CompileOrDie(
      Process(SupervisorMode::kNotify,
              {SyscallRule{{"connect", "sendto", "sendmsg", "sendmmsg"}, {}, "errno(EACCES)"},
               SyscallRule{{"execve"}, {}, "notify"}}));
  EXPECT_EQ(notify.FilterReturn(notify.Evaluate(Call("connect"))),
            static_cast<uint32_t>(SECCOMP_RET_USER_NOTIF));
  EXPECT_EQ(notify.FilterReturn(notify.Evaluate(Call("execve"))),
            static_cast<uint32_t>(SECCOMP_RET_USER_NOTIF));
  EXPECT_EQ(notify.FilterReturn(notify.Evaluate(Call("read"))),
            static_cast<uint32_t>(SECCOMP_RET_ALLOW));
  Verdict hs = notify.Evaluate(Call("getppid", {init::kHandshakeMagic, init::kHandshakeDone}));
  EXPECT_EQ(hs.kind, Verdict::Kind::kHandshake);
  EXPECT_EQ(hs.phase, init::kHandshakeDone);
  EXPECT_EQ(notify.Evaluate(Call("getppid", {init::kHandshakeMagic}), /*handshake=*/false).kind,
            Verdict::Kind::kAllow);

  SyscallPolicy ptrace = CompileOrDie(
      Process(SupervisorMode::kPtrace,
              {SyscallRule{{"connect", "sendto", "sendmsg", "sendmmsg"}, {}, "kill"}}, "trace"));
  EXPECT_EQ(ptrace.FilterReturn(ptrace.Evaluate(Call("connect"))),
            static_cast<uint32_t>(SECCOMP_RET_TRACE | 1));
  EXPECT_EQ(ptrace.FilterReturn(ptrace.Evaluate(Call("read"))),
            static_cast<uint32_t>(SECCOMP_RET_TRACE));
  Verdict untraced = ptrace.Evaluate(Call("clone", {CLONE_UNTRACED | SIGCHLD}));
  EXPECT_EQ(untraced, (Verdict{Verdict::Kind::kErrno, EPERM, Verdict::kBuiltinRule}));
  EXPECT_EQ(ptrace.FilterReturn(untraced), static_cast<uint32_t>(SECCOMP_RET_ERRNO | EPERM));
}

TEST(SyscallPolicyTest, ModeMismatchesAreErrors) {
  auto p = SyscallPolicy::Compile(
      Process(SupervisorMode::kNotify, {SyscallRule{{"read"}, {}, "trace"}}), TestProfile);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "process.syscalls[0].action: trace needs process.supervisor ptrace");
}

TEST(SyscallPolicyTest, TooManyInstructionsIsAnError) {
  std::vector<SyscallRule> rules;
  for (int i = 0; i < 1024; ++i)
    rules.push_back({{"read", "write"}, {{0, "eq", 1u * i, 0}}, "allow"});
  auto p = SyscallPolicy::Compile(Process(SupervisorMode::kNone, rules), TestProfile);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("more than the kernel's limit of 4096"), std::string::npos)
      << p.status();
}

// The compiled filter and Evaluate agree on every call, including 64-bit boundary values of
// every comparison, foreign architectures and x32 numbers. Each comparison has its own system
// call so that no earlier rule hides it.
TEST(SyscallPolicyTest, FilterAgreesWithEvaluate) {
  const uint64_t v = 0x0000000500000010;
  const std::vector<std::pair<const char*, SyscallArgCondition>> conds = {
      {"getpriority", {1, "eq", v, 0}},
      {"setpriority", {1, "ne", v, 0}},
      {"lseek", {1, "lt", v, 0}},
      {"flock", {1, "le", v, 0}},
      {"fcntl", {1, "gt", v, 0}},
      {"fsync", {1, "ge", v, 0}},
      {"personality", {2, "masked_eq", 0x0000010000000002, 0x0000ff00000000ff}},
  };
  std::vector<spec::Process> processes;
  for (SupervisorMode mode :
       {SupervisorMode::kNone, SupervisorMode::kNotify, SupervisorMode::kPtrace}) {
    std::string route = mode == SupervisorMode::kPtrace   ? "trace"
                        : mode == SupervisorMode::kNotify ? "notify"
                                                          : "errno(EPERM)";
    std::vector<SyscallRule> rules;
    for (size_t i = 0; i < conds.size(); ++i) {
      rules.push_back({{conds[i].first}, {conds[i].second}, i % 2 ? route : "errno(E2BIG)"});
    }
    rules.push_back({{"fchdir"}, {conds[0].second, conds[6].second}, "kill"});
    rules.push_back({{"getcwd", "umask", "getpriority"}, {}, route});
    processes.push_back(Process(mode, rules));
    processes.push_back(Process(mode, rules, "errno(ENOSYS)"));
    processes.push_back(Process(mode, rules, mode == SupervisorMode::kNone ? "kill" : route));
  }
  std::vector<uint64_t> values = {0, 1, v - 1, v, v + 1, 0x10, 0x0000000400000010,
                                  0x0000000600000010, 0x000000050000000f, ~0ull, 0x0000010000000002,
                                  0x000001abffcd0002, 0x0000ab0100cd0002, CLONE_UNTRACED,
                                  init::kHandshakeMagic,
                                  // equal to others in one word only
                                  0xffffffff00000010, 0x0000000500000000, 0x0000000700000002,
                                  // the own-filter check: modes and PR_SET_SECCOMP
                                  2, 22, 0x0000000100000016};
  std::vector<int> numbers;
  for (const auto& [name, cond] : conds) numbers.push_back(SyscallNumber(name));
  for (const char* name :
       {"fchdir", "getcwd", "umask", "clone", "getppid", "close", "seccomp", "prctl"}) {
    numbers.push_back(SyscallNumber(name));
  }
#if defined(__x86_64__)
  numbers.push_back(0x40000000 | SyscallNumber("read"));
#endif
  std::mt19937_64 rng(42);
  for (const spec::Process& process : processes) {
    SyscallPolicy p = CompileOrDie(process);
    for (int i = 0; i < 50000; ++i) {
      seccomp_data d = {};
      d.nr = numbers[rng() % numbers.size()];
      d.arch = rng() % 16 == 0 ? AUDIT_ARCH_I386 : NativeAuditArch();
      for (auto& a : d.args) a = values[rng() % values.size()];
      ASSERT_EQ(internal::RunBpf(p.filter(), d), p.FilterReturn(p.Evaluate(d)))
          << SyscallName(d.nr) << " args " << d.args[0] << "," << d.args[1] << "," << d.args[2]
          << " mode " << spec::ToString(process.supervisor) << " default "
          << process.syscall_default_action;
    }
  }
}

// Attack: prctl(0x1_0000000f, ...) against a rule for prctl(15, ...) (PR_SET_NAME). The kernel
// reads only the low 32 bits of an int argument and runs PR_SET_NAME; the rule must match it.
// A rule that lets calls through must not match the value of another register by its low half.
TEST(SyscallPolicyTest, TheUpperHalfOfARegisterCannotSlipPastARule) {
  SyscallPolicy deny = CompileOrDie(Process(
      SupervisorMode::kNone, {SyscallRule{{"prctl"}, {{0, "eq", PR_SET_NAME, 0}}, "errno(EPERM)"},
                              SyscallRule{{"lseek"}, {{1, "lt", 100, 0}}, "errno(EINVAL)"},
                              SyscallRule{{"fcntl"}, {{1, "ne", F_GETFL, 0}}, "kill"}}));
  EXPECT_EQ(deny.Evaluate(Call("prctl", {0x100000000 | PR_SET_NAME})).kind, Verdict::Kind::kErrno);
  EXPECT_EQ(deny.Evaluate(Call("prctl", {0xffffffff00000000 | PR_SET_NAME})).kind,
            Verdict::Kind::kErrno);
  EXPECT_EQ(deny.Evaluate(Call("prctl", {PR_GET_NAME})).kind, Verdict::Kind::kAllow);
  // lt on a 64-bit offset: 4 GiB + 5 is below 100 in its low half, so the restriction applies.
  EXPECT_EQ(deny.Evaluate(Call("lseek", {3, 0x100000005})).kind, Verdict::Kind::kErrno);
  EXPECT_EQ(deny.Evaluate(Call("lseek", {3, 0x100000000 | 500})).kind, Verdict::Kind::kAllow);
  // ne: F_GETFL with a different upper half is a different register, so the kill applies.
  EXPECT_EQ(deny.Evaluate(Call("fcntl", {3, 0x100000000 | F_GETFL})).kind, Verdict::Kind::kKill);
  EXPECT_EQ(deny.Evaluate(Call("fcntl", {3, F_GETFL})).kind, Verdict::Kind::kAllow);

  SyscallPolicy allow =
      CompileOrDie(Process(SupervisorMode::kNone,
                           {SyscallRule{{"prctl"}, {{0, "eq", PR_GET_NAME, 0}}, "allow"},
                            SyscallRule{{"lseek"}, {{1, "lt", 100, 0}}, "allow"}},
                           "errno(EPERM)"));
  EXPECT_EQ(allow.Evaluate(Call("prctl", {PR_GET_NAME})).kind, Verdict::Kind::kAllow);
  EXPECT_EQ(allow.Evaluate(Call("prctl", {0x100000000 | PR_GET_NAME})).kind, Verdict::Kind::kErrno);
  EXPECT_EQ(allow.Evaluate(Call("lseek", {3, 5})).kind, Verdict::Kind::kAllow);
  EXPECT_EQ(allow.Evaluate(Call("lseek", {3, 0x100000005})).kind, Verdict::Kind::kErrno);
}

// An ordered comparison with a value beyond 32 bits is about a 64-bit argument, and only the
// whole register is compared: a rule for mmap lengths above 4 GiB matches 8 GiB (whose low half is
// 0) and not 0x50 (whose low half is above the value's), whichever way the rule acts.
TEST(SyscallPolicyTest, OrderedComparisonsWithA64BitValueReadTheWholeRegister) {
  const uint64_t four_gib = 0x100000000;
  SyscallPolicy allow =
      CompileOrDie(Process(SupervisorMode::kNone,
                           {SyscallRule{{"mmap"}, {{1, "gt", four_gib, 0}}, "allow"},
                            SyscallRule{{"lseek"}, {{1, "le", four_gib, 0}}, "allow"}},
                           "errno(EPERM)"));
  EXPECT_EQ(allow.Evaluate(Call("mmap", {0, 2 * four_gib})).kind, Verdict::Kind::kAllow);
  EXPECT_EQ(allow.Evaluate(Call("mmap", {0, 0x50})).kind, Verdict::Kind::kErrno);
  EXPECT_EQ(allow.Evaluate(Call("lseek", {3, 0x50})).kind, Verdict::Kind::kAllow);
  EXPECT_EQ(allow.Evaluate(Call("lseek", {3, four_gib + 1})).kind, Verdict::Kind::kErrno);
  SyscallPolicy deny = CompileOrDie(Process(
      SupervisorMode::kNone, {SyscallRule{{"mmap"}, {{1, "gt", four_gib, 0}}, "errno(ENOMEM)"}}));
  EXPECT_EQ(deny.Evaluate(Call("mmap", {0, 2 * four_gib})).kind, Verdict::Kind::kErrno);
  EXPECT_EQ(deny.Evaluate(Call("mmap", {0, 0x50})).kind, Verdict::Kind::kAllow);
  for (const SyscallPolicy* p : {&allow, &deny}) {
    for (uint64_t len : {uint64_t{0x50}, four_gib, four_gib + 1, 2 * four_gib, ~uint64_t{0}}) {
      seccomp_data d = Call("mmap", {0, len});
      EXPECT_EQ(internal::RunBpf(p->filter(), d), p->FilterReturn(p->Evaluate(d))) << len;
    }
  }
}

// Attack: a policy denies openat, and the program calls open or creat; it denies connect, and
// the program sends with sendto(MSG_FASTOPEN) to an address. A rule that restricts one call of a
// group must be matched for each other one, or the policy is refused with the names.
TEST(SyscallPolicyTest, CallsWithTheSameEffectMustBeRestrictedTogether) {
  auto compile = [](std::vector<SyscallRule> rules) {
    return SyscallPolicy::Compile(Process(SupervisorMode::kNone, std::move(rules)), TestProfile);
  };
  auto open = compile({SyscallRule{{"read"}, {}, "allow"},
                       SyscallRule{{"openat"}, {{2, "masked_eq", 1, 3}}, "errno(EROFS)"}});
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.status().message(),
            "process.syscalls[1].names[0]: openat is restricted, but open and creat can do the "
            "same and are not: restrict them as well (an errno or kill rule naming them); open's "
            "flags are args[1], openat's args[2]; creat(path, mode) is open(path, "
            "O_CREAT|O_WRONLY|O_TRUNC, mode)");
  auto connect = compile({SyscallRule{{"connect", "sendto"}, {}, "kill"}});
  ASSERT_FALSE(connect.ok());
  EXPECT_THAT(std::string(connect.status().message()),
              ::testing::StartsWith("process.syscalls[0].names[0]: connect is restricted, but "
                                    "sendmsg and sendmmsg can do the same and are not: restrict "
                                    "them as well"));
  auto exec = compile({SyscallRule{{"execveat"}, {}, "errno(EACCES)"}});
  ASSERT_FALSE(exec.ok());
  EXPECT_THAT(std::string(exec.status().message()),
              ::testing::HasSubstr("execveat is restricted, but execve can do the same and is "
                                   "not: restrict it as well"));
  // Covered by other rules, with their own conditions: fine. Rules that let a call through
  // need no partners, and sending on a connected socket is not restricted by a connect rule.
  EXPECT_TRUE(compile({SyscallRule{{"openat"}, {{2, "masked_eq", 1, 3}}, "errno(EROFS)"},
                       SyscallRule{{"open"}, {{1, "masked_eq", 1, 3}}, "errno(EROFS)"},
                       SyscallRule{{"creat"}, {}, "errno(EROFS)"}})
                  .ok());
  EXPECT_TRUE(compile({SyscallRule{{"openat"}, {}, "allow"}}).ok());
  EXPECT_TRUE(compile({SyscallRule{{"sendto", "sendmsg", "sendmmsg"}, {}, "errno(EPERM)"}}).ok());
  // Calls that reach the same end by another way: memory made executable with pkey_mprotect
  // past an mprotect rule, a descriptor written with sendfile, splice or copy_file_range past a
  // write rule, a message sent with sendmmsg past a sendmsg rule.
  auto mprotect = compile({SyscallRule{{"mprotect"}, {{2, "masked_eq", 4, 4}}, "errno(EACCES)"}});
  ASSERT_FALSE(mprotect.ok());
  EXPECT_THAT(std::string(mprotect.status().message()),
              ::testing::HasSubstr("mprotect is restricted, but pkey_mprotect can do the same"));
  // ... and an executable mapping made with mmap.
  mprotect = compile(
      {SyscallRule{{"mprotect", "pkey_mprotect"}, {{2, "masked_eq", 4, 4}}, "errno(EACCES)"}});
  ASSERT_FALSE(mprotect.ok());
  EXPECT_THAT(std::string(mprotect.status().message()),
              ::testing::HasSubstr("but mmap can do the same"));
  auto write = compile({SyscallRule{
      {"write", "writev", "pwrite64", "pwritev", "pwritev2"}, {{0, "eq", 1, 0}}, "errno(EBADF)"}});
  ASSERT_FALSE(write.ok());
  for (const char* other : {"sendfile", "splice", "copy_file_range", "vmsplice"}) {
    EXPECT_THAT(std::string(write.status().message()), ::testing::HasSubstr(other));
  }
  auto sendmsg = compile({SyscallRule{{"sendmsg"}, {}, "kill"}});
  ASSERT_FALSE(sendmsg.ok());
  EXPECT_THAT(std::string(sendmsg.status().message()),
              ::testing::HasSubstr("sendto and sendmmsg can do the same"));
  auto sendto = compile({SyscallRule{{"sendto"}, {}, "errno(EPERM)"}});
  EXPECT_FALSE(sendto.ok());
  EXPECT_TRUE(compile({SyscallRule{{"connect", "sendmsg", "sendmmsg"}, {}, "kill"},
                       SyscallRule{{"sendto"}, {{4, "ne", 0, 0}}, "kill"}})
                  .ok());
}

// Which calls a policy kills whatever their arguments (the engine then makes its profile kill the
// arguments it refuses, which a routed kill never meets): the first rule naming the call decides,
// and the default for calls no rule names.
TEST(SyscallPolicyTest, KillsEveryCallFollowsTheFirstRuleNamingTheCall) {
  SyscallPolicy p = CompileOrDie(
      Process(SupervisorMode::kNotify,
              {SyscallRule{{"socket"}, {{0, "eq", 1, 0}}, "allow"},
               SyscallRule{{"socket"}, {}, "kill"}, SyscallRule{{"unshare", "ioctl"}, {}, "kill"},
               SyscallRule{{"clone", "fork", "vfork"}, {}, "errno(EPERM)"}},
              "kill"));
  EXPECT_FALSE(p.KillsEveryCall("socket"));  // its first rule allows unix sockets
  EXPECT_TRUE(p.KillsEveryCall("unshare"));
  EXPECT_TRUE(p.KillsEveryCall("ioctl"));
  EXPECT_FALSE(p.KillsEveryCall("clone"));
  EXPECT_TRUE(p.KillsEveryCall("prlimit64"));  // no rule: the default kills
  EXPECT_FALSE(CompileOrDie(Process(SupervisorMode::kNotify, {})).KillsEveryCall("prlimit64"));
}

// `airlock run --deny NAME` denies NAME and every call of the same effect: the rules it makes are
// always a policy the check above accepts, whichever call of any group is named.
TEST(SyscallPolicyTest, DenyingACallDeniesEveryCallOfTheSameEffect) {
  for (const char* name :
       {"open",     "openat",        "creat",     "execve",    "connect", "sendto",
        "sendmsg",  "recvmsg",       "read",      "preadv2",   "write",   "pwritev",
        "mprotect", "pkey_mprotect", "setrlimit", "prlimit64", "dup",     "dup3",
        "close",    "truncate",      "fsetxattr", "unlinkat",  "kill",    "clone"}) {
    std::vector<SyscallRule> rules = RulesRestricting(name, "errno(EPERM)");
    auto p = SyscallPolicy::Compile(Process(SupervisorMode::kNone, rules), TestProfile);
    EXPECT_TRUE(p.ok()) << name << ": " << p.status();
  }
  // After connect only a sendto with an address is denied (send() on a connected socket is
  // fine); after sendmsg, every sendto.
  std::vector<SyscallRule> after_connect = RulesRestricting("connect", "kill");
  ASSERT_EQ(after_connect.size(), 2u);
  EXPECT_EQ(after_connect[1].args.size(), 1u);
  // After mprotect, only executable mmaps.
  std::vector<SyscallRule> after_mprotect = RulesRestricting("mprotect", "kill");
  ASSERT_EQ(after_mprotect.size(), 2u);
  EXPECT_EQ(after_mprotect[1].names, std::vector<std::string>{"mmap"});
  EXPECT_EQ(after_mprotect[1].args.size(), 1u);
  // After dup, only fcntl's F_DUPFD and F_DUPFD_CLOEXEC.
  std::vector<SyscallRule> after_dup = RulesRestricting("dup", "kill");
  ASSERT_EQ(after_dup.size(), 3u);
  EXPECT_THAT(after_dup[0].names, ::testing::UnorderedElementsAre("dup", "dup2", "dup3"));
  EXPECT_EQ(after_dup[1].names, std::vector<std::string>{"fcntl"});
  EXPECT_EQ(after_dup[1].args.size(), 1u);
  std::vector<SyscallRule> after_sendmsg = RulesRestricting("sendmsg", "kill");
  ASSERT_EQ(after_sendmsg.size(), 1u);
  EXPECT_THAT(after_sendmsg[0].names,
              ::testing::UnorderedElementsAre("sendmsg", "sendto", "sendmmsg"));
}

// Attack: under a supervisor the program installs its own filter answering "notify" (or an
// errno) for a call a kill rule names; between equal actions the newest filter decides, so the
// call would fail quietly instead of killing the command, and never reach the report. Every
// seccomp filter a supervised program asks for is refused with EPERM, through the supervisor.
TEST(SyscallPolicyTest, ASupervisedProgramCannotInstallItsOwnFilter) {
  for (SupervisorMode mode : {SupervisorMode::kNotify, SupervisorMode::kPtrace}) {
    SyscallPolicy p = CompileOrDie(Process(mode, {}));
    for (seccomp_data call :
         {Call("seccomp", {SECCOMP_SET_MODE_FILTER, 0, 0}),
          Call("seccomp", {0x100000000 | SECCOMP_SET_MODE_FILTER, 0, 0}),
          Call("prctl", {PR_SET_SECCOMP, SECCOMP_MODE_FILTER, 0}),
          Call("prctl", {0xffffffff00000000 | PR_SET_SECCOMP, SECCOMP_MODE_FILTER, 0})}) {
      Verdict v = p.Evaluate(call);
      EXPECT_EQ(v, (Verdict{Verdict::Kind::kErrno, EPERM, Verdict::kOwnFilterRule}));
      EXPECT_EQ(internal::RunBpf(p.filter(), call), p.FilterReturn(v));
      EXPECT_NE(p.FilterReturn(v) & SECCOMP_RET_ACTION_FULL,
                static_cast<uint32_t>(SECCOMP_RET_ERRNO));  // through the supervisor
    }
    // Strict mode, and asking which mode is in force, stay allowed.
    EXPECT_EQ(p.Evaluate(Call("seccomp", {SECCOMP_SET_MODE_STRICT, 0, 0})).kind,
              Verdict::Kind::kAllow);
    EXPECT_EQ(p.Evaluate(Call("prctl", {PR_GET_SECCOMP})).kind, Verdict::Kind::kAllow);
  }
  // Without a supervisor nothing routes calls, and a filter's kill outranks anything the
  // program's own filter answers: no refusal.
  SyscallPolicy none = CompileOrDie(
      Process(SupervisorMode::kNone, {SyscallRule{{"getpriority"}, {}, "errno(EPERM)"}}));
  EXPECT_EQ(none.Evaluate(Call("seccomp", {SECCOMP_SET_MODE_FILTER})).kind, Verdict::Kind::kAllow);
}

// The kernel accepts the filter and applies it: errno rules answer, kill rules kill.
TEST(SyscallPolicyTest, KernelAppliesTheFilter) {
  SyscallPolicy p = CompileOrDie(Process(
      SupervisorMode::kNone, {SyscallRule{{"getpriority"}, {{0, "eq", 77, 0}}, "errno(EXDEV)"},
                              SyscallRule{{"getpriority"}, {{0, "eq", 78, 0}}, "kill"}}));
  pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (init::InstallFilters("", p.filter(), init::PolicyListener::kNone, -1) != 0) _exit(10);
    errno = 0;
    if (syscall(SYS_getpriority, 77, 0) != -1 || errno != EXDEV) _exit(11);
    if (syscall(SYS_getpriority, PRIO_PROCESS, 0) < 0) _exit(12);  // other arguments pass
    // The kernel reads `which` as an int: 77 with any upper half is still 77.
    errno = 0;
    if (syscall(SYS_getpriority, 0xabcd00000000 | 77, 0) != -1 || errno != EXDEV) _exit(14);
    syscall(SYS_getpriority, 78, 0);
    _exit(13);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGSYS);
}

}  // namespace
}  // namespace airlock::supervisor
