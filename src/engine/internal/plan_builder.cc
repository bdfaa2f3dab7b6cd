#include "engine/internal/plan_builder.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "common/files.h"
#include "common/status.h"
#include "engine/internal/syscalls.h"
#include "fmt/format.h"
#include "spec/validate.h"

namespace airlock::engine::internal {
namespace {

using Kind = MountOp::Kind;

constexpr uint64_t kReadOnly = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
constexpr uint64_t kReadWrite = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

// Terminals a sandbox may hold open at once (/dev/pts).
constexpr int kMaxTerminals = 16;

// Top-level entries of the host root that make up the default root file system. Everything
// else (home directories, /root, /var, /run and its sockets, /srv, /mnt, /boot) stays out.
constexpr const char* kHostRootEntries[] = {"usr",   "bin",   "sbin",   "lib",
                                            "lib32", "lib64", "libx32", "etc"};
// Entries of a spec rootfs that the layout provides itself.
constexpr const char* kReservedRootEntries[] = {"proc", "dev", "sys",  "sandbox",
                                                "tmp",  "run", "home", "root"};
// Host secrets masked inside /etc; absent ones are skipped. Secret files get a mode-0 file over
// each, so that reading one fails (EACCES) rather than seeming to succeed.
constexpr const char* kDeniedFiles[] = {"/etc/shadow",   "/etc/gshadow", "/etc/shadow-",
                                        "/etc/gshadow-", "/etc/sudoers", "/etc/security/opasswd"};
// The host's identity: read as empty (programs read it and cope with nothing there).
constexpr const char* kMaskedFiles[] = {"/etc/machine-id"};
constexpr const char* kMaskedDirs[] = {"/etc/ssh",      "/etc/sudoers.d", "/etc/ssl/private",
                                       "/etc/polkit-1", "/etc/docker",    "/etc/kubernetes"};
// Kernel interfaces in /proc that sandboxed code has no business with (config.gz: the host
// kernel's build options, a map of which mitigations and features it has; cmdline: the host's
// boot options, which name its hypervisor, its mitigations and at times an agent's addresses or
// tokens).
constexpr const char* kMaskedProcFiles[] = {
    "/proc/kcore",    "/proc/keys",          "/proc/timer_list", "/proc/sched_debug",
    "/proc/kallsyms", "/proc/sysrq-trigger", "/proc/config.gz",  "/proc/cmdline"};
constexpr const char* kMaskedProcDirs[] = {"/proc/acpi", "/proc/scsi", "/proc/irq",
                                           "/proc/bus",  "/proc/fs",   "/proc/driver"};
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};

struct Builder {
  SetupPlan plan;
  const PlanInputs& in;
  std::vector<UniqueFd>* owned_fds;

  MountOp& Add(Kind kind, std::string target) {
    MountOp op;
    op.kind = kind;
    op.target = std::move(target);
    plan.mounts.push_back(std::move(op));
    return plan.mounts.back();
  }
  void Mkdir(const std::string& target, mode_t mode = 0755) {
    Add(Kind::kMkdir, target).mode = mode;
  }
  void Symlink(const std::string& target, const std::string& points_to) {
    Add(Kind::kSymlink, target).source = points_to;
  }
  MountOp& Bind(const std::string& source, const std::string& target, uint64_t attr) {
    MountOp& op = Add(Kind::kBind, target);
    op.source = source;
    op.attr = attr;
    return op;
  }
  void Tmpfs(const std::string& target, int64_t size_bytes, int64_t inodes, mode_t mode,
             bool owned_by_user, bool noexec) {
    Mkdir(target);
    MountOp& op = Add(Kind::kTmpfs, target);
    op.flags = MS_NOSUID | MS_NODEV | (noexec ? MS_NOEXEC : 0);
    op.data = fmt::format("size={},nr_inodes={},mode={:o}", size_bytes, inodes, mode);
    if (owned_by_user)
      op.data += fmt::format(",uid={},gid={}", in.spec->user.uid, in.spec->user.gid);
  }
  MountOp& WriteFile(const std::string& target, std::string content, mode_t mode = 0644) {
    MountOp& op = Add(Kind::kWriteFile, target);
    op.data = std::move(content);
    op.mode = mode;
    return op;
  }
  void WriteScratchFile(const std::string& name, std::string content, mode_t mode = 0644) {
    WriteFile("/" + name, std::move(content), mode).scratch = true;
  }
  // A read-only bind of a file or directory of the scratch area (SetupPlan::scratch_dir): the
  // generated files live on a tmpfs outside the new root, so no host path of ours ever shows
  // in the sandbox's mountinfo and nothing is written on the host per sandbox.
  void BindSetup(const std::string& name, const std::string& target, bool optional) {
    MountOp& op = Add(Kind::kBindInRoot, target);
    op.source = "/" + name;
    op.scratch = true;
    op.attr = kReadOnly;
    op.optional = optional;
  }
};

// A user namespace whose only mapping sends the ids `from_uid/from_gid` to `to_uid/to_gid`;
// used to idmap a bind mount so that files of the host owner appear as the sandbox user's.
absl::StatusOr<UniqueFd> IdmapUserns(uid_t from_uid, gid_t from_gid, uid_t to_uid, gid_t to_gid) {
  int ready[2], done[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(done, O_CLOEXEC) != 0) {
    return ErrnoStatus(errno, "pipe");
  }
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus(errno, "fork");
  if (pid == 0) {
    char c = 0;
    if (::unshare(CLONE_NEWUSER) != 0) _exit(1);
    if (::write(ready[1], &c, 1) != 1) _exit(1);
    (void)!::read(done[0], &c, 1);
    _exit(0);
  }
  ::close(ready[1]);
  ::close(done[0]);
  UniqueFd done_w(done[1]);
  UniqueFd ready_r(ready[0]);
  auto reap = [&] {
    done_w.Reset();
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  };
  char c;
  if (::read(ready_r.get(), &c, 1) != 1) {
    reap();
    return Internal("idmap helper failed to create a user namespace");
  }
  std::string proc = fmt::format("/proc/{}", pid);
  absl::Status s;
  for (const auto& [file, line] :
       {std::pair<std::string, std::string>{"gid_map", fmt::format("{} {} 1\n", from_gid, to_gid)},
        {"uid_map", fmt::format("{} {} 1\n", from_uid, to_uid)}}) {
    UniqueFd fd(::open((proc + "/" + file).c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) {
      s = ErrnoStatus(errno, fmt::format("open {}/{}", proc, file));
      break;
    }
    if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      s = ErrnoStatus(errno, fmt::format("write {}/{}", proc, file));
      break;
    }
  }
  UniqueFd ns;
  if (s.ok()) {
    ns.Reset(::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns) s = ErrnoStatus(errno, fmt::format("open {}/ns/user", proc));
  }
  reap();
  if (!s.ok()) return s;
  return ns;
}

// A spec's host path, opened once on the host with no symbolic link anywhere in it: a sandbox
// may have planted one in a workspace that a later spec mounts from, to lead the mount to any
// host directory. The path the descriptor was opened at is then checked against the spec's
// host-path rules (a ".." may have led elsewhere), and what is mounted is what was checked.
absl::StatusOr<UniqueFd> OpenHostSource(const std::string& source, struct stat* st) {
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS;
  UniqueFd fd(
      static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, source.c_str(), &how, sizeof(how))));
  if (!fd && errno == ELOOP) {
    char resolved[PATH_MAX];
    return InvalidArgument(fmt::format(
        "mount source {}: a component is a symbolic link (give the real path{})", source,
        ::realpath(source.c_str(), resolved) ? fmt::format(", {}", resolved) : std::string()));
  }
  if (!fd) return ErrnoStatus(errno, fmt::format("mount source {}", source));
  char opened[PATH_MAX];
  ssize_t n =
      ::readlink(fmt::format("/proc/self/fd/{}", fd.get()).c_str(), opened, sizeof(opened) - 1);
  if (n <= 0) return ErrnoStatus(errno, fmt::format("mount source {}: its path", source));
  opened[n] = '\0';
  if (std::string problem = spec::HostSourceProblem(opened); !problem.empty()) {
    return InvalidArgument(fmt::format("mount source {} is {}, which {}", source, opened, problem));
  }
  if (::fstat(fd.get(), st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", source));
  return fd;
}

// Attaches a copy of the mount tree at `source_fd` on `target` with `attr` (through `userns`
// when it is open: an idmapped mount, which the kernel allows on the top mount only).
absl::Status BindHostSource(Builder& b, int source_fd, const std::string& source,
                            const std::string& target, uint64_t attr, const UniqueFd& userns) {
  UniqueFd mnt(static_cast<int>(::open_tree(
      source_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE)));
  if (!mnt) return ErrnoStatus(errno, fmt::format("open_tree {}", source));
  // The attributes on every mount of the tree (nosuid and nodev hold below the top too), then
  // the id mapping on the top mount.
  struct mount_attr a = {};
  a.attr_set = attr;
  a.propagation = MS_PRIVATE;
  if (::mount_setattr(mnt.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof(a)) != 0) {
    return ErrnoStatus(errno, fmt::format("mount attributes of {}", source));
  }
  if (userns) {
    struct mount_attr idmap = {};
    idmap.attr_set = MOUNT_ATTR_IDMAP;
    idmap.userns_fd = static_cast<uint64_t>(userns.get());
    if (::mount_setattr(mnt.get(), "", AT_EMPTY_PATH, &idmap, sizeof(idmap)) != 0) {
      return ErrnoStatus(errno, fmt::format("idmapped mount of {} (the file system must support "
                                            "idmapped mounts)",
                                            source));
    }
  }
  MountOp& op = b.Add(Kind::kBindFd, target);
  op.fd = mnt.get();
  b.owned_fds->push_back(std::move(mnt));
  return absl::OkStatus();
}

// A read-write bind of a host directory, idmapped when its owner is not the sandbox's host id.
absl::Status AddWritableHostBind(Builder& b, const std::string& source, const std::string& target) {
  struct stat st;
  ASSIGN_OR_RETURN(UniqueFd fd, OpenHostSource(source, &st));
  if (!S_ISDIR(st.st_mode)) return InvalidArgument(fmt::format("{}: not a directory", source));
  b.Mkdir(target);
  UniqueFd userns;
  if (st.st_uid != b.in.host_uid || st.st_gid != b.in.host_gid) {
    if (::geteuid() != 0) {
      return FailedPrecondition(fmt::format(
          "{} is owned by uid {}, but the sandbox writes as uid {}; give it to uid {} or run as "
          "root (which maps it with an idmapped mount)",
          source, st.st_uid, b.in.host_uid, b.in.host_uid));
    }
    ASSIGN_OR_RETURN(userns, IdmapUserns(st.st_uid, st.st_gid, b.in.host_uid, b.in.host_gid),
                     fmt::format("idmap {}", source));
  }
  return BindHostSource(b, fd.get(), source, target, kReadWrite, userns);
}

// A read-only bind of a host file or directory.
absl::Status AddReadOnlyHostBind(Builder& b, const std::string& source, const std::string& target) {
  struct stat st;
  ASSIGN_OR_RETURN(UniqueFd fd, OpenHostSource(source, &st));
  if (S_ISDIR(st.st_mode)) {
    b.Mkdir(target);
  } else {
    std::string parent = target.substr(0, target.rfind('/'));
    if (!parent.empty()) b.Mkdir(parent);
    b.Add(Kind::kFile, target).mode = 0644;
  }
  return BindHostSource(b, fd.get(), source, target, kReadOnly, UniqueFd());
}

// The entries `names` of the root file system at `root_fd` (shown as `root`), each opened beneath
// it without following a symlink: a symlink is made again in the sandbox, a directory or file is
// bound read-only from its descriptor. A rootfs that another sandbox can write to cannot lead a
// bind to the host.
absl::Status AddRootEntries(Builder& b, int root_fd, const std::string& root,
                            const std::vector<std::string>& names) {
  for (const std::string& e : names) {
    std::string shown = root + "/" + e;
    UniqueFd fd(::openat(root_fd, e.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) {
      if (errno == ENOENT) continue;
      return ErrnoStatus(errno, fmt::format("open {}", shown));
    }
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", shown));
    if (S_ISLNK(st.st_mode)) {
      char link[4096];
      ssize_t n = ::readlinkat(fd.get(), "", link, sizeof(link) - 1);
      if (n < 0) return ErrnoStatus(errno, fmt::format("readlink {}", shown));
      b.Symlink("/" + e, std::string(link, static_cast<size_t>(n)));
    } else if (S_ISDIR(st.st_mode)) {
      b.Mkdir("/" + e);
      RETURN_IF_ERROR(BindHostSource(b, fd.get(), shown, "/" + e, kReadOnly, UniqueFd()));
    } else if (S_ISREG(st.st_mode)) {
      b.Add(Kind::kFile, "/" + e).mode = 0644;
      RETURN_IF_ERROR(BindHostSource(b, fd.get(), shown, "/" + e, kReadOnly, UniqueFd()));
    }
  }
  return absl::OkStatus();
}

// The names in the directory `dir_fd` but those the sandbox layout provides itself.
absl::StatusOr<std::vector<std::string>> RootEntryNames(int dir_fd, const std::string& shown) {
  int list_fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = list_fd < 0 ? nullptr : ::fdopendir(list_fd);
  if (d == nullptr) {
    if (list_fd >= 0) ::close(list_fd);
    return ErrnoStatus(errno, fmt::format("open rootfs {}", shown));
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string n(e->d_name);
    if (n == "." || n == "..") continue;
    bool reserved = false;
    for (const char* r : kReservedRootEntries) reserved |= n == r;
    if (!reserved) names.push_back(n);
  }
  ::closedir(d);
  return names;
}

absl::Status AddRootFileSystem(Builder& b) {
  const std::string& root = b.in.rootfs;
  if (root.empty()) {
    // The host's own /usr, /etc and the merged-/usr links.
    UniqueFd host_root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!host_root) return ErrnoStatus(errno, "open /");
    RETURN_IF_ERROR(AddRootEntries(b, host_root.get(), "",
                                   {std::begin(kHostRootEntries), std::end(kHostRootEntries)}));
  } else {
    struct stat st;
    ASSIGN_OR_RETURN(UniqueFd root_fd, OpenHostSource(root, &st), "rootfs");
    if (!S_ISDIR(st.st_mode)) {
      return InvalidArgument(fmt::format("rootfs {}: not a directory", root));
    }
    ASSIGN_OR_RETURN(std::vector<std::string> names, RootEntryNames(root_fd.get(), root));
    RETURN_IF_ERROR(AddRootEntries(b, root_fd.get(), root, names));
  }
  // Our own /etc files over the root file system's, and the host's secrets masked.
  for (const char* f : {"passwd", "group", "hosts", "hostname", "resolv.conf"}) {
    b.BindSetup(f, fmt::format("/etc/{}", f), true);
  }
  for (const char* f : kDeniedFiles) b.BindSetup("denied", f, true);
  for (const char* f : kMaskedFiles) b.BindSetup("empty", f, true);
  for (const char* d : kMaskedDirs) b.BindSetup("emptydir", d, true);
  b.Mkdir("/var");
  b.Symlink("/var/tmp", "/sandbox/tmp");
  b.Mkdir("/run");
  return absl::OkStatus();
}

void AddProcAndDev(Builder& b, int64_t shm_bytes) {
  b.Mkdir("/proc");
  MountOp& proc = b.Add(Kind::kProc, "/proc");
  proc.flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  for (const char* f : kMaskedProcFiles) b.BindSetup("empty", f, true);
  for (const char* d : kMaskedProcDirs) b.BindSetup("emptydir", d, true);
  b.Add(Kind::kReadOnly, "/proc/sys").attr = kReadOnly;

  b.Tmpfs("/dev", 64 << 10, 256, 0755, false, true);
  for (const char* dev : kDevices) {
    std::string target = fmt::format("/dev/{}", dev);
    b.Add(Kind::kFile, target).mode = 0666;
    // Device nodes need a mount without nodev; everything else about them stays locked down.
    b.Bind(fmt::format("/dev/{}", dev), target, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
  }
  b.Mkdir("/dev/pts");
  MountOp& pts = b.Add(Kind::kDevpts, "/dev/pts");
  pts.flags = MS_NOSUID | MS_NOEXEC;
  // At most 16 terminals: every devpts instance but the host's own draws on one pool for the
  // whole host (kernel.pty.max less kernel.pty.reserve, 3,072 by default), which a sandbox
  // opening /dev/ptmx in a loop would otherwise take for itself.
  pts.data = fmt::format("newinstance,ptmxmode=0666,mode=0620,max={}", kMaxTerminals);
  b.Symlink("/dev/ptmx", "pts/ptmx");
  b.Symlink("/dev/fd", "/proc/self/fd");
  b.Symlink("/dev/stdin", "/proc/self/fd/0");
  b.Symlink("/dev/stdout", "/proc/self/fd/1");
  b.Symlink("/dev/stderr", "/proc/self/fd/2");
  b.Tmpfs("/dev/shm", shm_bytes, 4096, 01777, false, true);
}

absl::Status AddSandboxLayout(Builder& b) {
  const spec::SandboxSpec& spec = *b.in.spec;
  const spec::Filesystem& fs = spec.filesystem;
  constexpr int64_t kMiB = 1 << 20;
  b.Mkdir("/sandbox");
  const bool workspace_ro = fs.workspace_mode == spec::MountMode::kReadOnly;
  if (!fs.workspace.empty()) {
    RETURN_IF_ERROR(workspace_ro ? AddReadOnlyHostBind(b, fs.workspace, "/sandbox/workspace")
                                 : AddWritableHostBind(b, fs.workspace, "/sandbox/workspace"));
  } else {
    b.Tmpfs("/sandbox/workspace", fs.workspace_size_mb * kMiB, 262144, 0755, true, false);
    // (Validation keeps mounts from under a read-only workspace: none needs a mount point here.)
    if (workspace_ro) b.Add(Kind::kReadOnly, "/sandbox/workspace").attr = kReadOnly;
  }
  b.Tmpfs("/sandbox/artifacts", spec.artifacts.max_size_mb * kMiB, 65536, 0755, true, false);
  b.Tmpfs("/sandbox/tmp", fs.tmp_size_mb * kMiB, 65536, 01777, true, fs.tmp_noexec);
  b.Tmpfs("/sandbox/home", fs.home_size_mb * kMiB, 16384, 0755, true, false);
  b.Mkdir("/sandbox/tools");
  b.Bind(b.in.tools_dir, "/sandbox/tools", kReadOnly);
  b.Tmpfs("/sandbox/control", 1 << 20, 64, 0755, false, true);
  b.WriteFile("/sandbox/control/spec.json", b.in.spec_json);
  b.Add(Kind::kReadOnly, "/sandbox/control").attr = kReadOnly;
  if (!b.in.egress_socket.empty()) {
    b.Add(Kind::kFile, "/run/egress.sock").mode = 0644;
    b.Bind(b.in.egress_socket, "/run/egress.sock", kReadOnly);
  }
  b.Mkdir("/tmp");
  MountOp& tmp = b.Add(Kind::kBindInRoot, "/tmp");
  tmp.source = "/sandbox/tmp";
  tmp.attr = kReadWrite | (fs.tmp_noexec ? MOUNT_ATTR_NOEXEC : 0);

  for (const spec::Tmpfs& t : fs.tmpfs) {
    b.Tmpfs(t.target, t.size_mb * kMiB, t.inodes, 01777, true, t.noexec);
  }
  for (const spec::Mount& m : fs.mounts) {
    RETURN_IF_ERROR(m.mode == spec::MountMode::kReadWrite
                        ? AddWritableHostBind(b, m.source, m.target)
                        : AddReadOnlyHostBind(b, m.source, m.target));
  }
  return absl::OkStatus();
}

std::string FilterIdFile(const std::string& content, uint32_t keep_below, const std::string& line) {
  std::istringstream in(content);
  std::string out, l;
  while (std::getline(in, l)) {
    // name:x:id:...  keep system accounts only; host users stay private.
    size_t a = l.find(':');
    size_t b = a == std::string::npos ? a : l.find(':', a + 1);
    if (b == std::string::npos) continue;
    long id = std::strtol(l.c_str() + b + 1, nullptr, 10);
    if (id < static_cast<long>(keep_below) || id == 65534) out += l + "\n";
  }
  return out + line;
}

// The files bound over the root file system's /etc.
void AddGeneratedFiles(Builder& b) {
  const spec::SandboxSpec& spec = *b.in.spec;
  const std::string& root = b.in.rootfs;
  std::string passwd = root.empty() ? ReadFile("/etc/passwd").value_or("")
                                    : ReadFileInRoot(root, "etc/passwd").value_or("");
  std::string group = root.empty() ? ReadFile("/etc/group").value_or("")
                                   : ReadFileInRoot(root, "etc/group").value_or("");
  b.WriteScratchFile("passwd",
                     FilterIdFile(passwd, 1000,
                                  fmt::format("sandbox:x:{}:{}:sandbox:/sandbox/home:/bin/sh\n",
                                              spec.user.uid, spec.user.gid)));
  b.WriteScratchFile("group",
                     FilterIdFile(group, 1000, fmt::format("sandbox:x:{}:\n", spec.user.gid)));
  b.WriteScratchFile(
      "hosts",
      fmt::format("127.0.0.1\tlocalhost {0}\n::1\tlocalhost ip6-localhost {0}\n", spec.hostname));
  b.WriteScratchFile("hostname", spec.hostname + "\n");
  // No resolver: names are resolved by the egress proxy, never inside the sandbox.
  b.WriteScratchFile("resolv.conf", "");
  b.WriteScratchFile("empty", "", 0444);
  b.WriteScratchFile("denied", "", 0);
  MountOp& emptydir = b.Add(Kind::kMkdir, "/emptydir");
  emptydir.mode = 0555;
  emptydir.scratch = true;
}

}  // namespace

absl::StatusOr<SetupPlan> BuildPlan(const PlanInputs& in, std::vector<UniqueFd>* owned_fds) {
  const spec::SandboxSpec& spec = *in.spec;
  Builder b{SetupPlan{}, in, owned_fds};
  SetupPlan& p = b.plan;
  p.uid = spec.user.uid;
  p.gid = spec.user.gid;
  p.hostname = spec.hostname;
  p.read_only_root = spec.filesystem.read_only_root;
  p.staging_dir = in.run_dir + "/root";
  // A read-only root holds only mount points; a writable one (level 1) takes files too.
  int64_t root_size = p.read_only_root ? (1 << 20) : spec.filesystem.tmp_size_mb << 20;
  // Mounted before we take the sandbox's ids, so the owner is given explicitly: the mount
  // points are created as the sandbox user.
  p.staging_options = fmt::format("size={},nr_inodes={},mode=755,uid={},gid={}", root_size,
                                  p.read_only_root ? 4096 : 65536, p.uid, p.gid);
  p.scratch_dir = in.run_dir + "/setup";
  p.scratch_options =
      fmt::format("size={},nr_inodes=256,mode=755,uid={},gid={}", 1 << 20, p.uid, p.gid);
  AddGeneratedFiles(b);
  RETURN_IF_ERROR(AddRootFileSystem(b));
  AddProcAndDev(b, std::min<int64_t>(spec.resources.memory_mb, 64) << 20);
  RETURN_IF_ERROR(AddSandboxLayout(b));

  p.landlock_abi = in.landlock_abi;
  if (p.landlock_abi > 0) {
    p.landlock_writable = {"/sandbox/artifacts", "/sandbox/tmp", "/sandbox/home", "/dev/shm"};
    if (spec.filesystem.workspace_mode == spec::MountMode::kReadWrite) {
      p.landlock_writable.push_back("/sandbox/workspace");
    }
    for (const spec::Mount& m : spec.filesystem.mounts) {
      if (m.mode == spec::MountMode::kReadWrite) p.landlock_writable.push_back(m.target);
    }
    for (const spec::Tmpfs& t : spec.filesystem.tmpfs) p.landlock_writable.push_back(t.target);
    for (const char* dev : kDevices) p.landlock_devices.push_back(fmt::format("/dev/{}", dev));
    p.landlock_devices.push_back("/dev/pts");
  }
  p.init_path = "/sandbox/tools/airlock-init";
  return std::move(b.plan);
}

}  // namespace airlock::engine::internal
