#include "spec/internal/text.h"

#include <cstdint>

#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace airlock::spec::internal {

bool IsIdentifier(std::string_view text) {
  if (text.empty()) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

std::string FieldPath(std::string_view parent, std::string_view key) {
  if (!IsIdentifier(key)) return fmt::format("{}[{}]", parent, Quote(key));
  if (parent.empty()) return std::string(key);
  return fmt::format("{}.{}", parent, key);
}

std::string IndexPath(std::string_view parent, size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

std::string Quote(std::string_view text, size_t max_chars) {
  std::string cut;
  if (text.size() > max_chars) {
    size_t end = max_chars;
    // Do not split a UTF-8 sequence: back up over continuation bytes.
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
    cut = std::string(text.substr(0, end)) + "...";
  } else {
    cut = std::string(text);
  }
  // Invalid UTF-8 is shown as U+FFFD rather than failing the message.
  return nlohmann::json(cut).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace airlock::spec::internal
