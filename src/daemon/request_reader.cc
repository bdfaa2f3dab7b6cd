#include "daemon/request_reader.h"

#include "common/status.h"
#include "fmt/format.h"
#include "http/errors.h"
#include "spec/parse.h"

namespace airlock::daemon {
namespace {

const char* TypeName(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "integer";
    case nlohmann::json::value_t::number_float:
      return "number";
    case nlohmann::json::value_t::string:
      return "string";
    case nlohmann::json::value_t::array:
      return "array";
    case nlohmann::json::value_t::object:
      return "object";
    default:
      return "value";
  }
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseBody(std::string_view body) {
  size_t i = 0;
  while (i < body.size() && std::isspace(static_cast<unsigned char>(body[i]))) ++i;
  if (i == body.size()) return nlohmann::json::object();
  absl::StatusOr<nlohmann::json> doc = spec::ReadSpecDocument(body, spec::Format::kJson);
  if (!doc.ok()) {
    return http::WithReason(
        InvalidArgument(fmt::format("the body is not valid JSON: {}", Message(doc.status()))),
        http::Reason::kMalformedBody);
  }
  if (!doc->is_object()) {
    return http::WithReason(InvalidArgument("the body must be a JSON object"),
                            http::Reason::kMalformedBody);
  }
  return doc;
}

RequestReader::RequestReader(const nlohmann::json& object, std::string prefix)
    : object_(object), prefix_(std::move(prefix)) {
  if (!object_.is_object()) {
    errors_.push_back(fmt::format("{}expected an object, got {}",
                                  prefix_.empty() ? "" : prefix_ + ": ", TypeName(object_)));
  }
}

std::string RequestReader::Path(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : fmt::format("{}.{}", prefix_, key);
}

const nlohmann::json* RequestReader::Get(std::string_view key, bool required, const char* type) {
  seen_.insert(std::string(key));
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(std::string(key));
  if (it == object_.end() || it->is_null()) {
    if (required) errors_.push_back(fmt::format("{}: required", Path(key)));
    return nullptr;
  }
  (void)type;
  return &*it;
}

void RequestReader::Error(std::string_view key, std::string message) {
  errors_.push_back(fmt::format("{}: {}", Path(key), message));
}

std::optional<std::string> RequestReader::String(std::string_view key, FieldRule rule) {
  const nlohmann::json* v = Get(key, rule.required, "string");
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) {
    Error(key, fmt::format("expected a string, got {}", TypeName(*v)));
    return std::nullopt;
  }
  std::string s = v->get<std::string>();
  if (s.size() > rule.max_length) {
    Error(key, fmt::format("longer than {} bytes", rule.max_length));
    return std::nullopt;
  }
  if (s.find('\0') != std::string::npos) {
    Error(key, "must not contain NUL");
    return std::nullopt;
  }
  return s;
}

std::optional<int64_t> RequestReader::Int(std::string_view key, FieldRule rule) {
  const nlohmann::json* v = Get(key, rule.required, "integer");
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) {
    Error(key, fmt::format("expected an integer, got {}", TypeName(*v)));
    return std::nullopt;
  }
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(rule.max)) {
    Error(key, fmt::format("must be between {} and {}", rule.min, rule.max));
    return std::nullopt;
  }
  int64_t i = v->get<int64_t>();
  if (i < rule.min || i > rule.max) {
    Error(key, fmt::format("must be between {} and {}", rule.min, rule.max));
    return std::nullopt;
  }
  return i;
}

std::optional<bool> RequestReader::Bool(std::string_view key, FieldRule rule) {
  const nlohmann::json* v = Get(key, rule.required, "boolean");
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) {
    Error(key, fmt::format("expected a boolean, got {}", TypeName(*v)));
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::vector<std::string>> RequestReader::Strings(std::string_view key,
                                                               FieldRule rule) {
  const nlohmann::json* v = Get(key, rule.required, "array");
  if (v == nullptr) return std::nullopt;
  if (!v->is_array()) {
    Error(key, fmt::format("expected an array of strings, got {}", TypeName(*v)));
    return std::nullopt;
  }
  if (v->size() > rule.max_items) {
    Error(key, fmt::format("more than {} items", rule.max_items));
    return std::nullopt;
  }
  std::vector<std::string> out;
  bool ok = true;
  for (size_t i = 0; i < v->size(); ++i) {
    const nlohmann::json& item = (*v)[i];
    std::string at = fmt::format("{}[{}]", key, i);
    if (!item.is_string()) {
      Error(at, fmt::format("expected a string, got {}", TypeName(item)));
      ok = false;
    } else if (item.get_ref<const std::string&>().size() > rule.max_length) {
      Error(at, fmt::format("longer than {} bytes", rule.max_length));
      ok = false;
    } else if (item.get_ref<const std::string&>().find('\0') != std::string::npos) {
      Error(at, "must not contain NUL");
      ok = false;
    } else {
      out.push_back(item.get<std::string>());
    }
  }
  if (!ok) return std::nullopt;
  return out;
}

std::optional<std::map<std::string, std::string>> RequestReader::StringMap(std::string_view key,
                                                                           FieldRule rule) {
  const nlohmann::json* v = Get(key, rule.required, "object");
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) {
    Error(key, fmt::format("expected an object of strings, got {}", TypeName(*v)));
    return std::nullopt;
  }
  if (v->size() > rule.max_items) {
    Error(key, fmt::format("more than {} entries", rule.max_items));
    return std::nullopt;
  }
  std::map<std::string, std::string> out;
  bool ok = true;
  for (const auto& [k, item] : v->items()) {
    std::string at = fmt::format("{}.{}", key, k);
    if (!item.is_string()) {
      Error(at, fmt::format("expected a string, got {}", TypeName(item)));
      ok = false;
    } else if (k.size() > 256 || item.get_ref<const std::string&>().size() > rule.max_length) {
      Error(at, fmt::format("key longer than 256 or value longer than {} bytes", rule.max_length));
      ok = false;
    } else {
      out[k] = item.get<std::string>();
    }
  }
  if (!ok) return std::nullopt;
  return out;
}

const nlohmann::json* RequestReader::Object(std::string_view key, FieldRule rule) {
  const nlohmann::json* v = Get(key, rule.required, "object");
  if (v == nullptr) return nullptr;
  if (!v->is_object()) {
    Error(key, fmt::format("expected an object, got {}", TypeName(*v)));
    return nullptr;
  }
  return v;
}

void RequestReader::Merge(RequestReader& nested) {
  absl::Status s = nested.Finish();
  for (std::string& e : nested.errors_) errors_.push_back(std::move(e));
  nested.errors_.clear();
}

absl::Status RequestReader::Finish() {
  if (!finished_ && object_.is_object()) {
    finished_ = true;
    for (const auto& [k, v] : object_.items()) {
      if (!seen_.count(k)) {
        errors_.push_back(prefix_.empty() ? fmt::format("unknown field \"{}\"", k)
                                          : fmt::format("{}: unknown field \"{}\"", prefix_, k));
      }
    }
  }
  if (errors_.empty()) return absl::OkStatus();
  std::string msg;
  for (size_t i = 0; i < errors_.size() && i < 50; ++i) {
    if (i) msg += "\n";
    msg += errors_[i];
  }
  return InvalidArgument(msg);
}

}  // namespace airlock::daemon
