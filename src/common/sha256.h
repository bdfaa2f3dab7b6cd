// Incremental SHA-256 (Nettle). Not thread-safe; one object per stream.
#ifndef AIRLOCK_COMMON_SHA256_H_
#define AIRLOCK_COMMON_SHA256_H_

#include <memory>
#include <string>
#include <string_view>

namespace airlock {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void Update(std::string_view data);
  // Lowercase hex digest. The object must not be updated afterwards.
  std::string HexDigest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

}  // namespace airlock

#endif  // AIRLOCK_COMMON_SHA256_H_
