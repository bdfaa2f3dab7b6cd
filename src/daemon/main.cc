// airlockd: the airlock server. `--role all` (the embedded default: one node with SQLite and a
// local blob directory, no other service) and `--role node` serve the node API
// (docs/daemon.md, docs/api/openapi.yaml); `admin create-key` makes an API key, `admin
// import-image` and `admin remove-image` manage the node's images, which every key sees.
//
//   airlockd --role all --listen 127.0.0.1:7878 --data-dir /var/lib/airlockd
//   airlockd admin create-key --data-dir /var/lib/airlockd [--name NAME]
//   airlockd admin import-image --data-dir /var/lib/airlockd base.oci.tar [--tag base:1]
#include <grp.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/daemon.h"
#include "daemon/images_api.h"
#include "fmt/format.h"
#include "netproxy/policy.h"
#include "store/sqlite_store.h"

namespace airlock::daemon {
namespace {

int Serve(DaemonOptions options) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "airlockd: run as root (sandboxes map a dedicated host uid range)\n");
    return 1;
  }
  // Supplementary groups would follow the sandboxes' processes.
  if (::setgroups(0, nullptr) != 0) {
    std::fprintf(stderr, "airlockd: setgroups: %s\n", std::strerror(errno));
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &mask, nullptr);  // every thread inherits it; sigwait below
  absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(std::move(options));
  if (!d.ok()) {
    std::fprintf(stderr, "airlockd: %s\n", std::string(Message(d.status())).c_str());
    return 1;
  }
  std::fprintf(stderr, "airlockd: listening on port %u\n", (*d)->port());
  int sig = 0;
  ::sigwait(&mask, &sig);
  std::fprintf(stderr, "airlockd: %s: stopping; sandboxes keep running in their shims\n",
               strsignal(sig));
  d->reset();
  return 0;
}

int CreateKey(const std::string& data_dir, const std::string& name) {
  absl::StatusOr<std::unique_ptr<store::Store>> s = store::OpenSqliteStore(data_dir, {});
  if (!s.ok()) {
    std::fprintf(stderr, "airlockd: %s\n", std::string(Message(s.status())).c_str());
    return 1;
  }
  absl::StatusOr<store::NewApiKey> key = (*s)->CreateApiKey(name, "admin");
  if (!key.ok()) {
    std::fprintf(stderr, "airlockd: %s\n", std::string(Message(key.status())).c_str());
    return 1;
  }
  std::printf("%s\n", key->token.c_str());
  std::fprintf(stderr, "airlockd: created API key %s (%s); it is shown only this once\n",
               key->key.id.value().c_str(), name.c_str());
  return 0;
}

// The node's images (image::kNodeImages), changed by its operator on the node itself; a running
// daemon sees the change at once (the store's index is shared through file locks).
struct NodeImageArgs {
  std::string data_dir;
  std::string path;
  std::vector<std::string> tags;
};

int NodeImages(const NodeImageArgs& args, bool import) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "airlockd: %s\n", std::string(Message(s)).c_str());
    return 1;
  };
  if (::geteuid() != 0) {
    return fail(absl::PermissionDeniedError(
        "run as root: image files are owned by the sandboxes' host uid range"));
  }
  absl::StatusOr<std::unique_ptr<store::Store>> s = store::OpenSqliteStore(args.data_dir, {});
  if (!s.ok()) return fail(s.status());
  absl::StatusOr<std::unique_ptr<image::ImageStore>> images =
      OpenNodeImageStore(args.data_dir, s->get());
  if (!images.ok()) return fail(images.status());
  if (!import) {
    absl::Status removed = (*images)->Remove(args.path, image::kNodeImages);
    if (!removed.ok()) return fail(removed);
    std::fprintf(stderr, "airlockd: removed the node's image %s\n", args.path.c_str());
    return 0;
  }
  absl::StatusOr<std::vector<image::ImageInfo>> got =
      (*images)->Import(args.path, {.tags = args.tags, .owner = std::string(image::kNodeImages)});
  if (!got.ok()) return fail(got.status());
  for (const image::ImageInfo& info : *got) {
    std::printf("%s\n", ImageJson(info).dump().c_str());
  }
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"airlockd: the airlock server", "airlockd"};
  app.set_version_flag("--version", "airlockd 0.1.0");
  DaemonOptions o;
  std::string role = "all";
  int64_t default_ttl = 3600, max_ttl = 86400, reap = 10;
  int max_sandboxes = 1000;
  std::string operator_policy;
  app.add_option("--role", role, "Server role: all (embedded default) or node")
      ->check(CLI::IsMember({"all", "node"}));
  app.add_option("--listen", o.listen, "HOST:PORT to serve the API on (default 127.0.0.1:7878)");
  app.add_option("--data-dir", o.manager.data_dir, "Where the store, blobs and sandboxes live");
  app.add_option("--tools-dir", o.manager.tools_dir, "Directory holding airlock-init");
  app.add_option("--default-ttl", default_ttl, "Default sandbox TTL in seconds (3600)");
  app.add_option("--max-ttl", max_ttl, "Longest sandbox lifetime in seconds (86400)");
  app.add_option("--max-sandboxes", max_sandboxes, "Live sandboxes this node accepts (1000)");
  app.add_option("--reap-interval", reap, "Seconds between reaper rounds (10)");
  app.add_option("--workers", o.worker_threads,
                 "Threads for blocking work (64), and as many for long requests");
  app.add_option("--max-long-requests-per-key", o.max_long_requests_per_key,
                 "Long requests (commands, streams, file transfers, sandbox starts) one API key "
                 "may have running at once (default: half of --workers); 429 beyond")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-concurrent-starts", o.manager.max_concurrent_starts,
                 "Sandbox starts running at once; more wait (default: twice the CPUs)");
  app.add_option("--warm-pool", o.manager.warm_pool,
                 "Sandboxes kept started for creates of the pool's template (0: none)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--warm-pool-template", o.manager.warm_pool_template,
                 "The template of the warm pool's sandboxes (default)");
  app.add_option("--max-image-bytes-per-key", o.max_image_bytes_per_key,
                 "Bytes of images (unpacked files and blobs) one API key may hold; 0: no limit "
                 "(64 GiB)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-file-bytes", o.manager.max_file_bytes,
                 "Largest file upload or download in bytes (1 GiB)")
      ->check(CLI::PositiveNumber);
  app.add_option("--git-local-root", o.manager.git_local_roots,
                 "A directory whose repositories workspace.git.repo may name by path "
                 "(repeatable; without one, only https:// URLs)");
  app.add_option("--operator-policy", operator_policy,
                 "JSON file of private hosts/CIDRs this node opens to every sandbox's egress proxy "
                 "and to workspace clones (never the metadata ranges)");

  CLI::App* admin = app.add_subcommand("admin", "Administration");
  CLI::App* create_key = admin->add_subcommand("create-key", "Create an API key and print it");
  std::string key_dir, key_name = "default";
  create_key->add_option("--data-dir", key_dir, "The daemon's data directory")->required();
  create_key->add_option("--name", key_name, "A name for the key");
  NodeImageArgs import_args, remove_args;
  CLI::App* import_image = admin->add_subcommand(
      "import-image", "Import an image archive as one of the node's images (every key sees them)");
  import_image->add_option("--data-dir", import_args.data_dir, "The daemon's data directory")
      ->required();
  import_image->add_option("archive", import_args.path, "OCI layout or docker save tarball")
      ->required();
  import_image->add_option("--tag", import_args.tags, "NAME[:TAG] to give it (repeatable)");
  CLI::App* remove_image =
      admin->add_subcommand("remove-image", "Remove one of the node's images (refused while used)");
  remove_image->add_option("--data-dir", remove_args.data_dir, "The daemon's data directory")
      ->required();
  remove_image->add_option("reference", remove_args.path, "A digest or a node tag")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (*create_key) return CreateKey(key_dir, key_name);
  if (*import_image) return NodeImages(import_args, /*import=*/true);
  if (*remove_image) return NodeImages(remove_args, /*import=*/false);
  if (o.manager.data_dir.empty()) {
    std::fprintf(stderr, "airlockd: --data-dir is required\n");
    return 2;
  }
  if (default_ttl < 1 || max_ttl < default_ttl || reap < 1) {
    std::fprintf(stderr,
                 "airlockd: need 1 <= --default-ttl <= --max-ttl and --reap-interval >= 1\n");
    return 2;
  }
  absl::StatusOr<netproxy::OperatorPolicy> op = netproxy::LoadOperatorPolicyFile(operator_policy);
  if (!op.ok()) {
    std::fprintf(stderr, "airlockd: --operator-policy %s\n",
                 std::string(Message(op.status())).c_str());
    return 2;
  }
  o.manager.operator_policy = *std::move(op);
  o.manager.default_ttl = absl::Seconds(default_ttl);
  o.manager.max_ttl = absl::Seconds(max_ttl);
  o.manager.max_sandboxes = max_sandboxes;
  o.reap_interval = std::chrono::seconds(reap);
  return Serve(std::move(o));
}

}  // namespace
}  // namespace airlock::daemon

int main(int argc, char** argv) { return airlock::daemon::Main(argc, argv); }
