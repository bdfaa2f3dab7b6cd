// One QuickJS instance in WebAssembly: its linear memory, the wasm2c module instance, the imports
// it calls, and typed, bounds-checked wrappers around the quickjs-emscripten exports.
//
// Every method that enters guest code runs under CallGuarded: a trap marks the guest broken and
// comes back as an Internal error ("guest trapped: ..."); a broken guest refuses every later call
// and must be discarded. Every pointer, length and string read from guest memory is checked
// against the memory's size; a guest that hands back garbage gets an error, never a host crash.
//
// Values are JSValue* pointers in guest memory (uint32_t) owned by the caller, who frees them
// with FreeValue. A Guest is used by one thread at a time; Revoke() may come from any thread.
#ifndef AIRLOCK_INTERP_INTERNAL_GUEST_H_
#define AIRLOCK_INTERP_INTERNAL_GUEST_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "interp/internal/wasm_rt.h"

namespace airlock::interp::internal {
class Guest;
}  // namespace airlock::interp::internal

// What wasm2c passes to every import: our per-guest host context.
struct Z_a_instance_t {
  airlock::interp::internal::Guest* guest;
};
struct Z_qjs_instance_t;

namespace airlock::interp::internal {

// What the guest asks of its host.
class GuestHost {
 public:
  virtual ~GuestHost() = default;
  // A call of the prelude's host function (op, a, b are its string arguments). Returns a JSValue*
  // for the guest to receive (ownership passes to the guest), or 0 for undefined. Runs inside
  // guest code: it may call the guest's methods but must not block.
  virtual uint32_t OnHostCall(Guest& guest, std::string_view op, std::string_view a,
                              std::string_view b) = 0;
  // Polled by the engine's interrupt handler; true stops the running script (uncatchable).
  virtual bool ShouldInterrupt(Guest& guest) = 0;
};

struct GuestConfig {
  uint32_t max_pages = 1024;                 // hard cap on linear memory (64 KiB pages)
  uint32_t quickjs_memory_limit = 32 << 20;  // JS_SetMemoryLimit
  uint32_t stack_bytes = 1 << 20;            // JS_SetMaxStackSize (of the wasm shadow stack)
};

// The state that, with the linear memory, is the whole guest (what a snapshot keeps).
struct GuestState {
  uint32_t stack_pointer = 0;  // the module's only global (the shadow stack pointer)
  uint32_t rt = 0;             // JSRuntime*
  uint32_t ctx = 0;            // JSContext*
  uint32_t undefined = 0;      // JSValueConst* of undefined (static data)
  uint32_t scratch = 0;        // 16 bytes of guest heap for out-parameters
};

// The granularity of memory images (snapshots): small enough that a half-used 64 KiB page does
// not carry its zeros.
inline constexpr uint32_t kImageBlockSize = 4096;
inline constexpr uint32_t kBlocksPerPage = kWasmPageSize / kImageBlockSize;

enum class PromiseState { kPending, kFulfilled, kRejected };

// A guest value or the exception it threw (rendered as "Name: message" plus stack).
struct EvalResult {
  uint32_t value = 0;  // owned JSValue*, 0 when `exception` is set
  bool threw = false;
  std::string exception;
};

class Guest {
 public:
  ~Guest();
  Guest(const Guest&) = delete;
  Guest& operator=(const Guest&) = delete;

  // Instantiates the module, creates a runtime and context with the limits, installs the host
  // function and runs the prelude.
  static absl::StatusOr<std::unique_ptr<Guest>> Boot(const GuestConfig& config, GuestHost* host);
  // Instantiates the module over a saved memory image: `pages` pages, i.e. pages * 16 blocks of
  // kImageBlockSize bytes, of which those marked in `nonzero` (one bit per block, LSB first) are
  // the consecutive blocks of `data`; the others are zero.
  static absl::StatusOr<std::unique_ptr<Guest>> Restore(const GuestConfig& config, GuestHost* host,
                                                        const GuestState& state, uint32_t pages,
                                                        std::string_view nonzero,
                                                        std::string_view data);

  const GuestState& state();  // refreshes stack_pointer
  LinearMemory& memory() { return memory_; }
  bool broken() const { return !broken_reason_.empty(); }
  const std::string& broken_reason() const { return broken_reason_; }
  void set_host(GuestHost* host) { host_ = host; }

  // Wall time spent inside guest code so far (all calls, this process).
  std::chrono::nanoseconds guest_time() const;
  // The backstop: when guest_time() passes `budget` inside one top-level guest call, the
  // watchdog revokes the memory and the call traps. nanoseconds::max() disables it.
  void set_backstop_budget(std::chrono::nanoseconds budget) { backstop_budget_ = budget; }
  // Called by the watchdog (any thread): the guest traps at its next memory access.
  void Revoke();
  bool revoked() const { return revoked_.load(); }

  // --- QuickJS operations (each guarded) ---
  // Evaluates global code; the completion value or the exception.
  absl::StatusOr<EvalResult> Eval(std::string_view code, std::string_view filename);
  // Runs pending jobs until none is left or one throws (then `threw` and `exception` are set).
  absl::StatusOr<EvalResult> ExecutePendingJobs();
  absl::StatusOr<PromiseState> GetPromiseState(uint32_t promise);
  // The promise's result, as a new owned value.
  absl::StatusOr<uint32_t> PromiseResult(uint32_t promise);
  struct Capability {
    uint32_t promise = 0, resolve = 0, reject = 0;  // owned values
  };
  absl::StatusOr<Capability> NewPromiseCapability();
  // Calls `fn` with one string argument; the return value is freed.
  absl::StatusOr<EvalResult> CallWithString(uint32_t fn, std::string_view arg);
  absl::StatusOr<uint32_t> NewString(std::string_view text);
  // JSON.stringify of the value (QuickJS's Dump: errors become {name, message, stack}; values
  // that are not JSON become a printed fallback).
  absl::StatusOr<std::string> Dump(uint32_t value);
  absl::Status FreeValue(uint32_t value);

  // Mallocs `bytes` in the guest (untouched) and frees it; true when the linear memory grew for
  // it. Checks that the module's heap-growth import is ours (the start-up self-test).
  absl::StatusOr<bool> GrowsForLargeAllocation(uint32_t bytes);

  // Bounds-checked reads of guest memory.
  absl::StatusOr<std::string> ReadCString(uint32_t ptr, size_t max_bytes) const;
  absl::StatusOr<uint32_t> ReadU32(uint32_t ptr) const;
  absl::Status WriteBytes(uint32_t ptr, std::string_view bytes);

  // Import handlers (called from the extern "C" import functions).
  uint32_t ImportCallFunction(uint32_t ctx, uint32_t this_ptr, uint32_t argc, uint32_t argv);
  bool ImportShouldInterrupt();
  bool ImportResizeHeap(uint32_t requested_bytes);
  std::string& engine_output() { return engine_output_; }

 private:
  Guest(const GuestConfig& config, GuestHost* host);
  absl::Status Instantiate(uint32_t pages);
  absl::Status InitRuntime();
  // Runs fn under CallGuarded with time accounting and the watchdog backstop.
  template <typename F>
  absl::Status Guarded(std::string_view what, F&& fn);
  // The index'th argument of a host-function call as a string. Only inside an import: it runs
  // guest code without a guard of its own.
  absl::StatusOr<std::string> ArgString(uint32_t argv, uint32_t index, size_t max_bytes);
  absl::StatusOr<uint32_t> Malloc(size_t size);
  absl::StatusOr<uint32_t> NewCString(std::string_view text);
  absl::StatusOr<std::string> TakeCString(uint32_t ptr, size_t max_bytes);
  absl::StatusOr<EvalResult> TakeResult(uint32_t value);

  GuestConfig config_;
  GuestHost* host_;
  LinearMemory memory_;
  std::unique_ptr<Z_qjs_instance_t> instance_;
  Z_a_instance_t imports_{this};
  bool instantiated_ = false;
  GuestState state_;
  std::string broken_reason_;
  std::string engine_output_;
  std::atomic<bool> revoked_{false};
  int depth_ = 0;
  std::chrono::steady_clock::time_point entered_{};
  std::chrono::nanoseconds guest_time_{0};
  std::chrono::nanoseconds backstop_budget_ = std::chrono::nanoseconds::max();
};

// Renders a value the script threw, from its Dump: "Name: message" and the first lines of the
// stack for errors, "uncaught <json>" for anything else.
std::string FormatException(std::string_view dump);

// sha256 (hex) of the .wasm this binary was built from: the build id of its snapshots.
std::string_view WasmBuildId();

}  // namespace airlock::interp::internal

#endif  // AIRLOCK_INTERP_INTERNAL_GUEST_H_
