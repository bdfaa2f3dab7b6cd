#include "netproxy/policy.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "common/files.h"
#include "common/status.h"
#include "common/text.h"
#include "fmt/format.h"

namespace airlock::netproxy {
namespace {

// kMetadataAddress: one metadata address inside space an operator may open (Alibaba Cloud's in
// 100.64/10, the IPv6 ones of GCP, EKS Pod Identity and Scaleway in fc00::/7, Azure's WireServer
// among public addresses). Never reached, like every metadata range, but an operator may open a
// range around it (100.64.0.0/10 for a CGNAT or tailnet registry, an fd00::/8 network,
// 168.0.0.0/8): the address check refuses it first.
enum class Kind { kMetadata, kMetadataAddress, kPrivateUse, kOther };

DeniedRange Range(std::string_view text, std::string_view what, Kind kind = Kind::kOther) {
  absl::StatusOr<Cidr> cidr = Cidr::Parse(text);
  bool metadata = kind == Kind::kMetadata || kind == Kind::kMetadataAddress;
  return DeniedRange{
      *cidr, text, what, metadata, kind == Kind::kPrivateUse, kind == Kind::kMetadata};
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

// A character RFC 3986 allows raw in a path segment (pchar without ';' and '%'): servers agree
// on what these mean.
bool IsPlainPathChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("-._~!$&'()*+,=:@").find(c) != std::string_view::npos;
}

// A path-restricted rule compares the request's path with its prefixes byte for byte, so the
// path must mean the same to every server behind it. Refused: anything but plain path characters
// and percent-escapes; ';' (Tomcat, Jetty and Spring drop ";params" before resolving "..;");
// escapes that decode to '.', a separator, '%', ';', a control character or broken UTF-8 (a
// server that decodes twice, or leniently, would see another path); dot segments.
bool IsCanonicalPath(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  std::string decoded;
  for (size_t i = 0; i < path.size(); ++i) {
    char c = path[i];
    if (c == '/' || IsPlainPathChar(c)) {
      decoded.push_back(c);
      continue;
    }
    if (c != '%' || i + 2 >= path.size() || HexDigitValue(path[i + 1]) < 0 ||
        HexDigitValue(path[i + 2]) < 0) {
      return false;
    }
    auto byte =
        static_cast<unsigned char>(HexDigitValue(path[i + 1]) * 16 + HexDigitValue(path[i + 2]));
    if (byte < 0x20 || byte == 0x7f ||
        std::string_view("./\\%;?#").find(static_cast<char>(byte)) != std::string_view::npos) {
      return false;
    }
    decoded.push_back(static_cast<char>(byte));
    i += 2;
  }
  if (!IsValidUtf8(decoded)) return false;
  size_t start = 1;
  while (start <= decoded.size()) {
    size_t slash = decoded.find('/', start);
    std::string_view segment = std::string_view(decoded).substr(
        start, slash == std::string::npos ? std::string::npos : slash - start);
    if (segment == "." || segment == "..") return false;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

// "/api" matches "/api", "/api/x", not "/apix"; "/api/" matches "/api/x".
bool PathHasPrefix(std::string_view path, std::string_view prefix) {
  if (!path.starts_with(prefix)) return false;
  if (prefix.ends_with('/') || path.size() == prefix.size()) return true;
  return path[prefix.size()] == '/';
}

template <typename T, typename Pred>
bool AllOf(const std::vector<T>& v, Pred pred) {
  return std::all_of(v.begin(), v.end(), pred);
}

bool PatternCovered(const HostPattern& p, const std::vector<HostPattern>& by) {
  return std::any_of(by.begin(), by.end(), [&](const HostPattern& o) { return p.IsCoveredBy(o); });
}

}  // namespace

std::string_view ProfileName(spec::NetworkProfile profile) { return spec::ToString(profile); }

const std::vector<DeniedRange>& AlwaysDeniedRanges() {
  // Metadata first so that its rule name wins; the fc00::/7 entry would cover fd00:ec2::254 too.
  static const std::vector<DeniedRange> kRanges = {
      // Link-local metadata of every cloud (AWS, GCP, Azure, Oracle, DigitalOcean, Scaleway's
      // IPv4), AWS's IPv6 one, and Azure's host endpoint (WireServer: a public address that the
      // host's firewall lets root reach, and the proxy runs as root).
      Range("169.254.0.0/16", "metadata", Kind::kMetadata),
      Range("fd00:ec2::254/128", "metadata", Kind::kMetadata),
      Range("168.63.129.16/32", "metadata", Kind::kMetadataAddress),
      Range("100.100.100.200/32", "metadata", Kind::kMetadataAddress),  // Alibaba
      Range("fd00:ec2::23/128", "metadata", Kind::kMetadataAddress),    // EKS Pod Identity
      Range("fd20:ce::254/128", "metadata", Kind::kMetadataAddress),    // GCP, IPv6
      Range("fd00:42::42/128", "metadata", Kind::kMetadataAddress),     // Scaleway, IPv6
      Range("0.0.0.0/8", "this-network"),
      Range("10.0.0.0/8", "private", Kind::kPrivateUse),
      Range("100.64.0.0/10", "shared-address-space", Kind::kPrivateUse),
      Range("127.0.0.0/8", "loopback"),
      Range("172.16.0.0/12", "private", Kind::kPrivateUse),
      Range("192.168.0.0/16", "private", Kind::kPrivateUse),
      Range("224.0.0.0/4", "multicast"),
      Range("240.0.0.0/4", "reserved"),
      Range("192.0.0.0/24", "ietf-protocol-assignments"),
      Range("192.88.99.0/24", "6to4-relay"),
      Range("198.18.0.0/15", "benchmarking"),
      Range("::1/128", "loopback"),
      Range("::/96", "unspecified-or-ipv4-compatible"),
      Range("::ffff:0:0:0/96", "ipv4-translated"),
      Range("64:ff9b:1::/48", "local-nat64"),
      Range("100::/64", "discard-only"),
      Range("2001::/32", "teredo"),
      Range("fc00::/7", "unique-local", Kind::kPrivateUse),
      Range("fec0::/10", "site-local"),
      Range("fe80::/10", "link-local"),
      Range("ff00::/8", "multicast"),
  };
  return kRanges;
}

const DeniedRange* MetadataRangeOf(const IpAddress& address) {
  std::vector<IpAddress> views = {address};
  if (std::optional<IpAddress> embedded = address.EmbeddedV4()) views.push_back(*embedded);
  for (const IpAddress& a : views) {
    for (const DeniedRange& r : AlwaysDeniedRanges()) {
      if (r.metadata && r.cidr.Contains(a)) return &r;
    }
  }
  return nullptr;
}

const std::vector<std::string>& DefaultGitProviderHosts() {
  static const std::vector<std::string> kHosts = {
      "github.com",    "codeload.github.com", "gitlab.com",
      "bitbucket.org", "ssh.dev.azure.com",   "dev.azure.com",
  };
  return kHosts;
}

absl::StatusOr<Policy> Policy::Compile(const spec::Network& network, const OperatorPolicy& op) {
  Policy p;
  p.profile_ = network.profile;
  std::vector<std::string> hosts = network.allow_hosts;
  if (p.profile_ == spec::NetworkProfile::kRepoEgress) {
    if (hosts.empty()) hosts.emplace_back(kGitProvidersToken);
    auto token = std::find(hosts.begin(), hosts.end(), kGitProvidersToken);
    if (token != hosts.end()) {
      hosts.erase(token);
      hosts.insert(hosts.end(), DefaultGitProviderHosts().begin(), DefaultGitProviderHosts().end());
    }
  }
  for (const std::string& h : hosts) {
    ASSIGN_OR_RETURN(HostPattern pattern, HostPattern::Parse(h), "network.allowHosts");
    p.allow_.push_back(std::move(pattern));
  }
  if (!network.http_rules.empty() && p.profile_ != spec::NetworkProfile::kRestrictedHttp) {
    return InvalidArgument("network.httpRules: only with the restricted-http profile");
  }
  for (const spec::HttpRule& r : network.http_rules) {
    ASSIGN_OR_RETURN(HostPattern pattern, HostPattern::Parse(r.host), "network.httpRules");
    Rule rule{std::move(pattern), {}, r.path_prefixes};
    for (const std::string& m : r.methods) rule.methods.push_back(Upper(m));
    for (const std::string& prefix : rule.path_prefixes) {
      if (!IsCanonicalPath(prefix)) {
        return InvalidArgument(
            fmt::format("network.httpRules: path prefix \"{}\" is not a canonical path", prefix));
      }
    }
    p.rules_.push_back(std::move(rule));
  }
  for (const std::string& c : network.deny_cidrs) {
    ASSIGN_OR_RETURN(Cidr cidr, Cidr::Parse(c), "network.denyCidrs");
    p.deny_.push_back(cidr);
  }
  for (const std::string& h : op.open_private_hosts) {
    ASSIGN_OR_RETURN(HostPattern pattern, HostPattern::Parse(h), "operator policy: open host");
    p.open_private_hosts_.push_back(std::move(pattern));
  }
  for (const std::string& c : op.open_private_cidrs) {
    ASSIGN_OR_RETURN(Cidr cidr, Cidr::Parse(c), "operator policy: open CIDR");
    for (const DeniedRange& r : AlwaysDeniedRanges()) {
      if (r.refuse_open_overlap && cidr.Overlaps(r.cidr)) {
        return InvalidArgument(fmt::format(
            "operator policy: open CIDR \"{}\" overlaps the metadata range {}, which can never "
            "be opened",
            c, r.text));
      }
    }
    p.open_private_cidrs_.push_back(cidr);
  }
  for (const std::string& c : op.deny_cidrs) {
    ASSIGN_OR_RETURN(Cidr cidr, Cidr::Parse(c), "operator policy: deny CIDR");
    p.operator_deny_.push_back(cidr);
  }
  return p;
}

std::string_view OverrideHeaderOf(const std::vector<std::string_view>& names) {
  static constexpr std::string_view kOverrideHeaders[] = {"x-http-method-override", "x-http-method",
                                                          "x-method-override", "x-original-url",
                                                          "x-rewrite-url"};
  for (std::string_view name : names) {
    for (std::string_view header : kOverrideHeaders) {
      if (absl::EqualsIgnoreCase(absl::string_view(name.data(), name.size()),
                                 absl::string_view(header.data(), header.size()))) {
        return name;
      }
    }
  }
  return {};
}

Decision Policy::CheckRequest(const EgressRequest& request) const {
  const bool tunnel = request.kind == RequestKind::kConnect;
  switch (profile_) {
    case spec::NetworkProfile::kNone:
      return Decision::Block("profile:none");
    case spec::NetworkProfile::kOpen:
      return Decision::Allow();
    case spec::NetworkProfile::kDependencyEgress:
    case spec::NetworkProfile::kRepoEgress:
      break;
    case spec::NetworkProfile::kRestrictedHttp: {
      bool host_matched = false;
      bool method_matched = false;
      bool overridden = false;
      for (const Rule& rule : rules_) {
        if (!rule.host.Matches(request.host, request.port, tunnel)) continue;
        host_matched = true;
        bool unrestricted = rule.methods.empty() && rule.path_prefixes.empty();
        if (tunnel) {
          // Inside a TLS tunnel neither method nor path can be checked.
          if (unrestricted) return Decision::Allow();
          continue;
        }
        // A server that reads the method or path from a header would act on what the rule
        // never saw.
        if (!unrestricted && !request.override_header.empty()) {
          overridden = true;
          continue;
        }
        if (!rule.methods.empty() && std::find(rule.methods.begin(), rule.methods.end(),
                                               request.method) == rule.methods.end()) {
          continue;
        }
        method_matched = true;
        if (rule.path_prefixes.empty()) return Decision::Allow();
        std::string_view path = request.target.substr(0, request.target.find('?'));
        if (!IsCanonicalPath(path)) continue;
        for (const std::string& prefix : rule.path_prefixes) {
          if (PathHasPrefix(path, prefix)) return Decision::Allow();
        }
      }
      for (const HostPattern& pattern : allow_) {
        if (pattern.Matches(request.host, request.port, tunnel)) return Decision::Allow();
      }
      if (!host_matched) return Decision::Block("not-allowlisted");
      if (tunnel) return Decision::Block("restricted-http:connect");
      if (overridden) return Decision::Block("restricted-http:method-override");
      return Decision::Block(method_matched ? "restricted-http:path" : "restricted-http:method");
    }
  }
  for (const HostPattern& pattern : allow_) {
    if (pattern.Matches(request.host, request.port, tunnel)) return Decision::Allow();
  }
  return Decision::Block("not-allowlisted");
}

Decision Policy::CheckAddress(const HostName& host, uint16_t port, const IpAddress& address,
                              bool node_local) const {
  if (const DeniedRange* r = MetadataRangeOf(address)) {
    return Decision::Block(fmt::format("always-denied:{} ({})", r->text, r->what));
  }
  std::vector<IpAddress> views = {address};
  if (std::optional<IpAddress> embedded = address.EmbeddedV4()) views.push_back(*embedded);
  for (const IpAddress& a : views) {
    for (const Cidr& c : deny_) {
      if (c.Contains(a)) return Decision::Block(fmt::format("deny-cidr:{}", c.ToString()));
    }
    for (const Cidr& c : operator_deny_) {
      if (c.Contains(a)) return Decision::Block(fmt::format("operator-deny-cidr:{}", c.ToString()));
    }
  }
  bool host_opened = std::any_of(open_private_hosts_.begin(), open_private_hosts_.end(),
                                 [&](const HostPattern& p) { return p.Matches(host, port); });
  // A name opens private-use space only; loopback, the node's own addresses and the other
  // special ranges take an open CIDR naming them.
  auto opened = [&](const IpAddress& a, bool by_name) {
    return (by_name && host_opened) ||
           std::any_of(open_private_cidrs_.begin(), open_private_cidrs_.end(),
                       [&](const Cidr& c) { return c.Contains(a); });
  };
  for (const IpAddress& a : views) {
    for (const DeniedRange& r : AlwaysDeniedRanges()) {
      if (r.metadata || !r.cidr.Contains(a)) continue;
      if (!opened(a, r.private_use)) {
        return Decision::Block(fmt::format("always-denied:{} ({})", r.text, r.what));
      }
    }
  }
  if (node_local && !opened(address, false)) return Decision::Block("always-denied:node-local");
  return Decision::Allow();
}

bool Policy::RuleCoveredBy(const Rule& rule) const {
  if (PatternCovered(rule.host, allow_)) return true;
  return std::any_of(rules_.begin(), rules_.end(), [&](const Rule& old) {
    if (!rule.host.IsCoveredBy(old.host)) return false;
    bool methods_ok =
        old.methods.empty() ||
        (!rule.methods.empty() && AllOf(rule.methods, [&](const std::string& m) {
          return std::find(old.methods.begin(), old.methods.end(), m) != old.methods.end();
        }));
    bool paths_ok =
        old.path_prefixes.empty() ||
        (!rule.path_prefixes.empty() && AllOf(rule.path_prefixes, [&](const std::string& p) {
          return std::any_of(old.path_prefixes.begin(), old.path_prefixes.end(),
                             [&](const std::string& o) { return PathHasPrefix(p, o); });
        }));
    return methods_ok && paths_ok;
  });
}

bool Policy::IsNoLooserThan(const Policy& old) const {
  using spec::NetworkProfile;
  if (profile_ == NetworkProfile::kNone) return true;
  auto kept = [](const std::vector<Cidr>& old_list, const std::vector<Cidr>& new_list) {
    return AllOf(old_list, [&](const Cidr& c) {
      return std::find(new_list.begin(), new_list.end(), c) != new_list.end();
    });
  };
  bool deny_kept = kept(old.deny_, deny_) && kept(old.operator_deny_, operator_deny_);
  bool operator_narrowed =
      AllOf(open_private_cidrs_,
            [&](const Cidr& c) {
              return std::find(old.open_private_cidrs_.begin(), old.open_private_cidrs_.end(), c) !=
                     old.open_private_cidrs_.end();
            }) &&
      AllOf(open_private_hosts_,
            [&](const HostPattern& h) { return PatternCovered(h, old.open_private_hosts_); });
  if (!deny_kept || !operator_narrowed) return false;
  switch (old.profile_) {
    case NetworkProfile::kNone:
      return false;
    case NetworkProfile::kOpen:
      return true;
    case NetworkProfile::kDependencyEgress:
    case NetworkProfile::kRepoEgress:
    case NetworkProfile::kRestrictedHttp: {
      if (profile_ == NetworkProfile::kOpen) return false;
      if (!AllOf(allow_, [&](const HostPattern& h) { return PatternCovered(h, old.allow_); })) {
        return false;
      }
      return AllOf(rules_, [&](const Rule& r) { return old.RuleCoveredBy(r); });
    }
  }
  return false;
}

nlohmann::json Policy::ToJson() const {
  nlohmann::json j = {{"profile", ProfileName(profile_)}};
  auto patterns = [](const std::vector<HostPattern>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const HostPattern& p : v) a.push_back(p.ToString());
    return a;
  };
  auto cidrs = [](const std::vector<Cidr>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const Cidr& c : v) a.push_back(c.ToString());
    return a;
  };
  j["allow_hosts"] = patterns(allow_);
  nlohmann::json rules = nlohmann::json::array();
  for (const Rule& r : rules_) {
    rules.push_back(
        {{"host", r.host.ToString()}, {"methods", r.methods}, {"path_prefixes", r.path_prefixes}});
  }
  j["http_rules"] = std::move(rules);
  j["deny_cidrs"] = cidrs(deny_);
  j["operator_open_private_hosts"] = patterns(open_private_hosts_);
  j["operator_open_private_cidrs"] = cidrs(open_private_cidrs_);
  j["operator_deny_cidrs"] = cidrs(operator_deny_);
  return j;
}

absl::StatusOr<OperatorPolicy> OperatorPolicyFromJson(const nlohmann::json& j) {
  OperatorPolicy op;
  if (!j.is_object()) return InvalidArgument("operator policy: not a JSON object");
  for (const auto& [key, value] : j.items()) {
    std::vector<std::string>* target = key == "openPrivateHosts"   ? &op.open_private_hosts
                                       : key == "openPrivateCidrs" ? &op.open_private_cidrs
                                       : key == "denyCidrs"        ? &op.deny_cidrs
                                                                   : nullptr;
    if (target == nullptr) {
      return InvalidArgument(fmt::format("operator policy: unknown field \"{}\"", key));
    }
    if (!value.is_array()) {
      return InvalidArgument(fmt::format("operator policy: {} must be a list", key));
    }
    for (const auto& v : value) {
      if (!v.is_string()) {
        return InvalidArgument(fmt::format("operator policy: {} must hold strings", key));
      }
      target->push_back(v.get<std::string>());
    }
  }
  return op;
}

absl::StatusOr<OperatorPolicy> LoadOperatorPolicyFile(const std::string& path) {
  if (path.empty()) return OperatorPolicy{};
  ASSIGN_OR_RETURN(std::string text, ReadFile(path, 1 << 20), path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(fmt::format("{}: not valid JSON", path));
  ASSIGN_OR_RETURN(OperatorPolicy op, OperatorPolicyFromJson(j), path);
  RETURN_IF_ERROR(Policy::Compile(spec::Network{}, op).status(), path);
  return op;
}

nlohmann::json ToJson(const OperatorPolicy& op) {
  return {{"openPrivateHosts", op.open_private_hosts},
          {"openPrivateCidrs", op.open_private_cidrs},
          {"denyCidrs", op.deny_cidrs}};
}

}  // namespace airlock::netproxy
