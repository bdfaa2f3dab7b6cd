// The control protocol between the host side of a sandbox and airlock-init (PID 1 inside it).
//
// Transport: a SOCK_STREAM unix socket (inherited by airlock-init as fd 3). Every message is a
// header {uint32 type, uint32 payload length} followed by the payload; file descriptors travel
// as SCM_RIGHTS attached to the header. Integers are little-endian; strings and byte arrays are
// a uint32 length followed by the bytes. Payloads are at most kMaxPayload bytes.
//
//   init -> host  kReady       {u32 protocol version}
//   host -> init  kSpawn       {u64 id, strings argv, strings env ("K=V"), string cwd,
//                               u32 n, n x {u32 resource, u64 soft, u64 hard},
//                               bytes seccomp filter (struct sock_filter[]), u32 CgroupJoin,
//                               bytes policy filter, u32 PolicyListener}
//                              + fds {stdin, stdout, stderr, cgroup fds...}
//   init -> host  kSpawned     {u64 id, i32 errno (0 = forked), i32 pid (in the sandbox)}
//                              + fd {pidfd of the process} when errno == 0
//   host -> init  kStart       {i32 pid}: the host has placed the process in its cgroup; run it
//   host -> init  kSignal      {i32 pid, i32 signal}: signal the process group of pid
//   init -> host  kExited      {i32 pid, i32 wait status, i32 SetupStage, i32 errno}
//
// With kWriteSelf (cgroup v1), the cgroup fds are "tasks" files the process writes "0" to
// before anything else: it moves itself, with no migration by anyone (engine/cgroup.h,
// Cgroup::Entry). With kNone the host places the process before kStart.
//
// The spawned process waits for kStart, then: new session, stdio, every other fd closed,
// working directory, rlimits, seccomp filters last (InstallFilters), execve (PATH searched in its
// own env). If it cannot start it writes "airlock: ..." to its stderr and exits 127 (not found)
// or 126.
//
// Seccomp: the profile filter (the engine's built-in profile) and, when the spec has a syscall
// policy, the policy filter (supervisor/policy.h); the kernel applies the more restrictive answer
// of the two. With PolicyListener::kNotify the policy filter carries a user-notification
// listener for the host's supervisor, and the process hands it over without sending anything:
// the listener lands at fd kListenerFd (fds 0-3 are taken, the lowest free number is used), the
// process then blocks in a handshake call the policy filter always routes to the listener, the
// host takes the listener with pidfd_getfd(2) and answers; the process installs the profile
// filter, says so with a second handshake call, and executes. Until that second call everything
// the process does is airlock's own code; the supervisor lets it through.
//
// This header is used by both sides and by the static airlock-init binary: plain C++ only.
#ifndef AIRLOCK_INIT_PROTOCOL_H_
#define AIRLOCK_INIT_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::init {

inline constexpr uint32_t kProtocolVersion = 2;
inline constexpr uint32_t kMaxPayload = 16u << 20;
inline constexpr int kControlFd = 3;  // where airlock-init finds its control socket
inline constexpr int kMaxFds = 16;

enum class MessageType : uint32_t {
  kReady = 1,
  kSpawn = 2,
  kSpawned = 3,
  kStart = 4,
  kSignal = 5,
  kExited = 6,
};

// Where a spawned process failed before its program ran (kExited carries it).
enum class SetupStage : int32_t {
  kNone = 0,
  kStdio = 1,
  kWorkdir = 2,
  kRlimit = 3,
  kSeccomp = 4,
  kExec = 5,
};
const char* ToString(SetupStage stage);

struct Rlimit {
  uint32_t resource = 0;
  uint64_t soft = 0;
  uint64_t hard = 0;
};

enum class CgroupJoin : uint32_t { kNone = 0, kWriteSelf = 2 };

enum class PolicyListener : uint32_t { kNone = 0, kNotify = 1 };

// Where the notification listener is in a spawned process until it executes (see above).
inline constexpr int kListenerFd = 4;
// The handshake call: getppid(kHandshakeMagic, phase). getppid ignores its arguments, and the
// built-in profile allows it.
inline constexpr uint64_t kHandshakeMagic = 0x61726c6b68616e64;  // "arlkhand"
inline constexpr uint64_t kHandshakeListenerReady = 1;  // blocks until the host holds the listener
inline constexpr uint64_t kHandshakeDone = 2;           // the profile is installed; exec next

struct SpawnRequest {
  uint64_t id = 0;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;
  std::vector<Rlimit> rlimits;
  std::string seccomp_filter;  // raw struct sock_filter array; empty: no filter
  CgroupJoin cgroup_join = CgroupJoin::kNone;
  std::string policy_filter;  // empty: no syscall policy
  PolicyListener policy_listener = PolicyListener::kNone;
};

// Installs the seccomp filters of a spawned process, in the order the handshake above needs:
// async-signal-safe, no allocation (runs between fork and exec). Returns 0 or an errno value.
// `listener_fd` is where the listener must land (kListenerFd in airlock-init; tests pass their
// own); the caller makes sure every lower descriptor is open and that one is free.
int InstallFilters(std::string_view profile, std::string_view policy, PolicyListener listener,
                   int listener_fd);

// Builds a payload.
class Writer {
 public:
  void U32(uint32_t v);
  void U64(uint64_t v);
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void Bytes(std::string_view s);
  void Strings(const std::vector<std::string>& v);
  const std::string& data() const { return data_; }

 private:
  std::string data_;
};

// Reads a payload; every read is bounds-checked and failures are sticky (ok() turns false).
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  uint32_t U32();
  uint64_t U64();
  int32_t I32() { return static_cast<int32_t>(U32()); }
  std::string Bytes();
  std::vector<std::string> Strings();
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == data_.size(); }

 private:
  bool Need(size_t n);
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

std::string EncodeSpawn(const SpawnRequest& req);
bool DecodeSpawn(std::string_view payload, SpawnRequest* req);

// Sends one message with up to kMaxFds descriptors. Returns 0 or an errno value.
int SendMessage(int sock, MessageType type, std::string_view payload, const int* fds = nullptr,
                int nfds = 0);

// Receives one message. Descriptors received are stored in fds (up to kMaxFds, others closed),
// with *nfds set. Returns 0, an errno value, or -1 at end of stream.
int ReceiveMessage(int sock, MessageType* type, std::string* payload, int* fds, int* nfds);

}  // namespace airlock::init

#endif  // AIRLOCK_INIT_PROTOCOL_H_
