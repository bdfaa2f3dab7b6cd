// How an absl::Status becomes an HTTP response: the status code is chosen here and nowhere else.
//
// Every error body is {"code": "...", "message": "...", "request_id": "..."}. The HTTP status
// follows the absl code, refined by an optional reason attached with WithReason where one absl
// code covers several HTTP answers (a body that is not JSON at all is 400, a well-formed body
// with a wrong field is 422; too large is 413, too many is 429). Internal errors never show
// their detail to the client: the body names the request id and the detail goes to the log.
#ifndef AIRLOCK_HTTP_ERRORS_H_
#define AIRLOCK_HTTP_ERRORS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace airlock::http {

// Reasons that refine an absl code; the string is the error body's "code".
enum class Reason {
  kNone,
  kMalformedBody,     // InvalidArgument -> 400 (not parseable at all)
  kPayloadTooLarge,   // ResourceExhausted -> 413
  kUnauthenticated,   // Unauthenticated -> 401 (no or unknown credentials)
  kMethodNotAllowed,  // NotFound-like -> 405
};

// Attaches `reason` to `status` (an OK status stays OK).
absl::Status WithReason(absl::Status status, Reason reason);

// The HTTP status for `status` (never 2xx for an error). The only place this mapping exists.
int HttpStatusFor(const absl::Status& status);

// The stable machine-readable code of the error body: "invalid_argument", "not_found",
// "malformed_body", "payload_too_large", ...
std::string ErrorCodeFor(const absl::Status& status);

// The error body. For 5xx answers the message is generic and names the request id.
nlohmann::json ErrorBody(const absl::Status& status, std::string_view request_id);

}  // namespace airlock::http

#endif  // AIRLOCK_HTTP_ERRORS_H_
