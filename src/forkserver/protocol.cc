#include "forkserver/protocol.h"

#include <cmath>

#include "absl/status/status.h"
#include "common/status.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace airlock::forkserver {

std::string EncodeRunRequest(const RunRequest& request) {
  nlohmann::json j = {{"template", request.template_name}, {"code", request.code}};
  if (request.timeout) j["timeoutSeconds"] = static_cast<double>(request.timeout->count()) / 1000;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<RunRequest> DecodeRunRequest(std::string_view payload) {
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("request: not valid JSON");
  if (!j.is_object()) return InvalidArgument("request: expected a JSON object");
  RunRequest r;
  for (const auto& [key, value] : j.items()) {
    if (key == "template") {
      if (!value.is_string()) return InvalidArgument("request.template: expected a string");
      r.template_name = value.get<std::string>();
    } else if (key == "code") {
      if (!value.is_string()) return InvalidArgument("request.code: expected a string");
      r.code = value.get<std::string>();
    } else if (key == "timeoutSeconds") {
      if (!value.is_number()) return InvalidArgument("request.timeoutSeconds: expected a number");
      double s = value.get<double>();
      if (!(s > 0) || s > kMaxTimeoutSeconds) {
        return InvalidArgument(
            fmt::format("request.timeoutSeconds: {} is not in (0, {}]", s, kMaxTimeoutSeconds));
      }
      r.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(s * 1000)));
    } else {
      return InvalidArgument(fmt::format("request.{}: unknown field", key));
    }
  }
  if (r.template_name.empty()) return InvalidArgument("request.template: missing");
  if (!j.contains("code")) return InvalidArgument("request.code: missing");
  if (r.code.size() > kMaxCodeBytes) {
    return InvalidArgument(fmt::format("request.code: {} bytes, more than the limit of {}",
                                       r.code.size(), kMaxCodeBytes));
  }
  return r;
}

std::string EncodeError(const absl::Status& status) {
  nlohmann::json j = {{"code", absl::StatusCodeToString(status.code())},
                      {"message", std::string(status.message())}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::Status DecodeError(std::string_view payload) {
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("message") || !j["message"].is_string()) {
    return Internal("fork-server: malformed error reply");
  }
  std::string code = j.value("code", "");
  std::string message = j["message"].get<std::string>();
  for (int c = 1; c <= 16; ++c) {
    auto sc = static_cast<absl::StatusCode>(c);
    if (absl::StatusCodeToString(sc) == code) return absl::Status(sc, message);
  }
  return Internal(message);
}

}  // namespace airlock::forkserver
