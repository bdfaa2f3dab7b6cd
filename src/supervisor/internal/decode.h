// Decoding of the arguments of the calls the supervisor reports: paths and open modes, programs
// and their arguments, socket addresses, clone flags. Pointer arguments are read from the
// program's memory through a MemoryReader; what they say is a report, not a fact the supervisor
// acts on (another thread of the program may rewrite them before the kernel reads them).
#ifndef AIRLOCK_SUPERVISOR_INTERNAL_DECODE_H_
#define AIRLOCK_SUPERVISOR_INTERNAL_DECODE_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "command/syscalls.h"
#include "common/unique_fd.h"

namespace airlock::supervisor::internal {

// Reads another process's memory. Partial reads (up to an unmapped page) are fine.
class MemoryReader {
 public:
  virtual ~MemoryReader() = default;
  // Bytes read into buf, or -1.
  virtual ssize_t Read(uint64_t address, void* buf, size_t n) = 0;
};

// process_vm_readv(2) on a thread that cannot go away meanwhile (a ptrace-stopped tracee).
class ProcessVmReader : public MemoryReader {
 public:
  explicit ProcessVmReader(pid_t tid) : tid_(tid) {}
  ssize_t Read(uint64_t address, void* buf, size_t n) override;

 private:
  pid_t tid_;
};

// pread(2) on /proc/<tid>/mem opened beforehand (the caller checks that the process it opened is
// still the one it means, for seccomp notifications with SECCOMP_IOCTL_NOTIF_ID_VALID).
class ProcMemReader : public MemoryReader {
 public:
  explicit ProcMemReader(UniqueFd mem) : mem_(std::move(mem)) {}
  ssize_t Read(uint64_t address, void* buf, size_t n) override;

 private:
  UniqueFd mem_;
};

struct DecodedCall {
  // The kind of event the call makes when it runs (file, exec, connect), if any.
  std::optional<SyscallEventKind> kind;
  SyscallEvent event;  // syscall name and the decoded fields; kind left to the caller
};

// Whether Decode reads memory for `nr` (a caller may avoid opening the memory otherwise).
bool ReadsMemory(int nr);

// Decodes call `nr` with `args`; `mem` may be null (pointer fields are then left empty).
DecodedCall Decode(int nr, const uint64_t (&args)[6], MemoryReader* mem);

// "r", "w" or "rw", then "+create", "+trunc", "+append" as the open flags have them.
std::string OpenMode(uint64_t flags);

// The address ("10.0.0.1", "::1") and port of an AF_INET or AF_INET6 socket address of `len`
// bytes at `addr` (an IPv6 one may lack its scope id, as the kernel allows); nullopt for other
// families and for addresses too short for their family.
struct InetEndpoint {
  std::string address;
  uint16_t port = 0;
};
std::optional<InetEndpoint> DecodeInetSockaddr(const void* addr, size_t len);

// "10.0.0.1:443", "[::1]:80", "unix:/path", "unix:@name", "netlink", "family 40".
std::string FormatSockaddr(const void* addr, size_t len);

// "CLONE_VM|CLONE_FS|SIGCHLD" (unknown bits in hex).
std::string CloneFlags(uint64_t flags);

}  // namespace airlock::supervisor::internal

#endif  // AIRLOCK_SUPERVISOR_INTERNAL_DECODE_H_
