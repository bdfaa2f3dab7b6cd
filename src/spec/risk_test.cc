#include "spec/risk.h"

#include <string>
#include <vector>

#include "common/status.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "spec/parse.h"

namespace airlock::spec {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const HostLevels kNoUpperLevels{};
const HostLevels kGvisorHost{.gvisor = true};
const HostLevels kMicroVmHost{.microvm = true};
const HostLevels kBothHost{.gvisor = true, .microvm = true};

std::vector<std::string> Problems(const SandboxSpec& spec) {
  std::vector<std::string> out;
  for (const FieldError& error : CheckRiskClass(spec)) out.push_back(ToString(error));
  return out;
}

absl::StatusOr<SandboxSpec> Parse(const json& doc, HostLevels host = kBothHost) {
  return ParseSpecJson(doc, ParseOptions{host});
}

std::string ErrorOf(const absl::StatusOr<SandboxSpec>& spec) {
  EXPECT_FALSE(spec.ok());
  return spec.ok() ? "" : std::string(Message(spec.status()));
}

TEST(RiskTableTest, HasOneRowPerClassInOrder) {
  ASSERT_EQ(RiskTable().size(), 6u);
  for (size_t i = 0; i < RiskTable().size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(RiskTable()[i].risk_class), i);
    EXPECT_EQ(&RuleFor(RiskTable()[i].risk_class), &RiskTable()[i]);
  }
  EXPECT_TRUE(RuleFor(RiskClass::kR5).broker_only);
  EXPECT_FALSE(RuleFor(RiskClass::kR4).broker_only);
}

TEST(RiskTableTest, StrictnessOrders) {
  EXPECT_LT(NetworkLooseness(NetworkProfile::kNone),
            NetworkLooseness(NetworkProfile::kDependencyEgress));
  EXPECT_LT(NetworkLooseness(NetworkProfile::kDependencyEgress),
            NetworkLooseness(NetworkProfile::kRepoEgress));
  EXPECT_LT(NetworkLooseness(NetworkProfile::kRepoEgress),
            NetworkLooseness(NetworkProfile::kRestrictedHttp));
  EXPECT_LT(NetworkLooseness(NetworkProfile::kRestrictedHttp),
            NetworkLooseness(NetworkProfile::kOpen));
  EXPECT_LT(ApprovalStrength(ApprovalRequirement::kNone),
            ApprovalStrength(ApprovalRequirement::kBeforePr));
  EXPECT_LT(ApprovalStrength(ApprovalRequirement::kBeforePr),
            ApprovalStrength(ApprovalRequirement::kMandatory));
  EXPECT_LT(ApprovalStrength(ApprovalRequirement::kMandatory),
            ApprovalStrength(ApprovalRequirement::kSecurity));
}

TEST(DeriveLevelTest, FollowsTheTableAndTheHost) {
  struct Case {
    RiskClass risk;
    HostLevels host;
    std::optional<Level> level;
  };
  const Case cases[] = {
      {RiskClass::kR0, kBothHost, Level::kBasic},
      {RiskClass::kR1, kBothHost, Level::kHardened},
      {RiskClass::kR2, kBothHost, Level::kHardened},
      {RiskClass::kR3, kNoUpperLevels, Level::kHardened},
      {RiskClass::kR3, kMicroVmHost, Level::kHardened},
      {RiskClass::kR3, kGvisorHost, Level::kGvisor},
      {RiskClass::kR4, kGvisorHost, Level::kGvisor},
      {RiskClass::kR4, kMicroVmHost, Level::kMicroVm},
      {RiskClass::kR4, kBothHost, Level::kGvisor},
      {RiskClass::kR4, kNoUpperLevels, std::nullopt},
      {RiskClass::kR5, kMicroVmHost, Level::kMicroVm},
      {RiskClass::kR5, kNoUpperLevels, std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(
        fmt::format("{} gvisor={} microvm={}", ToString(c.risk), c.host.gvisor, c.host.microvm));
    FieldError error;
    EXPECT_EQ(DeriveLevel(c.risk, c.host, &error), c.level);
    if (!c.level.has_value()) {
      EXPECT_EQ(error.path, "riskClass");
    }
  }
}

TEST(RiskDerivationTest, EachClassDerivesLevelNetworkApprovalAndRuntime) {
  struct Case {
    const char* risk;
    Level level;
    Runtime runtime;
    NetworkProfile network;
    ApprovalRequirement approval;
  };
  const Case cases[] = {
      {"R0", Level::kBasic, Runtime::kNative, NetworkProfile::kNone, ApprovalRequirement::kNone},
      {"R1", Level::kHardened, Runtime::kNative, NetworkProfile::kNone, ApprovalRequirement::kNone},
      {"R2", Level::kHardened, Runtime::kNative, NetworkProfile::kDependencyEgress,
       ApprovalRequirement::kBeforePr},
      {"R3", Level::kGvisor, Runtime::kGvisor, NetworkProfile::kRestrictedHttp,
       ApprovalRequirement::kNone},
      {"R4", Level::kGvisor, Runtime::kGvisor, NetworkProfile::kNone,
       ApprovalRequirement::kMandatory},
      {"R5", Level::kGvisor, Runtime::kGvisor, NetworkProfile::kNone,
       ApprovalRequirement::kSecurity},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.risk);
    absl::StatusOr<SandboxSpec> spec = Parse({{"riskClass", c.risk}});
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->level, c.level);
    EXPECT_EQ(spec->runtime, c.runtime);
    EXPECT_EQ(spec->network.profile, c.network);
    EXPECT_EQ(spec->approval, c.approval);
  }
}

TEST(RiskDerivationTest, R3StaysAtLevel2WithoutGvisor) {
  absl::StatusOr<SandboxSpec> spec = Parse({{"riskClass", "R3"}}, kMicroVmHost);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->level, Level::kHardened);
  EXPECT_EQ(spec->runtime, Runtime::kNative);
}

TEST(RiskDerivationTest, UpperLevelClassesFailOnAHostWithout) {
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R5"}}, kNoUpperLevels)),
            "riskClass: R5 (secret-bearing operation) needs level 3 (gvisor) or 4 (microvm) and "
            "this host offers neither; it never runs weaker");
  // An explicit level needs no derivation; the backend checks the host when it runs.
  absl::StatusOr<SandboxSpec> spec = Parse({{"riskClass", "R4"}, {"level", 4}}, kNoUpperLevels);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->runtime, Runtime::kMicroVm);
}

TEST(RiskTighteningTest, TighterExplicitValuesAreKept) {
  absl::StatusOr<SandboxSpec> spec = Parse({{"riskClass", "R2"},
                                            {"level", 4},
                                            {"network", {{"profile", "none"}}},
                                            {"approval", "security"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->level, Level::kMicroVm);
  EXPECT_EQ(spec->runtime, Runtime::kMicroVm);
  EXPECT_EQ(spec->network.profile, NetworkProfile::kNone);
  EXPECT_EQ(spec->approval, ApprovalRequirement::kSecurity);

  spec = Parse({{"riskClass", "R3"}, {"network", {{"profile", "repo-egress"}}}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->network.profile, NetworkProfile::kRepoEgress);

  // Equal to the derived value is fine too.
  EXPECT_TRUE(Parse({{"riskClass", "R1"}, {"level", 2}, {"approval", "none"}}).ok());
  // R3 on a gVisor host derives 3, but its minimum is 2.
  EXPECT_TRUE(Parse({{"riskClass", "R3"}, {"level", 2}}, kGvisorHost).ok());
}

TEST(RiskTighteningTest, LooserExplicitValuesAreErrors) {
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R2"}, {"level", 1}})),
            "level: 1 is weaker than risk class R2 allows (minimum 2)");
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R0"}, {"level", 0}})),
            "level: 0 is weaker than risk class R0 allows (minimum 1)");
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R4"}, {"level", 2}})),
            "level: 2 is weaker than risk class R4 allows (minimum 3)");
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R2"}, {"network", {{"profile", "open"}}}})),
            "network.profile: open is looser than risk class R2 allows (at most "
            "dependency-egress)");
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R2"}, {"network", {{"profile", "repo-egress"}}}})),
            "network.profile: repo-egress is looser than risk class R2 allows (at most "
            "dependency-egress)");
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R5"}, {"network", {{"profile", "dependency-egress"}}}})),
            "network.profile: dependency-egress is looser than risk class R5 allows (at most "
            "none)");
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R2"}, {"approval", "none"}})),
            "approval: none is weaker than risk class R2 requires (at least beforePr)");
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R5"}, {"approval", "mandatory"}})),
            "approval: mandatory is weaker than risk class R5 requires (at least security)");
  // A runtime that names a weaker level counts as setting it.
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R1"}, {"runtime", "interp"}})),
            "level: 0 is weaker than risk class R1 allows (minimum 2)");
  // All three at once.
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R4"},
                           {"level", 2},
                           {"network", {{"profile", "open"}}},
                           {"approval", "beforePr"}})),
            "level: 2 is weaker than risk class R4 allows (minimum 3)\n"
            "network.profile: open is looser than risk class R4 allows (at most none)\n"
            "approval: beforePr is weaker than risk class R4 requires (at least mandatory)");
}

TEST(RiskTighteningTest, RuntimeFollowsTheDerivedLevelOrMustMatchIt) {
  absl::StatusOr<SandboxSpec> spec = Parse({{"riskClass", "R4"}, {"runtime", "microvm"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->level, Level::kMicroVm);
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R4"}, {"runtime", "native"}}, kGvisorHost)),
            "runtime: native does not match level 3 (level 3 runs gvisor)");
}

TEST(RiskRulesTest, SecretLeasesNeedR5) {
  SandboxSpec spec;
  spec.secrets.leases = {SecretLease{"k", "p", 60, ""}};
  EXPECT_THAT(Problems(spec), IsEmpty());  // no risk class: as written
  spec.risk_class = RiskClass::kR4;
  spec.level = Level::kGvisor;
  spec.approval = ApprovalRequirement::kMandatory;
  EXPECT_THAT(Problems(spec),
              ElementsAre("secrets.leases: secret leases need risk class R5 (secret-bearing "
                          "operation), not R4"));
  spec.risk_class = RiskClass::kR5;
  spec.approval = ApprovalRequirement::kSecurity;
  EXPECT_THAT(Problems(spec), IsEmpty());
}

TEST(RiskRulesTest, R0KeepsMountsAndTheWorkspaceReadOnly) {
  SandboxSpec spec;
  spec.risk_class = RiskClass::kR0;
  spec.level = Level::kBasic;
  spec.filesystem.mounts = {Mount{"/srv/a", "/sandbox/a", MountMode::kReadOnly},
                            Mount{"/srv/b", "/sandbox/b", MountMode::kReadWrite}};
  EXPECT_THAT(Problems(spec),
              ElementsAre("filesystem.workspaceMode: rw is not allowed with risk class R0 "
                          "(read-only)",
                          "filesystem.mounts[1].mode: rw is not allowed with risk class R0 "
                          "(read-only)"));
  // Derived: R0 makes the workspace read-only unless the spec says otherwise, and an explicit rw
  // is refused.
  absl::StatusOr<SandboxSpec> derived =
      Parse({{"riskClass", "R0"}, {"filesystem", {{"workspace", "/srv/repo"}}}});
  ASSERT_TRUE(derived.ok()) << derived.status();
  EXPECT_EQ(derived->filesystem.workspace_mode, MountMode::kReadOnly);
  EXPECT_EQ(Parse({{"riskClass", "R1"}})->filesystem.workspace_mode, MountMode::kReadWrite);
  EXPECT_EQ(ErrorOf(Parse({{"riskClass", "R0"}, {"filesystem", {{"workspaceMode", "rw"}}}})),
            "filesystem.workspaceMode: rw is not allowed with risk class R0 (read-only)");
}

TEST(RiskRulesTest, UntrustedClassesMayNotWriteTheCache) {
  for (RiskClass risk : {RiskClass::kR4, RiskClass::kR5}) {
    SandboxSpec spec;
    spec.risk_class = risk;
    spec.level = Level::kGvisor;
    spec.approval = ApprovalRequirement::kSecurity;
    spec.cache = Cache{CacheMode::kReadWrite, "npm"};
    EXPECT_THAT(Problems(spec),
                ElementsAre(fmt::format("cache.mode: rw is not allowed with risk class {} (the "
                                        "code could poison a cache that later runs trust); use "
                                        "ro or none",
                                        ToString(risk))));
    spec.cache.mode = CacheMode::kReadOnly;
    EXPECT_THAT(Problems(spec), IsEmpty());
  }
}

TEST(ApplyRiskClassTest, OnlyFillsWhatTheCallerLeftOut) {
  SandboxSpec spec;
  spec.risk_class = RiskClass::kR2;
  spec.level = Level::kMicroVm;
  spec.network.profile = NetworkProfile::kOpen;
  spec.approval = ApprovalRequirement::kNone;
  EXPECT_THAT(
      ApplyRiskClass({.level = true, .network_profile = true, .approval = false}, kBothHost, &spec),
      IsEmpty());
  EXPECT_EQ(spec.level, Level::kMicroVm);
  EXPECT_EQ(spec.network.profile, NetworkProfile::kOpen);  // left for CheckRiskClass
  EXPECT_EQ(spec.approval, ApprovalRequirement::kBeforePr);

  SandboxSpec without_class;
  without_class.level = Level::kBasic;
  EXPECT_THAT(ApplyRiskClass({}, kBothHost, &without_class), IsEmpty());
  EXPECT_EQ(without_class.level, Level::kBasic);
}

}  // namespace
}  // namespace airlock::spec
