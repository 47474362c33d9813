// The store conformance suite (test/helpers/store-suite.mjs, the port of
// core/src/store_suite.rs) against the stores of this package: the memory store behind the
// JS store contract, and (in Deno) DenoKvLeaseStore over a fresh in-memory Deno KV and over
// a Deno KV file on disk. One test per check and store.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, native, isDeno, openKv } from './helpers/pkg.mjs';
import { runStoreSuite, CHECKS } from './helpers/store-suite.mjs';

/** The memory store with the suite's seeding: rebuilt from its rows plus the seeded ones. */
class SeedableMemoryStore {
  constructor(nowMs) {
    this.mem = new api.MemoryLeaseStore(nowMs);
  }
  execute(request) {
    return this.mem.execute(request);
  }
  seed({ runs = [], intents = [], instances = [] }) {
    const scenario = {
      format: 1,
      name: 'store-suite',
      clock: this.mem.now().toISOString(),
      runs: [...this.mem.runs(), ...runs],
      intents: [...this.mem.intents(), ...intents],
      instances: [...this.mem.instances(), ...instances],
      steps: [],
    };
    this.mem = api.MemoryLeaseStore.fromScenario(JSON.stringify(scenario));
  }
}

const fixtures = [['memory', { fresh: async () => new SeedableMemoryStore(Date.now()) }]];
if (isDeno) {
  const kv = await openKv();
  let n = 0;
  fixtures.push(['deno-kv (:memory:)', { fresh: async () => new api.DenoKvLeaseStore({ kv, prefix: ['suite', (n += 1)] }) }]);
  const path = await Deno.makeTempFile({ suffix: '.kv' });
  const disk = await Deno.openKv(path);
  fixtures.push(['deno-kv (file)', { fresh: async () => new api.DenoKvLeaseStore({ kv: disk, prefix: ['suite', (n += 1)] }) }]);
}

for (const [name, fixture] of fixtures) {
  const report = runStoreSuite(fixture, api, native);
  for (const check of CHECKS) {
    test(`store suite [${name}]: ${check}`, async () => {
      const r = await report;
      const failed = r.failed.find(([c]) => c === check);
      assert.equal(failed ? failed[1] : null, null, `${check} failed on ${name}`);
      assert.ok(r.passed.includes(check), `${check} did not run on ${name}`);
    });
  }
}
