// airlock's own implementation of the wasm2c runtime interface (wasm-rt.h from Debian's wabt),
// plus what the generated code leaves to the embedder: linear memories and trap recovery.
//
// Why our own: wabt 1.0.32's wasm-rt-impl.c keeps the trap jmp_buf in process globals and sets up
// the alternate signal stack only for the thread that called wasm_rt_init, so only one guest could
// run per process at a time. Here every piece of trap state is thread_local, each thread gets its
// own sigaltstack on first use, and any number of guests run on any number of threads at once
// (one guest per thread at a time).
//
// Guest memory is addressed through the GS segment register on x86-64: see CallGuarded and
// CurrentGsBase.
//
// Memory checks use the signal-handler scheme wasm2c generates by default: a linear memory is an
// 8 GiB PROT_NONE reservation of which only the first `pages` * 64 KiB are accessible, so every
// 32-bit address plus 32-bit offset lands inside the reservation and an out-of-bounds access
// faults. The SIGSEGV/SIGBUS handler turns a fault inside the running guest's reservation (or in
// the guard zone under the thread's stack: native stack exhaustion) into a trap; any other fault
// goes to the previously installed handler, so host bugs still crash loudly.
#ifndef AIRLOCK_INTERP_INTERNAL_WASM_RT_H_
#define AIRLOCK_INTERP_INTERNAL_WASM_RT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "wasm-rt.h"

namespace airlock::interp::internal {

inline constexpr uint32_t kWasmPageSize = 65536;

// A linear memory in its own 8 GiB reservation. Not thread-safe; owned by one guest.
class LinearMemory {
 public:
  LinearMemory() = default;
  ~LinearMemory();
  LinearMemory(const LinearMemory&) = delete;
  LinearMemory& operator=(const LinearMemory&) = delete;

  // Reserves the address space and makes `initial_pages` accessible (zero-filled).
  absl::Status Allocate(uint32_t initial_pages, uint32_t max_pages);
  // Grows by `delta` pages; false (and no change) past max_pages or when the kernel refuses.
  bool Grow(uint32_t delta);
  // Makes the whole memory inaccessible: the guest's next access traps. Async-signal-safe, may
  // be called from another thread (the watchdog). The memory is unusable afterwards.
  void Revoke();
  // Moves the memory to 2 MiB pages: those in use are gathered into huge pages now
  // (MADV_COLLAPSE) and later faults take huge pages (MADV_HUGEPAGE). For a guest that runs a
  // while: on the development VM a TLB miss costs enough that QuickJS ran 1.5-2x slower on 4 KiB
  // pages. It costs whole 2 MiB pages of memory and one copy of the pages in use, so a fresh
  // interpreter does not do it. Best effort and idempotent: where the kernel has no transparent
  // huge pages nothing changes.
  void PreferHugePages();
  bool prefers_huge_pages() const { return huge_pages_; }

  wasm_rt_memory_t* rt() { return &memory_; }
  const wasm_rt_memory_t* rt() const { return &memory_; }
  uint8_t* data() const { return memory_.data; }
  uint32_t size() const { return memory_.size; }
  uint32_t pages() const { return memory_.pages; }
  uint32_t max_pages() const { return memory_.max_pages; }
  bool Contains(uintptr_t address) const;

 private:
  wasm_rt_memory_t memory_{};
  size_t reserved_ = 0;
  bool huge_pages_ = false;
  uint8_t* scratch_ = nullptr;  // PreferHugePages' copies, while it runs
  size_t scratch_size_ = 0;
};

// Runs fn(arg) as guest code on this thread: a trap inside it (out-of-bounds access, unreachable,
// native stack exhaustion, the watchdog's Revoke) unwinds back here with longjmp and is returned;
// WASM_RT_TRAP_NONE when fn returned normally. `memory` is the guest's memory (faults inside it
// are traps). Nested calls (a host import calling back into the same guest) run fn directly and
// leave recovery to the outermost call. Frames between here and the trap are not unwound: code
// running inside must not own resources it cannot afford to leak when the guest is discarded.
wasm_rt_trap_t CallGuarded(LinearMemory* memory, void (*fn)(void*), void* arg);

template <typename F>
wasm_rt_trap_t CallGuarded(LinearMemory* memory, F& fn) {
  return CallGuarded(
      memory, [](void* f) { (*static_cast<F*>(f))(); }, &fn);
}

// The thread's GS base (0 where there is no GS segment). The generated code addresses guest memory
// through GS (src/interp/tune_wasm2c.py): CallGuarded points it at the guest's memory for the
// call, host imports included, and puts the previous value back afterwards, trap or not.
uintptr_t CurrentGsBase();
// True when GS is moved with the wrgsbase instruction, false when through arch_prctl(2).
bool UsesGsBaseInstructions();
// Tests only: move GS through arch_prctl(2), as on CPUs or kernels without the FSGSBASE
// instructions, even where those are available.
void UseArchPrctlForGsBase(bool on);

// Human-readable name of a trap ("out of bounds memory access", ...).
const char* TrapName(wasm_rt_trap_t trap);

// Makes sure the process-wide signal handlers are installed (idempotent, thread-safe).
void EnsureRuntimeInitialized();

}  // namespace airlock::interp::internal

#endif  // AIRLOCK_INTERP_INTERNAL_WASM_RT_H_
