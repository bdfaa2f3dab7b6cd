#include "common/sha256.h"

// OpenSSL's one-shot SHA-256 functions (deprecated in 3.0 in favour of EVP, still shipped) run
// the same implementation as EVP without its provider machinery, whose first use in a process
// costs 1-3 ms: the price of a hashed empty output in every `airlock run`.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

namespace airlock {

struct Sha256::State {
  SHA256_CTX ctx;
};

Sha256::Sha256() : state_(std::make_unique<State>()) { SHA256_Init(&state_->ctx); }

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Update(std::string_view data) {
  SHA256_Update(&state_->ctx, data.data(), data.size());
}

std::string Sha256::HexDigest() {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256_Final(md, &state_->ctx);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * SHA256_DIGEST_LENGTH);
  for (unsigned char b : md) {
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
