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
//   Before each fork the zygote marks its private mappings MADV_DOFORK again, and its shared ones
//   MADV_DONTFORK: a shared mapping inherited would be memory the worker and the zygote (or two
//   workers) both write, such as an io_uring ring of a helper thread's loop.
// - The event loop. The worker gets its own epoll set, wake-up descriptors and signal pipe from
//   uv_loop_fork (ForkWorker has closed the zygote's), and the loop's clock is brought up to date.
//   libuv also keeps one pipe for the whole process, the lock of its signal handling (a token byte
//   in a pipe), which it renews in a forked child from a pthread_atfork handler; clone3 runs no
//   such handler, so the worker makes a new pipe at the same descriptor numbers itself (without it
//   the first child process or signal handler a worker sets up aborts it). The zygote's other
//   descriptors belong to the helper threads' own loops (the platform's delayed-task thread wakes
//   through an eventfd); the worker puts /dev/null at those numbers, so that a task V8 posts for
//   a helper thread is dropped instead of making libuv abort on a closed descriptor. Such tasks
//   (background work V8 schedules for later) never run in a worker.
// - The end. Node's normal exit disposes its platform, which joins the helper threads: a worker
//   has none, so that would wait forever. Every way out of a worker goes through node's
//   process-exit handler (process.exit, which the loop watcher also calls at the natural end, and
//   a fatal exception once printed), with node's final exit code: there the worker ends in Finish
//   (output closed, the exit code on fd 3, the status pipe; _exit).
#include <fcntl.h>
#include <node.h>
#include <node_api.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/status.h"
#include "engine/fork_worker.h"
#include "forkserver/internal/zygote_side.h"

namespace airlock::forkserver {
namespace {

using internal::ForkRequest;
using internal::kZygoteFd;

int node_threads = 0;           // the threads node had when this addon loaded: its own
int diagnostics_fd = 2;         // the fork-server's stderr, kept for the zygote's own messages
int signal_lock[2] = {-1, -1};  // libuv's signal lock pipe: read end, write end
std::vector<int> zygote_fds;    // the zygote's descriptors above 3 when it began to serve

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

// The worker's last step: its output ends, the server learns the exit code, the process goes.
[[noreturn]] void Finish(int code) {
  code &= 0xFF;  // as the kernel would report it
  ::close(1);
  ::close(2);
  int32_t status = code;
  (void)!::write(3, &status, sizeof(status));
  ::_exit(code);
}

// Finds libuv's signal lock among the zygote's descriptors: the only pipe whose read end holds
// one byte (the token; it is free, no other thread runs) and whose write end is open too.
absl::Status FindSignalLock() {
  struct End {
    int fd;
    ino_t inode;
  };
  std::vector<End> readers, writers;
  for (int fd : OpenFds()) {
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) continue;
    int flags = ::fcntl(fd, F_GETFL);
    if ((flags & O_ACCMODE) == O_RDONLY) readers.push_back({fd, st.st_ino});
    if ((flags & O_ACCMODE) == O_WRONLY) writers.push_back({fd, st.st_ino});
  }
  int found = 0;
  for (const End& r : readers) {
    int pending = 0;
    if (::ioctl(r.fd, FIONREAD, &pending) != 0 || pending != 1) continue;
    for (const End& w : writers) {
      if (w.inode != r.inode) continue;
      signal_lock[0] = r.fd;
      signal_lock[1] = w.fd;
      ++found;
    }
  }
  if (found != 1) {
    return absl::FailedPreconditionError(
        "libuv's signal lock pipe is not recognisable among node's descriptors (" +
        std::to_string(found) + " candidates); this node cannot be forked safely");
  }
  return absl::OkStatus();
}

// In the worker: libuv's signal lock, a new pipe at the old numbers, with its token. The new pipe
// is first moved above both old numbers, so that neither end lands on the other's target.
absl::Status RenewSignalLock() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe for libuv's signal lock");
  int high[2];
  int above = std::max(signal_lock[0], signal_lock[1]) + 1;
  for (int i = 0; i < 2; ++i) {
    high[i] = ::fcntl(p[i], F_DUPFD_CLOEXEC, above);
    ::close(p[i]);
  }
  for (int i = 0; i < 2; ++i) {
    if (high[i] < 0 || ::dup3(high[i], signal_lock[i], O_CLOEXEC) < 0) {
      return ErrnoStatus(errno, "move libuv's signal lock pipe");
    }
    ::close(high[i]);
  }
  char token = 42;
  if (::write(signal_lock[1], &token, 1) != 1) {
    return ErrnoStatus(errno, "write libuv's signal lock token");
  }
  return absl::OkStatus();
}

// The zygote's descriptors above its socket, listed once it serves: it runs no code between
// forks, so they do not change (a request's own descriptors come and go, and are closed in the
// worker anyway).
void ListZygoteFds() {
  zygote_fds = OpenFds();
  std::erase_if(zygote_fds, [](int fd) { return fd <= kZygoteFd; });
}

// In the worker: /dev/null at each number the zygote had open (ForkWorker closed them all), but
// libuv's signal lock, which is renewed.
absl::Status PlaceInertFds() {
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return ErrnoStatus(errno, "open /dev/null");
  for (int fd : zygote_fds) {
    if (fd == null_fd || fd == signal_lock[0] || fd == signal_lock[1]) continue;
    if (::dup3(null_fd, fd, O_CLOEXEC) < 0) {
      return ErrnoStatus(errno, "place /dev/null at descriptor " + std::to_string(fd));
    }
  }
  if (std::find(zygote_fds.begin(), zygote_fds.end(), null_fd) == zygote_fds.end()) {
    ::close(null_fd);
  }
  return absl::OkStatus();
}

// In the worker, right after the fork: its own loop and its own way out.
absl::Status EnterNode(napi_env env) {
  // First: the descriptor numbers of the lock are free only until the loop makes new ones.
  if (absl::Status st = RenewSignalLock(); !st.ok()) return st;
  if (absl::Status st = PlaceInertFds(); !st.ok()) return st;
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
  node::SetProcessExitHandler(node_env, [](node::Environment*, int code) { Finish(code); });
  return absl::OkStatus();
}

// The worker's loop watcher (see the top of this file).
struct LoopWatch {
  napi_env env = nullptr;
  napi_ref before_exit = nullptr;  // () => process.emit('beforeExit', code)
  napi_ref exit = nullptr;         // () => process.exit()
  napi_async_context async = nullptr;
  uv_prepare_t prepare;
};
LoopWatch* loop_watch = nullptr;

// libuv's queue of pending callbacks is empty: its head points to itself (the queue's type changed
// name across libuv versions; its layout, two pointers, did not).
bool NoPendingCallbacks(uv_loop_t* loop) {
  const void* head = &loop->pending_queue;
  return *static_cast<void* const*>(head) == head;
}

// Nothing keeps the loop alive but the watcher itself: no other active handle or request, no
// handle closing, no callback pending.
bool OnlyWatcherLeft(uv_loop_t* loop) {
  return loop->active_handles == 1 && loop->active_reqs.count == 0 &&
         loop->closing_handles == nullptr && NoPendingCallbacks(loop);
}

// Calls the JavaScript function held by `ref` as node calls into JavaScript from the loop (ticks
// and microtasks run after it). An exception it throws is uncaught, as it would be in node: it is
// printed and the worker ends with 1 (or an 'uncaughtException' listener takes it).
void CallBack(LoopWatch* w, napi_ref ref) {
  napi_handle_scope scope = nullptr;
  napi_open_handle_scope(w->env, &scope);
  napi_value fn = nullptr, global = nullptr, result = nullptr;
  napi_get_reference_value(w->env, ref, &fn);
  napi_get_global(w->env, &global);
  if (napi_make_callback(w->env, w->async, global, fn, 0, nullptr, &result) != napi_ok) {
    bool pending = false;
    napi_value error = nullptr;
    if (napi_is_exception_pending(w->env, &pending) == napi_ok && pending &&
        napi_get_and_clear_last_exception(w->env, &error) == napi_ok) {
      napi_fatal_exception(w->env, error);
    }
  }
  napi_close_handle_scope(w->env, scope);
}

void OnPrepare(uv_prepare_t* handle) {
  auto* w = static_cast<LoopWatch*>(handle->data);
  if (!OnlyWatcherLeft(handle->loop)) return;
  CallBack(w, w->before_exit);
  if (OnlyWatcherLeft(handle->loop)) CallBack(w, w->exit);  // does not return
}

// watchLoop(beforeExit, exit): starts the watcher in a worker.
napi_value WatchLoop(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2] = {nullptr, nullptr};
  napi_get_cb_info(env, info, &argc, args, nullptr, nullptr);
  uv_loop_t* loop = nullptr;
  if (argc != 2 || loop_watch != nullptr || napi_get_uv_event_loop(env, &loop) != napi_ok) {
    return Throw(env, "watchLoop: two functions, once, in a worker");
  }
  auto* w = new LoopWatch();  // lives as long as the worker
  w->env = env;
  napi_create_reference(env, args[0], 1, &w->before_exit);
  napi_create_reference(env, args[1], 1, &w->exit);
  napi_value name = String(env, "airlock-worker-loop");
  napi_async_init(env, nullptr, name, &w->async);
  uv_prepare_init(loop, &w->prepare);
  w->prepare.data = w;
  uv_prepare_start(&w->prepare, OnPrepare);
  loop_watch = w;
  return nullptr;
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
  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || uv_loop_alive(loop)) {
    return Throw(env,
                 "the preload left work pending on the event loop (a timer, a server, an open "
                 "handle or request): every worker would inherit it; the preload must finish "
                 "synchronously");
  }
  if (!internal::SendReady()) return Throw(env, "the fork-server's socket is closed");
  return nullptr;
}

// serve(): forks a worker per request. Returns undefined in the zygote when the fork-server
// closed the socket, or the request in a worker.
napi_value Serve(napi_env env, napi_callback_info) {
  ListZygoteFds();
  std::optional<ForkRequest> request =
      internal::ServeForks(node_threads, {.before = [] {
                             // V8 marks its heap DONTFORK: undone.
                             if (!internal::KeepSharedMappingsFromWorkers(true)) {
                               std::abort();  // a worker must not share what it could write
                             }
                           }});
  if (!request) return nullptr;
  if (absl::Status st = EnterNode(env); !st.ok()) {
    std::fprintf(stderr, "airlock-zygote-node: worker: %s\n", std::string(st.message()).c_str());
    Finish(125);
  }
  return WorkerRequest(env, *request);
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
  if (!internal::HasForkServerSocket()) {
    return Throw(env,
                 "fd 3 is not the fork-server's socket; this program is started by "
                 "`airlock forkserver --template node`");
  }
  // This addon uses node's C++ API and libuv's loop layout: the node running it must be the one
  // whose headers it was built with.
  if (uv_version() != UV_VERSION_HEX) {
    return Throw(env, std::string("built for the libuv of node ") + NODE_VERSION_STRING +
                          ", running on libuv " + uv_version_string() +
                          "; rebuild airlock against this node");
  }
  absl::StatusOr<int> threads = engine::ThreadCount();
  if (!threads.ok()) return Throw(env, std::string(threads.status().message()));
  node_threads = *threads;
  if (absl::Status lock = FindSignalLock(); !lock.ok()) {
    return Throw(env, std::string(lock.message()));
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
  struct Function {
    const char* name;
    napi_callback fn;
  };
  for (Function f : {Function{"ready", Ready}, Function{"serve", Serve},
                     Function{"diagnose", Diagnose}, Function{"watchLoop", WatchLoop}}) {
    napi_value v = nullptr;
    napi_create_function(env, f.name, NAPI_AUTO_LENGTH, f.fn, nullptr, &v);
    napi_set_named_property(env, exports, f.name, v);
  }
  napi_set_named_property(env, exports, "builtFor", String(env, "v" NODE_VERSION_STRING));
  return exports;
}

}  // namespace
}  // namespace airlock::forkserver

NAPI_MODULE(NODE_GYP_MODULE_NAME, airlock::forkserver::Init)
