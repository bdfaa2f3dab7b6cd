// Helpers for the store's tests: a temporary directory removed at the end of the test, and a
// clock the test moves by hand.
#ifndef AIRLOCK_STORE_TEST_UTIL_H_
#define AIRLOCK_STORE_TEST_UTIL_H_

#include <stdlib.h>

#include <functional>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/files.h"
#include "gtest/gtest.h"

namespace airlock::store::test {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/airlock-store-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = tmpl;
  }
  ~TempDir() { (void)RemoveTree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Starts at a fixed whole second; thread-safe.
class FakeClock {
 public:
  absl::Time Now() const {
    std::lock_guard lock(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard lock(mu_);
    now_ += d;
  }
  std::function<absl::Time()> AsFunction() {
    return [this] { return Now(); };
  }

 private:
  mutable std::mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
};

}  // namespace airlock::store::test

// ASSERT_OK_AND_ASSIGN(lhs, expr): fails the test (returning from it) when the StatusOr `expr`
// is not OK, else moves its value into `lhs`.
#define AIRLOCK_TEST_CONCAT_INNER_(a, b) a##b
#define AIRLOCK_TEST_CONCAT_(a, b) AIRLOCK_TEST_CONCAT_INNER_(a, b)
#define AIRLOCK_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                       \
  ASSERT_TRUE(tmp.ok()) << tmp.status();                   \
  lhs = std::move(*tmp)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  AIRLOCK_ASSERT_OK_AND_ASSIGN_IMPL_(AIRLOCK_TEST_CONCAT_(statusor_, __LINE__), lhs, expr)
#define ASSERT_OK(expr)                   \
  do {                                    \
    ::absl::Status status_ = (expr);      \
    ASSERT_TRUE(status_.ok()) << status_; \
  } while (0)

#endif  // AIRLOCK_STORE_TEST_UTIL_H_
