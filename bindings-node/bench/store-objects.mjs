// The acquire → verify → release cycle over JS store objects only (a sync `execute` and an
// async `executeJson`, each forwarding to a Rust MemoryLeaseStore), steadier than the
// tinybench tasks for comparing two builds of the package side by side: 3,000 warm-up
// cycles, then the median of 7 blocks of 3,000.
//
//   node bench/store-objects.mjs [package dir, default: this package]
//
// Alternate it between two package directories (each with its own native module) to compare.

import { pathToFileURL } from 'node:url';
import path from 'node:path';

const dir = path.resolve(process.argv[2] ?? new URL('..', import.meta.url).pathname);
const { HeartFleet, MemoryLeaseStore } = await import(pathToFileURL(path.join(dir, 'index.mjs')).href);
const { cycle } = await import(pathToFileURL(path.join(dir, 'bench/cycle.mjs')).href);

const T0 = new Date('2026-07-30T00:00:00.000Z');
const drop = () => {};

async function fleetOver(store) {
  const heart = new HeartFleet({ store, onReceipt: drop });
  const { run } = await heart.ensureResourceRun('bench', 'cycle');
  return [heart, run.id];
}

const forSync = new MemoryLeaseStore(T0);
const forText = new MemoryLeaseStore(T0);
const cases = [
  ['sync execute', await fleetOver({ execute: (r) => forSync.execute(r) })],
  ['async executeJson', await fleetOver({ executeJson: async (t) => forText.executeJson(t), execute: (r) => forText.execute(r) })],
];
const out = [];
for (const [name, [heart, runId]] of cases) {
  for (let i = 0; i < 3000; i++) await cycle(heart, runId);
  const blocks = [];
  for (let b = 0; b < 7; b++) {
    const start = performance.now();
    for (let i = 0; i < 3000; i++) await cycle(heart, runId);
    blocks.push(((performance.now() - start) * 1000) / 3000);
  }
  blocks.sort((a, b) => a - b);
  out.push(`${name}: ${blocks[3].toFixed(1)} µs`);
}
console.log(`${dir}: ${out.join(' | ')}`);
