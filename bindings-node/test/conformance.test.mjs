// Replays EVERY scenario of tests/conformance/ through this package, four times: over the
// Rust memory store (driven inside Rust), over async JS store objects taking objects and
// JSON text (driven by the JS loop), and over SupabaseLeaseStore with a recording fake
// supabase-js client (the scenario's clock as the worker's clock). Each replay must pass the scenario's expectations and equal the native Rust
// replay (heart_fleet_core::conformance with the core's HeartFleet): every step's result,
// the receipts, the counters, the final rows and how often each effect fired.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { replay, native, SKIPPED_OPS } from './helpers/runner.mjs';

const dir = fileURLToPath(new URL('../../tests/conformance/', import.meta.url));

/**
 * Scenarios this runner does not run, with the reason. Anything listed here is printed;
 * anything not listed must pass. Empty: every scenario runs in both modes.
 */
const SKIPPED_SCENARIOS = Object.freeze({});

const files = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort();

console.log(
  `conformance: ${files.length} scenarios × 4 store modes; skip list: ` +
    (Object.keys(SKIPPED_SCENARIOS).length === 0 && Object.keys(SKIPPED_OPS).length === 0
      ? '(none)'
      : JSON.stringify({ scenarios: SKIPPED_SCENARIOS, ops: SKIPPED_OPS })),
);

test('the scenario folder is not empty', () => {
  assert.ok(files.length >= 60, `found only ${files.length} scenarios in ${dir}`);
});

/** Drops error messages (the binding re-throws the effect's own exception). */
function withoutMessages(v) {
  if (Array.isArray(v)) return v.map(withoutMessages);
  if (v !== null && typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) {
      if (k === 'message' && typeof v.error === 'string') continue;
      out[k] = withoutMessages(x);
    }
    return out;
  }
  return v;
}

/** Native ⊆ binding: every key the native result has, the binding's has with the same value. */
function contains(want, got, path) {
  if (want !== null && typeof want === 'object') {
    assert.ok(got !== null && typeof got === 'object', `${path}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
    if (Array.isArray(want)) assert.equal(got.length, want.length, `${path}: length`);
    for (const k of Object.keys(want)) contains(want[k], got[k] === undefined ? null : got[k], `${path}.${k}`);
    return;
  }
  assert.deepEqual(got, want, path);
}

for (const file of files) {
  const text = readFileSync(join(dir, file), 'utf8');
  const name = JSON.parse(text).name;
  for (const mode of ['memory', 'js-store', 'text-store', 'supabase']) {
    const skip = SKIPPED_SCENARIOS[name];
    test(`${name} [${mode}]`, { skip: skip ? `skipped: ${skip}` : false }, async () => {
      const js = await replay(text, mode);
      assert.equal(js.failure, null, `scenario ${name} failed in the Node binding (${mode}): ${js.failure}`);
      const rust = JSON.parse(native.nativeReplay(text));
      assert.equal(rust.failure, null, `the native replay of ${name} failed: ${rust.failure}`);
      if (mode === 'supabase') {
        // Row ids of created runs come from the (fake) database and REST rows carry extra
        // columns, so only what does not depend on them must equal the native replay.
        assert.deepEqual({ ...js.metrics }, rust.metrics, 'metrics');
        assert.deepEqual(js.receipts.map((r) => [r.event, r.owner, r.at]), rust.receipts.map((r) => [r.event, r.owner, r.at]), 'receipts');
        assert.deepEqual(js.fired, rust.fired, 'fired');
        if (js.storeCalls > 0) assert.ok(js.restCalls > 0, 'the requests went through the REST client');
        return;
      }
      assert.equal(js.steps.length, rust.steps.length, 'steps replayed');
      rust.steps.forEach((s, i) => {
        assert.equal(js.steps[i].op, s.op);
        contains(withoutMessages(s.result), withoutMessages(js.steps[i].result), `step ${i} (${s.op})`);
      });
      assert.deepEqual(js.receipts.map((r) => ({ ...r })), rust.receipts, 'receipts');
      assert.deepEqual({ ...js.metrics }, rust.metrics, 'metrics');
      assert.deepEqual(js.runs, rust.runs, 'runs');
      assert.deepEqual(js.intents, rust.intents, 'intents');
      assert.deepEqual(js.dispatchLog, rust.dispatch_log, 'dispatch log');
      assert.deepEqual(js.instances, rust.instances, 'instances');
      assert.deepEqual(js.fired, rust.fired, 'fired');
      if (mode !== 'memory') {
        // Every store request really went through the JS store object.
        assert.equal(js.storeCalls, js.memoryRequests, 'store requests that bypassed the JS store object');
      }
    });
  }
}
