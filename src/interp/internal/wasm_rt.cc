#include "interp/internal/wasm_rt.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <asm/prctl.h>
#include <immintrin.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "fmt/format.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; glibc 2.36's headers predate it
#endif

namespace airlock::interp::internal {
namespace {

// Any 32-bit address plus a 32-bit offset stays below 8 GiB, so with the whole range reserved an
// out-of-bounds access can only fault (wasm2c's signal-handler memory check scheme).
constexpr size_t kReservation = size_t{8} << 30;
constexpr size_t kHugePage = size_t{2} << 20;  // x86-64's and aarch64's (4 KiB base pages) PMD size
// A fault this far below the lowest address of the thread's stack (or just above it) is native
// stack exhaustion: large frames can step past the guard page.
constexpr uintptr_t kStackGuardZone = 1 << 20;
constexpr uintptr_t kStackSlack = 64 << 10;

// Per-thread trap state. Trivially constructible and destructible so that the signal handler can
// read it without any lazy-initialisation wrapper.
struct ThreadState {
  sigjmp_buf* jmp;
  LinearMemory* memory;
  uintptr_t stack_lo;
  bool prepared;
};
thread_local ThreadState tls = {nullptr, nullptr, 0, false};

// The alternate signal stack of a thread (the SIGSEGV of a native stack overflow cannot run on the
// overflowed stack). Freed when the thread exits.
struct AltStack {
  void* mem = nullptr;
  size_t size = 0;
  ~AltStack() {
    if (mem == nullptr) return;
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    ::sigaltstack(&ss, nullptr);
    ::munmap(mem, size);
  }
};
thread_local AltStack alt_stack;

struct sigaction g_prev_segv;
struct sigaction g_prev_bus;
std::once_flag g_init_once;

void Chain(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev = sig == SIGSEGV ? g_prev_segv : g_prev_bus;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // Default action: return and let the faulting instruction fault again without us.
  ::signal(sig, SIG_DFL);
}

void OnFault(int sig, siginfo_t* info, void* context) {
  ThreadState& t = tls;
  if (t.jmp != nullptr && t.memory != nullptr) {
    auto address = reinterpret_cast<uintptr_t>(info->si_addr);
    if (t.memory->Contains(address)) siglongjmp(*t.jmp, WASM_RT_TRAP_OOB);
    if (t.stack_lo != 0 && address < t.stack_lo + kStackSlack &&
        address + kStackGuardZone >= t.stack_lo) {
      siglongjmp(*t.jmp, WASM_RT_TRAP_EXHAUSTION);
    }
  }
  Chain(sig, info, context);
}

void InstallHandlers() {
  struct sigaction sa {};
  sa.sa_sigaction = OnFault;
  // SA_NODEFER: the handler leaves with siglongjmp, which then need not restore the mask.
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGSEGV, &sa, &g_prev_segv) != 0 || ::sigaction(SIGBUS, &sa, &g_prev_bus) != 0) {
    std::fprintf(stderr, "airlock interp: sigaction failed\n");
    std::abort();
  }
}

void PrepareThread(ThreadState& t) {
  t.prepared = true;
  stack_t current{};
  if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) != 0) {
    size_t size = std::max<size_t>(64 << 10, static_cast<size_t>(::sysconf(_SC_SIGSTKSZ)) * 4);
    void* mem = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem != MAP_FAILED) {
      stack_t ss{};
      ss.ss_sp = mem;
      ss.ss_size = size;
      if (::sigaltstack(&ss, nullptr) == 0) {
        alt_stack.mem = mem;
        alt_stack.size = size;
      } else {
        ::munmap(mem, size);
      }
    }
  }
  pthread_attr_t attr;
  if (::pthread_getattr_np(::pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    size_t size = 0;
    if (::pthread_attr_getstack(&attr, &addr, &size) == 0) {
      t.stack_lo = reinterpret_cast<uintptr_t>(addr);
    }
    ::pthread_attr_destroy(&attr);
  }
}

// The GS segment's base is the running guest's memory: the generated code's loads and stores
// address `%gs:addr` (src/interp/tune_wasm2c.py). CallGuarded sets it whenever it enters a
// guest's code from outside that guest (from the host, or from another guest's host import) and
// puts the previous base back when the call ends. Without the FSGSBASE instructions each of those
// entries costs three arch_prctl calls.
#if defined(__x86_64__)
constexpr unsigned long kHwcap2FsGsBase = 1 << 1;  // HWCAP2_FSGSBASE: the instructions (Linux 5.9)
const bool g_cpu_fsgsbase = (::getauxval(AT_HWCAP2) & kHwcap2FsGsBase) != 0;
std::atomic<bool> g_fsgsbase{g_cpu_fsgsbase};  // false in UseArchPrctlForGsBase's tests

__attribute__((target("fsgsbase"))) uintptr_t ReadGsBaseInstruction() { return _readgsbase_u64(); }
__attribute__((target("fsgsbase"))) void WriteGsBaseInstruction(uintptr_t base) {
  _writegsbase_u64(base);
}

uintptr_t GsBase() {
  if (g_fsgsbase.load(std::memory_order_relaxed)) return ReadGsBaseInstruction();
  unsigned long base = 0;
  if (::syscall(SYS_arch_prctl, ARCH_GET_GS, &base) != 0) return 0;
  return base;
}

void SetGsBase(uintptr_t base) {
  if (g_fsgsbase.load(std::memory_order_relaxed)) {
    WriteGsBaseInstruction(base);
  } else if (::syscall(SYS_arch_prctl, ARCH_SET_GS, base) != 0) {
    // Only a non-canonical address fails, and base is a mapping's address or a saved GS base.
    std::fprintf(stderr, "airlock interp: arch_prctl(ARCH_SET_GS) failed: errno %d\n", errno);
    std::abort();
  }
}
#else
uintptr_t GsBase() { return 0; }
void SetGsBase(uintptr_t) {}
#endif

// Function signatures registered by the generated module; call_indirect compares indices.
std::mutex g_types_mu;
std::vector<std::vector<uint8_t>> g_types;

}  // namespace

LinearMemory::~LinearMemory() {
  if (memory_.data != nullptr) ::munmap(memory_.data, reserved_);
  if (scratch_ != nullptr) ::munmap(scratch_, scratch_size_);
}

absl::Status LinearMemory::Allocate(uint32_t initial_pages, uint32_t max_pages) {
  if (memory_.data != nullptr) return FailedPrecondition("linear memory already allocated");
  if (initial_pages > max_pages || max_pages > 65536) {
    return InvalidArgument(
        fmt::format("linear memory: {} initial pages, {} max", initial_pages, max_pages));
  }
  // Aligned to 2 MiB, so that huge pages (PreferHugePages) cover the memory from its start.
  void* raw = ::mmap(nullptr, kReservation + kHugePage, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return ErrnoStatus(errno, "reserve 8 GiB for a linear memory");
  auto raw_at = reinterpret_cast<uintptr_t>(raw);
  uintptr_t aligned = (raw_at + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
  if (aligned > raw_at) ::munmap(raw, aligned - raw_at);
  if (size_t tail = raw_at + kHugePage - aligned; tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + kReservation), tail);
  }
  void* base = reinterpret_cast<void*>(aligned);
  size_t bytes = size_t{initial_pages} * kWasmPageSize;
  if (bytes > 0 && ::mprotect(base, bytes, PROT_READ | PROT_WRITE) != 0) {
    int err = errno;
    ::munmap(base, kReservation);
    return ErrnoStatus(err, "map linear memory");
  }
  memory_.data = static_cast<uint8_t*>(base);
  memory_.pages = initial_pages;
  memory_.max_pages = max_pages;
  memory_.size = static_cast<uint32_t>(bytes);
  reserved_ = kReservation;
  return absl::OkStatus();
}

bool LinearMemory::Grow(uint32_t delta) {
  if (memory_.data == nullptr) return false;
  uint64_t new_pages = uint64_t{memory_.pages} + delta;
  if (new_pages > memory_.max_pages || new_pages > 65535) return false;
  if (delta == 0) return true;
  if (::mprotect(memory_.data + memory_.size, size_t{delta} * kWasmPageSize,
                 PROT_READ | PROT_WRITE) != 0) {
    return false;
  }
  memory_.pages = static_cast<uint32_t>(new_pages);
  memory_.size = static_cast<uint32_t>(new_pages * kWasmPageSize);
  return true;
}

void LinearMemory::PreferHugePages() {
  if (memory_.data == nullptr || huge_pages_) return;
  huge_pages_ = true;
  if (::madvise(memory_.data, reserved_, MADV_HUGEPAGE) != 0) return;  // no THP on this kernel
  // Later faults take huge pages; the pages in use stay 4 KiB pages until gathered. The kernel's
  // MADV_COLLAPSE does that where it can (not on the development VM: EINVAL). Elsewhere each
  // 2 MiB region with pages in use is copied aside, dropped and copied back: the first write
  // faults the region in as one huge page. The guest is stopped meanwhile (this runs in its
  // interrupt check, on its thread).
  const size_t used = memory_.size & ~(kHugePage - 1);
  if (used == 0 || ::madvise(memory_.data, used, MADV_COLLAPSE) == 0) return;
  // One mapping for the copies and mincore's answer, owned by the memory: a watchdog's Revoke
  // during the copy unwinds past this frame, and the destructor then frees it.
  constexpr size_t kPage = 4096;
  scratch_size_ = kHugePage + ((used / kPage + kPage - 1) & ~(kPage - 1));
  void* m =
      ::mmap(nullptr, scratch_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return;
  scratch_ = static_cast<uint8_t*>(m);
  unsigned char* resident = scratch_ + kHugePage;
  constexpr size_t kPerRegion = kHugePage / kPage;
  if (::mincore(memory_.data, used, resident) == 0) {
    for (size_t region = 0; region < used / kHugePage; ++region) {
      const unsigned char* in = resident + region * kPerRegion;
      if (std::none_of(in, in + kPerRegion, [](unsigned char r) { return (r & 1) != 0; })) {
        continue;
      }
      uint8_t* at = memory_.data + region * kHugePage;
      std::memcpy(scratch_, at, kHugePage);
      if (::madvise(at, kHugePage, MADV_DONTNEED) != 0) break;  // nothing dropped: all stays
      for (size_t page = 0; page < kPerRegion; ++page) {
        if ((in[page] & 1) != 0) std::memcpy(at + page * kPage, scratch_ + page * kPage, kPage);
      }
    }
  }
  ::munmap(scratch_, scratch_size_);  // done: its pages would stay resident for nothing
  scratch_ = nullptr;
}

void LinearMemory::Revoke() {
  if (memory_.data != nullptr) ::mprotect(memory_.data, reserved_, PROT_NONE);
}

bool LinearMemory::Contains(uintptr_t address) const {
  auto base = reinterpret_cast<uintptr_t>(memory_.data);
  return memory_.data != nullptr && address >= base && address - base < reserved_;
}

wasm_rt_trap_t CallGuarded(LinearMemory* memory, void (*fn)(void*), void* arg) {
  ThreadState& t = tls;
  if (t.jmp != nullptr && t.memory == memory) {
    fn(arg);  // GS already points at this memory
    return WASM_RT_TRAP_NONE;
  }
  if (!t.prepared) PrepareThread(t);
  // What this call replaces, put back however it ends: return, trap (siglongjmp back to this
  // frame) or a C++ exception from a host import unwinding through the guest's frames. Saved so
  // that a guard for another memory may nest inside (a host import running a second guest). None
  // of it changes after sigsetjmp, so it is valid after a siglongjmp.
  struct Restore {
    ThreadState& t;
    sigjmp_buf* jmp;
    LinearMemory* memory;
    uintptr_t gs;
    ~Restore() {
      SetGsBase(gs);
      t.jmp = jmp;
      t.memory = memory;
    }
  } restore{t, t.jmp, t.memory, GsBase()};
  sigjmp_buf buf;
  int code = sigsetjmp(buf, 0);
  if (code == 0) {
    t.jmp = &buf;
    t.memory = memory;
    SetGsBase(reinterpret_cast<uintptr_t>(memory->data()));
    fn(arg);
  }
  return static_cast<wasm_rt_trap_t>(code);
}

uintptr_t CurrentGsBase() { return GsBase(); }

bool UsesGsBaseInstructions() {
#if defined(__x86_64__)
  return g_fsgsbase.load();
#else
  return false;
#endif
}

void UseArchPrctlForGsBase(bool on) {
#if defined(__x86_64__)
  g_fsgsbase.store(!on && g_cpu_fsgsbase);
#else
  (void)on;
#endif
}

const char* TrapName(wasm_rt_trap_t trap) {
  switch (trap) {
    case WASM_RT_TRAP_NONE:
      return "no trap";
    case WASM_RT_TRAP_OOB:
      return "out of bounds memory access";
    case WASM_RT_TRAP_INT_OVERFLOW:
      return "integer overflow";
    case WASM_RT_TRAP_DIV_BY_ZERO:
      return "integer divide by zero";
    case WASM_RT_TRAP_INVALID_CONVERSION:
      return "invalid conversion to integer";
    case WASM_RT_TRAP_UNREACHABLE:
      return "unreachable executed (the engine aborted)";
    case WASM_RT_TRAP_CALL_INDIRECT:
      return "invalid indirect call";
    case WASM_RT_TRAP_UNCAUGHT_EXCEPTION:
      return "uncaught wasm exception";
    case WASM_RT_TRAP_EXHAUSTION:
      return "native call stack exhausted";
  }
  return "unknown trap";
}

void EnsureRuntimeInitialized() { std::call_once(g_init_once, InstallHandlers); }

}  // namespace airlock::interp::internal

// The C interface the generated code calls (declared in wasm-rt.h). Only what qjs.c references
// is implemented; the build fails at link time if a future module needs more.
extern "C" {

void wasm_rt_init(void) { airlock::interp::internal::EnsureRuntimeInitialized(); }

bool wasm_rt_is_initialized(void) { return true; }

void wasm_rt_free(void) {}

void wasm_rt_trap(wasm_rt_trap_t code) {
  using airlock::interp::internal::tls;
  if (tls.jmp != nullptr) siglongjmp(*tls.jmp, code);
  std::fprintf(stderr, "airlock interp: wasm trap outside a guarded call: %s\n",
               airlock::interp::internal::TrapName(code));
  std::abort();
}

const char* wasm_rt_strerror(wasm_rt_trap_t trap) {
  return airlock::interp::internal::TrapName(trap);
}

uint32_t wasm_rt_register_func_type(uint32_t params, uint32_t results, ...) {
  using airlock::interp::internal::g_types;
  std::vector<uint8_t> signature;
  signature.push_back(static_cast<uint8_t>(params));
  signature.push_back(static_cast<uint8_t>(results));
  va_list args;
  va_start(args, results);
  for (uint32_t i = 0; i < params + results; ++i) {
    signature.push_back(static_cast<uint8_t>(va_arg(args, int)));
  }
  va_end(args);
  std::lock_guard<std::mutex> lock(airlock::interp::internal::g_types_mu);
  for (size_t i = 0; i < g_types.size(); ++i) {
    if (g_types[i] == signature) return static_cast<uint32_t>(i + 1);
  }
  g_types.push_back(std::move(signature));
  return static_cast<uint32_t>(g_types.size());
}

void wasm_rt_allocate_funcref_table(wasm_rt_funcref_table_t* table, uint32_t elements,
                                    uint32_t max_elements) {
  table->size = elements;
  table->max_size = max_elements;
  table->data = static_cast<wasm_rt_funcref_t*>(std::calloc(elements, sizeof(wasm_rt_funcref_t)));
  if (table->data == nullptr && elements > 0) {
    std::fprintf(stderr, "airlock interp: out of memory for a wasm table\n");
    std::abort();
  }
}

void wasm_rt_free_funcref_table(wasm_rt_funcref_table_t* table) {
  std::free(table->data);
  table->data = nullptr;
  table->size = 0;
}

}  // extern "C"
