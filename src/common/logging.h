// Structured logging on spdlog: one logger per component, messages followed by key=value fields.
//
//   static const Logger& log = GetLogger("engine");
//   log.Info("sandbox started", {{"sandbox", id.value()}, {"setup_ms", 3.2}});
//   // 2026-11-22T10:00:00.123 info engine: sandbox started sandbox=sb-1a2b setup_ms=3.2
//
// Loggers write to stderr. Thread-safe. Never call from between clone() and execve().
#ifndef AIRLOCK_COMMON_LOGGING_H_
#define AIRLOCK_COMMON_LOGGING_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

namespace spdlog {
class logger;
}

namespace airlock {

// One structured field. Strings containing spaces, quotes or '=' are quoted in the output.
struct LogField {
  using Value = std::variant<std::string_view, int64_t, uint64_t, double, bool>;
  LogField(std::string_view k, std::string_view v) : key(k), value(v) {}
  LogField(std::string_view k, const std::string& v) : key(k), value(std::string_view(v)) {}
  LogField(std::string_view k, const char* v) : key(k), value(std::string_view(v)) {}
  LogField(std::string_view k, int v) : key(k), value(int64_t{v}) {}
  LogField(std::string_view k, long v) : key(k), value(int64_t{v}) {}
  LogField(std::string_view k, long long v) : key(k), value(int64_t{v}) {}
  LogField(std::string_view k, unsigned v) : key(k), value(uint64_t{v}) {}
  LogField(std::string_view k, unsigned long v) : key(k), value(uint64_t{v}) {}
  LogField(std::string_view k, unsigned long long v) : key(k), value(uint64_t{v}) {}
  LogField(std::string_view k, double v) : key(k), value(v) {}
  LogField(std::string_view k, bool v) : key(k), value(v) {}
  std::string_view key;
  Value value;
};
using LogFields = std::initializer_list<LogField>;

enum class LogLevel { kDebug, kInfo, kWarn, kError, kOff };

class Logger {
 public:
  explicit Logger(std::shared_ptr<spdlog::logger> impl);

  void Debug(std::string_view msg, LogFields fields = {}) const;
  void Info(std::string_view msg, LogFields fields = {}) const;
  void Warn(std::string_view msg, LogFields fields = {}) const;
  void Error(std::string_view msg, LogFields fields = {}) const;
  bool Enabled(LogLevel level) const;

 private:
  void Log(LogLevel level, std::string_view msg, LogFields fields) const;
  std::shared_ptr<spdlog::logger> impl_;
};

// The logger of `component` (created on first use; lives for the whole process).
const Logger& GetLogger(std::string_view component);

// Sets the level of every logger, present and future. The default is kWarn, or the value of
// AIRLOCK_LOG_LEVEL (debug|info|warn|error|off) in the environment.
void SetLogLevel(LogLevel level);

// Renders fields as " k=v k2=\"v 2\"" (leading space per field). Exposed for tests.
std::string FormatLogFields(LogFields fields);

}  // namespace airlock

#endif  // AIRLOCK_COMMON_LOGGING_H_
