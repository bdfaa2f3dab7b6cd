// References under Node for bench/interp/run.sh, on the same workloads as interp_bench:
//   quickjs-emscripten: the same QuickJS .wasm (npm 0.32.0), run by Node's V8 WebAssembly engine;
//   v8: the workload as plain JavaScript in Node (a JIT, for scale).
// usage: node node_ref.mjs RUNS WORKLOAD.js...  -> one JSON line per measurement
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { performance } from 'node:perf_hooks';
import { newQuickJSWASMModuleFromVariant } from 'quickjs-emscripten-core';
import variant from '@jitl/quickjs-wasmfile-release-sync';

const runs = Number(process.argv[2]);
const files = process.argv.slice(3);
const print = (engine, bench, ms) => console.log(JSON.stringify({ engine, bench, ms }));

const QuickJS = await newQuickJSWASMModuleFromVariant(variant);
{
  const ms = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    for (let k = 0; k < 100; k++) {
      const rt = QuickJS.newRuntime();
      const ctx = rt.newContext();
      ctx.dispose();
      rt.dispose();
    }
    ms.push((performance.now() - t0) / 100);
  }
  print('quickjs-emscripten', 'fresh', ms);
}
for (const file of files) {
  const body = readFileSync(file, 'utf8');
  const name = basename(file, '.js');
  // One untimed run first: V8 compiles WebAssembly with a baseline tier and optimizes later, and
  // a JIT warms up; the other engines have nothing to warm.
  {
    const rt = QuickJS.newRuntime();
    const ctx = rt.newContext();
    ctx.unwrapResult(ctx.evalCode(`(function () {${body}\n})()`)).dispose();
    ctx.dispose();
    rt.dispose();
    new Function(body)();
  }
  const ms = [];
  for (let i = 0; i < runs; i++) {
    const rt = QuickJS.newRuntime();
    const ctx = rt.newContext();
    const t0 = performance.now();
    const result = ctx.evalCode(`(function () {${body}\n})()`);
    ms.push(performance.now() - t0);
    ctx.unwrapResult(result).dispose();
    ctx.dispose();
    rt.dispose();
  }
  print('quickjs-emscripten', name, ms);
  const v8 = [];
  for (let i = 0; i < runs; i++) {
    const fn = new Function(body);
    const t0 = performance.now();
    fn();
    v8.push(performance.now() - t0);
  }
  print('v8', name, v8);
}
