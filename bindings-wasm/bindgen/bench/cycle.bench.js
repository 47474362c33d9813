// Deno.bench: the acquire → verify → release cycle of heart-fleet-wasm (3 receipts, each
// handed to an onReceipt that drops it), the same cycle as bindings-node/bench/bench.mjs:
// a resource run released back to `ready`, so it repeats.
//
//   deno bench -A --unstable-kv bench/cycle.bench.js
//
// Stores: the memory store inside the wasm module (driven inside the module), an async JS
// store object forwarding to it (every request through the JS async loop), and
// DenoKvLeaseStore over an in-memory Deno KV and over a Deno KV file (SQLite on disk). The
// baseline of the group is the TypeScript reference's behaviour in pure JS over its async JS
// memory store (bindings-node/bench/reference-js.mjs), so the summary's ratios are against it.

import { HeartFleet, MemoryLeaseStore, DenoKvLeaseStore, canonicalize, digest } from '../pkg/heart_fleet.js';
import { cycle } from '../../../bindings-node/bench/cycle.mjs';
import { JsHeartFleet, JsMemoryLeaseStore } from '../../../bindings-node/bench/reference-js.mjs';

const T0 = new Date('2026-07-30T00:00:00.000Z');
const drop = () => {};

async function setup(store) {
  const heart = new HeartFleet({ store, onReceipt: drop });
  const { run } = await heart.ensureResourceRun('bench', 'cycle');
  return [heart, run.id];
}

const [memHeart, memRun] = await setup(new MemoryLeaseStore(T0));
const mem2 = new MemoryLeaseStore(T0);
const [jsHeart, jsRun] = await setup({ execute: async (r) => mem2.execute(r) });
const [kvHeart, kvRun] = await setup(new DenoKvLeaseStore({ kv: await Deno.openKv(':memory:') }));
const file = await Deno.makeTempFile({ suffix: '.kv' });
const [diskHeart, diskRun] = await setup(new DenoKvLeaseStore({ kv: await Deno.openKv(file) }));

const referenceStore = new JsMemoryLeaseStore(T0);
referenceStore.insert({ id: 'run-js', status: 'ready', lease_owner: null, lease_expires_at: null, retries: 0, idempotency_key: 'k' });
const referenceHeart = new JsHeartFleet({ store: referenceStore, onReceipt: drop });
Deno.bench('cycle: the TypeScript reference (pure JS, async JS memory store)', { group: 'cycle', baseline: true }, async () => {
  await cycle(referenceHeart, 'run-js');
});
Deno.bench('cycle: wasm + MemoryLeaseStore (inside the module)', { group: 'cycle' }, async () => {
  await cycle(memHeart, memRun);
});
Deno.bench('cycle: wasm + async JS store object → memory store', { group: 'cycle' }, async () => {
  await cycle(jsHeart, jsRun);
});
Deno.bench('cycle: wasm + DenoKvLeaseStore (:memory:)', { group: 'cycle' }, async () => {
  await cycle(kvHeart, kvRun);
});
Deno.bench('cycle: wasm + DenoKvLeaseStore (file)', { group: 'cycle' }, async () => {
  await cycle(diskHeart, diskRun);
});

const receiptBody = { event: 'acquired', runId: '00000000-0000-4000-8000-000000000001', owner: 'worker-A', leaseExpiresAt: '2026-07-30T00:01:00.000Z', effectKey: null };
Deno.bench('digest: a receipt body (147 B)', { group: 'digest' }, () => {
  digest(receiptBody);
});
Deno.bench('canonicalize: a receipt body', { group: 'digest' }, () => {
  canonicalize(receiptBody);
});
