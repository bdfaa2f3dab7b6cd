#!/usr/bin/env bash
# bench/interp/run.sh [BUILD_DIR] [RUNS]: the interpreter's benchmarks side by side with reference
# engines running the same workloads (bench/interp/workloads):
#   airlock            interp_bench (QuickJS 2025 .wasm -> wasm2c -> gcc -O2, in-process)
#   quickjs-emscripten the same .wasm under Node's V8 (npm quickjs-emscripten-core 0.32.0)
#   quickjs-native     QuickJS 2021-03-27 built natively with gcc -O2 from the C source in npm's
#                      qjsc 0.3.0 (the only QuickJS C source on npm; sha256 pinned below)
#   v8                 the workload as plain JavaScript in Node (a JIT, for scale)
# Prints medians of RUNS rounds (default 7); in each round every engine runs every workload (our
# figures are Google Benchmark's mean of a round). Needs the build (scripts/build BUILD_DIR), npm
# and node.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
runs=${2:-7}
work=$build/bench/interp/ref
mkdir -p "$work"
workloads=(bench/interp/workloads/loop.js bench/interp/workloads/json.js
           bench/interp/workloads/fib.js)

cmake --build "$build" --target interp_bench >/dev/null
if [[ ! -d bench/interp/node_modules/quickjs-emscripten-core ]]; then
  (cd bench/interp && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
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

# The engines take turns workload by workload, round after round, so that the machine's slow and
# fast phases (it is shared) fall on all of them alike; the ratio to native is taken per round.
rm -f "$work"/airlock-*.json "$work/node.jsonl" "$work/native.jsonl"
declare -A filter=([loop]=BM_Loop [json]=BM_Json [fib]=BM_Fib)
for ((round = 1; round <= runs; round++)); do
  "$build/bench/interp/interp_bench" --benchmark_min_time=0.2 \
    --benchmark_filter='BM_(Fresh|Snapshot|Restore|Idle)' \
    --benchmark_out="$work/airlock-$round-other.json" --benchmark_out_format=json >/dev/null 2>&1
  for w in loop json fib; do
    "$build/bench/interp/interp_bench" --benchmark_min_time=0.2 --benchmark_filter="${filter[$w]}" \
      --benchmark_out="$work/airlock-$round-$w.json" --benchmark_out_format=json >/dev/null 2>&1
    "$work/native_ref" 3 "bench/interp/workloads/$w.js" |
      sed "s/^{/{\"round\":$round,/" >>"$work/native.jsonl"
    node bench/interp/node_ref.mjs 3 "bench/interp/workloads/$w.js" |
      sed "s/^{/{\"round\":$round,/" >>"$work/node.jsonl"
  done
done

python3 - "$work" "$runs" <<'PY'
import glob, json, statistics, sys
work, runs = sys.argv[1], sys.argv[2]
rounds = {}
by_round = {}
for f in glob.glob(f"{work}/airlock-*.json"):
    rnd = int(f.rsplit("/", 1)[1].split("-")[1])
    for b in json.load(open(f))["benchmarks"]:
        name = b["run_name"].split("/")[0]
        rounds.setdefault(name, []).append(b)
        by_round[(name, rnd)] = b["real_time"]
ours = {}
for name, bs in rounds.items():
    ours[name] = {k: statistics.median(b[k] for b in bs)
                  for k in ("real_time", "cpu_time", "snapshot_bytes", "idle_rss_bytes")
                  if k in bs[0]}
samples = {}
ref_round = {}
for f in ("node.jsonl", "native.jsonl"):
    for line in open(f"{work}/{f}"):
        r = json.loads(line)
        samples.setdefault((r["engine"], r["bench"]), []).extend(r["ms"])
        ref_round[(r["engine"], r["bench"], r["round"])] = statistics.median(r["ms"])
refs = {k: statistics.median(v) for k, v in samples.items()}

def paired_ratio(bench, bm):
    ratios = [by_round[(bm, rnd)] / ref_round[("quickjs-native", bench, rnd)]
              for (name, rnd) in by_round if name == bm
              and ("quickjs-native", bench, rnd) in ref_round]
    return statistics.median(ratios) if ratios else None

def cell(v):
    return "-" if v is None else (f"{v:.3f}" if v < 1 else f"{v:.1f}")

names = {"fresh": "BM_FreshInterpreter", "loop": "BM_Loop", "json": "BM_Json", "fib": "BM_Fib"}
print(f"medians of {runs} interleaved rounds, ms (airlock: wall / CPU)")
print(f"| bench | airlock wall | airlock cpu | quickjs-emscripten | quickjs-native | v8 | "
      f"airlock/native (per round) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for bench, bm in names.items():
    o = ours[bm]
    native = refs.get(("quickjs-native", bench))
    paired = paired_ratio(bench, bm) if bench != "fresh" else None
    ratio = f"{paired:.2f}x" if paired else (f"{o['real_time'] / native:.2f}x" if native else "-")
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
