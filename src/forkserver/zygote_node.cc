// airlock-zygote-node.node: the fork-server's Node template, a native addon that the bootstrap
// (zygote_node.js, installed as bin/airlock-zygote-node) loads before anything else. Node is not
// a single-threaded program and V8 does not expect to be forked; what makes the fork sound:
//
// - Threads. Node keeps helper threads for its platform (a delayed-task thread, the V8 worker
//   pool, the inspector's signal thread), started before any script runs; the zygote runs with
//   --single-threaded --v8-pool-size=1, so V8 posts them no work. The addon counts the threads
//   when it loads, and ForkWorker insists on exactly that many, each parked in a wait (it holds no
//   lock a worker could need). A preload that starts more (libuv's pool, worker_threads) is
//   refused. The worker has only the thread that forked; the libuv pool is made afresh in it when
//   its code first needs one (the zygote never started it, as the count proves).
// - Memory. V8 marks every region it maps MADV_DONTFORK, so a forked child would have no heap.
//   Before each fork the zygote marks its private mappings MADV_DOFORK again (shared ones, such
//   as io_uring rings, stay out of the worker).
// - The event loop. The worker gets its own epoll set, wake-up descriptors and signal pipe from
//   uv_loop_fork (ForkWorker has closed the zygote's), and the loop's clock is brought up to date.
// - The end. Node's normal exit disposes its platform, which joins the helper threads: a worker
//   has none, so that would wait forever. A worker ends in Finish instead, from node's exit
//   callbacks (AtExit, run on every way out once the 'exit' listeners ran) or its process-exit
//   handler: output closed, the exit code on fd 3 (the status pipe), _exit.
#include <fcntl.h>
#include <node.h>
#include <node_api.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/status.h"
#include "engine/fork_worker.h"
#include "forkserver/internal/zygote_protocol.h"
#include "init/protocol.h"

namespace airlock::forkserver {
namespace {

using internal::ForkReply;
using internal::ForkRequest;
using internal::kZygoteFd;
using internal::ZygoteFrame;

int node_threads = 0;      // the threads node had when this addon loaded: its own
int worker_exit_code = 0;  // the code the 'exit' event settled on (setExitCode)
int diagnostics_fd = 2;    // the fork-server's stderr, kept for the zygote's own messages

// Throws a JavaScript Error with `message` and returns undefined.
napi_value Throw(napi_env env, const std::string& message) {
  napi_throw_error(env, nullptr, message.c_str());
  return nullptr;
}

napi_value String(napi_env env, std::string_view s) {
  napi_value v = nullptr;
  napi_create_string_utf8(env, s.data(), s.size(), &v);
  return v;
}

napi_value Int(napi_env env, int32_t i) {
  napi_value v = nullptr;
  napi_create_int32(env, i, &v);
  return v;
}

// Undoes V8's MADV_DONTFORK on every private mapping, so the worker gets the heap copy-on-write.
void ShareHeapWithWorkers() {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return;  // the fork then fails in the worker, and is reported as a crash
  char line[512];
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    unsigned long start = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &start, &end, perms) == 3 && perms[3] == 'p') {
      ::madvise(reinterpret_cast<void*>(start), end - start, MADV_DOFORK);
    }
    // The rest of a line longer than the buffer is not a mapping's start.
    while (std::strchr(line, '\n') == nullptr && std::fgets(line, sizeof(line), maps) != nullptr) {
    }
  }
  std::fclose(maps);
}

// The worker's last step: its output ends, the server learns the exit code, the process goes.
[[noreturn]] void Finish(int code) {
  code &= 0xFF;  // as the kernel would report it
  ::close(1);
  ::close(2);
  int32_t status = code;
  (void)!::write(3, &status, sizeof(status));
  ::_exit(code);
}

int Reply(const ForkReply& reply, int pidfd) {
  return init::SendFrame(kZygoteFd, static_cast<uint32_t>(ZygoteFrame::kForked),
                         internal::EncodeForkReply(reply), &pidfd, pidfd >= 0 ? 1 : 0);
}

// In the worker, right after the fork: its own loop and its own way out.
absl::Status EnterNode(napi_env env) {
  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || loop == nullptr) {
    return absl::InternalError("no event loop");
  }
  if (int rc = uv_loop_fork(loop); rc != 0) {
    return absl::InternalError(std::string("uv_loop_fork: ") + uv_strerror(rc));
  }
  uv_update_time(loop);  // the zygote's loop clock stopped when it began to serve
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  node::Environment* node_env = node::GetCurrentEnvironment(isolate->GetCurrentContext());
  if (node_env == nullptr) return absl::InternalError("no node environment");
  node::AtExit(
      node_env, [](void*) { Finish(worker_exit_code); }, nullptr);
  node::SetProcessExitHandler(node_env, [](node::Environment*, int code) { Finish(code); });
  return absl::OkStatus();
}

// The worker's request as JavaScript: {code, env: [...], cwd, pid}.
napi_value WorkerRequest(napi_env env, const ForkRequest& request) {
  napi_value out = nullptr, list = nullptr;
  napi_create_object(env, &out);
  napi_create_array_with_length(env, request.env.size(), &list);
  for (size_t i = 0; i < request.env.size(); ++i) {
    napi_set_element(env, list, static_cast<uint32_t>(i), String(env, request.env[i]));
  }
  char cwd[PATH_MAX];
  napi_set_named_property(env, out, "code", String(env, request.code));
  napi_set_named_property(env, out, "env", list);
  napi_set_named_property(env, out, "cwd", String(env, ::getcwd(cwd, sizeof(cwd)) ? cwd : "/"));
  napi_set_named_property(env, out, "pid", Int(env, ::getpid()));
  return out;
}

// ready(): tells the fork-server the preload ran; throws if the preload left threads behind.
napi_value Ready(napi_env env, napi_callback_info) {
  absl::StatusOr<int> threads = engine::ThreadCount();
  if (!threads.ok() || *threads != node_threads) {
    return Throw(env, "the preload left " + std::to_string(threads.ok() ? *threads : -1) +
                          " threads running where node keeps " + std::to_string(node_threads) +
                          "; the zygote must not fork beside threads of its own (a module that "
                          "starts a thread pool or worker threads cannot be preloaded; an "
                          "asynchronous fs, dns, zlib or crypto call starts libuv's pool)");
  }
  init::Writer ready;
  ready.U32(internal::kZygoteVersion);
  if (init::SendFrame(kZygoteFd, static_cast<uint32_t>(ZygoteFrame::kReady), ready.data()) != 0) {
    return Throw(env, "the fork-server's socket is closed");
  }
  return nullptr;
}

// serve(): forks a worker per request. Returns undefined in the zygote when the fork-server
// closed the socket, or the request in a worker.
napi_value Serve(napi_env env, napi_callback_info) {
  for (;;) {
    uint32_t type = 0;
    std::string payload;
    int fds[init::kMaxFds];
    int nfds = 0;
    if (init::ReceiveFrame(kZygoteFd, &type, &payload, fds, &nfds) != 0) return nullptr;
    ForkRequest request;
    ForkReply reply;
    if (type != static_cast<uint32_t>(ZygoteFrame::kFork) ||
        !internal::DecodeForkRequest(payload, &request)) {
      for (int i = 0; i < nfds; ++i) ::close(fds[i]);
      reply.err = EINVAL;
      reply.message = "malformed fork request";
      if (Reply(reply, -1) != 0) return nullptr;
      continue;
    }
    ShareHeapWithWorkers();
    absl::StatusOr<engine::ForkedWorker> worker =
        engine::ForkWorker(request.plan, fds, nfds, node_threads);
    if (worker.ok() && worker->pid == 0) {
      if (absl::Status st = EnterNode(env); !st.ok()) {
        std::fprintf(stderr, "airlock-zygote-node: worker: %s\n",
                     std::string(st.message()).c_str());
        Finish(125);
      }
      return WorkerRequest(env, request);
    }
    for (int i = 0; i < nfds; ++i) ::close(fds[i]);
    int pidfd = -1;
    if (!worker.ok()) {
      reply.err = EINVAL;
      reply.message = std::string(Message(worker.status()));
    } else {
      reply.pid = worker->pid;
      pidfd = worker->pidfd.get();
    }
    if (Reply(reply, pidfd) != 0) return nullptr;
  }
}

// setExitCode(code): the code a worker ends with when node exits through its exit callbacks.
napi_value SetExitCode(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value arg = nullptr;
  napi_get_cb_info(env, info, &argc, &arg, nullptr, nullptr);
  int32_t code = 0;
  if (argc < 1 || napi_get_value_int32(env, arg, &code) != napi_ok) {
    return Throw(env, "setExitCode: an integer is needed");
  }
  worker_exit_code = code;
  return nullptr;
}

// diagnose(text): writes to the fork-server's stderr (the zygote's own stderr is /dev/null).
napi_value Diagnose(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value arg = nullptr;
  napi_get_cb_info(env, info, &argc, &arg, nullptr, nullptr);
  size_t n = 0;
  if (argc < 1 || napi_get_value_string_utf8(env, arg, nullptr, 0, &n) != napi_ok) {
    return Throw(env, "diagnose: a string is needed");
  }
  std::string text(n, '\0');
  napi_get_value_string_utf8(env, arg, text.data(), n + 1, &n);
  text = "airlock-zygote-node: " + text + "\n";
  (void)!::write(diagnostics_fd, text.data(), text.size());
  return nullptr;
}

napi_value Init(napi_env env, napi_value exports) {
  struct stat st;
  if (::fstat(kZygoteFd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return Throw(env,
                 "fd 3 is not the fork-server's socket; this program is started by "
                 "`airlock forkserver --template node`");
  }
  // stdout (the fork-server gives /dev/null) and stderr become the same kind of file, so that the
  // zygote can make and warm up node's streams for them once: a worker's are then ready, and
  // write synchronously to the pipes the worker gets at those numbers.
  int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  int saved = ::fcntl(2, F_DUPFD_CLOEXEC, kZygoteFd + 1);
  if (null_fd < 0 || saved < 0 || ::dup2(null_fd, 2) < 0) {
    return Throw(env, std::string("redirect stderr: ") + std::strerror(errno));
  }
  ::close(null_fd);
  diagnostics_fd = saved;
  absl::StatusOr<int> threads = engine::ThreadCount();
  if (!threads.ok()) return Throw(env, std::string(threads.status().message()));
  node_threads = *threads;
  struct Function {
    const char* name;
    napi_callback fn;
  };
  for (Function f : {Function{"ready", Ready}, Function{"serve", Serve},
                     Function{"setExitCode", SetExitCode}, Function{"diagnose", Diagnose}}) {
    napi_value v = nullptr;
    napi_create_function(env, f.name, NAPI_AUTO_LENGTH, f.fn, nullptr, &v);
    napi_set_named_property(env, exports, f.name, v);
  }
  return exports;
}

}  // namespace
}  // namespace airlock::forkserver

NAPI_MODULE(NODE_GYP_MODULE_NAME, airlock::forkserver::Init)
