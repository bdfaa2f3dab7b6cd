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
//                               bytes policy filter, u32 PolicyListener, u32 SpawnStart}
//                              + fds {stdin, stdout, stderr, cgroup fds...}
//   init -> host  kSpawned     {u64 id, i32 errno (0 = forked), i32 pid (in the sandbox)}
//                              + fd {pidfd of the process} when errno == 0
//   host -> init  kStart       {i32 pid}: the host has placed the process in its cgroup or
//                              attached to it; run it (SpawnStart::kOnStart only)
//   host -> init  kSignal      {i32 pid, i32 signal}: signal the process group of pid
//   init -> host  kExited      {i32 pid, i32 wait status, i32 SetupStage, i32 errno}
//   host -> init  kFileOp      {u64 id, u32 FileOp, string path, u32 mode, u32 flags,
//                               u64 max bytes} + fds {data pipe end, result socket}
//   worker -> host kFileDone   on the result socket: {u64 id, i32 errno, string message,
//                               u32 n, n x FileEntry}
//   host -> init  kFilterSelf  {bytes seccomp filter, bytes observer filter}: airlock-init installs
//                              the profile filter on itself (see "Seccomp" below), after the
//                              observer filter when there is one
//   init -> host  kFilteredSelf {i32 errno (0 = installed)} + the observer's listener, if any
//
// A file operation is done by a worker process that airlock-init forks (so init keeps serving),
// as the sandbox's user, beneath one of the sandbox's file areas (FileRoots below). A read
// streams the file into the data pipe; a write reads the data pipe to its end into a temporary
// file beside the target, then waits for one byte on the result socket: 'C' renames it into
// place, anything else (or the socket closing) discards it, so an interrupted upload never
// leaves a partial file. FileEntry: {string name, u32 FileType, u64 size, u32 mode,
// i64 mtime seconds, string symlink target}.
//
// With kWriteSelf (cgroup v1), the cgroup fds are "tasks" files the process writes "0" to
// before anything else: it moves itself, with no migration by anyone (engine/cgroup.h,
// Cgroup::Entry). With kNone the host places the process in its cgroup. SpawnStart says whether
// the process then goes on at once (kAtOnce: no round trip through the host) or waits for kStart
// (kOnStart: the host has something to do first, placing it in its cgroup or attaching a ptrace
// supervisor to it); kNone needs kOnStart.
//
// The spawned process (after kStart with kOnStart): new session, stdio, every other fd closed,
// working directory, rlimits, seccomp filters last (InstallFilters), execve (PATH searched in its
// own env). If it cannot start it writes "airlock: ..." to its stderr and exits 127 (not found)
// or 126.
//
// Seccomp, inherited: a sandbox without a syscall policy has airlock-init put the profile filter
// on itself once (kFilterSelf, before any spawn). Every process it forks afterwards, commands and
// file workers, starts under that same filter (a filter is inherited by fork and cannot be
// removed), so spawn requests then carry no profile filter and no command loads and compiles
// it again. The observer filter (supervisor/connect_observer.h) goes on first, with a
// user-notification listener that airlock-init passes to the host with its answer and closes:
// airlock-init itself never makes a call it routes, and everything forked afterwards does so
// under it. The command's own setup (cgroup join, stdio, working directory, rlimits) then runs
// under the filter too; only a stricter order than installing it last.
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

// 3: file operations, one sendmsg per message, SpawnStart, the policy filter and its listener.
// 4: kFilterSelf.
// 5: kFilterSelf's observer filter and listener.
inline constexpr uint32_t kProtocolVersion = 5;
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
  kFileOp = 7,
  kFileDone = 8,
  kFilterSelf = 9,
  kFilteredSelf = 10,
};

enum class FileOp : uint32_t {
  kRead = 1,
  kWrite = 2,
  kList = 3,
  kStat = 4,
  kMkdir = 5,
  kRemove = 6
};
// FileRequest::flags.
inline constexpr uint32_t kFileParents = 1;    // mkdir -p; a write creates missing parents
inline constexpr uint32_t kFileRecursive = 2;  // remove a directory and everything in it
enum class FileType : uint32_t { kFile = 1, kDirectory = 2, kSymlink = 3, kOther = 4 };

// Where file operations may act, inside the sandbox: the writable areas of the layout.
inline constexpr const char* kFileRoots[] = {"/sandbox/workspace", "/sandbox/artifacts",
                                             "/sandbox/tmp", "/sandbox/home", "/sandbox/cache"};

// Splits an absolute sandbox path into its file root and the rest ("src/a.c"; empty for the
// root itself). False when the path is not under a file root, is not absolute, holds NUL or a
// ".." component, or is longer than 4096 bytes.
bool SplitFileRoot(std::string_view path, std::string* root, std::string* rest);

struct FileRequest {
  uint64_t id = 0;
  FileOp op = FileOp::kStat;
  std::string path;
  uint32_t mode = 0644;
  uint32_t flags = 0;
  uint64_t max_bytes = 0;  // reads and writes: the largest file accepted
};

struct FileEntry {
  std::string name;
  FileType type = FileType::kOther;
  uint64_t size = 0;
  uint32_t mode = 0;
  int64_t mtime = 0;
  std::string target;  // symlinks
};

struct FileDone {
  uint64_t id = 0;
  int32_t err = 0;                 // errno of the failure, 0 on success
  std::string message;             // what failed ("open src/a.c")
  std::vector<FileEntry> entries;  // list: the directory's entries; stat and read: the file
};

std::string EncodeFileRequest(const FileRequest& r);
bool DecodeFileRequest(std::string_view payload, FileRequest* r);
std::string EncodeFileDone(const FileDone& d);
bool DecodeFileDone(std::string_view payload, FileDone* d);

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

enum class SpawnStart : uint32_t { kAtOnce = 0, kOnStart = 1 };

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
  SpawnStart start = SpawnStart::kOnStart;
};

// Installs the seccomp filters of a spawned process, in the order the handshake above needs:
// async-signal-safe, no allocation (runs between fork and exec). Returns 0 or an errno value.
// `listener_fd` is where the listener must land (kListenerFd in airlock-init; tests pass their
// own); the caller makes sure every lower descriptor is open and that one is free.
int InstallFilters(std::string_view profile, std::string_view policy, PolicyListener listener,
                   int listener_fd);

// Installs airlock-init's own filters (kFilterSelf): `observer` (if not empty) with a listener,
// whose descriptor is stored in *listener (-1 without), then `profile`. Returns 0 or an errno
// value (and no listener).
int InstallSelfFilters(std::string_view profile, std::string_view observer, int* listener);

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

// The framing alone, with any frame type: for other protocols on the same wire format (the
// shim's, src/shim/protocol.h).
int SendFrame(int sock, uint32_t type, std::string_view payload, const int* fds = nullptr,
              int nfds = 0);
int ReceiveFrame(int sock, uint32_t* type, std::string* payload, int* fds, int* nfds);

// For readers that take no descriptors: any that arrive with the frame are closed.
int ReceiveFrame(int sock, uint32_t* type, std::string* payload);

// A frame's 8-byte header: its type and its payload's length (for a reader of its own, such as
// the fork-server's, which holds a request to a deadline).
inline constexpr size_t kFrameHeaderBytes = 8;
void DecodeFrameHeader(const char* header, uint32_t* type, uint32_t* length);
int ReceiveMessage(int sock, MessageType* type, std::string* payload);

}  // namespace airlock::init

#endif  // AIRLOCK_INIT_PROTOCOL_H_
