// Artifact collection inside the shim: the files of a sandbox's artifact paths go through the
// release gate (src/artifact) as the sandbox user reads them (airlock-init's file workers, so a
// symlink or a path outside the file roots is never followed), and every byte the gate read is
// staged on the host, so what the daemon releases is exactly what was scanned.
#ifndef AIRLOCK_SHIM_COLLECT_H_
#define AIRLOCK_SHIM_COLLECT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "artifact/gate.h"
#include "engine/native_sandbox.h"
#include "spec/sandbox_spec.h"

namespace airlock::shim {

struct CollectLimits {
  size_t max_files = 10000;  // candidates, over all roots; more is an error (nothing released)
  int max_depth = 64;        // directory levels below a root
};

struct CollectOutcome {
  artifact::Collection collection;
  // Sandbox path -> the host file in the staging directory holding the bytes the gate read
  // (released, withheld and quarantined files alike; refused files were never read).
  std::map<std::string, std::string> staged;
};

// Collects `roots` (absolute sandbox paths: files, or directories walked recursively without
// following symlinks; empty means spec.paths) through a gate built from `spec` and the given
// secret values. `staging_dir` must exist, be empty and be private to the caller. Errors: a
// root that is missing or outside the file roots (NotFound / InvalidArgument naming it), too
// many files, a failing read (annotated with the file's path).
absl::StatusOr<CollectOutcome> CollectArtifacts(engine::NativeSandbox& sandbox,
                                                const spec::Artifacts& spec,
                                                const std::vector<std::string>& roots,
                                                const std::vector<std::string>& secrets,
                                                const std::string& staging_dir,
                                                CollectLimits limits = {});

}  // namespace airlock::shim

#endif  // AIRLOCK_SHIM_COLLECT_H_
