#include "image/testing/image_builder.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

#include "common/files.h"
#include "common/sha256.h"
#include "fmt/format.h"
#include "image/internal/manifest.h"
#include "nlohmann/json.hpp"

namespace airlock::image::testing {
namespace {

using Json = nlohmann::json;

[[noreturn]] void Fail(archive* a, const char* what) {
  std::fprintf(stderr, "image_builder: %s: %s\n", what,
               a != nullptr && archive_error_string(a) ? archive_error_string(a) : "failed");
  std::abort();
}

void Check(archive* a, int r, const char* what) {
  if (r < ARCHIVE_WARN) Fail(a, what);
}

la_ssize_t Append(archive*, void* out, const void* buf, size_t n) {
  static_cast<std::string*>(out)->append(static_cast<const char*>(buf), n);
  return static_cast<la_ssize_t>(n);
}

struct Writer {
  explicit Writer(bool raw, Compression compression) : a(archive_write_new()) {
    Check(a, raw ? archive_write_set_format_raw(a) : archive_write_set_format_pax_restricted(a),
          "format");
    if (compression == Compression::kGzip) {
      Check(a, archive_write_add_filter_gzip(a), "gzip");
      // No time in the gzip header: the same layer built twice must have the same digest (it
      // differed when the clock crossed a second between the two).
      Check(a, archive_write_set_filter_option(a, "gzip", "timestamp", nullptr), "gzip timestamp");
    }
    if (compression == Compression::kZstd) Check(a, archive_write_add_filter_zstd(a), "zstd");
    // Layers are streams; no padding of the last block to 10 KiB.
    Check(a, archive_write_set_bytes_in_last_block(a, 1), "block");
    Check(a, archive_write_open2(a, &out, nullptr, Append, nullptr, nullptr), "open");
  }
  ~Writer() { archive_write_free(a); }
  void Add(const Entry& e) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.path.c_str());
    archive_entry_set_perm(entry, static_cast<mode_t>(e.mode));
    archive_entry_set_uid(entry, e.uid);
    archive_entry_set_gid(entry, e.gid);
    archive_entry_set_mtime(entry, e.mtime, 0);
    switch (e.type) {
      case Entry::Type::kFile:
        archive_entry_set_filetype(entry, AE_IFREG);
        archive_entry_set_size(entry, static_cast<la_int64_t>(e.data.size()));
        break;
      case Entry::Type::kDir:
        archive_entry_set_filetype(entry, AE_IFDIR);
        break;
      case Entry::Type::kSymlink:
        archive_entry_set_filetype(entry, AE_IFLNK);
        archive_entry_set_symlink(entry, e.link.c_str());
        break;
      case Entry::Type::kHardlink:
        archive_entry_set_filetype(entry, AE_IFREG);
        archive_entry_set_hardlink(entry, e.link.c_str());
        break;
      case Entry::Type::kFifo:
        archive_entry_set_filetype(entry, AE_IFIFO);
        break;
      case Entry::Type::kCharDevice:
        archive_entry_set_filetype(entry, AE_IFCHR);
        archive_entry_set_rdevmajor(entry, 1);
        archive_entry_set_rdevminor(entry, 3);
        break;
    }
    Check(a, archive_write_header(a, entry), "header");
    if (e.type == Entry::Type::kFile && !e.data.empty()) {
      if (archive_write_data(a, e.data.data(), e.data.size()) !=
          static_cast<la_ssize_t>(e.data.size())) {
        Fail(a, "data");
      }
    }
    archive_entry_free(entry);
  }
  std::string Finish() {
    Check(a, archive_write_close(a), "close");
    return std::move(out);
  }
  archive* a;
  std::string out;
};

std::string HostArchitecture() { return internal::HostPlatform().architecture; }

std::string LayerMediaType(Compression c) {
  switch (c) {
    case Compression::kGzip:
      return "application/vnd.oci.image.layer.v1.tar+gzip";
    case Compression::kZstd:
      return "application/vnd.oci.image.layer.v1.tar+zstd";
    case Compression::kNone:
      break;
  }
  return "application/vnd.oci.image.layer.v1.tar";
}

Json Descriptor(const std::string& media_type, std::string_view blob) {
  return {{"mediaType", media_type}, {"digest", Sha256Digest(blob)}, {"size", blob.size()}};
}

std::string ConfigJson(const Image& image) {
  Json diff_ids = Json::array();
  for (const Layer& l : image.layers) diff_ids.push_back(Sha256Digest(l.tar));
  Json config = {{"Env", image.env}};
  if (!image.working_dir.empty()) config["WorkingDir"] = image.working_dir;
  if (!image.user.empty()) config["User"] = image.user;
  if (!image.cmd.empty()) config["Cmd"] = image.cmd;
  return Json{
      {"architecture", image.architecture.empty() ? HostArchitecture() : image.architecture},
      {"os", image.os},
      {"created", "2026-01-01T00:00:00Z"},
      {"config", config},
      {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}}
      .dump();
}

std::string BlobPath(std::string_view digest) {
  return fmt::format("blobs/sha256/{}", digest.substr(7));
}

}  // namespace

Entry File(std::string path, std::string data, int mode) {
  return {Entry::Type::kFile, std::move(path), std::move(data), "", mode};
}
Entry Dir(std::string path, int mode) { return {Entry::Type::kDir, std::move(path), "", "", mode}; }
Entry Symlink(std::string path, std::string target) {
  return {Entry::Type::kSymlink, std::move(path), "", std::move(target), 0777};
}
Entry Hardlink(std::string path, std::string target) {
  return {Entry::Type::kHardlink, std::move(path), "", std::move(target), 0644};
}
Entry Fifo(std::string path) { return {Entry::Type::kFifo, std::move(path), "", "", 0644}; }
Entry CharDevice(std::string path) {
  return {Entry::Type::kCharDevice, std::move(path), "", "", 0666};
}

std::string Tar(const std::vector<Entry>& entries) {
  Writer w(false, Compression::kNone);
  for (const Entry& e : entries) w.Add(e);
  return w.Finish();
}

std::string Compress(std::string_view data, Compression compression) {
  if (compression == Compression::kNone) return std::string(data);
  Writer w(true, compression);
  w.Add(File("data", std::string(data)));
  return w.Finish();
}

std::string Sha256Digest(std::string_view data) { return "sha256:" + Sha256Hex(data); }

Layout OciLayout(const Image& image) {
  Layout out;
  std::string config = ConfigJson(image);
  out.config_digest = Sha256Digest(config);
  out.files[BlobPath(out.config_digest)] = config;
  Json layers = Json::array();
  for (const Layer& l : image.layers) {
    std::string blob = Compress(l.tar, l.compression);
    layers.push_back(Descriptor(LayerMediaType(l.compression), blob));
    out.files[BlobPath(Sha256Digest(blob))] = blob;
  }
  std::string manifest = Json{
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
      {"config", Descriptor("application/vnd.oci.image.config.v1+json", config)},
      {"layers", layers}}.dump();
  out.manifest_digest = Sha256Digest(manifest);
  out.files[BlobPath(out.manifest_digest)] = manifest;
  Json entries = Json::array();
  Json entry = Descriptor("application/vnd.oci.image.manifest.v1+json", manifest);
  if (image.tags.empty()) entries.push_back(entry);
  for (const std::string& tag : image.tags) {
    entry["annotations"] = {{"org.opencontainers.image.ref.name", tag}};
    entries.push_back(entry);
  }
  out.files["index.json"] = Json{
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.index.v1+json"},
      {"manifests", entries}}.dump();
  out.files["oci-layout"] = R"({"imageLayoutVersion":"1.0.0"})";
  return out;
}

Layout DockerSave(const Image& image) {
  Layout out;
  std::string config = ConfigJson(image);
  out.config_digest = Sha256Digest(config);
  std::string config_name = fmt::format("{}.json", out.config_digest.substr(7));
  out.files[config_name] = config;
  Json layers = Json::array();
  for (size_t i = 0; i < image.layers.size(); ++i) {
    std::string name = fmt::format("{:064x}/layer.tar", i + 1);
    out.files[name] = Compress(image.layers[i].tar, image.layers[i].compression);
    layers.push_back(name);
  }
  out.files["manifest.json"] =
      Json::array({{{"Config", config_name}, {"RepoTags", image.tags}, {"Layers", layers}}}).dump();
  return out;
}

void WriteTree(const std::string& dir, const std::map<std::string, std::string>& files) {
  for (const auto& [path, content] : files) {
    std::string full = fmt::format("{}/{}", dir, path);
    if (!MakeDirs(full.substr(0, full.rfind('/'))).ok() || !WriteFileAtomic(full, content).ok()) {
      std::fprintf(stderr, "image_builder: cannot write %s\n", full.c_str());
      std::abort();
    }
  }
}

void WriteArchive(const std::string& path, const std::map<std::string, std::string>& files,
                  Compression compression) {
  Writer w(false, compression);
  for (const auto& [name, content] : files) w.Add(File(name, content));
  if (!WriteFileAtomic(path, w.Finish()).ok()) {
    std::fprintf(stderr, "image_builder: cannot write %s\n", path.c_str());
    std::abort();
  }
}

}  // namespace airlock::image::testing
