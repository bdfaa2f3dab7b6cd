// Image import and unpacking (src/image) against GNU tar extracting the same layers, alternating
// in one run so machine noise hits both sides.
//
//   bench/image_bench [--runs N] [--dir DIR] [--size-mb M] [--image OCI_TARBALL] [--defer-delete]
//
// Workloads: a synthetic image of about M MiB (default 200) in three layers (small files,
// large files, a layer of whiteouts and new files; gzip and zstd), imported from an OCI layout
// directory; with --image, an OCI layout tarball such as scripts/build-base-image's; and the
// re-import of an image the store already has. The reference extracts each layer blob in order
// with `tar -xf` (GNU tar, which decompresses in a separate gzip/zstd process): no digest
// verification, no blob copy, no whiteouts, no guards. Prints medians and p90 of wall time, the
// median CPU time (user + system: this process for airlock, tar and its decompressor for the
// reference; steadier than wall time on a loaded machine), MiB/s of unpacked data over wall
// time, and the median of the per-round wall-time ratios. On an ext4 mounted with
// `discard`, deleting a tree stalls the file creations that follow for seconds while the freed
// blocks are trimmed: --defer-delete keeps every round's output until the end.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/files.h"
#include "fmt/format.h"
#include "image/image_store.h"
#include "image/testing/image_builder.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace airlock {
namespace {

using Clock = std::chrono::steady_clock;
namespace it = image::testing;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

bool Run(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return false;
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Deterministic text with the redundancy of source code (compresses about 3:1).
std::string Text(uint64_t seed, size_t size) {
  static const char* kWords[] = {"return", "int",   "const",  "std::string", "if",      "else",
                                 "for",    "value", "status", "(",           ")",       "{",
                                 "}",      ";\n",   "  ",     "= ",          "nullptr", "size",
                                 "auto",   "->",    "0x",     "7f",          "error"};
  std::string out;
  out.reserve(size + 16);
  uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  while (out.size() < size) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out += kWords[(x >> 33) % std::size(kWords)];
    if ((x >> 20) % 7 == 0) out += std::to_string((x >> 40) % 100000);
    out += ' ';
  }
  out.resize(size);
  return out;
}

it::Image Synthetic(int size_mb) {
  const size_t total = static_cast<size_t>(size_mb) << 20;
  it::Image img;
  std::vector<it::Entry> small;  // ~40%: 4 KiB files in 100 directories
  const size_t small_files = total * 4 / 10 / 4096;
  for (size_t i = 0; i < small_files; ++i) {
    small.push_back(it::File(fmt::format("usr/lib/pkg{}/file{}.py", i % 100, i), Text(i, 4096)));
  }
  img.layers.push_back({it::Tar(small), it::Compression::kGzip});
  std::vector<it::Entry> large;  // ~50%: 5 MiB files
  for (size_t i = 0; i < total / 2 / (5 << 20); ++i) {
    large.push_back(it::File(fmt::format("opt/big/blob{}.bin", i), Text(1000000 + i, 5 << 20)));
  }
  img.layers.push_back({it::Tar(large), it::Compression::kZstd});
  std::vector<it::Entry> changes;  // whiteouts, an opaque directory, ~10% new 8 KiB files
  for (size_t i = 0; i < small_files / 20; ++i) {
    changes.push_back(it::File(fmt::format("usr/lib/pkg{}/.wh.file{}.py", i % 100, i), ""));
  }
  changes.push_back(it::File("usr/lib/pkg7/.wh..wh..opq", ""));
  for (size_t i = 0; i < total / 10 / 8192; ++i) {
    changes.push_back(
        it::File(fmt::format("srv/app/mod{}/f{}.js", i % 50, i), Text(2000000 + i, 8192)));
  }
  img.layers.push_back({it::Tar(changes), it::Compression::kGzip});
  img.tags = {"bench/synthetic:1"};
  return img;
}

// CPU time (user + system) of this process or of its waited-for children, in ms.
double CpuMs(int who) {
  struct rusage ru;
  getrusage(who, &ru);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + t.tv_usec / 1e3; };
  return ms(ru.ru_utime) + ms(ru.ru_stime);
}

struct Series {
  std::string name;
  std::vector<double> ms;
  std::vector<double> cpu_ms;
};

void Print(const Series& s, double unpacked_mib) {
  double median = Percentile(s.ms, 0.5);
  fmt::print("  {:<36} median {:>8.1f} ms  p90 {:>8.1f} ms  cpu {:>7.1f} ms  {:>6.1f} MiB/s\n",
             s.name, median, Percentile(s.ms, 0.9), Percentile(s.cpu_ms, 0.5),
             unpacked_mib / (median / 1000));
}

// Layer blobs of an OCI layout directory, in order.
std::vector<std::string> LayerBlobs(const std::string& layout) {
  using Json = nlohmann::json;
  Json index = Json::parse(*ReadFile(layout + "/index.json"));
  std::string manifest_digest = index["manifests"][0]["digest"];
  Json manifest = Json::parse(*ReadFile(layout + "/blobs/sha256/" + manifest_digest.substr(7)));
  std::vector<std::string> out;
  for (const Json& l : manifest["layers"]) {
    out.push_back(layout + "/blobs/sha256/" + l["digest"].get<std::string>().substr(7));
  }
  return out;
}

int Main(int argc, char** argv) {
  int runs = 5;
  int size_mb = 200;
  std::string dir = "/var/tmp";
  std::string image;
  bool defer_delete = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--size-mb" && i + 1 < argc) {
      size_mb = std::atoi(argv[++i]);
    } else if (a == "--image" && i + 1 < argc) {
      image = argv[++i];
    } else if (a == "--defer-delete") {
      defer_delete = true;
    } else {
      fmt::print(stderr,
                 "usage: image_bench [--runs N] [--dir DIR] [--size-mb M] [--image T] "
                 "[--defer-delete]\n");
      return 2;
    }
  }
  std::string base = fmt::format("{}/airlock-image-bench-{}", dir, ::getpid());
  if (!MakeDirs(base).ok()) return 1;

  fmt::print("generating a {} MiB synthetic image...\n", size_mb);
  it::Layout layout = it::OciLayout(Synthetic(size_mb));
  std::string synthetic = base + "/synthetic";
  it::WriteTree(synthetic, layout.files);
  std::string ref_layout;
  if (!image.empty()) {  // the reference needs the tarball's blobs as files
    ref_layout = base + "/image-layout";
    if (!MakeDirs(ref_layout).ok() || !Run({"tar", "-xf", image, "-C", ref_layout})) return 1;
  }

  int outputs = 0;
  double cpu = 0;  // CPU time of the last measured operation
  auto import = [&](const std::string& source, bool keep) -> double {
    std::string store_dir = keep ? base + "/store" : fmt::format("{}/store-{}", base, ++outputs);
    auto store = image::ImageStore::Open({.dir = store_dir});
    if (!store.ok()) {
      fmt::print(stderr, "{}\n", store.status().ToString());
      std::exit(1);
    }
    double c0 = CpuMs(RUSAGE_SELF);
    auto t0 = Clock::now();
    auto got = (*store)->Import(source);
    double ms = Ms(Clock::now() - t0);
    cpu = CpuMs(RUSAGE_SELF) - c0;
    if (!got.ok()) {
      fmt::print(stderr, "{}\n", got.status().ToString());
      std::exit(1);
    }
    if (!keep && !defer_delete) (void)RemoveTree(store_dir);
    return ms;
  };
  auto tar_layers = [&](const std::vector<std::string>& blobs, bool outer) -> double {
    std::string root = fmt::format("{}/tar-root-{}", base, ++outputs);
    (void)MakeDirs(root);
    double c0 = CpuMs(RUSAGE_CHILDREN);
    auto t0 = Clock::now();
    if (outer && !Run({"tar", "-xf", image, "-C", root})) std::exit(1);
    for (const std::string& b : blobs) {
      if (!Run({"tar", "-xf", b, "-C", root})) std::exit(1);
    }
    double ms = Ms(Clock::now() - t0);
    cpu = CpuMs(RUSAGE_CHILDREN) - c0;
    if (!defer_delete) (void)RemoveTree(root);
    return ms;
  };

  std::vector<std::string> synthetic_blobs = LayerBlobs(synthetic);
  std::vector<std::string> image_blobs =
      image.empty() ? std::vector<std::string>{} : LayerBlobs(ref_layout);
  Series a{"airlock import (OCI directory)", {}}, b{"tar -xf of each layer", {}};
  Series c{"airlock import (OCI tarball)", {}}, d{"tar -xf of the tarball, then layers", {}};
  Series e{"airlock re-import (already stored)", {}};
  std::vector<double> ratio_synthetic, ratio_image;
  for (int r = 0; r < runs; ++r) {
    double x = import(synthetic, false);
    a.cpu_ms.push_back(cpu);
    double y = tar_layers(synthetic_blobs, false);
    b.cpu_ms.push_back(cpu);
    a.ms.push_back(x);
    b.ms.push_back(y);
    ratio_synthetic.push_back(x / y);
    if (!image.empty()) {
      double z = tar_layers(image_blobs, true);
      d.cpu_ms.push_back(cpu);
      double w = import(image, false);
      c.cpu_ms.push_back(cpu);
      c.ms.push_back(w);
      d.ms.push_back(z);
      ratio_image.push_back(w / z);
    }
    fmt::print("round {}/{} done\n", r + 1, runs);
  }
  import(synthetic, true);
  for (int r = 0; r < runs; ++r) {
    e.ms.push_back(import(synthetic, true));
    e.cpu_ms.push_back(cpu);
  }
  auto stored = image::ImageStore::Open({.dir = base + "/store"});
  auto info = (*stored)->Get(*image::Digest::Parse(layout.manifest_digest));
  double mib = static_cast<double>(info->unpacked_bytes) / (1 << 20);
  (void)RemoveTree(base + "/store");

  fmt::print("\nsynthetic image: {:.1f} MiB unpacked, {} entries, {} layers ({} MiB of blobs)\n",
             mib, info->entries, info->layers.size(), info->blob_bytes >> 20);
  Print(a, mib);
  Print(b, mib);
  Print(e, mib);
  fmt::print("  airlock / tar, median of per-round ratios: {:.2f}x\n",
             Percentile(ratio_synthetic, 0.5));
  if (!image.empty()) {
    auto s = image::ImageStore::Open({.dir = base + "/store"});
    auto got = (*s)->Import(image);
    double image_mib = static_cast<double>((*got)[0].unpacked_bytes) / (1 << 20);
    fmt::print("\n{}: {:.1f} MiB unpacked, {} entries ({} skipped), {} layers\n", image, image_mib,
               (*got)[0].entries, (*got)[0].skipped_entries, (*got)[0].layers.size());
    Print(c, image_mib);
    Print(d, image_mib);
    fmt::print("  airlock / tar, median of per-round ratios: {:.2f}x\n",
               Percentile(ratio_image, 0.5));
  }
  (void)RemoveTree(base);
  return 0;
}

}  // namespace
}  // namespace airlock

int main(int argc, char** argv) { return airlock::Main(argc, argv); }
