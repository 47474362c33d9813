// heart-fleet-wasm: instantiates the wasm-bindgen module and fills the native slot with its
// exports. The entry point imports this first, so the fill (a top-level await) is done before
// the Node package's driver is evaluated: the driver may read the native module when it loads
// (the constants it exports come from the core).

import * as glue from 'heart-fleet-glue';
import * as receipts from 'heart-fleet-receipts-glue';
import native from './native-slot.cjs';

/** The bytes of a .wasm next to this file: Deno.readFile, node:fs, or fetch. */
async function wasmBytes(name) {
  const url = new URL(name, import.meta.url);
  if (url.protocol === 'file:') {
    if (typeof Deno !== 'undefined' && typeof Deno.readFile === 'function') return Deno.readFile(url);
    const fs = await import('node:fs/promises');
    return fs.readFile(url);
  }
  const res = await fetch(url);
  if (!res.ok) throw new Error(`heart-fleet-wasm: fetching ${url} answered ${res.status}`);
  return new Uint8Array(await res.arrayBuffer());
}

// The lease module and (full build only) the receipt-log verifier, fetched side by side. A
// verifier that cannot be loaded (a deployment without heart_fleet_receipts_bg.wasm) leaves
// the lease API working; verifyReceipts then throws, naming the file and why.
let verifierError = null;
const [leaseBytes, verifierBytes] = await Promise.all([
  wasmBytes('heart_fleet_bg.wasm'),
  receipts.initSync
    ? wasmBytes('heart_fleet_receipts_bg.wasm').catch((e) => {
        verifierError = e;
        return null;
      })
    : null,
]);
glue.initSync({ module: leaseBytes });
for (const [name, value] of Object.entries(glue)) {
  if (name !== 'default' && name !== 'initSync') native[name] = value;
}
if (verifierBytes) {
  receipts.initSync({ module: verifierBytes });
  native.verifyReceiptsJson = receipts.verifyReceiptsJson;
}

// The edge build leaves out the SQL rendering (PgLeaseStore), the scenario replay and the
// receipt-log verifier (with its signature crates about 100 KB of wasm, more than the edge
// budget leaves): what needs them fails with a coded error that says so, not a TypeError
// from deep inside.
function missing(what) {
  return () => {
    const e = new Error(`${what} is not in the edge build of heart-fleet-wasm (pkg-edge); use the full build (pkg)`);
    e.code = 'invalid-state';
    throw e;
  };
}
for (const name of ['sqlRender', 'sqlDecode', 'sqlMigrationPlan', 'sqlReceiptInsert', 'postgresDeadlines', 'serverStatementTimeoutMs', 'nativeReplay', 'scenarioConfig']) {
  if (typeof native[name] !== 'function') native[name] = missing(name);
}
if (verifierError) {
  native.verifyReceiptsJson = () => {
    const e = new Error(`verifyReceipts: heart_fleet_receipts_bg.wasm, the receipt verifier of this build, could not be loaded: ${verifierError.message}`);
    e.code = 'invalid-state';
    throw e;
  };
} else if (typeof native.verifyReceiptsJson !== 'function') {
  native.verifyReceiptsJson = missing('verifyReceipts');
}
