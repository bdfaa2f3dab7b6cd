// The fork-server with real processes (root): a Python zygote, workers in fresh sandboxes, and
// what a worker can and cannot do. After every test no worker cgroup and no run directory is
// left (TearDown).
#include "forkserver/server.h"

#include <dirent.h>
#include <glob.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "common/files.h"
#include "common/sha256.h"
#include "common/unique_fd.h"
#include "engine/testing/sandbox_fixture.h"
#include "fmt/format.h"
#include "forkserver/client.h"
#include "forkserver/protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "init/protocol.h"

namespace airlock::forkserver {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ForkServerTest : public engine::testing::SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // Worker cgroups go under a base of this test process's own (ctest runs tests in parallel),
    // so that TearDown can see every one of its workers' cgroups is gone.
    base_ = "airlock-test/forkserver-" + std::to_string(::getpid());
    engine::CgroupOptions options;
    options.base = base_;
    auto driver = engine::CgroupDriver::Detect(options);
    ASSERT_TRUE(driver.ok()) << driver.status();
    cgroups_ = *std::move(driver);
    char tmpl[] = "/tmp/airlock-forkserver-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }

  void TearDown() override {
    if (dir_.empty()) return;
    if (server_) server_->Stop();
    server_.reset();
    auto left = cgroups_->List();
    ASSERT_TRUE(left.ok()) << left.status();
    EXPECT_THAT(*left, ::testing::IsEmpty()) << "worker cgroups left behind";
    auto runs = ListDir(dir_ + "/run");
    EXPECT_TRUE(runs.empty()) << "run directories left behind: " << runs.size();
    ASSERT_TRUE(RemoveTree(dir_).ok());
    // The base cgroup of this suite, now empty, in every hierarchy (v1) or the one (v2).
    glob_t g = {};
    if (glob(("/sys/fs/cgroup/*/" + base_).c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) rmdir(g.gl_pathv[i]);
    }
    globfree(&g);
    rmdir(("/sys/fs/cgroup/" + base_).c_str());
  }

  static std::vector<std::string> ListDir(const std::string& path) {
    std::vector<std::string> names;
    if (DIR* d = opendir(path.c_str())) {
      while (struct dirent* e = readdir(d)) {
        if (e->d_name[0] != '.') names.push_back(e->d_name);
      }
      closedir(d);
    }
    return names;
  }

  ForkServerOptions Options(spec::SandboxSpec spec = TestSpec()) {
    ForkServerOptions o;
    o.template_name = "python";
    o.preload = "import json, ctypes";
    o.socket_path = dir_ + "/fs.sock";
    o.spec = std::move(spec);
    o.cgroups = cgroups_.get();
    o.tools_dir = AIRLOCK_TEST_TOOLS_DIR;
    o.zygote_path = AIRLOCK_TEST_ZYGOTE;
    o.run_dir_base = dir_ + "/run";
    return o;
  }

  void StartServer(ForkServerOptions options) {
    auto s = ForkServer::Start(std::move(options));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  void StartServer() { StartServer(Options()); }

  // Runs `code` on the server's socket with the template named.
  CommandResult RunCode(const std::string& template_name, const std::string& code,
                        std::optional<std::chrono::milliseconds> timeout) {
    auto r = forkserver::Run(dir_ + "/fs.sock",
                             {.template_name = template_name, .code = code, .timeout = timeout});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : CommandResult{};
  }
  CommandResult RunPython(const std::string& code,
                          std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
    return RunCode("python", code, timeout);
  }

  std::string dir_;
  std::string base_;  // this process's cgroup base for worker sandboxes
  std::unique_ptr<ForkServer> server_;
};

TEST_F(ForkServerTest, ResultHasEveryField) {
  StartServer();
  CommandResult r = RunPython("print('hello')\nimport sys; print('warn', file=sys.stderr)");
  EXPECT_EQ(r.classification, Classification::kOk);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.stdout_preview, "hello\n");
  EXPECT_EQ(r.stderr_preview, "warn\n");
  EXPECT_EQ(r.stdout_bytes, 6);
  EXPECT_EQ(r.stdout_sha256, Sha256Hex("hello\n"));
  EXPECT_FALSE(r.command_id.empty());
  EXPECT_GT(r.duration_ms, 0);
  EXPECT_GT(r.usage.memory_peak_bytes, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.raw_log.empty()) << "names a log that went with the worker's run directory";
}

TEST_F(ForkServerTest, ExitCodesAreThoseOfPython) {
  StartServer();
  CommandResult exit7 = RunPython("import sys\nprint('bye')\nsys.exit(7)");
  EXPECT_EQ(exit7.exit_code, 7);
  EXPECT_EQ(exit7.stdout_preview, "bye\n");  // flushed at exit
  EXPECT_EQ(exit7.classification, Classification::kExitNonzero);
  CommandResult raised = RunPython("raise ValueError('boom')");
  EXPECT_EQ(raised.exit_code, 1);
  EXPECT_THAT(raised.stderr_preview, HasSubstr("ValueError: boom"));
  EXPECT_THAT(raised.stderr_preview, HasSubstr("File \"<code>\", line 1"));
  EXPECT_THAT(raised.stderr_preview, Not(HasSubstr("<string>")));  // no bootstrap frame
  CommandResult message = RunPython("import sys\nsys.exit('bad input')");
  EXPECT_EQ(message.exit_code, 1);
  EXPECT_EQ(message.stderr_preview, "bad input\n");
  // Exit handlers run and threads finish before the worker ends, as in `python3 -c`.
  CommandResult handlers = RunPython(
      "import atexit, threading, time\n"
      "atexit.register(lambda: print('atexit'))\n"
      "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()");
  EXPECT_EQ(handlers.stdout_preview, "thread\natexit\n");
  EXPECT_EQ(handlers.exit_code, 0);
}

TEST_F(ForkServerTest, RedactsSecretsInOutput) {
  StartServer();
  CommandResult r = RunPython("print('key=' + 'AKIA' + 'IOSFODNN7EXAMPLE')");
  EXPECT_THAT(r.stdout_preview, Not(HasSubstr("AKIAIOSFODNN7EXAMPLE")));
}

TEST_F(ForkServerTest, WorkersShareNoWritableState) {
  StartServer();
  // The first worker changes a preloaded module, its __main__ and files in every writable area.
  CommandResult first = RunPython(
      "import json\njson.marker = 1\n"
      "for p in ['/sandbox/tmp/x', '/sandbox/workspace/x', '/sandbox/home/x', '/tmp/y']:\n"
      "    open(p, 'w').write('1')\n"
      "print('written')");
  ASSERT_EQ(first.stdout_preview, "written\n") << first.stderr_preview;
  CommandResult second = RunPython(
      "import json, os\n"
      "print(hasattr(json, 'marker'), 'first' in globals(),\n"
      "      [os.path.exists(p) for p in ['/sandbox/tmp/x', '/sandbox/workspace/x',\n"
      "                                   '/sandbox/home/x', '/tmp/y']])");
  EXPECT_EQ(second.stdout_preview, "False False [False, False, False, False]\n")
      << second.stderr_preview;
}

// Workers forked from one zygote that preloaded numpy draw their own numbers from its global
// generator, which the template reseeds in each (random reseeds itself after a fork; numpy's
// generator would repeat the zygote's next numbers in every worker).
TEST_F(ForkServerTest, WorkersDrawTheirOwnRandomNumbers) {
  ForkServerOptions o = Options();
  o.preload = "import numpy";
  StartServer(std::move(o));
  std::set<std::string> draws;
  for (int i = 0; i < 3; ++i) {
    CommandResult r = RunPython("import numpy\nprint(numpy.random.rand())");
    ASSERT_EQ(r.exit_code, 0) << r.stderr_preview;
    draws.insert(r.stdout_preview);
  }
  EXPECT_EQ(draws.size(), 3u) << *draws.begin();
}

// Attack: a preload (or a module it imports) maps shared memory, as mmap.mmap(-1, n),
// multiprocessing's shared arrays or a numpy.memmap in r+ mode do; every worker forked from the
// zygote would write the same pages, and a secret one worker wrote there would be read by the
// next. Expected: no worker has a shared mapping that may be written. A read-only mapping of a
// file opened read-only (numpy.load with mmap_mode='r', model weights) is kept and readable.
TEST_F(ForkServerTest, APreloadsWritableSharedMemoryReachesNoWorker) {
  ForkServerOptions o = Options();
  o.preload =
      "import mmap, sys\nsys.rw = mmap.mmap(-1, 1 << 20)\nsys.rw[:4] = b'zyg!'\n"
      "f = open('/usr/bin/true', 'rb')\nsys.ro = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)";
  StartServer(std::move(o));
  const std::string check =
      "import sys\n"
      "maps = open('/proc/self/maps').read().splitlines()\n"
      "shared = [l for l in maps if l.split()[1][3] == 's']\n"
      "print([l for l in shared if l.split()[1][1] == 'w' or '/dev/zero' in l],\n"
      "      any(l.endswith(' /usr/bin/true') for l in shared), bytes(sys.ro[:4]))";
  for (int i = 0; i < 2; ++i) {
    CommandResult r = RunPython(check);
    EXPECT_EQ(r.stdout_preview, "[] True b'\\x7fELF'\n") << r.stderr_preview;
  }
}

// Attack: read an earlier request's code, secrets and all, from the memory a worker inherits from
// the zygote. Four requests carry a marker after a comment of 2 to 40 KB; after two more, a
// worker reads every writable mapping of its own (/proc/self/maps, then ctypes) looking for
// the marker, whose two halves its own code holds apart (so it cannot find itself). Expected: not
// found, because the zygote wipes each request once its worker is forked. Before, it was found
// every time.
TEST_F(ForkServerTest, ALaterWorkerFindsNoEarlierRequestsCode) {
#if defined(__SANITIZE_ADDRESS__)
  // The zygote is built with ASan too: its shadow memory and its poisoned, quarantined free
  // chunks make any raw scan of its memory an ASan error. The release suite runs this test.
  GTEST_SKIP() << "a raw scan of an ASan process's memory trips ASan";
#endif
  StartServer();
  std::string tag = Sha256Hex(std::to_string(::getpid()) + dir_).substr(0, 16);
  std::string marker = "LEAKMARK-" + tag;
  std::string hex;
  for (char c : tag) hex += fmt::format("{:02x}", static_cast<unsigned char>(c));
  for (size_t size : {2048, 8192, 16384, 40960}) {
    EXPECT_EQ(RunPython("# " + std::string(size, 'x') + "\n# " + marker + "\nprint('ok')\n")
                  .stdout_preview,
              "ok\n");
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ(RunPython("print(1)").stdout_preview, "1\n");
  CommandResult scan = RunPython("head, tail = b'LEAKMARK-', bytes.fromhex('" + hex +
                                 "')\n"
                                 "import ctypes\n"
                                 "found = scanned = 0\n"
                                 "for line in open('/proc/self/maps').read().splitlines():\n"
                                 "    f = line.split()\n"
                                 "    if not f[1].startswith('rw'): continue\n"
                                 "    lo, hi = (int(x, 16) for x in f[0].split('-'))\n"
                                 "    data = ctypes.string_at(lo, hi - lo)\n"
                                 "    scanned += len(data)\n"
                                 "    at = data.find(head)\n"
                                 "    while at >= 0:\n"
                                 "        found += data.startswith(tail, at + len(head))\n"
                                 "        at = data.find(head, at + 1)\n"
                                 "print('found', found, 'scanned', scanned > 1000000)\n");
  EXPECT_EQ(scan.stdout_preview, "found 0 scanned True\n") << scan.stderr_preview;
}

TEST_F(ForkServerTest, WorkerIsAloneInItsPidNamespace) {
  StartServer();
  // Attack: find the zygote or other workers by pid. The worker is pid 1 of its own namespace and
  // /proc lists nothing else; the zygote's host pid names no process there (ESRCH), and ptrace
  // is refused by the seccomp profile (EPERM) before the kernel would even look.
  pid_t zygote = server_->zygote_pid();
  CommandResult r = RunPython(
      fmt::format("import os, ctypes\n"
                  "print(os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
                  "try:\n    os.kill({0}, 0)\nexcept OSError as e:\n    print('kill', e.errno)\n"
                  "libc = ctypes.CDLL(None, use_errno=True)\n"
                  "print('ptrace', libc.ptrace(16, {0}, 0, 0), ctypes.get_errno())\n"
                  "print('uid', os.getuid(), os.geteuid())",
                  zygote));
  EXPECT_EQ(r.stdout_preview, "1 [1]\nkill 3\nptrace -1 1\nuid 10001 10001\n") << r.stderr_preview;
}

TEST_F(ForkServerTest, ConcurrentWorkersRunSideBySideAndCannotSeeEachOther) {
  StartServer();
  // Two requests at once: their sleeps overlap in time (the monotonic clock is the host's: no
  // time namespace), and each worker sees only itself in /proc while the other is alive.
  const std::string code =
      "import os, time\nstart = time.monotonic()\ntime.sleep(1.5)\n"
      "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
      "print(start, time.monotonic())";
  CommandResult results[2];
  std::thread a([&] { results[0] = RunPython(code); });
  std::thread b([&] { results[1] = RunPython(code); });
  a.join();
  b.join();
  double starts[2] = {0, 0}, ends[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const CommandResult& r = results[i];
    EXPECT_EQ(r.classification, Classification::kOk);
    ASSERT_EQ(std::sscanf(r.stdout_preview.c_str(), "[1]\n%lf %lf", &starts[i], &ends[i]), 2)
        << r.stdout_preview << r.stderr_preview;
  }
  EXPECT_LT(std::max(starts[0], starts[1]), std::min(ends[0], ends[1]))
      << "the two requests ran one after the other";
}

// Children of this process (the server runs in it: the zygote and, by CLONE_PARENT, the
// workers) whose comm is `comm`.
int ChildrenNamed(const std::string& comm) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string stat = ReadFile(e.path().string() + "/stat", 4096).value_or("");
    size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %*c %d", &ppid) != 1) continue;
    n += ppid == ::getpid() && stat.substr(open + 1, close - open - 1) == comm;
  }
  return n;
}

TEST_F(ForkServerTest, StopKillsRunningWorkers) {
  StartServer();
  absl::StatusOr<CommandResult> r;
  std::thread client([&] {
    r = forkserver::Run(dir_ + "/fs.sock",
                        {.template_name = "python", .code = "import time\ntime.sleep(60)"});
  });
  // The worker is forked (a second child of this process, next to the zygote) before the stop.
  for (int i = 0; i < 400 && ChildrenNamed("airlock-zygote-") < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(ChildrenNamed("airlock-zygote-"), 2) << "no worker was forked";
  auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  client.join();
  // The worker was killed (its result says so) and nothing of it is left (TearDown).
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->signal, SIGKILL);
}

TEST_F(ForkServerTest, WorkerDiesWithTheServer) {
  // Taking the sandbox's ids clears a process's parent-death signal; a worker that lost it ran
  // on under init after `kill -9` of the server. The worker reads its own (PR_GET_PDEATHSIG).
  StartServer();
  CommandResult r = RunPython(
      "import ctypes\nsig = ctypes.c_int(0)\n"
      "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)\nprint(sig.value)");
  EXPECT_EQ(r.stdout_preview, "9\n") << r.stderr_preview;
}

TEST_F(ForkServerTest, CrashingWorkerLeavesZygoteAndNextRequestAlone) {
  StartServer();
  pid_t zygote = server_->zygote_pid();
  CommandResult crash = RunPython("import ctypes\nctypes.string_at(0)");
  EXPECT_EQ(crash.signal, SIGSEGV);
  EXPECT_EQ(crash.exit_code, -1);
  EXPECT_EQ(crash.classification, Classification::kExitNonzero);
  EXPECT_EQ(server_->zygote_pid(), zygote);
  EXPECT_EQ(server_->zygote_starts(), 1);
  EXPECT_EQ(RunPython("print(6 * 7)").stdout_preview, "42\n");
}

TEST_F(ForkServerTest, WorkerThatReportsAndLingersIsStillKilled) {
  StartServer();
  // The code reports an exit code on the status pipe, closes its output and keeps running: the
  // reply comes with that code at once, and the worker is killed and reaped after it (TearDown
  // finds no cgroup left; the next request runs).
  auto t0 = std::chrono::steady_clock::now();
  CommandResult r = RunPython(
      "import os, sys, time\nprint('early', flush=True)\n"
      "os.close(1); os.close(2)\nos.write(3, (5).to_bytes(4, sys.byteorder))\ntime.sleep(60)");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.stdout_preview, "early\n");
  EXPECT_EQ(RunPython("print('next')").stdout_preview, "next\n");
}

// A zygote that dies while the server is idle is replaced at once: the next request does not
// wait for a preload.
TEST_F(ForkServerTest, AZygoteThatDiesWhileIdleIsReplacedWithoutARequest) {
  StartServer();
  pid_t zygote = server_->zygote_pid();
  ASSERT_GT(zygote, 0);
  ASSERT_EQ(kill(zygote, SIGKILL), 0);
  for (int i = 0; i < 200 && server_->zygote_starts() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(server_->zygote_starts(), 2) << "no new zygote within 10 s";
  EXPECT_NE(server_->zygote_pid(), zygote);
  EXPECT_EQ(RunPython("print('again')").stdout_preview, "again\n");
  EXPECT_EQ(server_->zygote_starts(), 2);
}

TEST_F(ForkServerTest, KilledZygoteIsRecreated) {
  StartServer();
  pid_t zygote = server_->zygote_pid();
  ASSERT_GT(zygote, 0);
  ASSERT_EQ(kill(zygote, SIGKILL), 0);
  // The server notices at the next request (its pidfd is readable) and starts a new one.
  CommandResult r = RunPython("print('again')");
  EXPECT_EQ(r.stdout_preview, "again\n") << r.stderr_preview;
  EXPECT_EQ(server_->zygote_starts(), 2);
  EXPECT_NE(server_->zygote_pid(), zygote);
  EXPECT_GT(server_->zygote_pid(), 0);
}

TEST_F(ForkServerTest, MemoryLimitIsOomKill) {
  spec::SandboxSpec spec = TestSpec();
  spec.resources.memory_mb = 64;
  StartServer(Options(spec));
  CommandResult r = RunPython("b = b'x' * (512 << 20)\nprint('survived')");
  EXPECT_EQ(r.classification, Classification::kResourceExhaustedMemory) << r.stderr_preview;
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_GE(r.usage.oom_kills, 1);
  EXPECT_EQ(r.stdout_preview, "");
}

TEST_F(ForkServerTest, TimeoutKillsTheWorker) {
  StartServer();
  auto t0 = std::chrono::steady_clock::now();
  CommandResult r =
      RunPython("print('start', flush=True)\nwhile True: pass", std::chrono::milliseconds(1000));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.classification, Classification::kCommandTimeout);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.stdout_preview, "start\n");  // partial output kept
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST_F(ForkServerTest, HostSecretsAreMasked) {
  StartServer();
  // Attack: read the host's password hashes. /etc/shadow is a mode-0 file in the sandbox.
  CommandResult r = RunPython(
      "try:\n    print(repr(open('/etc/shadow').read()))\n"
      "except OSError as e:\n    print(e.errno)");
  EXPECT_EQ(r.stdout_preview, "13\n") << r.stderr_preview;  // EACCES
}

TEST_F(ForkServerTest, NoNetworkBeyondLoopback) {
  StartServer();
  // Attack: reach an address outside with network profile none: the namespace has only lo.
  CommandResult r = RunPython(
      "import socket\ns = socket.socket()\n"
      "try:\n    s.connect(('8.8.8.8', 53))\nexcept OSError as e:\n    print(e.errno)");
  EXPECT_EQ(r.stdout_preview, "101\n") << r.stderr_preview;  // ENETUNREACH
}

TEST_F(ForkServerTest, WritesOutsideWritableMountsFail) {
  StartServer();
  // Attack: write to the read-only root, the tools, the control directory and /usr.
  CommandResult r = RunPython(
      "for p in ['/x', '/usr/x', '/etc/passwd', '/sandbox/tools/x', "
      "'/sandbox/control/spec.json']:\n"
      "    try:\n        open(p, 'w')\n        print(p, 'opened')\n"
      "    except OSError as e:\n        print(p, e.errno)");
  EXPECT_EQ(
      r.stdout_preview,
      "/x 30\n/usr/x 30\n/etc/passwd 30\n/sandbox/tools/x 30\n/sandbox/control/spec.json 30\n")
      << r.stderr_preview;  // EROFS everywhere
}

TEST_F(ForkServerTest, BadRequestsAreRefusedClearly) {
  StartServer();
  const std::string socket = dir_ + "/fs.sock";
  auto big = forkserver::Run(
      socket, {.template_name = "python", .code = std::string(kMaxCodeBytes + 1, 'x')});
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("request.code"));
  auto json = RunRaw(socket, static_cast<uint32_t>(FrameType::kRun), "{not json");
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(json.status().message()), HasSubstr("not valid JSON"));
  auto node = forkserver::Run(socket, {.template_name = "node", .code = "1"});
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(node.status().message()), HasSubstr("\"node\" is not served here"));
  auto frame = RunRaw(socket, 77, "{}");
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kInvalidArgument);
  auto field = RunRaw(socket, static_cast<uint32_t>(FrameType::kRun),
                      R"({"template":"python","code":"1","shell":"sh"})");
  EXPECT_THAT(std::string(field.status().message()), HasSubstr("request.shell: unknown field"));
  // The server still serves after all that.
  EXPECT_EQ(RunPython("print(1)").stdout_preview, "1\n");
}

// A connection to the server's socket, for requests no client would send.
UniqueFd ConnectTo(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return {};
  return fd;
}

std::string FrameHeader(uint32_t type, uint32_t length) {
  std::string h(8, '\0');
  for (int i = 0; i < 4; ++i) {
    h[i] = static_cast<char>(type >> (8 * i));
    h[4 + i] = static_cast<char>(length >> (8 * i));
  }
  return h;
}

// A frame that announces more than a request may hold is refused on its header alone: the
// server neither waits for nor allocates the payload.
TEST_F(ForkServerTest, AnOversizedRequestIsRefusedOnItsHeader) {
  StartServer();
  UniqueFd fd = ConnectTo(dir_ + "/fs.sock");
  ASSERT_TRUE(fd);
  std::string header = FrameHeader(static_cast<uint32_t>(FrameType::kRun), 16 << 20);
  ASSERT_EQ(::send(fd.get(), header.data(), header.size(), MSG_NOSIGNAL), 8);
  uint32_t type = 0;
  std::string payload;
  ASSERT_EQ(init::ReceiveFrame(fd.get(), &type, &payload), 0);
  EXPECT_EQ(type, static_cast<uint32_t>(FrameType::kError));
  absl::Status error = DecodeError(payload);
  EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(error.message()),
      HasSubstr(fmt::format("16777216 bytes, more than the limit of {}", kMaxRequestBytes)));
  // A client that sends the whole oversized frame before it reads (the project's own) gets the
  // same answer, not a broken pipe.
  auto whole =
      RunRaw(dir_ + "/fs.sock", static_cast<uint32_t>(FrameType::kRun), std::string(3 << 20, 'x'));
  EXPECT_EQ(whole.status().code(), absl::StatusCode::kInvalidArgument) << whole.status();
  EXPECT_THAT(std::string(whole.status().message()), HasSubstr("more than the limit"));
}

// Attack: hold the server's request slots by sending a request a byte at a time, each byte
// within any per-read timeout. The whole request has a deadline (1 s here): the connection is
// closed unanswered soon after it, while the client still trickles, and the server serves on.
TEST_F(ForkServerTest, AClientThatTricklesItsRequestIsDroppedAtTheDeadline) {
  ForkServerOptions options = Options();
  options.request_timeout = std::chrono::milliseconds(1000);
  StartServer(std::move(options));
  UniqueFd fd = ConnectTo(dir_ + "/fs.sock");
  ASSERT_TRUE(fd);
  std::string header = FrameHeader(static_cast<uint32_t>(FrameType::kRun), 100);
  ASSERT_EQ(::send(fd.get(), header.data(), header.size(), MSG_NOSIGNAL), 8);
  auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 50 && !closed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (::send(fd.get(), "x", 1, MSG_NOSIGNAL) != 1) closed = true;
    char c;
    if (::recv(fd.get(), &c, 1, MSG_DONTWAIT) == 0) closed = true;
  }
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(closed) << "the trickling client was still connected after 5 s";
  EXPECT_LT(took, std::chrono::seconds(4));
  EXPECT_EQ(RunPython("print(1)").stdout_preview, "1\n");
}

TEST_F(ForkServerTest, SocketIsOwnerOnly) {
  StartServer();
  struct stat st;
  ASSERT_EQ(stat((dir_ + "/fs.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// Sidecar use: the agent's group may connect; the socket gets that group and mode, and the file
// is still a socket (the changes went to what bind made).
TEST_F(ForkServerTest, SocketGetsTheGroupAndModeAsked) {
  ForkServerOptions options = Options();
  options.socket_group = 65534;
  options.socket_mode = 0660;
  StartServer(std::move(options));
  struct stat st;
  ASSERT_EQ(lstat((dir_ + "/fs.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_gid, 65534u);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

// A second server started on the name of a live one fails and leaves that one serving (its
// socket stays); a socket that a killed server left behind, with nobody listening, is replaced;
// a name that is not a socket is refused and left alone.
TEST_F(ForkServerTest, TheSocketsNameIsTakenOverOnlyFromADeadServer) {
  StartServer();
  auto second = ForkServer::Start(Options());
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().ToString(), HasSubstr("another fork-server serves it"));
  EXPECT_EQ(RunPython("print(1)").stdout_preview, "1\n") << "the first server lost its socket";
  server_->Stop();
  server_.reset();
  // What a SIGKILLed server leaves: a bound socket file with no listener.
  {
    UniqueFd stale(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::string path = dir_ + "/fs.sock";
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    ASSERT_EQ(bind(stale.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  StartServer();
  EXPECT_EQ(RunPython("print(2)").stdout_preview, "2\n");
  server_->Stop();
  server_.reset();
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/fs.sock", "not a socket").ok());
  auto refused = ForkServer::Start(Options());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(ReadFile(dir_ + "/fs.sock").value_or(""), "not a socket");
  ::unlink((dir_ + "/fs.sock").c_str());
}

// `airlock forkserver` blocks SIGINT and SIGTERM (it takes them through a signalfd) and a caller
// may ignore signals; neither reaches a worker, whose code can stop its own children with them.
TEST_F(ForkServerTest, WorkersStartWithNoSignalBlockedOrIgnored) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  struct sigaction ignore = {}, old_hup = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGHUP, &ignore, &old_hup), 0);
  StartServer();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  CommandResult r = RunPython(
      "import subprocess\n"
      "print([l.split()[1] for l in open('/proc/self/status') if l.startswith(('SigBlk', "
      "'SigIgn'))])\n"
      "p = subprocess.Popen(['sleep', '100'])\n"
      "p.terminate()\n"
      "print(p.wait(timeout=10))\n");
  // Python itself ignores SIGPIPE and SIGXFSZ (0x1000 and 0x1000000).
  EXPECT_EQ(r.stdout_preview, "['0000000000000000', '0000000001001000']\n-15\n")
      << r.stderr_preview;
}

TEST_F(ForkServerTest, ZygoteWithThreadsIsRefused) {
  ForkServerOptions o = Options();
  o.preload =
      "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), "
      "daemon=True).start()";
  auto s = ForkServer::Start(std::move(o));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("zygote"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("exit status 4"));
}

TEST_F(ForkServerTest, NetworkProfilesOtherThanNoneAreRefused) {
  spec::SandboxSpec spec = TestSpec();
  spec.network.profile = spec::NetworkProfile::kOpen;
  auto s = ForkServer::Start(Options(spec));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("no egress path"));
}

// A host directory bound read-write would be state every worker shares: refused when the server
// starts, for the workspace and for any read-write mount; a read-only workspace or mount is served.
TEST_F(ForkServerTest, WritableHostDirectoriesAreRefused) {
  spec::SandboxSpec workspace = TestSpec();
  workspace.filesystem.workspace = dir_;
  auto s = ForkServer::Start(Options(workspace));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("filesystem.workspace"));

  spec::SandboxSpec rw = TestSpec();
  rw.filesystem.mounts = {{dir_, "/data", spec::MountMode::kReadWrite}};
  s = ForkServer::Start(Options(rw));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("filesystem.mounts[0]"));

  // A read-only workspace is served.
  const std::string ws = dir_ + "/ws";
  ASSERT_EQ(::mkdir(ws.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomic(ws + "/in.txt", "workspace").ok());
  ASSERT_EQ(::chmod((ws + "/in.txt").c_str(), 0644), 0);
  workspace.filesystem.workspace = ws;
  workspace.filesystem.workspace_mode = spec::MountMode::kReadOnly;
  StartServer(Options(workspace));
  CommandResult w = RunPython("print(open('/sandbox/workspace/in.txt').read())");
  EXPECT_EQ(w.stdout_preview, "workspace\n") << w.stderr_preview << w.error;
  server_->Stop();
  server_.reset();

  const std::string data = dir_ + "/data";
  ASSERT_EQ(::mkdir(data.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomic(data + "/note", "read-only").ok());
  ASSERT_EQ(::chmod((data + "/note").c_str(), 0644), 0);
  spec::SandboxSpec ro = TestSpec();
  ro.filesystem.mounts = {{data, "/data", spec::MountMode::kReadOnly}};
  StartServer(Options(ro));
  CommandResult r = RunPython("print(open('/data/note').read())");
  EXPECT_EQ(r.stdout_preview, "read-only\n") << r.stderr_preview << r.error;
}

// The race a zygote with helper threads (node's) runs on every fork: a helper found parked wakes
// and takes a lock before the clone copies the memory. Attack surface: none from a worker; this is
// the zygote's own timing. Outcome: every worker that runs finds the lock free, because a worker
// cloned while the helper ran is killed unseen and the fork asked again (the test zygote wakes its
// helper on every odd attempt, so each request takes exactly two).
TEST_F(ForkServerTest, WorkerClonedWhileAHelperRanIsDiscardedAndForkedAgain) {
  ForkServerOptions o = Options();
  o.preload.clear();
  o.zygote_path = AIRLOCK_TEST_BUSY_HELPER_ZYGOTE;
  StartServer(std::move(o));
  for (int request = 1; request <= 3; ++request) {
    CommandResult r = RunPython("unused");
    EXPECT_EQ(r.classification, Classification::kOk) << r.stdout_preview << r.stderr_preview;
    EXPECT_EQ(r.stdout_preview, fmt::format("mutex free after {} attempts\n", 2 * request));
  }
}

// The same race on every attempt: the request is refused after 8 discarded workers, each reaped
// (TearDown finds no cgroup left), and the server serves the next request as before.
TEST_F(ForkServerTest, HelperRunningDuringEveryCloneEndsTheRequestUnavailable) {
  ForkServerOptions o = Options();
  o.preload = "every";
  o.zygote_path = AIRLOCK_TEST_BUSY_HELPER_ZYGOTE;
  StartServer(std::move(o));
  for (int request = 1; request <= 2; ++request) {
    auto r = forkserver::Run(dir_ + "/fs.sock", {.template_name = "python", .code = "unused"});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("8 forks in a row"));
  }
  EXPECT_EQ(server_->zygote_starts(), 1);
  // The 16 discarded workers were children of this process (CLONE_PARENT), like the zygote:
  // reaped, only the zygote is left.
  EXPECT_EQ(ChildrenNamed("test_zygote_bus"), 1);
}

// The Node template: node's own zygote (bin/airlock-zygote-node), the same server and sandboxes.
class NodeForkServerTest : public ForkServerTest {
 protected:
  ForkServerOptions NodeOptions(spec::SandboxSpec spec = TestSpec()) {
    ForkServerOptions o = Options(std::move(spec));
    o.template_name = "node";
    o.preload = "globalThis.preloaded = require('zlib').constants.Z_BEST_COMPRESSION";
    o.zygote_path = AIRLOCK_TEST_NODE_ZYGOTE;
    return o;
  }

  CommandResult RunNode(const std::string& code,
                        std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
    return RunCode("node", code, timeout);
  }
};

TEST_F(NodeForkServerTest, RunsCodeAsNodeDashE) {
  StartServer(NodeOptions());
  CommandResult hello = RunNode(
      "console.log('hello', preloaded, typeof require, __filename, process.argv.length,\n"
      "  typeof require.main, typeof process.mainModule, module.parent, module.path,\n"
      "  Object.keys(require.cache).filter(k => k.includes('airlock')).length)\n"
      "console.error('warn')");
  EXPECT_EQ(hello.classification, Classification::kOk) << hello.stderr_preview;
  EXPECT_EQ(hello.stdout_preview, "hello 9 function [eval] 1 undefined undefined undefined . 0\n");
  EXPECT_EQ(hello.stderr_preview, "warn\n");
  EXPECT_GT(hello.usage.memory_peak_bytes, 0);
  // Output is written synchronously to the worker's pipes, however much of it (the streams were
  // made in the zygote, on /dev/null); neither stream is taken for a terminal.
  CommandResult big = RunNode(
      "process.stdout.write('x'.repeat(5 << 20)); console.error(!!process.stdout.isTTY, "
      "!!process.stderr.isTTY)");
  EXPECT_EQ(big.stdout_bytes, 5 << 20);
  EXPECT_EQ(big.stderr_preview, "false false\n");
  EXPECT_EQ(big.exit_code, 0);
  // Asynchronous work (a timer, a file read on libuv's pool, which the worker starts for itself)
  // finishes before the worker ends, and process.exitCode is its exit code.
  CommandResult async = RunNode(
      "require('fs').promises.readFile('/etc/hostname', 'utf8').then(d => {\n"
      "  console.log('read')\n"
      "  setTimeout(() => { console.log('timer'); process.exitCode = 4 }, 100) })");
  EXPECT_EQ(async.stdout_preview, "read\ntimer\n") << async.stderr_preview;
  EXPECT_EQ(async.exit_code, 4);
  // process.exit's code, after the 'exit' listeners (which may change it).
  CommandResult exit7 = RunNode(
      "process.on('exit', c => { console.log('exit listener', c); process.exitCode = 7 })\n"
      "process.exit(3)");
  EXPECT_EQ(exit7.stdout_preview, "exit listener 3\n");
  EXPECT_EQ(exit7.exit_code, 7);
  // An uncaught exception and an unhandled rejection: 1, the error on stderr.
  CommandResult thrown = RunNode("throw new Error('boom')");
  EXPECT_EQ(thrown.exit_code, 1);
  EXPECT_THAT(thrown.stderr_preview, HasSubstr("Error: boom"));
  EXPECT_THAT(thrown.stderr_preview, HasSubstr("[eval]:1"));
  CommandResult rejected = RunNode("Promise.reject(new Error('later'))");
  EXPECT_EQ(rejected.exit_code, 1);
  EXPECT_THAT(rejected.stderr_preview, HasSubstr("Error: later"));
}

TEST_F(NodeForkServerTest, WorkersShareNoStateAndDrawTheirOwnRandomness) {
  StartServer(NodeOptions());
  // The first worker changes a preloaded module, the global object and files; the second sees
  // none of it. Each is pid 1, in the spec's working directory and environment, and draws its own
  // random numbers (Math.random's and OpenSSL's state would otherwise be the zygote's).
  const std::string code =
      "const fs = require('fs'), zlib = require('zlib')\n"
      "console.log(process.pid, process.cwd(), process.env.HOME, zlib.marker, "
      "globalThis.first, fs.existsSync('/sandbox/tmp/x'))\n"
      "zlib.marker = 1; globalThis.first = 1; fs.writeFileSync('/sandbox/tmp/x', '1')\n"
      "console.log(Math.random(), require('crypto').randomBytes(8).toString('hex'))";
  CommandResult a = RunNode(code);
  CommandResult b = RunNode(code);
  const std::string fresh = "1 /sandbox/workspace /sandbox/home undefined undefined false\n";
  ASSERT_THAT(a.stdout_preview, ::testing::StartsWith(fresh)) << a.stderr_preview;
  ASSERT_THAT(b.stdout_preview, ::testing::StartsWith(fresh)) << b.stderr_preview;
  char random_a[64] = {}, random_b[64] = {}, bytes_a[64] = {}, bytes_b[64] = {};
  ASSERT_EQ(std::sscanf(a.stdout_preview.c_str() + fresh.size(), "%63s %63s", random_a, bytes_a),
            2);
  ASSERT_EQ(std::sscanf(b.stdout_preview.c_str() + fresh.size(), "%63s %63s", random_b, bytes_b),
            2);
  EXPECT_STRNE(random_a, random_b) << "Math.random repeats across workers";
  EXPECT_STRNE(bytes_a, bytes_b) << "crypto.randomBytes repeats across workers";
}

TEST_F(NodeForkServerTest, WorkerCannotReachTheZygoteTheHostOrTheNetwork) {
  StartServer(NodeOptions());
  // Attacks: signal the zygote by its host pid (no such process in the worker's namespace),
  // read the host's password hashes (a mode-0 file), write to the read-only root, connect
  // outside with network profile none (no route).
  CommandResult r = RunNode(fmt::format(
      "const fs = require('fs')\n"
      "try {{ process.kill({}, 0) }} catch (e) {{ console.log('kill', e.code) }}\n"
      "try {{ fs.readFileSync('/etc/shadow') }} catch (e) {{ console.log('shadow', e.code) }}\n"
      "try {{ fs.writeFileSync('/usr/x', '1') }} catch (e) {{ console.log('write', e.code) }}\n"
      "require('net').connect(53, '8.8.8.8').on('error', e => console.log('connect', e.code))",
      server_->zygote_pid()));
  EXPECT_EQ(r.stdout_preview, "kill ESRCH\nshadow EACCES\nwrite EROFS\nconnect ENETUNREACH\n")
      << r.stderr_preview;
}

TEST_F(NodeForkServerTest, CrashTimeoutAndMemoryLimitAreClassified) {
  spec::SandboxSpec spec = TestSpec();
  spec.resources.memory_mb = 96;
  StartServer(NodeOptions(spec));
  pid_t zygote = server_->zygote_pid();
  // A crash: node aborts. The worker is pid 1 of its namespace, which ignores its own SIGABRT;
  // glibc's abort then ends it by a fault.
  CommandResult crash = RunNode("console.log('before'); process.abort()");
  EXPECT_TRUE(crash.signal == SIGSEGV || crash.signal == SIGABRT) << crash.signal;
  EXPECT_EQ(crash.stdout_preview, "before\n");
  EXPECT_EQ(crash.classification, Classification::kExitNonzero);
  CommandResult spin =
      RunNode("console.log('start'); for (;;) {}", std::chrono::milliseconds(1000));
  EXPECT_EQ(spin.classification, Classification::kCommandTimeout);
  EXPECT_EQ(spin.stdout_preview, "start\n");
  CommandResult big = RunNode("const b = Buffer.alloc(512 << 20, 1); console.log('survived')");
  EXPECT_EQ(big.classification, Classification::kResourceExhaustedMemory) << big.stderr_preview;
  EXPECT_EQ(big.stdout_preview, "");
  // None of it reached the zygote.
  EXPECT_EQ(server_->zygote_pid(), zygote);
  EXPECT_EQ(server_->zygote_starts(), 1);
  EXPECT_EQ(RunNode("console.log(6 * 7)").stdout_preview, "42\n");
}

TEST_F(NodeForkServerTest, ProgramsThatUseTheRuntimeRunToTheirEnd) {
  spec::SandboxSpec spec = TestSpec();
  spec.env["NODE_PATH"] = "/opt/extra-modules";
  StartServer(NodeOptions(spec));
  // Each of these once hung or aborted in a forked worker: garbage collection posts tasks for
  // node's helper threads (node then waited for them at the end of the loop), and child processes,
  // signal handlers and fetch use libuv's signal lock and the platform's task queues.
  struct Case {
    const char* code;
    const char* output;
  } cases[] = {
      {"let a = []; for (let i = 0; i < 2e6; i++) a.push({i}); console.log(a.length)", "2000000\n"},
      {"console.log(require('child_process').execSync('echo child').toString().trim())", "child\n"},
      {"process.on('SIGUSR2', () => console.log('signal')); process.kill(process.pid, 'SIGUSR2');"
       "setTimeout(() => {}, 100)",
       "signal\n"},
      {"require('http').createServer((q, r) => r.end('served')).listen(8080, async function () {"
       "  const r = await fetch('http://127.0.0.1:8080/'); console.log(await r.text());"
       "  this.close() })",
       "served\n"},
      {"import('node:path').then(m => console.log(typeof m.join))", "function\n"},
      // Global module folders follow the worker's environment (NODE_PATH from the spec), not the
      // zygote's.
      {"console.log(require('module').globalPaths.includes('/opt/extra-modules'))", "true\n"},
      {"process.on('beforeExit', () => { if (!globalThis.again) { globalThis.again = 1;"
       "  setTimeout(() => console.log('more'), 50) } }); process.on('exit', c => console.log(c));"
       "process.exitCode = 3",
       "more\n3\n"},
      {"try { new (require('worker_threads').Worker)('1', {eval: true}) } catch (e) {"
       "  console.log(e.code) }",
       "ERR_AIRLOCK_NO_WORKER_THREADS\n"},
      // No memory is shared with the zygote or other workers: no shared mapping at all.
      {"const maps = require('fs').readFileSync('/proc/self/maps', 'utf8').split('\\n')\n"
       "console.log(maps.filter(l => /^\\S+ ...s /.test(l)).length)",
       "0\n"},
  };
  for (const Case& c : cases) {
    CommandResult r = RunNode(c.code, std::chrono::seconds(20));
    EXPECT_FALSE(r.timed_out) << c.code;
    EXPECT_EQ(r.signal, 0) << c.code << "\n" << r.stderr_preview;
    EXPECT_EQ(r.stdout_preview, c.output) << c.code << "\n" << r.stderr_preview;
    EXPECT_EQ(r.stderr_preview, "") << c.code;
  }
  // import() passes its attributes on (a JSON module needs its type; node 18 warns on stderr
  // that JSON modules are experimental, as `node -e` does there).
  CommandResult json = RunNode(
      "require('fs').writeFileSync('/tmp/x.json', '{\"a\": 5}')\n"
      "import('/tmp/x.json', {with: {type: 'json'}}).then(m => console.log(m.default.a))",
      std::chrono::seconds(20));
  EXPECT_EQ(json.stdout_preview, "5\n") << json.stderr_preview;
  // Exit codes from the ways out node has: process.exit in an 'exit' listener wins; a throw in a
  // 'beforeExit' listener is uncaught (printed, exit 1).
  CommandResult nested =
      RunNode("process.on('exit', () => process.exit(5))", std::chrono::seconds(20));
  EXPECT_EQ(nested.exit_code, 5);
  CommandResult thrown = RunNode("process.on('beforeExit', () => { throw new Error('late') })",
                                 std::chrono::seconds(20));
  EXPECT_EQ(thrown.exit_code, 1);
  EXPECT_FALSE(thrown.timed_out);
  EXPECT_THAT(thrown.stderr_preview, HasSubstr("Error: late"));
}

TEST_F(NodeForkServerTest, KilledZygoteIsRecreated) {
  StartServer(NodeOptions());
  pid_t zygote = server_->zygote_pid();
  ASSERT_EQ(kill(zygote, SIGKILL), 0);
  CommandResult r = RunNode("console.log('again', preloaded)");
  EXPECT_EQ(r.stdout_preview, "again 9\n") << r.stderr_preview;
  EXPECT_EQ(server_->zygote_starts(), 2);
}

TEST_F(NodeForkServerTest, PreloadThatStartsThreadsIsRefused) {
  // An asynchronous file read starts libuv's thread pool in the zygote: a worker forked beside
  // it would inherit a pool whose threads it does not have.
  ForkServerOptions o = NodeOptions();
  o.preload = "require('fs').readFile('/etc/hostname', () => {})";
  auto s = ForkServer::Start(std::move(o));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("exit status 4")) << s.status();
  // So is a preload that leaves work on the event loop: every worker would inherit a timer.
  ForkServerOptions pending = NodeOptions();
  pending.preload = "setTimeout(() => {}, 100)";
  auto p = ForkServer::Start(std::move(pending));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("exit status 4")) << p.status();
  // The same read done synchronously starts no thread, and is a fine preload.
  ForkServerOptions sync = NodeOptions();
  sync.preload = "globalThis.preloaded = require('fs').readFileSync('/etc/hostname').length";
  StartServer(std::move(sync));
  EXPECT_EQ(RunNode("console.log(preloaded > 0)").stdout_preview, "true\n");
  server_.reset();
  ForkServerOptions bad = NodeOptions();
  bad.preload = "require('no-such-module')";
  auto failed = ForkServer::Start(std::move(bad));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("exit status 3"))
      << failed.status();
}

}  // namespace
}  // namespace airlock::forkserver
