#include "supervisor/internal/bpf.h"

#include <cstddef>
#include <cstring>

#include "common/status.h"
#include "fmt/format.h"

namespace airlock::supervisor::internal {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "argument words are addressed as little-endian (x86_64, aarch64)");

constexpr uint32_t ArgOffset(int index) {
  return static_cast<uint32_t>(offsetof(seccomp_data, args) + 8 * index);
}

}  // namespace

BpfProgram::Label BpfProgram::NewLabel() {
  label_pos_.push_back(-1);
  return static_cast<Label>(label_pos_.size() - 1);
}

void BpfProgram::Bind(Label label) {
  label_pos_[static_cast<size_t>(label)] = static_cast<int>(code_.size());
}

void BpfProgram::Emit(uint16_t code, uint8_t jt, uint8_t jf, uint32_t k) {
  code_.push_back(sock_filter{code, jt, jf, k});
}

void BpfProgram::LoadNr() { Emit(BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(seccomp_data, nr)); }
void BpfProgram::LoadArch() { Emit(BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(seccomp_data, arch)); }
void BpfProgram::LoadArgLow(int index) { Emit(BPF_LD | BPF_W | BPF_ABS, 0, 0, ArgOffset(index)); }
void BpfProgram::LoadArgHigh(int index) {
  Emit(BPF_LD | BPF_W | BPF_ABS, 0, 0, ArgOffset(index) + 4);
}
void BpfProgram::And(uint32_t k) { Emit(BPF_ALU | BPF_AND | BPF_K, 0, 0, k); }

void BpfProgram::JumpIf(uint16_t op, uint32_t k, Label target) {
  Emit(BPF_JMP | op | BPF_K, 0, 1, k);  // true: fall into the jump; false: skip it
  Jump(target);
}

void BpfProgram::JumpUnless(uint16_t op, uint32_t k, Label target) {
  Emit(BPF_JMP | op | BPF_K, 1, 0, k);
  Jump(target);
}

void BpfProgram::Jump(Label target) {
  fixups_.emplace_back(code_.size(), target);
  Emit(BPF_JMP | BPF_JA, 0, 0, 0);
}

void BpfProgram::Return(uint32_t action) { Emit(BPF_RET | BPF_K, 0, 0, action); }

absl::StatusOr<std::string> BpfProgram::Finish() const {
  if (code_.size() > BPF_MAXINSNS) {
    return InvalidArgument(
        fmt::format("the rules compile to {} BPF instructions, more than the kernel's limit of {}",
                    code_.size(), BPF_MAXINSNS));
  }
  std::vector<sock_filter> code = code_;
  for (const auto& [at, label] : fixups_) {
    int pos = label_pos_[static_cast<size_t>(label)];
    if (pos < 0 || static_cast<size_t>(pos) <= at) {
      return Internal("seccomp program: a jump to an unbound or earlier label");
    }
    code[at].k = static_cast<uint32_t>(pos) - static_cast<uint32_t>(at) - 1;
  }
  return std::string(reinterpret_cast<const char*>(code.data()), code.size() * sizeof(sock_filter));
}

uint32_t RunBpf(const std::string& program, const seccomp_data& data) {
  size_t n = program.size() / sizeof(sock_filter);
  std::vector<sock_filter> code(n);
  std::memcpy(code.data(), program.data(), n * sizeof(sock_filter));
  uint32_t a = 0;
  for (size_t pc = 0; pc < n; ++pc) {
    const sock_filter& insn = code[pc];
    switch (insn.code) {
      case BPF_LD | BPF_W | BPF_ABS: {
        if (insn.k + 4 > sizeof(data) || insn.k % 4 != 0) return SECCOMP_RET_KILL_PROCESS;
        std::memcpy(&a, reinterpret_cast<const char*>(&data) + insn.k, 4);
        break;
      }
      case BPF_ALU | BPF_AND | BPF_K:
        a &= insn.k;
        break;
      case BPF_JMP | BPF_JA:
        pc += insn.k;
        break;
      case BPF_JMP | BPF_JEQ | BPF_K:
        pc += a == insn.k ? insn.jt : insn.jf;
        break;
      case BPF_JMP | BPF_JGT | BPF_K:
        pc += a > insn.k ? insn.jt : insn.jf;
        break;
      case BPF_JMP | BPF_JGE | BPF_K:
        pc += a >= insn.k ? insn.jt : insn.jf;
        break;
      case BPF_JMP | BPF_JSET | BPF_K:
        pc += (a & insn.k) != 0 ? insn.jt : insn.jf;
        break;
      case BPF_RET | BPF_K:
        return insn.k;
      default:
        return SECCOMP_RET_KILL_PROCESS;
    }
  }
  return SECCOMP_RET_KILL_PROCESS;  // ran off the end; the kernel's checker refuses that
}

}  // namespace airlock::supervisor::internal
