#include "spec/internal/decode.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "common/text.h"
#include "fmt/format.h"
#include "spec/internal/enum_names.h"
#include "spec/internal/text.h"

namespace airlock::spec::internal {
namespace {

using nlohmann::json;

constexpr size_t kMaxSuggestions = 100;

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Reports problems and converts JSON values to the spec's field types. Every To* returns false
// (after reporting) when `value` does not fit, leaving *out untouched.
class Decoder {
 public:
  explicit Decoder(std::vector<FieldError>* errors) : errors_(errors) {}

  void Error(std::string path, std::string message) {
    errors_->push_back({std::move(path), std::move(message)});
  }

  size_t error_count() const { return errors_->size(); }

  bool WrongType(const json& value, const std::string& path, std::string_view expected) {
    Error(path, fmt::format("expected {}, got {}", expected, JsonTypeName(value)));
    return false;
  }

  bool ToBool(const json& value, const std::string& path, bool* out) {
    if (!value.is_boolean()) return WrongType(value, path, "boolean");
    *out = value.get<bool>();
    return true;
  }

  template <typename T>
  bool ToInt(const json& value, const std::string& path, T* out) {
    if (!value.is_number_integer()) return WrongType(value, path, "integer");
    constexpr auto kMin = std::numeric_limits<T>::min();
    constexpr auto kMax = std::numeric_limits<T>::max();
    bool fits;
    if (value.is_number_unsigned()) {
      fits = value.get<uint64_t>() <= static_cast<uint64_t>(kMax);
    } else {
      int64_t v = value.get<int64_t>();
      fits = v >= 0 ? static_cast<uint64_t>(v) <= static_cast<uint64_t>(kMax)
                    : (std::numeric_limits<T>::is_signed && v >= static_cast<int64_t>(kMin));
    }
    if (!fits) {
      Error(path, fmt::format("{} is out of range ({}..{})", value.dump(), kMin, kMax));
      return false;
    }
    *out = value.is_number_unsigned() ? static_cast<T>(value.get<uint64_t>())
                                      : static_cast<T>(value.get<int64_t>());
    return true;
  }

  bool ToDouble(const json& value, const std::string& path, double* out) {
    if (!value.is_number()) return WrongType(value, path, "number");
    *out = value.get<double>();
    return true;
  }

  bool ToString(const json& value, const std::string& path, std::string* out) {
    if (!value.is_string()) return WrongType(value, path, "string");
    const std::string& text = value.get_ref<const std::string&>();
    if (text.find('\0') != std::string::npos) {
      Error(path, "must not contain NUL characters");
      return false;
    }
    if (!airlock::IsValidUtf8(text)) {
      Error(path, "must be valid UTF-8");
      return false;
    }
    *out = text;
    return true;
  }

  template <typename E>
  bool ToEnum(const json& value, const std::string& path, E* out) {
    std::string name;
    if (!ToString(value, path, &name)) return false;
    std::optional<E> parsed = FromName<E>(name);
    if (!parsed.has_value()) {
      Error(path, fmt::format("{} is not one of: {}", Quote(name), JoinedNames<E>()));
      return false;
    }
    *out = *parsed;
    return true;
  }

  // Decodes every item of a JSON array with `item(value, path, T*)`.
  template <typename T, typename F>
  bool ToList(const json& value, const std::string& path, std::vector<T>* out, F&& item) {
    if (!value.is_array()) return WrongType(value, path, "array");
    std::vector<T> items;
    items.reserve(value.size());
    bool all_ok = true;
    for (size_t i = 0; i < value.size(); ++i) {
      // A broken item is kept (with defaults where it failed) so later items keep their index
      // in the paths of validation errors.
      T decoded{};
      all_ok = item(value[i], IndexPath(path, i), &decoded) && all_ok;
      items.push_back(std::move(decoded));
    }
    *out = std::move(items);
    return all_ok;
  }

  bool ToStringList(const json& value, const std::string& path, std::vector<std::string>* out) {
    return ToList(value, path, out, [this](const json& v, const std::string& p, std::string* s) {
      return ToString(v, p, s);
    });
  }

 private:
  std::vector<FieldError>* errors_;
};

// One JSON object being decoded: Field() for each known key, then Done() reports the others.
class Object {
 public:
  Object(Decoder& decoder, const json& value, std::string path)
      : decoder_(decoder), value_(value), path_(std::move(path)) {
    ok_ = value.is_object();
    if (!ok_) decoder_.WrongType(value, path_.empty() ? "(root)" : path_, "object");
  }

  bool ok() const { return ok_; }

  // Calls read(value, path) when `key` is present.
  template <typename F>
  void Field(std::string_view key, F&& read) {
    known_.push_back(key);
    if (!ok_) return;
    auto it = value_.find(key);
    if (it != value_.end()) read(*it, FieldPath(path_, key));
  }

  void Bool(std::string_view key, bool* out) {
    Field(key, [&](const json& v, const std::string& p) { decoder_.ToBool(v, p, out); });
  }
  template <typename T>
  void Int(std::string_view key, T* out) {
    Field(key, [&](const json& v, const std::string& p) { decoder_.ToInt(v, p, out); });
  }
  void Double(std::string_view key, double* out) {
    Field(key, [&](const json& v, const std::string& p) { decoder_.ToDouble(v, p, out); });
  }
  void String(std::string_view key, std::string* out) {
    Field(key, [&](const json& v, const std::string& p) { decoder_.ToString(v, p, out); });
  }
  template <typename E>
  void Enum(std::string_view key, E* out) {
    Field(key, [&](const json& v, const std::string& p) { decoder_.ToEnum(v, p, out); });
  }
  void StringList(std::string_view key, std::vector<std::string>* out) {
    Field(key, [&](const json& v, const std::string& p) { decoder_.ToStringList(v, p, out); });
  }

  void Done() {
    if (!ok_) return;
    for (const auto& [key, unused] : value_.items()) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      std::string message = "unknown field";
      // Suggestions cost an edit distance per known key; a document made of thousands of
      // unknown keys gets them for the first few only.
      if (decoder_.error_count() >= kMaxSuggestions) {
        decoder_.Error(FieldPath(path_, key), std::move(message));
        continue;
      }
      std::string_view best;
      size_t best_distance = 3;  // suggest only close misspellings
      for (std::string_view candidate : known_) {
        size_t distance = EditDistance(key.size() > 64 ? key.substr(0, 64) : key, candidate);
        if (distance < best_distance) {
          best = candidate;
          best_distance = distance;
        }
      }
      if (!best.empty()) message = fmt::format("unknown field (did you mean {}?)", best);
      decoder_.Error(FieldPath(path_, key), std::move(message));
    }
  }

 private:
  Decoder& decoder_;
  const json& value_;
  std::string path_;
  bool ok_;
  std::vector<std::string_view> known_;
};

void DecodeUser(Decoder& d, const json& value, const std::string& path, User* user) {
  Object o(d, value, path);
  auto id = [&](std::string_view key, uint32_t* out) {
    o.Field(key, [&](const json& v, const std::string& p) {
      if (!v.is_number_integer()) {
        d.WrongType(v, p, "integer");
        return;
      }
      bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= UINT32_MAX
                                         : v.get<int64_t>() >= 0 && v.get<int64_t>() <= UINT32_MAX;
      if (!fits) {
        d.Error(p, fmt::format("must be between 1 and {}", kMaxUserId));
        return;
      }
      *out = static_cast<uint32_t>(v.get<uint64_t>());
    });
  };
  id("uid", &user->uid);
  id("gid", &user->gid);
  o.Done();
}

bool DecodeMount(Decoder& d, const json& value, const std::string& path, Mount* mount) {
  Object o(d, value, path);
  o.String("source", &mount->source);
  o.String("target", &mount->target);
  o.Enum("mode", &mount->mode);
  o.Done();
  return o.ok();
}

bool DecodeTmpfs(Decoder& d, const json& value, const std::string& path, Tmpfs* tmpfs) {
  Object o(d, value, path);
  o.String("target", &tmpfs->target);
  o.Int("sizeMb", &tmpfs->size_mb);
  o.Int("inodes", &tmpfs->inodes);
  o.Bool("noexec", &tmpfs->noexec);
  o.Done();
  return o.ok();
}

void DecodeFilesystem(Decoder& d, const json& value, const std::string& path, Filesystem* fs) {
  Object o(d, value, path);
  o.Bool("readOnlyRoot", &fs->read_only_root);
  o.String("workspace", &fs->workspace);
  o.Int("workspaceSizeMb", &fs->workspace_size_mb);
  o.Enum("workspaceMode", &fs->workspace_mode);
  o.Int("tmpSizeMb", &fs->tmp_size_mb);
  o.Int("homeSizeMb", &fs->home_size_mb);
  o.Bool("tmpNoexec", &fs->tmp_noexec);
  o.Field("mounts", [&](const json& v, const std::string& p) {
    d.ToList(v, p, &fs->mounts, [&](const json& item, const std::string& ip, Mount* m) {
      return DecodeMount(d, item, ip, m);
    });
  });
  o.Field("tmpfs", [&](const json& v, const std::string& p) {
    d.ToList(v, p, &fs->tmpfs, [&](const json& item, const std::string& ip, Tmpfs* t) {
      return DecodeTmpfs(d, item, ip, t);
    });
  });
  o.Done();
}

bool DecodeArgCondition(Decoder& d, const json& value, const std::string& path,
                        SyscallArgCondition* arg) {
  Object o(d, value, path);
  o.Int("index", &arg->index);
  o.String("op", &arg->op);
  o.Int("value", &arg->value);
  o.Int("mask", &arg->mask);
  o.Done();
  return o.ok();
}

bool DecodeSyscallRule(Decoder& d, const json& value, const std::string& path, SyscallRule* rule) {
  Object o(d, value, path);
  o.StringList("names", &rule->names);
  o.Field("args", [&](const json& v, const std::string& p) {
    d.ToList(v, p, &rule->args,
             [&](const json& item, const std::string& ip, SyscallArgCondition* arg) {
               return DecodeArgCondition(d, item, ip, arg);
             });
  });
  o.String("action", &rule->action);
  o.Done();
  return o.ok();
}

void DecodeProcess(Decoder& d, const json& value, const std::string& path, Process* process) {
  Object o(d, value, path);
  o.Bool("noNewPrivs", &process->no_new_privs);
  o.StringList("capabilities", &process->capabilities);
  o.String("seccompProfile", &process->seccomp_profile);
  o.Int("pidsLimit", &process->pids_limit);
  o.Int("openFiles", &process->open_files);
  o.Int("stackMb", &process->stack_mb);
  o.Enum("supervisor", &process->supervisor);
  o.Field("syscalls", [&](const json& v, const std::string& p) {
    d.ToList(v, p, &process->syscalls,
             [&](const json& item, const std::string& ip, SyscallRule* rule) {
               return DecodeSyscallRule(d, item, ip, rule);
             });
  });
  o.String("syscallDefaultAction", &process->syscall_default_action);
  o.Done();
}

void DecodeResources(Decoder& d, const json& value, const std::string& path, Resources* r) {
  Object o(d, value, path);
  o.Double("cpu", &r->cpu);
  o.Int("memoryMb", &r->memory_mb);
  o.Int("diskMb", &r->disk_mb);
  o.Int("commandTimeoutSeconds", &r->command_timeout_seconds);
  o.Int("runTimeoutSeconds", &r->run_timeout_seconds);
  o.Int("cpuTimeSeconds", &r->cpu_time_seconds);
  o.Int("maxLogBytes", &r->max_log_bytes);
  o.Enum("outputLimitAction", &r->output_limit_action);
  o.Done();
}

bool DecodeHttpRule(Decoder& d, const json& value, const std::string& path, HttpRule* rule) {
  Object o(d, value, path);
  o.String("host", &rule->host);
  o.StringList("methods", &rule->methods);
  o.StringList("pathPrefixes", &rule->path_prefixes);
  o.Done();
  return o.ok();
}

void DecodeNetwork(Decoder& d, const json& value, const std::string& path, Network* network) {
  Object o(d, value, path);
  o.Enum("profile", &network->profile);
  o.StringList("allowHosts", &network->allow_hosts);
  o.Field("httpRules", [&](const json& v, const std::string& p) {
    d.ToList(v, p, &network->http_rules,
             [&](const json& item, const std::string& ip, HttpRule* rule) {
               return DecodeHttpRule(d, item, ip, rule);
             });
  });
  o.StringList("denyCidrs", &network->deny_cidrs);
  o.Done();
}

bool DecodeLease(Decoder& d, const json& value, const std::string& path, SecretLease* lease) {
  Object o(d, value, path);
  o.String("name", &lease->name);
  o.String("purpose", &lease->purpose);
  o.Int("ttlSeconds", &lease->ttl_seconds);
  o.String("mountPath", &lease->mount_path);
  o.Done();
  return o.ok();
}

void DecodeSecrets(Decoder& d, const json& value, const std::string& path, Secrets* secrets) {
  Object o(d, value, path);
  o.Field("leases", [&](const json& v, const std::string& p) {
    d.ToList(v, p, &secrets->leases,
             [&](const json& item, const std::string& ip, SecretLease* lease) {
               return DecodeLease(d, item, ip, lease);
             });
  });
  o.Done();
}

void DecodeCache(Decoder& d, const json& value, const std::string& path, Cache* cache) {
  Object o(d, value, path);
  o.Enum("mode", &cache->mode);
  o.String("key", &cache->key);
  o.Done();
}

bool DecodeBinaryAllowance(Decoder& d, const json& value, const std::string& path,
                           BinaryAllowance* allowance) {
  Object o(d, value, path);
  o.String("path", &allowance->path);
  o.String("reason", &allowance->reason);
  o.Done();
  return o.ok();
}

void DecodeArtifacts(Decoder& d, const json& value, const std::string& path, Artifacts* artifacts) {
  Object o(d, value, path);
  o.StringList("paths", &artifacts->paths);
  o.Int("maxSizeMb", &artifacts->max_size_mb);
  o.Bool("secretScan", &artifacts->secret_scan);
  o.Int("binaryThresholdKb", &artifacts->binary_threshold_kb);
  o.Field("allowBinaries", [&](const json& v, const std::string& p) {
    d.ToList(v, p, &artifacts->allow_binaries,
             [&](const json& item, const std::string& ip, BinaryAllowance* allowance) {
               return DecodeBinaryAllowance(d, item, ip, allowance);
             });
  });
  o.Done();
}

bool DecodeDenyRule(Decoder& d, const json& value, const std::string& path, CommandDenyRule* rule) {
  Object o(d, value, path);
  o.String("name", &rule->name);
  o.StringList("argv", &rule->argv);
  o.String("reason", &rule->reason);
  o.Done();
  return o.ok();
}

void DecodeCommandPolicy(Decoder& d, const json& value, const std::string& path,
                         CommandPolicy* policy) {
  Object o(d, value, path);
  o.Field("deny", [&](const json& v, const std::string& p) {
    d.ToList(v, p, &policy->deny,
             [&](const json& item, const std::string& ip, CommandDenyRule* rule) {
               return DecodeDenyRule(d, item, ip, rule);
             });
  });
  o.Bool("strictShell", &policy->strict_shell);
  o.Done();
}

}  // namespace

const char* JsonTypeName(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    case json::value_t::binary:
      return "binary";
    case json::value_t::discarded:
      return "discarded";
  }
  return "unknown";
}

void DecodeSpec(const json& doc, SandboxSpec* spec, std::vector<FieldError>* errors) {
  Decoder d(errors);
  Object o(d, doc, "");
  o.Int("version", &spec->version);
  o.Field("riskClass", [&](const json& v, const std::string& p) {
    if (v.is_null()) {
      spec->risk_class.reset();
      return;
    }
    RiskClass risk;
    if (d.ToEnum(v, p, &risk)) spec->risk_class = risk;
  });
  o.Field("level", [&](const json& v, const std::string& p) {
    int level = 0;
    if (!d.ToInt(v, p, &level)) return;
    if (level < 0 || level > 4) {
      d.Error(p, fmt::format("{} is not one of: 0, 1, 2, 3, 4", level));
      return;
    }
    spec->level = static_cast<Level>(level);
  });
  o.Enum("runtime", &spec->runtime);
  o.String("image", &spec->image);
  o.String("rootfs", &spec->rootfs);
  o.Field("user", [&](const json& v, const std::string& p) { DecodeUser(d, v, p, &spec->user); });
  o.String("workdir", &spec->workdir);
  o.String("hostname", &spec->hostname);
  o.Field("env", [&](const json& v, const std::string& p) {
    if (!v.is_object()) {
      d.WrongType(v, p, "object");
      return;
    }
    std::map<std::string, std::string> env;
    for (const auto& [name, item] : v.items()) {
      std::string text;
      if (d.ToString(item, FieldPath(p, name), &text)) env[name] = std::move(text);
    }
    spec->env = std::move(env);
  });
  o.Field("filesystem", [&](const json& v, const std::string& p) {
    DecodeFilesystem(d, v, p, &spec->filesystem);
  });
  o.Field("process",
          [&](const json& v, const std::string& p) { DecodeProcess(d, v, p, &spec->process); });
  o.Field("resources",
          [&](const json& v, const std::string& p) { DecodeResources(d, v, p, &spec->resources); });
  o.Field("network",
          [&](const json& v, const std::string& p) { DecodeNetwork(d, v, p, &spec->network); });
  o.Field("secrets",
          [&](const json& v, const std::string& p) { DecodeSecrets(d, v, p, &spec->secrets); });
  o.Field("cache",
          [&](const json& v, const std::string& p) { DecodeCache(d, v, p, &spec->cache); });
  o.Field("artifacts",
          [&](const json& v, const std::string& p) { DecodeArtifacts(d, v, p, &spec->artifacts); });
  o.Field("commandPolicy", [&](const json& v, const std::string& p) {
    DecodeCommandPolicy(d, v, p, &spec->command_policy);
  });
  o.Enum("approval", &spec->approval);
  o.Done();
}

}  // namespace airlock::spec::internal
