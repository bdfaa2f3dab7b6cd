#include "netproxy/events.h"

#include <algorithm>
#include <ctime>
#include <iterator>
#include <optional>
#include <set>

#include "fmt/format.h"
#include "netproxy/address.h"
#include "netproxy/policy.h"

namespace airlock::netproxy {

bool IsMetadataRefusal(const BlockedNetworkEgress& e) {
  if (e.rule == kRuleDirectConnect) {
    std::optional<IpAddress> address = IpAddress::Parse(e.resolved_address);
    return address && MetadataRangeOf(*address) != nullptr;
  }
  return e.rule.starts_with("always-denied:") && e.rule.ends_with("(metadata)");
}

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

bool BlockedEventLog::Budget::Take(std::chrono::system_clock::time_point now) {
  if (last != std::chrono::system_clock::time_point{} && now > last) {
    double seconds = std::chrono::duration<double>(now - last).count();
    tokens = std::min(kBurstPerClient, tokens + seconds * kRefillPerSecond);
  }
  if (now > last) last = now;
  if (tokens < 1) return false;
  tokens -= 1;
  return true;
}

std::vector<Violation> BlockedViolations(const std::vector<BlockedNetworkEgress>& blocked,
                                         uint64_t suppressed, uint64_t dropped, size_t max) {
  auto rank = [](const BlockedNetworkEgress* e) {
    if (IsMetadataRefusal(*e)) return 0;
    bool by_address = e->rule.starts_with("always-denied:") || e->rule.starts_with("deny-cidr:") ||
                      e->rule.starts_with("operator-deny-cidr:");
    return by_address ? 1 : 2;
  };
  std::vector<const BlockedNetworkEgress*> distinct;
  std::set<std::string> seen;
  for (const BlockedNetworkEgress& e : blocked) {
    std::string key =
        fmt::format("{}\n{}\n{}\n{}\n{}", e.rule, e.method, e.host, e.resolved_address, e.port);
    if (seen.insert(std::move(key)).second) distinct.push_back(&e);
  }
  std::stable_sort(distinct.begin(), distinct.end(),
                   [&](const BlockedNetworkEgress* a, const BlockedNetworkEgress* b) {
                     return rank(a) < rank(b);
                   });
  std::vector<Violation> out;
  for (size_t i = 0; i < distinct.size() && i < max; ++i) out.push_back(ToViolation(*distinct[i]));
  uint64_t omitted = suppressed + (blocked.size() - std::min(blocked.size(), out.size()));
  if (omitted > 0 || dropped > 0) {
    std::string detail =
        fmt::format("{} more blocked attempts not listed (repeats, or past the limits)", omitted);
    if (dropped > 0) {
      detail += fmt::format("; the sandbox's log dropped {} of its oldest meanwhile", dropped);
    }
    out.push_back(Violation{"BlockedNetworkEgressOmitted",
                            std::move(detail),
                            {{"omitted", omitted}, {"dropped_from_log", dropped}}});
  }
  return out;
}

void BlockedEventLog::Record(const EgressEvent& event) {
  constexpr auto kRepeatInterval = std::chrono::seconds(1);
  constexpr size_t kMaxRemembered = 4096;  // keys and clients a sandbox remembers, then forgets
  const auto* blocked = std::get_if<BlockedNetworkEgress>(&event);
  if (blocked == nullptr) return;
  std::lock_guard lock(mu_);
  PerSandbox& s = sandboxes_[blocked->sandbox];
  auto known = s.clients.find(blocked->client);
  PerClient& client = known != s.clients.end()         ? known->second
                      : s.clients.size() < kMaxClients ? s.clients[blocked->client]
                                                       : s.overflow;
  if (s.recent.size() >= kMaxRemembered) s.recent.clear();  // forgets repeats only
  std::string key =
      fmt::format("{}\n{}\n{}\n{}\n{}\n{}", blocked->client, blocked->rule, blocked->method,
                  blocked->host, blocked->resolved_address, blocked->port);
  auto [recent, added] = s.recent.try_emplace(std::move(key), blocked->time);
  if (!added) {
    auto since = blocked->time - recent->second;
    if (since < kRepeatInterval && since > -kRepeatInterval) {
      ++client.suppressed;
      return;
    }
    recent->second = blocked->time;
  }
  const bool metadata = IsMetadataRefusal(*blocked);
  Budget& budget = metadata ? client.metadata : client.general;
  if (!budget.Take(blocked->time)) {
    ++client.suppressed;
    return;
  }
  std::deque<Entry>& log = metadata ? s.metadata : s.events;
  log.emplace_back(s.next_seq++, *blocked);
  if (log.size() > max_) {
    log.pop_front();
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
  // Both logs are in sequence order: the events of each from `mark` on, merged.
  auto from = [mark](const std::deque<Entry>& log) {
    return std::lower_bound(log.begin(), log.end(), mark,
                            [](const Entry& e, uint64_t seq) { return e.first < seq; });
  };
  std::vector<Entry> merged;
  std::merge(from(s.events), s.events.end(), from(s.metadata), s.metadata.end(),
             std::back_inserter(merged),
             [](const Entry& a, const Entry& b) { return a.first < b.first; });
  std::vector<BlockedNetworkEgress> out;
  out.reserve(merged.size());
  for (Entry& e : merged) out.push_back(std::move(e.second));
  return out;
}

uint64_t BlockedEventLog::Dropped(const SandboxId& sandbox) const {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(sandbox);
  return it == sandboxes_.end() ? 0 : it->second.dropped;
}

uint64_t BlockedEventLog::Suppressed(const SandboxId& sandbox, const std::string& client) const {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(sandbox);
  if (it == sandboxes_.end()) return 0;
  auto c = it->second.clients.find(client);
  return c == it->second.clients.end() ? it->second.overflow.suppressed : c->second.suppressed;
}

void BlockedEventLog::Forget(const SandboxId& sandbox) {
  std::lock_guard lock(mu_);
  sandboxes_.erase(sandbox);
}

}  // namespace airlock::netproxy
