// The same cycle as cycle.bench.js, in Node: heart-fleet-wasm (this package) against the
// napi-rs package (bindings-node, if built), both over their Rust memory store. A plain
// timing loop (no benchmark dependency): 1 s warm-up, then the mean of 3 rounds of 2 s.
//
//   node bench/node-cycle.mjs

import * as wasm from '../pkg/heart_fleet.js';
import { cycle } from '../../../bindings-node/bench/cycle.mjs';

const T0 = new Date('2026-07-30T00:00:00.000Z');

async function measure(api) {
  const heart = new api.HeartFleet({ store: new api.MemoryLeaseStore(T0), onReceipt: () => {} });
  const { run } = await heart.ensureResourceRun('bench', 'cycle');
  const loop = async (ms) => {
    let n = 0;
    const t = performance.now();
    while (performance.now() - t < ms) {
      for (let i = 0; i < 100; i += 1) await cycle(heart, run.id);
      n += 100;
    }
    return ((performance.now() - t) * 1000) / n;
  };
  await loop(1000);
  const rounds = [await loop(2000), await loop(2000), await loop(2000)];
  return rounds.reduce((a, b) => a + b, 0) / rounds.length;
}

const rows = [['heart-fleet-wasm (wasm-bindgen) + MemoryLeaseStore', await measure(wasm)]];
try {
  const napi = await import('../../../bindings-node/index.mjs');
  rows.push(['heart-fleet (napi-rs) + MemoryLeaseStore', await measure(napi)]);
} catch (e) {
  console.error(`napi package not loaded (${e.message}); build it with \`cd bindings-node && npm run build\``);
}
console.log(`Node ${process.version}`);
for (const [name, us] of rows) console.log(`| ${name} | ${us.toFixed(2)} µs | ${Math.round(1e6 / us).toLocaleString('en-US')} |`);
