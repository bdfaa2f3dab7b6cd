#include "common/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "common/status.h"
#include "fmt/format.h"

namespace airlock {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "12.5Mi" into the number and the lower-cased unit suffix.
bool SplitNumber(std::string_view text, double* number, std::string* unit) {
  text = Trim(text);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, *number);
  if (ec != std::errc() || ptr != text.data() + i) return false;
  unit->clear();
  for (char c : Trim(text.substr(i))) {
    unit->push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return std::isfinite(*number) && *number >= 0;
}

}  // namespace

absl::StatusOr<int64_t> ParseBytes(std::string_view text) {
  double number = 0;
  std::string unit;
  if (!SplitNumber(text, &number, &unit)) {
    return InvalidArgument(fmt::format(
        "invalid size \"{}\": expected a number with an optional unit (K, M, G, T)", text));
  }
  double multiplier = 0;
  if (unit.empty() || unit == "b") {
    multiplier = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    multiplier = 1024.0;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    multiplier = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    multiplier = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    multiplier = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return InvalidArgument(fmt::format("invalid size \"{}\": unknown unit \"{}\"", text, unit));
  }
  double bytes = number * multiplier;
  if (bytes > static_cast<double>(std::numeric_limits<int64_t>::max() / 2)) {
    return InvalidArgument(fmt::format("invalid size \"{}\": too large", text));
  }
  return static_cast<int64_t>(bytes);
}

absl::StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  double number = 0;
  std::string unit;
  if (!SplitNumber(text, &number, &unit)) {
    return InvalidArgument(fmt::format(
        "invalid duration \"{}\": expected a number with an optional unit (ms, s, m, h)", text));
  }
  double ms = 0;
  if (unit.empty() || unit == "s") {
    ms = number * 1000;
  } else if (unit == "ms") {
    ms = number;
  } else if (unit == "m" || unit == "min") {
    ms = number * 60'000;
  } else if (unit == "h") {
    ms = number * 3'600'000;
  } else {
    return InvalidArgument(fmt::format("invalid duration \"{}\": unknown unit \"{}\"", text, unit));
  }
  if (ms > 1e15) return InvalidArgument(fmt::format("invalid duration \"{}\": too large", text));
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

}  // namespace airlock
