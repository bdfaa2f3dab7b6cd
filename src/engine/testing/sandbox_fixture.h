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

  std::unique_ptr<CgroupDriver> cgroups_;
};

}  // namespace airlock::engine::testing

#endif  // AIRLOCK_ENGINE_TESTING_SANDBOX_FIXTURE_H_
