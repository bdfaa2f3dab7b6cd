#include "redact/internal/detectors.h"

#include <array>
#include <cmath>
#include <cstdint>

namespace airlock::redact_internal {
namespace {

// The false-positive policy, detector by detector:
//  - Prefixed tokens (AWS key ids, GitHub, GitLab, Slack, npm, PyPI, Stripe, Google, LLM keys)
//    need their documented prefix, a minimum length and a boundary before them, so that a
//    prefix inside a longer word ("taskxoxb-...", "mask-...") is not a token. AWS key ids and
//    Google/npm keys have a fixed length and need a boundary after them too.
//  - Slack tokens need the numeric team/user part ("xoxb-123-..."), so "xoxo-hugs-and-kisses" is
//    not one; LLM keys ("sk-...") must mix character classes, so "sk-" followed by a long
//    kebab-case name is not one.
//  - AWS secret keys have no prefix: 40 base64 characters are a secret only right after a key
//    name containing "aws ... secret" or "secret_access_key". A bare git sha (40 hex) is not.
//  - JWTs need a base64url JSON header and payload ("eyJ...": '{"') of at least 8 characters
//    each; a header alone is not a token.
//  - Private keys: the whole block from BEGIN to END, including "\n"-escaped blocks inside
//    JSON strings. Public keys and certificates are not secrets. A BEGIN with no END is
//    redacted to the end of the text (fail closed).
//  - Authorization headers and URL passwords: the credential after a scheme ("Bearer ...") or
//    between "user:" and "@", unless it is a placeholder ("$TOKEN", "<token>", "****").
//  - Assignments to a key ending in password/passwd/passphrase/_pwd/secret/token/api_key/
//    access_key/private_key/auth_key/client_secret/credential(s) (optionally followed by
//    key/value/string): only values that LooksSecret(). So "password=changeme",
//    "token: ${GITHUB_TOKEN}", "password: <redacted>" and "max_tokens=4096" stay, while
//    "password=Xk9#mQ2vLp" and "api_key: 3f9a8c2e1b7d4f60" go. A weak real password
//    ("password=hunter22") is not caught by this detector: register it as an explicit value.
//    Keys are matched case-insensitively; "PWD=" alone is the shell's working directory. A
//    quoted value runs to its closing quote; a bare one ends at white space, a quote, one of
//    `,;&<>(){}[]` or '=' (so query strings and argument lists split), keeping up to two
//    trailing '=' (base64 padding).
constexpr DetectorSpec kDetectors[] = {
    {SecretKind::kAwsAccessKey,
     R"re((?:^|[^A-Za-z0-9])((?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16})(?:[^A-Za-z0-9]|$))re",
     Check::kNone, Tail::kTokenChars},
    {SecretKind::kAwsSecretKey,
     R"re((?i)(?:aws[a-z0-9_.\-]{0,24}secret[a-z0-9_.\-]{0,24}|secret_?access_?key)["']?[ \t]*)re"
     R"re((?:=|:=|:|=>)[ \t]*["']?([a-z0-9/+]{40})(?:[^a-z0-9/+=]|$))re",
     Check::kNone, Tail::kBase64Chars},
    {SecretKind::kGithubToken,
     R"re((?:^|[^A-Za-z0-9_])(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}))re",
     Check::kNone, Tail::kTokenChars},
    {SecretKind::kGitlabToken,
     R"re((?:^|[^A-Za-z0-9_\-])((?:glpat|gldt|glrt|glptt|glft|glimt|glcbt|glsoat|gloas|glagent|)re"
     R"re(glffct)-[A-Za-z0-9_\-]{20,}|GR1348941[A-Za-z0-9_\-]{20,}))re",
     Check::kNone, Tail::kTokenChars},
    {SecretKind::kSlackToken,
     R"re((?:^|[^A-Za-z0-9_\-])(xox[abeoprs]-[0-9]+-[A-Za-z0-9\-]{8,}|)re"
     R"re(xapp-[0-9]+-[A-Za-z0-9\-]{10,}))re",
     Check::kNone, Tail::kTokenChars},
    {SecretKind::kSlackWebhook,
     R"re(https://hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/\-]{16,}))re",
     Check::kNone, Tail::kNonSpace},
    {SecretKind::kLlmApiKey,
     R"re((?:^|[^A-Za-z0-9_\-])(sk-(?:ant-[a-z0-9]{2,10}-|proj-|svcacct-|admin-|or-v1-)?)re"
     R"re([A-Za-z0-9_\-]{32,}))re",
     Check::kMixedChars, Tail::kTokenChars},
    {SecretKind::kGoogleApiKey,
     R"re((?:^|[^A-Za-z0-9_\-])(AIza[0-9A-Za-z_\-]{35})(?:[^0-9A-Za-z_\-]|$))re", Check::kNone,
     Tail::kTokenChars},
    {SecretKind::kStripeKey, R"re((?:^|[^A-Za-z0-9_])((?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}))re",
     Check::kNone, Tail::kTokenChars},
    {SecretKind::kNpmToken, R"re((?:^|[^A-Za-z0-9_])(npm_[A-Za-z0-9]{36})(?:[^A-Za-z0-9]|$))re",
     Check::kNone, Tail::kTokenChars},
    {SecretKind::kPypiToken,
     R"re((?:^|[^A-Za-z0-9_\-])(pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{16,}))re", Check::kNone,
     Tail::kTokenChars},
    {SecretKind::kJwt,
     R"re((?:^|[^A-Za-z0-9_\-])(eyJ[A-Za-z0-9_\-]{8,}\.ey[A-Za-z0-9_\-]{8,})re"
     R"re((?:\.[A-Za-z0-9_\-]*)?))re",
     Check::kNone, Tail::kJwtChars},
    {SecretKind::kPrivateKey,
     R"re(-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----(?s:.*?))re"
     R"re((?:-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----|\z))re",
     Check::kNone, Tail::kPemEnd},
    {SecretKind::kAuthorization,
     R"re((?i)(?:proxy-)?authorization["']?[ \t]*[:=][ \t]*["']?)re"
     R"re((?:bearer|basic|token|bot|apikey|negotiate)[ \t]+([a-z0-9._~+/=\-]{8,}))re",
     Check::kNotPlaceholder, Tail::kBase64Chars},
    {SecretKind::kUrlPassword, R"re((?i)[a-z][a-z0-9+.\-]*://[^\s:/@"'<>]*:([^\s/@"'<>]+)@)re",
     Check::kNotPlaceholder, Tail::kNonSpace},
    {SecretKind::kCredential,
     R"re((?i)[a-z0-9_.\-]*(?:password|passwd|passphrase|[_.\-]pwd|secret|token|api[_.\-]?key|)re"
     R"re(access[_.\-]?key|private[_.\-]?key|auth[_.\-]?key|client[_.\-]?secret|credentials?))re"
     R"re((?:[_.\-]?(?:key|value|string|str))?["']?[ \t]*(?:=|:=|:|=>)[ \t]*)re"
     R"re((?:"([^"\r\n]{8,})"|'([^'\r\n]{8,})'|([^\s"'`,;&<>(){}\[\]=]{8,}={0,2})))re",
     Check::kLooksSecret, Tail::kNonSpace},
};

bool IsAlnum(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

std::string PercentEncode(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (IsAlnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string Base64(std::string_view bytes, const char* alphabet) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(alphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(alphabet[(acc << (6 - bits)) & 63]);
  return out;
}

}  // namespace

std::span<const DetectorSpec> DetectorSpecs() { return kDetectors; }

std::string LoosePattern(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      out += pattern.substr(i, 2);
      ++i;
      continue;
    }
    if (in_class) {
      // A ']' right after '[' or '[^' is a member, not the end.
      bool first = out.back() == '[' || (out.size() >= 2 && out.ends_with("[^"));
      if (c == ']' && !first) in_class = false;
      out += c;
      continue;
    }
    if (c == '[') in_class = true;
    if (c == '{') {
      size_t j = i + 1;
      size_t digits = j;
      while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9') ++j;
      bool at_least_one = j > digits && pattern.substr(digits, j - digits).find_first_not_of('0') !=
                                            std::string_view::npos;
      if (j > digits && j < pattern.size() && pattern[j] == ',') {
        ++j;
        while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9') ++j;
      }
      if (j > digits && j < pattern.size() && pattern[j] == '}') {
        out += at_least_one ? '+' : '*';
        i = j;
        continue;
      }
    }
    out += c;
  }
  return out;
}

const char* PemEndPattern() { return R"re(-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----)re"; }

bool IsTailByte(Tail tail, unsigned char c) {
  switch (tail) {
    case Tail::kNone:
    case Tail::kPemEnd:
      return false;
    case Tail::kTokenChars:
      return IsAlnum(c) || c == '_' || c == '-';
    case Tail::kBase64Chars:
      return IsAlnum(c) || c == '+' || c == '/' || c == '=';
    case Tail::kJwtChars:
      return IsAlnum(c) || c == '_' || c == '-' || c == '.';
    case Tail::kNonSpace:
      return !(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v');
  }
  return false;
}

double ShannonEntropy(std::string_view s) {
  if (s.empty()) return 0;
  std::array<uint32_t, 256> counts{};
  for (unsigned char c : s) ++counts[c];
  double entropy = 0;
  const double n = static_cast<double>(s.size());
  for (uint32_t count : counts) {
    if (count == 0) continue;
    double p = count / n;
    entropy -= p * std::log2(p);
  }
  return entropy;
}

bool IsPlaceholder(std::string_view value) {
  if (value.empty()) return true;
  char first = value.front();
  if (first == '$' || first == '%' || first == '<' || first == '{' || first == '*') return true;
  if (value.find("${") != std::string_view::npos || value.find("{{") != std::string_view::npos) {
    return true;
  }
  // "xxxxxxxx", "XXXX-XXXX", "........": one repeated character, separators aside.
  char repeated = 0;
  for (char c : value) {
    if (c == '-' || c == '_' || c == '.') continue;
    if (repeated == 0) repeated = c;
    if (c != repeated) return false;
  }
  return true;
}

bool HasMixedChars(std::string_view value) {
  bool lower = false, upper = false, digit = false;
  for (char c : value) {
    lower |= c >= 'a' && c <= 'z';
    upper |= c >= 'A' && c <= 'Z';
    digit |= c >= '0' && c <= '9';
  }
  return int{lower} + int{upper} + int{digit} >= 2 && !IsPlaceholder(value);
}

bool LooksSecret(std::string_view value) {
  if (value.size() < 8 || IsPlaceholder(value)) return false;
  bool lower = false, upper = false, digit = false, other = false;
  for (char c : value) {
    bool is_lower = c >= 'a' && c <= 'z';
    bool is_upper = c >= 'A' && c <= 'Z';
    bool is_digit = c >= '0' && c <= '9';
    lower |= is_lower;
    upper |= is_upper;
    digit |= is_digit;
    other |= !(is_lower || is_upper || is_digit);
  }
  const int classes = int{lower} + int{upper} + int{digit} + int{other};
  const double entropy = ShannonEntropy(value);
  if (entropy < 3.0) return false;
  return classes >= 2 || (value.size() >= 20 && entropy >= 3.5);
}

bool Passes(Check check, std::string_view value) {
  switch (check) {
    case Check::kNone:
      return true;
    case Check::kLooksSecret:
      return LooksSecret(value);
    case Check::kMixedChars:
      return HasMixedChars(value);
    case Check::kNotPlaceholder:
      return !IsPlaceholder(value);
  }
  return true;
}

std::vector<std::string> EncodedForms(std::string_view value, size_t min_length) {
  std::vector<std::string> forms;
  auto add = [&](std::string form) {
    if (form.size() < min_length || form == value) return;
    for (const std::string& f : forms) {
      if (f == form) return;
    }
    forms.push_back(std::move(form));
  };
  add(PercentEncode(value));
  // Host names come back lowercased (the egress proxy and DNS fold case): a value sent as a
  // name's label is reported in lower case.
  std::string lower(value);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  add(std::move(lower));

  // In base64, output character c carries bits [6c, 6c+6) of the input. With the value at
  // byte offset k (k = 0, 1, 2 covers every alignment), the characters that depend on the
  // value's bytes alone are those from ceil(8k/6) to floor((8(k+len)-6)/6).
  static constexpr char kStd[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static constexpr char kUrl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  for (const char* alphabet : {kStd, kUrl}) {
    for (size_t k = 0; k < 3; ++k) {
      std::string padded(k, '\0');
      padded.append(value);
      padded.append(2, '\0');
      std::string encoded = Base64(padded, alphabet);
      size_t first = (8 * k + 5) / 6;
      size_t last = (8 * (k + value.size()) - 6) / 6;
      if (last < first || last >= encoded.size()) continue;
      add(encoded.substr(first, last - first + 1));
    }
  }
  return forms;
}

}  // namespace airlock::redact_internal
