// Strict reading of JSON request bodies: every field the caller sends must be one the endpoint
// reads, with the right type and range. Problems are collected and reported at once, each as
// "path: problem" ("ttl_seconds: must be between 1 and 86400", "argv[2]: expected a string",
// "metadata: unknown field \"colour\"" ...), as InvalidArgument (HTTP 422).
//
//   RequestReader r(body);
//   auto argv = r.Strings("argv", {.required = true});
//   auto timeout = r.Int("timeout_seconds", {.min = 1, .max = 86400});
//   RETURN_IF_ERROR(r.Finish());
#ifndef AIRLOCK_DAEMON_REQUEST_READER_H_
#define AIRLOCK_DAEMON_REQUEST_READER_H_

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace airlock::daemon {

// Parses a request body as strict JSON (duplicate keys, depth and size limits as for specs);
// malformed text is InvalidArgument with the HTTP reason "malformed_body" (400). An empty body
// reads as {}.
absl::StatusOr<nlohmann::json> ParseBody(std::string_view body);

struct FieldRule {
  bool required = false;
  int64_t min = std::numeric_limits<int64_t>::min();
  int64_t max = std::numeric_limits<int64_t>::max();
  size_t max_items = 1000;   // arrays and maps
  size_t max_length = 4096;  // each string
};

class RequestReader {
 public:
  explicit RequestReader(const nlohmann::json& object, std::string prefix = "");

  std::optional<std::string> String(std::string_view key, FieldRule rule = {});
  std::optional<int64_t> Int(std::string_view key, FieldRule rule = {});
  std::optional<bool> Bool(std::string_view key, FieldRule rule = {});
  std::optional<std::vector<std::string>> Strings(std::string_view key, FieldRule rule = {});
  std::optional<std::map<std::string, std::string>> StringMap(std::string_view key,
                                                              FieldRule rule = {});
  // The raw value of an object field (read further with a nested RequestReader).
  const nlohmann::json* Object(std::string_view key, FieldRule rule = {});

  // A problem found by the caller's own checks.
  void Error(std::string_view key, std::string message);
  // Folds a nested reader's problems into this one.
  void Merge(RequestReader& nested);

  // Unknown fields and every problem, or OK.
  absl::Status Finish();
  std::string Path(std::string_view key) const;

 private:
  const nlohmann::json* Get(std::string_view key, bool required, const char* type);

  const nlohmann::json& object_;
  std::string prefix_;
  std::set<std::string, std::less<>> seen_;
  std::vector<std::string> errors_;
  bool finished_ = false;
};

}  // namespace airlock::daemon

#endif  // AIRLOCK_DAEMON_REQUEST_READER_H_
