#include "engine/internal/cgroup_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <thread>

#include "common/files.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"

namespace airlock::engine::internal {

absl::StatusOr<std::string> ReadCgroupFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string s, ReadFile(path, 1 << 20));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

absl::Status WriteCgroupFile(const std::string& path, std::string_view value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, fmt::format("open {}", path));
  ssize_t n;
  do {
    n = ::write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus(errno, fmt::format("write \"{}\" to {}", value, path));
  if (static_cast<size_t>(n) != value.size()) {
    return Internal(fmt::format("write \"{}\" to {}: short write", value, path));
  }
  return absl::OkStatus();
}

namespace {

std::optional<int64_t> ParseInt(std::string_view s) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

absl::StatusOr<std::optional<int64_t>> ReadCgroupInt(const std::string& path, int64_t max_value) {
  absl::StatusOr<std::string> s = ReadCgroupFile(path);
  if (!s.ok()) {
    if (s.status().code() == absl::StatusCode::kNotFound) return std::optional<int64_t>();
    return s.status();
  }
  if (*s == "max") return std::optional<int64_t>(max_value);
  std::optional<int64_t> v = ParseInt(*s);
  if (!v) return Internal(fmt::format("{}: not an integer: \"{}\"", path, *s));
  return v;
}

std::optional<int64_t> ReadKeyedValue(const std::string& path, std::string_view key) {
  absl::StatusOr<std::string> s = ReadFile(path, 1 << 20);
  if (!s.ok()) return std::nullopt;
  std::string_view rest(*s);
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ') {
      return ParseInt(line.substr(key.size() + 1));
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<std::string>> ListSubdirs(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, fmt::format("open {}", dir));
  std::vector<std::string> out;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (e->d_type == DT_DIR && n != "." && n != "..") out.emplace_back(n);
  }
  ::closedir(d);
  return out;
}

std::shared_mutex& KillFreezeLock() {
  static std::shared_mutex* lock = new std::shared_mutex();
  return *lock;
}

absl::StatusOr<std::vector<pid_t>> ReadProcsRecursive(const std::string& dir) {
  std::vector<pid_t> pids;
  // A cgroup removed while we read has no processes: its files are gone (ENOENT) or, while its
  // rmdir runs and the directory is still there, answer ENODEV. (rmdir succeeds only on an empty
  // cgroup.)
  const std::string path = dir + "/cgroup.procs";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::string procs;
  int err = fd ? 0 : errno;
  while (err == 0) {
    char buf[4096];
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    procs.append(buf, static_cast<size_t>(n));
  }
  if (err == ENOENT || err == ENODEV) return pids;
  if (err != 0) return ErrnoStatus(err, fmt::format("read {}", path));
  std::string_view rest(procs);
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (auto v = ParseInt(line)) pids.push_back(static_cast<pid_t>(*v));
  }
  absl::StatusOr<std::vector<std::string>> children = ListSubdirs(dir);
  if (!children.ok()) {
    if (children.status().code() == absl::StatusCode::kNotFound) return pids;
    return children.status();
  }
  for (const std::string& child : *children) {
    absl::StatusOr<std::vector<pid_t>> sub = ReadProcsRecursive(dir + "/" + child);
    if (!sub.ok()) {
      // A finished command's cgroup is removed while we read: it holds no process any more.
      if (::access((dir + "/" + child).c_str(), F_OK) != 0) continue;
      return sub.status();
    }
    pids.insert(pids.end(), sub->begin(), sub->end());
  }
  return pids;
}

absl::Status RemoveCgroupDir(const std::string& dir) {
  // Usually the cgroup is an emptied leaf: one rmdir, no listing.
  if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> children = ListSubdirs(dir);
  if (!children.ok()) {
    if (children.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
    return children.status();
  }
  for (const std::string& child : *children) {
    RETURN_IF_ERROR(RemoveCgroupDir(dir + "/" + child));
  }
  // A cgroup whose last process just exited can report EBUSY for a moment (the task leaves
  // its cgroup when it is released, shortly after it is reaped).
  int err = 0;
  bool removed = WaitFor(
      [&] {
        if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
        err = errno;
        return err != EBUSY;
      },
      std::chrono::seconds(2));
  if (removed && err != 0 && err != EBUSY) return ErrnoStatus(err, fmt::format("rmdir {}", dir));
  if (!removed) return ErrnoStatus(EBUSY, fmt::format("rmdir {}", dir));
  return absl::OkStatus();
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

absl::Status CheckCgroupName(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 128) {
    return InvalidArgument(fmt::format("invalid cgroup name \"{}\"", name));
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return InvalidArgument(fmt::format("invalid cgroup name \"{}\"", name));
  }
  return absl::OkStatus();
}

absl::Status KillIfMember(pid_t pid, std::string_view name) {
  while (name.starts_with('/')) name.remove_prefix(1);
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) {
    if (errno == ESRCH) return absl::OkStatus();  // gone already
    return ErrnoStatus(errno, fmt::format("kill {}: pidfd_open", pid));
  }
  struct pollfd exited = {pidfd.get(), POLLIN, 0};
  absl::StatusOr<std::string> lines = ReadFile(fmt::format("/proc/{}/cgroup", pid));
  if (!lines.ok()) {
    if (::poll(&exited, 1, 0) != 0) return absl::OkStatus();  // it exited meanwhile
    return Annotate(lines.status(), fmt::format("kill {}: read its cgroup", pid));
  }
  bool member = false;
  for (std::string_view rest = *lines; !rest.empty() && !member;) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    // "hierarchy-id:controllers:/path"
    size_t second = line.find(':', line.find(':') + 1);
    if (second == std::string_view::npos) continue;
    std::string_view path = line.substr(second + 1);
    if (!path.starts_with('/')) continue;
    path.remove_prefix(1);
    member = path.starts_with(name) && (path.size() == name.size() || path[name.size()] == '/');
  }
  if (!member || ::poll(&exited, 1, 0) != 0) return absl::OkStatus();
  if (::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0) != 0 && errno != ESRCH) {
    return ErrnoStatus(errno, fmt::format("kill {}", pid));
  }
  return absl::OkStatus();
}

}  // namespace airlock::engine::internal
