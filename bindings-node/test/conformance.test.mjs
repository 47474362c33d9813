// Replays EVERY scenario of tests/conformance/ through this package, four times: over the
// Rust memory store (driven inside Rust), over async JS store objects taking objects and
// JSON text (driven by the JS loop), and over SupabaseLeaseStore with a recording fake
// supabase-js client (the scenario's clock as the worker's clock). Each replay must pass the
// scenario's expectations and equal the native Rust replay (heart_fleet_core::conformance
// with the core's HeartFleet): every step's result, the receipts, the counters, the final
// rows and how often each effect fired. The runner and the suite: helpers/runner.mjs (shared
// with heart-fleet-wasm).

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import * as api from '../index.mjs';
import { FakeSupabase } from './helpers/fake-supabase.mjs';
import { conformanceSuite } from './helpers/runner.mjs';

const native = createRequire(import.meta.url)('../lib/native.cjs');

conformanceSuite({
  api,
  native,
  binding: 'the Node binding',
  external: {
    name: 'supabase',
    /** The scenario's rows, in the recording fake PostgREST; the memory store keeps the clock. */
    async open(memory) {
      const fake = new FakeSupabase();
      fake.seed('agent_runs', memory.runs());
      fake.seed('effect_intents', memory.intents());
      fake.seed('agent_instances', memory.instances());
      return {
        store: new api.SupabaseLeaseStore({ client: fake, now: () => memory.now() }),
        fake,
        rows: async () => ({
          runs: fake.rows('agent_runs'),
          intents: fake.rows('effect_intents'),
          dispatchLog: fake.rows('outbox_dispatch_log'),
          instances: fake.rows('agent_instances'),
        }),
      };
    },
    /**
     * Row ids of created runs come from the (fake) database and REST rows carry extra
     * columns, so only what does not depend on them must equal the native replay (the
     * counters and the effects fired are compared for every mode).
     */
    check(js, rust) {
      const gist = (rs) => rs.map((r) => [r.event, r.owner, r.at]);
      assert.deepEqual(gist(js.receipts), gist(rust.receipts), 'receipts');
      if (js.storeCalls > 0) assert.ok(js.external.fake.calls.length > 0, 'the requests went through the REST client');
    },
  },
});
