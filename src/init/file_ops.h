// The file operations airlock-init's workers carry out (protocol.h, kFileOp), as plain functions
// so they can be tested outside a sandbox. Every path is resolved beneath an already open root
// directory with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS): `..`, absolute symlinks and
// symlinks that lead out of the root fail with EXDEV, wherever they are planted; the leaf of a
// write, mkdir, stat or remove is never followed if it is a symlink.
//
// Plain C++ and libc only (linked into the static airlock-init).
#ifndef AIRLOCK_INIT_FILE_OPS_H_
#define AIRLOCK_INIT_FILE_OPS_H_

#include "init/protocol.h"

namespace airlock::init {

// Carries out `req` beneath `root_fd` (an O_PATH directory fd of the file root; req.path is the
// relative rest). `data_fd` is the data pipe of reads and writes; `commit_fd` is read for the
// commit byte of a write. Fills `done` (err = 0 on success).
void RunFileOp(int root_fd, const std::string& rel, const FileRequest& req, int data_fd,
               int commit_fd, FileDone* done);

}  // namespace airlock::init

#endif  // AIRLOCK_INIT_FILE_OPS_H_
