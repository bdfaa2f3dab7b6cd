#include "interp/tool.h"

#include <utility>

#include "common/status.h"
#include "fmt/format.h"

namespace airlock::interp {
namespace {

constexpr std::pair<Capability, std::string_view> kCapabilityNames[] = {
    {Capability::kReadsSensitiveData, "reads-sensitive-data"},
    {Capability::kSeesUntrustedContent, "sees-untrusted-content"},
    {Capability::kChangesState, "changes-state"},
};

class HostFunctionTool : public Tool {
 public:
  HostFunctionTool(ToolInfo info, HostFunction fn) : info_(std::move(info)), fn_(std::move(fn)) {
    info_.kind = ToolKind::kImmediate;
  }
  const ToolInfo& info() const override { return info_; }
  void Start(const ToolCall& call, ToolDone done) override {
    nlohmann::json args = nlohmann::json::parse(call.args_json, nullptr, false);
    if (args.is_discarded()) {
      done(ToolResult::Error(fmt::format("{}: arguments are not JSON", info_.name)));
      return;
    }
    absl::StatusOr<nlohmann::json> result = fn_(args);
    if (!result.ok()) {
      done(ToolResult::Error(std::string(Message(result.status()))));
      return;
    }
    done(ToolResult::Value(result->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  }

 private:
  ToolInfo info_;
  HostFunction fn_;
};

class HumanApprovalTool : public Tool {
 public:
  explicit HumanApprovalTool(std::function<void(const ToolCall&)> notify)
      : notify_(std::move(notify)) {
    info_.name = kHumanApprovalToolName;
    info_.description = "Waits for a human's decision: resumed with {\"approved\": bool}.";
    info_.kind = ToolKind::kDurable;
    info_.role = ToolRole::kHumanApproval;
  }
  const ToolInfo& info() const override { return info_; }
  void Start(const ToolCall& call, ToolDone /*done*/) override {
    if (notify_) notify_(call);
  }

 private:
  ToolInfo info_;
  std::function<void(const ToolCall&)> notify_;
};

}  // namespace

std::string CapabilitySet::ToString() const {
  std::string out;
  for (const auto& [cap, name] : kCapabilityNames) {
    if (!Has(cap)) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

absl::StatusOr<Capability> ParseCapability(std::string_view name) {
  for (const auto& [cap, cap_name] : kCapabilityNames) {
    if (name == cap_name) return cap;
  }
  return InvalidArgument(
      fmt::format("unknown capability '{}' (want reads-sensitive-data, sees-untrusted-content or "
                  "changes-state)",
                  name));
}

std::shared_ptr<Tool> MakeHostFunctionTool(ToolInfo info, HostFunction fn) {
  return std::make_shared<HostFunctionTool>(std::move(info), std::move(fn));
}

std::shared_ptr<Tool> MakeHumanApprovalTool(std::function<void(const ToolCall&)> notify) {
  return std::make_shared<HumanApprovalTool>(std::move(notify));
}

}  // namespace airlock::interp
