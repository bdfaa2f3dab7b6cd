#include "common/status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/cord.h"
#include "fmt/format.h"

namespace airlock {

absl::StatusCode ErrnoToCode(int err) {
  switch (err) {
    case 0:
      return absl::StatusCode::kOk;
    case ENOENT:
    case ESRCH:
    case ENXIO:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EINVAL:
    case ENAMETOOLONG:
    case E2BIG:
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case EXDEV:
      return absl::StatusCode::kInvalidArgument;
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case EAGAIN:
    case EDQUOT:
    case EFBIG:
      return absl::StatusCode::kResourceExhausted;
    case ENOSYS:
    case EOPNOTSUPP:
    case EAFNOSUPPORT:
    case EPROTONOSUPPORT:
      return absl::StatusCode::kUnimplemented;
    case EBUSY:
    case ENOTEMPTY:
      return absl::StatusCode::kFailedPrecondition;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case EINTR:
    case ECANCELED:
      return absl::StatusCode::kCancelled;
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case ENETUNREACH:
    case EHOSTUNREACH:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status ErrnoStatus(int err, std::string_view what) {
  return absl::Status(ErrnoToCode(err), fmt::format("{}: {}", what, std::strerror(err)));
}

absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok() || context.empty()) return status;
  absl::Status out(status.code(), fmt::format("{}: {}", context, Message(status)));
  // Payloads (the HTTP reason of src/http/errors.h, for one) travel with the status.
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

namespace {
absl::Status Make(absl::StatusCode code, std::string_view msg) {
  return absl::Status(code, absl::string_view(msg.data(), msg.size()));
}
}  // namespace

absl::Status InvalidArgument(std::string_view msg) {
  return Make(absl::StatusCode::kInvalidArgument, msg);
}
absl::Status FailedPrecondition(std::string_view msg) {
  return Make(absl::StatusCode::kFailedPrecondition, msg);
}
absl::Status Internal(std::string_view msg) { return Make(absl::StatusCode::kInternal, msg); }
absl::Status NotFound(std::string_view msg) { return Make(absl::StatusCode::kNotFound, msg); }
absl::Status Unimplemented(std::string_view msg) {
  return Make(absl::StatusCode::kUnimplemented, msg);
}
absl::Status PermissionDenied(std::string_view msg) {
  return Make(absl::StatusCode::kPermissionDenied, msg);
}
absl::Status ResourceExhausted(std::string_view msg) {
  return Make(absl::StatusCode::kResourceExhausted, msg);
}

}  // namespace airlock
