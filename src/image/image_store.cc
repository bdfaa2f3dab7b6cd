#include "image/image_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <set>

#include "common/files.h"
#include "common/ids.h"
#include "common/logging.h"
#include "common/sha256.h"
#include "common/status.h"
#include "fmt/format.h"
#include "image/internal/file_lock.h"
#include "image/internal/manifest.h"
#include "image/internal/unpack.h"
#include "image/reference.h"
#include "nlohmann/json.hpp"
#include "pathguard/path_guard.h"

namespace airlock::image {
namespace {

using internal::ConfigDocument;
using internal::Descriptor;
using internal::FileLock;
using Json = nlohmann::json;
using Stage = ImportProgress::Stage;

absl::Status DataLoss(std::string_view msg) { return absl::DataLossError(std::string(msg)); }

const Logger& Log() {
  static const Logger& log = GetLogger("image");
  return log;
}

constexpr size_t kHashBlock = 1 << 20;
constexpr int64_t kIndexMaxBytes = 64 << 20;
// A work directory nobody holds a lock on is stale only once it is this old: a new one is
// created a moment before its owner locks it.
constexpr time_t kStaleWorkSeconds = 60;
// Tags one owner may have over all its images: the index every owner shares stays small.
constexpr size_t kMaxTagsPerOwner = 4096;

// Who holds an image (kNodeImages, a key's id), with when each imported it (unix seconds).
using Owners = std::map<std::string, int64_t, std::less<>>;

// What index.json keeps per image.
struct Record {
  Digest config;
  std::vector<Digest> layers;
  Owners owners;
  std::map<std::string, std::vector<std::string>> tags;  // owner -> its tags, sorted
  int64_t unpacked_bytes = 0;
  int64_t blob_bytes = 0;
  int64_t entries = 0;
  int64_t skipped = 0;
};
using Index = std::map<Digest, Record>;

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

absl::StatusOr<Index> ParseIndexFile(std::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return DataLoss("not a JSON object");
  Index index;
  const int64_t version = j.value("version", int64_t{1});
  auto images = j.find("images");
  if (images == j.end()) return index;
  if (!images->is_object()) return DataLoss("images: not an object");
  auto digest = [](const Json& v) -> absl::StatusOr<Digest> {
    if (!v.is_string()) return DataLoss("a digest is not a string");
    return Digest::Parse(v.get<std::string>());
  };
  auto integer = [](const Json& v, const char* key) -> int64_t {
    auto it = v.find(key);
    return it != v.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  for (const auto& [key, v] : images->items()) {
    ASSIGN_OR_RETURN(Digest d, Digest::Parse(key), "images");
    if (!v.is_object()) return DataLoss(fmt::format("images.{}: not an object", key));
    Record r;
    ASSIGN_OR_RETURN(r.config, digest(v.value("config", Json())), fmt::format("images.{}", key));
    for (const Json& l : v.value("layers", Json::array())) {
      ASSIGN_OR_RETURN(Digest ld, digest(l), fmt::format("images.{}.layers", key));
      r.layers.push_back(std::move(ld));
    }
    auto strings = [](const Json& list) {
      std::vector<std::string> out;
      if (!list.is_array()) return out;
      for (const Json& t : list) {
        if (t.is_string()) out.push_back(t.get<std::string>());
      }
      return out;
    };
    if (version < 2) {
      // Before owners, every image was the node's and its tags were one list.
      r.owners[std::string(kNodeImages)] = integer(v, "imported");
      r.tags[std::string(kNodeImages)] = strings(v.value("tags", Json::array()));
    } else {
      Json owners = v.value("owners", Json::object());
      if (!owners.is_object()) return DataLoss(fmt::format("images.{}.owners: not an object", key));
      for (const auto& [owner, when] : owners.items()) {
        r.owners[owner] = when.is_number_integer() ? when.get<int64_t>() : 0;
      }
      Json tags = v.value("tags", Json::object());
      if (!tags.is_object()) return DataLoss(fmt::format("images.{}.tags: not an object", key));
      for (const auto& [owner, list] : tags.items()) r.tags[owner] = strings(list);
    }
    r.unpacked_bytes = integer(v, "unpacked_bytes");
    r.blob_bytes = integer(v, "blob_bytes");
    r.entries = integer(v, "entries");
    r.skipped = integer(v, "skipped_entries");
    index.emplace(std::move(d), std::move(r));
  }
  return index;
}

std::string FormatIndex(const Index& index) {
  Json images = Json::object();
  for (const auto& [d, r] : index) {
    Json layers = Json::array();
    for (const Digest& l : r.layers) layers.push_back(l.str());
    Json tags = Json::object();
    for (const auto& [owner, list] : r.tags) {
      if (!list.empty()) tags[owner] = list;
    }
    images[d.str()] = {{"config", r.config.str()},
                       {"layers", layers},
                       {"owners", r.owners},
                       {"tags", tags},
                       {"unpacked_bytes", r.unpacked_bytes},
                       {"blob_bytes", r.blob_bytes},
                       {"entries", r.entries},
                       {"skipped_entries", r.skipped}};
  }
  return Json{{"version", 2}, {"images", images}}.dump(2) + "\n";
}

absl::StatusOr<std::string> ReadBounded(int fd, int64_t max, std::string_view what) {
  std::string out;
  char buf[64 << 10];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, fmt::format("read {}", what));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(out.size()) + n > max) {
      return ResourceExhausted(fmt::format("{} is larger than {} bytes", what, max));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

absl::Status CheckPlatform(const ImageConfig& c, const Digest& digest) {
  internal::Platform host = internal::HostPlatform();
  if ((!c.os.empty() && c.os != host.os) ||
      (!c.architecture.empty() && c.architecture != host.architecture)) {
    return FailedPrecondition(fmt::format("image {} is for {}/{}; this host runs {}/{}",
                                          digest.str(), c.os, c.architecture, host.os,
                                          host.architecture));
  }
  return absl::OkStatus();
}

// A private directory under tmp/ for one import or removal, locked while its owner lives and
// removed with everything in it when the owner is done (or by the next Open after a crash).
class WorkDir {
 public:
  static absl::StatusOr<WorkDir> Create(const std::string& tmp, std::string_view kind) {
    std::string path = fmt::format("{}/{}-{}", tmp, kind, RandomHex(8));
    if (::mkdir(path.c_str(), 0700) != 0) return ErrnoStatus(errno, fmt::format("mkdir {}", path));
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return ErrnoStatus(errno, fmt::format("open {}", path));
    ASSIGN_OR_RETURN(FileLock lock, FileLock::TryLock(std::move(fd)), fmt::format("lock {}", path));
    return WorkDir(std::move(path), std::move(lock));
  }
  WorkDir(WorkDir&& other) noexcept
      : path_(std::exchange(other.path_, "")), lock_(std::move(other.lock_)) {}
  WorkDir& operator=(WorkDir&&) = delete;
  ~WorkDir() {
    if (path_.empty()) return;
    if (absl::Status s = RemoveTree(path_); !s.ok()) {
      Log().Warn("could not remove a work directory", {{"path", path_}, {"error", Message(s)}});
    }
  }
  const std::string& path() const { return path_; }

 private:
  WorkDir(std::string path, FileLock lock) : path_(std::move(path)), lock_(std::move(lock)) {}
  std::string path_;
  std::optional<FileLock> lock_;
};

struct Blob {
  Digest digest;
  int64_t size = 0;
};

// One image found in the source, its blobs verified and waiting in the work directory (or
// already in the store).
struct Planned {
  Digest digest;
  std::string manifest;
  Blob config;
  ConfigDocument config_doc;
  std::vector<Blob> layers;
  std::set<std::string> tags;
};

// Reads one import source (an OCI layout or an extracted docker save archive) and verifies
// what it takes from it.
class ImportJob {
 public:
  // `known_layers`: the layers of the images the importing owner sees, which need not be read
  // from the archive again.
  ImportJob(const ImageStoreOptions& store, const std::string& work, PathGuard source, bool staged,
            const ImportOptions& options, std::set<Digest> known_layers)
      : store_(store),
        work_(work),
        source_(std::move(source)),
        staged_(staged),
        options_(options),
        known_layers_(std::move(known_layers)) {}

  absl::StatusOr<std::vector<Planned>> Plan() {
    std::vector<Planned> plans;
    if (source_.Stat("oci-layout").ok()) {
      RETURN_IF_ERROR(PlanOci(&plans), "OCI image layout");
    } else if (source_.Stat("manifest.json").ok()) {
      RETURN_IF_ERROR(PlanDocker(&plans), "docker save archive");
    } else {
      return InvalidArgument(
          "neither an OCI image layout (no oci-layout file) nor a docker save archive (no "
          "manifest.json)");
    }
    return plans;
  }

  std::string BlobPath(const Digest& d) const {
    std::string work = fmt::format("{}/blobs/{}", work_, d.hex());
    return Exists(work) ? work : StoreBlobPath(d);
  }
  std::string WorkBlobPath(const Digest& d) const {
    return fmt::format("{}/blobs/{}", work_, d.hex());
  }
  std::string StoreBlobPath(const Digest& d) const {
    return fmt::format("{}/blobs/sha256/{}", store_.dir, d.hex());
  }

 private:
  static std::string BlobName(const Digest& d) { return fmt::format("blobs/sha256/{}", d.hex()); }

  absl::Status PlanOci(std::vector<Planned>* plans) {
    ASSIGN_OR_RETURN(std::string layout, ReadSourceFile("oci-layout"));
    RETURN_IF_ERROR(internal::CheckLayoutFile(layout));
    ASSIGN_OR_RETURN(std::string index, ReadSourceFile("index.json"));
    ASSIGN_OR_RETURN(std::vector<Descriptor> manifests, internal::ParseIndex(index), "index.json");
    std::vector<std::string> other_platforms;
    for (const Descriptor& d : manifests) {
      RETURN_IF_ERROR(Visit(d, 0, plans, &other_platforms));
    }
    if (plans->empty()) {
      internal::Platform host = internal::HostPlatform();
      return FailedPrecondition(fmt::format(
          "no image for {}/{} in the layout{}", host.os, host.architecture,
          other_platforms.empty() ? std::string()
                                  : fmt::format(" (it has {})", fmt::join(other_platforms, ", "))));
    }
    return absl::OkStatus();
  }

  absl::Status Visit(const Descriptor& d, int depth, std::vector<Planned>* plans,
                     std::vector<std::string>* other_platforms) {
    internal::Platform host = internal::HostPlatform();
    if (!d.platform.os.empty() &&
        (d.platform.os != host.os ||
         (!d.platform.architecture.empty() && d.platform.architecture != host.architecture))) {
      other_platforms->push_back(fmt::format("{}/{}", d.platform.os, d.platform.architecture));
      return absl::OkStatus();
    }
    if (internal::IsIndexType(d.media_type)) {
      if (depth >= 2) return InvalidArgument("image indexes nested more than two deep");
      ASSIGN_OR_RETURN(std::string json, ReadBlob(d, /*keep=*/false));
      ASSIGN_OR_RETURN(std::vector<Descriptor> children, internal::ParseIndex(json),
                       fmt::format("index {}", d.digest.str()));
      for (const Descriptor& c : children)
        RETURN_IF_ERROR(Visit(c, depth + 1, plans, other_platforms));
      return absl::OkStatus();
    }
    if (!internal::IsManifestType(d.media_type)) {
      Log().Info("skipping an index entry that is not an image",
                 {{"media_type", d.media_type}, {"digest", d.digest.str()}});
      return absl::OkStatus();
    }
    for (Planned& p : *plans) {
      if (p.digest == d.digest) {  // listed twice, under two names
        AddTags(d.annotations, &p.tags);
        return absl::OkStatus();
      }
    }
    Planned p;
    p.digest = d.digest;
    RETURN_IF_ERROR(PlanManifest(d, &p), fmt::format("image {}", d.digest.str()));
    plans->push_back(std::move(p));
    return absl::OkStatus();
  }

  absl::Status PlanManifest(const Descriptor& d, Planned* p) {
    ASSIGN_OR_RETURN(p->manifest, ReadBlob(d, /*keep=*/true));
    ASSIGN_OR_RETURN(internal::Manifest m, internal::ParseManifest(p->manifest));
    ASSIGN_OR_RETURN(std::string config, ReadBlob(m.config, /*keep=*/true));
    ASSIGN_OR_RETURN(p->config_doc, internal::ParseConfig(config),
                     fmt::format("config {}", m.config.digest.str()));
    RETURN_IF_ERROR(CheckPlatform(p->config_doc.config, d.digest));
    p->config = {m.config.digest, m.config.size};
    for (const Descriptor& l : m.layers) {
      ASSIGN_OR_RETURN(Blob b, Ingest(BlobName(l.digest), &l));
      p->layers.push_back(b);
    }
    AddTags(d.annotations, &p->tags);
    return absl::OkStatus();
  }

  // Tags from an index entry's annotations: containerd's full name, or an OCI ref.name that is a
  // whole reference (a bare "1.0" names no repository, so it makes no tag).
  static void AddTags(const std::map<std::string, std::string>& annotations,
                      std::set<std::string>* tags) {
    for (const char* key : {"io.containerd.image.name", "org.opencontainers.image.ref.name"}) {
      auto it = annotations.find(key);
      if (it == annotations.end()) continue;
      if (std::string_view(key) != "io.containerd.image.name" &&
          it->second.find_first_of(":/") == std::string::npos) {
        continue;
      }
      absl::StatusOr<std::string> tag = NormalizeTag(it->second);
      if (tag.ok()) {
        tags->insert(*tag);
      } else {
        Log().Warn("ignoring an image name that is not a tag", {{"name", it->second}});
      }
    }
  }

  absl::Status PlanDocker(std::vector<Planned>* plans) {
    ASSIGN_OR_RETURN(std::string text, ReadSourceFile("manifest.json"));
    ASSIGN_OR_RETURN(std::vector<internal::DockerImage> images,
                     internal::ParseDockerManifest(text));
    if (images.empty()) return InvalidArgument("manifest.json lists no image");
    for (const internal::DockerImage& img : images) {
      Planned p;
      RETURN_IF_ERROR(PlanDockerImage(img, &p), fmt::format("image config {}", img.config));
      auto same = std::find_if(plans->begin(), plans->end(),
                               [&](const Planned& q) { return q.digest == p.digest; });
      if (same != plans->end()) {
        same->tags.insert(p.tags.begin(), p.tags.end());
      } else {
        plans->push_back(std::move(p));
      }
    }
    return absl::OkStatus();
  }

  absl::Status PlanDockerImage(const internal::DockerImage& img, Planned* p) {
    ASSIGN_OR_RETURN(std::string config, ReadSourceFile(img.config));
    ASSIGN_OR_RETURN(p->config, KeepSmall(config));
    // docker names the config after its digest ("<hex>.json" or "blobs/sha256/<hex>").
    std::string_view base = img.config;
    base = base.substr(base.rfind('/') == std::string_view::npos ? 0 : base.rfind('/') + 1);
    if (base.size() > 5 && base.substr(base.size() - 5) == ".json") {
      base = base.substr(0, base.size() - 5);
    }
    if (Digest::IsHex64(base) && base != p->config.digest.hex()) {
      return DataLoss(fmt::format("content has digest {}, not the sha256:{} its name says",
                                  p->config.digest.str(), base));
    }
    ASSIGN_OR_RETURN(p->config_doc, internal::ParseConfig(config));
    RETURN_IF_ERROR(CheckPlatform(p->config_doc.config, p->config.digest));
    const std::vector<Digest>& diff_ids = p->config_doc.diff_ids;
    if (diff_ids.size() != img.layers.size()) {
      return InvalidArgument(fmt::format("manifest.json lists {} layers, the config {}",
                                         img.layers.size(), diff_ids.size()));
    }
    std::vector<Descriptor> layers;
    for (size_t i = 0; i < img.layers.size(); ++i) {
      ASSIGN_OR_RETURN(Blob b, Ingest(img.layers[i], nullptr));
      // docker save writes layers uncompressed: their digests are the config's diff_ids.
      if (b.digest != diff_ids[i]) {
        return DataLoss(fmt::format("layer {} has digest {}, but the config lists {}",
                                    img.layers[i], b.digest.str(), diff_ids[i].str()));
      }
      p->layers.push_back(b);
      layers.push_back({std::string(internal::kOciLayerType), b.digest, b.size, {}, {}});
    }
    p->manifest = internal::CanonicalManifest(
        {std::string(internal::kOciConfigType), p->config.digest, p->config.size, {}, {}}, layers);
    ASSIGN_OR_RETURN(Blob m, KeepSmall(p->manifest));
    p->digest = m.digest;
    for (const std::string& t : img.repo_tags) {
      absl::StatusOr<std::string> tag = NormalizeTag(t);
      if (!tag.ok()) return Annotate(tag.status(), "RepoTags");
      p->tags.insert(*tag);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ReadSourceFile(const std::string& name) {
    ASSIGN_OR_RETURN(UniqueFd fd, source_.OpenPath(name, O_RDONLY));
    return ReadBounded(fd.get(), store_.limits.max_json_bytes, name);
  }

  // A JSON blob named by a descriptor: read, verified, and kept for the store when `keep`.
  absl::StatusOr<std::string> ReadBlob(const Descriptor& d, bool keep) {
    std::string name = BlobName(d.digest);
    if (d.size > store_.limits.max_json_bytes) {
      return ResourceExhausted(fmt::format("blob {} is {} bytes; JSON documents are limited to {}",
                                           name, d.size, store_.limits.max_json_bytes));
    }
    ASSIGN_OR_RETURN(std::string text, ReadSourceFile(name));
    std::string actual = Sha256Hex(text);
    if (actual != d.digest.hex()) {
      return DataLoss(fmt::format("blob {}: content has digest sha256:{}, not the {} named for it",
                                  name, actual, d.digest.str()));
    }
    if (static_cast<int64_t>(text.size()) != d.size) {
      return DataLoss(fmt::format("blob {}: {} bytes, not the {} its descriptor says", name,
                                  text.size(), d.size));
    }
    if (keep) RETURN_IF_ERROR(KeepSmall(text).status());
    return text;
  }

  // Writes a small blob into the work directory unless the store has it.
  absl::StatusOr<Blob> KeepSmall(std::string_view content) {
    ASSIGN_OR_RETURN(Digest d, Digest::FromHex(Sha256Hex(content)));
    Blob b{d, static_cast<int64_t>(content.size())};
    if (!Exists(StoreBlobPath(d)) && !Exists(WorkBlobPath(d))) {
      RETURN_IF_ERROR(WriteFileAtomic(WorkBlobPath(d), content, 0644));
    }
    return b;
  }

  // Brings a (layer) blob into the work directory, hashing it on the way; with `expected`, a
  // blob whose content does not match is refused, and one of the importing owner's own images
  // (or the node's) is not read again. A layer only another owner's image has must be in the
  // archive: naming its digest does not give its content.
  absl::StatusOr<Blob> Ingest(const std::string& name, const Descriptor* expected) {
    if (expected != nullptr && known_layers_.contains(expected->digest)) {
      struct stat st;
      if (::stat(StoreBlobPath(expected->digest).c_str(), &st) == 0 &&
          st.st_size == expected->size) {
        return Blob{expected->digest, expected->size};
      }
    }
    ASSIGN_OR_RETURN(UniqueFd in, source_.OpenPath(name, O_RDONLY), fmt::format("blob {}", name));
    struct stat st;
    if (::fstat(in.get(), &st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", name));
    if (!S_ISREG(st.st_mode)) return InvalidArgument(fmt::format("blob {}: not a file", name));
    // A file of our own extraction is moved, not copied; anything else is copied while hashed.
    std::optional<PathGuard::Parent> movable;
    if (staged_) {
      ASSIGN_OR_RETURN(PathGuard::Parent parent, source_.OpenParent(name));
      struct stat lst;
      if (::fstatat(parent.dir.get(), parent.name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
          lst.st_ino == st.st_ino && lst.st_dev == st.st_dev) {
        movable = std::move(parent);
      }
    }
    std::string tmp = fmt::format("{}/blobs/.incoming-{}", work_, RandomHex(6));
    UniqueFd out;
    if (!movable) {
      out.Reset(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
      if (!out) return ErrnoStatus(errno, fmt::format("create {}", tmp));
    }
    Sha256 hash;
    int64_t size = 0;
    std::string buf(kHashBlock, '\0');
    for (;;) {
      ssize_t n = ::read(in.get(), buf.data(), buf.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, fmt::format("read {}", name));
      }
      if (n == 0) break;
      std::string_view chunk(buf.data(), static_cast<size_t>(n));
      hash.Update(chunk);
      if (out) RETURN_IF_ERROR(WriteAll(out.get(), chunk), fmt::format("copy {}", name));
      size += n;
      verified_ += n;
      if (options_.progress && verified_ - reported_ >= (8 << 20)) {
        reported_ = verified_;
        options_.progress({Stage::kVerifying, 0, 0, verified_, out ? verified_ : 0, 0});
      }
    }
    ASSIGN_OR_RETURN(Digest digest, Digest::FromHex(hash.HexDigest()));
    if (expected != nullptr) {
      if (digest != expected->digest) {
        if (out) ::unlink(tmp.c_str());
        return DataLoss(fmt::format("blob {}: content has digest {}, not the {} named for it", name,
                                    digest.str(), expected->digest.str()));
      }
      if (size != expected->size) {
        if (out) ::unlink(tmp.c_str());
        return DataLoss(fmt::format("blob {}: {} bytes, not the {} its descriptor says", name, size,
                                    expected->size));
      }
    }
    std::string dest = WorkBlobPath(digest);
    if (out) {
      if (::rename(tmp.c_str(), dest.c_str()) != 0) return ErrnoStatus(errno, "rename blob");
    } else if (!Exists(dest) && !Exists(StoreBlobPath(digest))) {
      UniqueFd blobs(::open((work_ + "/blobs").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!blobs) return ErrnoStatus(errno, "open work blobs");
      if (::renameat(movable->dir.get(), movable->name.c_str(), blobs.get(),
                     std::string(digest.hex()).c_str()) != 0) {
        return ErrnoStatus(errno, fmt::format("move {}", name));
      }
    }
    return Blob{digest, size};
  }

  const ImageStoreOptions& store_;
  const std::string& work_;
  PathGuard source_;
  bool staged_;
  const ImportOptions& options_;
  const std::set<Digest> known_layers_;
  int64_t verified_ = 0;
  int64_t reported_ = 0;
};

}  // namespace

ImageLease::ImageLease(ImageLease&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)),
      digest_(std::move(other.digest_)),
      rootfs_(std::move(other.rootfs_)),
      lock_(std::move(other.lock_)) {}

ImageLease& ImageLease::operator=(ImageLease&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    digest_ = std::move(other.digest_);
    rootfs_ = std::move(other.rootfs_);
    lock_ = std::move(other.lock_);
  }
  return *this;
}

ImageLease::~ImageLease() { Release(); }

void ImageLease::Release() {
  if (store_ != nullptr) std::exchange(store_, nullptr)->ReleaseLease(digest_);
  lock_.Reset();
}

namespace {

struct StorePaths {
  std::string dir;
  std::string Index() const { return dir + "/index.json"; }
  std::string IndexLock() const { return dir + "/index.lock"; }
  std::string Blobs() const { return dir + "/blobs/sha256"; }
  std::string Blob(const Digest& d) const { return fmt::format("{}/{}", Blobs(), d.hex()); }
  std::string Roots() const { return dir + "/roots"; }
  std::string Root(const Digest& d) const { return fmt::format("{}/{}", Roots(), d.hex()); }
  std::string Lock(const Digest& d) const { return fmt::format("{}/locks/{}", dir, d.hex()); }
  std::string Leases() const { return dir + "/leases"; }
  std::string Lease(const Digest& d) const { return fmt::format("{}/{}", Leases(), d.hex()); }
  std::string Tmp() const { return dir + "/tmp"; }
};

absl::StatusOr<Index> LoadIndex(const StorePaths& p) {
  if (!Exists(p.Index())) return Index();
  ASSIGN_OR_RETURN(std::string text, ReadFile(p.Index(), kIndexMaxBytes));
  absl::StatusOr<Index> index = ParseIndexFile(text);
  if (!index.ok()) return Annotate(index.status(), fmt::format("image index {}", p.Index()));
  return index;
}

absl::Status SaveIndex(const StorePaths& p, const Index& index) {
  return WriteFileAtomic(p.Index(), FormatIndex(index), 0600);
}

// Names of the entries of a directory (empty when it does not exist).
std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (n != "." && n != "..") out.emplace_back(n);
  }
  ::closedir(d);
  return out;
}

// Whether `owner` sees the image: its own, or the node's (which every owner sees).
bool Visible(const Record& r, std::string_view owner) {
  return r.owners.contains(owner) || r.owners.contains(kNodeImages);
}

// Whether the index has image `d` and `owner` sees it.
bool Sees(const Index& index, const Digest& d, std::string_view owner) {
  auto it = index.find(d);
  return it != index.end() && Visible(it->second, owner);
}

const std::vector<std::string>& TagsOf(const Record& r, std::string_view owner) {
  static const std::vector<std::string> kNone;
  auto it = r.tags.find(std::string(owner));
  return it == r.tags.end() ? kNone : it->second;
}

bool HasTag(const Record& r, std::string_view owner, std::string_view tag) {
  const std::vector<std::string>& tags = TagsOf(r, owner);
  return std::find(tags.begin(), tags.end(), tag) != tags.end();
}

// The image a tag names for `owner`: its own tag first, then the node's.
std::optional<Digest> FindTag(const Index& index, std::string_view owner, std::string_view tag) {
  for (std::string_view ns : {owner, kNodeImages}) {
    for (const auto& [d, r] : index) {
      if (HasTag(r, ns, tag) && Visible(r, owner)) return d;
    }
  }
  return std::nullopt;
}

// The tags `owner` would resolve to image `d`: its own, and the node's it has not overridden.
std::vector<std::string> ViewTags(const Index& index, const Digest& d, std::string_view owner) {
  std::set<std::string> out;
  const Record& r = index.at(d);
  for (std::string_view ns : {owner, kNodeImages}) {
    for (const std::string& t : TagsOf(r, ns)) {
      if (FindTag(index, owner, t) == d) out.insert(t);
    }
  }
  return {out.begin(), out.end()};
}

absl::StatusOr<ImageInfo> MakeInfo(const StorePaths& p, const Index& index, const Digest& d,
                                   std::string_view owner, int64_t max_json) {
  const Record& r = index.at(d);
  ImageInfo info;
  info.digest = d;
  info.config_digest = r.config;
  info.layers = r.layers;
  info.tags = ViewTags(index, d, owner);
  info.node = r.owners.contains(kNodeImages);
  // The viewer's own import, else the node's: never when another owner imported it.
  auto when = r.owners.find(r.owners.contains(owner) ? owner : kNodeImages);
  info.unpacked_bytes = r.unpacked_bytes;
  info.blob_bytes = r.blob_bytes;
  info.entries = r.entries;
  info.skipped_entries = r.skipped;
  info.imported = std::chrono::system_clock::time_point(
      std::chrono::seconds(when != r.owners.end() ? when->second : 0));
  ASSIGN_OR_RETURN(std::string config, ReadFile(p.Blob(r.config), static_cast<size_t>(max_json)),
                   fmt::format("image {}", d.str()));
  ASSIGN_OR_RETURN(internal::ConfigDocument doc, internal::ParseConfig(config),
                   fmt::format("image {}", d.str()));
  info.config = std::move(doc.config);
  return info;
}

// Points `owner`'s `tag` at `d`, moving it from any other image; other owners' tags stay.
void SetTag(Index& index, const Digest& d, std::string_view owner, const std::string& tag) {
  for (auto& [other, r] : index) {
    if (auto t = r.tags.find(std::string(owner)); other != d && t != r.tags.end()) {
      std::erase(t->second, tag);
    }
  }
  std::vector<std::string>& tags = index[d].tags[std::string(owner)];
  if (std::find(tags.begin(), tags.end(), tag) == tags.end()) {
    tags.push_back(tag);
    std::sort(tags.begin(), tags.end());
  }
}

// The bytes of the images `owner` holds: unpacked files and blobs, each image counted whole for
// every owner holding it.
int64_t OwnerBytes(const Index& index, std::string_view owner) {
  int64_t bytes = 0;
  for (const auto& [d, r] : index) {
    if (r.owners.contains(owner)) bytes += r.unpacked_bytes + r.blob_bytes;
  }
  return bytes;
}

// ResourceExhausted when giving `owner` the tags `adding` would take it over kMaxTagsPerOwner.
absl::Status CheckTagCount(const Index& index, std::string_view owner,
                           const std::set<std::string>& adding) {
  std::set<std::string> tags = adding;
  for (const auto& [d, r] : index) {
    const std::vector<std::string>& own = TagsOf(r, owner);
    tags.insert(own.begin(), own.end());
  }
  if (tags.size() > kMaxTagsPerOwner) {
    return ResourceExhausted(fmt::format(
        "too many tags: an owner has at most {} (remove some first)", kMaxTagsPerOwner));
  }
  return absl::OkStatus();
}

// Drops the tags of owners that no longer see the image (after its owners changed).
void PruneTags(Record& r) {
  std::erase_if(
      r.tags, [&](const auto& entry) { return entry.second.empty() || !Visible(r, entry.first); });
}

}  // namespace

absl::StatusOr<std::unique_ptr<ImageStore>> ImageStore::Open(ImageStoreOptions options) {
  if (options.dir.empty()) return InvalidArgument("image store: no directory");
  StorePaths p{options.dir};
  for (const std::string& d :
       {p.dir, p.Blobs(), p.Roots(), p.dir + "/locks", p.Leases(), p.Tmp()}) {
    RETURN_IF_ERROR(MakeDirs(d, 0700), "image store");
  }
  // The store holds other users' image files: only its owner may enter it.
  if (::chmod(p.dir.c_str(), 0700) != 0) return ErrnoStatus(errno, fmt::format("chmod {}", p.dir));

  // Work directories of imports and removals that died on the way.
  time_t now = ::time(nullptr);
  for (const std::string& name : ListDir(p.Tmp())) {
    std::string path = fmt::format("{}/{}", p.Tmp(), name);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!fd || ::fstat(fd.get(), &st) != 0 || now - st.st_ctime < kStaleWorkSeconds) continue;
    absl::StatusOr<FileLock> lock = FileLock::TryLock(std::move(fd));
    if (lock.ok()) (void)RemoveTree(path);
  }
  // Roots and blobs that no image references (a crash between the steps of Remove).
  {
    ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kExclusive));
    ASSIGN_OR_RETURN(Index index, LoadIndex(p));
    std::set<std::string> blobs;
    for (const auto& [d, r] : index) {
      blobs.insert(std::string(d.hex()));
      blobs.insert(std::string(r.config.hex()));
      for (const Digest& l : r.layers) blobs.insert(std::string(l.hex()));
    }
    for (const std::string& name : ListDir(p.Roots())) {
      absl::StatusOr<Digest> d = Digest::FromHex(name);
      if (d.ok() && index.contains(*d)) continue;
      ASSIGN_OR_RETURN(WorkDir trash, WorkDir::Create(p.Tmp(), "trash"));
      if (::rename(fmt::format("{}/{}", p.Roots(), name).c_str(),
                   (trash.path() + "/root").c_str()) != 0) {
        return ErrnoStatus(errno, fmt::format("move {}/{} away", p.Roots(), name));
      }
    }
    for (const std::string& name : ListDir(p.Blobs())) {
      if (!blobs.contains(name)) ::unlink(fmt::format("{}/{}", p.Blobs(), name).c_str());
    }
  }
  return std::unique_ptr<ImageStore>(new ImageStore(std::move(options)));
}

ImageStore::~ImageStore() = default;

std::string ImageStore::RootfsPath(const Digest& digest) const {
  return StorePaths{options_.dir}.Root(digest);
}

absl::StatusOr<std::vector<ImageInfo>> ImageStore::Import(const std::string& path,
                                                          const ImportOptions& options) {
  StorePaths p{options_.dir};
  auto progress = [&](ImportProgress pr) {
    if (options.progress) options.progress(pr);
  };
  auto run = [&]() -> absl::StatusOr<std::vector<ImageInfo>> {
    std::set<std::string> extra_tags;
    for (const std::string& t : options.tags) {
      ASSIGN_OR_RETURN(std::string tag, NormalizeTag(t));
      extra_tags.insert(tag);
    }
    ASSIGN_OR_RETURN(WorkDir work, WorkDir::Create(p.Tmp(), "import"));
    RETURN_IF_ERROR(MakeDirs(work.path() + "/blobs", 0700));
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat");
    std::string source = path;
    bool staged = !S_ISDIR(st.st_mode);
    if (staged) {
      // The archive is extracted into the work directory as it is read: the names it holds are
      // guarded like a layer's, and its size and entry count count against the limits.
      source = work.path() + "/src";
      RETURN_IF_ERROR(MakeDirs(source, 0700));
      UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd) return ErrnoStatus(errno, "open");
      internal::UnpackOptions uo;
      uo.max_bytes = options_.limits.max_unpacked_bytes;
      uo.max_entries = options_.limits.max_entries;
      uo.whiteouts = false;
      uo.progress = [&](const internal::UnpackCounters& c) {
        progress({Stage::kReadingArchive, 0, 0, c.input_bytes, c.bytes, c.entries});
      };
      ASSIGN_OR_RETURN(auto unpacker, internal::Unpacker::Create(source, std::move(uo)));
      RETURN_IF_ERROR(unpacker->Apply(fd.get(), "archive"));
    }
    ASSIGN_OR_RETURN(PathGuard guard, PathGuard::Open(source));
    std::set<Digest> known_layers;
    {
      ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kShared));
      ASSIGN_OR_RETURN(Index index, LoadIndex(p));
      for (const auto& [d, r] : index) {
        if (Visible(r, options.owner)) known_layers.insert(r.layers.begin(), r.layers.end());
      }
    }
    ImportJob job(options_, work.path(), std::move(guard), staged, options,
                  std::move(known_layers));
    ASSIGN_OR_RETURN(std::vector<Planned> plans, job.Plan());

    std::vector<ImageInfo> out;
    for (Planned& plan : plans) {
      plan.tags.insert(extra_tags.begin(), extra_tags.end());
      absl::StatusOr<ImageInfo> info = [&]() -> absl::StatusOr<ImageInfo> {
        // One importer per image at a time, across processes: the second finds it done.
        ASSIGN_OR_RETURN(FileLock image_lock,
                         FileLock::Acquire(p.Lock(plan.digest), FileLock::Mode::kExclusive));
        bool present;
        {
          ASSIGN_OR_RETURN(FileLock lock,
                           FileLock::Acquire(p.IndexLock(), FileLock::Mode::kShared));
          ASSIGN_OR_RETURN(Index index, LoadIndex(p));
          present = index.contains(plan.digest) && Exists(p.Root(plan.digest));
        }
        Record fresh;
        std::string staged_root = fmt::format("{}/root-{}", work.path(), plan.digest.hex());
        if (!present) {
          if (::mkdir(staged_root.c_str(), 0755) != 0) return ErrnoStatus(errno, "mkdir root");
          internal::UnpackOptions uo;
          uo.max_bytes = options_.limits.max_unpacked_bytes;
          uo.max_entries = options_.limits.max_entries;
          uo.set_owners = ::geteuid() == 0;
          uo.id_offset = options_.id_offset;
          int layer = 0;
          const int layers = static_cast<int>(plan.layers.size());
          uo.progress = [&](const internal::UnpackCounters& c) {
            progress({Stage::kUnpacking, layer, layers, c.input_bytes, c.bytes, c.entries});
          };
          ASSIGN_OR_RETURN(auto unpacker, internal::Unpacker::Create(staged_root, std::move(uo)));
          for (const Blob& b : plan.layers) {
            ++layer;
            std::string blob = job.BlobPath(b.digest);
            UniqueFd fd(::open(blob.c_str(), O_RDONLY | O_CLOEXEC));
            if (!fd) return ErrnoStatus(errno, fmt::format("open {}", blob));
            RETURN_IF_ERROR(unpacker->Apply(
                fd.get(), fmt::format("layer {}/{} ({})", layer, layers, b.digest.Short())));
          }
          RETURN_IF_ERROR(unpacker->Finish());
          if (::chmod(staged_root.c_str(), 0755) != 0) return ErrnoStatus(errno, "chmod root");
          fresh.unpacked_bytes = unpacker->counters().bytes;
          fresh.entries = unpacker->counters().entries;
          fresh.skipped = unpacker->counters().skipped;
        }

        // Commit: blobs, root and index change together under the index lock, so Open's
        // clean-up and Remove never see blobs or roots of an image half in the store.
        ASSIGN_OR_RETURN(FileLock lock,
                         FileLock::Acquire(p.IndexLock(), FileLock::Mode::kExclusive));
        ASSIGN_OR_RETURN(Index index, LoadIndex(p));
        std::vector<Blob> blobs = plan.layers;
        blobs.push_back(plan.config);
        blobs.push_back({plan.digest, static_cast<int64_t>(plan.manifest.size())});
        // The owner's quota, checked here under the lock with the image's own size: concurrent
        // imports of one owner cannot pass it together, and a refusal leaves nothing changed.
        if (auto held = index.find(plan.digest);
            options.max_owner_bytes > 0 &&
            (held == index.end() || !held->second.owners.contains(options.owner))) {
          int64_t adds = present ? held->second.unpacked_bytes : fresh.unpacked_bytes;
          for (const Blob& b : blobs) adds += b.size;
          const int64_t used = OwnerBytes(index, options.owner);
          if (used + adds > options.max_owner_bytes) {
            return ResourceExhausted(fmt::format(
                "image quota: the owner's images would take {} bytes with this one, over its "
                "limit of {} bytes",
                used + adds, options.max_owner_bytes));
          }
        }
        RETURN_IF_ERROR(CheckTagCount(index, options.owner, plan.tags));
        for (const Blob& b : blobs) {
          if (Exists(p.Blob(b.digest))) continue;
          if (::rename(job.WorkBlobPath(b.digest).c_str(), p.Blob(b.digest).c_str()) != 0) {
            return ErrnoStatus(errno, fmt::format("store blob {}", b.digest.str()));
          }
        }
        std::optional<WorkDir> trash;
        if (!present) {
          if (Exists(p.Root(plan.digest))) {  // an earlier import's, not in the index
            ASSIGN_OR_RETURN(WorkDir t, WorkDir::Create(p.Tmp(), "trash"));
            trash.emplace(std::move(t));
            if (::rename(p.Root(plan.digest).c_str(), (trash->path() + "/root").c_str()) != 0) {
              return ErrnoStatus(errno, "move a stale root away");
            }
          }
          if (::rename(staged_root.c_str(), p.Root(plan.digest).c_str()) != 0) {
            return ErrnoStatus(errno, "move the root into place");
          }
        }
        auto it = index.find(plan.digest);
        if (it == index.end()) {
          fresh.config = plan.config.digest;
          for (const Blob& b : plan.layers) fresh.layers.push_back(b.digest);
          for (const Blob& b : blobs) fresh.blob_bytes += b.size;
          it = index.emplace(plan.digest, std::move(fresh)).first;
        } else if (!present) {
          it->second.unpacked_bytes = fresh.unpacked_bytes;
          it->second.entries = fresh.entries;
          it->second.skipped = fresh.skipped;
        }
        it->second.owners.try_emplace(options.owner, ::time(nullptr));
        for (const std::string& tag : plan.tags) SetTag(index, plan.digest, options.owner, tag);
        RETURN_IF_ERROR(SaveIndex(p, index));
        return MakeInfo(p, index, plan.digest, options.owner, options_.limits.max_json_bytes);
      }();
      if (!info.ok()) return Annotate(info.status(), fmt::format("image {}", plan.digest.Short()));
      out.push_back(*std::move(info));
    }
    progress({Stage::kDone, 0, 0, 0, 0, 0});
    return out;
  };
  absl::StatusOr<std::vector<ImageInfo>> result = run();
  if (!result.ok()) return Annotate(result.status(), fmt::format("import {}", path));
  return result;
}

absl::StatusOr<Digest> ImageStore::Resolve(std::string_view reference,
                                           std::string_view owner) const {
  ASSIGN_OR_RETURN(Reference ref, ParseReference(reference));
  StorePaths p{options_.dir};
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kShared));
  ASSIGN_OR_RETURN(Index index, LoadIndex(p));
  // Another owner's image is absent as far as `owner` can tell: the same NotFound as for a
  // digest nobody imported, so its existence does not show.
  if (!ref.digest.empty()) {
    if (!Sees(index, ref.digest, owner)) {
      return NotFound(fmt::format("image {} is not in the image store", ref.digest.str()));
    }
    return ref.digest;
  }
  if (std::optional<Digest> d = FindTag(index, owner, ref.tag)) return *d;
  return NotFound(fmt::format("image {} is not in the image store (import it first)", ref.tag));
}

absl::StatusOr<ImageInfo> ImageStore::Get(const Digest& digest, std::string_view owner) const {
  StorePaths p{options_.dir};
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kShared));
  ASSIGN_OR_RETURN(Index index, LoadIndex(p));
  if (!Sees(index, digest, owner)) {
    return NotFound(fmt::format("image {} is not in the image store", digest.str()));
  }
  return MakeInfo(p, index, digest, owner, options_.limits.max_json_bytes);
}

absl::StatusOr<std::vector<ImageInfo>> ImageStore::List(std::string_view owner) const {
  StorePaths p{options_.dir};
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kShared));
  ASSIGN_OR_RETURN(Index index, LoadIndex(p));
  std::vector<ImageInfo> out;
  for (const auto& [d, r] : index) {
    if (!Visible(r, owner)) continue;
    ASSIGN_OR_RETURN(ImageInfo info, MakeInfo(p, index, d, owner, options_.limits.max_json_bytes));
    out.push_back(std::move(info));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const ImageInfo& a, const ImageInfo& b) { return a.imported > b.imported; });
  return out;
}

absl::Status ImageStore::Tag(const Digest& digest, std::string_view tag, std::string_view owner) {
  ASSIGN_OR_RETURN(std::string normal, NormalizeTag(tag));
  StorePaths p{options_.dir};
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kExclusive));
  ASSIGN_OR_RETURN(Index index, LoadIndex(p));
  if (!Sees(index, digest, owner)) {
    return NotFound(
        fmt::format("tag {}: image {} is not in the image store", normal, digest.str()));
  }
  RETURN_IF_ERROR(CheckTagCount(index, owner, {normal}));
  SetTag(index, digest, owner, normal);
  return SaveIndex(p, index);
}

absl::Status ImageStore::Untag(std::string_view tag, std::string_view owner) {
  ASSIGN_OR_RETURN(std::string normal, NormalizeTag(tag));
  StorePaths p{options_.dir};
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kExclusive));
  ASSIGN_OR_RETURN(Index index, LoadIndex(p));
  bool found = false;
  for (auto& [d, r] : index) {
    if (auto t = r.tags.find(std::string(owner)); t != r.tags.end()) {
      found |= std::erase(t->second, normal) > 0;
    }
  }
  if (!found) return NotFound(fmt::format("untag {}: no image has this tag", normal));
  return SaveIndex(p, index);
}

absl::Status ImageStore::Remove(std::string_view reference, std::string_view owner) {
  ASSIGN_OR_RETURN(Digest digest, Resolve(reference, owner),
                   fmt::format("remove image {}", reference));
  auto error = [&](absl::Status s) {
    return Annotate(s, fmt::format("remove image {}", digest.str()));
  };
  StorePaths p{options_.dir};
  // The owner's hold goes first, with its tags on the image; the image itself only with its last
  // holder. Returns whether the owner is the last holder (nothing changed then).
  auto drop_hold = [&](Index& index) -> absl::StatusOr<bool> {
    if (!Sees(index, digest, owner)) return NotFound("it is not in the image store");
    Record& r = index.at(digest);
    if (!r.owners.contains(owner)) {
      return PermissionDenied(
          "it is one of the node's images, which only the node's operator removes (airlockd "
          "admin remove-image)");
    }
    if (r.owners.size() == 1) return true;
    r.owners.erase(r.owners.find(owner));
    r.tags.erase(std::string(owner));
    PruneTags(r);
    RETURN_IF_ERROR(SaveIndex(p, index));
    return false;
  };
  // Asked before any lock is taken: the callback may well call back into the store. The
  // owner's own sandboxes keep its hold (so that it cannot be dropped from under them to pin
  // the image on another holder); when the image itself would go, any sandbox keeps it.
  if (options_.in_use && options_.in_use(digest, std::string(owner))) {
    return error(FailedPrecondition("it is in use by a sandbox of its owner"));
  }
  {
    ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kExclusive));
    ASSIGN_OR_RETURN(Index index, LoadIndex(p));
    absl::StatusOr<bool> last = drop_hold(index);
    if (!last.ok()) return error(last.status());
    if (!*last) return absl::OkStatus();  // other owners keep it
  }
  if (options_.in_use && options_.in_use(digest, std::nullopt)) {
    return error(FailedPrecondition("it is in use (the store's owner says so)"));
  }
  ASSIGN_OR_RETURN(FileLock image_lock,
                   FileLock::Acquire(p.Lock(digest), FileLock::Mode::kExclusive));
  ASSIGN_OR_RETURN(WorkDir trash, WorkDir::Create(p.Tmp(), "trash"));
  {
    ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kExclusive));
    ASSIGN_OR_RETURN(Index index, LoadIndex(p));
    // Looked at again under the lock: another owner may have imported it meanwhile.
    absl::StatusOr<bool> last = drop_hold(index);
    if (!last.ok()) return error(last.status());
    if (!*last) return absl::OkStatus();
    auto it = index.find(digest);
    {
      // Under the index lock, and Acquire takes both too: no lease can start after this check.
      std::lock_guard<std::mutex> guard(mu_);
      if (auto l = leases_.find(digest); l != leases_.end() && l->second > 0) {
        return error(FailedPrecondition(fmt::format("it is in use by {} sandbox(es)", l->second)));
      }
      // Leases of other processes (a daemon, while this is `airlockd admin remove-image`).
      UniqueFd lease(::open(p.Lease(digest).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
      if (lease && ::flock(lease.get(), LOCK_EX | LOCK_NB) != 0) {
        return error(FailedPrecondition("it is in use by a sandbox of another process"));
      }
      if (lease) ::unlink(p.Lease(digest).c_str());
      Record gone = std::move(it->second);
      index.erase(it);
      RETURN_IF_ERROR(SaveIndex(p, index), fmt::format("remove image {}", digest.str()));
      std::set<Digest> kept;
      for (const auto& [d, r] : index) {
        kept.insert(r.config);
        kept.insert(r.layers.begin(), r.layers.end());
      }
      std::vector<Digest> blobs = gone.layers;
      blobs.push_back(gone.config);
      blobs.push_back(digest);
      for (const Digest& b : blobs) {
        if (!kept.contains(b)) ::unlink(p.Blob(b).c_str());
      }
    }
    if (Exists(p.Root(digest)) &&
        ::rename(p.Root(digest).c_str(), (trash.path() + "/root").c_str()) != 0) {
      return error(ErrnoStatus(errno, "move its root file system away"));
    }
  }
  return absl::OkStatus();  // the trash goes with `trash`, outside the index lock
}

absl::StatusOr<ImageLease> ImageStore::Acquire(const Digest& digest) {
  StorePaths p{options_.dir};
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kShared));
  ASSIGN_OR_RETURN(Index index, LoadIndex(p));
  if (!index.contains(digest) || !Exists(p.Root(digest))) {
    return NotFound(fmt::format("image {} is not in the image store", digest.str()));
  }
  // Taken under the index lock, as Remove checks it: no removal falls between.
  UniqueFd held(::open(p.Lease(digest).c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!held) return ErrnoStatus(errno, fmt::format("open the lease file of {}", digest.str()));
  if (::flock(held.get(), LOCK_SH) != 0) {
    return ErrnoStatus(errno, fmt::format("lock the lease file of {}", digest.str()));
  }
  std::lock_guard<std::mutex> guard(mu_);
  ++leases_[digest];
  return ImageLease(this, digest, p.Root(digest), std::move(held));
}

absl::StatusOr<int64_t> ImageStore::HeldBytes(std::string_view owner) const {
  StorePaths p{options_.dir};
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(p.IndexLock(), FileLock::Mode::kShared));
  ASSIGN_OR_RETURN(Index index, LoadIndex(p));
  return OwnerBytes(index, owner);
}

int ImageStore::Leases(const Digest& digest) const {
  std::lock_guard<std::mutex> guard(mu_);
  auto it = leases_.find(digest);
  return it == leases_.end() ? 0 : it->second;
}

void ImageStore::ReleaseLease(const Digest& digest) {
  std::lock_guard<std::mutex> guard(mu_);
  auto it = leases_.find(digest);
  if (it != leases_.end() && --it->second <= 0) leases_.erase(it);
}

}  // namespace airlock::image
