#include "spec/parse.h"

#include <chrono>
#include <fstream>
#include <string>

#include "common/status.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace airlock::spec {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const ParseOptions kAnyHost{HostLevels{.gvisor = true, .microvm = true}};

SandboxSpec ParseOrDie(std::string_view text, Format format = Format::kAuto) {
  absl::StatusOr<SandboxSpec> spec = ParseSpec(text, format, kAnyHost);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : SandboxSpec{};
}

std::string ErrorOf(std::string_view text, Format format = Format::kAuto) {
  absl::StatusOr<SandboxSpec> spec = ParseSpec(text, format, kAnyHost);
  EXPECT_FALSE(spec.ok());
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(Message(spec.status()));
}

std::string ErrorOfJson(const json& doc) {
  absl::StatusOr<SandboxSpec> spec = ParseSpecJson(doc, kAnyHost);
  EXPECT_FALSE(spec.ok());
  return spec.ok() ? "" : std::string(Message(spec.status()));
}

// The defaults, written out: this is the contract docs/spec.md documents.
constexpr const char* kDefaultsJson = R"({
  "version": 1, "riskClass": null, "level": 2, "runtime": "native", "image": "", "rootfs": "",
  "user": {"uid": 10001, "gid": 10001}, "workdir": "/sandbox/workspace", "hostname": "sandbox",
  "env": {},
  "filesystem": {"readOnlyRoot": true, "workspace": "", "workspaceSizeMb": 1024,
                 "workspaceMode": "rw", "tmpSizeMb": 256, "homeSizeMb": 64, "tmpNoexec": false, "mounts": [],
                 "tmpfs": []},
  "process": {"noNewPrivs": true, "capabilities": [], "seccompProfile": "default",
              "pidsLimit": 256, "openFiles": 1024, "stackMb": 8, "supervisor": "none",
              "syscalls": [], "syscallDefaultAction": ""},
  "resources": {"cpu": 1.0, "memoryMb": 512, "diskMb": 1024, "commandTimeoutSeconds": 300,
                "runTimeoutSeconds": 3600, "cpuTimeSeconds": 0, "maxLogBytes": 33554432,
                "outputLimitAction": "truncate"},
  "network": {"profile": "none", "allowHosts": [], "httpRules": [], "denyCidrs": []},
  "secrets": {"leases": []},
  "cache": {"mode": "none", "key": ""},
  "artifacts": {"paths": ["/sandbox/artifacts"], "maxSizeMb": 100, "secretScan": true,
                "binaryThresholdKb": 1024, "allowBinaries": []},
  "commandPolicy": {"deny": [], "strictShell": false},
  "approval": "none"
})";

TEST(ParseSpecTest, EmptyDocumentGivesEveryDefault) {
  EXPECT_EQ(ParseOrDie("{}", Format::kJson), SandboxSpec{});
  EXPECT_EQ(ParseOrDie("{}", Format::kYaml), SandboxSpec{});
  EXPECT_EQ(ParseOrDie("  {}\n"), SandboxSpec{});
  EXPECT_EQ(ToJson(SandboxSpec{}), json::parse(kDefaultsJson));
  EXPECT_EQ(ParseOrDie(kDefaultsJson), SandboxSpec{});
}

TEST(ParseSpecTest, SniffsTheFormat) {
  EXPECT_EQ(ParseOrDie(" \n{\"level\": 1}").level, Level::kBasic);
  EXPECT_EQ(ParseOrDie("level: 1\n").level, Level::kBasic);
  EXPECT_EQ(ParseOrDie("\xEF\xBB\xBF{\"level\": 1}").level, Level::kBasic);  // UTF-8 BOM
  EXPECT_THAT(ErrorOf("level: 1", Format::kJson), StartsWith("JSON parse error at line 1"));
}

TEST(ParseSpecTest, YamlAndJsonGiveTheSameSpec) {
  SandboxSpec from_json = ParseOrDie(R"({
    "riskClass": "R2", "image": "node:20",
    "env": {"CI": "1", "EMPTY": ""},
    "filesystem": {"mounts": [{"source": "/srv/a", "target": "/sandbox/a", "mode": "rw"}]},
    "resources": {"cpu": 0.5, "memoryMb": 256},
    "network": {"allowHosts": ["registry.npmjs.org:443"]},
    "cache": {"mode": "rw", "key": "npm"}
  })");
  SandboxSpec from_yaml = ParseOrDie(R"(
riskClass: R2
image: node:20
env: {CI: "1", EMPTY: ""}
filesystem:
  mounts:
    - {source: /srv/a, target: /sandbox/a, mode: rw}
resources:
  cpu: 0.5
  memoryMb: 256
network:
  allowHosts: [registry.npmjs.org:443]
cache: {mode: rw, key: npm}
)");
  EXPECT_EQ(from_json, from_yaml);
  EXPECT_EQ(from_yaml.network.profile, NetworkProfile::kDependencyEgress);
  EXPECT_EQ(from_yaml.resources.cpu, 0.5);
  EXPECT_EQ(from_yaml.env.at("CI"), "1");
}

TEST(ParseSpecTest, UnknownFieldsAreErrors) {
  EXPECT_EQ(ErrorOf(R"({"levle": 2, "filesystem": {"mount": []}, "zzz": 1})"),
            "filesystem.mount: unknown field (did you mean mounts?)\n"
            "levle: unknown field (did you mean level?)\n"
            "zzz: unknown field");
  EXPECT_EQ(ErrorOf("process:\n  syscalls:\n    - names: [read]\n      action: allow\n      "
                    "arg: []\n"),
            "process.syscalls[0].arg: unknown field (did you mean args?)");
  EXPECT_EQ(ErrorOf(R"({"bad key\n": 1})"), R"(["bad key\n"]: unknown field)");
}

TEST(ParseSpecTest, WrongTypesNameExpectedAndActual) {
  EXPECT_EQ(ErrorOf(R"({"level": "2"})"), "level: expected integer, got string");
  EXPECT_EQ(ErrorOf("level: '2'\n"), "level: expected integer, got string");
  EXPECT_EQ(ErrorOf(R"({"resources": {"cpu": "1", "memoryMb": 1.5}})"),
            "resources.cpu: expected number, got string\n"
            "resources.memoryMb: expected integer, got number");
  EXPECT_EQ(ErrorOf(R"({"filesystem": []})"), "filesystem: expected object, got array");
  EXPECT_EQ(ErrorOf(R"({"env": {"A": 1}})"), "env.A: expected string, got integer");
  EXPECT_EQ(ErrorOf(R"({"process": {"noNewPrivs": "yes"}})"),
            "process.noNewPrivs: expected boolean, got string");
  EXPECT_EQ(ErrorOf("process:\n  noNewPrivs: yes\n"),
            "process.noNewPrivs: expected boolean, got string");
  EXPECT_EQ(ErrorOf(R"({"network": {"allowHosts": "x"}})"),
            "network.allowHosts: expected array, got string");
  EXPECT_EQ(ErrorOf(R"({"network": {"profile": "repo-egress", "allowHosts": [1]}, "level": 2})"),
            "network.allowHosts[0]: expected string, got integer");
  EXPECT_EQ(ErrorOf(R"({"user": null})"), "user: expected object, got null");
  EXPECT_EQ(ErrorOf("[]"), "(root): expected object, got array");
  EXPECT_EQ(ErrorOf("just a string"), "(root): expected object, got string");
}

TEST(ParseSpecTest, EnumValuesAreCaseSensitiveAndListed) {
  EXPECT_EQ(ErrorOf(R"({"network": {"profile": "Open"}})"),
            "network.profile: \"Open\" is not one of: none, dependency-egress, repo-egress, "
            "restricted-http, open");
  EXPECT_EQ(ErrorOf(R"({"approval": "beforepr"})"),
            "approval: \"beforepr\" is not one of: none, beforePr, mandatory, security");
  EXPECT_EQ(ErrorOf(R"({"riskClass": "r2"})"),
            "riskClass: \"r2\" is not one of: R0, R1, R2, R3, R4, R5");
  EXPECT_EQ(ErrorOf(R"({"runtime": "docker"})"),
            "runtime: \"docker\" is not one of: interp, native, traced, gvisor, microvm");
  EXPECT_EQ(ErrorOf(R"({"level": 5})"), "level: 5 is not one of: 0, 1, 2, 3, 4");
  EXPECT_EQ(
      ErrorOf(R"({"filesystem": {"mounts": [{"source": "/a", "target": "/b", "mode": "RO"}]}})"),
      "filesystem.mounts[0].mode: \"RO\" is not one of: ro, rw");
  EXPECT_EQ(ErrorOf(R"({"cache": {"mode": "on"}})"),
            "cache.mode: \"on\" is not one of: none, ro, rw");
  EXPECT_EQ(ErrorOf(R"({"process": {"supervisor": "seccomp"}})"),
            "process.supervisor: \"seccomp\" is not one of: none, notify, ptrace");
  EXPECT_EQ(ErrorOf(R"({"resources": {"outputLimitAction": "drop"}})"),
            "resources.outputLimitAction: \"drop\" is not one of: truncate, kill");
}

TEST(ParseSpecTest, IntegersMustFitTheirField) {
  EXPECT_EQ(ErrorOf(R"({"user": {"uid": -1, "gid": 4294967296}})"),
            "user.uid: must be between 1 and 2147483647\n"
            "user.gid: must be between 1 and 2147483647");
  EXPECT_EQ(ErrorOf(R"({"resources": {"memoryMb": 9223372036854775808}})"),
            "resources.memoryMb: 9223372036854775808 is out of range "
            "(-9223372036854775808..9223372036854775807)");
  EXPECT_EQ(ErrorOf(R"({"resources": {"memoryMb": 1e30}})"),
            "resources.memoryMb: expected integer, got number");
  EXPECT_EQ(ErrorOf(R"({"process": {"syscalls": [{"names": ["read"], "action": "allow",
                       "args": [{"index": 0, "op": "eq", "value": -1}]}]}})"),
            "process.syscalls[0].args[0].value: -1 is out of range (0..18446744073709551615)");
  SandboxSpec spec = ParseOrDie(R"({"process": {"syscalls": [{"names": ["read"],
      "action": "allow", "args": [{"index": 0, "op": "eq", "value": 18446744073709551615}]}]}})");
  EXPECT_EQ(spec.process.syscalls[0].args[0].value, UINT64_MAX);
}

TEST(ParseSpecTest, StringsMustBeClean) {
  EXPECT_EQ(ErrorOf(R"({"workdir": "/a\u0000b"})"), "workdir: must not contain NUL characters");
  EXPECT_EQ(ErrorOf("workdir: \"/a\\0b\"\n"), "workdir: must not contain NUL characters");
  json doc = {{"hostname", "\xff"}};
  EXPECT_EQ(ErrorOfJson(doc), "hostname: must be valid UTF-8");
}

TEST(ParseSpecTest, ReportsEveryProblemAtOnce) {
  EXPECT_EQ(ErrorOf(R"(
levle: 1
user: {uid: 0}
resources: {memoryMb: 0, cpu: x}
filesystem:
  mounts:
    - 5
    - {source: /srv/a, target: /proc}
network: {profile: open}
riskClass: R1
)"),
            // What the decoder finds, then what validation finds.
            "filesystem.mounts[0]: expected object, got integer\n"
            "resources.cpu: expected number, got string\n"
            "levle: unknown field (did you mean level?)\n"
            "user.uid: must not be 0 (root)\n"
            "filesystem.mounts[1].target: must not be on or under /proc (reserved)\n"
            "resources.memoryMb: must be > 0\n"
            "network.profile: open is looser than risk class R1 allows (at most none)");
}

TEST(ParseSpecTest, DuplicateKeysAreErrors) {
  EXPECT_EQ(ErrorOf(R"({"resources": {"cpu": 1, "cpu": 2}})"), "resources.cpu: duplicate key");
  EXPECT_EQ(ErrorOf("resources:\n  cpu: 1\n  cpu: 2\n"),
            "resources.cpu: duplicate key (line 3, column 3)");
}

TEST(ParseSpecTest, HostileDocumentsAreBounded) {
  std::string big(kMaxSpecBytes + 1, ' ');
  EXPECT_EQ(ErrorOf(big), "spec is 1048577 bytes; the limit is 1048576 bytes (1 MiB)");
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    bomb += fmt::format("{0}: &{0} [*{1}, *{1}, *{1}, *{1}, *{1}, *{1}, *{1}, *{1}, *{1}, *{1}]\n",
                        c, static_cast<char>(c - 1));
  }
  auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(ErrorOf(bomb), HasSubstr("more than 100000 values"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_THAT(ErrorOf(std::string(100'000, '['), Format::kJson),
              HasSubstr("nested deeper than 32 levels"));
  std::string nested_objects;
  for (int i = 0; i < 50'000; ++i) nested_objects += "{\"env\":";
  EXPECT_THAT(ErrorOf(nested_objects), HasSubstr("nested deeper than 32 levels"));
  EXPECT_FALSE(ParseSpec(std::string(100'000, '['), Format::kYaml, {}).ok());
  std::string nested_sequences;
  for (int i = 0; i < 50'000; ++i) nested_sequences += "- ";
  EXPECT_THAT(ErrorOf("env:\n  " + nested_sequences + "x\n"),
              HasSubstr("nested deeper than 32 levels"));
}

TEST(ParseSpecTest, LongErrorListsAreCut) {
  json doc = json::object();
  for (int i = 0; i < 60; ++i) doc[fmt::format("unknown{:02}", i)] = i;
  std::string error = ErrorOfJson(doc);
  EXPECT_THAT(error, StartsWith("unknown00: unknown field\nunknown01: unknown field\n"));
  EXPECT_THAT(error, HasSubstr("\nunknown49: unknown field\n... and 10 more problems"));
}

TEST(ParseSpecTest, RuntimeComesFromTheLevel) {
  EXPECT_EQ(ParseOrDie(R"({"level": 0})").runtime, Runtime::kInterp);
  EXPECT_EQ(ParseOrDie(R"({"level": 1})").runtime, Runtime::kNative);
  EXPECT_EQ(ParseOrDie(R"({"level": 1, "process": {"supervisor": "ptrace"}})").runtime,
            Runtime::kTraced);
  EXPECT_EQ(ParseOrDie(R"({"process": {"supervisor": "notify"}})").runtime, Runtime::kTraced);
  EXPECT_EQ(ParseOrDie(R"({"level": 3})").runtime, Runtime::kGvisor);
  EXPECT_EQ(ParseOrDie(R"({"level": 4})").runtime, Runtime::kMicroVm);
  // A runtime alone names its level.
  EXPECT_EQ(ParseOrDie(R"({"runtime": "gvisor"})").level, Level::kGvisor);
  EXPECT_EQ(ParseOrDie(R"({"runtime": "interp"})").level, Level::kInterp);
  EXPECT_EQ(ErrorOf(R"({"level": 2, "runtime": "gvisor"})"),
            "runtime: gvisor does not match level 2 (level 2 runs native or traced)");
  EXPECT_EQ(ErrorOf(R"({"runtime": "traced"})"),
            "runtime: traced needs process.supervisor notify or ptrace");
}

TEST(ParseSpecTest, NullRiskClassMeansNone) {
  EXPECT_EQ(ParseOrDie(R"({"riskClass": null})").risk_class, std::nullopt);
  EXPECT_EQ(ParseOrDie("riskClass: ~\n").risk_class, std::nullopt);
}

TEST(ParseSpecJsonTest, MergedFlagsGetTheSameChecks) {
  // What the CLI does: the file's document, then --level 1 --memory 0 written into it.
  absl::StatusOr<json> doc_or = ReadSpecDocument("riskClass: R2\nimage: node:20\n", Format::kYaml);
  ASSERT_TRUE(doc_or.ok()) << doc_or.status();
  json doc = *doc_or;
  doc["level"] = 1;
  doc["resources"]["memoryMb"] = 0;
  EXPECT_EQ(ErrorOfJson(doc),
            "resources.memoryMb: must be > 0\n"
            "level: 1 is weaker than risk class R2 allows (minimum 2)");
}

TEST(ToJsonTest, RoundTripsThroughParseSpecJson) {
  SandboxSpec spec;
  spec.risk_class = RiskClass::kR2;
  spec.network.profile = NetworkProfile::kDependencyEgress;
  spec.network.allow_hosts = {"registry.npmjs.org:443"};
  spec.network.deny_cidrs = {"198.51.100.0/24"};
  spec.approval = ApprovalRequirement::kMandatory;
  spec.image = "node:20";
  spec.env = {{"A", "1"}, {"B", "two words"}};
  spec.filesystem.mounts = {Mount{"/srv/a", "/sandbox/a", MountMode::kReadWrite}};
  spec.filesystem.tmpfs = {Tmpfs{"/sandbox/tmp", 32, 1000, true}};
  spec.runtime = Runtime::kTraced;
  spec.process.supervisor = SupervisorMode::kPtrace;
  spec.process.syscalls = {SyscallRule{{"ioctl"}, {{1, "masked_eq", 0x5401, 0xffff}}, "trace"}};
  spec.process.syscall_default_action = "errno(EPERM)";
  spec.resources.cpu = 0.25;
  spec.resources.output_limit_action = OutputLimitAction::kKill;
  spec.cache = Cache{CacheMode::kReadWrite, "npm-20"};
  spec.artifacts.paths = {"/sandbox/artifacts", "/sandbox/workspace/out"};
  spec.artifacts.binary_threshold_kb = 0;
  spec.artifacts.allow_binaries = {{"/sandbox/workspace/out/**/*.whl", "the wheel under test"}};
  spec.command_policy.strict_shell = true;
  spec.command_policy.deny = {
      {"terraform-apply", {"terraform ** apply", "tofu ** apply"}, "applies go through CI"},
      {"no-push", {"git push"}, ""}};
  ASSERT_TRUE(Validate(spec).empty()) << ToString(Validate(spec)[0]);

  for (const SandboxSpec& original : {SandboxSpec{}, spec}) {
    absl::StatusOr<SandboxSpec> again = ParseSpecJson(ToJson(original), {});
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, original);
    absl::StatusOr<SandboxSpec> from_text = ParseSpec(ToJson(original).dump(2), Format::kJson, {});
    ASSERT_TRUE(from_text.ok()) << from_text.status();
    EXPECT_EQ(*from_text, original);
  }
}

TEST(ParseSpecTest, CommandPolicyAndBinaryAllowancesFromYaml) {
  SandboxSpec spec = ParseOrDie(R"(
commandPolicy:
  strictShell: true
  deny:
    - name: terraform-apply
      reason: infrastructure changes go through the deploy pipeline
      argv:
        - terraform ** apply
        - tofu ** apply
artifacts:
  paths: [/sandbox/artifacts]
  binaryThresholdKb: 64
  allowBinaries:
    - path: /sandbox/artifacts/dist/*.whl
      reason: the wheel this build produces
)",
                                Format::kYaml);
  EXPECT_TRUE(spec.command_policy.strict_shell);
  ASSERT_EQ(spec.command_policy.deny.size(), 1u);
  EXPECT_EQ(spec.command_policy.deny[0].name, "terraform-apply");
  EXPECT_THAT(spec.command_policy.deny[0].argv, ElementsAre("terraform ** apply", "tofu ** apply"));
  EXPECT_EQ(spec.artifacts.binary_threshold_kb, 64);
  ASSERT_EQ(spec.artifacts.allow_binaries.size(), 1u);
  EXPECT_EQ(spec.artifacts.allow_binaries[0].path, "/sandbox/artifacts/dist/*.whl");
}

TEST(ParseSpecTest, CommandPolicyErrorsNameTheirField) {
  absl::StatusOr<SandboxSpec> spec = ParseSpec(R"(
commandPolicy:
  strictShel: true
  deny:
    - name: Bad Name
      argv: curl * | sh
    - name: ok
      argv: ["curl * | sh", "** sudo"]
      reason: 7
)",
                                               Format::kYaml, {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()),
            "commandPolicy.deny[0].argv: expected array, got string\n"
            "commandPolicy.deny[1].reason: expected string, got integer\n"
            "commandPolicy.strictShel: unknown field (did you mean strictShell?)\n"
            "commandPolicy.deny[0].name: \"Bad Name\" is not a rule name (1-64 of a-z, 0-9, '.', "
            "'_', '-', '/', starting with a letter or digit)\n"
            "commandPolicy.deny[1].argv[0]: \"curl * | sh\": \"|\" is a shell operator; a pattern "
            "matches the argv of one command (shell strings are split into commands before "
            "matching, and pipes into a shell are refused by the built-in pipe-to-shell rules)\n"
            "commandPolicy.deny[1].argv[1]: \"** sudo\": the first word must be a program name, "
            "without '*'");
}

class LoadSpecFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = ::testing::TempDir() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(LoadSpecFileTest, PicksTheFormatFromTheExtension) {
  EXPECT_TRUE(LoadSpecFile(Write("a.yaml", "level: 1\n"), {}).ok());
  EXPECT_TRUE(LoadSpecFile(Write("a.yml", "level: 1\n"), {}).ok());
  EXPECT_TRUE(LoadSpecFile(Write("a.spec", "level: 1\n"), {}).ok());
  EXPECT_TRUE(LoadSpecFile(Write("b.spec", "{\"level\": 1}"), {}).ok());
  absl::StatusOr<SandboxSpec> spec = LoadSpecFile(Write("a.json", "level: 1\n"), {});
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(Message(spec.status())), HasSubstr("a.json: JSON parse error"));
}

TEST_F(LoadSpecFileTest, PutsThePathOnEveryLine) {
  std::string path = Write("bad.yaml", "level: 9\nresources: {memoryMb: 0}\n");
  absl::StatusOr<SandboxSpec> spec = LoadSpecFile(path, {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()), path + ": level: 9 is not one of: 0, 1, 2, 3, 4\n" + path +
                                        ": resources.memoryMb: must be > 0");
}

TEST_F(LoadSpecFileTest, LoadsTheDocumentAlone) {
  absl::StatusOr<json> doc = LoadSpecDocument(Write("doc.yaml", "level: 9\n"));
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(*doc, json({{"level", 9}}));
  std::string path = Write("dup.yaml", "level: 1\nlevel: 2\n");
  doc = LoadSpecDocument(path);
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(Message(doc.status()), path + ": level: duplicate key (line 2, column 1)");
}

TEST_F(LoadSpecFileTest, MissingAndOversizedFiles) {
  absl::StatusOr<SandboxSpec> spec = LoadSpecFile(::testing::TempDir() + "/missing.yaml", {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(Message(spec.status())), StartsWith("load spec: "));
  spec = LoadSpecFile(Write("huge.yaml", std::string(kMaxSpecBytes + 1, '#')), {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace airlock::spec
