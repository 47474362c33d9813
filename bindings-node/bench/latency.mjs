// The acquire → verify → release cycle over the reference's four-method store when each
// getRun and conditionalUpdate takes a network round trip (a setTimeout of `--latency` ms;
// now() stays local): what a store over Supabase or another service pays in calls, side by
// side with the pure-JS reference over the same kind of store, interleaved rounds in one
// process. `--also <dir>` adds another build of this package (say, a worktree of an older
// commit) to the same rounds.
//
//   node bench/latency.mjs [--latency 2] [--to completed|ready] [--rounds 3] [--cycles 100] [--also <dir>]

import { createRequire } from 'node:module';
import { JsHeartFleet, JsMemoryLeaseStore } from './reference-js.mjs';
import { cycle } from './cycle.mjs';

const require = createRequire(import.meta.url);
const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const latency = Number(arg('--latency', 2));
const to = arg('--to', 'completed');
const rounds = Number(arg('--rounds', 3));
const cycles = Number(arg('--cycles', 100));
const also = arg('--also', null);

const T0 = new Date('2026-07-30T00:00:00.000Z');
const roundTrip = () => new Promise((resolve) => setTimeout(resolve, latency));

/** The reference's memory store, its reads and writes a round trip away. */
class RemoteLeaseStore extends JsMemoryLeaseStore {
  async getRun(id) {
    await roundTrip();
    return super.getRun(id);
  }

  async conditionalUpdate(id, updates, conditions) {
    await roundTrip();
    return super.conditionalUpdate(id, updates, conditions);
  }

  async findExpiredLeases() {
    return [];
  }
}

function remoteStore() {
  const store = new RemoteLeaseStore(T0);
  store.insert({ id: 'r', status: 'ready', lease_owner: null, lease_expires_at: null, retries: 0, idempotency_key: 'heart:resource:bench' });
  return store;
}

const packages = { 'heart-fleet': require('../index.cjs') };
if (also) packages[`heart-fleet at ${also}`] = require(`${also}/index.cjs`);
const variants = [['the pure-JS reference', JsHeartFleet]].concat(Object.entries(packages).map(([name, pkg]) => [name, pkg.HeartFleet]));
const runs = variants.map(([name, Fleet]) => {
  const store = remoteStore();
  return { name, store, heart: new Fleet({ store, onReceipt: () => {} }), times: [] };
});

async function round(v, n) {
  const t = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    await cycle(v.heart, 'r', to);
    // A final status ends the run: back to ready for the next cycle (a local write).
    v.store.rows.get('r').status = 'ready';
  }
  return Number(process.hrtime.bigint() - t) / 1e6 / n;
}

for (const v of runs) await round(v, 5);
for (let r = 0; r < rounds; r++) for (const v of runs) v.times.push(await round(v, cycles));
console.log(`latency ${latency} ms per getRun/conditionalUpdate, release to ${to}, ${cycles} cycles a round\n`);
console.log('| cycle | ms per cycle, rounds | against the reference |');
console.log('|---|---|---|');
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
for (const v of runs) {
  const ratio = median(runs[0].times) / median(v.times);
  console.log(`| ${v.name} | ${v.times.map((t) => t.toFixed(2)).join(' / ')} | ${ratio.toFixed(2)}× |`);
}
