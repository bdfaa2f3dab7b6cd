#include "common/sha256.h"

#include <nettle/sha2.h>

namespace airlock {

struct Sha256::State {
  struct sha256_ctx ctx;
};

Sha256::Sha256() : state_(std::make_unique<State>()) { sha256_init(&state_->ctx); }

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Update(std::string_view data) {
  sha256_update(&state_->ctx, data.size(), reinterpret_cast<const uint8_t*>(data.data()));
}

std::string Sha256::HexDigest() {
  uint8_t md[SHA256_DIGEST_SIZE];
  sha256_digest(&state_->ctx, sizeof(md), md);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(md));
  for (uint8_t b : md) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.HexDigest();
}

}  // namespace airlock
