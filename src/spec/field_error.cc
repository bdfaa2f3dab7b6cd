#include "spec/field_error.h"

#include "fmt/format.h"

namespace airlock::spec {

std::string ToString(const FieldError& error) {
  if (error.path.empty()) return error.message;
  return fmt::format("{}: {}", error.path, error.message);
}

std::string FormatFieldErrors(const std::vector<FieldError>& errors, size_t max_lines) {
  std::string out;
  for (size_t i = 0; i < errors.size(); ++i) {
    if (i == max_lines) {
      size_t rest = errors.size() - max_lines;
      out += fmt::format("\n... and {} more problem{}", rest, rest == 1 ? "" : "s");
      break;
    }
    if (i > 0) out += '\n';
    out += ToString(errors[i]);
  }
  return out;
}

}  // namespace airlock::spec
