#!/usr/bin/env bash
# bench/interp/run.sh [BUILD_DIR] [RUNS]: the interpreter's benchmarks side by side with reference
# engines running the same workloads (bench/interp/workloads):
#   airlock            interp_bench (QuickJS 2025 .wasm -> wasm2c -> gcc -O2, in-process)
#   quickjs-emscripten the same .wasm under Node's V8 (npm quickjs-emscripten-core 0.32.0)
#   quickjs-native     QuickJS 2021-03-27 built natively with gcc -O2 from the C source in npm's
#                      qjsc 0.3.0 (the only QuickJS C source on npm; sha256 pinned below)
#   v8                 the workload as plain JavaScript in Node (a JIT, for scale)
# Prints medians of RUNS runs (default 7). Needs the build (scripts/build BUILD_DIR) and npm.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
runs=${2:-7}
work=$build/bench/interp/ref
mkdir -p "$work"
workloads=(bench/interp/workloads/loop.js bench/interp/workloads/json.js
           bench/interp/workloads/fib.js)

cmake --build "$build" --target interp_bench >/dev/null
"$build/bench/interp/interp_bench" --benchmark_repetitions="$runs" \
  --benchmark_report_aggregates_only=true --benchmark_out="$work/airlock.json" \
  --benchmark_out_format=json >/dev/null

if [[ ! -d bench/interp/node_modules/quickjs-emscripten-core ]]; then
  (cd bench/interp && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
node bench/interp/node_ref.mjs "$runs" "${workloads[@]}" >"$work/node.jsonl"

qjsc_sha=4a9ed1852b334d842d5dac42d1782817ae26310b448de39532451fd45c9ba0ee
if [[ ! -x "$work/native_ref" ]]; then
  (cd "$work" && rm -rf package qjsc-0.3.0.tgz && npm pack qjsc@0.3.0 --loglevel=error >/dev/null)
  echo "$qjsc_sha  $work/qjsc-0.3.0.tgz" | sha256sum --quiet -c
  tar xzf "$work/qjsc-0.3.0.tgz" -C "$work" package/deps/quickjs_2021_03_27
  src=$work/package/deps/quickjs_2021_03_27
  gcc -O2 -w -D_GNU_SOURCE -DCONFIG_VERSION='"2021-03-27"' -I"$src" -o "$work/native_ref" \
    bench/interp/native_ref.c "$src"/quickjs.c "$src"/libregexp.c "$src"/libunicode.c \
    "$src"/cutils.c "$src"/libbf.c -lm -lpthread
fi
"$work/native_ref" "$runs" "${workloads[@]}" >"$work/native.jsonl"

python3 - "$work" "$runs" <<'PY'
import json, statistics, sys
work, runs = sys.argv[1], sys.argv[2]
ours = {}
for b in json.load(open(f"{work}/airlock.json"))["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    ours[b["run_name"].split("/")[0]] = b
refs = {}
for f in ("node.jsonl", "native.jsonl"):
    for line in open(f"{work}/{f}"):
        r = json.loads(line)
        refs[(r["engine"], r["bench"])] = statistics.median(r["ms"])

def cell(v):
    return "-" if v is None else (f"{v:.3f}" if v < 1 else f"{v:.1f}")

names = {"fresh": "BM_FreshInterpreter", "loop": "BM_Loop", "json": "BM_Json", "fib": "BM_Fib"}
print(f"medians of {runs} runs, ms (airlock: wall / CPU)")
print(f"| bench | airlock wall | airlock cpu | quickjs-emscripten | quickjs-native | v8 | "
      f"airlock/native |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for bench, bm in names.items():
    o = ours[bm]
    native = refs.get(("quickjs-native", bench))
    ratio = f"{o['real_time'] / native:.2f}x" if native else "-"
    print(f"| {bench} | {cell(o['real_time'])} | {cell(o['cpu_time'])} | "
          f"{cell(refs.get(('quickjs-emscripten', bench)))} | {cell(native)} | "
          f"{cell(refs.get(('v8', bench)))} | {ratio} |")
snap, restore, finish, idle = (ours[k] for k in
    ("BM_Snapshot", "BM_Restore", "BM_RestoreAndFinish", "BM_IdleMemory"))
print()
print(f"snapshot of a small orchestration state: {snap['real_time']:.2f} ms "
      f"(cpu {snap['cpu_time']:.2f}), {snap['snapshot_bytes'] / 1000:.1f} KB   (goal <= 15 ms, <= 100 KB)")
print(f"restore: {restore['real_time']:.2f} ms (cpu {restore['cpu_time']:.2f})   (goal <= 10 ms); "
      f"restore + resume to the end: {finish['real_time']:.2f} ms")
print(f"fresh interpreter: {ours['BM_FreshInterpreter']['real_time']:.3f} ms   (goal <= 0.5 ms)")
print(f"idle interpreter RSS: {idle['idle_rss_bytes'] / 1024:.0f} KiB   (goal <= 256 KiB)")
PY
