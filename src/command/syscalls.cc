#include "command/syscalls.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "common/status.h"
#include "fmt/format.h"

namespace airlock {
namespace {

constexpr std::pair<SyscallEventKind, const char*> kKindNames[] = {
    {SyscallEventKind::kDenied, "denied"},
    {SyscallEventKind::kFileOpened, "file"},
    {SyscallEventKind::kExec, "exec"},
    {SyscallEventKind::kConnect, "connect"},
};

std::optional<SyscallEventKind> KindFromString(std::string_view s) {
  for (const auto& [kind, name] : kKindNames) {
    if (s == name) return kind;
  }
  return std::nullopt;
}

// Only the fields an event of its kind carries, so that the JSON reads without noise.
nlohmann::json EventFields(const SyscallEvent& e) {
  nlohmann::json j = {{"kind", ToString(e.kind)}, {"syscall", e.syscall}};
  if (!e.action.empty()) j["action"] = e.action;
  if (e.kind == SyscallEventKind::kDenied) j["rule"] = e.rule;
  if (!e.path.empty()) j["path"] = e.path;
  if (!e.mode.empty()) j["mode"] = e.mode;
  if (!e.argv.empty()) j["argv"] = e.argv;
  if (!e.address.empty()) j["address"] = e.address;
  if (!e.detail.empty()) j["detail"] = e.detail;
  return j;
}

SyscallEvent EventFromJson(const nlohmann::json& j) {
  SyscallEvent e;
  e.kind = KindFromString(j.value("kind", "")).value_or(SyscallEventKind::kDenied);
  e.syscall = j.value("syscall", "");
  e.action = j.value("action", "");
  e.rule = j.value("rule", -1);
  e.path = j.value("path", "");
  e.mode = j.value("mode", "");
  e.argv = j.value("argv", std::vector<std::string>{});
  e.address = j.value("address", "");
  e.detail = j.value("detail", "");
  return e;
}

}  // namespace

const char* ToString(SyscallEventKind kind) {
  for (const auto& [k, name] : kKindNames) {
    if (k == kind) return name;
  }
  return "denied";
}

nlohmann::json ToJson(const SyscallEvent& e) { return EventFields(e); }

nlohmann::json ToJson(const SyscallReport& r) {
  nlohmann::json counts = nlohmann::json::array();
  for (const SyscallCount& c : r.counts) counts.push_back({{"name", c.name}, {"count", c.count}});
  nlohmann::json denied = nlohmann::json::array();
  for (const SyscallEvent& e : r.denied_calls) denied.push_back(EventFields(e));
  nlohmann::json files = nlohmann::json::array();
  for (const FileAccess& f : r.files) {
    files.push_back({{"path", f.path}, {"mode", f.mode}, {"count", f.count}});
  }
  nlohmann::json execs = nlohmann::json::array();
  for (const ExecRecord& x : r.execs) execs.push_back({{"path", x.path}, {"argv", x.argv}});
  nlohmann::json endpoints = nlohmann::json::array();
  for (const Endpoint& p : r.endpoints) {
    endpoints.push_back({{"address", p.address}, {"syscall", p.syscall}, {"count", p.count}});
  }
  nlohmann::json j = {
      {"supervisor", r.supervisor},
      {"seen", r.seen},
      {"denied", r.denied},
      {"counts", std::move(counts)},
      {"denied_calls", std::move(denied)},
      {"files", std::move(files)},
      {"execs", std::move(execs)},
      {"endpoints", std::move(endpoints)},
      {"dropped", r.dropped},
      {"killed", r.killed},
  };
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

absl::StatusOr<SyscallReport> SyscallReportFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("syscalls: not a JSON object");
  SyscallReport r;
  try {
    r.supervisor = j.at("supervisor").get<std::string>();
    r.seen = j.value("seen", int64_t{0});
    r.denied = j.value("denied", int64_t{0});
    for (const auto& c : j.value("counts", nlohmann::json::array())) {
      r.counts.push_back({c.at("name").get<std::string>(), c.at("count").get<int64_t>()});
    }
    for (const auto& e : j.value("denied_calls", nlohmann::json::array())) {
      r.denied_calls.push_back(EventFromJson(e));
    }
    for (const auto& f : j.value("files", nlohmann::json::array())) {
      r.files.push_back(
          {f.at("path").get<std::string>(), f.value("mode", ""), f.value("count", int64_t{0})});
    }
    for (const auto& x : j.value("execs", nlohmann::json::array())) {
      r.execs.push_back(
          {x.at("path").get<std::string>(), x.value("argv", std::vector<std::string>{})});
    }
    for (const auto& p : j.value("endpoints", nlohmann::json::array())) {
      r.endpoints.push_back({p.at("address").get<std::string>(), p.value("syscall", ""),
                             p.value("count", int64_t{0})});
    }
    r.dropped = j.value("dropped", int64_t{0});
    r.killed = j.value("killed", false);
    r.error = j.value("error", "");
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(fmt::format("syscalls: {}", e.what()));
  }
  return r;
}

namespace {

// `text` cut to at most `max` bytes, not inside a UTF-8 character, and marked as cut with "..."
// as the decoder marks its own cuts.
void Shorten(std::string& text, size_t max) {
  if (text.size() <= max) return;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;
  text.replace(end, std::string::npos, "...");
}

// At most what `text` takes in the JSON result: a control character is escaped as \u00XX (six
// bytes), a byte that is not valid UTF-8 replaced by U+FFFD (three).
size_t JsonSize(std::string_view text) {
  size_t n = text.size() + 3;
  for (unsigned char c : text) n += c < 0x20 || c == '"' || c == '\\' ? 5 : c >= 0x80 ? 2 : 0;
  return n;
}

size_t JsonSize(const SyscallEvent& e) {
  size_t n = 48 + JsonSize(e.syscall) + JsonSize(e.action) + JsonSize(e.path) + JsonSize(e.mode) +
             JsonSize(e.address) + JsonSize(e.detail);
  for (const std::string& arg : e.argv) n += JsonSize(arg);
  return n;
}

}  // namespace

std::string RedactMarkedText(const Redactor& redactor, std::string_view text) {
  constexpr std::string_view kCut = "...";
  if (!text.ends_with(kCut)) return redactor.Redact(text);
  return redactor.RedactCut(text.substr(0, text.size() - kCut.size()), false, true) +
         std::string(kCut);
}

void RedactSyscallEvent(const Redactor& redactor, SyscallEvent* e) {
  for (std::string* field : {&e->path, &e->address, &e->detail}) {
    if (!field->empty()) *field = RedactMarkedText(redactor, *field);
  }
  for (std::string& arg : e->argv) arg = RedactMarkedText(redactor, arg);
}

void SyscallReportBuilder::Add(const SyscallEvent& event) {
  SyscallEvent e = event;
  Shorten(e.path, SyscallReport::kMaxPathBytes);
  for (std::string& arg : e.argv) Shorten(arg, SyscallReport::kMaxArgBytes);
  Shorten(e.address, SyscallReport::kMaxArgBytes);
  Shorten(e.detail, SyscallReport::kMaxArgBytes);
  // Room for one more entry: within its list's count and the report's bytes.
  const size_t size = JsonSize(e);
  auto room = [&](size_t entries, size_t max) {
    if (entries >= max || bytes_ + size > SyscallReport::kMaxBytes) {
      ++report_.dropped;
      return false;
    }
    bytes_ += size;
    return true;
  };
  // Merges a repeat into its entry (counted), appends a new one while there is room, and counts
  // what did not fit.
  auto merge = [&](auto& list, auto& index, std::pair<std::string, std::string> key, size_t max,
                   auto make) {
    if (auto it = index.find(key); it != index.end()) {
      ++list[it->second].count;
    } else if (room(list.size(), max)) {
      index.emplace(std::move(key), list.size());
      list.push_back(make());
    }
  };
  switch (e.kind) {
    case SyscallEventKind::kDenied:
      ++report_.denied;
      if (room(report_.denied_calls.size(), SyscallReport::kMaxDenied)) {
        report_.denied_calls.push_back(e);
      }
      break;
    case SyscallEventKind::kFileOpened:
      merge(report_.files, file_index_, {e.path, e.mode}, SyscallReport::kMaxFiles, [&] {
        return FileAccess{e.path, e.mode, 1};
      });
      break;
    case SyscallEventKind::kExec:
      if (room(report_.execs.size(), SyscallReport::kMaxExecs)) {
        report_.execs.push_back({e.path, e.argv});
      }
      break;
    case SyscallEventKind::kConnect:
      merge(report_.endpoints, endpoint_index_, {e.address, e.syscall},
            SyscallReport::kMaxEndpoints, [&] {
              return Endpoint{e.address, e.syscall, 1};
            });
      break;
  }
}

void SyscallReportBuilder::MarkKilled(std::string error) {
  report_.killed = true;
  if (!error.empty() && report_.error.empty()) report_.error = std::move(error);
}

SyscallReport SyscallReportBuilder::Build(std::vector<SyscallCount> counts) const {
  SyscallReport r = report_;
  std::erase_if(counts, [](const SyscallCount& c) { return c.count <= 0; });
  std::sort(counts.begin(), counts.end(), [](const SyscallCount& a, const SyscallCount& b) {
    return a.count != b.count ? a.count > b.count : a.name < b.name;
  });
  if (counts.size() > SyscallReport::kMaxCounts) counts.resize(SyscallReport::kMaxCounts);
  r.counts = std::move(counts);
  return r;
}

void BoundedSyscallEventQueue::OnSyscallEvent(const SyscallEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= capacity_) {
    ++dropped_;
    return;
  }
  events_.push_back(event);
}

std::vector<SyscallEvent> BoundedSyscallEventQueue::Drain(size_t max) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SyscallEvent> out;
  while (!events_.empty() && out.size() < max) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return out;
}

int64_t BoundedSyscallEventQueue::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

}  // namespace airlock
