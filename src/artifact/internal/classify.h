// What a file is, from its path and from the first bytes of its content: the never-leave rules
// and the binary and private-key sniffing of the release gate. Private to src/artifact.
#ifndef AIRLOCK_ARTIFACT_INTERNAL_CLASSIFY_H_
#define AIRLOCK_ARTIFACT_INTERNAL_CLASSIFY_H_

#include <optional>
#include <string>
#include <string_view>

namespace airlock::artifact::internal {

struct Refusal {
  std::string rule;    // "never-leave/env-file"
  std::string detail;  // "basename .env"
};

// The never-leave rule the path alone decides (home directory, dependency cache, private key,
// env file, token file), in that order; nullopt when none does. `path` is absolute.
std::optional<Refusal> NeverLeaveByPath(std::string_view path);

// An absolute path without "//", "." or ".." segments and without a trailing '/'.
bool IsNormalizedAbsolute(std::string_view path);

bool IsAtOrUnder(std::string_view path, std::string_view dir);

struct HeadKind {
  std::string binary;       // "ELF executable", "zip archive", "binary data (NUL byte at 12)"...
  std::string private_key;  // "PEM private key", "OpenSSH private key", ... when the file is one
};

// Sniffs the first bytes of a file (the whole file when shorter): binary by magic numbers or a
// NUL byte, a private key by the header it starts with (after blanks and a UTF-8 BOM).
HeadKind SniffHead(std::string_view head);

}  // namespace airlock::artifact::internal

#endif  // AIRLOCK_ARTIFACT_INTERNAL_CLASSIFY_H_
