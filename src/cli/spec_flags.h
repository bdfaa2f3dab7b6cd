// Spec flags shared by `airlock run` (and later `airlock sandbox create`): a spec file plus
// command-line overrides, merged into one JSON document so that flags get exactly the same
// validation and risk-class tightening as the file.
#ifndef AIRLOCK_CLI_SPEC_FLAGS_H_
#define AIRLOCK_CLI_SPEC_FLAGS_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "spec/sandbox_spec.h"

namespace airlock::cli {

struct SpecFlags {
  std::string spec_file;
  std::string level;
  std::string risk;
  std::string memory;
  std::string cpu;
  std::string pids;
  std::string network;
  std::string rootfs;
  std::string workspace;
  std::vector<std::string> mounts;  // SRC:DST[:ro|rw]
  std::vector<std::string> env;     // K=V
  // The syscall supervisor: process.supervisor, rules routing calls to it (appended after the
  // spec file's rules), everything routed (the default action), and deny rules (put first).
  std::string supervisor;
  std::vector<std::string> trace;  // syscall names
  bool trace_all = false;
  std::vector<std::string> deny;  // NAME or NAME=ERRNO
};

void AddSpecFlags(CLI::App* app, SpecFlags* flags);

// The spec document (from --spec, or {}) with the flags applied.
absl::StatusOr<nlohmann::json> SpecDocument(const SpecFlags& flags);

// SpecDocument, parsed and validated into the effective spec.
absl::StatusOr<spec::SandboxSpec> LoadSpecWithFlags(const SpecFlags& flags);

}  // namespace airlock::cli

#endif  // AIRLOCK_CLI_SPEC_FLAGS_H_
