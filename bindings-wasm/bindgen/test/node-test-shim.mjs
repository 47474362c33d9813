// `node:test` as the Node package's test files see it when they run against heart-fleet-wasm
// (mapped in by test/import-map.json for Deno and test/node-hooks.mjs for Node). It is the
// real node:test, except that the few tests about the napi-rs package itself are reported
// as skipped, with the reason; test/native.test.mjs covers the same ground for this package.

import * as real from 'node:test';

export const NAPI_ONLY = Object.freeze({
  'the CommonJS and ES module entry points export the same API':
    "about the npm package's two entry points, its package.json and its napi module (native.test.mjs checks this package's exports)",
  "the heartbeat timer is unref'd: a process with only a lease running can exit":
    'spawns `node` on the napi package (index.cjs)',
  'the process survives garbage sent straight to the native module':
    "feeds the napi module (lib/native.cjs); native.test.mjs does this to the wasm module's raw exports",
});

export function test(name, options, fn) {
  const reason = NAPI_ONLY[name];
  if (reason === undefined) return real.test(name, options, fn);
  const body = typeof options === 'function' ? options : fn;
  return real.test(name, { skip: `napi-only: ${reason}` }, body);
}

export const { describe, it, before, after, beforeEach, afterEach, mock } = real;
export default test;
