#!/usr/bin/env python3
"""Two rewrites of wasm2c's output that make the translated QuickJS run at native speed.

usage: tune_wasm2c.py QJS_C QJS_H   (rewrites QJS_C; reads the instance struct in QJS_H)

Both keep the module's semantics exactly; both fail the build when wasm2c's output does not have
the expected shape, so that a different wasm2c or .wasm cannot silently skip them.

1. Guest memory through the GS segment. wasm2c 1.0.32 reads and writes guest memory as
   `mem->data[addr]`. Each access loads the base pointer from the memory struct, and after any
   store into guest memory the compiler must load it again, since a byte store may alias the
   pointer itself: in QuickJS's bytecode loop, two dependent loads after nearly every opcode. On
   x86-64 the accessors here address guest memory as `%gs:addr` instead, and internal/wasm_rt.cc
   points the thread's GS base at the running guest's memory for the length of every guarded
   call (the technique later wasm2c versions call "Segue"). The address is still base + 32-bit
   address + 32-bit offset inside the 8 GiB reservation, so an access outside the accessible
   pages still faults into the trap handler. Elsewhere (not x86-64, or a compiler without named
   address spaces) the original accessors stay, under `#if AIRLOCK_WASM_SEGUE`.

2. Threaded dispatch in the bytecode loop. The module's largest `br_table` is QuickJS's opcode
   switch (JS_CallInternal); wasm2c makes it one C `switch` at the loop head, reached by a `goto`
   from the end of every opcode. Native QuickJS jumps to the next opcode from the end of each
   opcode instead (computed goto), which gives the branch predictor one indirect jump per opcode
   to learn. The rewrite does the same: the switch becomes a jump through a table of label
   addresses, and each `goto` back to the loop head becomes a copy of the head's straight-line
   code plus that jump. (GCC keeps the copies apart only with cross-jumping and tail merging off;
   src/interp/CMakeLists.txt sets those options for the generated code.)
"""
import re
import sys

ORIGINAL_ACCESSORS = """#define DEFINE_LOAD(name, t1, t2, t3)                      \\
  static inline t3 name(wasm_rt_memory_t* mem, u64 addr) { \\
    MEMCHECK(mem, addr, t1);                               \\
    t1 result;                                             \\
    wasm_rt_memcpy(&result, &mem->data[addr], sizeof(t1)); \\
    wasm_asm("" ::"r"(result));                            \\
    return (t3)(t2)result;                                 \\
  }

#define DEFINE_STORE(name, t1, t2)                                     \\
  static inline void name(wasm_rt_memory_t* mem, u64 addr, t2 value) { \\
    MEMCHECK(mem, addr, t1);                                           \\
    t1 wrapped = (t1)value;                                            \\
    wasm_rt_memcpy(&mem->data[addr], &wrapped, sizeof(t1));            \\
  }
"""

# Guest addresses are unaligned as often as not: the accessed types are declared with alignment 1
# so that the compiler never assumes otherwise (x86-64 loads and stores any alignment).
SEGUE_ACCESSORS = """#if AIRLOCK_WASM_SEGUE
/* airlock: guest memory through the GS segment (src/interp/tune_wasm2c.py). */
#define DEFINE_LOAD(name, t1, t2, t3)                                       \\
  static inline t3 name(wasm_rt_memory_t* mem, u64 addr) {                  \\
    MEMCHECK(mem, addr, t1);                                                \\
    (void)mem;                                                              \\
    typedef t1 __attribute__((aligned(1))) unaligned_t;                     \\
    t1 result = *(const __seg_gs unaligned_t*)(uintptr_t)addr;              \\
    wasm_asm("" ::"r"(result));                                             \\
    return (t3)(t2)result;                                                  \\
  }

#define DEFINE_STORE(name, t1, t2)                                          \\
  static inline void name(wasm_rt_memory_t* mem, u64 addr, t2 value) {      \\
    MEMCHECK(mem, addr, t1);                                                \\
    (void)mem;                                                              \\
    typedef t1 __attribute__((aligned(1))) unaligned_t;                     \\
    *(__seg_gs unaligned_t*)(uintptr_t)addr = (t1)value;                    \\
  }
#else
""" + ORIGINAL_ACCESSORS + "#endif\n"

SEGUE_SWITCH = """#if defined(__x86_64__) && defined(__SEG_GS) && !WABT_BIG_ENDIAN
#define AIRLOCK_WASM_SEGUE 1
#else
#define AIRLOCK_WASM_SEGUE 0
#endif
"""


class ShapeError(Exception):
    pass


def replace_once(text: str, old: str, new: str, what: str) -> str:
    if text.count(old) != 1:
        raise ShapeError(f"{what}: expected exactly one occurrence, found {text.count(old)}")
    return text.replace(old, new)


def segue(text: str, header: str) -> str:
    # GS holds one base per thread: the module must have exactly one memory, the imported one
    # that CallGuarded is given. A module-defined memory would be a member of the instance.
    imported = re.findall(r"^  wasm_rt_memory_t \*\w+;$", header, re.M)
    defined = re.findall(r"^  wasm_rt_memory_t \w+;$", header, re.M)
    if len(imported) != 1 or defined:
        raise ShapeError(f"expected one imported memory, found {len(imported)} imported and "
                         f"{len(defined)} defined")
    text = replace_once(text, "#if WABT_BIG_ENDIAN\n", SEGUE_SWITCH + "#if WABT_BIG_ENDIAN\n",
                        "the WABT_BIG_ENDIAN block")
    return replace_once(text, ORIGINAL_ACCESSORS, SEGUE_ACCESSORS,
                        "the little-endian load/store definitions")


FUNC_START = re.compile(r"^static \w+ (w2c_\w+)\(Z_qjs_instance_t\* instance.*\) \{$")
CASE = re.compile(r"^\s*case (\d+): goto (w2c_\w+);$")
DEFAULT = re.compile(r"^\s*default: goto (w2c_\w+);$")
LABEL = re.compile(r"^\s*(w2c_L\d+):\s*$")
# What the loop head may contain to be copied: plain assignments of locals, constants and loads.
STRAIGHT = re.compile(r"^\s*w2c_\w+ (\+|-)?= [^;{}?]*;$")


def threaded_dispatch(text: str) -> str:
    lines = text.split("\n")
    # The largest switch in the module is the opcode switch.
    best = None
    for i, line in enumerate(lines):
        if line.strip() == "switch (w2c_i0) {":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "}")
            if best is None or end - i > best[1] - best[0]:
                best = (i, end)
    if best is None or best[1] - best[0] < 200:
        raise ShapeError("no switch of 200 or more cases (the bytecode interpreter's)")
    switch, switch_end = best
    cases, default = {}, None
    for line in lines[switch + 1:switch_end]:
        if m := CASE.match(line):
            cases[int(m.group(1))] = m.group(2)
        elif m := DEFAULT.match(line):
            default = m.group(1)
        else:
            raise ShapeError(f"unexpected line in the opcode switch: {line.strip()!r}")
    if default is None:
        raise ShapeError("the opcode switch has no default")
    # The loop head: the label just before the switch, with straight-line code in between.
    head = switch - 1
    while head >= 0 and not LABEL.match(lines[head]):
        if not STRAIGHT.match(lines[head]):
            raise ShapeError(f"the opcode loop's head is not straight-line: {lines[head].strip()!r}")
        head -= 1
    label = LABEL.match(lines[head]).group(1)
    func = head
    while func >= 0 and not FUNC_START.match(lines[func]):
        func -= 1
    if func < 0 or "}" in lines[func:head]:
        raise ShapeError("the opcode switch is not inside a module function")
    func_end = next(j for j in range(switch_end, len(lines)) if lines[j] == "}")

    n = max(cases) + 1
    table = ", ".join("&&" + cases.get(i, default) for i in range(n))
    dispatch = (" ".join(l.strip() for l in lines[head + 1:switch]) +
                f" if (w2c_i0 >= {n}u) goto {default}; goto *airlock_opcode_targets[w2c_i0];")
    jump = f"goto {label};"
    body = lines[func + 1:head] + [lines[head], "        " + dispatch] + lines[switch_end + 1:func_end]
    copies = 0
    for k, line in enumerate(body):
        if jump in line:
            copies += line.count(jump)
            body[k] = line.replace(jump, "{ " + dispatch + " }")
    if copies < 100:
        raise ShapeError(f"only {copies} jumps back to the opcode loop's head")
    declaration = f"  static void* const airlock_opcode_targets[{n}] = {{{table}}};"
    return "\n".join(lines[:func + 1] + [declaration] + body + lines[func_end:])


def main() -> int:
    path, header_path = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(header_path, encoding="utf-8") as f:
        header = f.read()
    try:
        text = threaded_dispatch(segue(text, header))
    except ShapeError as e:
        sys.stderr.write(f"tune_wasm2c.py: {path}: wasm2c's output is not as expected: {e}\n")
        return 1
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
