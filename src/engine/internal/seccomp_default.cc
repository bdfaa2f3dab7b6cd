#include <linux/filter.h>

#include "engine/internal/seccomp.h"

namespace airlock::engine::internal {
namespace {

// kDefaultSeccompFilter, written at build time by seccomp_gen.cc.
#include "engine/internal/default_seccomp_filter.inc"

static_assert(sizeof(kDefaultSeccompFilter) % sizeof(struct sock_filter) == 0);

}  // namespace

std::string_view DefaultSeccompFilter() {
  return std::string_view(reinterpret_cast<const char*>(kDefaultSeccompFilter),
                          sizeof(kDefaultSeccompFilter));
}

}  // namespace airlock::engine::internal
