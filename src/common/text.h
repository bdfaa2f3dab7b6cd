// Small text helpers: hex digits and UTF-8 validity.
#ifndef AIRLOCK_COMMON_TEXT_H_
#define AIRLOCK_COMMON_TEXT_H_

#include <string_view>

namespace airlock {

// 0-15 for '0'-'9', 'a'-'f', 'A'-'F'; -1 for any other character.
int HexDigitValue(char c);

// Whether `text` is well-formed UTF-8: shortest forms only (an overlong "\xc0\xae" is not '.'),
// no UTF-16 surrogates, nothing beyond U+10FFFF.
bool IsValidUtf8(std::string_view text);

}  // namespace airlock

#endif  // AIRLOCK_COMMON_TEXT_H_
