// Benchmarks (tinybench) of the Node binding:
//
// 1. the acquire → verify → release cycle (3 receipts, each handed to a sink that drops it):
//    a pure-JS equivalent of the reference over its async JS memory store, this binding over
//    the Rust MemoryLeaseStore (driven inside Rust), and this binding over JS store objects
//    (sync and async `execute`, forwarding to the Rust memory store as JSON), and this
//    binding over the reference's four-method store contract on a JS Map;
// 2. canonicalize + digest of small, medium and large values: this binding's `digest` against
//    a baseline of JSON.stringify over recursively sorted keys + node:crypto sha256.
//
//   npm run bench              (about 2 s per task)
//   node bench/bench.mjs --time 500
//   node bench/bench.mjs --also <dir>   (also that build of this package, a worktree of an
//                                        older commit with its own native module: its memory-
//                                        store and four-method cycles, in the same process)
//
// Prints a Markdown table (for BENCHMARKS.md) and the ratios the issue aims at.

import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Bench } from 'tinybench';
import { HeartFleet, MemoryLeaseStore, digest, canonicalize } from '../index.mjs';
import { JsHeartFleet, JsMemoryLeaseStore, canonicalizeJs, sortedStringifyDigest } from './reference-js.mjs';
import { cycle } from './cycle.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const time = arg('--time', 2000);
const alsoAt = process.argv.indexOf('--also');
const also = alsoAt >= 0 ? process.argv[alsoAt + 1] : null;
const T0 = new Date('2026-07-30T00:00:00.000Z');
const drop = () => {};

// 1. pure JS (the reference's behaviour, its async memory store)
const jsStore = new JsMemoryLeaseStore(T0);
jsStore.insert({ id: 'run-js', status: 'ready', lease_owner: null, lease_expires_at: null, retries: 0, idempotency_key: 'k' });
const jsHeart = new JsHeartFleet({ store: jsStore, onReceipt: drop });

// 2. this binding over the Rust memory store (a resource run, released back to ready)
const mem = new MemoryLeaseStore(T0);
const rustHeart = new HeartFleet({ store: mem, onReceipt: drop });
const { run } = await rustHeart.ensureResourceRun('bench', 'cycle');

// 3. this binding over JS store objects forwarding to a Rust memory store
const mem2 = new MemoryLeaseStore(T0);
const asyncHeart = new HeartFleet({ store: { execute: async (r) => mem2.execute(r) }, onReceipt: drop });
const { run: run2 } = await asyncHeart.ensureResourceRun('bench', 'cycle');
const mem4 = new MemoryLeaseStore(T0);
const textHeart = new HeartFleet({ store: { executeJson: async (t) => mem4.executeJson(t), execute: (r) => mem4.execute(r) }, onReceipt: drop });
const { run: run4 } = await textHeart.ensureResourceRun('bench', 'cycle');
const mem3 = new MemoryLeaseStore(T0);
const syncHeart = new HeartFleet({ store: { execute: (r) => mem3.execute(r) }, onReceipt: drop });
const { run: run3 } = await syncHeart.ensureResourceRun('bench', 'cycle');

// 4. this binding over the reference's own four-method store contract (getRun,
//    conditionalUpdate, findExpiredLeases, now) over a JS Map: the same kind of object the
//    pure-JS reference runs over in 1.
class MapLeaseStore extends JsMemoryLeaseStore {
  async findExpiredLeases(nowIso, limit) {
    const now = Date.parse(nowIso);
    const held = [...this.rows.values()].filter((r) => (r.status === 'leased' || r.status === 'running') && (!r.lease_expires_at || Date.parse(r.lease_expires_at) <= now));
    return held.slice(0, limit).map((r) => ({ ...r }));
  }
}
const mapStore = new MapLeaseStore(T0);
mapStore.insert({ id: 'run-map', status: 'ready', lease_owner: null, lease_expires_at: null, retries: 0, idempotency_key: 'heart:resource:bench-map' });
const mapHeart = new HeartFleet({ store: mapStore, onReceipt: drop });

// Without a sink: receipts kept in Rust (a fresh fleet per 20 000 cycles bounds the memory).
let keptHeart = new HeartFleet({ store: mem, maxRetries: 5 });
let kept = 0;

// The same cycle as bare native calls (the core's compact answers through napi, the token's
// values taken from the split answer, nothing else decoded; no JS API layer): the floor this
// binding's JS layer adds to.
const memBare = new MemoryLeaseStore(T0);
const bareHeart = new HeartFleet({ store: memBare, onReceipt: drop });
const { run: runBare } = await bareHeart.ensureResourceRun('bench', 'cycle');
const bare = bareHeart[Symbol.for('heart-fleet.native')];
function bareCycle() {
  const a = bare.acquireCompact(runBare.id, 'worker-A', 60);
  if (a.charCodeAt(0) !== 65) throw new Error('bare: not acquired');
  // The token's four values follow the tag and the row's 18.
  const v = a.split('\x1f');
  const epoch = Number(v[22]);
  if (!bare.verifyFenceCompact(v[19], v[20], v[21], epoch).startsWith('V\x1f1')) throw new Error('bare: not verified');
  if (bare.releaseCompact(v[19], v[20], v[21], epoch, 'ready').charCodeAt(0) !== 82) throw new Error('bare: not released');
}

// The same two cycles through another build of this package (`--also`), for a side-by-side
// comparison in one process.
let other = null;
if (also) {
  const pkg = await import(pathToFileURL(path.join(path.resolve(also), 'index.mjs')).href);
  const otherMem = new pkg.MemoryLeaseStore(T0);
  const otherHeart = new pkg.HeartFleet({ store: otherMem, onReceipt: drop });
  const { run: otherRun } = await otherHeart.ensureResourceRun('bench', 'cycle');
  const otherMap = new MapLeaseStore(T0);
  otherMap.insert({ id: 'run-map', status: 'ready', lease_owner: null, lease_expires_at: null, retries: 0, idempotency_key: 'heart:resource:bench-map' });
  other = { memHeart: otherHeart, runId: otherRun.id, mapHeart: new pkg.HeartFleet({ store: otherMap, onReceipt: drop }) };
}

const cycles = new Bench({ name: 'lease cycle', time, warmupTime: 300 });
cycles
  .add('pure JS (reference behaviour, async JS memory store)', async () => cycle(jsHeart, 'run-js', 'ready'))
  .add('heart-fleet + Rust MemoryLeaseStore (sink)', async () => cycle(rustHeart, run.id, 'ready'))
  .add('heart-fleet + Rust MemoryLeaseStore (receipts kept)', async () => {
    if (++kept % 20_000 === 0) keptHeart = new HeartFleet({ store: mem });
    await cycle(keptHeart, run.id, 'ready');
  })
  .add('bare native calls, compact answers, Rust memory store (no JS API layer; floor)', () => bareCycle())
  .add('heart-fleet + JS store object, sync execute', async () => cycle(syncHeart, run3.id, 'ready'))
  .add('heart-fleet + JS store object, async execute', async () => cycle(asyncHeart, run2.id, 'ready'))
  .add('heart-fleet + JS store object, async executeJson (text)', async () => cycle(textHeart, run4.id, 'ready'))
  .add("heart-fleet + the reference's four-method store over a JS Map", async () => cycle(mapHeart, 'run-map', 'ready'));
if (other) {
  cycles
    .add(`--also ${also}: + Rust MemoryLeaseStore (sink)`, async () => cycle(other.memHeart, other.runId, 'ready'))
    .add(`--also ${also}: + the four-method store over a JS Map`, async () => cycle(other.mapHeart, 'run-map', 'ready'));
}

// 2. canonicalize + digest
const small = { event: 'acquired', runId: '00000000-0000-4000-8000-000000000001', owner: 'worker-A', leaseExpiresAt: '2026-07-30T00:01:00.000Z', effectKey: null };
const medium = {
  chatId: -1001234567890,
  text: 'The weekly digest is ready: '.repeat(8),
  entities: Array.from({ length: 10 }, (_, i) => ({ type: i % 2 ? 'bold' : 'url', offset: i * 7, length: 5, url: i % 2 ? undefined : `https://example.invalid/${i}` })),
  meta: { locale: 'en', retries: 0, price: 118250.5, tags: ['a', 'b', 'ü', '😀'], nested: { z: 1, a: [1, 2, { y: true }] } },
};
const large = Array.from({ length: 1000 }, (_, i) => ({ id: i, name: `item-${i}`, price: i * 1.25, ok: i % 3 === 0, tags: ['x', 'y'] }));
for (const [name, v] of [['small', small], ['medium', medium], ['large', large]]) {
  if (canonicalize(v) !== canonicalizeJs(v)) throw new Error(`canonical mismatch on ${name}`);
  const noUndefined = JSON.parse(JSON.stringify(v));
  if (digest(noUndefined) !== sortedStringifyDigest(noUndefined)) throw new Error(`digest mismatch on ${name}`);
}

const digests = new Bench({ name: 'canonicalize + digest', time, warmupTime: 300 });
for (const [name, v, bytes] of [
  ['small (receipt body)', small, canonicalize(small).length],
  ['medium (message payload)', medium, canonicalize(medium).length],
  ['large (1 000 objects)', large, canonicalize(large).length],
]) {
  digests.add(`heart-fleet digest: ${name}, ${bytes} B`, () => digest(v));
  digests.add(`baseline sorted JSON.stringify + node:crypto: ${name}`, () => sortedStringifyDigest(v));
}

await cycles.run();
await digests.run();

for (const b of [cycles, digests]) {
  for (const t of b.tasks) {
    if (t.result.state !== 'completed') {
      console.error(`${t.name}: ${t.result.state}: ${t.result.error?.stack ?? ''}`);
      process.exit(1);
    }
  }
}
const us = (t) => t.result.latency.mean * 1000;
const row = (t) => `| ${t.name} | ${us(t).toFixed(2)} µs | ${Math.round(1e6 / us(t)).toLocaleString('en-US')} | ±${t.result.latency.rme.toFixed(1)} % | ${t.result.latency.samplesCount ?? t.result.latency.samples?.length ?? ''} |`;
console.log(`\nNode ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model}, load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}, tinybench time ${time} ms per task\n`);
for (const b of [cycles, digests]) {
  console.log(`### ${b.name}\n`);
  console.log('| task | mean | ops/s | rme | samples |');
  console.log('|---|---|---|---|---|');
  for (const t of b.tasks) console.log(row(t));
  console.log('');
}
const [jsT, rustT, , , syncT, asyncT, textT, mapT] = cycles.tasks;
console.log(`cycle: Rust memory store is ${(us(jsT) / us(rustT)).toFixed(2)}× the pure-JS speed (aim ≥ 3×)`);
console.log(
  `cycle: with a JS store object, ${(us(jsT) / us(syncT)).toFixed(2)}× (sync), ${(us(jsT) / us(asyncT)).toFixed(2)}× (async) ` +
    `and ${(us(jsT) / us(textT)).toFixed(2)}× (async, JSON text) the pure-JS speed (aim ≥ 1×)`,
);
console.log(`cycle: over the reference's four-method store on a JS Map, ${(us(jsT) / us(mapT)).toFixed(2)}× the pure-JS speed (aim ≥ 1×)`);
if (other) {
  const [otherMemT, otherMapT] = cycles.tasks.slice(-2);
  console.log(`--also ${also}: Rust memory store ${(us(jsT) / us(otherMemT)).toFixed(2)}×, four-method store ${(us(jsT) / us(otherMapT)).toFixed(2)}× the pure-JS speed`);
}
for (let i = 0; i < digests.tasks.length; i += 2) {
  const [ours, base] = [digests.tasks[i], digests.tasks[i + 1]];
  console.log(`digest: ${ours.name.replace('heart-fleet digest: ', '')}: ${(us(base) / us(ours)).toFixed(2)}× the baseline speed`);
}
