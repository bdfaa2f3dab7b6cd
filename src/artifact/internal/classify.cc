#include "artifact/internal/classify.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <vector>

#include "fmt/format.h"

namespace airlock::artifact::internal {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsOneOf(std::string_view s, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

std::vector<std::string_view> Segments(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 1;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > start) out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

// Directories whose content is downloaded or generated dependencies: never an artifact.
std::optional<std::string> CacheDirectory(const std::vector<std::string_view>& dirs) {
  for (size_t i = 0; i < dirs.size(); ++i) {
    const std::string name = Lower(dirs[i]);
    const std::string next = i + 1 < dirs.size() ? Lower(dirs[i + 1]) : "";
    if (IsOneOf(name, {"node_modules", ".npm",      ".pnpm-store",   "bower_components",
                       ".venv",        "venv",      "site-packages", "dist-packages",
                       "__pycache__",  ".tox",      ".nox",          ".m2",
                       ".gradle",      ".ivy2",     ".cache",        ".bundle",
                       ".pub-cache",   ".nuget",    ".mypy_cache",   ".pytest_cache",
                       ".ruff_cache",  ".terraform"})) {
      return std::string(dirs[i]);
    }
    if ((name == ".yarn" && IsOneOf(next, {"cache", "unplugged", "berry"})) ||
        (name == ".cargo" && IsOneOf(next, {"registry", "git"})) ||
        (name == "go" && next == "pkg") || (name == "vendor" && next == "bundle")) {
      return fmt::format("{}/{}", dirs[i], dirs[i + 1]);
    }
  }
  return std::nullopt;
}

std::optional<Refusal> PrivateKeyByName(const std::vector<std::string_view>& segments,
                                        const std::string& base) {
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    if (segments[i] == ".ssh" || segments[i] == ".gnupg") {
      return Refusal{"never-leave/private-key", fmt::format("under {}", segments[i])};
    }
  }
  if (IsOneOf(base, {"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk",
                     "identity", "secring.gpg"})) {
    return Refusal{"never-leave/private-key", fmt::format("basename {}", base)};
  }
  for (std::string_view ext :
       {".key", ".p12", ".pfx", ".jks", ".keystore", ".ppk", ".p8", ".pkcs12", ".pvk"}) {
    if (base.size() > ext.size() && base.ends_with(ext)) {
      return Refusal{"never-leave/private-key", fmt::format("extension {}", ext)};
    }
  }
  return std::nullopt;
}

std::optional<Refusal> EnvFile(const std::string& base) {
  if (base == ".env" || base == ".envrc") {
    return Refusal{"never-leave/env-file", fmt::format("basename {}", base)};
  }
  if (base.starts_with(".env.")) {
    const std::string_view suffix = std::string_view(base).substr(5);
    if (IsOneOf(suffix, {"example", "sample", "template", "dist", "defaults", "schema"})) {
      return std::nullopt;  // templates without values are meant to be shared
    }
    return Refusal{"never-leave/env-file", fmt::format("basename {}", base)};
  }
  if (base.size() > 4 && base.ends_with(".env")) {
    return Refusal{"never-leave/env-file", "extension .env"};
  }
  return std::nullopt;
}

std::optional<Refusal> TokenFile(std::string_view path, const std::string& base) {
  if (IsOneOf(base,
              {".netrc", "_netrc", ".npmrc", ".pypirc", ".git-credentials", ".pgpass", ".my.cnf",
               ".vault-token", ".terraformrc", "terraform.rc", ".htpasswd", "kubeconfig",
               ".dockercfg", "credentials.json", ".boto", ".s3cfg", ".gem_credentials"})) {
    return Refusal{"never-leave/token-file", fmt::format("basename {}", base)};
  }
  for (std::string_view ext : {".tfstate", ".tfstate.backup"}) {
    if (base.ends_with(ext)) {
      return Refusal{"never-leave/token-file", fmt::format("extension {}", ext)};
    }
  }
  if ((base.starts_with("client_secret") || base.starts_with("service-account") ||
       base.starts_with("service_account")) &&
      base.ends_with(".json")) {
    return Refusal{"never-leave/token-file", fmt::format("basename {}", base)};
  }
  const std::string lower = Lower(path);
  for (std::string_view tail :
       {"/.docker/config.json", "/.kube/config", "/.aws/credentials", "/.aws/config",
        "/.config/gh/hosts.yml", "/.config/hub", "/.gem/credentials", "/.cargo/credentials",
        "/.cargo/credentials.toml"}) {
    if (lower.ends_with(tail)) {
      return Refusal{"never-leave/token-file", fmt::format("path ends with {}", tail)};
    }
  }
  for (std::string_view dir : {"/.config/gcloud/", "/.azure/", "/.gcloud/"}) {
    if (lower.find(dir) != std::string::npos) {
      return Refusal{"never-leave/token-file", fmt::format("under {}", dir.substr(1))};
    }
  }
  return std::nullopt;
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

bool IsAtOrUnder(std::string_view path, std::string_view dir) {
  if (dir == "/") return !path.empty() && path[0] == '/';
  return path == dir ||
         (path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/');
}

bool IsNormalizedAbsolute(std::string_view path) {
  if (path.empty() || path[0] != '/') return false;
  if (path.size() > 1 && path.back() == '/') return false;
  if (path.find("//") != std::string_view::npos) return false;
  if (path.find('\0') != std::string_view::npos) return false;
  for (std::string_view segment : Segments(path)) {
    if (segment == "." || segment == "..") return false;
  }
  return true;
}

std::optional<Refusal> NeverLeaveByPath(std::string_view path) {
  for (std::string_view home : {"/sandbox/home", "/home", "/root"}) {
    if (IsAtOrUnder(path, home)) {
      return Refusal{"never-leave/home-directory", fmt::format("under {}", home)};
    }
  }
  std::vector<std::string_view> segments = Segments(path);
  if (segments.empty()) return std::nullopt;
  const std::string base = Lower(segments.back());
  std::vector<std::string_view> dirs(segments.begin(), segments.end() - 1);
  if (IsAtOrUnder(path, "/sandbox/cache")) {
    return Refusal{"never-leave/dependency-cache", "under /sandbox/cache"};
  }
  if (std::optional<std::string> dir = CacheDirectory(dirs)) {
    return Refusal{"never-leave/dependency-cache", fmt::format("under {}", *dir)};
  }
  if (base.ends_with(".pub")) return std::nullopt;  // public keys may leave
  if (auto r = PrivateKeyByName(segments, base)) return r;
  if (auto r = EnvFile(base)) return r;
  if (auto r = TokenFile(path, base)) return r;
  return std::nullopt;
}

HeadKind SniffHead(std::string_view head) {
  HeadKind kind;
  // Private keys by their first line (after a BOM and blank space).
  std::string_view text = head;
  if (StartsWith(text, "\xEF\xBB\xBF")) text.remove_prefix(3);
  while (!text.empty() &&
         (text[0] == ' ' || text[0] == '\t' || text[0] == '\r' || text[0] == '\n')) {
    text.remove_prefix(1);
  }
  if (StartsWith(text, "-----BEGIN ")) {
    const std::string_view line = text.substr(0, std::min(text.find('\n'), size_t{96}));
    if (line.find("PRIVATE KEY-----") != std::string_view::npos) {
      kind.private_key = "PEM private key";
    } else if (line.find("PGP PRIVATE KEY BLOCK-----") != std::string_view::npos) {
      kind.private_key = "PGP private key";
    }
  } else if (StartsWith(text, "PuTTY-User-Key-File-")) {
    kind.private_key = "PuTTY private key";
  }
  if (StartsWith(head, std::string_view("openssh-key-v1\0", 15))) {
    kind.private_key = "OpenSSH private key";
  } else if (StartsWith(head, "\xFE\xED\xFE\xED") || StartsWith(head, "\xCE\xCE\xCE\xCE")) {
    kind.private_key = "Java keystore";
  }

  struct Magic {
    std::string_view bytes;
    const char* name;
  };
  static constexpr Magic kMagics[] = {
      {"\x7f"
       "ELF",
       "ELF executable"},
      {"\xFE\xED\xFA\xCE", "Mach-O executable"},
      {"\xFE\xED\xFA\xCF", "Mach-O executable"},
      {"\xCE\xFA\xED\xFE", "Mach-O executable"},
      {"\xCF\xFA\xED\xFE", "Mach-O executable"},
      {"\xCA\xFE\xBA\xBE", "Mach-O universal binary or Java class"},
      {std::string_view("\0asm", 4), "WebAssembly module"},
      {"\x1F\x8B", "gzip archive"},
      {"PK\x03\x04", "zip archive"},
      {"\xFD"
       "7zXZ",
       "xz archive"},
      {"\x28\xB5\x2F\xFD", "zstd archive"},
      {"7z\xBC\xAF\x27\x1C", "7z archive"},
      {"Rar!\x1A\x07", "rar archive"},
  };
  for (const Magic& m : kMagics) {
    if (StartsWith(head, m.bytes)) {
      kind.binary = m.name;
      return kind;
    }
  }
  if (StartsWith(head, "BZh") && head.size() >= 10 && head[3] >= '1' && head[3] <= '9' &&
      head.substr(4, 6) == "1AY&SY") {
    kind.binary = "bzip2 archive";
    return kind;
  }
  // PE: "MZ" and, at the offset stored at 0x3c, "PE\0\0".
  if (StartsWith(head, "MZ") && head.size() >= 0x40) {
    const auto b = [&](size_t i) {
      return static_cast<uint32_t>(static_cast<unsigned char>(head[i]));
    };
    const uint32_t pe = b(0x3c) | (b(0x3d) << 8) | (b(0x3e) << 16) | (b(0x3f) << 24);
    if (pe + 4 <= head.size() && head.substr(pe, 4) == std::string_view("PE\0\0", 4)) {
      kind.binary = "PE executable";
      return kind;
    }
  }
  const size_t nul = head.find('\0');
  if (nul != std::string_view::npos) {
    kind.binary = fmt::format("binary data (NUL byte at offset {})", nul);
  }
  return kind;
}

}  // namespace airlock::artifact::internal
