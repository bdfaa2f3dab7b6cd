// An image's config (Env, WorkingDir, User) applied to the spec document a caller sent, for the
// fields the caller left out: whatever the spec sets wins (docs/images.md).
//
//   json doc = request.spec;  // before spec::ParseSpecJson
//   RETURN_IF_ERROR(ApplyImageConfig(info.config, store.RootfsPath(info.digest), &doc));
//
// - Env "NAME=value" entries are added to doc.env for names the spec does not set.
// - WorkingDir becomes doc.workdir when the spec has none.
// - User becomes doc.user when the spec has none: "uid", "uid:gid", "name" or "name:group", names
//   looked up in the image's own etc/passwd and etc/group (resolved beneath `rootfs`, never
//   through a symlink that leaves it). A user without a group takes the passwd entry's group, or
//   the uid for a bare number. Root ("0", "root") is left out: sandboxes never run as root, and
//   the spec's default user applies.
// Errors are InvalidArgument naming the config field ("image config User \"x\": no such user in
// the image's etc/passwd"); the document is left unchanged on error.
#ifndef AIRLOCK_DAEMON_IMAGE_CONFIG_H_
#define AIRLOCK_DAEMON_IMAGE_CONFIG_H_

#include <string>

#include "absl/status/status.h"
#include "image/image_store.h"
#include "nlohmann/json.hpp"

namespace airlock::daemon {

absl::Status ApplyImageConfig(const image::ImageConfig& config, const std::string& rootfs,
                              nlohmann::json* doc);

}  // namespace airlock::daemon

#endif  // AIRLOCK_DAEMON_IMAGE_CONFIG_H_
