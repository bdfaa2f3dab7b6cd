#include "interp/internal/guest.h"

#include <sys/time.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <mutex>
#include <utility>

#include "common/status.h"
#include "fmt/format.h"
#include "interp/internal/prelude.h"
#include "interp/internal/watchdog.h"
#include "nlohmann/json.hpp"
#include "qjs.h"
#include "qjs_abi.h"

// RETURN_IF_ERROR for a Guarded(...) whose lambda uses RETURN_IF_ERROR itself (no shadowing).
#define RETURN_IF_GUARDED_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status guarded_status_ = (expr);           \
    if (!guarded_status_.ok()) return guarded_status_; \
  } while (0)

namespace airlock::interp::internal {
namespace {

// The module's own memory declaration (initial 256 pages); the guest's data, shadow stack and
// first heap live in it.
constexpr uint32_t kInitialPages = 256;
constexpr uint32_t kHostRefId = 1;
constexpr size_t kMaxEngineOutput = 64 << 10;
constexpr size_t kMaxOpBytes = 16;
// Largest string the host reads from the guest in one piece (tool arguments, results, logs).
constexpr size_t kMaxStringBytes = 64 << 20;

std::once_flag g_module_once;

void InitModule() {
  EnsureRuntimeInitialized();
  Z_qjs_init_module();
}

}  // namespace

std::string_view WasmBuildId() { return AIRLOCK_QJS_WASM_SHA256; }

std::string FormatException(std::string_view dump) {
  constexpr int kMaxStackLines = 12;
  nlohmann::json j = nlohmann::json::parse(dump, nullptr, false);
  if (!j.is_object() || !j.contains("message") || !j["message"].is_string()) {
    return fmt::format("uncaught {}", dump.substr(0, 4096));
  }
  std::string name = j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>()
                                                                 : std::string("Error");
  std::string out = fmt::format("{}: {}", name, j["message"].get<std::string>().substr(0, 4096));
  if (j.contains("stack") && j["stack"].is_string()) {
    std::string_view stack = j["stack"].get_ref<const std::string&>();
    int lines = 0;
    while (!stack.empty()) {
      size_t nl = stack.find('\n');
      std::string_view line = stack.substr(0, nl);
      stack = nl == std::string_view::npos ? std::string_view() : stack.substr(nl + 1);
      if (line.empty()) continue;
      if (++lines > kMaxStackLines) {
        size_t rest = 1;
        for (char c : stack) rest += c == '\n' ? 1 : 0;
        out += fmt::format("\n    ... {} more frames", rest);
        break;
      }
      out += "\n";
      out += line.substr(0, 512);
    }
  }
  return out;
}

Guest::Guest(const GuestConfig& config, GuestHost* host)
    : config_(config), host_(host), instance_(std::make_unique<Z_qjs_instance_t>()) {}

Guest::~Guest() {
  if (instantiated_) Z_qjs_free(instance_.get());
}

absl::Status Guest::Instantiate(uint32_t pages) {
  std::call_once(g_module_once, InitModule);
  uint32_t max_pages = std::max(config_.max_pages, pages);
  RETURN_IF_ERROR(memory_.Allocate(pages, max_pages));
  std::memset(instance_.get(), 0, sizeof(Z_qjs_instance_t));
  // Instantiation writes the data segments; it traps only on a memory smaller than the module's.
  Z_qjs_instance_t* instance = instance_.get();
  Z_a_instance_t* imports = &imports_;
  auto body = [instance, imports] { Z_qjs_instantiate(instance, imports); };
  wasm_rt_trap_t trap = CallGuarded(&memory_, body);
  if (trap != WASM_RT_TRAP_NONE) {
    return Internal(fmt::format("instantiate the QuickJS module: {}", TrapName(trap)));
  }
  instantiated_ = true;
  return absl::OkStatus();
}

template <typename F>
absl::Status Guest::Guarded(std::string_view what, F&& fn) {
  if (broken())
    return FailedPrecondition(fmt::format("{}: guest is unusable: {}", what, broken_reason_));
  const bool outer = depth_ == 0;
  uint64_t token = 0;
  if (outer) {
    entered_ = std::chrono::steady_clock::now();
    if (backstop_budget_ != std::chrono::nanoseconds::max()) {
      std::chrono::nanoseconds left =
          std::max(backstop_budget_ - guest_time_, std::chrono::nanoseconds(0));
      token = Watchdog::Get().Arm(this, entered_ + left);
    }
  }
  ++depth_;
  absl::Status status;
  auto body = [&] { status = fn(); };
  wasm_rt_trap_t trap = CallGuarded(&memory_, body);
  if (!outer && trap == WASM_RT_TRAP_NONE) {
    --depth_;
    return status;
  }
  depth_ = 0;
  guest_time_ += std::chrono::steady_clock::now() - entered_;
  if (token != 0) Watchdog::Get().Disarm(token);
  if (trap != WASM_RT_TRAP_NONE) {
    broken_reason_ = revoked_.load() ? std::string(
                                           "stopped by the watchdog (guest code ran past its time "
                                           "limit without polling the interrupt handler)")
                                     : fmt::format("guest trapped: {}", TrapName(trap));
    return Internal(fmt::format("{}: {}", what, broken_reason_));
  }
  return status;
}

std::chrono::nanoseconds Guest::guest_time() const {
  if (depth_ > 0) return guest_time_ + (std::chrono::steady_clock::now() - entered_);
  return guest_time_;
}

void Guest::Revoke() {
  revoked_.store(true);
  memory_.Revoke();
}

const GuestState& Guest::state() {
  state_.stack_pointer = instance_->w2c_g0;
  return state_;
}

absl::StatusOr<std::unique_ptr<Guest>> Guest::Boot(const GuestConfig& config, GuestHost* host) {
  std::unique_ptr<Guest> guest(new Guest(config, host));
  RETURN_IF_ERROR_CTX(guest->Instantiate(kInitialPages), "boot QuickJS");
  RETURN_IF_ERROR_CTX(guest->InitRuntime(), "boot QuickJS");
  return guest;
}

absl::StatusOr<std::unique_ptr<Guest>> Guest::Restore(const GuestConfig& config, GuestHost* host,
                                                      const GuestState& state, uint32_t pages,
                                                      std::string_view nonzero,
                                                      std::string_view data) {
  if (pages < kInitialPages || pages > 65535) {
    return InvalidArgument(fmt::format("restore: {} pages of linear memory", pages));
  }
  const size_t blocks = size_t{pages} * kBlocksPerPage;
  if (nonzero.size() != (blocks + 7) / 8) return InvalidArgument("restore: block bitmap size");
  size_t count = 0;
  for (size_t i = 0; i < blocks; ++i) count += (nonzero[i / 8] >> (i % 8)) & 1;
  if (data.size() != count * kImageBlockSize) return InvalidArgument("restore: block data size");

  std::unique_ptr<Guest> guest(new Guest(config, host));
  RETURN_IF_ERROR_CTX(guest->Instantiate(pages), "restore QuickJS");
  // Instantiation wrote the data segments below the initial stack pointer; every block there
  // is overwritten, above it the fresh mapping is already zero.
  const size_t dirty = guest->instance_->w2c_g0;
  uint8_t* mem = guest->memory_.data();
  const char* next = data.data();
  for (size_t i = 0; i < blocks; ++i) {
    uint8_t* block = mem + i * kImageBlockSize;
    if ((nonzero[i / 8] >> (i % 8)) & 1) {
      std::memcpy(block, next, kImageBlockSize);
      next += kImageBlockSize;
    } else if (i * kImageBlockSize < dirty) {
      std::memset(block, 0, kImageBlockSize);
    }
  }
  guest->instance_->w2c_g0 = state.stack_pointer;
  guest->state_ = state;
  return guest;
}

absl::Status Guest::InitRuntime() {
  Z_qjs_instance_t* in = instance_.get();
  RETURN_IF_GUARDED_ERROR(Guarded("init runtime", [&]() -> absl::Status {
    QJS_EXPORT_CTORS(in);
    state_.rt = QJS_EXPORT_QTS_NewRuntime(in);
    if (state_.rt == 0) return ResourceExhausted("JS_NewRuntime failed");
    QJS_EXPORT_QTS_RuntimeSetMemoryLimit(in, state_.rt, config_.quickjs_memory_limit);
    QJS_EXPORT_QTS_RuntimeSetMaxStackSize(in, state_.rt, config_.stack_bytes);
    QJS_EXPORT_QTS_RuntimeEnableInterruptHandler(in, state_.rt);
    state_.ctx = QJS_EXPORT_QTS_NewContext(in, state_.rt, 0);
    if (state_.ctx == 0) return ResourceExhausted("JS_NewContext failed");
    state_.undefined = QJS_EXPORT_QTS_GetUndefined(in);
    ASSIGN_OR_RETURN(state_.scratch, Malloc(16));
    ASSIGN_OR_RETURN(uint32_t name, NewCString(kHostFunctionGlobal));
    uint32_t fn = QJS_EXPORT_QTS_NewFunction(in, state_.ctx, name, 0, 0, kHostRefId);
    uint32_t global = QJS_EXPORT_QTS_GetGlobalObject(in, state_.ctx);
    uint32_t key = QJS_EXPORT_QTS_NewString(in, state_.ctx, name);
    QJS_EXPORT_free(in, name);
    if (fn == 0 || global == 0 || key == 0) return ResourceExhausted("install host function");
    QJS_EXPORT_QTS_SetProp(in, state_.ctx, global, key, fn);
    QJS_EXPORT_QTS_FreeValuePointer(in, state_.ctx, fn);
    QJS_EXPORT_QTS_FreeValuePointer(in, state_.ctx, global);
    QJS_EXPORT_QTS_FreeValuePointer(in, state_.ctx, key);
    return absl::OkStatus();
  }));
  ASSIGN_OR_RETURN(EvalResult prelude, Eval(kPrelude, "<prelude>"));
  if (prelude.threw) return Internal(fmt::format("prelude threw: {}", prelude.exception));
  return FreeValue(prelude.value);
}

// --- memory access ---

absl::StatusOr<std::string> Guest::ReadCString(uint32_t ptr, size_t max_bytes) const {
  const uint32_t size = memory_.size();
  if (ptr == 0 || ptr >= size) {
    return InvalidArgument(fmt::format("guest string pointer {:#x} outside memory", ptr));
  }
  size_t limit = std::min<size_t>(size - ptr, max_bytes + 1);
  const auto* start = reinterpret_cast<const char*>(memory_.data() + ptr);
  const void* nul = std::memchr(start, 0, limit);
  if (nul == nullptr) {
    return limit > max_bytes
               ? ResourceExhausted(fmt::format("guest string longer than {} bytes", max_bytes))
               : InvalidArgument("guest string runs past the end of memory");
  }
  return std::string(start, static_cast<const char*>(nul) - start);
}

absl::StatusOr<uint32_t> Guest::ReadU32(uint32_t ptr) const {
  if (uint64_t{ptr} + 4 > memory_.size()) {
    return InvalidArgument(fmt::format("guest pointer {:#x} outside memory", ptr));
  }
  uint32_t v;
  std::memcpy(&v, memory_.data() + ptr, 4);
  return v;
}

absl::Status Guest::WriteBytes(uint32_t ptr, std::string_view bytes) {
  if (uint64_t{ptr} + bytes.size() > memory_.size()) {
    return InvalidArgument(fmt::format("guest pointer {:#x}+{} outside memory", ptr, bytes.size()));
  }
  std::memcpy(memory_.data() + ptr, bytes.data(), bytes.size());
  return absl::OkStatus();
}

// The helpers below run inside a guarded section (they call exports directly).

absl::StatusOr<uint32_t> Guest::Malloc(size_t size) {
  if (size >= (uint64_t{1} << 31)) return ResourceExhausted("guest allocation too large");
  uint32_t p = QJS_EXPORT_malloc(instance_.get(), static_cast<uint32_t>(size));
  if (p == 0) return ResourceExhausted(fmt::format("guest out of memory ({} bytes)", size));
  return p;
}

absl::StatusOr<uint32_t> Guest::NewCString(std::string_view text) {
  ASSIGN_OR_RETURN(uint32_t p, Malloc(text.size() + 1));
  absl::Status s = WriteBytes(p, text);
  if (s.ok()) s = WriteBytes(p + static_cast<uint32_t>(text.size()), std::string_view("\0", 1));
  if (!s.ok()) {
    QJS_EXPORT_free(instance_.get(), p);
    return s;
  }
  return p;
}

absl::StatusOr<std::string> Guest::TakeCString(uint32_t ptr, size_t max_bytes) {
  if (ptr == 0) return ResourceExhausted("guest returned no string (out of memory?)");
  absl::StatusOr<std::string> s = ReadCString(ptr, max_bytes);
  QJS_EXPORT_QTS_FreeCString(instance_.get(), state_.ctx, ptr);
  return s;
}

absl::StatusOr<EvalResult> Guest::TakeResult(uint32_t value) {
  Z_qjs_instance_t* in = instance_.get();
  if (value == 0) return ResourceExhausted("guest out of memory (no result value)");
  EvalResult result;
  uint32_t exception = QJS_EXPORT_QTS_ResolveException(in, state_.ctx, value);
  if (exception == 0) {
    result.value = value;
    return result;
  }
  QJS_EXPORT_QTS_FreeValuePointer(in, state_.ctx, value);
  result.threw = true;
  absl::StatusOr<std::string> dump =
      TakeCString(QJS_EXPORT_QTS_Dump(in, state_.ctx, exception), kMaxStringBytes);
  QJS_EXPORT_QTS_FreeValuePointer(in, state_.ctx, exception);
  if (!dump.ok()) {
    result.exception = fmt::format("(exception not readable: {})", Message(dump.status()));
    return result;
  }
  result.exception = FormatException(*dump);
  return result;
}

// --- QuickJS operations ---

absl::StatusOr<EvalResult> Guest::Eval(std::string_view code, std::string_view filename) {
  EvalResult result;
  RETURN_IF_GUARDED_ERROR(Guarded("eval", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(uint32_t code_ptr, NewCString(code));
    absl::StatusOr<uint32_t> name_ptr = NewCString(filename);
    if (!name_ptr.ok()) {
      QJS_EXPORT_free(instance_.get(), code_ptr);
      return name_ptr.status();
    }
    uint32_t value = QJS_EXPORT_QTS_Eval(instance_.get(), state_.ctx, code_ptr,
                                         static_cast<uint32_t>(code.size()), *name_ptr, 0, 0);
    QJS_EXPORT_free(instance_.get(), code_ptr);
    QJS_EXPORT_free(instance_.get(), *name_ptr);
    ASSIGN_OR_RETURN(result, TakeResult(value));
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<EvalResult> Guest::ExecutePendingJobs() {
  EvalResult result;
  RETURN_IF_GUARDED_ERROR(Guarded("run jobs", [&]() -> absl::Status {
    Z_qjs_instance_t* in = instance_.get();
    uint32_t value = QJS_EXPORT_QTS_ExecutePendingJob(in, state_.rt, -1, state_.scratch);
    if (value == 0) return ResourceExhausted("guest out of memory (job result)");
    // The result is the number of jobs run, or the exception a job threw.
    // QTS_Typeof's string comes from strdup: free(), not JS_FreeCString.
    uint32_t type_ptr = QJS_EXPORT_QTS_Typeof(in, state_.ctx, value);
    if (type_ptr == 0) return ResourceExhausted("guest out of memory (typeof)");
    absl::StatusOr<std::string> type = ReadCString(type_ptr, 64);
    QJS_EXPORT_free(in, type_ptr);
    if (!type.ok()) return type.status();
    if (*type == "number") {
      QJS_EXPORT_QTS_FreeValuePointer(in, state_.ctx, value);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(uint32_t job_ctx, ReadU32(state_.scratch));
    if (job_ctx != state_.ctx) return Internal("a job ran in an unknown context");
    result.threw = true;
    ASSIGN_OR_RETURN(std::string dump,
                     TakeCString(QJS_EXPORT_QTS_Dump(in, state_.ctx, value), kMaxStringBytes));
    QJS_EXPORT_QTS_FreeValuePointer(in, state_.ctx, value);
    result.exception = FormatException(dump);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<PromiseState> Guest::GetPromiseState(uint32_t promise) {
  int32_t state = -1;
  RETURN_IF_GUARDED_ERROR(Guarded("promise state", [&]() -> absl::Status {
    state = static_cast<int32_t>(QJS_EXPORT_QTS_PromiseState(instance_.get(), state_.ctx, promise));
    return absl::OkStatus();
  }));
  switch (state) {
    case 0:
      return PromiseState::kPending;
    case 1:
      return PromiseState::kFulfilled;
    case 2:
      return PromiseState::kRejected;
    default:
      return Internal(fmt::format("not a promise (state {})", state));
  }
}

absl::StatusOr<uint32_t> Guest::PromiseResult(uint32_t promise) {
  uint32_t value = 0;
  RETURN_IF_GUARDED_ERROR(Guarded("promise result", [&]() -> absl::Status {
    value = QJS_EXPORT_QTS_PromiseResult(instance_.get(), state_.ctx, promise);
    if (value == 0) return ResourceExhausted("guest out of memory (promise result)");
    return absl::OkStatus();
  }));
  return value;
}

absl::StatusOr<Guest::Capability> Guest::NewPromiseCapability() {
  Capability cap;
  RETURN_IF_GUARDED_ERROR(Guarded("new promise", [&]() -> absl::Status {
    Z_qjs_instance_t* in = instance_.get();
    RETURN_IF_ERROR(WriteBytes(state_.scratch, std::string_view("\0\0\0\0\0\0\0\0", 8)));
    cap.promise = QJS_EXPORT_QTS_NewPromiseCapability(in, state_.ctx, state_.scratch);
    ASSIGN_OR_RETURN(cap.resolve, ReadU32(state_.scratch));
    ASSIGN_OR_RETURN(cap.reject, ReadU32(state_.scratch + 4));
    if (cap.promise == 0 || cap.resolve == 0 || cap.reject == 0) {
      for (uint32_t v : {cap.promise, cap.resolve, cap.reject}) {
        if (v != 0) QJS_EXPORT_QTS_FreeValuePointer(in, state_.ctx, v);
      }
      return ResourceExhausted("guest out of memory (promise)");
    }
    return absl::OkStatus();
  }));
  return cap;
}

absl::StatusOr<EvalResult> Guest::CallWithString(uint32_t fn, std::string_view arg) {
  EvalResult result;
  RETURN_IF_GUARDED_ERROR(Guarded("call", [&]() -> absl::Status {
    Z_qjs_instance_t* in = instance_.get();
    ASSIGN_OR_RETURN(uint32_t str, NewCString(arg));
    uint32_t value = QJS_EXPORT_QTS_NewString(in, state_.ctx, str);
    QJS_EXPORT_free(in, str);
    if (value == 0) return ResourceExhausted("guest out of memory (string)");
    uint32_t argv = state_.scratch + 8;
    char bytes[4];
    std::memcpy(bytes, &value, 4);
    RETURN_IF_ERROR(WriteBytes(argv, std::string_view(bytes, 4)));
    uint32_t ret = QJS_EXPORT_QTS_Call(in, state_.ctx, fn, state_.undefined, 1, argv);
    QJS_EXPORT_QTS_FreeValuePointer(in, state_.ctx, value);
    ASSIGN_OR_RETURN(result, TakeResult(ret));
    if (!result.threw) {
      QJS_EXPORT_QTS_FreeValuePointer(in, state_.ctx, result.value);
      result.value = 0;
    }
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<uint32_t> Guest::NewString(std::string_view text) {
  uint32_t value = 0;
  RETURN_IF_GUARDED_ERROR(Guarded("new string", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(uint32_t str, NewCString(text));
    value = QJS_EXPORT_QTS_NewString(instance_.get(), state_.ctx, str);
    QJS_EXPORT_free(instance_.get(), str);
    if (value == 0) return ResourceExhausted("guest out of memory (string)");
    return absl::OkStatus();
  }));
  return value;
}

absl::StatusOr<std::string> Guest::Dump(uint32_t value) {
  std::string out;
  RETURN_IF_GUARDED_ERROR(Guarded("dump", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        out, TakeCString(QJS_EXPORT_QTS_Dump(instance_.get(), state_.ctx, value), kMaxStringBytes));
    return absl::OkStatus();
  }));
  return out;
}

absl::Status Guest::FreeValue(uint32_t value) {
  if (value == 0) return absl::OkStatus();
  return Guarded("free value", [&]() -> absl::Status {
    QJS_EXPORT_QTS_FreeValuePointer(instance_.get(), state_.ctx, value);
    return absl::OkStatus();
  });
}

absl::StatusOr<bool> Guest::GrowsForLargeAllocation(uint32_t bytes) {
  const uint32_t before = memory_.pages();
  uint32_t after = before;
  RETURN_IF_GUARDED_ERROR(Guarded("grow", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(uint32_t p, Malloc(bytes));
    after = memory_.pages();
    QJS_EXPORT_free(instance_.get(), p);
    return absl::OkStatus();
  }));
  return after > before;
}

absl::StatusOr<std::string> Guest::ArgString(uint32_t argv, uint32_t index, size_t max_bytes) {
  Z_qjs_instance_t* in = instance_.get();
  uint32_t ptr = QJS_EXPORT_QTS_ArgvGetJSValueConstPointer(in, argv, index);
  return TakeCString(QJS_EXPORT_QTS_GetString(in, state_.ctx, ptr), max_bytes);
}

// --- imports ---

uint32_t Guest::ImportCallFunction(uint32_t ctx, uint32_t /*this_ptr*/, uint32_t argc,
                                   uint32_t argv) {
  if (ctx != state_.ctx || argc != 3 || host_ == nullptr) return 0;
  absl::StatusOr<std::string> op = ArgString(argv, 0, kMaxOpBytes);
  absl::StatusOr<std::string> a = ArgString(argv, 1, kMaxStringBytes);
  absl::StatusOr<std::string> b = ArgString(argv, 2, kMaxStringBytes);
  for (const auto* s : {&op, &a, &b}) {
    if (!s->ok()) {
      absl::StatusOr<uint32_t> err =
          NewCString(fmt::format("host call refused: {}", Message(s->status())));
      if (!err.ok()) return 0;
      uint32_t v = QJS_EXPORT_QTS_NewString(instance_.get(), state_.ctx, *err);
      QJS_EXPORT_free(instance_.get(), *err);
      return v;
    }
  }
  return host_->OnHostCall(*this, *op, *a, *b);
}

bool Guest::ImportShouldInterrupt() { return host_ != nullptr && host_->ShouldInterrupt(*this); }

bool Guest::ImportResizeHeap(uint32_t requested_bytes) {
  uint64_t want = (uint64_t{requested_bytes} + kWasmPageSize - 1) / kWasmPageSize;
  if (want <= memory_.pages()) return true;
  // Grow by at least an eighth to keep the number of growths (mprotect calls) small.
  uint64_t target = std::max<uint64_t>(want, memory_.pages() + memory_.pages() / 8);
  target = std::min<uint64_t>(target, memory_.max_pages());
  if (target < want) return false;
  return memory_.Grow(static_cast<uint32_t>(target - memory_.pages()));
}

}  // namespace airlock::interp::internal

// The module's imports, by role (qjs_abi.h maps each role to the minified import name). The
// compiler checks each definition against the prototype wasm2c wrote in qjs.h.
using airlock::interp::internal::Guest;

extern "C" {

wasm_rt_memory_t* QJS_IMPORT_MEMORY(Z_a_instance_t* self) { return self->guest->memory().rt(); }

void QJS_IMPORT_ASSERT_FAIL(Z_a_instance_t*, u32, u32, u32, u32) {
  wasm_rt_trap(WASM_RT_TRAP_UNREACHABLE);
}

u32 QJS_IMPORT_FD_WRITE(Z_a_instance_t* self, u32 /*fd*/, u32 iov, u32 iovcnt, u32 written_ptr) {
  Guest& g = *self->guest;
  uint32_t total = 0;
  for (uint32_t i = 0; i < iovcnt && i < 1024; ++i) {
    absl::StatusOr<uint32_t> ptr = g.ReadU32(iov + i * 8);
    absl::StatusOr<uint32_t> len = g.ReadU32(iov + i * 8 + 4);
    if (!ptr.ok() || !len.ok() || uint64_t{*ptr} + *len > g.memory().size()) return 21;  // EFAULT
    std::string& out = g.engine_output();
    size_t keep = std::min<size_t>(*len, airlock::interp::internal::kWasmPageSize);
    if (out.size() < (64 << 10)) {
      out.append(reinterpret_cast<const char*>(g.memory().data() + *ptr), keep);
    }
    total += *len;
  }
  char bytes[4];
  std::memcpy(bytes, &total, 4);
  if (!g.WriteBytes(written_ptr, std::string_view(bytes, 4)).ok()) return 21;
  return 0;
}

u32 QJS_IMPORT_FD_CLOSE(Z_a_instance_t*, u32) { return 52; }  // ENOSYS

u32 QJS_IMPORT_ENVIRON_GET(Z_a_instance_t*, u32, u32) { return 0; }

u32 QJS_IMPORT_ENVIRON_SIZES_GET(Z_a_instance_t* self, u32 count_ptr, u32 size_ptr) {
  Guest& g = *self->guest;
  if (!g.WriteBytes(count_ptr, std::string_view("\0\0\0\0", 4)).ok() ||
      !g.WriteBytes(size_ptr, std::string_view("\0\0\0\0", 4)).ok()) {
    wasm_rt_trap(WASM_RT_TRAP_OOB);
  }
  return 0;
}

u32 QJS_IMPORT_NORMALIZE_MODULE(Z_a_instance_t*, u32, u32, u32, u32) { return 0; }

u32 QJS_IMPORT_LOAD_MODULE_SOURCE(Z_a_instance_t*, u32, u32, u32) { return 0; }

u32 QJS_IMPORT_SHOULD_INTERRUPT(Z_a_instance_t* self, u32) {
  return self->guest->ImportShouldInterrupt() ? 1 : 0;
}

u32 QJS_IMPORT_SETITIMER(Z_a_instance_t*, u32, f64) { return 0; }

u32 QJS_IMPORT_RESIZE_HEAP(Z_a_instance_t* self, u32 requested_bytes) {
  return self->guest->ImportResizeHeap(requested_bytes) ? 1 : 0;
}

void QJS_IMPORT_KEEPALIVE_CLEAR(Z_a_instance_t*) {}

// Guests see UTC: no host time zone leaks in, and a snapshot resumes the same anywhere.
void QJS_IMPORT_LOCALTIME(Z_a_instance_t* self, u64 time, u32 tm_ptr) {
  time_t t = static_cast<time_t>(static_cast<int64_t>(time));
  struct tm tm {};
  gmtime_r(&t, &tm);
  int32_t fields[11] = {tm.tm_sec,  tm.tm_min,  tm.tm_hour, tm.tm_mday, tm.tm_mon, tm.tm_year,
                        tm.tm_wday, tm.tm_yday, 0,          0,          0};
  if (!self->guest
           ->WriteBytes(tm_ptr,
                        std::string_view(reinterpret_cast<const char*>(fields), sizeof(fields)))
           .ok()) {
    wasm_rt_trap(WASM_RT_TRAP_OOB);
  }
}

void QJS_IMPORT_TZSET(Z_a_instance_t* self, u32 timezone_ptr, u32 daylight_ptr, u32 std_name,
                      u32 dst_name) {
  Guest& g = *self->guest;
  if (!g.WriteBytes(timezone_ptr, std::string_view("\0\0\0\0", 4)).ok() ||
      !g.WriteBytes(daylight_ptr, std::string_view("\0\0\0\0", 4)).ok() ||
      !g.WriteBytes(std_name, std::string_view("UTC\0", 4)).ok() ||
      !g.WriteBytes(dst_name, std::string_view("UTC\0", 4)).ok()) {
    wasm_rt_trap(WASM_RT_TRAP_OOB);
  }
}

u32 QJS_IMPORT_FD_SEEK(Z_a_instance_t*, u32, u64, u32, u32) { return 70; }  // ESPIPE

f64 QJS_IMPORT_DATE_NOW(Z_a_instance_t*) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) * 1000.0 + static_cast<double>(ts.tv_nsec / 1000000);
}

void QJS_IMPORT_ABORT(Z_a_instance_t*) { wasm_rt_trap(WASM_RT_TRAP_UNREACHABLE); }

void QJS_IMPORT_PROC_EXIT(Z_a_instance_t*, u32) { wasm_rt_trap(WASM_RT_TRAP_UNREACHABLE); }

u32 QJS_IMPORT_CALL_FUNCTION(Z_a_instance_t* self, u32 ctx, u32 this_ptr, u32 argc, u32 argv,
                             u32 host_ref_id) {
  if (host_ref_id != airlock::interp::internal::kHostRefId) return 0;
  return self->guest->ImportCallFunction(ctx, this_ptr, argc, argv);
}

void QJS_IMPORT_FREE_HOST_REF(Z_a_instance_t*, u32, u32) {}

}  // extern "C"
