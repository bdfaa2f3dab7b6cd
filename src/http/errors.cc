#include "http/errors.h"

#include <cctype>

#include "absl/strings/cord.h"

namespace airlock::http {
namespace {

constexpr char kReasonUrl[] = "airlock.dev/http-reason";

const char* ReasonName(Reason r) {
  switch (r) {
    case Reason::kNone:
      return "";
    case Reason::kMalformedBody:
      return "malformed_body";
    case Reason::kPayloadTooLarge:
      return "payload_too_large";
    case Reason::kUnauthenticated:
      return "unauthenticated";
    case Reason::kMethodNotAllowed:
      return "method_not_allowed";
  }
  return "";
}

Reason ReasonOf(const absl::Status& status) {
  auto payload = status.GetPayload(kReasonUrl);
  if (!payload) return Reason::kNone;
  std::string name(*payload);
  for (Reason r : {Reason::kMalformedBody, Reason::kPayloadTooLarge, Reason::kUnauthenticated,
                   Reason::kMethodNotAllowed}) {
    if (name == ReasonName(r)) return r;
  }
  return Reason::kNone;
}

}  // namespace

absl::Status WithReason(absl::Status status, Reason reason) {
  if (!status.ok() && reason != Reason::kNone) {
    status.SetPayload(kReasonUrl, absl::Cord(ReasonName(reason)));
  }
  return status;
}

int HttpStatusFor(const absl::Status& status) {
  switch (ReasonOf(status)) {
    case Reason::kMalformedBody:
      return 400;
    case Reason::kPayloadTooLarge:
      return 413;
    case Reason::kUnauthenticated:
      return 401;
    case Reason::kMethodNotAllowed:
      return 405;
    case Reason::kNone:
      break;
  }
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
      return 422;
    case absl::StatusCode::kOutOfRange:
      return 422;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kCancelled:
      return 499;
    default:
      return 500;
  }
}

std::string ErrorCodeFor(const absl::Status& status) {
  if (Reason r = ReasonOf(status); r != Reason::kNone) return ReasonName(r);
  if (HttpStatusFor(status) >= 500 && status.code() != absl::StatusCode::kUnimplemented &&
      status.code() != absl::StatusCode::kUnavailable &&
      status.code() != absl::StatusCode::kDeadlineExceeded) {
    return "internal";
  }
  std::string name = absl::StatusCodeToString(status.code());  // "INVALID_ARGUMENT"
  for (char& c : name) c = c == '_' ? '_' : static_cast<char>(std::tolower(c));
  return name;
}

nlohmann::json ErrorBody(const absl::Status& status, std::string_view request_id) {
  std::string code = ErrorCodeFor(status);
  std::string message = code == "internal"
                            ? "internal error; the server log has the details under request id " +
                                  std::string(request_id)
                            : std::string(status.message());
  return {{"code", code}, {"message", message}, {"request_id", request_id}};
}

}  // namespace airlock::http
