// The format detectors behind Redactor, and the helpers that decide what counts as a secret.
// Private to src/redact.
#ifndef AIRLOCK_REDACT_INTERNAL_DETECTORS_H_
#define AIRLOCK_REDACT_INTERNAL_DETECTORS_H_

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redact/redactor.h"

namespace airlock::redact_internal {

// What a match must also satisfy, beyond its pattern, to be a finding.
enum class Check {
  kNone,
  kLooksSecret,     // LooksSecret(value): entropy and character mix (credential assignments)
  kMixedChars,      // HasMixedChars(value): a prefixed key that is not an ordinary word
  kNotPlaceholder,  // !IsPlaceholder(value): "$TOKEN", "<password>", "****", "{{ x }}"
};

// How a secret that is longer than a stream's window continues (StreamRedactor's fail-closed
// mode swallows input while it does). kNone: the secret has a bounded length.
enum class Tail : int {
  kNone = 0,
  kTokenChars,   // [A-Za-z0-9_-]
  kBase64Chars,  // [A-Za-z0-9+/=]
  kJwtChars,     // [A-Za-z0-9_.-]
  kNonSpace,     // any byte but ASCII white space
  kPemEnd,       // everything up to and including a "-----END ... PRIVATE KEY-----" line
};

// One detector: `pattern` is an RE2 pattern (Latin-1, so it matches bytes) whose first capture
// group that participates in a match is the secret; text around it (a key name, a boundary
// byte) is context that stays. A pattern without groups is a secret as a whole, and is cheaper:
// RE2 then finds it with its DFA alone, where groups take a slower pass over the match.
struct DetectorSpec {
  SecretKind kind;
  const char* pattern;
  Check check;
  Tail tail;
};

std::span<const DetectorSpec> DetectorSpecs();

// `pattern` with each counted repetition loosened ({n}, {n,} and {n,m} become + when n >= 1, *
// when n = 0): it matches wherever `pattern` does, and a set of these compiles several times
// faster (RE2 writes a counted part out n times), so it is the prefilter that says which
// detectors may match. Braces inside a character class or escaped stay.
std::string LoosePattern(std::string_view pattern);

// The END line of a private key block, for StreamRedactor's fail-closed mode.
const char* PemEndPattern();

bool IsTailByte(Tail tail, unsigned char c);

// Shannon entropy of the byte distribution of `s`, in bits per byte.
double ShannonEntropy(std::string_view s);

// A template variable, a masked value or an angle-bracket placeholder.
bool IsPlaceholder(std::string_view value);

// At least two of lower case, upper case and digits, and not a placeholder.
bool HasMixedChars(std::string_view value);

// The policy for values assigned to password=, token:, ...: at least 8 bytes, not a
// placeholder, at least 3 bits of entropy per byte, and either two classes of characters
// (lower, upper, digit, other) or at least 20 bytes with 3.5 bits per byte.
bool LooksSecret(std::string_view value);

bool Passes(Check check, std::string_view value);

// The forms of an explicit secret value that Redactor matches besides the value itself:
// percent-encoding, lower case, and the value-only part of its base64 encodings (see
// Redactor::Create).
// Forms shorter than `min_length` and forms equal to the value are left out.
std::vector<std::string> EncodedForms(std::string_view value, size_t min_length);

}  // namespace airlock::redact_internal

#endif  // AIRLOCK_REDACT_INTERNAL_DETECTORS_H_
