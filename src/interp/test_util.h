// Helpers for the interpreter's tests: one Interpreter per test binary, and sessions and runs
// that fail the current test (and return something harmless) instead of returning a Status.
#ifndef AIRLOCK_INTERP_TEST_UTIL_H_
#define AIRLOCK_INTERP_TEST_UTIL_H_

#include <memory>
#include <string_view>

#include "common/status.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "interp/interpreter.h"

namespace airlock::interp::test {

inline const Interpreter& Interp() {
  static const Interpreter* interp = [] {
    auto created = Interpreter::Create();
    if (!created.ok()) {
      ADD_FAILURE() << created.status();
      std::abort();
    }
    return created->release();
  }();
  return *interp;
}

inline std::unique_ptr<Session> NewSession(SessionOptions options) {
  auto session = Interp().NewSession(std::move(options));
  if (!session.ok()) {
    ADD_FAILURE() << session.status();
    std::abort();
  }
  return std::move(*session);
}

inline RunResult Run(Session& session, std::string_view script) {
  auto r = session.Run(script);
  if (!r.ok()) {
    ADD_FAILURE() << r.status();
    return RunResult{Outcome::kTrapped, "", std::string(Message(r.status())), {}, {}};
  }
  return *r;
}

inline RunResult Resume(Session& session, std::string_view id, const ToolResult& answer) {
  auto r = session.Resume(id, answer);
  if (!r.ok()) {
    ADD_FAILURE() << r.status();
    return RunResult{Outcome::kTrapped, "", std::string(Message(r.status())), {}, {}};
  }
  return *r;
}

// A host-function tool named `name` that answers with `fn(args)`.
inline std::shared_ptr<Tool> FnTool(std::string name, HostFunction fn, CapabilitySet caps = {}) {
  ToolInfo info;
  info.name = std::move(name);
  info.capabilities = caps;
  return MakeHostFunctionTool(std::move(info), std::move(fn));
}

inline std::string TestKey() { return std::string(32, 'k'); }

}  // namespace airlock::interp::test

#endif  // AIRLOCK_INTERP_TEST_UTIL_H_
