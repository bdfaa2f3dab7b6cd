// Tools: the only capabilities an interpreter script has. A script calls
// `await tools.call(name, args)`; the session checks the call against its allowlist and limits,
// journals it, and starts the Tool of that name. Arguments and results cross as JSON text.
//
// Bridges are Tool implementations, so new ones never touch the engine: user-registered host
// functions (MakeHostFunctionTool) and the durable human approval (MakeHumanApprovalTool) ship
// here; `sandbox.exec` (a command in a level 1-4 sandbox through the node daemon) and `llm.call`
// (a sub-agent call through the control plane) are immediate tools with asynchronous completion
// that the daemon's change adds.
#ifndef AIRLOCK_INTERP_TOOL_H_
#define AIRLOCK_INTERP_TOOL_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace airlock::interp {

// The rule of two: a session whose tools give it all three of these is refused unless a
// human-approval tool gates the third (see SessionOptions).
enum class Capability : uint8_t {
  kReadsSensitiveData = 1,
  kSeesUntrustedContent = 2,
  kChangesState = 4,  // changes state or communicates externally
};

class CapabilitySet {
 public:
  CapabilitySet() = default;
  CapabilitySet(std::initializer_list<Capability> caps) {
    for (Capability c : caps) Add(c);
  }
  void Add(Capability c) { bits_ |= static_cast<uint8_t>(c); }
  void Add(CapabilitySet other) { bits_ |= other.bits_; }
  bool Has(Capability c) const { return (bits_ & static_cast<uint8_t>(c)) != 0; }
  bool HasAll() const { return bits_ == 7; }
  uint8_t bits() const { return bits_; }
  static CapabilitySet FromBits(uint8_t bits) {
    CapabilitySet s;
    s.bits_ = bits & 7;
    return s;
  }
  // "reads-sensitive-data,sees-untrusted-content" (empty for none).
  std::string ToString() const;
  friend bool operator==(CapabilitySet, CapabilitySet) = default;

 private:
  uint8_t bits_ = 0;
};

// Parses one name of CapabilitySet::ToString ("reads-sensitive-data", "sees-untrusted-content",
// "changes-state").
absl::StatusOr<Capability> ParseCapability(std::string_view name);

// How a tool answers.
enum class ToolKind {
  kImmediate,  // answers through ToolDone while the script runs (may take a while, off-thread)
  kDurable,    // answers through Session::Resume, possibly hours later in another process
};

// What a tool is for the rule of two.
enum class ToolRole {
  kOrdinary,
  kHumanApproval,  // an approved answer ({"approved": true}) allows one state-changing call
};

struct ToolInfo {
  std::string name;  // what scripts pass to tools.call
  std::string description;
  ToolKind kind = ToolKind::kImmediate;
  CapabilitySet capabilities;  // what calling it gives a session
  ToolRole role = ToolRole::kOrdinary;
};

struct ToolCall {
  std::string id;  // "call-1", "call-2"... unique within a session, stable across snapshots
  std::string name;
  std::string args_json;
};

// A tool's answer: a JSON value for the script, or an error message that rejects the script's
// promise with an Error.
struct ToolResult {
  static ToolResult Value(std::string json) { return {true, std::move(json), {}}; }
  static ToolResult Error(std::string message) { return {false, {}, std::move(message)}; }
  bool ok = true;
  std::string value_json;
  std::string error;
};

// Called exactly once with the answer of an immediate tool, from any thread.
using ToolDone = std::function<void(ToolResult)>;

class Tool {
 public:
  virtual ~Tool() = default;
  virtual const ToolInfo& info() const = 0;
  // Starts `call` (on the session's thread, outside guest code). An immediate tool calls `done`
  // exactly once, from any thread, possibly before Start returns; a durable tool never does (it
  // may use `call` to notify whoever answers). Must not throw.
  virtual void Start(const ToolCall& call, ToolDone done) = 0;
};

// A host function registered through the C++ API: runs synchronously in Start. Its error status
// becomes the script's error message.
using HostFunction = std::function<absl::StatusOr<nlohmann::json>(const nlohmann::json& args)>;
std::shared_ptr<Tool> MakeHostFunctionTool(ToolInfo info, HostFunction fn);

inline constexpr char kHumanApprovalToolName[] = "human_approval";

// The durable human-approval tool. A script awaits tools.call("human_approval", {...}); the
// session pauses (and may be snapshotted) until Resume answers with {"approved": bool, ...}.
// `notify`, when set, is told of each request (to page a human).
std::shared_ptr<Tool> MakeHumanApprovalTool(std::function<void(const ToolCall&)> notify = nullptr);

}  // namespace airlock::interp

#endif  // AIRLOCK_INTERP_TOOL_H_
