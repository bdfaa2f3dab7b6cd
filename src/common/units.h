// Parsing of human-written sizes and durations ("512M", "1.5GiB", "30s", "250ms", "2m").
#ifndef AIRLOCK_COMMON_UNITS_H_
#define AIRLOCK_COMMON_UNITS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace airlock {

// Bytes from "1024", "512K", "512M", "2G", "1T" (powers of 1024; "KiB", "MB" and lower case are
// accepted too). Errors name the input.
absl::StatusOr<int64_t> ParseBytes(std::string_view text);

// A duration from "30" (seconds), "30s", "250ms", "2m", "1h", "1.5s".
absl::StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);

// "1.5 MiB", "512 B", "3.0 GiB".
std::string FormatBytes(int64_t bytes);

}  // namespace airlock

#endif  // AIRLOCK_COMMON_UNITS_H_
