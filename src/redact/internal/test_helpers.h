// Helpers shared by the redact tests.
#ifndef AIRLOCK_REDACT_INTERNAL_TEST_HELPERS_H_
#define AIRLOCK_REDACT_INTERNAL_TEST_HELPERS_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "gtest/gtest.h"
#include "redact/redactor.h"

namespace airlock::redact_testing {

// Joins a token's prefix and body. Tests write sample tokens in two parts so that secret
// scanners do not flag the test sources.
inline std::string Tok(std::string_view prefix, std::string_view body) {
  return std::string(prefix) + std::string(body);
}

// A redactor that must build (a failed EXPECT otherwise).
inline Redactor Make(std::vector<std::string> values, RedactorOptions options = {}) {
  absl::StatusOr<Redactor> r = Redactor::Create(std::move(values), options);
  EXPECT_TRUE(r.ok()) << Message(r.status());
  return *std::move(r);
}

}  // namespace airlock::redact_testing

#endif  // AIRLOCK_REDACT_INTERNAL_TEST_HELPERS_H_
