// airlock-zygote-node: the fork-server's Node template. Started by the fork-server (never by hand)
// with its socket on fd 3. Loads the addon (zygote_node.cc: why forking node is sound), runs the
// preload (`--preload "require('lodash')"`) once, says ready, and serves fork requests. serve()
// returns only in a worker, contained in its fresh sandbox: the code then runs as `node -e CODE`
// would run it, sharing the zygote's heap copy-on-write, and the worker ends like `node -e`: exit
// code 0, process.exitCode, process.exit's code, or 1 after an uncaught exception (printed on
// stderr). The launcher (zygote_node.sh.in) runs node with --single-threaded --v8-pool-size=1,
// which keep its helper threads idle (see the addon).
'use strict';

const addonFile = require.resolve(`${__dirname}/airlock-zygote-node.node`);
const zygote = require(addonFile);
if (process.version !== zygote.builtFor) {
  zygote.diagnose(`built for node ${zygote.builtFor}, running on ${process.version}`);
  process.exit(2);
}
// What every worker uses, loaded once here.
const crypto = require('crypto');
const Module = require('module');
const path = require('path');
const url = require('url');
const vm = require('vm');
const workerThreads = require('worker_threads');

const args = process.argv.slice(2);
let preload = '';
for (let i = 0; i < args.length; ++i) {
  if (args[i] === '--preload' && i + 1 < args.length) {
    preload = args[++i];
  } else {
    zygote.diagnose(`unknown argument ${args[i]}`);
    process.exit(2);
  }
}

// Runs `code` as `node -e` runs it: in the global scope, with require, module, exports,
// __filename and __dirname for a module named `name` in the current directory.
function evalAsScript(code, name) {
  const directory = process.cwd();
  const filename = path.join(directory, name);
  const module = new Module(name);
  module.filename = filename;
  module.paths = Module._nodeModulePaths(directory);
  Object.assign(globalThis, {
    module,
    exports: module.exports,
    require: Module.createRequire(filename),
    __filename: name,
    __dirname: '.',
  });
  return vm.runInThisContext(code, {
    filename: name,
    displayErrors: true,
    // import() resolves as in `node -e`: with node's own loader from node 20.12, before that
    // through a callback (which needs --experimental-vm-modules; the launcher adds it there).
    importModuleDynamically: vm.constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER ??
        ((specifier, script, assertions) => importFrom(directory, specifier, assertions)),
  });
}

// import() for node before 20.12: the specifier resolved as from a script in `directory` (the
// callback's own import() would resolve it from this file). Packages resolve as require() finds
// them (the "require" export, NODE_PATH), not as node's ESM loader would.
function importFrom(directory, specifier, assertions) {
  let target = specifier;
  if (/^\.{0,2}\//.test(specifier)) {
    target = url.pathToFileURL(path.resolve(directory, specifier)).href;
  } else if (!/^[a-z][a-z0-9+.-]*:/i.test(specifier) && !Module.isBuiltin(specifier)) {
    const require = Module.createRequire(path.join(directory, '[eval]'));
    target = url.pathToFileURL(require.resolve(specifier)).href;
  }
  return import(target, { assert: assertions ?? {} });
}

// Math.random's state is the zygote's in every worker; each worker draws a new seed. The
// generator is xoshiro128** (V8's own is xorshift128+); 53 random bits per number.
function reseedMathRandom() {
  const s = crypto.randomFillSync(new Uint32Array(4));
  if ((s[0] | s[1] | s[2] | s[3]) === 0) s[0] = 1;
  const next = () => {
    const rotl = (x, k) => (x << k) | (x >>> (32 - k));
    const result = Math.imul(rotl(Math.imul(s[1], 5), 7), 9) >>> 0;
    const t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return result;
  };
  Object.defineProperty(Math, 'random', {
    value: function random() {
      return ((next() >>> 5) * 67108864 + (next() >>> 6)) / 9007199254740992;
    },
    writable: true,
    configurable: true,
    enumerable: false,
  });
}

function startWorker(request) {
  for (const name of Object.keys(process.env)) delete process.env[name];
  for (const entry of request.env) {
    const eq = entry.indexOf('=');
    if (eq > 0) process.env[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  process.chdir(request.cwd);  // node caches the working directory; this renews it
  Module._initPaths();  // the global module folders follow the worker's NODE_PATH and HOME
  Object.defineProperty(process, 'pid', { value: request.pid, enumerable: true, configurable: true });
  process.argv = [process.argv[0]];
  process.execArgv = [];
  // `node -e` has no main module, and nothing of the bootstrap is in require.cache.
  delete process.mainModule;
  delete Module._cache[__filename];
  delete Module._cache[addonFile];
  reseedMathRandom();
  // A worker thread's own event loop would end in node's wait for the helper threads (see the
  // addon), which a forked worker does not have: refused with an error instead of a hang.
  Object.defineProperty(workerThreads, 'Worker', {
    value: class Worker {
      constructor() {
        const error = new Error(
          'worker_threads.Worker is not available in a fork-server worker (node\'s helper ' +
          'threads are not forked); run the code with `airlock run -- node` instead');
        error.code = 'ERR_AIRLOCK_NO_WORKER_THREADS';
        throw error;
      }
    },
    enumerable: true,
    configurable: true,
    writable: true,
  });
  // node -e imports with the same loader and says nothing; here node calls the option experimental.
  const emitWarning = process.emitWarning;
  process.emitWarning = function (warning, ...rest) {
    if (String(warning).includes('vm.USE_MAIN_CONTEXT_DEFAULT_LOADER')) return undefined;
    return Reflect.apply(emitWarning, this, [warning, ...rest]);
  };
  // The end of the loop, as node would reach it (see the addon: node's own wait there never ends
  // in a worker).
  const exit = process.exit;  // node's own, even if the code replaces it
  zygote.watchLoop(
    () => process.emit('beforeExit', Number(process.exitCode ?? 0) | 0),
    () => Reflect.apply(exit, process, []));
  evalAsScript(request.code, '[eval]');
}

try {
  if (preload !== '') evalAsScript(preload, '[preload]');
  // A rehearsal of what every worker does, so that V8 compiles it once, here: running code, and
  // console output (stdout and stderr are /dev/null in the zygote; see the addon).
  evalAsScript('void 0', '[warm-up]');
  console.log('');
  console.error('');
} catch (e) {
  zygote.diagnose(`the preload failed: ${e && e.stack ? e.stack : e}`);
  process.exit(3);
}
try {
  zygote.ready();
} catch (e) {
  zygote.diagnose(e.message);
  process.exit(4);
}
const request = zygote.serve();
if (request !== undefined) startWorker(request);
