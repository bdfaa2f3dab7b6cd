#include "shim/collect.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "common/files.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"
#include "init/protocol.h"

namespace airlock::shim {
namespace {

uint32_t ModeOf(const engine::FileInfo& f) {
  switch (f.type) {
    case init::FileType::kFile:
      return S_IFREG | (f.mode & 07777);
    case init::FileType::kDirectory:
      return S_IFDIR | (f.mode & 07777);
    case init::FileType::kSymlink:
      return S_IFLNK | (f.mode & 07777);
    case init::FileType::kOther:
      break;
  }
  return f.mode & 07777;  // a device, FIFO or socket: no regular-file bits, refused by the gate
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

// Reads a file through airlock-init's worker; the worker's own verdict (a path that turned into
// a symlink, a limit) arrives with the end of the data.
class TransferReader : public artifact::ContentReader {
 public:
  explicit TransferReader(std::unique_ptr<engine::FileTransfer> t) : t_(std::move(t)) {}
  absl::StatusOr<size_t> Read(std::span<char> buffer) override {
    if (done_) return 0;
    for (;;) {
      ssize_t n = ::read(t_->fd(), buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(errno, "read");
      if (n > 0) return static_cast<size_t>(n);
      done_ = true;
      RETURN_IF_ERROR(t_->Finish().status());
      return 0;
    }
  }

 private:
  std::unique_ptr<engine::FileTransfer> t_;
  bool done_ = false;
};

class StagingSink : public artifact::ArtifactSink {
 public:
  StagingSink(std::string dir, std::map<std::string, std::string>* staged)
      : dir_(std::move(dir)), staged_(staged) {}

  absl::Status Begin(const artifact::Candidate& file) override {
    std::string host = fmt::format("{}/{}", dir_, staged_->size());
    fd_ = UniqueFd(::open(host.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd_) return ErrnoStatus(errno, fmt::format("stage {}", file.path));
    (*staged_)[file.path] = host;
    return absl::OkStatus();
  }
  absl::Status Write(std::string_view chunk) override { return WriteAll(fd_.get(), chunk); }
  absl::Status End(const artifact::FileVerdict&) override {
    fd_.Reset();
    return absl::OkStatus();
  }

 private:
  std::string dir_;
  std::map<std::string, std::string>* staged_;
  UniqueFd fd_;
};

struct Walker {
  engine::NativeSandbox& sandbox;
  const spec::Artifacts& spec;
  const CollectLimits& limits;
  std::vector<artifact::Candidate> candidates;

  absl::Status Add(const std::string& path, const engine::FileInfo& f) {
    if (candidates.size() >= limits.max_files) {
      return absl::ResourceExhaustedError(
          fmt::format("more than {} files under the artifact paths", limits.max_files));
    }
    artifact::Candidate c;
    c.path = path;
    c.size = static_cast<uint64_t>(std::max<int64_t>(f.size, 0));
    c.mode = ModeOf(f);
    uint64_t cap = static_cast<uint64_t>(spec.max_size_mb) << 20;
    c.open = [this, path, cap]() -> absl::StatusOr<std::unique_ptr<artifact::ContentReader>> {
      // One byte over the cap, so the gate sees (and names) an oversized file.
      ASSIGN_OR_RETURN(std::unique_ptr<engine::FileTransfer> t,
                       sandbox.ReadFileFrom(path, cap + 1));
      return std::unique_ptr<artifact::ContentReader>(new TransferReader(std::move(t)));
    };
    candidates.push_back(std::move(c));
    return absl::OkStatus();
  }

  absl::Status Walk(const std::string& dir, int depth) {
    if (depth > limits.max_depth) {
      return absl::ResourceExhaustedError(
          fmt::format("{}: deeper than {} levels", dir, limits.max_depth));
    }
    ASSIGN_OR_RETURN(std::vector<engine::FileInfo> entries, sandbox.ListFiles(dir));
    for (const engine::FileInfo& e : entries) {
      std::string path = Join(dir, e.name);
      if (e.type == init::FileType::kDirectory) {
        RETURN_IF_ERROR(Walk(path, depth + 1));
      } else {
        RETURN_IF_ERROR(Add(path, e));
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<CollectOutcome> CollectArtifacts(engine::NativeSandbox& sandbox,
                                                const spec::Artifacts& spec,
                                                const std::vector<std::string>& roots,
                                                const std::vector<std::string>& secrets,
                                                const std::string& staging_dir,
                                                CollectLimits limits) {
  Walker walker{sandbox, spec, limits, {}};
  for (const std::string& root : roots.empty() ? spec.paths : roots) {
    std::string file_root, rest;
    if (!init::SplitFileRoot(root, &file_root, &rest)) {
      return InvalidArgument(fmt::format(
          "{}: not a path under /sandbox/{{workspace,artifacts,tmp,home,cache}}", root));
    }
    absl::StatusOr<engine::FileInfo> info = sandbox.StatFile(root);
    if (!info.ok()) {
      // An artifact directory the run never made holds nothing to collect.
      if (absl::IsNotFound(info.status()) && roots.empty()) continue;
      return Annotate(info.status(), root);
    }
    if (info->type == init::FileType::kDirectory) {
      RETURN_IF_ERROR(walker.Walk(root, 0));
    } else {
      RETURN_IF_ERROR(walker.Add(root, *info));
    }
  }
  ASSIGN_OR_RETURN(Redactor redactor, Redactor::Create(secrets), "secret values");
  ASSIGN_OR_RETURN(artifact::ReleaseGate gate, artifact::ReleaseGate::Create(spec, redactor));
  CollectOutcome out;
  StagingSink sink(staging_dir, &out.staged);
  ASSIGN_OR_RETURN(out.collection, gate.Inspect(walker.candidates, &sink));
  return out;
}

}  // namespace airlock::shim
