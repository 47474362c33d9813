// The same cycle as cycle.bench.js, in Node: heart-fleet-wasm (this package) against the
// TypeScript reference's behaviour in pure JS over its async JS memory store
// (bindings-node/bench/reference-js.mjs, the baseline of the ratio printed last) and the
// napi-rs package (bindings-node, if built), each over its memory store, and both packages
// over the reference's own four-method store on a JS Map (getRun, conditionalUpdate,
// findExpiredLeases, now: the same kind of object the reference runs over), in one process,
// rounds interleaved. A plain timing loop (no benchmark dependency): 1 s warm-up each, then
// the mean of 3 rounds of 2 s.
//
//   node bench/node-cycle.mjs
//   node bench/node-cycle.mjs <dir>    (also another build of this package's pkg/, say one made
//                                       from an older commit: its two cycles, interleaved too)

import path from 'node:path';
import { pathToFileURL } from 'node:url';
import * as wasm from '../pkg/heart_fleet.js';
import { cycle } from '../../../bindings-node/bench/cycle.mjs';
import { JsHeartFleet, JsMemoryLeaseStore } from '../../../bindings-node/bench/reference-js.mjs';

const T0 = new Date('2026-07-30T00:00:00.000Z');

/** A timing loop over `heart`'s cycle on `runId`: µs per cycle over `ms` milliseconds. */
function looper(heart, runId) {
  return async (ms) => {
    let n = 0;
    const t = performance.now();
    while (performance.now() - t < ms) {
      for (let i = 0; i < 100; i += 1) await cycle(heart, runId);
      n += 100;
    }
    return ((performance.now() - t) * 1000) / n;
  };
}

async function subject(api) {
  const heart = new api.HeartFleet({ store: new api.MemoryLeaseStore(T0), onReceipt: () => {} });
  const { run } = await heart.ensureResourceRun('bench', 'cycle');
  return looper(heart, run.id);
}

/** The reference's four-method store over a JS Map, with a findExpiredLeases of its own. */
class MapLeaseStore extends JsMemoryLeaseStore {
  async findExpiredLeases(nowIso, limit) {
    const now = Date.parse(nowIso);
    const held = [...this.rows.values()].filter((r) => (r.status === 'leased' || r.status === 'running') && (!r.lease_expires_at || Date.parse(r.lease_expires_at) <= now));
    return held.slice(0, limit).map((r) => ({ ...r }));
  }
}

function mapSubject(api) {
  const store = new MapLeaseStore(T0);
  store.insert({ id: 'run-map', status: 'ready', lease_owner: null, lease_expires_at: null, retries: 0, idempotency_key: 'heart:resource:bench-map' });
  return looper(new api.HeartFleet({ store, onReceipt: () => {} }), 'run-map');
}

const referenceStore = new JsMemoryLeaseStore(T0);
referenceStore.insert({ id: 'run-js', status: 'ready', lease_owner: null, lease_expires_at: null, retries: 0, idempotency_key: 'k' });
const subjects = [
  ['the TypeScript reference (pure JS, async JS memory store)', looper(new JsHeartFleet({ store: referenceStore, onReceipt: () => {} }), 'run-js')],
  ['heart-fleet-wasm (wasm-bindgen) + MemoryLeaseStore', await subject(wasm)],
  ["heart-fleet-wasm + the reference's four-method store over a JS Map", mapSubject(wasm)],
];
if (process.argv[2]) {
  const dir = path.resolve(process.argv[2]);
  const other = await import(pathToFileURL(path.join(dir, 'heart_fleet.js')).href);
  subjects.push([`heart-fleet-wasm at ${dir} + MemoryLeaseStore`, await subject(other)]);
  subjects.push([`heart-fleet-wasm at ${dir} + the four-method store over a JS Map`, mapSubject(other)]);
}
try {
  const napi = await import('../../../bindings-node/index.mjs');
  subjects.push(['heart-fleet (napi-rs) + MemoryLeaseStore', await subject(napi)]);
  subjects.push(["heart-fleet (napi-rs) + the reference's four-method store over a JS Map", mapSubject(napi)]);
} catch (e) {
  console.error(`napi package not loaded (${e.message}); build it with \`cd bindings-node && npm run build\``);
}
for (const [, loop] of subjects) await loop(1000);
const rounds = subjects.map(() => []);
for (let r = 0; r < 3; r += 1) {
  for (const [i, [, loop]] of subjects.entries()) rounds[i].push(await loop(2000));
}
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
console.log(`Node ${process.version}`);
const reference = mean(rounds[0]);
for (const [i, [name]] of subjects.entries()) {
  const us = mean(rounds[i]);
  console.log(`| ${name} | ${us.toFixed(2)} µs | ${Math.round(1e6 / us).toLocaleString('en-US')} | ${(reference / us).toFixed(2)}× the reference |`);
}
