#include "image/internal/manifest.h"

#include <sys/utsname.h>

#include "common/status.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace airlock::image::internal {
namespace {

using Json = nlohmann::json;

absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(fmt::format("{}: not valid JSON", what));
  if (!j.is_object()) return InvalidArgument(fmt::format("{}: not a JSON object", what));
  return j;
}

// Optional fields: absent or null is "", a value of the wrong type is an error.
absl::StatusOr<std::string> OptString(const Json& j, const char* key, std::string_view what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::string();
  if (!it->is_string()) return InvalidArgument(fmt::format("{}.{}: not a string", what, key));
  return it->get<std::string>();
}

absl::StatusOr<std::vector<std::string>> OptStrings(const Json& j, const char* key,
                                                    std::string_view what) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) return InvalidArgument(fmt::format("{}.{}: not an array", what, key));
  for (const Json& v : *it) {
    if (!v.is_string()) {
      return InvalidArgument(fmt::format("{}.{}: an element is not a string", what, key));
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

const Json* Array(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? &*it : nullptr;
}

absl::StatusOr<Descriptor> ParseDescriptor(const Json& j, std::string_view what) {
  if (!j.is_object()) return InvalidArgument(fmt::format("{}: not an object", what));
  Descriptor d;
  ASSIGN_OR_RETURN(d.media_type, OptString(j, "mediaType", what));
  ASSIGN_OR_RETURN(std::string digest, OptString(j, "digest", what));
  ASSIGN_OR_RETURN(d.digest, Digest::Parse(digest), fmt::format("{}.digest", what));
  auto size = j.find("size");
  if (size == j.end() || !size->is_number_integer() || size->get<int64_t>() < 0) {
    return InvalidArgument(fmt::format("{}.size: missing or not a non-negative integer", what));
  }
  d.size = size->get<int64_t>();
  if (auto a = j.find("annotations"); a != j.end() && a->is_object()) {
    for (const auto& [k, v] : a->items()) {
      if (v.is_string()) d.annotations[k] = v.get<std::string>();
    }
  }
  if (auto p = j.find("platform"); p != j.end() && p->is_object()) {
    ASSIGN_OR_RETURN(d.platform.os, OptString(*p, "os", what));
    ASSIGN_OR_RETURN(d.platform.architecture, OptString(*p, "architecture", what));
    ASSIGN_OR_RETURN(d.platform.variant, OptString(*p, "variant", what));
  }
  return d;
}

}  // namespace

bool IsIndexType(std::string_view t) {
  return t == "application/vnd.oci.image.index.v1+json" ||
         t == "application/vnd.docker.distribution.manifest.list.v2+json";
}

bool IsManifestType(std::string_view t) {
  return t == kOciManifestType || t == "application/vnd.docker.distribution.manifest.v2+json";
}

bool IsLayerType(std::string_view t) {
  for (std::string_view base : {"application/vnd.oci.image.layer.v1.tar",
                                "application/vnd.oci.image.layer.nondistributable.v1.tar"}) {
    if (t == base || (t.size() > base.size() && t.substr(0, base.size()) == base &&
                      (t.substr(base.size()) == "+gzip" || t.substr(base.size()) == "+zstd"))) {
      return true;
    }
  }
  return t == "application/vnd.docker.image.rootfs.diff.tar.gzip" ||
         t == "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip";
}

absl::Status CheckLayoutFile(std::string_view json) {
  ASSIGN_OR_RETURN(Json j, ParseJson(json, "oci-layout"));
  ASSIGN_OR_RETURN(std::string version, OptString(j, "imageLayoutVersion", "oci-layout"));
  if (version.substr(0, 2) != "1.") {
    return InvalidArgument(fmt::format("oci-layout: imageLayoutVersion {:?} is not 1.x", version));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Descriptor>> ParseIndex(std::string_view json) {
  ASSIGN_OR_RETURN(Json j, ParseJson(json, "image index"));
  const Json* manifests = Array(j, "manifests");
  if (manifests == nullptr) return InvalidArgument("image index: no \"manifests\" array");
  std::vector<Descriptor> out;
  for (size_t i = 0; i < manifests->size(); ++i) {
    ASSIGN_OR_RETURN(Descriptor d,
                     ParseDescriptor((*manifests)[i], fmt::format("manifests[{}]", i)),
                     "image index");
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<Manifest> ParseManifest(std::string_view json) {
  ASSIGN_OR_RETURN(Json j, ParseJson(json, "image manifest"));
  auto config = j.find("config");
  if (config == j.end()) return InvalidArgument("image manifest: no \"config\"");
  Manifest m;
  ASSIGN_OR_RETURN(m.config, ParseDescriptor(*config, "config"), "image manifest");
  const Json* layers = Array(j, "layers");
  if (layers == nullptr) return InvalidArgument("image manifest: no \"layers\" array");
  for (size_t i = 0; i < layers->size(); ++i) {
    ASSIGN_OR_RETURN(Descriptor d, ParseDescriptor((*layers)[i], fmt::format("layers[{}]", i)),
                     "image manifest");
    if (!IsLayerType(d.media_type)) {
      return InvalidArgument(fmt::format(
          "image manifest: layers[{}]: media type {:?} is not a tar layer (plain, gzip or zstd)", i,
          d.media_type));
    }
    m.layers.push_back(std::move(d));
  }
  return m;
}

absl::StatusOr<ConfigDocument> ParseConfig(std::string_view json) {
  ASSIGN_OR_RETURN(Json j, ParseJson(json, "image config"));
  ConfigDocument doc;
  ImageConfig& c = doc.config;
  ASSIGN_OR_RETURN(c.os, OptString(j, "os", "image config"));
  ASSIGN_OR_RETURN(c.architecture, OptString(j, "architecture", "image config"));
  ASSIGN_OR_RETURN(c.created, OptString(j, "created", "image config"));
  if (auto cfg = j.find("config"); cfg != j.end() && cfg->is_object()) {
    ASSIGN_OR_RETURN(c.env, OptStrings(*cfg, "Env", "image config.config"));
    ASSIGN_OR_RETURN(c.working_dir, OptString(*cfg, "WorkingDir", "image config.config"));
    ASSIGN_OR_RETURN(c.user, OptString(*cfg, "User", "image config.config"));
    ASSIGN_OR_RETURN(c.entrypoint, OptStrings(*cfg, "Entrypoint", "image config.config"));
    ASSIGN_OR_RETURN(c.cmd, OptStrings(*cfg, "Cmd", "image config.config"));
  }
  if (auto rootfs = j.find("rootfs"); rootfs != j.end() && rootfs->is_object()) {
    ASSIGN_OR_RETURN(std::vector<std::string> ids,
                     OptStrings(*rootfs, "diff_ids", "image config.rootfs"));
    for (const std::string& id : ids) {
      ASSIGN_OR_RETURN(Digest d, Digest::Parse(id), "image config.rootfs.diff_ids");
      doc.diff_ids.push_back(std::move(d));
    }
  }
  return doc;
}

absl::StatusOr<std::vector<DockerImage>> ParseDockerManifest(std::string_view json) {
  Json j = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) {
    return InvalidArgument("manifest.json: not a JSON array (of docker save images)");
  }
  std::vector<DockerImage> out;
  for (size_t i = 0; i < j.size(); ++i) {
    std::string what = fmt::format("manifest.json[{}]", i);
    if (!j[i].is_object()) return InvalidArgument(fmt::format("{}: not an object", what));
    DockerImage img;
    ASSIGN_OR_RETURN(img.config, OptString(j[i], "Config", what));
    if (img.config.empty()) return InvalidArgument(fmt::format("{}: no Config", what));
    ASSIGN_OR_RETURN(img.repo_tags, OptStrings(j[i], "RepoTags", what));
    ASSIGN_OR_RETURN(img.layers, OptStrings(j[i], "Layers", what));
    out.push_back(std::move(img));
  }
  return out;
}

std::string CanonicalManifest(const Descriptor& config, const std::vector<Descriptor>& layers) {
  auto descriptor = [](const Descriptor& d) {
    return Json{{"mediaType", d.media_type}, {"digest", d.digest.str()}, {"size", d.size}};
  };
  Json j = {{"schemaVersion", 2}, {"mediaType", kOciManifestType}, {"config", descriptor(config)}};
  Json& arr = j["layers"] = Json::array();
  for (const Descriptor& d : layers) arr.push_back(descriptor(d));
  return j.dump();  // object keys are sorted: the same text every time
}

Platform HostPlatform() {
  Platform p{"linux", "", ""};
  struct utsname u;
  std::string machine = ::uname(&u) == 0 ? u.machine : "";
  if (machine == "x86_64") {
    p.architecture = "amd64";
  } else if (machine == "aarch64") {
    p.architecture = "arm64";
  } else if (machine == "i686" || machine == "i386") {
    p.architecture = "386";
  } else {
    p.architecture = machine;  // riscv64, ppc64le, s390x are spelled alike
  }
  return p;
}

}  // namespace airlock::image::internal
