// airlock-zygote-python: the fork-server's Python template. Started by the fork-server (never by
// hand) with its socket on fd 3; embeds libpython, runs the preload (`--preload 'import numpy'`)
// once, says ready, and then serves fork requests (internal/zygote_protocol.h) in the builtin
// module _airlock_zygote's serve(). Each request clones a worker that contains itself in a fresh
// sandbox (engine/fork_worker.h) and returns from serve() into the bootstrap below, which runs
// the submitted code as __main__, without exec: the preloaded modules are shared copy-on-write.
//
// A worker ends like `python3 -c CODE`: exit code 0, SystemExit's code, or 1 on an uncaught
// exception (its traceback on stderr); stdout and stderr are flushed at exit.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "common/status.h"
#include "engine/fork_worker.h"
#include "forkserver/internal/zygote_side.h"

// In the sanitizer build: the zygote's workers run under seccomp, which refuses the ptrace
// LeakSanitizer needs at exit; and a worker's crash is the code's (a segfault in ctypes), which
// must end it by its signal as in the normal build, not as an ASan report.
extern "C" const char* __asan_default_options() {
  return "detect_leaks=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0";
}

namespace airlock::forkserver {
namespace {

using internal::ForkRequest;
using internal::kZygoteFd;

// Runs in the zygote's __main__ after the preload. serve() returns only in a worker (the code and
// its environment) or when the fork-server closed the socket (None).
// A worker ends with os._exit after the exit handlers and a flush, as `python3 -c` would end but
// without the interpreter's finalisation: tearing down every preloaded module (numpy's included)
// takes tens of milliseconds, and the process is about to vanish anyway.
constexpr const char* kBootstrap = R"py(
import _airlock_zygote
_request = _airlock_zygote.serve()
if _request is not None:
    import os, sys, types
    os.environ.clear()
    os.environ.update(e.split("=", 1) for e in _request[1])
    # random reseeds itself in a forked child (os.register_at_fork); numpy's global generator
    # does not, and would hand every worker the numbers the zygote would have drawn next.
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    sys.argv = ["-c"]
    _main = types.ModuleType("__main__")
    sys.modules["__main__"] = _main
    _status = 0
    try:
        exec(compile(_request[0], "<code>", "exec"), _main.__dict__)
    except SystemExit as e:
        if e.code is None:
            _status = 0
        elif isinstance(e.code, int):
            _status = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            _status = 1
    except BaseException as e:
        # The traceback starts at the code: this bootstrap's frame is not the caller's business.
        import traceback
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        _status = 1
    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()  # non-daemon threads end first, as at exit
    import atexit
    atexit._run_exitfuncs()
    for _stream in (sys.stdout, sys.stderr):
        try:
            _stream.flush()
        except Exception:
            _status = _status or 120
    # Output closed, then the exit code on fd 3: the server answers without waiting for the
    # teardown of the worker's namespaces.
    try:
        os.close(1)
        os.close(2)
        os.write(3, _status.to_bytes(4, sys.byteorder, signed=True))
    except OSError:
        pass
    os._exit(_status)
)py";

// Output the zygote buffered would otherwise be written again by every worker.
void FlushStdio() {
  for (const char* name : {"stdout", "stderr"}) {
    PyObject* stream = PySys_GetObject(name);  // borrowed
    if (stream == nullptr || stream == Py_None) continue;
    PyObject* r = PyObject_CallMethod(stream, "flush", nullptr);
    if (r == nullptr) PyErr_Clear();
    Py_XDECREF(r);
  }
}

PyObject* Serve(PyObject*, PyObject*) {
  internal::ForkHooks hooks;
  hooks.before = [] {
    FlushStdio();
    if (!internal::KeepSharedMappingsFromWorkers(false)) {
      std::fputs("airlock-zygote-python: cannot read /proc/self/maps or smaps\n", stderr);
      std::abort();  // a worker must not share what it could write; the server starts anew
    }
    PyOS_BeforeFork();
  };
  hooks.after = PyOS_AfterFork_Parent;
  std::optional<ForkRequest> request = internal::ServeForks(1, hooks);
  if (!request) Py_RETURN_NONE;
  PyOS_AfterFork_Child();
  PyObject* env = PyList_New(0);
  for (const std::string& e : request->env) {
    PyObject* s = PyUnicode_DecodeUTF8(e.data(), static_cast<Py_ssize_t>(e.size()), "replace");
    PyList_Append(env, s);
    Py_DECREF(s);
  }
  PyObject* code = PyUnicode_DecodeUTF8(request->code.data(),
                                        static_cast<Py_ssize_t>(request->code.size()), "strict");
  if (code == nullptr) {
    Py_DECREF(env);
    return nullptr;  // UnicodeDecodeError: the worker exits 1 with it on stderr
  }
  return Py_BuildValue("(NN)", code, env);
}

PyMethodDef kMethods[] = {
    {"serve", Serve, METH_NOARGS, "Serve fork requests; returns (code, env) in a worker."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "_airlock_zygote",
                       nullptr,
                       -1,
                       kMethods,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr};

PyObject* InitModule() { return PyModule_Create(&kModule); }

int Main(int argc, char** argv) {
  std::string preload;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--preload") == 0 && i + 1 < argc) {
      preload = argv[++i];
    } else {
      std::fprintf(stderr, "airlock-zygote-python: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (!internal::HasForkServerSocket()) {
    std::fprintf(stderr,
                 "airlock-zygote-python: fd %d is not the fork-server's socket; this program is "
                 "started by `airlock forkserver`\n",
                 kZygoteFd);
    return 2;
  }
  PyImport_AppendInittab("_airlock_zygote", &InitModule);
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.parse_argv = 0;
  config.write_bytecode = 0;  // the sandbox's root is read-only
  config.buffered_stdio = 1;
  PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, "python3");
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) Py_ExitStatusException(status);

  if (!preload.empty() && PyRun_SimpleString(preload.c_str()) != 0) {
    std::fprintf(stderr, "airlock-zygote-python: the preload failed (traceback above)\n");
    return 3;
  }
  // Everything the preload made moves to the collector's permanent generation: a worker's
  // collections then never walk (and so never write to, and copy) the zygote's objects.
  if (PyRun_SimpleString("import gc\ngc.freeze()") != 0) return 3;
  absl::StatusOr<int> threads = engine::ThreadCount();
  if (!threads.ok() || *threads != 1) {
    std::fprintf(stderr,
                 "airlock-zygote-python: the preload left %d threads running; the zygote must be "
                 "single-threaded to fork (OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1 are set; a "
                 "module that starts threads cannot be preloaded)\n",
                 threads.ok() ? *threads : -1);
    return 4;
  }
  if (!internal::SendReady()) return 0;
  int rc = PyRun_SimpleString(kBootstrap);
  if (Py_FinalizeEx() < 0) rc = -1;
  return rc == 0 ? 0 : 1;
}

}  // namespace
}  // namespace airlock::forkserver

int main(int argc, char** argv) { return airlock::forkserver::Main(argc, argv); }
