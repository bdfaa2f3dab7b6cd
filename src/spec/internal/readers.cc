#include "spec/internal/readers.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/text.h"
#include "fmt/format.h"
#include "spec/field_error.h"
#include "spec/internal/text.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/exceptions.h"
#include "yaml-cpp/mark.h"
#include "yaml-cpp/parser.h"

namespace airlock::spec::internal {
namespace {

using nlohmann::json;

// Builds a JSON document from a stream of events, enforcing the limits every reader shares:
// unique keys, kMaxDepth, kMaxNodes. Each method returns false once the document breaks one, with
// the reason in error().
class DomBuilder {
 public:
  bool Scalar(json value) { return Insert(std::move(value), 1, 0); }

  // Adds `nodes` values to the count without placing them (copies kept for YAML aliases).
  bool Charge(size_t nodes) {
    nodes_ += nodes;
    if (nodes_ > kMaxNodes) {
      return Fail("", fmt::format("the document holds more than {} values (YAML aliases count "
                                  "every time they are used)",
                                  kMaxNodes));
    }
    return true;
  }

  // A copy of an earlier subtree (a YAML alias) that holds `nodes` values and is `depth` deep.
  bool Insert(json value, size_t nodes, size_t depth) {
    if (!Charge(nodes)) return false;
    if (frames_.size() + depth > kMaxDepth) return TooDeep();
    return Place(std::move(value)) != nullptr;
  }

  bool BeginObject() { return Begin(json::object()); }
  bool BeginArray() { return Begin(json::array()); }

  bool Key(std::string key) {
    if (frames_.empty() || !frames_.back().container->is_object() || frames_.back().has_key) {
      return Fail("", "mapping keys must be scalars");
    }
    Frame& top = frames_.back();
    if (top.container->contains(key)) {
      return Fail(FieldPath(PathOfTop(), key), "duplicate key");
    }
    top.key = std::move(key);
    top.has_key = true;
    return true;
  }

  // Closes the innermost object or array and returns it (valid until the next event).
  const json* End() {
    if (frames_.empty()) return nullptr;
    const json* closed = frames_.back().container;
    frames_.pop_back();
    return closed;
  }

  // Whether the next event is a mapping key.
  bool ExpectsKey() const {
    return !frames_.empty() && frames_.back().container->is_object() && !frames_.back().has_key;
  }

  size_t depth() const { return frames_.size(); }
  bool has_root() const { return has_root_; }
  json TakeRoot() { return std::move(root_); }
  const FieldError& error() const { return error_; }

  // The path of the value the next event produces, for messages.
  std::string CurrentPath() const {
    if (frames_.empty()) return "";
    const Frame& top = frames_.back();
    if (top.container->is_array()) return IndexPath(PathOfTop(), top.container->size());
    return top.has_key ? FieldPath(PathOfTop(), top.key) : PathOfTop();
  }

  bool Fail(std::string path, std::string message) {
    error_ = {std::move(path), std::move(message)};
    return false;
  }

 private:
  struct Frame {
    json* container;
    std::string key;  // objects: the key of the value being read
    bool has_key = false;
  };

  bool Begin(json container) {
    if (frames_.size() >= kMaxDepth) return TooDeep();
    if (!Charge(1)) return false;
    json* placed = Place(std::move(container));
    if (placed == nullptr) return false;
    frames_.push_back({placed, "", false});
    return true;
  }

  // Puts `value` where the next value goes and returns its address: a node of a std::map or the
  // last element of a vector that is not grown again until this value's frame is closed.
  json* Place(json value) {
    if (frames_.empty()) {
      if (has_root_) {
        Fail("", "more than one top-level value");
        return nullptr;
      }
      root_ = std::move(value);
      has_root_ = true;
      return &root_;
    }
    Frame& top = frames_.back();
    if (top.container->is_array()) {
      top.container->push_back(std::move(value));
      return &top.container->back();
    }
    if (!top.has_key) {
      Fail(PathOfTop(), "mapping keys must be scalars");
      return nullptr;
    }
    top.has_key = false;
    json& slot = (*top.container)[top.key];
    slot = std::move(value);
    return &slot;
  }

  bool TooDeep() {
    return Fail(CurrentPath(), fmt::format("nested deeper than {} levels", kMaxDepth));
  }

  std::string PathOfTop() const {
    std::string path;
    for (size_t i = 1; i < frames_.size(); ++i) {
      const Frame& parent = frames_[i - 1];
      path = parent.container->is_array() ? IndexPath(path, parent.container->size() - 1)
                                          : FieldPath(path, parent.key);
    }
    return path;
  }

  json root_;
  bool has_root_ = false;
  std::vector<Frame> frames_;
  size_t nodes_ = 0;
  FieldError error_;
};

absl::Status ErrorStatus(const FieldError& error) { return InvalidArgument(ToString(error)); }

// ---------------------------------------------------------------------------------------------
// JSON

class JsonSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit JsonSax(DomBuilder* dom) : dom_(dom) {}

  bool null() { return dom_->Scalar(nullptr); }
  bool boolean(bool value) { return dom_->Scalar(value); }
  bool number_integer(number_integer_t value) { return dom_->Scalar(value); }
  bool number_unsigned(number_unsigned_t value) { return dom_->Scalar(value); }
  bool number_float(number_float_t value, const string_t& /*text*/) { return dom_->Scalar(value); }
  bool string(string_t& value) { return dom_->Scalar(std::move(value)); }
  bool binary(binary_t& /*value*/) { return dom_->Fail(dom_->CurrentPath(), "binary value"); }
  bool start_object(std::size_t /*elements*/) { return dom_->BeginObject(); }
  bool key(string_t& value) { return dom_->Key(std::move(value)); }
  bool end_object() { return dom_->End() != nullptr; }
  bool start_array(std::size_t /*elements*/) { return dom_->BeginArray(); }
  bool end_array() { return dom_->End() != nullptr; }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) {
    // what() is "[json.exception.parse_error.101] parse error at line 1, column 2: ...".
    std::string_view what = ex.what();
    size_t bracket = what.find("] ");
    if (bracket != std::string_view::npos) what.remove_prefix(bracket + 2);
    return dom_->Fail("", fmt::format("JSON {}", what));
  }

 private:
  DomBuilder* dom_;
};

// ---------------------------------------------------------------------------------------------
// YAML

constexpr std::string_view kTagPrefix = "tag:yaml.org,2002:";

// Thrown by the event handler to stop the parser at the first problem; caught in ReadYaml.
struct YamlStop {};

std::string Position(const YAML::Mark& mark) {
  return fmt::format("line {}, column {}", mark.line + 1, mark.column + 1);
}

bool IsDigits(std::string_view text, int base) {
  if (text.empty()) return false;
  for (char c : text) {
    bool ok = (c >= '0' && c <= '9' && c - '0' < base) ||
              (base == 16 && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
    if (!ok) return false;
  }
  return true;
}

std::optional<json> ParseYamlInt(std::string_view text) {
  bool negative = false;
  std::string_view digits = text;
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
    negative = digits[0] == '-';
    digits.remove_prefix(1);
  }
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'o')) {
    if (text.size() != digits.size()) return std::nullopt;  // the core schema has no "-0x1"
    base = digits[1] == 'x' ? 16 : 8;
    digits.remove_prefix(2);
  }
  if (!IsDigits(digits, base)) return std::nullopt;
  uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    // Larger than 64 bits: a float, as nlohmann does for JSON.
    if (base != 10) return std::nullopt;
    double value = std::strtod(std::string(digits).c_str(), nullptr);
    return json(negative ? -value : value);
  }
  if (!negative) return json(magnitude);
  if (magnitude <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1) {
    return json(static_cast<int64_t>(0 - magnitude));
  }
  return json(-static_cast<double>(magnitude));
}

std::optional<json> ParseYamlFloat(std::string_view text) {
  std::string_view body = text;
  bool negative = false;
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    double inf = std::numeric_limits<double>::infinity();
    return json(negative ? -inf : inf);
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") {
    return json(std::numeric_limits<double>::quiet_NaN());
  }
  // [0-9]* ( \. [0-9]* )? ( [eE] [-+]? [0-9]+ )? with at least one digit before the exponent.
  size_t i = 0;
  size_t mantissa_digits = 0;
  while (i < body.size() && body[i] >= '0' && body[i] <= '9') ++i, ++mantissa_digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (i < body.size() && body[i] >= '0' && body[i] <= '9') ++i, ++mantissa_digits;
  }
  if (mantissa_digits == 0) return std::nullopt;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '-' || body[i] == '+')) ++i;
    size_t exponent_digits = 0;
    while (i < body.size() && body[i] >= '0' && body[i] <= '9') ++i, ++exponent_digits;
    if (exponent_digits == 0) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  // The syntax is checked above; strtod gives HUGE_VAL or 0 when out of range, like nlohmann.
  double value = std::strtod(std::string(body).c_str(), nullptr);
  return json(negative ? -value : value);
}

std::optional<json> ParseYamlBool(std::string_view text) {
  if (text == "true" || text == "True" || text == "TRUE") return json(true);
  if (text == "false" || text == "False" || text == "FALSE") return json(false);
  return std::nullopt;
}

bool IsYamlNull(std::string_view text) {
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

// A plain (unquoted, untagged) scalar, resolved by the YAML 1.2 core schema.
json ResolvePlain(const std::string& text) {
  if (IsYamlNull(text)) return nullptr;
  if (std::optional<json> value = ParseYamlBool(text)) return *value;
  if (std::optional<json> value = ParseYamlInt(text)) return *value;
  if (std::optional<json> value = ParseYamlFloat(text)) return *value;
  return text;
}

size_t CountNodes(const json& value) {
  size_t count = 1;
  if (value.is_structured()) {
    for (const json& child : value) count += CountNodes(child);
  }
  return count;
}

size_t Depth(const json& value) {
  if (!value.is_structured()) return 0;
  size_t deepest = 0;
  for (const json& child : value) deepest = std::max(deepest, Depth(child));
  return deepest + 1;
}

class YamlHandler : public YAML::EventHandler {
 public:
  explicit YamlHandler(DomBuilder* dom) : dom_(dom) {}

  void OnDocumentStart(const YAML::Mark& /*mark*/) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (dom_->ExpectsKey()) Stop(mark, "mapping keys must not be null");
    Check(dom_->Scalar(nullptr), mark);
    Remember(mark, anchor, json(nullptr));
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) Stop(mark, "an alias may not refer to a node that contains it");
    const Anchored& target = it->second;
    if (dom_->ExpectsKey()) {
      if (!target.value.is_string()) Stop(mark, "mapping keys must be scalars");
      Check(dom_->Key(target.value.get<std::string>()), mark);
      return;
    }
    Check(dom_->Insert(target.value, target.nodes, target.depth), mark);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    if (!airlock::IsValidUtf8(value)) Stop(mark, "invalid UTF-8");
    if (dom_->ExpectsKey()) {
      Remember(mark, anchor, json(value));
      Check(dom_->Key(value), mark);
      return;
    }
    json resolved = Resolve(mark, tag, value);
    Remember(mark, anchor, resolved);
    Check(dom_->Scalar(std::move(resolved)), mark);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value /*style*/) override {
    StartCollection(mark, tag, anchor, "seq");
    Check(dom_->BeginArray(), mark);
  }
  void OnSequenceEnd() override { EndCollection(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value /*style*/) override {
    StartCollection(mark, tag, anchor, "map");
    Check(dom_->BeginObject(), mark);
  }
  void OnMapEnd() override { EndCollection(); }

  const std::optional<FieldError>& error() const { return error_; }

 private:
  struct Anchored {
    json value;
    size_t nodes;
    size_t depth;
  };

  [[noreturn]] void Stop(const YAML::Mark& mark, std::string_view message) {
    error_ = FieldError{dom_->CurrentPath(), fmt::format("{} ({})", message, Position(mark))};
    throw YamlStop{};
  }

  void Check(bool ok, const YAML::Mark& mark) {
    if (ok) return;
    FieldError error = dom_->error();
    error.message = fmt::format("{} ({})", error.message, Position(mark));
    error_ = std::move(error);
    throw YamlStop{};
  }

  json Resolve(const YAML::Mark& mark, const std::string& tag, const std::string& value) {
    if (tag == "?") return ResolvePlain(value);
    // "!" is the non-specific tag of quoted and block scalars: always a string.
    if (tag == "!" || tag == fmt::format("{}str", kTagPrefix)) return value;
    std::optional<json> typed;
    if (tag == fmt::format("{}int", kTagPrefix)) {
      typed = ParseYamlInt(value);
    } else if (tag == fmt::format("{}float", kTagPrefix)) {
      typed = ParseYamlFloat(value);
      if (!typed.has_value()) {
        if (std::optional<json> as_int = ParseYamlInt(value)) typed = json(as_int->get<double>());
      }
    } else if (tag == fmt::format("{}bool", kTagPrefix)) {
      typed = ParseYamlBool(value);
    } else if (tag == fmt::format("{}null", kTagPrefix)) {
      if (IsYamlNull(value)) typed = json(nullptr);
    } else {
      Stop(mark, fmt::format("unsupported tag {}", Quote(tag)));
    }
    if (!typed.has_value()) {
      Stop(mark, fmt::format("{} is not a valid {}", Quote(value), Quote(tag)));
    }
    return *typed;
  }

  void StartCollection(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       std::string_view kind) {
    if (dom_->ExpectsKey()) Stop(mark, "mapping keys must be scalars");
    if (tag != "?" && tag != "" && tag != fmt::format("{}{}", kTagPrefix, kind)) {
      Stop(mark, fmt::format("unsupported tag {}", Quote(tag)));
    }
    open_anchors_.push_back({anchor, mark});
  }

  void EndCollection() {
    const json* closed = dom_->End();
    auto [anchor, mark] = open_anchors_.back();
    open_anchors_.pop_back();
    if (closed != nullptr) Remember(mark, anchor, *closed);
  }

  void Remember(const YAML::Mark& mark, YAML::anchor_t anchor, const json& value) {
    if (anchor == YAML::NullAnchor) return;
    // The copy kept for later aliases counts against the node budget too.
    size_t nodes = CountNodes(value);
    Check(dom_->Charge(nodes), mark);
    anchors_[anchor] = Anchored{value, nodes, Depth(value)};
  }

  DomBuilder* dom_;
  std::map<YAML::anchor_t, Anchored> anchors_;
  std::vector<std::pair<YAML::anchor_t, YAML::Mark>> open_anchors_;
  std::optional<FieldError> error_;
};

// Ignores every event: used to look past the first document without building anything.
class DiscardHandler : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Whether anything follows the first document; a broken second document counts as one.
bool HasAnotherDocument(YAML::Parser& parser) {
  DiscardHandler discard;
  try {
    return parser.HandleNextDocument(discard);
  } catch (const std::exception&) {
    return true;
  }
}

}  // namespace

nlohmann::json ResolvePlainYamlScalar(const std::string& text) { return ResolvePlain(text); }

absl::StatusOr<nlohmann::json> ReadJson(std::string_view text) {
  DomBuilder dom;
  JsonSax sax(&dom);
  try {
    bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json,
                              /*strict=*/true, /*ignore_comments=*/false);
    if (!ok) return ErrorStatus(dom.error());
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("JSON parse error: {}", e.what()));
  }
  return dom.TakeRoot();
}

absl::StatusOr<nlohmann::json> ReadYaml(std::string_view text) {
  DomBuilder dom;
  YamlHandler handler(&dom);
  try {
    std::istringstream stream{std::string(text)};
    YAML::Parser parser(stream);
    if (!parser.HandleNextDocument(handler)) return InvalidArgument("empty YAML document");
    if (HasAnotherDocument(parser)) {
      return InvalidArgument("more than one YAML document (a spec is one document)");
    }
  } catch (const YamlStop&) {
    return ErrorStatus(*handler.error());
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("YAML parse error at {}: {}", Position(e.mark), e.msg));
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("YAML parse error: {}", e.what()));
  }
  if (!dom.has_root()) return InvalidArgument("empty YAML document");
  return dom.TakeRoot();
}

}  // namespace airlock::spec::internal
