#include "init/protocol.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace airlock::init {

const char* ToString(SetupStage stage) {
  switch (stage) {
    case SetupStage::kNone:
      return "none";
    case SetupStage::kStdio:
      return "stdio";
    case SetupStage::kWorkdir:
      return "workdir";
    case SetupStage::kRlimit:
      return "rlimits";
    case SetupStage::kSeccomp:
      return "seccomp";
    case SetupStage::kExec:
      return "exec";
  }
  return "unknown";
}

void Writer::U32(uint32_t v) {
  for (int i = 0; i < 4; ++i) data_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Writer::U64(uint64_t v) {
  for (int i = 0; i < 8; ++i) data_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Writer::Bytes(std::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  data_.append(s);
}

void Writer::Strings(const std::vector<std::string>& v) {
  U32(static_cast<uint32_t>(v.size()));
  for (const std::string& s : v) Bytes(s);
}

bool Reader::Need(size_t n) {
  if (!ok_ || data_.size() - pos_ < n) ok_ = false;
  return ok_;
}

uint32_t Reader::U32() {
  if (!Need(4)) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
  pos_ += 4;
  return v;
}

uint64_t Reader::U64() {
  if (!Need(8)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
  pos_ += 8;
  return v;
}

std::string Reader::Bytes() {
  uint32_t n = U32();
  if (!Need(n)) return {};
  std::string s(data_.substr(pos_, n));
  pos_ += n;
  return s;
}

std::vector<std::string> Reader::Strings() {
  uint32_t n = U32();
  std::vector<std::string> v;
  // Each string costs at least 4 bytes of payload, which bounds n before we reserve.
  if (!Need(static_cast<size_t>(n) * 4)) return v;
  v.reserve(n);
  for (uint32_t i = 0; i < n && ok_; ++i) v.push_back(Bytes());
  return v;
}

std::string EncodeSpawn(const SpawnRequest& req) {
  Writer w;
  w.U64(req.id);
  w.Strings(req.argv);
  w.Strings(req.env);
  w.Bytes(req.cwd);
  w.U32(static_cast<uint32_t>(req.rlimits.size()));
  for (const Rlimit& r : req.rlimits) {
    w.U32(r.resource);
    w.U64(r.soft);
    w.U64(r.hard);
  }
  w.Bytes(req.seccomp_filter);
  w.U32(static_cast<uint32_t>(req.cgroup_join));
  w.Bytes(req.policy_filter);
  w.U32(static_cast<uint32_t>(req.policy_listener));
  w.U32(static_cast<uint32_t>(req.start));
  return w.data();
}

bool DecodeSpawn(std::string_view payload, SpawnRequest* req) {
  Reader r(payload);
  req->id = r.U64();
  req->argv = r.Strings();
  req->env = r.Strings();
  req->cwd = r.Bytes();
  uint32_t n = r.U32();
  if (n > 64) return false;
  req->rlimits.clear();
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    Rlimit rl;
    rl.resource = r.U32();
    rl.soft = r.U64();
    rl.hard = r.U64();
    req->rlimits.push_back(rl);
  }
  req->seccomp_filter = r.Bytes();
  uint32_t join = r.U32();
  if (join > static_cast<uint32_t>(CgroupJoin::kWriteSelf)) return false;
  req->cgroup_join = static_cast<CgroupJoin>(join);
  req->policy_filter = r.Bytes();
  uint32_t listener = r.U32();
  if (listener > static_cast<uint32_t>(PolicyListener::kNotify)) return false;
  req->policy_listener = static_cast<PolicyListener>(listener);
  if (req->policy_listener == PolicyListener::kNotify && req->policy_filter.empty()) return false;
  uint32_t start = r.U32();
  if (start > static_cast<uint32_t>(SpawnStart::kOnStart)) return false;
  req->start = static_cast<SpawnStart>(start);
  // A process the host places in its cgroup must wait for it.
  if (req->cgroup_join == CgroupJoin::kNone && req->start != SpawnStart::kOnStart) return false;
  return r.done() && !req->argv.empty();
}

namespace {

int WriteFully(int sock, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::send(sock, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

// Reads exactly size bytes; -1 on end of stream before the first byte.
int ReadFully(int sock, char* data, size_t size) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::recv(sock, data + got, size - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return got == 0 ? -1 : EPROTO;
    got += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

void DecodeFrameHeader(const char* header, uint32_t* type, uint32_t* length) {
  uint32_t t = 0, len = 0;
  for (int i = 0; i < 4; ++i) {
    t |= static_cast<uint32_t>(static_cast<uint8_t>(header[i])) << (8 * i);
    len |= static_cast<uint32_t>(static_cast<uint8_t>(header[4 + i])) << (8 * i);
  }
  *type = t;
  *length = len;
}

bool SplitFileRoot(std::string_view path, std::string* root, std::string* rest) {
  if (path.empty() || path.size() > 4096 || path.front() != '/' ||
      path.find('\0') != std::string_view::npos) {
    return false;
  }
  for (const char* r : kFileRoots) {
    std::string_view rv(r);
    if (path.substr(0, rv.size()) != rv) continue;
    std::string_view tail = path.substr(rv.size());
    if (!tail.empty() && tail.front() != '/') continue;
    while (!tail.empty() && tail.front() == '/') tail.remove_prefix(1);
    while (!tail.empty() && tail.back() == '/') tail.remove_suffix(1);
    // ".." is refused outright: the kernel would also stop it at the root, but a path that
    // means something else than it reads has no business in an API call.
    for (size_t i = 0; i <= tail.size();) {
      size_t j = tail.find('/', i);
      if (j == std::string_view::npos) j = tail.size();
      if (tail.substr(i, j - i) == "..") return false;
      i = j + 1;
    }
    *root = std::string(rv);
    *rest = std::string(tail);
    return true;
  }
  return false;
}

std::string EncodeFileRequest(const FileRequest& r) {
  Writer w;
  w.U64(r.id);
  w.U32(static_cast<uint32_t>(r.op));
  w.Bytes(r.path);
  w.U32(r.mode);
  w.U32(r.flags);
  w.U64(r.max_bytes);
  return w.data();
}

bool DecodeFileRequest(std::string_view payload, FileRequest* r) {
  Reader rd(payload);
  r->id = rd.U64();
  uint32_t op = rd.U32();
  r->path = rd.Bytes();
  r->mode = rd.U32();
  r->flags = rd.U32();
  r->max_bytes = rd.U64();
  if (op < static_cast<uint32_t>(FileOp::kRead) || op > static_cast<uint32_t>(FileOp::kRemove)) {
    return false;
  }
  r->op = static_cast<FileOp>(op);
  return rd.done();
}

std::string EncodeFileDone(const FileDone& d) {
  Writer w;
  w.U64(d.id);
  w.I32(d.err);
  w.Bytes(d.message);
  w.U32(static_cast<uint32_t>(d.entries.size()));
  for (const FileEntry& e : d.entries) {
    w.Bytes(e.name);
    w.U32(static_cast<uint32_t>(e.type));
    w.U64(e.size);
    w.U32(e.mode);
    w.U64(static_cast<uint64_t>(e.mtime));
    w.Bytes(e.target);
  }
  return w.data();
}

bool DecodeFileDone(std::string_view payload, FileDone* d) {
  Reader r(payload);
  d->id = r.U64();
  d->err = r.I32();
  d->message = r.Bytes();
  uint32_t n = r.U32();
  if (!r.ok() || n > payload.size()) return false;  // each entry takes bytes: n is bounded
  d->entries.clear();
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    FileEntry e;
    e.name = r.Bytes();
    uint32_t type = r.U32();
    e.type = type >= 1 && type <= 4 ? static_cast<FileType>(type) : FileType::kOther;
    e.size = r.U64();
    e.mode = r.U32();
    e.mtime = static_cast<int64_t>(r.U64());
    e.target = r.Bytes();
    d->entries.push_back(std::move(e));
  }
  return r.done();
}

int SendMessage(int sock, MessageType type, std::string_view payload, const int* fds, int nfds) {
  return SendFrame(sock, static_cast<uint32_t>(type), payload, fds, nfds);
}

int ReceiveMessage(int sock, MessageType* type, std::string* payload, int* fds, int* nfds) {
  uint32_t t = 0;
  int err = ReceiveFrame(sock, &t, payload, fds, nfds);
  if (err == 0) *type = static_cast<MessageType>(t);
  return err;
}

int ReceiveMessage(int sock, MessageType* type, std::string* payload) {
  uint32_t t = 0;
  int err = ReceiveFrame(sock, &t, payload);
  if (err == 0) *type = static_cast<MessageType>(t);
  return err;
}

int ReceiveFrame(int sock, uint32_t* type, std::string* payload) {
  int fds[kMaxFds];
  int nfds = 0;
  int err = ReceiveFrame(sock, type, payload, fds, &nfds);
  for (int i = 0; i < nfds; ++i) ::close(fds[i]);
  return err;
}

int SendFrame(int sock, uint32_t t, std::string_view payload, const int* fds, int nfds) {
  if (payload.size() > kMaxPayload || nfds < 0 || nfds > kMaxFds) return EMSGSIZE;
  char header[8];
  uint32_t len = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) {
    header[i] = static_cast<char>((t >> (8 * i)) & 0xff);
    header[4 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
  }
  // Header and payload in one call: the receiver wakes once per message.
  struct iovec iov[2] = {{header, sizeof(header)},
                         {const_cast<char*>(payload.data()), payload.size()}};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  struct msghdr msg = {};
  msg.msg_iov = iov;
  msg.msg_iovlen = payload.empty() ? 1 : 2;
  if (nfds > 0) {
    std::memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  size_t sent = static_cast<size_t>(n);
  if (sent < sizeof(header)) {
    int err = WriteFully(sock, header + sent, sizeof(header) - sent);
    if (err != 0) return err;
    sent = sizeof(header);
  }
  sent -= sizeof(header);
  return WriteFully(sock, payload.data() + sent, payload.size() - sent);
}

int ReceiveFrame(int sock, uint32_t* type, std::string* payload, int* fds, int* nfds) {
  *nfds = 0;
  char header[8];
  struct iovec iov = {header, sizeof(header)};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  if (n == 0) return -1;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int count = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (*nfds < kMaxFds) {
        fds[(*nfds)++] = fd;
      } else {
        ::close(fd);
      }
    }
  }
  auto close_fds = [&] {
    for (int i = 0; i < *nfds; ++i) ::close(fds[i]);
    *nfds = 0;
  };
  if (msg.msg_flags & MSG_CTRUNC) {
    close_fds();
    return EPROTO;
  }
  if (static_cast<size_t>(n) < sizeof(header)) {
    int err = ReadFully(sock, header + n, sizeof(header) - static_cast<size_t>(n));
    if (err != 0) {
      close_fds();
      return err == -1 ? EPROTO : err;
    }
  }
  uint32_t t = 0, len = 0;
  DecodeFrameHeader(header, &t, &len);
  if (len > kMaxPayload) {
    close_fds();
    return EMSGSIZE;
  }
  payload->resize(len);
  if (len > 0) {
    int err = ReadFully(sock, payload->data(), len);
    if (err != 0) {
      close_fds();
      return err == -1 ? EPROTO : err;
    }
  }
  *type = t;
  return 0;
}

}  // namespace airlock::init
