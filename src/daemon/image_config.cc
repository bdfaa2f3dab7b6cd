#include "daemon/image_config.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"

namespace airlock::daemon {
namespace {

using nlohmann::json;

struct Ids {
  uint32_t uid = 0;
  std::optional<uint32_t> gid;
};

// The id of `name` in an etc/passwd or etc/group text: the third field of its line, and for
// passwd the fourth (the primary group) in *group.
// (Debian's abseil has its own string_view type, hence absl::string_view here.)
std::optional<uint32_t> LookUp(absl::string_view text, absl::string_view name,
                               std::optional<uint32_t>* group = nullptr) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ':');
    uint32_t id = 0;
    if (f.size() < 3 || f[0] != name || !absl::SimpleAtoi(f[2], &id)) continue;
    uint32_t gid = 0;
    if (group != nullptr && f.size() > 3 && absl::SimpleAtoi(f[3], &gid)) *group = gid;
    return id;
  }
  return std::nullopt;
}

absl::StatusOr<Ids> ResolveUser(const std::string& user, const std::string& rootfs) {
  auto fail = [&](const char* why) {
    return InvalidArgument(fmt::format("image config User \"{}\": {}", user, why));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(user, absl::MaxSplits(':', 1));
  Ids ids;
  std::optional<uint32_t> passwd_group;
  if (parts[0] == "root") {
    ids.uid = 0;
  } else if (!absl::SimpleAtoi(parts[0], &ids.uid)) {
    absl::StatusOr<std::string> passwd = ReadFileInRoot(rootfs, "etc/passwd");
    if (!passwd.ok()) return fail("a user name, and the image has no readable etc/passwd");
    std::optional<uint32_t> uid = LookUp(*passwd, parts[0], &passwd_group);
    if (!uid) return fail("no such user in the image's etc/passwd");
    ids.uid = *uid;
  }
  if (parts.size() == 2) {
    uint32_t gid = 0;
    if (absl::SimpleAtoi(parts[1], &gid)) {
      ids.gid = gid;
    } else {
      absl::StatusOr<std::string> group = ReadFileInRoot(rootfs, "etc/group");
      if (!group.ok()) return fail("a group name, and the image has no readable etc/group");
      ids.gid = LookUp(*group, parts[1]);
      if (!ids.gid) return fail("no such group in the image's etc/group");
    }
  } else {
    ids.gid = passwd_group;
  }
  return ids;
}

}  // namespace

absl::Status ApplyImageConfig(const image::ImageConfig& config, const std::string& rootfs,
                              json* doc) {
  json out = *doc;
  if (!config.env.empty()) {
    json env = out.value("env", json::object());
    if (!env.is_object()) return absl::OkStatus();  // the spec's own error, reported by its parser
    for (const std::string& entry : config.env) {
      size_t eq = entry.find('=');
      if (eq == std::string::npos || eq == 0) {
        return InvalidArgument(
            fmt::format("image config Env \"{}\": not NAME=value", entry.substr(0, 64)));
      }
      std::string name = entry.substr(0, eq);
      if (!env.contains(name)) env[name] = entry.substr(eq + 1);
    }
    out["env"] = std::move(env);
  }
  if (!config.working_dir.empty() && !out.contains("workdir")) {
    out["workdir"] = config.working_dir;
  }
  if (!config.user.empty() && !out.contains("user")) {
    ASSIGN_OR_RETURN(Ids ids, ResolveUser(config.user, rootfs));
    if (ids.uid != 0) {
      out["user"] = {{"uid", ids.uid}, {"gid", ids.gid.value_or(ids.uid)}};
    }
  }
  *doc = std::move(out);
  return absl::OkStatus();
}

}  // namespace airlock::daemon
