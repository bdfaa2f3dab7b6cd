#include "spec/kernel_names.h"

#include <linux/capability.h>
#include <seccomp.h>
#include <string.h>

#include <string>

namespace airlock::spec {
namespace {

struct CapabilityName {
  const char* name;
  int value;
};

#define AIRLOCK_CAPABILITY(cap) \
  { #cap, cap }
constexpr CapabilityName kCapabilities[] = {
    AIRLOCK_CAPABILITY(CAP_CHOWN),
    AIRLOCK_CAPABILITY(CAP_DAC_OVERRIDE),
    AIRLOCK_CAPABILITY(CAP_DAC_READ_SEARCH),
    AIRLOCK_CAPABILITY(CAP_FOWNER),
    AIRLOCK_CAPABILITY(CAP_FSETID),
    AIRLOCK_CAPABILITY(CAP_KILL),
    AIRLOCK_CAPABILITY(CAP_SETGID),
    AIRLOCK_CAPABILITY(CAP_SETUID),
    AIRLOCK_CAPABILITY(CAP_SETPCAP),
    AIRLOCK_CAPABILITY(CAP_LINUX_IMMUTABLE),
    AIRLOCK_CAPABILITY(CAP_NET_BIND_SERVICE),
    AIRLOCK_CAPABILITY(CAP_NET_BROADCAST),
    AIRLOCK_CAPABILITY(CAP_NET_ADMIN),
    AIRLOCK_CAPABILITY(CAP_NET_RAW),
    AIRLOCK_CAPABILITY(CAP_IPC_LOCK),
    AIRLOCK_CAPABILITY(CAP_IPC_OWNER),
    AIRLOCK_CAPABILITY(CAP_SYS_MODULE),
    AIRLOCK_CAPABILITY(CAP_SYS_RAWIO),
    AIRLOCK_CAPABILITY(CAP_SYS_CHROOT),
    AIRLOCK_CAPABILITY(CAP_SYS_PTRACE),
    AIRLOCK_CAPABILITY(CAP_SYS_PACCT),
    AIRLOCK_CAPABILITY(CAP_SYS_ADMIN),
    AIRLOCK_CAPABILITY(CAP_SYS_BOOT),
    AIRLOCK_CAPABILITY(CAP_SYS_NICE),
    AIRLOCK_CAPABILITY(CAP_SYS_RESOURCE),
    AIRLOCK_CAPABILITY(CAP_SYS_TIME),
    AIRLOCK_CAPABILITY(CAP_SYS_TTY_CONFIG),
    AIRLOCK_CAPABILITY(CAP_MKNOD),
    AIRLOCK_CAPABILITY(CAP_LEASE),
    AIRLOCK_CAPABILITY(CAP_AUDIT_WRITE),
    AIRLOCK_CAPABILITY(CAP_AUDIT_CONTROL),
    AIRLOCK_CAPABILITY(CAP_SETFCAP),
    AIRLOCK_CAPABILITY(CAP_MAC_OVERRIDE),
    AIRLOCK_CAPABILITY(CAP_MAC_ADMIN),
    AIRLOCK_CAPABILITY(CAP_SYSLOG),
    AIRLOCK_CAPABILITY(CAP_WAKE_ALARM),
    AIRLOCK_CAPABILITY(CAP_BLOCK_SUSPEND),
    AIRLOCK_CAPABILITY(CAP_AUDIT_READ),
    AIRLOCK_CAPABILITY(CAP_PERFMON),
    AIRLOCK_CAPABILITY(CAP_BPF),
    AIRLOCK_CAPABILITY(CAP_CHECKPOINT_RESTORE),
};
#undef AIRLOCK_CAPABILITY

// Larger than any errno Linux defines (EHWPOISON is 133).
constexpr int kMaxErrno = 256;

constexpr std::string_view kArgOps[] = {"eq", "ne", "lt", "le", "gt", "ge", "masked_eq"};

}  // namespace

std::optional<int> CapabilityFromName(std::string_view name) {
  for (const CapabilityName& cap : kCapabilities) {
    if (name == cap.name) return cap.value;
  }
  return std::nullopt;
}

std::optional<int> ErrnoFromName(std::string_view name) {
  if (name.size() < 2 || name[0] != 'E') return std::nullopt;
  for (int err = 1; err < kMaxErrno; ++err) {
    // glibc >= 2.32; nullptr for numbers that are not errno values.
    const char* known = strerrorname_np(err);
    if (known != nullptr && name == known) return err;
  }
  return std::nullopt;
}

const std::vector<std::string_view>& SyscallArchitectures() {
  static const std::vector<std::string_view> kArchitectures = {"x86_64", "aarch64"};
  return kArchitectures;
}

std::optional<int> SyscallNumber(std::string_view arch, std::string_view name) {
  if (name.empty() || name.size() > 64) return std::nullopt;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return std::nullopt;
  }
  uint32_t token = arch == "x86_64" ? SCMP_ARCH_X86_64 : arch == "aarch64" ? SCMP_ARCH_AARCH64 : 0;
  if (token == 0) return std::nullopt;
  std::string copy(name);
  // libseccomp answers a negative pseudo-number for names it knows from other architectures
  // ("socketcall" on x86_64); only a real number means the architecture has the call.
  int nr = seccomp_syscall_resolve_name_arch(token, copy.c_str());
  if (nr < 0) return std::nullopt;
  return nr;
}

bool IsKnownSyscall(std::string_view name) {
  for (std::string_view arch : SyscallArchitectures()) {
    if (SyscallNumber(arch, name).has_value()) return true;
  }
  return false;
}

std::optional<SyscallAction> ParseSyscallAction(std::string_view text) {
  using Kind = SyscallAction::Kind;
  if (text == "allow") return SyscallAction{Kind::kAllow, 0};
  if (text == "kill") return SyscallAction{Kind::kKill, 0};
  if (text == "trace") return SyscallAction{Kind::kTrace, 0};
  if (text == "notify") return SyscallAction{Kind::kNotify, 0};
  constexpr std::string_view kErrnoOpen = "errno(";
  if (text.size() > kErrnoOpen.size() + 1 && text.substr(0, kErrnoOpen.size()) == kErrnoOpen &&
      text.back() == ')') {
    std::string_view name = text.substr(kErrnoOpen.size(), text.size() - kErrnoOpen.size() - 1);
    if (std::optional<int> err = ErrnoFromName(name)) return SyscallAction{Kind::kErrno, *err};
  }
  return std::nullopt;
}

bool IsSyscallArgOp(std::string_view op) {
  for (std::string_view known : kArgOps) {
    if (op == known) return true;
  }
  return false;
}

}  // namespace airlock::spec
