// Status helpers used at every fallible boundary of airlock.
//
// Errors are absl::Status values whose messages read outermost first:
//   "start sandbox sb-42: create cgroup airlock/sb-42: Permission denied"
// Each layer adds its own context with Annotate() or the *_CTX macros.
#ifndef AIRLOCK_COMMON_STATUS_H_
#define AIRLOCK_COMMON_STATUS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace airlock {

// A Status with the canonical code for `err` and the message "<what>: <strerror(err)>".
[[nodiscard]] absl::Status ErrnoStatus(int err, std::string_view what);

// The canonical absl code for an errno value (ENOENT -> NotFound, EACCES -> PermissionDenied...).
absl::StatusCode ErrnoToCode(int err);

// Returns `status` with "<context>: " put in front of its message; OK stays OK.
[[nodiscard]] absl::Status Annotate(const absl::Status& status, std::string_view context);

// The message of `status` as a std::string_view (Debian's abseil has its own string_view type).
inline std::string_view Message(const absl::Status& status) {
  return std::string_view(status.message().data(), status.message().size());
}

// Builders for the common codes from std::string_view messages.
absl::Status InvalidArgument(std::string_view msg);
absl::Status FailedPrecondition(std::string_view msg);
absl::Status Internal(std::string_view msg);
absl::Status NotFound(std::string_view msg);
absl::Status Unimplemented(std::string_view msg);
absl::Status PermissionDenied(std::string_view msg);
absl::Status ResourceExhausted(std::string_view msg);

}  // namespace airlock

namespace airlock {
// The optional context argument of RETURN_IF_ERROR / ASSIGN_OR_RETURN.
inline std::string_view StatusContext() { return {}; }
inline std::string StatusContext(std::string_view context) { return std::string(context); }
}  // namespace airlock

#define AIRLOCK_STATUS_CONCAT_INNER_(a, b) a##b
#define AIRLOCK_STATUS_CONCAT_(a, b) AIRLOCK_STATUS_CONCAT_INNER_(a, b)

// RETURN_IF_ERROR(expr) or RETURN_IF_ERROR(expr, context): returns from the current function
// when `expr` (an absl::Status) is not OK, with "<context>: " put in front of its message.
#define RETURN_IF_ERROR(expr, ...)                                                   \
  do {                                                                               \
    ::absl::Status airlock_status_ = (expr);                                         \
    if (!airlock_status_.ok()) {                                                     \
      return ::airlock::Annotate(airlock_status_, ::airlock::StatusContext(__VA_ARGS__)); \
    }                                                                                \
  } while (0)

// Older spelling of RETURN_IF_ERROR(expr, context).
#define RETURN_IF_ERROR_CTX(expr, context) RETURN_IF_ERROR(expr, context)

#define AIRLOCK_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr, ...)                                   \
  auto tmp = (expr);                                                                        \
  if (!tmp.ok()) return ::airlock::Annotate(tmp.status(), ::airlock::StatusContext(__VA_ARGS__)); \
  lhs = std::move(*tmp)

// ASSIGN_OR_RETURN(lhs, expr) or ASSIGN_OR_RETURN(lhs, expr, context): evaluates `expr` (an
// absl::StatusOr<T>), returns its status (with the context in front) on error, otherwise moves
// the value into `lhs`.
#define ASSIGN_OR_RETURN(lhs, expr, ...) \
  AIRLOCK_ASSIGN_OR_RETURN_IMPL_(AIRLOCK_STATUS_CONCAT_(airlock_statusor_, __LINE__), lhs, expr, \
                                 __VA_ARGS__)

#endif  // AIRLOCK_COMMON_STATUS_H_
