#include "common/logging.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "fmt/format.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace airlock {
namespace {

spdlog::level::level_enum ToSpd(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::warn;
}

LogLevel LevelFromEnv() {
  const char* v = std::getenv("AIRLOCK_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kWarn;
  std::string_view s(v);
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "error") return LogLevel::kError;
  if (s == "off") return LogLevel::kOff;
  return LogLevel::kWarn;
}

struct Registry {
  std::mutex mu;
  LogLevel level = LevelFromEnv();
  std::shared_ptr<spdlog::sinks::stderr_sink_mt> sink =
      std::make_shared<spdlog::sinks::stderr_sink_mt>();
  std::map<std::string, std::unique_ptr<Logger>, std::less<>> loggers;
  std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> impls;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: loggers outlive statics.
  return *registry;
}

bool NeedsQuotes(std::string_view s) {
  if (s.empty()) return true;
  for (char c : s) {
    if (c == ' ' || c == '"' || c == '=' || c == '\n' || c == '\t') return true;
  }
  return false;
}

void AppendValue(std::string& out, const LogField::Value& value) {
  struct Visitor {
    std::string& out;
    void operator()(std::string_view s) const {
      if (!NeedsQuotes(s)) {
        out.append(s);
        return;
      }
      out.push_back('"');
      for (char c : s) {
        if (c == '"' || c == '\\') out.push_back('\\');
        if (c == '\n') {
          out.append("\\n");
          continue;
        }
        out.push_back(c);
      }
      out.push_back('"');
    }
    void operator()(int64_t v) const { fmt::format_to(std::back_inserter(out), "{}", v); }
    void operator()(uint64_t v) const { fmt::format_to(std::back_inserter(out), "{}", v); }
    void operator()(double v) const { fmt::format_to(std::back_inserter(out), "{:.3f}", v); }
    void operator()(bool v) const { out.append(v ? "true" : "false"); }
  };
  std::visit(Visitor{out}, value);
}

}  // namespace

std::string FormatLogFields(LogFields fields) {
  std::string out;
  for (const LogField& f : fields) {
    out.push_back(' ');
    out.append(f.key);
    out.push_back('=');
    AppendValue(out, f.value);
  }
  return out;
}

Logger::Logger(std::shared_ptr<spdlog::logger> impl) : impl_(std::move(impl)) {}

bool Logger::Enabled(LogLevel level) const { return impl_->should_log(ToSpd(level)); }

void Logger::Log(LogLevel level, std::string_view msg, LogFields fields) const {
  if (!Enabled(level)) return;
  std::string line(msg);
  line += FormatLogFields(fields);
  impl_->log(ToSpd(level), "{}", line);
}

void Logger::Debug(std::string_view msg, LogFields fields) const {
  Log(LogLevel::kDebug, msg, fields);
}
void Logger::Info(std::string_view msg, LogFields fields) const {
  Log(LogLevel::kInfo, msg, fields);
}
void Logger::Warn(std::string_view msg, LogFields fields) const {
  Log(LogLevel::kWarn, msg, fields);
}
void Logger::Error(std::string_view msg, LogFields fields) const {
  Log(LogLevel::kError, msg, fields);
}

const Logger& GetLogger(std::string_view component) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.loggers.find(component);
  if (it != r.loggers.end()) return *it->second;
  auto impl = std::make_shared<spdlog::logger>(std::string(component), r.sink);
  impl->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %n: %v");
  impl->set_level(ToSpd(r.level));
  r.impls.emplace(std::string(component), impl);
  auto [pos, inserted] =
      r.loggers.emplace(std::string(component), std::make_unique<Logger>(std::move(impl)));
  return *pos->second;
}

void SetLogLevel(LogLevel level) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.level = level;
  for (auto& [name, impl] : r.impls) impl->set_level(ToSpd(level));
}

}  // namespace airlock
