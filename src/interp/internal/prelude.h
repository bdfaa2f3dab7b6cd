// The JavaScript that runs once in every fresh guest, before any script: it hides the one host
// function behind `tools.call` and `console.log` and removes it from the global object, so a
// script reaches the host only through those two, with strings (JSON) crossing the boundary.
#ifndef AIRLOCK_INTERP_INTERNAL_PRELUDE_H_
#define AIRLOCK_INTERP_INTERNAL_PRELUDE_H_

namespace airlock::interp::internal {

// Name of the global the host function is installed under before the prelude removes it.
inline constexpr char kHostFunctionGlobal[] = "__airlock_host";

// Every builtin the prelude uses is captured before any script runs, so a script that replaces
// JSON.parse or Promise.prototype.then changes only what it sees itself.
inline constexpr char kPrelude[] = R"JS((function (host) {
  'use strict';
  const G = globalThis;
  const stringify = JSON.stringify, parse = JSON.parse;
  const ErrorCtor = Error, StringCtor = String, PromiseCtor = Promise;
  const apply = Reflect.apply, freeze = Object.freeze, define = Object.defineProperty;
  const then = PromiseCtor.prototype.then, reject = PromiseCtor.reject;
  const replace = StringCtor.prototype.replace;
  const fail = (message) => apply(reject, PromiseCtor, [new ErrorCtor(message)]);
  const rethrow = (message) => { throw new ErrorCtor(message); };
  const call = function call(name, args) {
    let json;
    try {
      json = args === undefined ? 'null' : stringify(args);
    } catch (e) {
      return fail('tools.call: arguments are not JSON: ' + StringCtor(e && e.message));
    }
    if (json === undefined) json = 'null';
    const r = host('call', stringify(StringCtor(name)), json);
    if (typeof r === 'string') return fail(r);
    return apply(then, r, [parse, rethrow]);
  };
  const show = (v) => {
    if (typeof v === 'string') return v;
    try {
      const s = stringify(v);
      if (s !== undefined) return s;
    } catch (e) {}
    try { return StringCtor(v); } catch (e) { return '[unprintable]'; }
  };
  const log = function log(...args) {
    let out = '';
    for (let i = 0; i < args.length; i++) out += (i ? ' ' : '') + show(args[i]);
    host('log', apply(replace, out, [/\0/g, '\\0']), '');
  };
  const fixed = { writable: false, enumerable: false, configurable: false };
  define(G, 'tools', { ...fixed, value: freeze({ call }) });
  define(G, 'console', { ...fixed, value: freeze({ log }) });
})(globalThis.__airlock_host);
delete globalThis.__airlock_host;
)JS";

}  // namespace airlock::interp::internal

#endif  // AIRLOCK_INTERP_INTERNAL_PRELUDE_H_
