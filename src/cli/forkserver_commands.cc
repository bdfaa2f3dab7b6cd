// `airlock forkserver`: serve code from a zygote (src/forkserver, docs/forkserver.md), and
// `airlock forkserver run`: send it one snippet.
#include <grp.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/spec_flags.h"
#include "common/status.h"
#include "common/units.h"
#include "engine/cgroup.h"
#include "fmt/format.h"
#include "forkserver/client.h"
#include "forkserver/server.h"

namespace airlock::cli {
namespace {

struct ServeFlags {
  SpecFlags spec;
  std::string template_name = "python";
  std::string preload;
  std::string socket;
  std::string socket_mode = "0600";
  std::string socket_group;
  std::vector<std::string> allow_degraded;
  std::string tools_dir;
  int max_concurrent = 4;
};

struct RunFlags {
  std::string socket;
  std::string template_name = "python";
  std::string timeout;
  bool json = false;
  std::vector<std::string> code;
};

int Fail(int code, const absl::Status& s) {
  std::fprintf(stderr, "airlock: %s\n", std::string(Message(s)).c_str());
  return code;
}

volatile sig_atomic_t g_stop = 0;

int Serve(const ServeFlags& f) {
  absl::StatusOr<spec::SandboxSpec> spec = LoadSpecWithFlags(f.spec);
  if (!spec.ok()) return Fail(kExitUsage, spec.status());
  if (f.socket.empty()) return Fail(kExitUsage, InvalidArgument("--socket is required"));
  forkserver::ForkServerOptions options;
  char* end = nullptr;
  long mode = std::strtol(f.socket_mode.c_str(), &end, 8);
  if (end == f.socket_mode.c_str() || *end != '\0' || mode < 0 || mode > 0777) {
    return Fail(kExitUsage,
                InvalidArgument(fmt::format("--socket-mode {}: expected an octal mode like 0660",
                                            f.socket_mode)));
  }
  options.socket_mode = static_cast<mode_t>(mode);
  if (!f.socket_group.empty()) {
    struct group* g = ::getgrnam(f.socket_group.c_str());
    if (g == nullptr) {
      return Fail(kExitUsage,
                  InvalidArgument(fmt::format("--socket-group {}: no such group", f.socket_group)));
    }
    options.socket_group = g->gr_gid;
  }
  if (::geteuid() == 0 && ::setgroups(0, nullptr) != 0) {
    return Fail(kExitSandboxError, ErrnoStatus(errno, "setgroups"));
  }
  engine::CgroupOptions cg_options;
  if (const char* base = std::getenv("AIRLOCK_CGROUP_BASE"); base != nullptr && *base) {
    cg_options.base = base;
  }
  auto cgroups = engine::CgroupDriver::Detect(cg_options);
  if (!cgroups.ok()) return Fail(kExitSandboxError, Annotate(cgroups.status(), "cgroups"));
  options.template_name = f.template_name;
  options.preload = f.preload;
  options.socket_path = f.socket;
  options.spec = *std::move(spec);
  options.cgroups = cgroups->get();
  options.tools_dir = f.tools_dir;
  options.allow_degraded = f.allow_degraded;
  options.max_concurrent = f.max_concurrent;

  // SIGINT and SIGTERM stop the server cleanly (zygote killed, socket removed).
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  auto server = forkserver::ForkServer::Start(std::move(options));
  if (!server.ok()) {
    bool usage = server.status().code() == absl::StatusCode::kInvalidArgument;
    return Fail(usage ? kExitUsage : kExitSandboxError, server.status());
  }
  std::fprintf(stderr, "airlock: fork-server (%s) listening on %s\n", f.template_name.c_str(),
               f.socket.c_str());
  int sig = 0;
  ::sigwait(&mask, &sig);
  (*server)->Stop();
  return 0;
}

int RunCode(const RunFlags& f) {
  forkserver::RunRequest request;
  request.template_name = f.template_name;
  for (size_t i = 0; i < f.code.size(); ++i) {
    if (i > 0) request.code += ' ';
    request.code += f.code[i];
  }
  if (!f.timeout.empty()) {
    auto t = ParseDuration(f.timeout);
    if (!t.ok() || t->count() <= 0) {
      return Fail(kExitUsage, InvalidArgument(fmt::format(
                                  "--timeout {}: expected a positive duration", f.timeout)));
    }
    request.timeout = *t;
  }
  absl::StatusOr<CommandResult> result = forkserver::Run(f.socket, request);
  if (!result.ok()) {
    bool usage = result.status().code() == absl::StatusCode::kInvalidArgument;
    return Fail(usage ? kExitUsage : kExitSandboxError, result.status());
  }
  return PrintResult(*result, f.json);
}

}  // namespace

void AddForkServerCommands(CLI::App& app, int* exit_code) {
  auto serve = std::make_shared<ServeFlags>();
  auto run = std::make_shared<RunFlags>();
  CLI::App* fs = app.add_subcommand(
      "forkserver", "Serve code from a preloaded zygote: every request runs in a fresh sandbox");
  fs->require_subcommand(0, 1);
  AddSpecFlags(fs, &serve->spec);
  fs->add_option("--template", serve->template_name, "The zygote's template: python or node");
  fs->add_option(
      "--preload", serve->preload,
      "Code the zygote runs once: 'import numpy' (python), \"require('lodash')\" (node)");
  fs->add_option("--socket", serve->socket, "Unix socket to serve on");
  fs->add_option("--socket-mode", serve->socket_mode, "The socket's mode (octal, default 0600)");
  fs->add_option("--socket-group", serve->socket_group,
                 "The socket's group (sidecar: the agent's group, with --socket-mode 0660)");
  fs->add_option("--allow-degraded", serve->allow_degraded,
                 "Run workers even if this protection is missing (as `airlock run`)")
      ->delimiter(',')
      ->allow_extra_args(false);
  fs->add_option("--max-concurrent", serve->max_concurrent, "Requests served at once (default 4)")
      ->check(CLI::Range(1, 256));
  fs->add_option("--tools-dir", serve->tools_dir,
                 "Where airlock-init is (default: as airlock run)");

  CLI::App* r = fs->add_subcommand("run", "Run code on a fork-server and print its output");
  r->add_option("--socket", run->socket, "The fork-server's socket")->required();
  r->add_option("--template", run->template_name, "The template: python or node");
  r->add_option("--timeout", run->timeout, "Timeout, e.g. 10s (default: the server's spec)");
  r->add_flag("--json", run->json, "Print the CommandResult as JSON");
  r->add_option("code", run->code, "The code (after --)")->required();
  r->callback([run, exit_code] { *exit_code = RunCode(*run); });
  fs->callback([fs, r, serve, exit_code] {
    if (r->parsed()) return;
    *exit_code = Serve(*serve);
  });
}

}  // namespace airlock::cli
