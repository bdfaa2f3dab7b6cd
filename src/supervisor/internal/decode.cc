#include "supervisor/internal/decode.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string_view>

#include "fmt/format.h"
#include "supervisor/policy.h"

namespace airlock::supervisor::internal {
namespace {

constexpr size_t kMaxPath = 4096;
constexpr size_t kMaxArg = 256;
constexpr size_t kMaxArgv = 8;
constexpr size_t kMaxSockaddr = sizeof(sockaddr_storage);
// The kernel takes an IPv6 address without its scope id (SIN6_LEN_RFC2133).
constexpr size_t kMinSockaddrIn6 = 24;

// Numbers of the decoded calls on this architecture (-1 where it has no such call).
struct Numbers {
  int open = SyscallNumber("open");
  int openat = SyscallNumber("openat");
  int openat2 = SyscallNumber("openat2");
  int creat = SyscallNumber("creat");
  int execve = SyscallNumber("execve");
  int execveat = SyscallNumber("execveat");
  int connect = SyscallNumber("connect");
  int bind = SyscallNumber("bind");
  int sendto = SyscallNumber("sendto");
  int sendmsg = SyscallNumber("sendmsg");
  int clone = SyscallNumber("clone");
};

const Numbers& Nr() {
  static const Numbers numbers;
  return numbers;
}

// A NUL-terminated string of at most `max` bytes; longer ones end in "...".
std::string ReadString(MemoryReader* mem, uint64_t address, size_t max) {
  if (mem == nullptr || address == 0) return "";
  std::string out;
  char buf[256];
  while (out.size() < max) {
    // Never read across a page boundary in one go: the next page may be unmapped.
    size_t to_page_end = 4096 - ((address + out.size()) & 4095);
    size_t n = std::min({sizeof(buf), to_page_end, max - out.size()});
    ssize_t got = mem->Read(address + out.size(), buf, n);
    if (got <= 0) break;
    const char* nul = static_cast<const char*>(std::memchr(buf, 0, static_cast<size_t>(got)));
    if (nul != nullptr) return out.append(buf, static_cast<size_t>(nul - buf));
    out.append(buf, static_cast<size_t>(got));
  }
  return out.size() >= max ? out + "..." : out;
}

bool ReadExact(MemoryReader* mem, uint64_t address, void* buf, size_t n) {
  return mem != nullptr && address != 0 && mem->Read(address, buf, n) == static_cast<ssize_t>(n);
}

std::string ReadSockaddr(MemoryReader* mem, uint64_t address, uint64_t len) {
  if (address == 0) return "";
  sockaddr_storage ss = {};
  size_t n = static_cast<size_t>(std::min<uint64_t>(len, kMaxSockaddr));
  if (mem == nullptr || n < sizeof(sa_family_t)) return "";
  ssize_t got = mem->Read(address, &ss, n);
  if (got < static_cast<ssize_t>(sizeof(sa_family_t))) return "";
  return FormatSockaddr(&ss, static_cast<size_t>(got));
}

std::string RawArgs(const uint64_t (&args)[6]) {
  return fmt::format("args={:#x},{:#x},{:#x},{:#x},{:#x},{:#x}", args[0], args[1], args[2], args[3],
                     args[4], args[5]);
}

void DecodeExec(uint64_t path, uint64_t argv, MemoryReader* mem, DecodedCall* d) {
  d->kind = SyscallEventKind::kExec;
  d->event.path = ReadString(mem, path, kMaxPath);
  for (size_t i = 0; i < kMaxArgv; ++i) {
    uint64_t p = 0;
    if (!ReadExact(mem, argv + 8 * i, &p, sizeof(p)) || p == 0) break;
    d->event.argv.push_back(ReadString(mem, p, kMaxArg));
  }
}

}  // namespace

ssize_t ProcessVmReader::Read(uint64_t address, void* buf, size_t n) {
  struct iovec local = {buf, n};
  struct iovec remote = {reinterpret_cast<void*>(address), n};
  return ::process_vm_readv(tid_, &local, 1, &remote, 1, 0);
}

ssize_t ProcMemReader::Read(uint64_t address, void* buf, size_t n) {
  return ::pread(mem_.get(), buf, n, static_cast<off_t>(address));
}

bool ReadsMemory(int nr) {
  const Numbers& k = Nr();
  for (int x : {k.open, k.openat, k.openat2, k.creat, k.execve, k.execveat, k.connect, k.bind,
                k.sendto, k.sendmsg}) {
    if (x >= 0 && nr == x) return true;
  }
  return false;
}

std::string OpenMode(uint64_t flags) {
  std::string mode;
  switch (flags & O_ACCMODE) {
    case O_RDONLY:
      mode = "r";
      break;
    case O_WRONLY:
      mode = "w";
      break;
    default:
      mode = "rw";
      break;
  }
  if (flags & O_CREAT) mode += "+create";
  if (flags & O_TRUNC) mode += "+trunc";
  if (flags & O_APPEND) mode += "+append";
  return mode;
}

std::optional<InetEndpoint> DecodeInetSockaddr(const void* addr, size_t len) {
  sa_family_t family;
  if (len < sizeof(family)) return std::nullopt;
  std::memcpy(&family, addr, sizeof(family));
  char text[INET6_ADDRSTRLEN] = {};
  InetEndpoint e;
  if (family == AF_INET && len >= sizeof(sockaddr_in)) {
    sockaddr_in in;
    std::memcpy(&in, addr, sizeof(in));
    inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text));
    e.port = ntohs(in.sin_port);
  } else if (family == AF_INET6 && len >= kMinSockaddrIn6) {
    sockaddr_in6 in6 = {};  // the scope id stays zero when absent
    std::memcpy(&in6, addr, std::min(len, sizeof(in6)));
    inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text));
    e.port = ntohs(in6.sin6_port);
  } else {
    return std::nullopt;
  }
  e.address = text;
  return e;
}

std::string FormatSockaddr(const void* addr, size_t len) {
  sa_family_t family;
  std::memcpy(&family, addr, sizeof(family));
  if (std::optional<InetEndpoint> inet = DecodeInetSockaddr(addr, len)) {
    return family == AF_INET6 ? fmt::format("[{}]:{}", inet->address, inet->port)
                              : fmt::format("{}:{}", inet->address, inet->port);
  }
  if (family == AF_UNIX) {
    const char* path = static_cast<const char*>(addr) + offsetof(sockaddr_un, sun_path);
    size_t n = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
    if (n == 0) return "unix:";
    if (path[0] == '\0') return fmt::format("unix:@{}", std::string_view(path + 1, n - 1));
    return fmt::format("unix:{}", std::string_view(path, strnlen(path, n)));
  }
  if (family == AF_NETLINK) return "netlink";
  return fmt::format("family {}", family);
}

std::string CloneFlags(uint64_t flags) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {CLONE_VM, "CLONE_VM"},
      {CLONE_FS, "CLONE_FS"},
      {CLONE_FILES, "CLONE_FILES"},
      {CLONE_SIGHAND, "CLONE_SIGHAND"},
      {CLONE_PIDFD, "CLONE_PIDFD"},
      {CLONE_PTRACE, "CLONE_PTRACE"},
      {CLONE_VFORK, "CLONE_VFORK"},
      {CLONE_PARENT, "CLONE_PARENT"},
      {CLONE_THREAD, "CLONE_THREAD"},
      {CLONE_NEWNS, "CLONE_NEWNS"},
      {CLONE_SYSVSEM, "CLONE_SYSVSEM"},
      {CLONE_SETTLS, "CLONE_SETTLS"},
      {CLONE_PARENT_SETTID, "CLONE_PARENT_SETTID"},
      {CLONE_CHILD_CLEARTID, "CLONE_CHILD_CLEARTID"},
      {CLONE_UNTRACED, "CLONE_UNTRACED"},
      {CLONE_CHILD_SETTID, "CLONE_CHILD_SETTID"},
      {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"},
      {CLONE_NEWUTS, "CLONE_NEWUTS"},
      {CLONE_NEWIPC, "CLONE_NEWIPC"},
      {CLONE_NEWUSER, "CLONE_NEWUSER"},
      {CLONE_NEWPID, "CLONE_NEWPID"},
      {CLONE_NEWNET, "CLONE_NEWNET"},
      {CLONE_IO, "CLONE_IO"},
  };
  std::string out;
  auto add = [&](std::string_view part) {
    if (!out.empty()) out += '|';
    out += part;
  };
  uint64_t rest = flags & ~uint64_t{0xff};
  for (const auto& [bit, name] : kNames) {
    if (rest & bit) {
      add(name);
      rest &= ~bit;
    }
  }
  if (rest != 0) add(fmt::format("{:#x}", rest));
  // The low byte is the signal sent to the parent when the child ends.
  int sig = static_cast<int>(flags & 0xff);
  if (sig != 0) {
    const char* name = sigabbrev_np(sig);
    add(name ? fmt::format("SIG{}", name) : fmt::format("signal {}", sig));
  }
  return out.empty() ? "0" : out;
}

DecodedCall Decode(int nr, const uint64_t (&args)[6], MemoryReader* mem) {
  const Numbers& k = Nr();
  DecodedCall d;
  d.event.syscall = SyscallName(nr);
  if (nr < 0) return d;
  if (nr == k.openat || nr == k.open || nr == k.creat || nr == k.openat2) {
    d.kind = SyscallEventKind::kFileOpened;
    const bool at = nr == k.openat || nr == k.openat2;
    d.event.path = ReadString(mem, args[at ? 1 : 0], kMaxPath);
    uint64_t flags = O_WRONLY | O_CREAT | O_TRUNC;  // creat
    if (nr == k.openat) flags = args[2];
    if (nr == k.open) flags = args[1];
    if (nr == k.openat2) {
      struct open_how how = {};
      flags = ReadExact(mem, args[2], &how, sizeof(how.flags)) ? how.flags : 0;
    }
    d.event.mode = OpenMode(flags);
    if (at && static_cast<int>(args[0]) != AT_FDCWD && !d.event.path.starts_with('/')) {
      d.event.detail = fmt::format("dirfd={}", static_cast<int>(args[0]));
    }
  } else if (nr == k.execve) {
    DecodeExec(args[0], args[1], mem, &d);
  } else if (nr == k.execveat) {
    DecodeExec(args[1], args[2], mem, &d);
    if (d.event.path.empty()) d.event.path = fmt::format("fd:{}", static_cast<int>(args[0]));
  } else if (nr == k.connect || nr == k.bind) {
    if (nr == k.connect) d.kind = SyscallEventKind::kConnect;
    d.event.address = ReadSockaddr(mem, args[1], args[2]);
  } else if (nr == k.sendto) {
    d.event.address = ReadSockaddr(mem, args[4], args[5]);
    if (!d.event.address.empty()) d.kind = SyscallEventKind::kConnect;
  } else if (nr == k.sendmsg) {
    struct msghdr msg = {};
    if (ReadExact(mem, args[1], &msg, sizeof(msg))) {
      d.event.address =
          ReadSockaddr(mem, reinterpret_cast<uint64_t>(msg.msg_name), msg.msg_namelen);
    }
    if (!d.event.address.empty()) d.kind = SyscallEventKind::kConnect;
  } else if (nr == k.clone) {
    d.event.detail = fmt::format("flags={}", CloneFlags(args[0]));
  } else {
    d.event.detail = RawArgs(args);
  }
  return d;
}

}  // namespace airlock::supervisor::internal
