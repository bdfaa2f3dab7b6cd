#include "common/ids.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace airlock {

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  size_t filled = 0;
  while (filled < bytes) {
    ssize_t n = getrandom(buf.data() + filled, bytes - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::abort();  // getrandom only fails on programming errors (EFAULT, EINVAL).
    }
    filled += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (unsigned char c : buf) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

}  // namespace airlock
