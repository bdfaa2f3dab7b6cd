#!/usr/bin/env python3
"""Generates qjs_abi.h: the import and export table of the minified QuickJS WebAssembly build.

The release build of @jitl/quickjs-wasmfile-release-sync minifies every import and export name
("a".."t", "v".."Oa") and the names change between versions. The package's emscripten-module.cjs
is the only place that says what each name is: exports are assigned as `c._QTS_Eval=b.pa`, and
imports are the members of the object handed to WebAssembly.instantiate, recognised here by what
their JavaScript body does. This script reads that file and the header wasm2c wrote for the same
.wasm, and emits one #define per role:

  #define QJS_EXPORT_QTS_Eval Z_qjsZ_pa      (wasm2c's mangled name of export "pa")
  #define QJS_IMPORT_CALL_FUNCTION Z_aZ_s    (wasm2c's mangled name of import "s")

It fails (exit 1, one line per problem) when a role matches nothing or more than one import, or
when the module has an import that no role claims: a new package version that changed the
interface then fails the build instead of miscompiling. Signatures are checked by the C++
compiler (src/interp defines each import against the prototypes in qjs.h) and the semantics by
the engine's start-up self-test.

usage: gen_qjs_abi.py emscripten-module.cjs qjs.h out.h
"""
import re
import sys

# role -> regular expression over the .cjs text (newlines removed) whose group 1 is the import's
# minified name. `{MEM}` and `{EXIT}` are replaced by the JS variable names found below.
IMPORT_ROLES = {
    "MEMORY": r"[{,]([\w$]+):{MEM}[,}]",
    "ASSERT_FAIL": r"[{,]([\w$]+):\([\w$,]*\)=>[\w$]+\(`Assertion failed",
    "FD_WRITE": r"[{,]([\w$]+):\([\w$]+,[\w$]+,[\w$]+,[\w$]+\)=>\{for\(var [\w$]+=0,[\w$]+=0;"
                r"[\w$]+<[\w$]+;[\w$]+\+\+\)\{var [\w$]+=[\w$]+\[[\w$]+>>2\]",
    "FD_CLOSE": r"[{,]([\w$]+):\(\)=>52[,}]",
    "ENVIRON_GET": r"[{,]([\w$]+):\([\w$]+,[\w$]+\)=>\{var [\w$]+=0,[\w$]+=0,[\w$]+;"
                   r"for\([\w$]+ of [\w$]+\(\)\)",
    "ENVIRON_SIZES_GET": r"[{,]([\w$]+):\([\w$]+,[\w$]+\)=>\{var [\w$]+=[\w$]+\(\);"
                         r"[\w$]+\[[\w$]+>>2\]=[\w$]+\.length",
    "NORMALIZE_MODULE": r"[{,]([\w$]+):function\([\w$,]*\)\{[^}]*callbacks\.normalizeModule\(",
    "LOAD_MODULE_SOURCE": r"[{,]([\w$]+):function\([\w$,]*\)\{[^}]*callbacks\.loadModuleSource\(",
    "SHOULD_INTERRUPT": r"[{,]([\w$]+):function\([\w$,]*\)\{return c\.callbacks\.shouldInterrupt\(",
    "SETITIMER": r"[{,]([\w$]+):\([\w$]+,[\w$]+\)=>\{[\w$]+\[[\w$]+\]&&\(clearTimeout",
    "RESIZE_HEAP": r"[{,]([\w$]+):[\w$]+=>\{var [\w$]+=[\w$]+\.length;[\w$]+>>>=0;"
                   r"if\(2147483648<",
    "KEEPALIVE_CLEAR": r"[{,]([\w$]+):\(\)=>\{[\w$]+=!1;[\w$]+=0\}",
    "LOCALTIME": r"[{,]([\w$]+):function\([\w$]+,[\w$]+\)\{[^}]*\.getSeconds\(\)",
    "TZSET": r"[{,]([\w$]+):\([\w$]+,[\w$]+,[\w$]+,[\w$]+\)=>\{var [\w$]+=\(new Date\)"
             r"\.getFullYear\(\)",
    "FD_SEEK": r"[{,]([\w$]+):function\(\)\{return 70\}",
    "DATE_NOW": r"[{,]([\w$]+):\(\)=>Date\.now\(\)",
    "ABORT": r"[{,]([\w$]+):\(\)=>[\w$]+\(\"\"\)",
    "PROC_EXIT": r"[{,]([\w$]+):{EXIT}[,}]",
    "CALL_FUNCTION": r"[{,]([\w$]+):function\([\w$,]*\)\{return c\.callbacks\.callFunction\(",
    "FREE_HOST_REF": r"[{,]([\w$]+):function\([\w$,]*\)\{c\.callbacks\.freeHostRef\(",
}


def mangle(name):
    """wasm2c 1.0.32's name mangling: [A-Za-z0-9_] except 'Z' kept, everything else Z<hex>."""
    out = []
    for ch in name:
        if (ch.isascii() and ch.isalnum() and ch != "Z") or ch == "_":
            out.append(ch)
        else:
            out.append("Z%02X" % ord(ch))
    return "".join(out)


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    cjs = open(argv[1], encoding="utf-8").read().replace("\n", "").replace("\r", "")
    header = open(argv[2], encoding="utf-8").read()
    errors = []

    def one(pattern, what):
        found = sorted(set(re.findall(pattern, cjs)))
        if len(found) != 1:
            errors.append(f"{what}: expected one match in the .cjs, found {found or 'none'}")
            return None
        return found[0]

    mem_var = one(r"c\.wasmMemory\?([\w$]+)=c\.wasmMemory:", "the memory variable")
    exit_var = one(r"[;,]([\w$]+)=[\w$]+=>\{[\w$]+=[\w$]+;[\w$]+\|\|0<[\w$]+\|\|\(c\.onExit",
                   "the exit function")
    module_imports = re.findall(r"/\* import: 'a' '([^']+)' \*/", header)
    if not module_imports:
        errors.append("no imports of module 'a' in the wasm2c header")

    imports = {}
    if mem_var and exit_var:
        for role, pattern in IMPORT_ROLES.items():
            pattern = pattern.replace("{MEM}", re.escape(mem_var)).replace(
                "{EXIT}", re.escape(exit_var))
            name = one(pattern, f"import {role}")
            if name is not None:
                imports[role] = name
    claimed = {}
    for role, name in imports.items():
        if name in claimed:
            errors.append(f"imports {claimed[name]} and {role} both matched '{name}'")
        claimed[name] = role
    for name in module_imports:
        if name not in claimed:
            errors.append(f"import '{name}' of the module has no known role")
    for role, name in imports.items():
        if name not in module_imports:
            errors.append(f"import {role} ('{name}') is not imported by the module")

    exports = re.findall(r"c\._([A-Za-z_][\w]*)=b\.([\w$]+)", cjs)
    ctors = one(r"[\w$]+\.([\w$]+)\(\);[\w$]+\?\.\(c\)", "the constructors export")
    module_exports = set(re.findall(r"/\* export: '([^']+)' \*/", header))
    for c_name, wasm_name in exports:
        if wasm_name not in module_exports:
            errors.append(f"export {c_name} ('{wasm_name}') is not exported by the module")
    if ctors is not None and ctors not in module_exports:
        errors.append(f"constructors export '{ctors}' is not exported by the module")
    if len(exports) < 40:
        errors.append(f"only {len(exports)} exports found in the .cjs")

    if errors:
        for e in errors:
            sys.stderr.write(f"gen_qjs_abi: {e}\n")
        return 1

    lines = [
        "// Generated by src/interp/gen_qjs_abi.py from the package's emscripten-module.cjs.",
        "// Do not edit. Maps each role of the QuickJS WebAssembly module to wasm2c's name.",
        "#ifndef AIRLOCK_QJS_ABI_H_",
        "#define AIRLOCK_QJS_ABI_H_",
        "",
    ]
    for role in IMPORT_ROLES:
        lines.append(f"#define QJS_IMPORT_{role} Z_aZ_{mangle(imports[role])}")
    lines.append("")
    lines.append(f"#define QJS_EXPORT_CTORS Z_qjsZ_{mangle(ctors)}")
    for c_name, wasm_name in exports:
        lines.append(f"#define QJS_EXPORT_{c_name} Z_qjsZ_{mangle(wasm_name)}")
    lines += ["", "#endif  // AIRLOCK_QJS_ABI_H_", ""]
    with open(argv[3], "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
