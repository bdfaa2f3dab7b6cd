// `airlock run`: one command in a fresh sandbox, no daemon (like nsjail or bwrap).
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include "cli/commands.h"
#include "cli/spec_flags.h"
#include "cmdpolicy/policy.h"
#include "command/command.h"
#include "command/finish.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "common/units.h"
#include "engine/cgroup.h"
#include "engine/native_sandbox.h"
#include "fmt/format.h"
#include "netproxy/egress_proxy.h"
#include "netproxy/events.h"
#include "spec/parse.h"

namespace airlock::cli {

namespace {

// A few lines of what the supervisor saw; the whole report is in --json.
void PrintSyscalls(const SyscallReport& s) {
  constexpr size_t kShown = 5;
  std::string line =
      fmt::format("airlock: syscalls ({}): {} seen, {} denied", s.supervisor, s.seen, s.denied);
  if (!s.counts.empty()) {
    line += " · most:";
    for (size_t i = 0; i < s.counts.size() && i < kShown; ++i) {
      line += fmt::format(" {} {}", s.counts[i].name, s.counts[i].count);
    }
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  for (size_t i = 0; i < s.denied_calls.size() && i < kShown; ++i) {
    const SyscallEvent& e = s.denied_calls[i];
    std::string what = !e.path.empty() ? e.path : !e.address.empty() ? e.address : e.detail;
    std::fprintf(stderr, "airlock:   denied %s %s: %s\n", e.syscall.c_str(), what.c_str(),
                 e.action.c_str());
  }
  for (size_t i = 0; i < s.execs.size() && i < kShown; ++i) {
    std::fprintf(stderr, "airlock:   exec %s\n", s.execs[i].path.c_str());
  }
  if (!s.files.empty()) std::fprintf(stderr, "airlock:   files opened: %zu\n", s.files.size());
  for (size_t i = 0; i < s.endpoints.size() && i < kShown; ++i) {
    std::fprintf(stderr, "airlock:   %s %s\n", s.endpoints[i].syscall.c_str(),
                 s.endpoints[i].address.c_str());
  }
  if (!s.error.empty()) std::fprintf(stderr, "airlock:   %s\n", s.error.c_str());
}

}  // namespace

void PrintHuman(const CommandResult& r) {
  if (!r.stdout_preview.empty())
    std::fwrite(r.stdout_preview.data(), 1, r.stdout_preview.size(), stdout);
  std::fflush(stdout);
  if (!r.stderr_preview.empty())
    std::fwrite(r.stderr_preview.data(), 1, r.stderr_preview.size(), stderr);
  std::string line = fmt::format("airlock: {} · exit {}", ToString(r.classification), r.exit_code);
  if (r.signal != 0) line += fmt::format(" (signal {})", r.signal);
  line += fmt::format(" · {} ms · cpu {} ms · peak {}", r.duration_ms,
                      r.usage.cpu_user_ms + r.usage.cpu_system_ms,
                      FormatBytes(r.usage.memory_peak_bytes));
  if (r.truncated) line += " · output truncated";
  if (!r.degraded.empty()) {
    line += " · DEGRADED:";
    for (const std::string& d : r.degraded) line += " " + d;
  }
  if (!r.error.empty()) line += " · " + r.error;
  if (!r.raw_log.empty()) line += fmt::format(" · log {}", r.raw_log);
  std::fprintf(stderr, "%s\n", line.c_str());
  if (r.classification != Classification::kOk && !r.report.empty()) {
    std::fprintf(stderr, "%s\n", r.report.c_str());
  }
  if (!r.syscalls.supervisor.empty()) PrintSyscalls(r.syscalls);
}

int ExitCodeOf(const CommandResult& r) {
  if (r.classification == Classification::kSandboxError) return kExitSandboxError;
  if (r.signal != 0) return 128 + r.signal;
  return r.exit_code;
}

int PrintResult(const CommandResult& r, bool json) {
  if (json) {
    std::printf("%s\n",
                ToJson(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    PrintHuman(r);
  }
  return ExitCodeOf(r);
}

namespace {

struct RunFlags {
  SpecFlags spec;
  std::string timeout;
  bool json = false;
  std::vector<std::string> allow_degraded;
  std::vector<std::string> secret_env;
  std::vector<std::string> secret_files;
  std::string log_dir;
  std::string tools_dir;
  std::string operator_policy;
  std::vector<std::string> argv;
};

// Ctrl-C, SIGTERM and SIGHUP kill the running command's whole tree; the run then ends as any other
// does, and the sandbox is destroyed (cgroups, mounts, run directory). Left to their default
// action they would end this process and leave all of that behind. A second one ends this
// process at once, as the first would have. Made before this process starts any thread, so that
// every thread keeps the three blocked and only the watcher takes them (airlock-init clears the
// mask for what runs in the sandbox).
class InterruptWatch {
 public:
  InterruptWatch() {
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, s);
    ::pthread_sigmask(SIG_BLOCK, &mask, nullptr);
    signals_.Reset(::signalfd(-1, &mask, SFD_CLOEXEC));
    stop_.Reset(::eventfd(0, EFD_CLOEXEC));
    if (signals_ && stop_) thread_ = std::thread([this] { Loop(); });
  }
  ~InterruptWatch() {
    uint64_t one = 1;
    if (thread_.joinable()) {
      (void)!::write(stop_.get(), &one, sizeof(one));
      thread_.join();
    }
  }
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

  // The first signal taken, or 0.
  int signal() const { return signal_.load(); }
  // The command a signal kills from now on (nullptr: none); killed at once if one came already.
  // Whether the kill ended it is the command's to say (RunningCommand::killed).
  void Watch(engine::RunningCommand* command) {
    std::lock_guard lock(mu_);
    command_ = command;
    if (command_ != nullptr && signal_.load() != 0) command_->Kill();
  }

 private:
  void Loop() {
    for (;;) {
      struct pollfd p[2] = {{signals_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) continue;
      if (p[1].revents & POLLIN) return;
      struct signalfd_siginfo info;
      if (::read(signals_.get(), &info, sizeof(info)) != sizeof(info)) continue;
      const int sig = static_cast<int>(info.ssi_signo);
      int expected = 0;
      if (!signal_.compare_exchange_strong(expected, sig)) {
        // The second: this thread takes it with its default action, which ends the process,
        // once no kill of the first has a tree frozen (left so, its tasks could not be killed).
        engine::StopCgroupFreezesForExit();
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        ::signal(sig, SIG_DFL);
        ::pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
        ::raise(sig);
        continue;
      }
      std::lock_guard lock(mu_);
      if (command_ != nullptr) command_->Kill();
    }
  }

  UniqueFd signals_, stop_;
  std::atomic<int> signal_{0};
  std::mutex mu_;
  engine::RunningCommand* command_ = nullptr;
  std::thread thread_;
};

std::string DefaultLogDir() {
  if (const char* dir = std::getenv("AIRLOCK_STATE_DIR"); dir != nullptr && *dir) {
    return fmt::format("{}/logs", dir);
  }
  if (::geteuid() == 0) return "/var/lib/airlock/logs";
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg != nullptr && *xdg) {
    return fmt::format("{}/airlock/logs", xdg);
  }
  const char* home = std::getenv("HOME");
  return fmt::format("{}/.local/state/airlock/logs", home ? home : "/tmp");
}

// Secret values to redact, read from the caller's environment and files. They never enter the
// sandbox and never appear on a command line.
absl::StatusOr<std::vector<std::string>> LoadSecrets(const RunFlags& f) {
  std::vector<std::string> secrets;
  for (const std::string& name : f.secret_env) {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') {
      return InvalidArgument(fmt::format("--secret-env {}: the variable is not set", name));
    }
    secrets.emplace_back(v);
  }
  for (const std::string& path : f.secret_files) {
    ASSIGN_OR_RETURN(std::string v, ReadFile(path, 1 << 16), fmt::format("--secret-file {}", path));
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
    if (v.empty()) return InvalidArgument(fmt::format("--secret-file {}: empty", path));
    secrets.push_back(std::move(v));
  }
  return secrets;
}

int Run(const RunFlags& f) {
  // One line on stderr (a spec's several problems joined by "; "). With --json a sandbox error
  // (125) is also a CommandResult on stdout, every field present; a usage error (2) prints none:
  // nothing ran, as when the flag parser itself refuses a flag.
  auto fail = [&](int code, const absl::Status& s) {
    std::string line;
    for (char c : Message(s)) line += c == '\n' ? std::string("; ") : std::string(1, c);
    if (f.json && code != kExitUsage) {
      CommandResult r;
      r.classification = Classification::kSandboxError;
      r.exit_code = kExitSandboxError;
      r.error = line;
      std::printf("%s\n",
                  ToJson(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    std::fprintf(stderr, "airlock: %s\n", line.c_str());
    return code;
  };
  absl::StatusOr<spec::SandboxSpec> spec = LoadSpecWithFlags(f.spec);
  if (!spec.ok()) return fail(kExitUsage, spec.status());
  // `airlock run` is the native backend. Another level is a request it cannot serve, as a risk
  // class that needs level 3 or 4 is (the spec loader refuses that one): the caller's to change.
  if (spec->level != spec::Level::kBasic && spec->level != spec::Level::kHardened) {
    return fail(kExitUsage,
                InvalidArgument(fmt::format(
                    "level {} ({}): airlock run provides levels 1 and 2 (the native backend){}",
                    static_cast<int>(spec->level), spec::ToString(spec->level),
                    spec->level == spec::Level::kInterp ? "; level 0 is `airlock interp`" : "")));
  }
  // A host path the caller named that does not exist is the caller's mistake (exit 2), not a
  // sandbox that could not be made; the engine checks what it is when it binds it.
  std::vector<std::pair<std::string, std::string>> host_paths;
  if (!spec->rootfs.empty()) host_paths.emplace_back("rootfs", spec->rootfs);
  if (!spec->filesystem.workspace.empty()) {
    host_paths.emplace_back("filesystem.workspace", spec->filesystem.workspace);
  }
  for (size_t i = 0; i < spec->filesystem.mounts.size(); ++i) {
    host_paths.emplace_back(fmt::format("filesystem.mounts[{}].source", i),
                            spec->filesystem.mounts[i].source);
  }
  for (const auto& [field, path] : host_paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return fail(kExitUsage, ErrnoStatus(errno, fmt::format("{} {}", field, path)));
    }
  }
  CommandSpec command;
  command.argv = f.argv;
  if (!f.timeout.empty()) {
    auto t = ParseDuration(f.timeout);
    if (!t.ok() || t->count() <= 0) {
      return fail(kExitUsage, InvalidArgument(fmt::format(
                                  "--timeout {}: expected a positive duration", f.timeout)));
    }
    if (*t > std::chrono::seconds(spec::kMaxCommandTimeoutSeconds)) {
      return fail(kExitUsage,
                  InvalidArgument(fmt::format("--timeout {}: more than the limit of {} s (7 days)",
                                              f.timeout, spec::kMaxCommandTimeoutSeconds)));
    }
    command.timeout = *t;
  }
  absl::StatusOr<std::vector<std::string>> secrets = LoadSecrets(f);
  if (!secrets.ok()) return fail(kExitUsage, secrets.status());
  absl::StatusOr<Redactor> redactor = RedactorFor(*secrets);
  if (!redactor.ok()) {
    return fail(kExitUsage, Annotate(redactor.status(), "--secret-env/--secret-file"));
  }

  // Supplementary groups would follow the sandbox's processes (setgroups is denied inside).
  if (::geteuid() == 0 && ::setgroups(0, nullptr) != 0) {
    return fail(kExitSandboxError, ErrnoStatus(errno, "setgroups"));
  }
  engine::CgroupOptions cg_options;
  if (const char* base = std::getenv("AIRLOCK_CGROUP_BASE"); base != nullptr && *base) {
    cg_options.base = base;
  }
  auto cgroups = engine::CgroupDriver::Detect(cg_options);
  if (!cgroups.ok()) return fail(kExitSandboxError, Annotate(cgroups.status(), "cgroups"));

  absl::StatusOr<netproxy::OperatorPolicy> op = netproxy::LoadOperatorPolicyFile(f.operator_policy);
  if (!op.ok()) return fail(kExitUsage, Annotate(op.status(), "--operator-policy"));
  // A network profile other than none gets an egress proxy in this process for the run.
  // The command permission policy refuses before any sandbox is made (exit 126).
  absl::StatusOr<cmdpolicy::Policy> policy = cmdpolicy::Policy::Create(spec->command_policy);
  if (!policy.ok()) return fail(kExitUsage, Annotate(policy.status(), "commandPolicy"));
  if (cmdpolicy::Decision d = policy->Check(command.argv); !d.allowed) {
    return PrintResult(cmdpolicy::BlockedResult(command, d, *redactor), f.json);
  }

  // From here on a signal ends the run cleanly (the proxy and the sandbox start threads).
  InterruptWatch interrupts;
  netproxy::BlockedEventLog blocked;
  std::unique_ptr<netproxy::EgressProxy> proxy;
  if (spec->network.profile != spec::NetworkProfile::kNone) {
    netproxy::EgressProxy::Options proxy_options;
    proxy_options.on_event = blocked.Callback();
    auto started = netproxy::EgressProxy::Start(std::move(proxy_options));
    if (!started.ok()) return fail(kExitSandboxError, Annotate(started.status(), "egress proxy"));
    proxy = *std::move(started);
  }

  engine::SandboxOptions options;
  options.spec = *std::move(spec);
  options.egress.proxy = proxy.get();
  options.egress.blocked = &blocked;
  options.egress.operator_policy = *std::move(op);
  options.tools_dir = f.tools_dir;
  options.cgroups = cgroups->get();
  options.allow_degraded = f.allow_degraded;
  options.log_dir = f.log_dir.empty() ? DefaultLogDir() : f.log_dir;
  options.single_command = true;
  auto sandbox = engine::NativeSandbox::Create(std::move(options));
  if (!sandbox.ok()) {
    if (int sig = interrupts.signal(); sig != 0) {
      return fail(128 + sig, absl::CancelledError(
                                 fmt::format("interrupted by SIG{} while the sandbox was made: {}",
                                             sigabbrev_np(sig), Message(sandbox.status()))));
    }
    // A bad request (an unknown protection name...) is the caller's error, not the sandbox's.
    bool usage = sandbox.status().code() == absl::StatusCode::kInvalidArgument;
    return fail(usage ? kExitUsage : kExitSandboxError, sandbox.status());
  }
  engine::ExecOptions exec_options;
  exec_options.secrets = *std::move(secrets);
  absl::StatusOr<CommandResult> result =
      absl::CancelledError("interrupted before the command started");
  bool killed = false;  // a signal's kill ended the command
  if (interrupts.signal() == 0) {
    absl::StatusOr<std::unique_ptr<engine::RunningCommand>> running =
        (*sandbox)->Start(command, exec_options);
    if (running.ok()) {
      interrupts.Watch(running->get());
      result = (*running)->Wait();
      interrupts.Watch(nullptr);
      killed = (*running)->killed();
    } else {
      result = running.status();
    }
  }
  absl::Status destroyed = (*sandbox)->Destroy();
  if (!destroyed.ok()) {
    std::fprintf(stderr, "airlock: warning: %s\n", std::string(Message(destroyed)).c_str());
  }
  // A signal that came after the command had ended changes nothing of its result.
  if (int sig = interrupts.signal(); sig != 0 && (killed || !result.ok())) {
    // The result of what ran, if anything did, then the shell's code for a death by that signal.
    std::string why = fmt::format(
        "interrupted by SIG{}: the command was killed and its sandbox removed", sigabbrev_np(sig));
    if (!result.ok()) {
      return fail(128 + sig, absl::CancelledError(
                                 fmt::format("interrupted by SIG{}: {}; its sandbox was removed",
                                             sigabbrev_np(sig), Message(result.status()))));
    }
    result->error = why;
    PrintResult(*result, f.json);
    return 128 + sig;
  }
  if (!result.ok()) return fail(kExitSandboxError, result.status());
  return PrintResult(*result, f.json);
}

}  // namespace

void AddRunCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* run = app.add_subcommand("run", "Run one command in a fresh sandbox");
  AddSpecFlags(run, &flags->spec);
  run->add_option("--timeout", flags->timeout, "Command timeout, e.g. 30s, 500ms, 2m");
  run->add_flag("--json", flags->json, "Print the CommandResult as JSON");
  run->add_option("--allow-degraded", flags->allow_degraded,
                  "Run even if this protection is missing (landlock, cgroup-memory, cgroup-pids, "
                  "cgroup-cpu, swap-accounting); recorded in the result")
      ->delimiter(',')
      ->allow_extra_args(false);
  run->add_option("--secret-env", flags->secret_env,
                  "Redact the value of this environment variable from all output")
      ->allow_extra_args(false);
  run->add_option("--secret-file", flags->secret_files, "Redact the contents of this file")
      ->allow_extra_args(false);
  run->add_option("--log-dir", flags->log_dir, "Where raw logs are kept");
  run->add_option("--tools-dir", flags->tools_dir, "Directory holding airlock-init");
  run->add_option("--operator-policy", flags->operator_policy,
                  "JSON file of private hosts/CIDRs the operator opens to the egress proxy "
                  "(never the metadata ranges)");
  run->add_option("argv", flags->argv, "The command and its arguments (after --)")->required();
  run->callback([flags, exit_code] { *exit_code = Run(*flags); });
}

}  // namespace airlock::cli
