#include <errno.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "engine/internal/plan.h"

namespace airlock::engine::internal {

int LoopbackUp() {
  int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return errno;
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  int err = 0;
  if (::ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) {
    err = errno;
  } else {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    if (::ioctl(sock, SIOCSIFFLAGS, &ifr) != 0) err = errno;
  }
  ::close(sock);
  return err;
}

}  // namespace airlock::engine::internal
