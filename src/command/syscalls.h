// What a syscall supervisor saw a command do: the `syscalls` field of CommandResult, and the
// events a streaming consumer receives while the command runs.
//
// A report is bounded whatever the command does: `counts` keeps the kMaxCounts most frequent
// calls, each list keeps its first entries (files and endpoints merge repeats into a count) while
// the lists together stay under kMaxBytes of JSON, paths are cut at kMaxPathBytes and arguments,
// addresses and details at kMaxArgBytes (ending in "..."), and whatever did not fit is counted in
// `dropped`; the totals count everything.
//
// Pointer arguments (paths, socket addresses, argv) are copied from the program's memory when
// the supervisor sees the call. Another thread of the program can change that memory before the
// kernel reads it, so these fields say what the call most likely did, never what it certainly
// did (docs/supervisor.md, "What the supervisor can and cannot decide").
//
// Value types; SyscallReportBuilder and BoundedSyscallEventQueue are documented below.
#ifndef AIRLOCK_COMMAND_SYSCALLS_H_
#define AIRLOCK_COMMAND_SYSCALLS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "redact/redactor.h"

namespace airlock {

enum class SyscallEventKind {
  kDenied,      // a rule answered with an errno or killed the command
  kFileOpened,  // open, openat, openat2, creat
  kExec,        // execve, execveat
  kConnect,     // connect, sendto/sendmsg with an address, bind
};
const char* ToString(SyscallEventKind kind);  // "denied", "file", "exec", "connect"

// One call worth reporting, decoded as far as its kind allows.
struct SyscallEvent {
  SyscallEventKind kind = SyscallEventKind::kDenied;
  std::string syscall;            // "openat"
  std::string action;             // kDenied: "errno(EACCES)" or "kill"
  int rule = -1;                  // kDenied: index in process.syscalls; -1 the default action
  std::string path;               // a file opened or a program executed
  std::string mode;               // files: "r", "w" or "rw", then "+create", "+trunc", "+append"
  std::vector<std::string> argv;  // kExec: the first arguments
  std::string address;            // "10.0.0.1:443", "[::1]:80", "unix:/run/x", "unix:@name"
  std::string detail;             // other decoded arguments ("flags=CLONE_VM|CLONE_FS")

  friend bool operator==(const SyscallEvent&, const SyscallEvent&) = default;
};

struct SyscallCount {
  std::string name;
  int64_t count = 0;

  friend bool operator==(const SyscallCount&, const SyscallCount&) = default;
};

struct FileAccess {
  std::string path;
  std::string mode;
  int64_t count = 0;

  friend bool operator==(const FileAccess&, const FileAccess&) = default;
};

struct ExecRecord {
  std::string path;
  std::vector<std::string> argv;

  friend bool operator==(const ExecRecord&, const ExecRecord&) = default;
};

struct Endpoint {
  std::string address;
  std::string syscall;
  int64_t count = 0;

  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

struct SyscallReport {
  static constexpr size_t kMaxCounts = 32;
  static constexpr size_t kMaxDenied = 32;
  static constexpr size_t kMaxFiles = 64;
  static constexpr size_t kMaxExecs = 32;
  static constexpr size_t kMaxEndpoints = 32;
  static constexpr size_t kMaxBytes = 64 << 10;
  static constexpr size_t kMaxPathBytes = 512;
  static constexpr size_t kMaxArgBytes = 128;

  std::string supervisor;                  // "notify" or "ptrace"; empty when no supervisor ran
  int64_t seen = 0;                        // calls the supervisor handled
  int64_t denied = 0;                      // of which denied (errno or kill)
  std::vector<SyscallCount> counts;        // most frequent first
  std::vector<SyscallEvent> denied_calls;  // in order
  std::vector<FileAccess> files;           // in order of first use
  std::vector<ExecRecord> execs;
  std::vector<Endpoint> endpoints;
  int64_t dropped = 0;  // list entries that did not fit
  bool killed = false;  // a kill rule (or a supervisor failure) ended the command
  std::string error;    // why the supervisor failed, if it did

  friend bool operator==(const SyscallReport&, const SyscallReport&) = default;
};

// `text` redacted; one ending in "..." (how the supervisor's decoder and the egress proxy mark a
// string they cut at its bound) is redacted as cut there, so that no part of a secret cut in two
// survives (Redactor::RedactCut).
std::string RedactMarkedText(const Redactor& redactor, std::string_view text);

// Every decoded string of `e` (path, argv, address, detail) redacted with RedactMarkedText.
void RedactSyscallEvent(const Redactor& redactor, SyscallEvent* e);

nlohmann::json ToJson(const SyscallEvent& e);
nlohmann::json ToJson(const SyscallReport& r);
absl::StatusOr<SyscallReport> SyscallReportFromJson(const nlohmann::json& j);

// Builds a bounded SyscallReport from events and counts. Not thread-safe.
class SyscallReportBuilder {
 public:
  explicit SyscallReportBuilder(std::string supervisor) {
    report_.supervisor = std::move(supervisor);
  }

  void Add(const SyscallEvent& event);
  void CountSeen(int64_t n = 1) { report_.seen += n; }
  void MarkKilled(std::string error = "");
  // The report, with `counts` (name, calls) reduced to the kMaxCounts most frequent.
  SyscallReport Build(std::vector<SyscallCount> counts) const;

 private:
  SyscallReport report_;
  size_t bytes_ = 0;  // JsonSize of the entries kept
  std::map<std::pair<std::string, std::string>, size_t> file_index_;
  std::map<std::pair<std::string, std::string>, size_t> endpoint_index_;
};

// Receives events while the command runs (streaming exec). Called on the supervisor's thread,
// one event at a time; it must not block: a slow sink stalls the supervised program (the
// command's deadline is enforced elsewhere and still holds).
class SyscallEventSink {
 public:
  virtual ~SyscallEventSink() = default;
  virtual void OnSyscallEvent(const SyscallEvent& event) = 0;
};

// A sink that keeps at most `capacity` undelivered events for a consumer on another thread;
// events arriving when it is full are dropped and counted. Thread-safe.
class BoundedSyscallEventQueue : public SyscallEventSink {
 public:
  explicit BoundedSyscallEventQueue(size_t capacity) : capacity_(capacity) {}
  void OnSyscallEvent(const SyscallEvent& event) override;
  // Removes and returns up to `max` events, oldest first.
  std::vector<SyscallEvent> Drain(size_t max = SIZE_MAX);
  int64_t dropped() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<SyscallEvent> events_;
  int64_t dropped_ = 0;
};

}  // namespace airlock

#endif  // AIRLOCK_COMMAND_SYSCALLS_H_
