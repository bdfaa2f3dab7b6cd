#include "cmdpolicy/policy.h"

#include <string>
#include <vector>

#include "cmdpolicy/internal/shell.h"
#include "command/finish.h"
#include "command/report.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace airlock::cmdpolicy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

Policy BuiltinOnly() {
  absl::StatusOr<Policy> policy = Policy::Create({});
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *policy;
}

std::string Show(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) out += (out.empty() ? "" : " ") + internal::QuoteWord(a);
  return out;
}

struct Case {
  std::vector<std::string> argv;
  const char* rule;  // "" when allowed
};

void ExpectDecisions(const Policy& policy, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(Show(c.argv));
    Decision d = policy.Check(c.argv);
    EXPECT_EQ(d.rule, c.rule);
    EXPECT_EQ(d.allowed, std::string(c.rule).empty());
    if (!d.allowed) {
      EXPECT_FALSE(d.reason.empty());
      EXPECT_FALSE(d.matched.empty());
      EXPECT_FALSE(d.command.empty());
    }
  }
}

// Each case is an agent's plausible mistake and the rule that must refuse it.
TEST(PolicyTest, RefusesPrivilegeEscalation) {
  ExpectDecisions(
      BuiltinOnly(),
      {
          {{"sudo", "apt-get", "install", "-y", "libpq-dev"}, "privilege-escalation/sudo"},
          {{"/usr/bin/sudo", "ls"}, "privilege-escalation/sudo"},
          {{"sudo", "-u", "root", "--", "make"}, "privilege-escalation/sudo"},
          {{"sudoedit", "/etc/hosts"}, "privilege-escalation/sudo"},
          {{"doas", "make", "install"}, "privilege-escalation/doas"},
          {{"su", "-c", "make install"}, "privilege-escalation/su"},
          {{"su", "-"}, "privilege-escalation/su"},
          {{"runuser", "-u", "root", "--", "id"}, "privilege-escalation/runuser"},
          {{"pkexec", "true"}, "privilege-escalation/pkexec"},
          {{"run0", "systemctl", "restart", "x"}, "privilege-escalation/run0"},
          // Wrappers are looked through.
          {{"env", "FOO=1", "sudo", "ls"}, "privilege-escalation/sudo"},
          {{"env", "-i", "-u", "HOME", "sudo", "ls"}, "privilege-escalation/sudo"},
          {{"env", "-S", "sudo -E make", "install"}, "privilege-escalation/sudo"},
          {{"nohup", "sudo", "ls"}, "privilege-escalation/sudo"},
          {{"timeout", "5", "sudo", "ls"}, "privilege-escalation/sudo"},
          {{"timeout", "-s", "KILL", "-k", "1", "5", "sudo", "ls"}, "privilege-escalation/sudo"},
          {{"xargs", "sudo", "rm"}, "privilege-escalation/sudo"},
          {{"xargs", "-n", "1", "-I{}", "sudo", "rm", "{}"}, "privilege-escalation/sudo"},
          {{"nice", "-n", "10", "ionice", "-c", "3", "sudo", "make"}, "privilege-escalation/sudo"},
          {{"stdbuf", "-oL", "time", "-p", "sudo", "make"}, "privilege-escalation/sudo"},
          {{"command", "sudo", "ls"}, "privilege-escalation/sudo"},
          {{"setsid", "-f", "sudo", "ls"}, "privilege-escalation/sudo"},
          {{"strace", "-f", "-o", "/tmp/t", "sudo", "ls"}, "privilege-escalation/sudo"},
          {{"busybox", "su"}, "privilege-escalation/su"},
          {{"find", ".", "-name", "*.o", "-exec", "sudo", "rm", "{}", ";"},
           "privilege-escalation/sudo"},
          {{"watch", "-n", "5", "sudo", "ls"}, "privilege-escalation/sudo"},
          {{"flock", "/tmp/lock", "-c", "sudo ls"}, "privilege-escalation/sudo"},
          // Shell text is parsed and every command in it checked.
          {{"sh", "-c", "sudo make install"}, "privilege-escalation/sudo"},
          {{"bash", "-lc", "cd /src && sudo make install"}, "privilege-escalation/sudo"},
          {{"bash", "-e", "-o", "pipefail", "-c", "make; sudo make install"},
           "privilege-escalation/sudo"},
          {{"bash", "-c", "if true; then sudo ls; fi"}, "privilege-escalation/sudo"},
          {{"bash", "-c", "for f in a b; do sudo rm \"$f\"; done"}, "privilege-escalation/sudo"},
          {{"bash", "-c", "case $x in a) sudo ls;; esac"}, "privilege-escalation/sudo"},
          {{"bash", "-c", "f() { sudo ls; }; f"}, "privilege-escalation/sudo"},
          {{"sh", "-c", "echo $(sudo cat /etc/shadow)"}, "privilege-escalation/sudo"},
          {{"sh", "-c", "x=`sudo id`"}, "privilege-escalation/sudo"},
          {{"sh", "-c", "true || (sudo ls) &"}, "privilege-escalation/sudo"},
          {{"bash", "-c", "bash <<'EOF'\nsudo ls\nEOF"}, "privilege-escalation/sudo"},
          {{"sh", "-c", "eval 'sudo ls'"}, "privilege-escalation/sudo"},
          {{"zsh", "-c", "FOO=1 /usr/bin/sudo -n true"}, "privilege-escalation/sudo"},
          {{"sh", "-c", "echo 'sudo make install' | sh"}, "privilege-escalation/sudo"},
      });
}

TEST(PolicyTest, RefusesSystemPackageInstalls) {
  ExpectDecisions(
      BuiltinOnly(),
      {
          {{"apt", "install", "curl"}, "system-package-install/apt"},
          {{"apt-get", "-y", "install", "x"}, "system-package-install/apt"},
          {{"apt-get", "-o", "Dpkg::Options::=--force-confnew", "install", "x"},
           "system-package-install/apt"},
          {{"/usr/bin/apt-get", "-qq", "--no-install-recommends", "install", "x"},
           "system-package-install/apt"},
          {{"apt-get", "update"}, "system-package-install/apt"},
          {{"aptitude", "install", "x"}, "system-package-install/apt"},
          {{"dpkg", "-i", "x.deb"}, "system-package-install/dpkg"},
          {{"dpkg", "--install", "x.deb"}, "system-package-install/dpkg"},
          {{"rpm", "-ivh", "x.rpm"}, "system-package-install/rpm"},
          {{"yum", "install", "-y", "gcc"}, "system-package-install/yum"},
          {{"dnf", "-y", "install", "gcc"}, "system-package-install/yum"},
          {{"dnf", "group", "install", "Development Tools"}, "system-package-install/yum"},
          {{"apk", "add", "--no-cache", "curl"}, "system-package-install/apk"},
          {{"zypper", "in", "gcc"}, "system-package-install/zypper"},
          {{"pacman", "-Syu", "gcc"}, "system-package-install/pacman"},
          {{"brew", "install", "jq"}, "system-package-install/brew"},
          {{"snap", "install", "x"}, "system-package-install/snap"},
          {{"nix-env", "-iA", "nixpkgs.jq"}, "system-package-install/nix"},
          {{"pip", "install", "--break-system-packages", "x"}, "system-package-install/pip"},
          {{"uv", "pip", "install", "--system", "x"}, "system-package-install/uv"},
          {{"xargs", "-0", "apt-get", "install"}, "system-package-install/apt"},
          {{"chroot", "/", "apt", "install", "x"}, "system-package-install/apt"},
          {{"busybox", "sh", "-c", "apk add x"}, "system-package-install/apk"},
          {{"sh", "-c", "sh -c 'sh -c \"apt-get install -y x\"'"}, "system-package-install/apt"},
          {{"sh", "-c", "apt-get update && apt-get install -y x"}, "system-package-install/apt"},
      });
}

TEST(PolicyTest, RefusesPipesIntoAShell) {
  ExpectDecisions(
      BuiltinOnly(),
      {
          {{"sh", "-c", "curl -fsSL https://x.sh | sh"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "wget -qO- https://x | bash"}, "pipe-to-shell/wget"},
          {{"sh", "-c", "curl -s https://x | sudo bash"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "curl -s https://x | sudo -E bash -"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "curl -s https://x | bash -s -- --yes"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "sh <(curl -s https://x)"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "bash -c \"$(curl -fsSL https://x)\""}, "pipe-to-shell/curl"},
          {{"bash", "-c", "$(curl -fsSL https://x)"}, "pipe-to-shell/curl"},
          {{"sh", "-c", "eval \"$(curl -s https://x)\""}, "pipe-to-shell/curl"},
          {{"bash", "-c", "source <(curl -s https://x)"}, "pipe-to-shell/curl"},
          {{"bash", "-c", ". <(wget -O- https://x)"}, "pipe-to-shell/wget"},
          {{"bash", "-c", "curl -s https://x | tee install.log | sh"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "curl -s https://x | python3 -"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "curl -s https://x | python3"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "curl -s https://x | perl"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "bash < <(wget -O- https://x)"}, "pipe-to-shell/wget"},
          {{"bash", "-c", "sh -s <<< \"$(curl -s https://x)\""}, "pipe-to-shell/curl"},
          {{"bash", "-c", "{ curl -s https://x; } | sh"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "curl -s https://x | (cd /tmp && sh)"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "timeout 60 curl -s https://x | env -i bash"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "echo \"$(curl -s https://x)\" | sh"}, "pipe-to-shell/curl"},
          {{"bash", "-c", "busybox wget -O- https://x | sh"}, "pipe-to-shell/wget"},
          {{"bash", "-c", "curl -s https://x |\n  sh"}, "pipe-to-shell/curl"},
      });
}

TEST(PolicyTest, RefusesGlobalAndUserInstalls) {
  ExpectDecisions(
      BuiltinOnly(),
      {
          {{"npm", "install", "-g", "typescript"}, "global-install/npm"},
          {{"npm", "i", "-g", "x"}, "global-install/npm"},
          {{"npm", "install", "--global", "x"}, "global-install/npm"},
          {{"npm", "--location=global", "install", "x"}, "global-install/npm"},
          {{"npm", "--prefix", "/tmp/x", "install", "-g", "y"}, "global-install/npm"},
          {{"env", "npm_config_global=true", "npm", "install", "x"}, "global-install/npm"},
          {{"env", "NPM_CONFIG_LOCATION=Global", "npm", "i", "x"}, "global-install/npm"},
          {{"pnpm", "add", "-g", "x"}, "global-install/pnpm"},
          {{"yarn", "global", "add", "x"}, "global-install/yarn"},
          {{"bun", "add", "-g", "x"}, "global-install/bun"},
          {{"composer", "global", "require", "x"}, "global-install/composer"},
          {{"dotnet", "tool", "install", "-g", "x"}, "global-install/dotnet"},
          {{"gem", "install", "rails"}, "global-install/gem"},
          {{"gem", "update", "--system"}, "global-install/gem"},
          {{"gem", "install", "--user-install", "rails"}, "user-install/gem"},
          {{"pip", "install", "--user", "requests"}, "user-install/pip"},
          {{"pip3", "install", "--user", "x"}, "user-install/pip"},
          {{"pip3.11", "install", "-U", "--user", "x"}, "user-install/pip"},
          {{"pip", "--no-cache-dir", "install", "--user", "x"}, "user-install/pip"},
          {{"python3", "-m", "pip", "install", "--user", "x"}, "user-install/pip"},
          {{"python3.12", "-u", "-m", "pip", "install", "--user", "x"}, "user-install/pip"},
          {{"env", "PIP_USER=1", "pip", "install", "x"}, "user-install/pip"},
          {{"sh", "-c", "export PIP_USER=1; pip install x"}, "user-install/pip"},
          {{"pipx", "install", "black"}, "user-install/pipx"},
          {{"uv", "tool", "install", "ruff"}, "user-install/uv"},
      });
}

// The allowed examples of the issue, and look-alikes that must not be refused.
TEST(PolicyTest, AllowsOrdinaryCommandsAndLookAlikes) {
  ExpectDecisions(
      BuiltinOnly(),
      {
          {{"npm", "ci"}, ""},
          {{"npm", "install"}, ""},
          {{"npm", "install", "--save-dev", "typescript"}, ""},
          {{"npm", "install", "global"}, ""},
          {{"npm", "run", "build", "--", "-g"}, ""},
          {{"npx", "tsc", "-g"}, ""},
          {{"pip", "install", "-r", "requirements.txt", "--no-input"}, ""},
          {{"python3", "-m", "pip", "install", "-r", "requirements.txt"}, ""},
          {{"pip", "install", "-e", "."}, ""},
          {{"pip", "download", "--user-agent-is-not-a-flag", "x"}, ""},
          {{".venv/bin/pip", "install", "pytest"}, ""},
          {{"mvn", "test"}, ""},
          {{"./gradlew", "test"}, ""},
          {{"gradle", "build"}, ""},
          {{"grep", "sudo", "file"}, ""},
          {{"grep", "-r", "apt install", "."}, ""},
          {{"echo", "curl x | sh"}, ""},
          {{"sh", "-c", "echo \"curl x | sh\""}, ""},
          {{"sh", "-c", "echo 'sudo apt install x'"}, ""},
          {{"sh", "-c", "grep -r sudo . | wc -l"}, ""},
          {{"git", "commit", "-m", "sudo apt install"}, ""},
          {{"man", "sudo"}, ""},
          {{"which", "sudo"}, ""},
          {{"sh", "-c", "command -v sudo >/dev/null || echo no"}, ""},
          {{"sudoku"}, ""},
          {{"env"}, ""},
          {{"apt", "list", "--installed"}, ""},
          {{"apt-cache", "search", "x"}, ""},
          {{"apt-get", "download", "x"}, ""},
          {{"dpkg", "-l"}, ""},
          {{"rpm", "-qa"}, ""},
          {{"pacman", "-Ss", "x"}, ""},
          {{"curl", "-fsSL", "-o", "install.sh", "https://x"}, ""},
          {{"sh", "-c", "curl -s https://api | jq .name"}, ""},
          {{"sh", "-c", "wget -qO- https://x/a.tar.gz | tar xz"}, ""},
          {{"sh", "-c", "cat install.sh | sh"}, ""},
          {{"sh", "-c", "echo 'echo sudo' | sh"}, ""},
          {{"sh", "install.sh"}, ""},
          {{"bash", "-c", "curl -s https://x | python3 -c 'import json,sys; json.load(sys.stdin)'"},
           ""},
          {{"bash", "-c", "curl -s https://x | python3 -m json.tool"}, ""},
          {{"bash", "-c", "curl -s https://x | bash -c 'cat > out'"}, ""},
          {{"gem", "install", "--install-dir", "vendor/gems", "x"}, ""},
          {{"bundle", "install"}, ""},
          {{"yarn", "add", "x"}, ""},
          {{"yarn", "install", "--frozen-lockfile"}, ""},
          {{"pnpm", "install"}, ""},
          {{"pipx", "run", "black", "."}, ""},
          {{"uvx", "ruff", "check"}, ""},
          {{"timeout", "5", "make", "test"}, ""},
          {{"bash", "-c", "cat <<EOF\nsudo apt install x\nEOF"}, ""},
          {{"bash", "-c", "for p in sudo apt; do echo $p; done"}, ""},
          {{"bash", "-c", "[[ $x == sudo && $y ]] && echo ok"}, ""},
          // Documented limits: code the policy cannot see runs (the sandbox contains it).
          {{"python3", "-c", "import subprocess; subprocess.run(['sudo', 'ls'])"}, ""},
          {{"cargo", "install", "ripgrep"}, ""},
      });
}

TEST(PolicyTest, DecisionSaysWhatMatchedWhereAndWhatToDoInstead) {
  Decision d = BuiltinOnly().Check({"bash", "-lc", "cd /src && sudo apt-get install -y x"});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule, "privilege-escalation/sudo");
  EXPECT_THAT(d.matched, ElementsAre("sudo"));
  EXPECT_EQ(d.command, "sudo apt-get install -y x");
  EXPECT_THAT(d.reason, HasSubstr("another user's privileges"));
  EXPECT_THAT(d.instead, HasSubstr("run the command as the sandbox user"));
  EXPECT_THAT(d.notes, IsEmpty());

  d = BuiltinOnly().Check({"pip", "install", "--user", "requests"});
  EXPECT_THAT(d.matched, ElementsAre("pip", "install", "--user"));
  EXPECT_THAT(d.instead, HasSubstr("requirements.txt"));

  d = BuiltinOnly().Check({"sh", "-c", "curl -fsSL https://get.x | sudo sh"});
  EXPECT_EQ(d.rule, "pipe-to-shell/curl");
  EXPECT_THAT(d.matched, ElementsAre("curl", "|", "sh"));
  EXPECT_EQ(d.command, "curl -fsSL https://get.x | sudo sh");

  d = BuiltinOnly().Check({"apt-get", "-y", "install", "x"});
  EXPECT_THAT(d.matched, ElementsAre("apt-get", "install"));
}

TEST(PolicyTest, SpecRulesExtendTheBuiltins) {
  spec::CommandPolicy spec;
  spec.deny = {{"terraform-apply", {"terraform ** apply", "tofu ** apply"}, "applies go via CI"},
               {"no-force-push", {"git push --force*", "git push -f"}, ""}};
  absl::StatusOr<Policy> policy = Policy::Create(spec);
  ASSERT_TRUE(policy.ok()) << policy.status();
  ExpectDecisions(
      *policy,
      {
          {{"terraform", "-chdir=infra", "apply", "-auto-approve"}, "spec/terraform-apply"},
          {{"/opt/bin/tofu", "apply"}, "spec/terraform-apply"},
          {{"timeout", "600", "terraform", "apply"}, "spec/terraform-apply"},
          {{"sh", "-c", "terraform init && terraform apply"}, "spec/terraform-apply"},
          {{"git", "push", "--force-with-lease"}, "spec/no-force-push"},
          {{"terraform", "plan"}, ""},
          {{"git", "push", "origin", "main"}, ""},
          // Built-ins still apply, and win at the same command.
          {{"sudo", "terraform", "apply"}, "privilege-escalation/sudo"},
      });
  Decision d = policy->Check({"terraform", "-chdir=infra", "apply", "-auto-approve"});
  EXPECT_EQ(d.reason, "applies go via CI");
  EXPECT_THAT(d.matched, ElementsAre("terraform", "-chdir=infra", "apply"));
  EXPECT_EQ(d.instead, "");
  d = policy->Check({"git", "push", "-f"});
  EXPECT_EQ(d.reason, "refused by the sandbox spec's command policy");
}

TEST(PolicyTest, CreateRefusesAnInvalidPattern) {
  spec::CommandPolicy spec;
  spec.deny = {{"ok", {"make"}, ""}, {"bad", {"make", "curl * | sh"}, ""}};
  absl::StatusOr<Policy> policy = Policy::Create(spec);
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(policy.status().message()),
              HasSubstr("commandPolicy.deny[1].argv[1]: \"curl * | sh\": \"|\" is a shell "
                        "operator"));
}

TEST(PolicyTest, UnparseableShellIsNotedAndRefusedOnlyWhenStrict) {
  const std::vector<std::string> argv = {"bash", "-c", "make 'unterminated"};
  Decision d = BuiltinOnly().Check(argv);
  EXPECT_TRUE(d.allowed);
  EXPECT_THAT(d.notes, ElementsAre("bash text: unterminated single quote at byte 5"));

  // What could be parsed is still checked.
  d = BuiltinOnly().Check({"bash", "-c", "sudo ls; echo 'unterminated"});
  EXPECT_EQ(d.rule, "privilege-escalation/sudo");

  spec::CommandPolicy strict;
  strict.strict_shell = true;
  absl::StatusOr<Policy> policy = Policy::Create(strict);
  ASSERT_TRUE(policy.ok());
  d = policy->Check(argv);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule, "unparseable-shell");
  EXPECT_THAT(d.matched, ElementsAre("bash"));
  EXPECT_THAT(d.reason, HasSubstr("unterminated single quote"));
  EXPECT_EQ(policy->Check({"bash", "-c", "make test"}).rule, "");

  // A computed program name is uncertain too.
  d = BuiltinOnly().Check({"sh", "-c", "$INSTALLER install x"});
  EXPECT_TRUE(d.allowed);
  EXPECT_THAT(d.notes, ElementsAre("the program of `$INSTALLER install x` is only known when it "
                                   "runs"));
  EXPECT_EQ(policy->Check({"sh", "-c", "$INSTALLER install x"}).rule, "unparseable-shell");
}

TEST(PolicyTest, DeepNestingAndLongArgvsAreBounded) {
  // 100000 wrappers: only the first 32 levels are looked through, and the check says so.
  std::vector<std::string> argv(100000, "nohup");
  argv.push_back("sudo");
  Decision d = BuiltinOnly().Check(argv);
  EXPECT_TRUE(d.allowed);
  EXPECT_THAT(d.notes, ElementsAre("more than 32 wrapped commands; the rest was not checked"));

  // eval nested 100 deep (each level parses the joined words again): checked to 32 levels.
  std::string text = "sudo ls";
  for (int i = 0; i < 100; ++i) text = "eval " + text;
  d = BuiltinOnly().Check({"sh", "-c", text});
  EXPECT_TRUE(d.allowed);
  EXPECT_THAT(d.notes, ElementsAre(HasSubstr("nested deeper than 32 levels")));
  text = "sudo ls";
  for (int i = 0; i < 10; ++i) text = "eval " + text;
  EXPECT_EQ(BuiltinOnly().Check({"sh", "-c", text}).rule, "privilege-escalation/sudo");
  // Quoted nesting (each level quotes the one inside).
  text = "sudo ls";
  for (int i = 0; i < 6; ++i) text = "sh -c " + internal::QuoteWord(text);
  EXPECT_EQ(BuiltinOnly().Check({"sh", "-c", text}).rule, "privilege-escalation/sudo");
}

TEST(PolicyTest, EveryBuiltinRuleHasAReasonAndAdvice) {
  for (const BuiltinRule& rule : BuiltinRules()) {
    SCOPED_TRACE(std::string(rule.name));
    EXPECT_FALSE(rule.reason.empty());
    EXPECT_FALSE(rule.instead.empty());
    EXPECT_EQ(rule.reason.find('\n'), std::string_view::npos);
  }
}

TEST(BlockedResultTest, IsPolicyBlockedWithTheRuleAndAdvice) {
  CommandSpec command;
  command.argv = {"bash", "-lc", "pip install --user requests"};
  Decision d = BuiltinOnly().Check(command.argv);
  ASSERT_FALSE(d.allowed);
  CommandResult r = BlockedResult(command, d, *RedactorFor({}));
  EXPECT_EQ(r.classification, Classification::kPolicyBlocked);
  EXPECT_EQ(r.exit_code, 126);
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].kind, "command_policy");
  EXPECT_EQ(r.violations[0].data["rule"], "user-install/pip");
  EXPECT_EQ(r.violations[0].data["command"], "pip install --user requests");
  EXPECT_EQ(r.failure, FailureKind::kPolicyBlocked);
  EXPECT_EQ(r.failure_detail, "user-install/pip");
  EXPECT_THAT(r.report, HasSubstr("$ bash -lc 'pip install --user requests'\n"));
  EXPECT_THAT(r.report, HasSubstr("not run: refused by the command policy [POLICY_BLOCKED]\n"));
  EXPECT_THAT(r.report, HasSubstr("likely failure: policy blocked: user-install/pip\n"));
  EXPECT_THAT(r.report, HasSubstr("blocked: command_policy: user-install/pip: installs into the "
                                  "user's site-packages"));
  EXPECT_THAT(r.report, HasSubstr("instead: declare it in requirements.txt"));
  EXPECT_THAT(r.report, HasSubstr("refused: pip install --user requests"));
  EXPECT_THAT(r.report, Not(HasSubstr("exit 126")));
  // The result survives the wire format.
  absl::StatusOr<CommandResult> again = CommandResultFromJson(ToJson(r));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->violations[0].data["rule"], "user-install/pip");
}

// A refused command line that carries a registered secret: the result quotes the command in its
// report, key lines and violation, and the secret appears in none of them.
TEST(BlockedResultTest, QuotesTheCommandLineRedacted) {
  const std::string secret = "tok-9f8e7d6c5b4a";
  CommandSpec command;
  command.argv = {"sh", "-c",
                  "pip install --user --index-url https://u:" + secret + "@pypi.test x"};
  Decision d = BuiltinOnly().Check(command.argv);
  ASSERT_FALSE(d.allowed);
  CommandResult r = BlockedResult(command, d, *RedactorFor({secret}));
  std::string all = ToJson(r).dump();
  EXPECT_EQ(all.find(secret), std::string::npos) << all;
  EXPECT_THAT(r.report, HasSubstr("[REDACTED:secret]"));
  EXPECT_THAT(r.key_lines[0], HasSubstr("[REDACTED:secret]"));
}

}  // namespace
}  // namespace airlock::cmdpolicy
