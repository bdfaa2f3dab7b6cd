#include "interp/internal/snapshot_format.h"

#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/status.h"
#include "fmt/format.h"
#include "interp/internal/guest.h"
#include "interp/internal/wasm_rt.h"

namespace airlock::interp::internal {
namespace {

constexpr char kMagic[] = "AIRLOCK-QJS-SNAP";  // 16 bytes without the NUL
constexpr size_t kMagicSize = 16;
constexpr size_t kMacSize = 32;
// zstd level 2: a small orchestration state (~260 KB of non-zero memory) compresses to ~87 KB in
// about 0.6 ms; zlib level 1 took 3 ms for the same size.
constexpr int kZstdLevel = 2;
// Largest body accepted: a full 4 GiB memory plus the host state.
constexpr uint64_t kMaxBody = (uint64_t{65536} * kWasmPageSize) + (uint64_t{256} << 20);

void PutU32(std::string* out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 4);
}

void PutU64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 8);
}

// A cursor over untrusted bytes.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool U32(uint32_t* v) {
    if (data_.size() < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) *v |= uint32_t{static_cast<uint8_t>(data_[i])} << (8 * i);
    data_.remove_prefix(4);
    return true;
  }
  bool U64(uint64_t* v) {
    if (data_.size() < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) *v |= uint64_t{static_cast<uint8_t>(data_[i])} << (8 * i);
    data_.remove_prefix(8);
    return true;
  }
  bool Bytes(uint64_t n, std::string_view* out) {
    if (data_.size() < n) return false;
    *out = data_.substr(0, n);
    data_.remove_prefix(n);
    return true;
  }
  size_t remaining() const { return data_.size(); }

 private:
  std::string_view data_;
};

std::string Mac(std::string_view key, std::string_view data) {
  struct hmac_sha256_ctx ctx;
  hmac_sha256_set_key(&ctx, key.size(), reinterpret_cast<const uint8_t*>(key.data()));
  hmac_sha256_update(&ctx, data.size(), reinterpret_cast<const uint8_t*>(data.data()));
  uint8_t out[SHA256_DIGEST_SIZE];
  hmac_sha256_digest(&ctx, sizeof(out), out);
  return std::string(reinterpret_cast<const char*>(out), sizeof(out));
}

bool BlockIsZero(const uint8_t* block) {
  const auto* words = reinterpret_cast<const uint64_t*>(block);
  uint64_t acc = 0;
  for (size_t i = 0; i < kImageBlockSize / 8; i += 8) {
    acc |= words[i] | words[i + 1] | words[i + 2] | words[i + 3] | words[i + 4] | words[i + 5] |
           words[i + 6] | words[i + 7];
    if (acc != 0) return false;
  }
  return true;
}

}  // namespace

void CapturePages(const uint8_t* memory, uint32_t pages, SnapshotImage* image) {
  const size_t blocks = size_t{pages} * kBlocksPerPage;
  image->pages = pages;
  image->bitmap.assign((blocks + 7) / 8, '\0');
  image->data.clear();
  // Blocks the guest never touched are not resident: skip them without reading them (reading
  // would fault each one in, which costs more than the scan itself).
  const size_t os_page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t bytes = size_t{pages} * kWasmPageSize;
  std::vector<unsigned char> resident((bytes + os_page - 1) / os_page, 1);
  if (::mincore(const_cast<uint8_t*>(memory), bytes, resident.data()) != 0) {
    std::fill(resident.begin(), resident.end(), 1);
  }
  for (size_t i = 0; i < blocks; ++i) {
    const size_t offset = i * kImageBlockSize;
    if ((resident[offset / os_page] & 1) == 0) continue;
    const uint8_t* block = memory + offset;
    if (BlockIsZero(block)) continue;
    image->bitmap[i / 8] = static_cast<char>(image->bitmap[i / 8] | (1 << (i % 8)));
    image->data.append(reinterpret_cast<const char*>(block), kImageBlockSize);
  }
}

absl::StatusOr<std::string> EncodeSnapshot(const SnapshotImage& image, std::string_view key) {
  if (key.empty()) return FailedPrecondition("snapshot: no HMAC key");
  std::string body;
  body.reserve(12 + image.host_state.size() + image.bitmap.size() + image.data.size());
  PutU32(&body, static_cast<uint32_t>(image.host_state.size()));
  body += image.host_state;
  PutU32(&body, image.pages);
  body += image.bitmap;
  body += image.data;

  std::string compressed(ZSTD_compressBound(body.size()), '\0');
  size_t compressed_size =
      ZSTD_compress(compressed.data(), compressed.size(), body.data(), body.size(), kZstdLevel);
  if (ZSTD_isError(compressed_size)) {
    return Internal(fmt::format("snapshot: zstd: {}", ZSTD_getErrorName(compressed_size)));
  }
  compressed.resize(compressed_size);

  std::string out(kMagic, kMagicSize);
  PutU32(&out, kSnapshotFormatVersion);
  PutU32(&out, static_cast<uint32_t>(image.build_id.size()));
  out += image.build_id;
  PutU64(&out, body.size());
  PutU64(&out, compressed.size());
  out += compressed;
  out += Mac(key, out);
  return out;
}

absl::StatusOr<SnapshotImage> DecodeSnapshot(std::string_view bytes, std::string_view key,
                                             std::string_view this_build, BuildCheck check) {
  if (key.empty()) return FailedPrecondition("snapshot: no HMAC key");
  if (bytes.size() < kMagicSize + kMacSize || bytes.substr(0, kMagicSize) != kMagic) {
    return InvalidArgument("not an interpreter snapshot (bad magic)");
  }
  std::string_view signed_part = bytes.substr(0, bytes.size() - kMacSize);
  std::string mac = Mac(key, signed_part);
  if (!memeql_sec(mac.data(), bytes.data() + signed_part.size(), kMacSize)) {
    return PermissionDenied(
        "snapshot signature does not match: it was modified, or signed with another key");
  }
  Reader r(signed_part.substr(kMagicSize));
  uint32_t version = 0, build_len = 0;
  uint64_t body_size = 0, compressed_size = 0;
  std::string_view build, compressed;
  if (!r.U32(&version)) return InvalidArgument("snapshot: truncated header");
  if (version != kSnapshotFormatVersion) {
    return FailedPrecondition(fmt::format("snapshot format version {}, this build reads {}",
                                          version, kSnapshotFormatVersion));
  }
  if (!r.U32(&build_len) || build_len > 256 || !r.Bytes(build_len, &build) || !r.U64(&body_size) ||
      !r.U64(&compressed_size) || !r.Bytes(compressed_size, &compressed) || r.remaining() != 0) {
    return InvalidArgument("snapshot: malformed header");
  }
  if (check == BuildCheck::kSameBuild && build != this_build) {
    return FailedPrecondition(fmt::format(
        "snapshot was written by interpreter build {}, this is build {}: it cannot resume here; "
        "replay its journal instead",
        build.substr(0, 12), this_build.substr(0, 12)));
  }
  if (body_size > kMaxBody) return InvalidArgument("snapshot: body too large");

  SnapshotImage image;
  image.build_id = std::string(build);
  std::string body(body_size, '\0');
  size_t out_size = ZSTD_decompress(body.data(), body.size(), compressed.data(), compressed.size());
  if (ZSTD_isError(out_size) || out_size != body_size) {
    return InvalidArgument(
        fmt::format("snapshot: body does not decompress ({})",
                    ZSTD_isError(out_size) ? ZSTD_getErrorName(out_size) : "wrong size"));
  }
  Reader b(body);
  uint32_t host_len = 0;
  std::string_view host, bitmap, data;
  if (!b.U32(&host_len) || !b.Bytes(host_len, &host) || !b.U32(&image.pages) ||
      image.pages > 65536 || !b.Bytes((uint64_t{image.pages} * kBlocksPerPage + 7) / 8, &bitmap)) {
    return InvalidArgument("snapshot: malformed body");
  }
  size_t nonzero = 0;
  for (size_t i = 0; i < size_t{image.pages} * kBlocksPerPage; ++i) {
    nonzero += (bitmap[i / 8] >> (i % 8)) & 1;
  }
  if (!b.Bytes(uint64_t{nonzero} * kImageBlockSize, &data) || b.remaining() != 0) {
    return InvalidArgument("snapshot: page data does not match its bitmap");
  }
  image.host_state = std::string(host);
  image.bitmap = std::string(bitmap);
  image.data = std::string(data);
  return image;
}

}  // namespace airlock::interp::internal
