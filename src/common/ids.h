// Strong identifier types. A SandboxId cannot be passed where a CommandId is expected.
#ifndef AIRLOCK_COMMON_IDS_H_
#define AIRLOCK_COMMON_IDS_H_

#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace airlock {

// Random lowercase hex of `bytes` random bytes (getrandom(2)); never fails on Linux >= 3.17.
std::string RandomHex(size_t bytes);

template <typename Tag>
class StrongId {
 public:
  StrongId() = default;
  explicit StrongId(std::string value) : value_(std::move(value)) {}

  // A fresh id: Tag::kPrefix followed by 12 random hex digits, e.g. "sb-1a2b3c4d5e6f".
  static StrongId New() { return StrongId(std::string(Tag::kPrefix) + RandomHex(6)); }

  const std::string& value() const { return value_; }
  bool empty() const { return value_.empty(); }

  friend bool operator==(const StrongId&, const StrongId&) = default;
  friend auto operator<=>(const StrongId&, const StrongId&) = default;
  friend std::ostream& operator<<(std::ostream& os, const StrongId& id) { return os << id.value_; }
  template <typename H>
  friend H AbslHashValue(H h, const StrongId& id) {
    return H::combine(std::move(h), id.value_);
  }

 private:
  std::string value_;
};

struct SandboxIdTag {
  static constexpr std::string_view kPrefix = "sb-";
};
struct CommandIdTag {
  static constexpr std::string_view kPrefix = "cmd-";
};
struct RunIdTag {
  static constexpr std::string_view kPrefix = "run-";
};
struct ApiKeyIdTag {
  static constexpr std::string_view kPrefix = "ak-";
};
struct ArtifactIdTag {
  static constexpr std::string_view kPrefix = "art-";
};
struct NodeIdTag {
  static constexpr std::string_view kPrefix = "node-";
};
struct InterpSessionIdTag {
  static constexpr std::string_view kPrefix = "is-";
};

using SandboxId = StrongId<SandboxIdTag>;
using CommandId = StrongId<CommandIdTag>;
using RunId = StrongId<RunIdTag>;
using ApiKeyId = StrongId<ApiKeyIdTag>;
using ArtifactId = StrongId<ArtifactIdTag>;
using NodeId = StrongId<NodeIdTag>;
using InterpSessionId = StrongId<InterpSessionIdTag>;

}  // namespace airlock

template <typename Tag>
struct std::hash<airlock::StrongId<Tag>> {
  size_t operator()(const airlock::StrongId<Tag>& id) const {
    return std::hash<std::string>()(id.value());
  }
};

#endif  // AIRLOCK_COMMON_IDS_H_
