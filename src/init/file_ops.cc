#include "init/file_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace airlock::init {
namespace {

constexpr size_t kMaxListEntries = 10000;

// Opens `name` in `dir` without following a symlink there (ELOOP for one, whatever `flags`).
int OpenNoFollow(int dir, const char* name, int flags, mode_t mode) {
  int fd = ::openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0 && (errno == ENOTDIR || errno == ELOOP)) {
    struct stat st;
    if (::fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) errno = ELOOP;
  } else if (fd >= 0 && (flags & O_PATH)) {
    struct stat st;  // O_PATH | O_NOFOLLOW opens a symlink itself
    if (::fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
      ::close(fd);
      errno = ELOOP;
      return -1;
    }
  }
  return fd;
}

// `rel` beneath `root_fd`, one component at a time, refusing ".." and every symlink: inside a
// sandbox openat2 answers ENOSYS (the seccomp profile cannot read its mode).
int WalkBeneath(int root_fd, const std::string& rel, int flags, mode_t mode) {
  int dir = ::fcntl(root_fd, F_DUPFD_CLOEXEC, 0);
  size_t i = 0;
  std::string leaf = ".";
  while (dir >= 0) {
    size_t j = rel.find('/', i);
    std::string part = rel.substr(i, j == std::string::npos ? std::string::npos : j - i);
    if (j == std::string::npos) {
      if (!part.empty()) leaf = part;
      break;
    }
    i = j + 1;
    if (part.empty() || part == ".") continue;
    int next = part == ".." ? (errno = EXDEV, -1)
                            : OpenNoFollow(dir, part.c_str(), O_PATH | O_DIRECTORY, 0);
    int err = errno;
    ::close(dir);
    errno = err;
    dir = next;
  }
  if (dir < 0) return -1;
  int fd = leaf == ".." ? (errno = EXDEV, -1) : OpenNoFollow(dir, leaf.c_str(), flags, mode);
  int err = errno;
  ::close(dir);
  errno = err;
  return fd;
}

int OpenBeneath(int root_fd, const std::string& rel, int flags, mode_t mode = 0) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags) | O_CLOEXEC;
  how.mode = mode;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  int fd;
  do {
    fd = static_cast<int>(
        ::syscall(SYS_openat2, root_fd, rel.empty() ? "." : rel.c_str(), &how, sizeof(how)));
  } while (fd < 0 && (errno == EAGAIN || errno == EINTR));
  if (fd < 0 && errno == ENOSYS) return WalkBeneath(root_fd, rel, flags, mode);
  return fd;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_;
};

bool Fail(FileDone* done, int err, const std::string& what) {
  done->err = err;
  done->message = what;
  return false;
}

void SplitLeaf(const std::string& rel, std::string* parent, std::string* leaf) {
  size_t slash = rel.rfind('/');
  if (slash == std::string::npos) {
    parent->clear();
    *leaf = rel;
  } else {
    *parent = rel.substr(0, slash);
    *leaf = rel.substr(slash + 1);
  }
}

FileEntry EntryOf(const std::string& name, const struct stat& st) {
  FileEntry e;
  e.name = name;
  e.type = S_ISREG(st.st_mode)   ? FileType::kFile
           : S_ISDIR(st.st_mode) ? FileType::kDirectory
           : S_ISLNK(st.st_mode) ? FileType::kSymlink
                                 : FileType::kOther;
  e.size = static_cast<uint64_t>(st.st_size);
  e.mode = st.st_mode & 07777;
  e.mtime = st.st_mtime;
  return e;
}

std::string LinkTarget(int dir_fd, const std::string& name) {
  char buf[4096];
  ssize_t n = ::readlinkat(dir_fd, name.c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Creates every missing directory of `rel` beneath root; returns an O_PATH fd of the last one,
// or -1 with `done` saying what failed.
int MakeParents(int root_fd, const std::string& rel, FileDone* done) {
  int dir = ::fcntl(root_fd, F_DUPFD_CLOEXEC, 0);
  if (dir < 0) Fail(done, errno, "dup");
  size_t i = 0;
  while (dir >= 0 && i < rel.size()) {
    size_t j = rel.find('/', i);
    if (j == std::string::npos) j = rel.size();
    std::string part = rel.substr(i, j - i);
    i = j + 1;
    if (part.empty() || part == ".") continue;
    if (::mkdirat(dir, part.c_str(), 0755) != 0 && errno != EEXIST) {
      Fail(done, errno, "mkdir " + rel.substr(0, j));
      ::close(dir);
      return -1;
    }
    // Directories made on the way are never reached through a symlink.
    int next = OpenNoFollow(dir, part.c_str(), O_PATH | O_DIRECTORY, 0);
    if (next < 0) Fail(done, errno, "open directory " + rel.substr(0, j));
    ::close(dir);
    dir = next;
  }
  return dir;
}

bool DoRead(int root_fd, const std::string& rel, const FileRequest& req, int data_fd,
            FileDone* done) {
  Fd fd(OpenBeneath(root_fd, rel, O_RDONLY | O_NOCTTY | O_NONBLOCK));
  if (!fd) return Fail(done, errno, "open " + rel);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Fail(done, errno, "stat " + rel);
  if (S_ISDIR(st.st_mode)) return Fail(done, EISDIR, rel + " is a directory");
  if (!S_ISREG(st.st_mode)) return Fail(done, EINVAL, rel + " is not a regular file");
  if (req.max_bytes > 0 && static_cast<uint64_t>(st.st_size) > req.max_bytes) {
    return Fail(done, EFBIG, rel + " is larger than the limit");
  }
  ::fcntl(fd.get(), F_SETFL, 0);
  done->entries.push_back(EntryOf(rel, st));
  uint64_t sent = 0;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Fail(done, errno, "read " + rel);
    if (n == 0) break;
    sent += static_cast<uint64_t>(n);
    if (req.max_bytes > 0 && sent > req.max_bytes) {
      return Fail(done, EFBIG, rel + " grew past the limit while being read");
    }
    if (!WriteAll(data_fd, buf, static_cast<size_t>(n))) return Fail(done, errno, "send " + rel);
  }
  done->entries.back().size = sent;
  return true;
}

bool DoWrite(int root_fd, const std::string& rel, const FileRequest& req, int data_fd,
             int commit_fd, FileDone* done) {
  std::string parent, leaf;
  SplitLeaf(rel, &parent, &leaf);
  if (leaf.empty() || leaf == ".") return Fail(done, EISDIR, "cannot write a file root itself");
  Fd dir(req.flags & kFileParents ? MakeParents(root_fd, parent, done)
                                  : OpenBeneath(root_fd, parent, O_PATH | O_DIRECTORY));
  if (!dir) {
    if (done->err == 0) Fail(done, errno, "open directory of " + rel);
    return false;
  }
  char tmp[64];
  std::snprintf(tmp, sizeof(tmp), ".airlock-upload-%d-%lu", static_cast<int>(::getpid()),
                static_cast<unsigned long>(req.id));
  Fd out(::openat(dir.get(), tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  req.mode & 0777));
  if (!out) return Fail(done, errno, "create " + rel);
  auto discard = [&](int err, const std::string& what) {
    ::unlinkat(dir.get(), tmp, 0);
    return Fail(done, err, what);
  };
  uint64_t got = 0;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(data_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return discard(errno, "receive " + rel);
    if (n == 0) break;
    got += static_cast<uint64_t>(n);
    if (req.max_bytes > 0 && got > req.max_bytes) return discard(EFBIG, rel + ": over the limit");
    if (!WriteAll(out.get(), buf, static_cast<size_t>(n))) return discard(errno, "write " + rel);
  }
  char commit = 0;
  ssize_t c;
  do {
    c = ::read(commit_fd, &commit, 1);
  } while (c < 0 && errno == EINTR);
  if (c != 1 || commit != 'C') return discard(ECANCELED, "upload of " + rel + " was abandoned");
  if (::fchmod(out.get(), req.mode & 0777) != 0) return discard(errno, "chmod " + rel);
  // rename never follows a symlink at the target: it replaces the link itself.
  if (::renameat(dir.get(), tmp, dir.get(), leaf.c_str()) != 0) {
    return discard(errno, "rename into " + rel);
  }
  struct stat st;
  if (::fstat(out.get(), &st) == 0) done->entries.push_back(EntryOf(rel, st));
  return true;
}

bool DoList(int root_fd, const std::string& rel, FileDone* done) {
  int fd = OpenBeneath(root_fd, rel, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Fail(done, errno, "open directory " + (rel.empty() ? "." : rel));
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return Fail(done, errno, "read directory " + rel);
  }
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (done->entries.size() >= kMaxListEntries) {
      ::closedir(d);
      return Fail(done, E2BIG, "directory has more than 10000 entries");
    }
    struct stat st;
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    FileEntry entry = EntryOf(name, st);
    if (entry.type == FileType::kSymlink) entry.target = LinkTarget(::dirfd(d), name);
    done->entries.push_back(std::move(entry));
  }
  ::closedir(d);
  return true;
}

bool DoStat(int root_fd, const std::string& rel, FileDone* done) {
  struct stat st;
  if (rel.empty()) {
    if (::fstat(root_fd, &st) != 0) return Fail(done, errno, "stat .");
    done->entries.push_back(EntryOf(".", st));
    return true;
  }
  std::string parent, leaf;
  SplitLeaf(rel, &parent, &leaf);
  Fd dir(OpenBeneath(root_fd, parent, O_PATH | O_DIRECTORY));
  if (!dir) return Fail(done, errno, "open directory of " + rel);
  if (::fstatat(dir.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0) {
    return Fail(done, errno, "stat " + rel);
  }
  FileEntry e = EntryOf(rel, st);
  if (e.type == FileType::kSymlink) e.target = LinkTarget(dir.get(), leaf);
  done->entries.push_back(std::move(e));
  return true;
}

bool DoMkdir(int root_fd, const std::string& rel, const FileRequest& req, FileDone* done) {
  if (rel.empty()) return Fail(done, EEXIST, "a file root exists already");
  if (req.flags & kFileParents) {
    Fd dir(MakeParents(root_fd, rel, done));
    return static_cast<bool>(dir);
  }
  std::string parent, leaf;
  SplitLeaf(rel, &parent, &leaf);
  Fd dir(OpenBeneath(root_fd, parent, O_PATH | O_DIRECTORY));
  if (!dir) return Fail(done, errno, "open directory of " + rel);
  if (::mkdirat(dir.get(), leaf.c_str(), req.mode & 0777 ? req.mode & 0777 : 0755) != 0) {
    return Fail(done, errno, "mkdir " + rel);
  }
  return true;
}

// Removes `name` in `dir_fd` and, for a directory, everything beneath it, never following a
// symlink (each level is opened with O_NOFOLLOW).
bool RemoveTreeAt(int dir_fd, const std::string& name, const std::string& shown, FileDone* done,
                  int depth) {
  if (depth > 256) return Fail(done, ELOOP, "directory tree too deep under " + shown);
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Fail(done, errno, "stat " + shown);
  }
  if (S_ISDIR(st.st_mode)) {
    int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Fail(done, errno, "open " + shown);
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
      ::close(fd);
      return Fail(done, errno, "read " + shown);
    }
    bool ok = true;
    while (struct dirent* e = ::readdir(d)) {
      std::string child = e->d_name;
      if (child == "." || child == "..") continue;
      if (!RemoveTreeAt(::dirfd(d), child, shown + "/" + child, done, depth + 1)) {
        ok = false;
        break;
      }
    }
    ::closedir(d);
    if (!ok) return false;
    if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0)
      return Fail(done, errno, "rmdir " + shown);
    return true;
  }
  if (::unlinkat(dir_fd, name.c_str(), 0) != 0) return Fail(done, errno, "remove " + shown);
  return true;
}

bool DoRemove(int root_fd, const std::string& rel, const FileRequest& req, FileDone* done) {
  if (rel.empty()) return Fail(done, EBUSY, "a file root cannot be removed");
  std::string parent, leaf;
  SplitLeaf(rel, &parent, &leaf);
  Fd dir(OpenBeneath(root_fd, parent, O_PATH | O_DIRECTORY));
  if (!dir) return Fail(done, errno, "open directory of " + rel);
  struct stat st;
  if (::fstatat(dir.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Fail(done, errno, "stat " + rel);
  }
  if (S_ISDIR(st.st_mode) && !(req.flags & kFileRecursive)) {
    if (::unlinkat(dir.get(), leaf.c_str(), AT_REMOVEDIR) != 0) {
      return Fail(done, errno, "rmdir " + rel);
    }
    return true;
  }
  // O_PATH directory fds cannot be read: reopen the parent for the walk.
  Fd walk(OpenBeneath(root_fd, parent, O_RDONLY | O_DIRECTORY));
  if (!walk) return Fail(done, errno, "open directory of " + rel);
  return RemoveTreeAt(walk.get(), leaf, rel, done, 0);
}

}  // namespace

void RunFileOp(int root_fd, const std::string& rel, const FileRequest& req, int data_fd,
               int commit_fd, FileDone* done) {
  done->id = req.id;
  done->err = 0;
  switch (req.op) {
    case FileOp::kRead:
      DoRead(root_fd, rel, req, data_fd, done);
      break;
    case FileOp::kWrite:
      DoWrite(root_fd, rel, req, data_fd, commit_fd, done);
      break;
    case FileOp::kList:
      DoList(root_fd, rel, done);
      break;
    case FileOp::kStat:
      DoStat(root_fd, rel, done);
      break;
    case FileOp::kMkdir:
      DoMkdir(root_fd, rel, req, done);
      break;
    case FileOp::kRemove:
      DoRemove(root_fd, rel, req, done);
      break;
  }
}

}  // namespace airlock::init
