// Host-side construction of a SetupPlan from a spec: the mount layout of DESIGN.md, the
// generated /etc files, and the Landlock paths.
#ifndef AIRLOCK_ENGINE_INTERNAL_PLAN_BUILDER_H_
#define AIRLOCK_ENGINE_INTERNAL_PLAN_BUILDER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/internal/plan.h"
#include "spec/sandbox_spec.h"

namespace airlock::engine::internal {

struct PlanInputs {
  const spec::SandboxSpec* spec = nullptr;
  std::string rootfs;     // spec.rootfs, or the image's unpacked root; empty: the host's
  std::string run_dir;    // host directory of the sandbox; holds the root's mount point
  std::string spec_json;  // the effective spec, written to /sandbox/control/spec.json
  std::string tools_dir;  // host directory bound at /sandbox/tools
  uid_t host_uid = 0;     // the host ids the sandbox's uid/gid map to
  gid_t host_gid = 0;
  int landlock_abi = 0;   // 0: no Landlock
  std::string egress_socket;  // host path of the egress proxy's socket; empty: no network
};

// The plan. Host directories bound read-write whose owner differs from the sandbox's host ids
// get an idmapped mount prepared here (root only); their descriptors are returned in
// *owned_fds and must stay open until the child has started.
absl::StatusOr<SetupPlan> BuildPlan(const PlanInputs& in, std::vector<UniqueFd>* owned_fds);

}  // namespace airlock::engine::internal

#endif  // AIRLOCK_ENGINE_INTERNAL_PLAN_BUILDER_H_
