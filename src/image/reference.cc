#include "image/reference.h"

#include "common/status.h"
#include "fmt/format.h"

namespace airlock::image {
namespace {

constexpr size_t kMaxReference = 255;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

// A path component of a repository name: lowercase alphanumerics joined by ".", "_", "__" or
// runs of "-".
bool IsNameComponent(std::string_view c) {
  if (c.empty() || !IsLowerAlnum(c.front()) || !IsLowerAlnum(c.back())) return false;
  for (size_t i = 0; i < c.size(); ++i) {
    if (IsLowerAlnum(c[i]) || c[i] == '-') continue;
    if (c[i] == '.' || c[i] == '_') {
      if (c[i] == '_' && c[i + 1] == '_') ++i;
      if (!IsLowerAlnum(c[i + 1])) return false;
      continue;
    }
    return false;
  }
  return true;
}

// A registry host: a DNS name or address with an optional port.
bool IsHost(std::string_view h) {
  if (h.empty()) return false;
  size_t colon = h.rfind(':');
  if (colon != std::string_view::npos) {
    std::string_view port = h.substr(colon + 1);
    if (port.empty() || port.size() > 5) return false;
    for (char c : port) {
      if (c < '0' || c > '9') return false;
    }
    h = h.substr(0, colon);
  }
  if (h.empty() || h.front() == '-' || h.front() == '.' || h.back() == '.') return false;
  for (char c : h) {
    if (!(IsAlnum(c) || c == '.' || c == '-')) return false;
  }
  return true;
}

bool IsTag(std::string_view t) {
  if (t.empty() || t.size() > 128 || !(IsAlnum(t[0]) || t[0] == '_')) return false;
  for (char c : t) {
    if (!(IsAlnum(c) || c == '_' || c == '.' || c == '-')) return false;
  }
  return true;
}

absl::Status Bad(std::string_view text) {
  return InvalidArgument(fmt::format(
      "{:?} is not an image reference (sha256:<64 hex> or [registry/]name[:tag][@sha256:<64 hex>])",
      text));
}

// "name[:tag]" -> normalized "name:tag".
absl::StatusOr<std::string> NameAndTag(std::string_view full, std::string_view text) {
  std::string_view name = full;
  std::string_view tag = "latest";
  size_t colon = full.rfind(':');
  size_t slash = full.rfind('/');
  if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
    name = full.substr(0, colon);
    tag = full.substr(colon + 1);
    if (!IsTag(tag)) return Bad(text);
  }
  std::string_view rest = name;
  size_t first = rest.find('/');
  if (first != std::string_view::npos) {
    std::string_view host = rest.substr(0, first);
    if (host.find_first_of(".:") != std::string_view::npos || host == "localhost") {
      if (!IsHost(host)) return Bad(text);
      rest = rest.substr(first + 1);
    }
  }
  size_t start = 0;
  while (true) {
    size_t next = rest.find('/', start);
    if (!IsNameComponent(
            rest.substr(start, next == std::string_view::npos ? next : next - start))) {
      return Bad(text);
    }
    if (next == std::string_view::npos) break;
    start = next + 1;
  }
  for (std::string_view prefix : {"docker.io/library/", "docker.io/"}) {
    if (name.substr(0, prefix.size()) == prefix && name.size() > prefix.size()) {
      name = name.substr(prefix.size());
      break;
    }
  }
  return fmt::format("{}:{}", name, tag);
}

}  // namespace

absl::StatusOr<Reference> ParseReference(std::string_view text) {
  if (text.empty()) return InvalidArgument("empty image reference");
  if (text.size() > kMaxReference) {
    return InvalidArgument(fmt::format("image reference is {} characters; the limit is {}",
                                       text.size(), kMaxReference));
  }
  Reference ref;
  if (text.substr(0, 7) == "sha256:") {
    ASSIGN_OR_RETURN(ref.digest, Digest::Parse(text));
    return ref;
  }
  std::string_view name = text;
  if (size_t at = text.find('@'); at != std::string_view::npos) {
    ASSIGN_OR_RETURN(ref.digest, Digest::Parse(text.substr(at + 1)),
                     fmt::format("image reference {:?}", text));
    name = text.substr(0, at);
  }
  ASSIGN_OR_RETURN(ref.tag, NameAndTag(name, text));
  return ref;
}

absl::StatusOr<std::string> NormalizeTag(std::string_view text) {
  if (text.empty() || text.size() > kMaxReference || text.find('@') != std::string_view::npos ||
      text.substr(0, 7) == "sha256:") {
    return InvalidArgument(fmt::format("{:?} is not a tag ([registry/]name[:tag])", text));
  }
  return NameAndTag(text, text);
}

}  // namespace airlock::image
