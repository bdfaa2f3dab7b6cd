// Landlock, applied by the sandbox's first process after pivot_root, so the rules name paths
// of the sandbox. Every later process (airlock-init and every command) inherits the domain.
#include <errno.h>
#include <fcntl.h>
#include <sys/prctl.h>

#include "engine/internal/plan.h"
#include "engine/internal/syscalls.h"

namespace airlock::engine::internal {
namespace {

uint64_t HandledFs(int abi) {
  uint64_t fs = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR |
                LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
                LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
                LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK |
                LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
                LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) fs |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) fs |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) fs |= kLandlockAccessFsIoctlDev;
  return fs;
}

int AddPath(int ruleset, const char* path, uint64_t access, bool optional) {
  int fd = ::open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return optional && errno == ENOENT ? 0 : errno;
  struct landlock_path_beneath_attr rule = {};
  rule.allowed_access = access;
  rule.parent_fd = fd;
  int rc = LandlockAddRule(ruleset, &rule);
  int err = errno;
  ::close(fd);
  return rc == 0 ? 0 : err;
}

}  // namespace

int ApplyLandlock(const SetupPlan& plan) {
  const int abi = plan.landlock_abi;
  LandlockRulesetAttr attr = {};
  attr.handled_access_fs = HandledFs(abi);
  // Signals and abstract unix sockets stay inside the sandbox's domain.
  if (abi >= 6) attr.scoped = kLandlockScopeAbstractUnixSocket | kLandlockScopeSignal;
  size_t size = abi >= 6 ? sizeof(LandlockRulesetAttr) : abi >= 4 ? 16 : 8;
  int ruleset = LandlockCreateRuleset(&attr, size, 0);
  if (ruleset < 0) return errno;

  const uint64_t read_exec =
      LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
  const uint64_t device = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                          (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0) |
                          (abi >= 5 ? kLandlockAccessFsIoctlDev : 0);
  int err = AddPath(ruleset, "/", read_exec, false);
  for (size_t i = 0; err == 0 && i < plan.landlock_writable.size(); ++i) {
    err = AddPath(ruleset, plan.landlock_writable[i].c_str(), attr.handled_access_fs, false);
  }
  for (size_t i = 0; err == 0 && i < plan.landlock_devices.size(); ++i) {
    err = AddPath(ruleset, plan.landlock_devices[i].c_str(), device, true);
  }
  if (err == 0 && LandlockRestrictSelf(ruleset) != 0) err = errno;
  ::close(ruleset);
  return err;
}

}  // namespace airlock::engine::internal
