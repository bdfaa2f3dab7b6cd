#include "netproxy/events.h"

#include <ctime>

#include "fmt/format.h"

namespace airlock::netproxy {

bool IsRequestRefusal(std::string_view rule) {
  return rule == kRuleInvalidHost || rule.starts_with(kRuleUnsupportedScheme) ||
         rule == kRuleNotAProxyRequest || rule == kRuleUnsupportedFraming ||
         rule == kRuleTlsUnreadable || rule == kRuleTlsEncryptedHello || rule == kRuleDirectConnect;
}
namespace {

std::string Rfc3339(std::chrono::system_clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

nlohmann::json BlockedJson(const BlockedNetworkEgress& e) {
  return {{"sandbox", e.sandbox.value()},
          {"host", e.host},
          {"resolved_address", e.resolved_address},
          {"port", e.port},
          {"rule", e.rule},
          {"method", e.method},
          {"time", Rfc3339(e.time)}};
}

}  // namespace

Violation ToViolation(const BlockedNetworkEgress& event) {
  // A direct connect's host is its address already.
  const bool address_only = event.resolved_address.empty() || event.rule == kRuleDirectConnect;
  std::string where =
      address_only ? fmt::format("{}:{}", event.host, event.port)
                   : fmt::format("{}:{} ({})", event.host, event.port, event.resolved_address);
  return Violation{"BlockedNetworkEgress",
                   fmt::format("egress to {} blocked by {}", where, event.rule),
                   BlockedJson(event)};
}

nlohmann::json ToJson(const EgressEvent& event) {
  struct Visitor {
    nlohmann::json operator()(const BlockedNetworkEgress& e) const {
      nlohmann::json j = BlockedJson(e);
      j["type"] = "BlockedNetworkEgress";
      return j;
    }
    nlohmann::json operator()(const ConnectionClosed& e) const {
      return {{"type", "ConnectionClosed"},
              {"sandbox", e.sandbox.value()},
              {"host", e.host},
              {"address", e.address},
              {"port", e.port},
              {"method", e.method},
              {"bytes_up", e.bytes_up},
              {"bytes_down", e.bytes_down},
              {"requests", e.requests},
              {"duration_ms", e.duration_ms},
              {"end", e.end}};
    }
    nlohmann::json operator()(const PolicyChanged& e) const {
      return {{"type", "PolicyChanged"},    {"sandbox", e.sandbox.value()},
              {"old_policy", e.old_policy}, {"new_policy", e.new_policy},
              {"loosened", e.loosened},     {"time", Rfc3339(e.time)}};
    }
  };
  return std::visit(Visitor{}, event);
}

void BlockedEventLog::Record(const EgressEvent& event) {
  const auto* blocked = std::get_if<BlockedNetworkEgress>(&event);
  if (blocked == nullptr) return;
  std::lock_guard lock(mu_);
  PerSandbox& s = sandboxes_[blocked->sandbox];
  s.events.push_back(*blocked);
  ++s.next_seq;
  if (s.events.size() > max_) {
    s.events.pop_front();
    ++s.dropped;
  }
}

EventCallback BlockedEventLog::Callback() {
  return [this](const EgressEvent& event) { Record(event); };
}

uint64_t BlockedEventLog::Mark(const SandboxId& sandbox) const {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(sandbox);
  return it == sandboxes_.end() ? 0 : it->second.next_seq;
}

std::vector<BlockedNetworkEgress> BlockedEventLog::Since(const SandboxId& sandbox,
                                                         uint64_t mark) const {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(sandbox);
  if (it == sandboxes_.end()) return {};
  const PerSandbox& s = it->second;
  uint64_t first_seq = s.next_seq - s.events.size();
  size_t skip = mark > first_seq ? static_cast<size_t>(mark - first_seq) : 0;
  if (skip >= s.events.size()) return {};
  return {s.events.begin() + static_cast<std::ptrdiff_t>(skip), s.events.end()};
}

uint64_t BlockedEventLog::Dropped(const SandboxId& sandbox) const {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(sandbox);
  return it == sandboxes_.end() ? 0 : it->second.dropped;
}

void BlockedEventLog::Forget(const SandboxId& sandbox) {
  std::lock_guard lock(mu_);
  sandboxes_.erase(sandbox);
}

}  // namespace airlock::netproxy
