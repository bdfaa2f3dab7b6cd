// Test fixture for tests that run real sandboxes: skips without root, creates sandboxes under
// the "airlock-test" cgroup, and checks after each sandbox that nothing of it is left: no
// process in its namespaces, no cgroup, no run directory, no mount on the host.
#ifndef AIRLOCK_ENGINE_TESTING_SANDBOX_FIXTURE_H_
#define AIRLOCK_ENGINE_TESTING_SANDBOX_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "command/command.h"
#include "engine/cgroup.h"
#include "engine/native_sandbox.h"
#include "gtest/gtest.h"
#include "spec/sandbox_spec.h"

namespace airlock::engine::testing {

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override;

  // A spec with small limits suitable for tests.
  static spec::SandboxSpec TestSpec();

  // Creates a sandbox; fails the test on error.
  std::unique_ptr<NativeSandbox> Create(const spec::SandboxSpec& spec,
                                        std::vector<std::string> allow_degraded = {});
  absl::StatusOr<std::unique_ptr<NativeSandbox>> TryCreate(const spec::SandboxSpec& spec,
                                                           std::vector<std::string> allow = {});

  // Destroys the sandbox and asserts that nothing of it remains.
  void DestroyAndCheckGone(std::unique_ptr<NativeSandbox> sandbox);

  // Create, run one command, destroy and check cleanup.
  CommandResult RunOnce(const spec::SandboxSpec& spec, std::vector<std::string> argv,
                        ExecOptions options = {});
  CommandResult RunOnce(std::vector<std::string> argv) { return RunOnce(TestSpec(), std::move(argv)); }

  // Runs `sh -c script`.
  CommandResult Shell(const std::string& script) { return RunOnce({"/bin/sh", "-c", script}); }

  // Path of a test helper binary (airlock-probe) on the host, and a spec that mounts it at
  // /opt/probe inside the sandbox.
  static std::string ProbePath();
  static spec::SandboxSpec WithProbe(spec::SandboxSpec spec);

  // The syscall supervisor every sandbox of the test runs with (suites parametrised over the
  // modes set it in SetUp). With notify or ptrace, a spec without a syscall policy of its own
  // gets one that routes execve, openat and connect to the supervisor, so that the supervisor
  // takes part in every command.
  spec::SupervisorMode supervisor_ = spec::SupervisorMode::kNone;
  spec::SandboxSpec Supervised(spec::SandboxSpec spec) const;

  std::unique_ptr<CgroupDriver> cgroups_;
};

// A suite run once per supervisor mode (none, notify, ptrace); modes the host cannot provide
// are skipped with the reason.
class SupervisedSandboxTest : public SandboxTest,
                              public ::testing::WithParamInterface<spec::SupervisorMode> {
 protected:
  void SetUp() override;
};

// For INSTANTIATE_TEST_SUITE_P(Supervisors, Suite, SupervisorModes(), SupervisorModeName).
::testing::internal::ValueArray<spec::SupervisorMode, spec::SupervisorMode, spec::SupervisorMode>
SupervisorModes();
std::string SupervisorModeName(const ::testing::TestParamInfo<spec::SupervisorMode>& info);

}  // namespace airlock::engine::testing

#endif  // AIRLOCK_ENGINE_TESTING_SANDBOX_FIXTURE_H_
