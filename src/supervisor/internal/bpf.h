// A small assembler for classic BPF seccomp programs, with labels and jumps of any length, and an
// interpreter of the same programs for tests (the kernel stays the authority; the interpreter
// lets tests compare the compiled filter with the policy's own evaluation on many inputs).
#ifndef AIRLOCK_SUPERVISOR_INTERNAL_BPF_H_
#define AIRLOCK_SUPERVISOR_INTERNAL_BPF_H_

#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace airlock::supervisor::internal {

// Builds a program. Conditional jumps to labels are emitted as a short test over one
// unconditional jump (BPF_JA has a 32-bit offset, the conditional forms only 8 bits), so labels
// may be any distance ahead. Backward jumps do not exist in BPF: a label must be bound after
// every jump to it.
class BpfProgram {
 public:
  using Label = int;

  Label NewLabel();
  void Bind(Label label);

  void LoadNr();
  void LoadArch();
  void LoadArgLow(int index);   // low 32 bits of args[index]
  void LoadArgHigh(int index);  // high 32 bits
  void And(uint32_t k);

  // Jumps to `target` when A <op> k holds (JumpIf) or does not (JumpUnless); op is BPF_JEQ,
  // BPF_JGT, BPF_JGE or BPF_JSET.
  void JumpIf(uint16_t op, uint32_t k, Label target);
  void JumpUnless(uint16_t op, uint32_t k, Label target);
  void Jump(Label target);
  void Return(uint32_t action);

  size_t size() const { return code_.size(); }

  // The program as raw struct sock_filter[] bytes; an error when a label is unbound or the
  // program is longer than the kernel accepts (BPF_MAXINSNS).
  absl::StatusOr<std::string> Finish() const;

 private:
  void Emit(uint16_t code, uint8_t jt, uint8_t jf, uint32_t k);
  std::vector<sock_filter> code_;
  std::vector<int> label_pos_;                    // instruction index, -1 while unbound
  std::vector<std::pair<size_t, Label>> fixups_;  // BPF_JA instructions to resolve
};

// Runs a seccomp program on `data` as the kernel would, for the instructions BpfProgram emits.
// Returns the action, or SECCOMP_RET_KILL_PROCESS for a malformed program.
uint32_t RunBpf(const std::string& program, const seccomp_data& data);

}  // namespace airlock::supervisor::internal

#endif  // AIRLOCK_SUPERVISOR_INTERNAL_BPF_H_
