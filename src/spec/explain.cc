// ExplainSpec: the effective spec as commented YAML.
#include <map>
#include <string>
#include <string_view>

#include "fmt/format.h"
#include "spec/internal/encode.h"
#include "spec/internal/readers.h"
#include "spec/internal/text.h"
#include "spec/parse.h"

namespace airlock::spec {
namespace {

using Json = nlohmann::ordered_json;

const char* LevelMeaning(Level level) {
  switch (level) {
    case Level::kInterp:
      return "interp: QuickJS in WebAssembly, capabilities bridged in";
    case Level::kBasic:
      return "basic: user namespace, non-root, limits, no network";
    case Level::kHardened:
      return "hardened: read-only root, seccomp, Landlock, egress proxy";
    case Level::kGvisor:
      return "gvisor: user-space kernel";
    case Level::kMicroVm:
      return "microvm: own kernel under KVM";
  }
  return "?";
}

const char* RuntimeMeaning(Runtime runtime) {
  switch (runtime) {
    case Runtime::kInterp:
      return "QuickJS in WebAssembly, in-process";
    case Runtime::kNative:
      return "namespaces, seccomp, Landlock, cgroups";
    case Runtime::kTraced:
      return "native plus a syscall supervisor (process.supervisor)";
    case Runtime::kGvisor:
      return "runsc";
    case Runtime::kMicroVm:
      return "QEMU microvm on KVM";
  }
  return "?";
}

std::string DerivedLevelText(const RiskRule& rule) {
  switch (rule.level_choice) {
    case LevelChoice::kFixed:
      return fmt::format("level {}", static_cast<int>(rule.min_level));
    case LevelChoice::kUpperIfAny:
      return fmt::format("level {} (3 when gVisor is available)", static_cast<int>(rule.min_level));
    case LevelChoice::kUpperOnly:
      return "level 3 (gVisor) or 4 (micro-VM), whichever the host offers first";
  }
  return "?";
}

// Plain YAML when that reads back as the same string (in YAML 1.2 and 1.1 alike); JSON-quoted,
// which YAML reads as a double-quoted scalar, otherwise.
std::string Scalar(const Json& value) {
  if (!value.is_string()) return value.dump();
  const std::string& text = value.get_ref<const std::string&>();
  bool plain = !text.empty() && text.size() <= 200;
  for (size_t i = 0; i < text.size() && plain; ++i) {
    char c = text[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    plain = alnum || c == '_' || c == '/' || (i > 0 && (c == '.' || c == '-'));
  }
  if (plain) plain = internal::ResolvePlainYamlScalar(text).is_string();
  constexpr std::string_view kYaml11Words[] = {"y",  "Y",   "yes", "Yes", "YES", "n",
                                               "N",  "no",  "No",  "NO",  "on",  "On",
                                               "ON", "off", "Off", "OFF"};
  for (std::string_view word : kYaml11Words) plain = plain && text != word;
  if (plain) return text;
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Key(const std::string& key) {
  return internal::IsIdentifier(key) ? key : Scalar(Json(key));
}

bool IsFlat(const Json& array) {
  for (const Json& item : array) {
    if (item.is_structured()) return false;
  }
  return true;
}

class YamlWriter {
 public:
  explicit YamlWriter(std::map<std::string, std::string> comments)
      : comments_(std::move(comments)) {}

  // `text` as "# " lines of at most 100 columns, wrapped at spaces.
  void Comment(std::string_view text) {
    constexpr size_t kWidth = 100 - 2;
    std::string line;
    size_t start = 0;
    while (start < text.size()) {
      size_t space = text.find(' ', start);
      std::string_view word =
          text.substr(start, space == std::string_view::npos ? space : space - start);
      if (!line.empty() && line.size() + 1 + word.size() > kWidth) {
        out_ += fmt::format("# {}\n", line);
        line.clear();
      }
      if (!line.empty()) line += ' ';
      line += word;
      start = space == std::string_view::npos ? text.size() : space + 1;
    }
    out_ += line.empty() ? "#\n" : fmt::format("# {}\n", line);
  }

  // The members of `object` at `indent`; `first_prefix` replaces the indentation of the first
  // line (the "- " of a sequence item).
  void Object(const Json& object, const std::string& path, size_t indent,
              std::string_view first_prefix = {}) {
    bool first = true;
    for (const auto& [key, value] : object.items()) {
      std::string pad =
          first && !first_prefix.empty() ? std::string(first_prefix) : std::string(indent, ' ');
      first = false;
      std::string child_path = internal::FieldPath(path, key);
      out_ += fmt::format("{}{}:", pad, Key(key));
      if (value.is_object() && !value.empty()) {
        Line(child_path);
        Object(value, child_path, indent + 2);
      } else if (value.is_array() && !value.empty() && !IsFlat(value)) {
        Line(child_path);
        for (size_t i = 0; i < value.size(); ++i) {
          std::string item_path = internal::IndexPath(child_path, i);
          const Json& item = value[i];
          if (item.is_object() && !item.empty()) {
            Object(item, item_path, indent + 4, std::string(indent + 2, ' ') + "- ");
          } else {
            out_ += fmt::format("{}- {}", std::string(indent + 2, ' '), Flow(item));
            Line(item_path);
          }
        }
      } else {
        out_ += fmt::format(" {}", Flow(value));
        Line(child_path);
      }
    }
  }

  std::string Take() { return std::move(out_); }

 private:
  // A scalar, or a flat or empty collection in flow style ([a, b], {}).
  std::string Flow(const Json& value) {
    if (value.is_array()) {
      std::string out = "[";
      for (size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out += ", ";
        out += Flow(value[i]);
      }
      return out + "]";
    }
    if (value.is_object()) {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        out += fmt::format("{}: {}", Scalar(Json(key)), Flow(item));
      }
      return out + "}";
    }
    return Scalar(value);
  }

  // Ends the current line, with the comment registered for `path` if there is one.
  void Line(const std::string& path) {
    auto it = comments_.find(path);
    if (it != comments_.end()) out_ += fmt::format("  # {}", it->second);
    out_ += '\n';
  }

  std::map<std::string, std::string> comments_;
  std::string out_;
};

}  // namespace

std::string ExplainSpec(const SandboxSpec& spec) {
  std::map<std::string, std::string> comments;
  comments["level"] = LevelMeaning(spec.level);
  comments["runtime"] = RuntimeMeaning(spec.runtime);
  comments["artifacts.binaryThresholdKb"] = "larger binaries need an allowBinaries entry";
  comments["commandPolicy.deny"] = "added to the built-in rules (docs/policy.md); never lifts them";
  comments["commandPolicy.strictShell"] =
      spec.command_policy.strict_shell
          ? "refuse commands whose shell text cannot be parsed with confidence"
          : "check shell text as far as it parses; note the rest";
  std::vector<std::string> header = {
      "Effective sandbox spec: every field, defaults and derived values filled in.",
  };
  if (spec.risk_class.has_value()) {
    const RiskRule& rule = RuleFor(*spec.risk_class);
    const char* risk = ToString(rule.risk_class);
    header.push_back(fmt::format("Risk class {} ({}) derives {}, network {} and approval {}.", risk,
                                 rule.task, DerivedLevelText(rule), ToString(rule.network),
                                 ToString(rule.approval)));
    header.push_back(fmt::format(
        "A spec may only tighten these: level at least {}, network no looser than {}, approval at "
        "least {}.",
        static_cast<int>(rule.min_level), ToString(rule.network), ToString(rule.approval)));
    comments["riskClass"] = rule.task;
    comments["level"] +=
        fmt::format("; {} allows {} or above", risk, static_cast<int>(rule.min_level));
    comments["network.profile"] = fmt::format("{} allows at most {}", risk, ToString(rule.network));
    comments["approval"] = fmt::format("{} requires at least {}", risk, ToString(rule.approval));
    if (rule.broker_only) {
      header.push_back(
          "Broker only: no network at all; outside calls and secret leases go only through the "
          "control plane's brokered channel.");
      comments["network.profile"] += " (broker only)";
    }
  } else {
    comments["riskClass"] = "none: level, network and approval are as written";
  }
  header.push_back("Tighter means a higher level: 0 < 1 < 2 < 3 < 4;");
  header.push_back(
      "a stricter network: none (strictest), dependency-egress, repo-egress, restricted-http, "
      "open;");
  header.push_back("a stronger approval: none < beforePr < mandatory < security.");

  YamlWriter writer(std::move(comments));
  for (const std::string& line : header) writer.Comment(line);
  writer.Object(internal::ToOrderedJson(spec), "", 0);
  return writer.Take();
}

}  // namespace airlock::spec
