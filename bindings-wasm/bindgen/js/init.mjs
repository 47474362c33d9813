// heart-fleet-wasm: instantiates the wasm-bindgen module and fills the native slot with its
// exports. The entry point imports this first, so the fill (a top-level await) is done before
// the Node package's driver is evaluated: the driver may read the native module when it loads
// (the constants it exports come from the core).

import * as glue from 'heart-fleet-glue';
import native from './native-slot.cjs';

const WASM = 'heart_fleet_bg.wasm';

/** The bytes of the .wasm next to this file: Deno.readFile, node:fs, or fetch. */
async function wasmBytes() {
  const url = new URL(WASM, import.meta.url);
  if (url.protocol === 'file:') {
    if (typeof Deno !== 'undefined' && typeof Deno.readFile === 'function') return Deno.readFile(url);
    const fs = await import('node:fs/promises');
    return fs.readFile(url);
  }
  const res = await fetch(url);
  if (!res.ok) throw new Error(`heart-fleet-wasm: fetching ${url} answered ${res.status}`);
  return new Uint8Array(await res.arrayBuffer());
}

glue.initSync({ module: await wasmBytes() });
for (const [name, value] of Object.entries(glue)) {
  if (name !== 'default' && name !== 'initSync') native[name] = value;
}

// The edge build leaves out the SQL rendering (PgLeaseStore) and the scenario replay: what
// needs them fails with a coded error that says so, not a TypeError from deep inside.
function missing(what) {
  return () => {
    const e = new Error(`${what} is not in the edge build of heart-fleet-wasm (pkg-edge); use the full build (pkg)`);
    e.code = 'invalid-state';
    throw e;
  };
}
for (const name of ['sqlRender', 'sqlDecode', 'sqlMigrationPlan', 'sqlReceiptInsert', 'nativeReplay', 'scenarioConfig']) {
  if (typeof native[name] !== 'function') native[name] = missing(name);
}
// Neither build has the receipt chain's verifier: with its signature crates it is about 100 KB of
// wasm, more than either build's size budget leaves.
native.verifyReceiptsJson = () => {
  const e = new Error('verifyReceipts is not in heart-fleet-wasm (its size budget leaves the receipt chain out); verify logs with the Node package, Python or the heart-fleet CLI');
  e.code = 'invalid-state';
  throw e;
};
