// Every example in examples/specs parses, and the examples say what their names promise.
#include <filesystem>
#include <string>

#include "common/files.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "spec/parse.h"

namespace airlock::spec {
namespace {

const ParseOptions kAnyHost{HostLevels{.gvisor = true, .microvm = true}};

std::string Example(const std::string& name) {
  return std::string(AIRLOCK_EXAMPLES_DIR) + "/" + name;
}

SandboxSpec LoadOrDie(const std::string& name, const ParseOptions& options = kAnyHost) {
  absl::StatusOr<SandboxSpec> spec = LoadSpecFile(Example(name), options);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : SandboxSpec{};
}

TEST(ExamplesTest, EveryExampleParses) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(AIRLOCK_EXAMPLES_DIR)) {
    SCOPED_TRACE(entry.path().string());
    absl::StatusOr<SandboxSpec> spec = LoadSpecFile(entry.path().string(), kAnyHost);
    EXPECT_TRUE(spec.ok()) << spec.status();
    ++count;
  }
  EXPECT_GE(count, 10);
}

TEST(ExamplesTest, FullYamlAndJsonAreTheSameSpec) {
  SandboxSpec yaml = LoadOrDie("full.yaml");
  SandboxSpec json = LoadOrDie("full.json");
  EXPECT_EQ(yaml, json);
  EXPECT_EQ(yaml.runtime, Runtime::kTraced);
  EXPECT_EQ(yaml.process.syscalls.size(), 3u);
  EXPECT_EQ(yaml.secrets.leases.size(), 1u);
  EXPECT_NE(yaml, SandboxSpec{});
}

TEST(ExamplesTest, MinimalJsonIsTheDefaultSpec) {
  EXPECT_EQ(LoadOrDie("minimal.json"), SandboxSpec{});
}

TEST(ExamplesTest, RiskClassExamplesDeriveTheirClass) {
  struct Case {
    const char* file;
    RiskClass risk;
    Level level;
    NetworkProfile network;
    ApprovalRequirement approval;
  };
  const Case cases[] = {
      {"r0-read-only-lint.yaml", RiskClass::kR0, Level::kBasic, NetworkProfile::kNone,
       ApprovalRequirement::kNone},
      {"r1-internal-patch.json", RiskClass::kR1, Level::kHardened, NetworkProfile::kNone,
       ApprovalRequirement::kNone},
      {"r2-dependency-upgrade.yaml", RiskClass::kR2, Level::kHardened,
       NetworkProfile::kDependencyEgress, ApprovalRequirement::kBeforePr},
      {"r3-migration.json", RiskClass::kR3, Level::kGvisor, NetworkProfile::kRestrictedHttp,
       ApprovalRequirement::kBeforePr},
      {"r4-untrusted-repo.yaml", RiskClass::kR4, Level::kGvisor, NetworkProfile::kNone,
       ApprovalRequirement::kMandatory},
      {"r5-secret-operation.yaml", RiskClass::kR5, Level::kMicroVm, NetworkProfile::kNone,
       ApprovalRequirement::kSecurity},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    SandboxSpec spec = LoadOrDie(c.file);
    EXPECT_EQ(spec.risk_class, c.risk);
    EXPECT_EQ(spec.level, c.level);
    EXPECT_EQ(spec.network.profile, c.network);
    EXPECT_EQ(spec.approval, c.approval);
  }
}

TEST(ExamplesTest, UntrustedRepoNeedsAnUpperLevelOnTheHost) {
  absl::StatusOr<SandboxSpec> spec = LoadSpecFile(Example("r4-untrusted-repo.yaml"), {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()),
            Example("r4-untrusted-repo.yaml") +
                ": riskClass: R4 (untrusted repository) needs level 3 (gvisor) or 4 (microvm) and "
                "this host offers neither; it never runs weaker");
  SandboxSpec on_microvm_host =
      LoadOrDie("r4-untrusted-repo.yaml", ParseOptions{HostLevels{.microvm = true}});
  EXPECT_EQ(on_microvm_host.level, Level::kMicroVm);
  EXPECT_EQ(on_microvm_host.runtime, Runtime::kMicroVm);
}

}  // namespace
}  // namespace airlock::spec
