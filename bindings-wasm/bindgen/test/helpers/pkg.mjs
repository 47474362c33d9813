// The package under test and its wasm-bindgen exports, for the tests, in Deno and in Node
// alike. The build under test is pkg/ (the full build), or the one the environment variable
// HEART_FLEET_PKG names (`pkg-edge`).
//
// `api` is the package's ES module. `native` is a second instance of the full build's
// optimized .wasm (pkg/heart_fleet_bg.wasm) through its wasm-bindgen glue: the package never
// exposes its native module, so the raw-export tests and the reference replay
// (`nativeReplay`) use this one.

import { readFileSync } from 'node:fs';
import * as native from '../../build/pkg/glue/heart_fleet_wasm.js';

export const isDeno = typeof Deno !== 'undefined';

/** The build under test: `pkg` or `pkg-edge`. */
export const build = (isDeno ? Deno.env.get('HEART_FLEET_PKG') : process.env.HEART_FLEET_PKG) || 'pkg';
if (build !== 'pkg' && build !== 'pkg-edge') throw new Error(`HEART_FLEET_PKG must be pkg or pkg-edge, got ${build}`);
const api = await import(`../../${build}/heart_fleet.js`);

native.initSync({ module: readFileSync(new URL('../../pkg/heart_fleet_bg.wasm', import.meta.url)) });

/** A private in-memory Deno KV database (Deno only). */
export async function openKv() {
  return Deno.openKv(':memory:');
}

/** A run with the core's defaults (RunRow::seeded), from the wasm module: what tests build rows from. */
export function runRow(id, at) {
  return JSON.parse(native.seededRowJson('agent_runs', id, at));
}

export { api, native };
