#include "cmdpolicy/internal/rules.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>

#include "cmdpolicy/policy.h"

namespace airlock::cmdpolicy::internal {
namespace {

constexpr size_t kNone = std::string::npos;

constexpr char kPrivilegeReason[] =
    "runs a command with another user's privileges; nothing in a sandbox may gain privileges";
constexpr char kPrivilegeInstead[] =
    "run the command as the sandbox user (it owns /sandbox/workspace, /sandbox/tmp and "
    "/sandbox/home); software that needs root to install belongs in the image";
constexpr char kSystemReason[] =
    "changes the system's packages; a sandbox's system software comes from its image";
constexpr char kSystemInstead[] =
    "install into the project instead (a virtualenv, node_modules, vendor/), or ask for an "
    "image that has the package";
constexpr char kPipeReason[] =
    "feeds what it downloads to a shell or interpreter: code from the network would run "
    "unreviewed";
constexpr char kPipeInstead[] =
    "download the file, read it, and declare what it installs as a dependency of the project "
    "(or ask for it in the image)";

constexpr BuiltinRule kRules[] = {
    {"privilege-escalation/sudo", kPrivilegeReason, kPrivilegeInstead},
    {"privilege-escalation/doas", kPrivilegeReason, kPrivilegeInstead},
    {"privilege-escalation/su", kPrivilegeReason, kPrivilegeInstead},
    {"privilege-escalation/runuser", kPrivilegeReason, kPrivilegeInstead},
    {"privilege-escalation/pkexec", kPrivilegeReason, kPrivilegeInstead},
    {"privilege-escalation/run0", kPrivilegeReason, kPrivilegeInstead},
    {"system-package-install/apt", kSystemReason, kSystemInstead},
    {"system-package-install/dpkg", kSystemReason, kSystemInstead},
    {"system-package-install/rpm", kSystemReason, kSystemInstead},
    {"system-package-install/yum", kSystemReason, kSystemInstead},
    {"system-package-install/apk", kSystemReason, kSystemInstead},
    {"system-package-install/zypper", kSystemReason, kSystemInstead},
    {"system-package-install/pacman", kSystemReason, kSystemInstead},
    {"system-package-install/snap", kSystemReason, kSystemInstead},
    {"system-package-install/flatpak", kSystemReason, kSystemInstead},
    {"system-package-install/brew", kSystemReason, kSystemInstead},
    {"system-package-install/port", kSystemReason, kSystemInstead},
    {"system-package-install/nix", kSystemReason, kSystemInstead},
    {"system-package-install/pkg", kSystemReason, kSystemInstead},
    {"system-package-install/xbps", kSystemReason, kSystemInstead},
    {"system-package-install/opkg", kSystemReason, kSystemInstead},
    {"system-package-install/pip",
     "pip --break-system-packages overrides the protection of the system Python's packages",
     "create a virtualenv in the workspace (python3 -m venv .venv) and install into it"},
    {"system-package-install/uv",
     "uv pip --system / --break-system-packages installs into the system Python",
     "install into the project's virtualenv (uv venv; uv pip install -r requirements.txt)"},
    {"pipe-to-shell/curl", kPipeReason, kPipeInstead},
    {"pipe-to-shell/wget", kPipeReason, kPipeInstead},
    {"pipe-to-shell/wget2", kPipeReason, kPipeInstead},
    {"pipe-to-shell/fetch", kPipeReason, kPipeInstead},
    {"pipe-to-shell/http", kPipeReason, kPipeInstead},
    {"pipe-to-shell/https", kPipeReason, kPipeInstead},
    {"pipe-to-shell/xh", kPipeReason, kPipeInstead},
    {"pipe-to-shell/xhs", kPipeReason, kPipeInstead},
    {"pipe-to-shell/curlie", kPipeReason, kPipeInstead},
    {"pipe-to-shell/lwp-request", kPipeReason, kPipeInstead},
    {"pipe-to-shell/GET", kPipeReason, kPipeInstead},
    {"global-install/npm", "installs npm packages globally, outside the project",
     "add it to package.json (npm install --save-dev PKG) and run it with npx or an npm script"},
    {"global-install/pnpm", "installs packages globally, outside the project",
     "add it to the project (pnpm add -D PKG) and run it with pnpm exec"},
    {"global-install/yarn", "installs packages globally, outside the project",
     "add it to the project (yarn add --dev PKG) and run it with yarn run"},
    {"global-install/bun", "installs packages globally, outside the project",
     "add it to the project (bun add -d PKG) and run it with bunx"},
    {"global-install/gem",
     "installs gems into the system's or the user's gem directory, outside the project",
     "declare it in the Gemfile and run bundle install, or gem install --install-dir vendor/gems"},
    {"global-install/composer", "installs packages globally, outside the project",
     "add it to the project (composer require --dev PKG)"},
    {"global-install/dotnet", "installs a .NET tool globally, outside the project",
     "use a local tool manifest (dotnet new tool-manifest; dotnet tool install PKG)"},
    {"user-install/pip", "installs into the user's site-packages (~/.local), outside the project",
     "declare it in requirements.txt and install into a virtualenv (python3 -m venv .venv; "
     ".venv/bin/pip install -r requirements.txt)"},
    {"user-install/gem", "installs gems into the user's home, outside the project",
     "declare it in the Gemfile and run bundle install"},
    {"user-install/pipx", "installs applications into ~/.local, outside the project",
     "run it without installing (pipx run TOOL), or add it to the project's dev requirements"},
    {"user-install/uv", "installs tools into ~/.local, outside the project",
     "run it without installing (uvx TOOL), or add it to the project (uv add --dev TOOL)"},
    {"unparseable-shell",
     "the shell text could not be parsed with confidence, and the spec's policy is strict",
     "pass the command as a plain argv, or simplify the shell text (balanced quotes, no "
     "computed program names)"},
};

bool IsOneOf(std::string_view s, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

bool SameNameIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The lower-cased value of `name` in the level's environment, the name compared without regard
// to case (npm reads npm_config_* in any case).
std::optional<std::string> EnvValue(const Level& level, std::string_view name) {
  for (const auto& [key, value] : level.env) {
    if (!SameNameIgnoringCase(key, name)) continue;
    std::string lower;
    for (char c : value) {
      lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    return lower;
  }
  return std::nullopt;
}

bool Truthy(const Level& level, std::string_view name) {
  std::optional<std::string> v = EnvValue(level, name);
  return v && (*v == "1" || *v == "true" || *v == "yes" || *v == "on");
}

// "NAME=value" as the level's environment has it, for the matched words.
std::string EnvWord(const Level& level, std::string_view name) {
  for (const auto& [key, value] : level.env) {
    if (SameNameIgnoringCase(key, name)) return key + "=" + value;
  }
  return std::string(name);
}

// A tool's subcommands: those refused, those known to be fine, and the options that take the
// next word as their value (so that a value is not mistaken for a subcommand).
struct Subcommands {
  std::initializer_list<std::string_view> refused;
  std::initializer_list<std::string_view> allowed;
  std::string_view short_with_value = "";
  std::initializer_list<std::string_view> long_with_value = {};
};

// The index of the first operand from `from` on that is a known subcommand (kNone when there
// is none). Unknown operands are passed over: they may be values of options not listed.
size_t KnownSubcommand(const Level& level, const Subcommands& sub, size_t from = 1) {
  const std::vector<Arg>& args = level.args;
  for (size_t i = from; i < args.size(); ++i) {
    const std::string& a = args[i].text;
    if (a == "--") return kNone;
    if (a.size() > 1 && a[0] == '-') {
      if (a[1] == '-') {
        if (std::find(sub.long_with_value.begin(), sub.long_with_value.end(), a) !=
            sub.long_with_value.end()) {
          ++i;
        }
      } else if (a.size() == 2 && sub.short_with_value.find(a[1]) != std::string_view::npos) {
        ++i;
      }
      continue;
    }
    if (IsOneOf(a, sub.refused) || IsOneOf(a, sub.allowed)) return i;
  }
  return kNone;
}

// Whether one of `flags` appears among args[from..] before "--".
size_t FindFlag(const Level& level, size_t from, std::initializer_list<std::string_view> flags) {
  for (size_t i = from; i < level.args.size(); ++i) {
    const std::string& a = level.args[i].text;
    if (a == "--") return kNone;
    if (IsOneOf(a, flags)) return i;
  }
  return kNone;
}

Hit MakeHit(std::string rule, std::initializer_list<std::string_view> matched) {
  Hit hit{std::move(rule), {}};
  for (std::string_view m : matched) hit.matched.emplace_back(m);
  return hit;
}

// A tool whose refused subcommands change the system: apt, yum, apk, ...
std::optional<Hit> BySubcommand(const Level& level, std::string_view rule, const Subcommands& sub) {
  size_t i = KnownSubcommand(level, sub);
  if (i == kNone || !IsOneOf(level.args[i].text, sub.refused)) return std::nullopt;
  return MakeHit(std::string(rule), {level.program(), level.args[i].text});
}

std::optional<Hit> Apt(const Level& level) {
  return BySubcommand(
      level, "system-package-install/apt",
      {{"install", "reinstall", "remove", "purge", "autoremove", "autopurge", "upgrade",
        "full-upgrade", "dist-upgrade", "safe-upgrade", "build-dep", "satisfy", "update",
        "markauto", "unmarkauto", "hold", "unhold", "dselect-upgrade"},
       {"list", "search", "show", "showsrc", "depends", "rdepends", "policy", "download", "source",
        "changelog", "help", "why", "why-not", "versions", "check", "clean", "autoclean", "moo",
        "madison"},
       "octa",
       {"--option", "--config-file", "--target-release", "--default-release",
        "--host-architecture"}});
}

std::optional<Hit> Dpkg(const Level& level) {
  size_t i = FindFlag(level, 1,
                      {"-i", "--install", "--unpack", "-r", "--remove", "-P", "--purge",
                       "--configure", "--triggers-only", "--set-selections", "--clear-selections",
                       "--update-avail", "--merge-avail", "-A", "--record-avail"});
  if (i == kNone) return std::nullopt;
  return MakeHit("system-package-install/dpkg", {level.program(), level.args[i].text});
}

std::optional<Hit> Rpm(const Level& level) {
  for (size_t i = 1; i < level.args.size(); ++i) {
    const std::string& a = level.args[i].text;
    bool refused = IsOneOf(a, {"--install", "--upgrade", "--freshen", "--erase", "--reinstall"}) ||
                   (a.size() >= 2 && a[0] == '-' && a[1] != '-' &&
                    (a[1] == 'i' || a[1] == 'U' || a[1] == 'F' || a[1] == 'e'));
    if (refused) return MakeHit("system-package-install/rpm", {level.program(), a});
  }
  return std::nullopt;
}

std::optional<Hit> Yum(const Level& level) {
  const Subcommands sub{{"install",
                         "reinstall",
                         "remove",
                         "erase",
                         "upgrade",
                         "update",
                         "downgrade",
                         "groupinstall",
                         "groupupdate",
                         "groupremove",
                         "localinstall",
                         "localupdate",
                         "distro-sync",
                         "distrosync",
                         "dsync",
                         "autoremove",
                         "swap",
                         "in",
                         "rm",
                         "up",
                         "dist-upgrade",
                         "upgrade-minimal",
                         "update-minimal",
                         "makecache"},
                        {"list", "info", "search", "provides", "whatprovides", "repolist",
                         "repoquery", "check-update", "deplist", "history", "clean", "help",
                         "download", "group", "groups", "module"},
                        "cdexR",
                        {"--config", "--exclude", "--installroot", "--releasever", "--repo",
                         "--enablerepo", "--disablerepo", "--setopt"}};
  size_t i = KnownSubcommand(level, sub);
  if (i == kNone) return std::nullopt;
  const std::string& word = level.args[i].text;
  if (IsOneOf(word, {"group", "groups", "module"})) {
    // dnf group install X, dnf module install X.
    for (size_t j = i + 1; j < level.args.size(); ++j) {
      const std::string& next = level.args[j].text;
      if (next.empty() || next[0] == '-') continue;
      if (IsOneOf(next, {"install", "remove", "upgrade", "update", "enable", "reset", "switch-to",
                         "mark"})) {
        return MakeHit("system-package-install/yum", {level.program(), word, next});
      }
      break;
    }
    return std::nullopt;
  }
  if (!IsOneOf(word, sub.refused)) return std::nullopt;
  return MakeHit("system-package-install/yum", {level.program(), word});
}

std::optional<Hit> Pacman(const Level& level) {
  for (size_t i = 1; i < level.args.size(); ++i) {
    const std::string& a = level.args[i].text;
    if (IsOneOf(a, {"--sync", "--upgrade", "--remove"})) {
      return MakeHit("system-package-install/pacman", {level.program(), a});
    }
    if (a.size() < 2 || a[0] != '-' || a[1] == '-') continue;
    const std::string_view letters = std::string_view(a).substr(1);
    char op = 0;
    for (char c : letters) {
      if (c >= 'A' && c <= 'Z') {
        op = c;
        break;
      }
    }
    const bool query_only = letters.find_first_of("silgp") != std::string_view::npos &&
                            letters.find_first_of("yu") == std::string_view::npos;
    if (op == 'U' || op == 'R' || (op == 'S' && !query_only)) {
      return MakeHit("system-package-install/pacman", {level.program(), a});
    }
  }
  return std::nullopt;
}

std::optional<Hit> NixEnv(const Level& level) {
  for (size_t i = 1; i < level.args.size(); ++i) {
    const std::string& a = level.args[i].text;
    bool refused = IsOneOf(a, {"--install", "--uninstall", "--upgrade", "--set"}) ||
                   (a.size() >= 2 && a[0] == '-' && a[1] != '-' &&
                    (a[1] == 'i' || a[1] == 'e' || a[1] == 'u'));
    if (refused) return MakeHit("system-package-install/nix", {level.program(), a});
  }
  return std::nullopt;
}

// `tool [options] outer inner`: a subcommand with its own subcommands (nix profile install,
// yarn global add, composer global require, uv tool install, dotnet tool install).
std::optional<size_t> NestedSubcommand(const Level& level, std::string_view outer,
                                       std::initializer_list<std::string_view> inner) {
  size_t i = KnownSubcommand(level, {{outer}, {}});
  if (i == kNone) return std::nullopt;
  for (size_t j = i + 1; j < level.args.size(); ++j) {
    const std::string& a = level.args[j].text;
    if (a.size() > 1 && a[0] == '-') continue;
    if (IsOneOf(a, inner)) return j;
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<Hit> ByNestedSubcommand(const Level& level, std::string_view rule,
                                      std::string_view outer,
                                      std::initializer_list<std::string_view> inner) {
  std::optional<size_t> j = NestedSubcommand(level, outer, inner);
  if (!j) return std::nullopt;
  return MakeHit(std::string(rule), {level.program(), outer, level.args[*j].text});
}

bool NpmGlobal(const Level& level, size_t from) {
  for (size_t i = from; i < level.args.size(); ++i) {
    const std::string& a = level.args[i].text;
    if (a == "--") return false;
    if (IsOneOf(a, {"-g", "--global", "--global=true", "-g=true", "--location=global"})) {
      return true;
    }
    if (a == "--location" && i + 1 < level.args.size() && level.args[i + 1].text == "global") {
      return true;
    }
  }
  return Truthy(level, "npm_config_global") ||
         EnvValue(level, "npm_config_location") == std::optional<std::string>("global");
}

std::optional<Hit> Npm(const Level& level) {
  const Subcommands sub{
      {"install", "i",     "in",      "ins",     "inst",      "insta",        "instal",
       "isnt",    "isnta", "isntal",  "isntall", "add",       "install-test", "it",
       "update",  "up",    "upgrade", "udpate",  "uninstall", "unlink",       "remove",
       "rm",      "r",     "un",      "link",    "ln"},
      {"run",     "run-script", "test",    "t",      "exec",  "x",       "start",
       "stop",    "restart",    "ls",      "list",   "view",  "info",    "outdated",
       "audit",   "pack",       "publish", "config", "cache", "version", "init",
       "create",  "doctor",     "explain", "why",    "fund",  "prune",   "dedupe",
       "rebuild", "root",       "prefix",  "bin",    "help",  "ci",      "clean-install",
       "query",   "pkg",        "search",  "whoami"},
      "Cw",
      {"--prefix", "--workspace", "--registry", "--loglevel", "--cache", "--tag", "--userconfig"}};
  size_t i = KnownSubcommand(level, sub);
  if (i == kNone || !IsOneOf(level.args[i].text, sub.refused)) return std::nullopt;
  if (!NpmGlobal(level, 1)) return std::nullopt;
  return MakeHit("global-install/npm", {level.program(), level.args[i].text, "-g"});
}

std::optional<Hit> GlobalFlagInstall(const Level& level, std::string_view rule,
                                     std::initializer_list<std::string_view> refused) {
  size_t i = KnownSubcommand(level, {refused, {}});
  if (i == kNone) return std::nullopt;
  size_t flag = FindFlag(level, 1, {"-g", "--global"});
  if (flag == kNone) return std::nullopt;
  return MakeHit(std::string(rule), {level.program(), level.args[i].text, level.args[flag].text});
}

std::optional<Hit> Gem(const Level& level) {
  const Subcommands sub{
      {"install", "update", "i"},
      {"list",          "search",   "info",  "query",  "env",      "environment", "build",
       "fetch",         "unpack",   "help",  "which",  "contents", "dependency",  "outdated",
       "specification", "push",     "owner", "yank",   "sources",  "cert",        "check",
       "cleanup",       "pristine", "rdoc",  "server", "signin",   "signout",     "stale",
       "uninstall",     "open",     "lock",  "mirror"}};
  size_t i = KnownSubcommand(level, sub);
  if (i == kNone || !IsOneOf(level.args[i].text, sub.refused)) return std::nullopt;
  const std::string& word = level.args[i].text;
  if (size_t user = FindFlag(level, i + 1, {"--user-install"}); user != kNone) {
    return MakeHit("user-install/gem", {level.program(), word, "--user-install"});
  }
  if (word == "update" && FindFlag(level, i + 1, {"--system"}) != kNone) {
    return MakeHit("global-install/gem", {level.program(), word, "--system"});
  }
  for (size_t j = i + 1; j < level.args.size(); ++j) {
    const std::string& a = level.args[j].text;
    if (a == "-i" || a == "--install-dir" || a.rfind("--install-dir=", 0) == 0 ||
        (a.rfind("-i", 0) == 0 && a.size() > 2)) {
      return std::nullopt;  // an explicit destination, as bundler's vendor path
    }
  }
  if (level.env.count("GEM_HOME") != 0) return std::nullopt;
  return MakeHit("global-install/gem", {level.program(), word});
}

std::optional<Hit> Pip(const Level& level) {
  const Subcommands sub{
      {"install"},
      {"download", "uninstall", "freeze", "inspect", "list", "show", "check", "config", "search",
       "cache", "index", "wheel", "hash", "completion", "debug", "help", "lock"},
      "",
      {"--log", "--cache-dir", "--proxy", "--retries", "--timeout", "--exists-action",
       "--trusted-host", "--cert", "--client-cert", "--python", "--keyring-provider"}};
  size_t i = KnownSubcommand(level, sub);
  if (i == kNone) return std::nullopt;
  const std::string& word = level.args[i].text;
  if (size_t b = FindFlag(level, i + 1, {"--break-system-packages"}); b != kNone) {
    return MakeHit("system-package-install/pip",
                   {level.program(), word, "--break-system-packages"});
  }
  if (Truthy(level, "PIP_BREAK_SYSTEM_PACKAGES")) {
    return MakeHit("system-package-install/pip",
                   {EnvWord(level, "PIP_BREAK_SYSTEM_PACKAGES"), level.program(), word});
  }
  if (word != "install") return std::nullopt;
  if (FindFlag(level, i + 1, {"--user"}) != kNone) {
    return MakeHit("user-install/pip", {level.program(), word, "--user"});
  }
  if (Truthy(level, "PIP_USER")) {
    return MakeHit("user-install/pip", {EnvWord(level, "PIP_USER"), level.program(), word});
  }
  return std::nullopt;
}

std::optional<Hit> Uv(const Level& level) {
  if (std::optional<size_t> j = NestedSubcommand(level, "pip", {"install", "sync", "uninstall"})) {
    size_t flag = FindFlag(level, *j + 1, {"--system", "--break-system-packages"});
    if (flag != kNone) {
      return MakeHit("system-package-install/uv",
                     {level.program(), "pip", level.args[*j].text, level.args[flag].text});
    }
    return std::nullopt;
  }
  return ByNestedSubcommand(level, "user-install/uv", "tool", {"install", "upgrade"});
}

}  // namespace

std::optional<Hit> CheckPrivilege(const Level& level) {
  std::string_view p = level.program();
  if (p == "sudoedit") p = "sudo";
  if (!IsOneOf(p, {"sudo", "doas", "su", "runuser", "pkexec", "run0"})) return std::nullopt;
  return MakeHit("privilege-escalation/" + std::string(p), {level.program()});
}

std::optional<Hit> CheckInstalls(const Level& level) {
  const std::string_view p = level.program();
  if (IsOneOf(p, {"apt", "apt-get", "aptitude"})) return Apt(level);
  if (p == "dpkg") return Dpkg(level);
  if (p == "rpm") return Rpm(level);
  if (IsOneOf(p, {"yum", "dnf", "dnf5", "microdnf", "tdnf"})) return Yum(level);
  if (p == "apk") {
    return BySubcommand(level, "system-package-install/apk",
                        {{"add", "del", "upgrade", "update", "fix"},
                         {"info", "search", "list", "policy", "stats", "version", "dot", "audit",
                          "fetch", "index", "verify"},
                         "Xp",
                         {"--repository", "--root", "--arch"}});
  }
  if (p == "zypper") {
    return BySubcommand(level, "system-package-install/zypper",
                        {{"install", "in", "remove", "rm", "update", "up", "dist-upgrade", "dup",
                          "patch", "source-install", "si", "addrepo", "ar", "refresh", "ref"},
                         {"search", "se", "info", "if", "list-updates", "lu", "patches", "products",
                          "repos", "lr", "what-provides", "wp"},
                         "Rr",
                         {"--root", "--repo"}});
  }
  if (IsOneOf(p, {"pacman", "yay", "paru"})) return Pacman(level);
  if (p == "snap") {
    return BySubcommand(level, "system-package-install/snap",
                        {{"install", "remove", "refresh", "revert", "enable", "disable"},
                         {"list", "info", "find", "search", "help", "version", "run"}});
  }
  if (p == "flatpak") {
    return BySubcommand(level, "system-package-install/flatpak",
                        {{"install", "uninstall", "update", "remove"},
                         {"list", "info", "search", "run", "help", "remotes"}});
  }
  if (p == "brew") {
    return BySubcommand(level, "system-package-install/brew",
                        {{"install", "reinstall", "upgrade", "uninstall", "remove", "rm"},
                         {"list", "ls", "info", "search", "help", "outdated", "deps", "config"}});
  }
  if (p == "port") {
    return BySubcommand(
        level, "system-package-install/port",
        {{"install", "uninstall", "upgrade", "selfupdate", "activate", "deactivate"},
         {"search", "info", "list", "installed", "contents", "help"}});
  }
  if (p == "nix-env") return NixEnv(level);
  if (p == "nix") {
    return ByNestedSubcommand(level, "system-package-install/nix", "profile",
                              {"install", "add", "remove", "upgrade", "rollback"});
  }
  if (p == "pkg") {
    return BySubcommand(level, "system-package-install/pkg",
                        {{"install", "add", "delete", "remove", "upgrade", "autoremove"},
                         {"info", "search", "query", "audit", "which", "version", "help"}});
  }
  if (p == "xbps-install" || p == "xbps-remove") {
    return MakeHit("system-package-install/xbps", {p});
  }
  if (p == "opkg") {
    return BySubcommand(level, "system-package-install/opkg",
                        {{"install", "remove", "upgrade", "update"},
                         {"list", "info", "search", "find", "status", "files", "help"}});
  }
  if (IsVersioned(p, "pip")) return Pip(level);
  if (p == "uv") return Uv(level);
  if (p == "npm") return Npm(level);
  if (p == "pnpm") {
    return GlobalFlagInstall(level, "global-install/pnpm",
                             {"add", "install", "i", "update", "up", "upgrade", "remove", "rm",
                              "uninstall", "un", "link", "ln"});
  }
  if (p == "bun") {
    return GlobalFlagInstall(level, "global-install/bun",
                             {"add", "a", "install", "i", "remove", "rm", "update", "link"});
  }
  if (p == "yarn") {
    return ByNestedSubcommand(level, "global-install/yarn", "global",
                              {"add", "remove", "upgrade", "upgrade-interactive"});
  }
  if (p == "composer") {
    return ByNestedSubcommand(level, "global-install/composer", "global",
                              {"require", "update", "install", "remove", "upgrade"});
  }
  if (p == "dotnet") {
    if (std::optional<size_t> j =
            NestedSubcommand(level, "tool", {"install", "update", "uninstall"})) {
      if (size_t flag = FindFlag(level, *j + 1, {"-g", "--global"}); flag != kNone) {
        return MakeHit("global-install/dotnet",
                       {p, "tool", level.args[*j].text, level.args[flag].text});
      }
    }
    return std::nullopt;
  }
  if (p == "gem") return Gem(level);
  if (p == "pipx") {
    return BySubcommand(level, "user-install/pipx",
                        {{"install", "inject", "upgrade", "upgrade-all", "reinstall",
                          "reinstall-all", "install-all", "upgrade-shared"},
                         {"run", "list", "uninstall", "uninstall-all", "environment", "completions",
                          "ensurepath", "runpip"}});
  }
  return std::nullopt;
}

std::string RuleReason(std::string_view rule) {
  for (const BuiltinRule& r : kRules) {
    if (r.name == rule) return std::string(r.reason);
  }
  return "";
}

std::string RuleInstead(std::string_view rule) {
  for (const BuiltinRule& r : kRules) {
    if (r.name == rule) return std::string(r.instead);
  }
  return "";
}

}  // namespace airlock::cmdpolicy::internal

namespace airlock::cmdpolicy {

std::span<const BuiltinRule> BuiltinRules() { return internal::kRules; }

}  // namespace airlock::cmdpolicy
