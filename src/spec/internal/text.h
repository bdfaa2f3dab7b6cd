// Small text helpers shared by the spec's readers, decoder and validation: field paths, quoting
// of untrusted text in messages (UTF-8 checks are in common/text.h).
#ifndef AIRLOCK_SPEC_INTERNAL_TEXT_H_
#define AIRLOCK_SPEC_INTERNAL_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace airlock::spec::internal {

// "parent.key", or `parent["key"]` when `key` is not an identifier ([A-Za-z_][A-Za-z0-9_]*);
// just the key when `parent` is empty.
std::string FieldPath(std::string_view parent, std::string_view key);

// "parent[index]".
std::string IndexPath(std::string_view parent, size_t index);

// `text` as a JSON string literal with its quotes, cut to `max_chars` characters with "..." (for
// echoing untrusted input in messages).
std::string Quote(std::string_view text, size_t max_chars = 64);

bool IsIdentifier(std::string_view text);

}  // namespace airlock::spec::internal

#endif  // AIRLOCK_SPEC_INTERNAL_TEXT_H_
