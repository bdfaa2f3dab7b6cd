// Thin wrappers for system calls glibc 2.36 does not wrap, and kernel constants newer than
// Debian 12's headers. Async-signal-safe and allocation-free: usable between clone and exec.
#ifndef AIRLOCK_ENGINE_INTERNAL_SYSCALLS_H_
#define AIRLOCK_ENGINE_INTERNAL_SYSCALLS_H_

#include <linux/landlock.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>

namespace airlock::engine::internal {

inline long Clone3(struct clone_args* args) {
  return ::syscall(SYS_clone3, args, sizeof(*args));
}

inline int Openat2(int dirfd, const char* path, uint64_t flags, uint64_t resolve) {
  struct open_how how = {};
  how.flags = flags;
  how.resolve = resolve;
  return static_cast<int>(::syscall(SYS_openat2, dirfd, path, &how, sizeof(how)));
}

inline int PivotRoot(const char* new_root, const char* put_old) {
  return static_cast<int>(::syscall(SYS_pivot_root, new_root, put_old));
}

inline int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// Landlock. The ABI version tells which rights and fields the kernel knows.
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
inline constexpr uint64_t kLandlockAccessFsIoctlDev = 1ULL << 15;  // ABI 5
inline constexpr uint64_t kLandlockScopeAbstractUnixSocket = 1ULL << 0;  // ABI 6
inline constexpr uint64_t kLandlockScopeSignal = 1ULL << 1;              // ABI 6

// struct landlock_ruleset_attr as of ABI 6; the size passed to the kernel selects the fields.
struct LandlockRulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

inline int LandlockCreateRuleset(const LandlockRulesetAttr* attr, size_t size, uint32_t flags) {
  return static_cast<int>(::syscall(SYS_landlock_create_ruleset, attr, size, flags));
}
inline int LandlockAddRule(int ruleset_fd, const struct landlock_path_beneath_attr* attr) {
  return static_cast<int>(
      ::syscall(SYS_landlock_add_rule, ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, attr, 0));
}
inline int LandlockRestrictSelf(int ruleset_fd) {
  return static_cast<int>(::syscall(SYS_landlock_restrict_self, ruleset_fd, 0));
}

// The highest Landlock ABI of the running kernel; 0 when Landlock is unavailable.
inline int LandlockAbi() {
  int v = LandlockCreateRuleset(nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v < 0 ? 0 : v;
}

}  // namespace airlock::engine::internal

#endif  // AIRLOCK_ENGINE_INTERNAL_SYSCALLS_H_
