// Replays EVERY scenario of tests/conformance/ through heart-fleet-wasm: over the memory store
// inside the wasm module, over async JS store objects (objects and JSON text) driven by the
// JS loop, and (in Deno) over DenoKvLeaseStore seeded with the scenario's rows. Each replay
// must pass the scenario's own expectations and equal the core's replay (`nativeReplay`,
// the core's HeartFleet run inside the same .wasm): every step's result, the receipts, the
// counters, the final rows and how often each effect fired. Runs under `deno test` and
// `node --test` alike (the kv mode needs Deno). The runner and the suite are the Node
// package's (bindings-node/test/helpers/runner.mjs), given this package.

import assert from 'node:assert/strict';
import { api, native, build, isDeno, openKv } from './helpers/pkg.mjs';
import { conformanceSuite, contains, withoutMessages } from '../../../bindings-node/test/helpers/runner.mjs';

const kv = isDeno ? await openKv() : null;

/** The sort of rows by `key` (KV lists them by key, not in insertion order). */
const sortedBy = (rows, key) => [...rows].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));

conformanceSuite({
  api,
  native,
  binding: 'heart-fleet-wasm',
  // pkg: verifyReceipts is the receipt verifier's own module (heart_fleet_receipts_bg.wasm),
  // and the core's replay inside the lease module has no chain; pkg-edge has neither.
  absent: build === 'pkg-edge' ? { verifyReceipts: 'verifyReceipts is not in the edge build' } : {},
  replayLacks: build === 'pkg' ? ['verifyReceipts'] : [],
  external: kv && {
    name: 'kv',
    /** The scenario's rows in Deno KV (a fresh prefix); the memory store keeps the clock. */
    async open(memory, sc) {
      const store = new api.DenoKvLeaseStore({ kv, prefix: ['conformance', sc.name, crypto.randomUUID()], now: () => memory.now() });
      await store.seed({ runs: memory.runs(), intents: memory.intents(), instances: memory.instances() });
      return {
        store,
        rows: async () => ({
          runs: await store.runs(),
          intents: await store.intents(),
          dispatchLog: await store.dispatchLog(),
          instances: await store.instances(),
        }),
      };
    },
    /**
     * The ids of created runs come from the store (random UUIDs), so receipts and rows about
     * them differ in runId and digest; and the dispatch log is kept per effect.
     */
    check(js, rust) {
      assert.equal(js.steps.length, rust.steps.length, 'steps replayed');
      const created = rust.steps.some((s) => s.op === 'ensureResourceRun');
      if (created) {
        const gist = (rs) => rs.map((r) => [r.event, r.owner, r.at, r.leaseExpiresAt, r.effectKey]);
        assert.deepEqual(gist(js.receipts), gist(rust.receipts), 'receipts (but runId and digest)');
      } else {
        assert.deepEqual(js.receipts.map((r) => ({ ...r })), rust.receipts, 'receipts');
        rust.steps.forEach((s, i) => contains(withoutMessages(s.result), withoutMessages(js.steps[i].result), `step ${i} (${s.op})`));
        const byId = (rows) => sortedBy(rows, (r) => r.id);
        assert.deepEqual(byId(js.runs), byId(rust.runs), 'runs');
      }
      assert.deepEqual(js.intents, rust.intents, 'intents');
      assert.deepEqual(js.instances, rust.instances, 'instances');
      const perEffect = (log) => sortedBy(log, (e) => `${e.run_id}\u0000${e.effect_key}`);
      assert.deepEqual(js.dispatchLog, perEffect(rust.dispatch_log), 'dispatch log (per effect, in order)');
    },
  },
});
