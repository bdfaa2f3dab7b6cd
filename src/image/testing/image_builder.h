// Test and benchmark support: real tar archives, OCI image layouts and docker save tarballs,
// written with libarchive. Aborts on a libarchive failure (test code only).
#ifndef AIRLOCK_IMAGE_TESTING_IMAGE_BUILDER_H_
#define AIRLOCK_IMAGE_TESTING_IMAGE_BUILDER_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::image::testing {

struct Entry {
  enum class Type { kFile, kDir, kSymlink, kHardlink, kFifo, kCharDevice };
  Type type = Type::kFile;
  std::string path;
  std::string data;  // file content
  std::string link;  // symlink target, or the path a hard link names
  int mode = 0644;
  int64_t uid = 0;
  int64_t gid = 0;
  int64_t mtime = 1700000000;
};

Entry File(std::string path, std::string data, int mode = 0644);
Entry Dir(std::string path, int mode = 0755);
Entry Symlink(std::string path, std::string target);
Entry Hardlink(std::string path, std::string target);
Entry Fifo(std::string path);
Entry CharDevice(std::string path);

enum class Compression { kNone, kGzip, kZstd };

// An uncompressed pax tar of the entries, in order.
std::string Tar(const std::vector<Entry>& entries);
std::string Compress(std::string_view data, Compression compression);

struct Layer {
  std::string tar;  // uncompressed
  Compression compression = Compression::kNone;
};

struct Image {
  std::vector<Layer> layers;
  std::vector<std::string> env;
  std::string working_dir;
  std::string user;
  std::vector<std::string> cmd;
  std::string os = "linux";
  std::string architecture;  // empty: the host's
  std::vector<std::string> tags;
};

// The files of an OCI image layout of `image` (path -> content), and its manifest digest.
struct Layout {
  std::map<std::string, std::string> files;
  std::string manifest_digest;  // "sha256:…"
  std::string config_digest;
};
Layout OciLayout(const Image& image);
// docker save's files: manifest.json, <config hex>.json, <n>/layer.tar (layers as given).
Layout DockerSave(const Image& image);

// Writes the files below `dir` (creating directories), or as a tar archive at `path`.
void WriteTree(const std::string& dir, const std::map<std::string, std::string>& files);
void WriteArchive(const std::string& path, const std::map<std::string, std::string>& files,
                  Compression compression = Compression::kNone);

std::string Sha256Digest(std::string_view data);  // "sha256:…"

}  // namespace airlock::image::testing

#endif  // AIRLOCK_IMAGE_TESTING_IMAGE_BUILDER_H_
