// The public API beyond the scenarios: golden vectors (including the JS-only canonical
// cases), JS store objects (sync, async, failing, answering nonsense), receipts sinks,
// executeWithLease with real timers, the lease-lost signal, the outbox, liveness,
// operator actions, resource runs, and the CommonJS/ESM entry points.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import * as esm from '../index.mjs';
import { assertShape } from './helpers/shape.mjs';
import {
  HeartFleet,
  MemoryLeaseStore,
  MemoryEffectLedger,
  DurableEffectLedger,
  LivenessReclaimer,
  executeWithLease,
  guardIrreversible,
  sendOnce,
  reconcileOutbox,
  ensureResourceRun,
  canonicalize,
  sha256Hex,
  digest,
  deterministicResourceId,
  effectKey,
  verifyReceipt,
  heartbeatIntervalMs,
  isLeaseExpired,
  canAcquire,
  isInstanceExpired,
  deadInstanceIds,
  runsLeasedToDeadInstances,
  LeaseLostError,
  HeartFleetError,
  ERROR_CODES,
} from '../index.mjs';

const require = createRequire(import.meta.url);
const golden = JSON.parse(readFileSync(new URL('../../core/tests/vectors/golden-vectors.json', import.meta.url), 'utf8'));

const T0 = '2026-07-30T00:00:00.000Z';
const R = '00000000-0000-4000-8000-000000000001';
const R2 = '00000000-0000-4000-8000-000000000002';

function memory() {
  const store = new MemoryLeaseStore(T0);
  store.insert({ id: R, idempotency_key: 'k1' });
  store.insert({ id: R2, idempotency_key: 'k2' });
  return store;
}

/** A JS store object over a memory store, with switchable failure modes. */
class JsStore {
  constructor(mem, { async = true } = {}) {
    this.mem = mem;
    this.async = async;
    this.fail = null; // 'throw' | 'reject' | 'garbage' | null
    this.failOps = null; // only these ops fail
    this.delay = 0;
    this.requests = [];
  }
  execute(request) {
    this.requests.push(request.op);
    const failing = this.fail && (!this.failOps || this.failOps.includes(request.op));
    if (failing && this.fail === 'throw') throw new Error('connection refused');
    if (!this.async) return failing && this.fail === 'garbage' ? { nonsense: true } : this.mem.execute(request);
    return new Promise((resolve, reject) => {
      setTimeout(() => {
        if (failing && this.fail === 'reject') reject(new Error('timeout'));
        else if (failing && this.fail === 'garbage') resolve('{"now":"not a time"}');
        else {
          try {
            resolve(this.mem.execute(request));
          } catch (e) {
            reject(e);
          }
        }
      }, this.delay);
    });
  }
}

test('the CommonJS and ES module entry points export the same API', () => {
  const cjs = require('../index.cjs');
  const names = Object.keys(cjs).sort();
  assert.deepEqual(Object.keys(esm).filter((k) => k !== 'default').sort(), names);
  for (const n of names) assert.equal(esm[n], cjs[n], n);
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  assert.equal(pkg.name, 'heart-fleet');
  assert.equal(require.resolve('heart-fleet'), require.resolve('../index.cjs'));
  assert.deepEqual(ERROR_CODES, JSON.parse(JSON.stringify(require('../lib/native.cjs').errorCodes())));
});

test('canonicalize: every golden vector, JS-only inputs included', () => {
  for (const v of golden.canonicalize) {
    // eslint-disable-next-line no-new-func
    const input = new Function(`return ${v.input_js};`)();
    assert.equal(canonicalize(input), v.canonical, v.name);
    assert.equal(sha256Hex(v.canonical), v.sha256, v.name);
    assert.equal(digest(input), v.digest, v.name);
    if (v.input_json !== null) assert.equal(canonicalize(JSON.parse(v.input_json)), v.canonical, `${v.name} (JSON)`);
  }
});

test('canonicalize: the reference error messages', () => {
  for (const v of golden.canonicalize_errors) {
    // eslint-disable-next-line no-new-func
    const input = new Function(`return ${v.input_js};`)();
    assert.throws(() => canonicalize(input), (e) => e.message === v.message && e.code === 'invalid-input', v.name);
    assert.throws(() => digest(input), (e) => e.message === v.message, v.name);
  }
  // The first error in canonical (sorted-key) order is the one reported.
  assert.throws(() => canonicalize({ b: Infinity, a: NaN }), /Non-finite number NaN/);
  assert.throws(() => canonicalize({ b: NaN, a: [Infinity] }), /Non-finite number Infinity/);
  // toJSON is not honoured, even when it throws; boxed primitives are objects.
  assert.equal(canonicalize({ x: { toJSON() { throw new Error('no'); }, v: 1 } }), '{"x":{"v":1}}');
  assert.equal(canonicalize({ n: Object(1), s: Object('ab') }), '{"n":{},"s":{"0":"a","1":"b"}}');
  const cyclic = {};
  cyclic.self = cyclic;
  assert.throws(() => canonicalize(cyclic), TypeError);
});

test('receipt digests, deterministic ids and effect keys match the golden vectors', () => {
  for (const v of golden.receipt_digests) {
    const i = v.input;
    const body = { event: i.event, runId: i.runId, owner: i.owner, leaseExpiresAt: i.leaseExpiresAt, effectKey: i.effectKey };
    assert.equal(digest(body), v.receipt.digest);
    assert.equal(verifyReceipt(v.receipt), true);
    assert.throws(
      () => verifyReceipt({ ...v.receipt, owner: `${v.receipt.owner}!` }),
      (e) => e instanceof HeartFleetError && e.code === 'receipt-tampered',
    );
  }
  for (const v of golden.deterministic_resource_ids) assert.equal(deterministicResourceId(v.kind, v.key), v.id);
  for (const v of golden.deterministic_resource_id_errors) {
    assert.throws(() => deterministicResourceId(v.kind, v.key), (e) => e.message === v.message && e.code === 'invalid-input');
  }
  for (const v of golden.effect_keys) assert.equal(effectKey(v.prefix, v.identity), v.effect_key);
  assert.equal(effectKey('telegram', { text: 'a', chatId: 1 }), effectKey('telegram', { chatId: 1, text: 'a' }));
});

test('acquire: the reference result shapes, tokens frozen, invalid input as a result', async () => {
  const store = memory();
  const heart = new HeartFleet({ store });
  const a = await heart.acquire(R, 'worker-A', 60);
  assert.deepEqual(Object.keys(a), ['acquired', 'run', 'fence']);
  assert.deepEqual(a.fence, { runId: R, owner: 'worker-A', leaseExpiresAt: '2026-07-30T00:01:00.000Z', epoch: 1 });
  assert.ok(Object.isFrozen(a.fence));
  assert.equal(a.run.status, 'leased');
  assert.deepEqual(Object.keys(a.run).slice(0, 3), ['id', 'task_id', 'assignment_id']);
  const b = await heart.acquire(R, 'worker-B', 60);
  assert.equal(b.acquired, false);
  assert.equal(b.fence, undefined);
  assert.equal(b.reason, "Cannot acquire: status 'leased', lease not expired");
  assertShape(b, { acquired: false, run: b.run, reason: "Cannot acquire: status 'leased', lease not expired" }, { code: 'lease-held' });
  assertShape(await heart.acquire('missing', 'w', 60), { acquired: false, run: null, reason: 'Run not found' }, { code: 'run-not-found' });
  for (const bad of [[R, 'w', 1.5], [R, 'w', 0], ['', 'w', 60], [R, '', 60], [R, 'w', 31_536_001], [R, 'w', '60']]) {
    assertShape(await heart.acquire(...bad), { acquired: false, run: null, reason: 'Invalid input' }, { code: 'invalid-input' });
  }
  assert.equal(heart.metrics.acquireAttempts, 3);
  assert.deepEqual(Object.keys(heart.metrics), [
    'acquireAttempts', 'acquireWins', 'acquireCollisions', 'renews', 'renewFailures', 'releases', 'releaseFailures',
    'reclaims', 'quarantines', 'fenceVerifications', 'fenceRejections', 'effectCommits', 'effectDedupes',
  ]);
  assert.match(heart.prometheus(), /heart_fleet_acquire_wins_total 1\n/);
});

test('renew, release, verify and their outcomes (fix 2)', async () => {
  const store = memory();
  const heart = new HeartFleet({ store });
  const { fence } = await heart.acquire(R, 'worker-A', 60);
  store.advance(10_000);
  const renewed = await heart.renew(fence, 60);
  assert.equal(renewed.leaseExpiresAt, '2026-07-30T00:01:10.000Z');
  assert.deepEqual(await heart.tryRenew(fence, 60), { outcome: 'rejected', cause: 'superseded', code: 'fence-rejected' });
  assert.equal(await heart.verifyFence(renewed), true);
  store.advance(60_000);
  assert.deepEqual(await heart.tryRelease(renewed, 'completed'), { outcome: 'rejected', cause: 'expired', code: 'fence-rejected' });
  assert.equal(store.getRun(R).status, 'leased');
  // A token minted by the TypeScript package has no epoch: the three fields decide.
  const b = await heart.acquire(R, 'worker-B', 60);
  const { epoch, ...old } = b.fence;
  assert.equal(epoch, 2);
  assert.equal(await heart.verifyFence(old), true);
  const row = await heart.release(old, 'failed');
  assert.equal(row.status, 'failed');
  await assert.rejects(heart.release(renewed, 'done'), (e) => e instanceof TypeError && e.code === 'invalid-input');
});

test('maxRetries: Infinity and null never quarantine', async () => {
  for (const maxRetries of [Infinity, null]) {
    const store = memory();
    const heart = new HeartFleet({ store, maxRetries });
    assert.equal(heart.maxRetries, Infinity);
    for (let i = 0; i < 8; i += 1) {
      assert.equal((await heart.acquire(R, 'w', 60)).acquired, true);
      store.advance(61_000);
      await heart.reclaimExpired();
    }
    const row = store.getRun(R);
    assert.equal(row.status, 'ready');
    assert.equal(row.retries, 8);
  }
});

test('onReceipt: receipts go to the sink in order, receipts() is empty, sink errors are swallowed', async () => {
  const seen = [];
  const store = memory();
  const heart = new HeartFleet({
    store,
    onReceipt: (r) => {
      seen.push(r.event);
      if (r.event === 'acquired') throw new Error('sink down');
      return Promise.reject(new Error('async sink down'));
    },
  });
  const { fence } = await heart.acquire(R, 'w', 60);
  await heart.verifyFence(fence);
  await heart.release(fence, 'completed');
  assert.deepEqual(seen, ['acquired', 'fence_verified', 'released']);
  assert.deepEqual(heart.receipts(), []);
  // The same through a JS store.
  const seen2 = [];
  const heart2 = new HeartFleet({ store: new JsStore(memory()), onReceipt: (r) => seen2.push(r) });
  const a = await heart2.acquire(R, 'w', 60);
  await heart2.release(a.fence, 'completed');
  assert.deepEqual(seen2.map((r) => r.event), ['acquired', 'released']);
  assert.ok(seen2.every((r) => Object.isFrozen(r) && verifyReceipt(r)));
});

test('JS store objects: sync and async, the event loop keeps running, concurrent acquires exclude', async () => {
  for (const async of [false, true]) {
    const mem = memory();
    const store = new JsStore(mem, { async });
    const heart = new HeartFleet({ store });
    let ticks = 0;
    const iv = setInterval(() => {
      ticks += 1;
    }, 0);
    store.delay = async ? 2 : 0;
    const results = await Promise.all(['A', 'B', 'C', 'D'].map((w) => heart.acquire(R, w, 60)));
    clearInterval(iv);
    assert.equal(results.filter((r) => r.acquired).length, 1);
    assert.equal(heart.metrics.acquireCollisions, 3);
    if (async) assert.ok(ticks > 0, 'the event loop ran while the store worked');
    const winner = results.find((r) => r.acquired);
    assert.equal(await heart.verifyFence(winner.fence), true);
    assert.ok(store.requests.includes('update_run'));
  }
});

test('a store that throws or rejects gives store-unavailable and leaves the row unchanged', async () => {
  for (const fail of ['throw', 'reject']) {
    const mem = memory();
    const store = new JsStore(mem);
    const heart = new HeartFleet({ store });
    const { fence } = await heart.acquire(R, 'w', 60);
    const before = mem.runs();
    const metrics = { ...heart.metrics };
    store.fail = fail;
    const calls = [
      () => heart.acquire(R2, 'w', 60),
      () => heart.renew(fence, 60),
      () => heart.release(fence, 'completed'),
      () => heart.verifyFence(fence),
      () => heart.reclaimExpired(),
      () => heart.ensureResourceRun('kind', 'key'),
      () => heart.reclaimDeadInstanceRuns(),
      () => heart.forceRelease(R),
    ];
    for (const call of calls) {
      await assert.rejects(call(), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable' && /store failed at/.test(e.message));
    }
    assert.deepEqual(mem.runs(), before);
    assert.deepEqual({ ...heart.metrics }, { ...metrics, acquireAttempts: metrics.acquireAttempts + 1 });
    store.fail = null;
    assert.equal(await heart.verifyFence(fence), true);
  }
});

test('a store that answers nonsense gives store-protocol', async () => {
  const mem = memory();
  for (const async of [false, true]) {
    const store = new JsStore(mem, { async });
    store.fail = 'garbage';
    const heart = new HeartFleet({ store });
    await assert.rejects(heart.acquire(R, 'w', 60), (e) => e.code === 'store-protocol');
  }
  assert.equal(mem.getRun(R).status, 'ready');
});

test('the memory store: clock, insert defaults, collisions, failures, execute', async () => {
  const store = new MemoryLeaseStore();
  assert.equal(store.now().toISOString(), '1970-01-01T00:00:00.000Z');
  store.setNow(new Date(T0));
  store.advance(1500);
  assert.equal(store.now().toISOString(), '2026-07-30T00:00:01.500Z');
  const row = store.insert({ id: 'r1', idempotency_key: 'dup', status: 'ready' });
  assert.equal(row.created_at, '2026-07-30T00:00:01.500Z');
  assert.equal(row.retries, 0);
  assert.throws(() => store.insert({ id: 'r2', idempotency_key: 'dup' }), (e) => e.message === 'Idempotency key collision: dup' && e.code === 'invalid-input');
  assert.throws(() => store.insert({ id: 'r3', status: 'nope' }), (e) => e.code === 'invalid-input');
  const heart = new HeartFleet({ store });
  store.failNext('update_run', 1);
  await assert.rejects(heart.acquire('r1', 'w', 60), (e) => e.code === 'store-unavailable' && /injected failure on update_run/.test(e.message));
  assert.equal((await heart.acquire('r1', 'w', 60)).acquired, true);
  const answer = store.execute({ op: 'read_run', run_id: 'r1' });
  assert.equal(answer.now, '2026-07-30T00:00:01.500Z');
  assert.equal(answer.reply.kind, 'run');
  assert.equal(answer.reply.run.lease_owner, 'w');
});

test('executeWithLease: heartbeats on an unref\'d timer, serialized with the release, newest token', async () => {
  const mem = memory();
  const store = new JsStore(mem);
  const heart = new HeartFleet({ store });
  const fences = [];
  const out = await executeWithLease(heart, { runId: R, owner: 'w', ttlSeconds: 1, renewEveryMs: 15 }, async (getFence, signal) => {
    assert.ok(signal instanceof AbortSignal);
    for (let i = 0; i < 6; i += 1) {
      mem.advance(100);
      fences.push(getFence().leaseExpiresAt);
      await new Promise((r) => setTimeout(r, 20));
    }
    // Make the store slow so that a beat is in flight when the work returns.
    store.delay = 30;
    await new Promise((r) => setTimeout(r, 20));
    return 42;
  });
  assert.deepEqual({ ran: out.ran, result: out.result, released: out.released, lost: out.lost }, { ran: true, result: 42, released: true, lost: undefined });
  assert.ok(heart.metrics.renews >= 2, `renews: ${heart.metrics.renews}`);
  assert.equal(heart.metrics.releaseFailures, 0);
  assert.equal(heart.metrics.renewFailures, 0);
  assert.ok(new Set(fences).size >= 2, 'the fence accessor returns the rotated token');
  assert.equal(mem.getRun(R).status, 'completed');
  const events = heart.receipts().map((r) => r.event);
  assert.equal(events[0], 'acquired');
  assert.equal(events.at(-1), 'released');
  assert.ok(!events.includes('fence_rejected'));
});

test('executeWithLease: the lease-lost signal says why, the work goes on, no doomed release', async () => {
  const mem = memory();
  const heart = new HeartFleet({ store: mem });
  let reason;
  const out = await executeWithLease(heart, { runId: R, owner: 'A', ttlSeconds: 60, renewEveryMs: 10 }, async (getFence, signal) => {
    // The heartbeat timer is unref'd: something must keep this test's event loop alive.
    const keepAlive = setInterval(() => {}, 1000);
    const aborted = new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    await heart.forceRelease(R);
    const b = await heart.acquire(R, 'B', 60);
    assert.equal(b.acquired, true);
    await aborted;
    clearInterval(keepAlive);
    reason = signal.reason;
    return 'finished anyway';
  });
  assert.ok(reason instanceof LeaseLostError);
  assert.equal(reason.lost, 'superseded');
  assert.equal(reason.code, 'fence-rejected');
  assertShape(out, { ran: true, result: 'finished anyway' }, { released: false, lost: 'superseded' });
  assert.equal(mem.getRun(R).lease_owner, 'B');
  assert.equal(heart.metrics.releaseFailures, 0);
});

test('executeWithLease: failing beats lose the lease once the held expiry passes (store-unavailable)', async () => {
  const mem = memory();
  const store = new JsStore(mem);
  const heart = new HeartFleet({ store });
  let fake = 0;
  const out = await executeWithLease(
    heart,
    { runId: R, owner: 'A', ttlSeconds: 1, renewEveryMs: 10, clock: () => fake },
    async (getFence, signal) => {
      store.fail = 'reject';
      store.failOps = ['update_run'];
      while (!signal.aborted) {
        fake += 300;
        await new Promise((r) => setTimeout(r, 15));
      }
      store.fail = null;
      assert.equal(signal.reason.lost, 'store-unavailable');
      assert.equal(signal.reason.code, 'store-unavailable');
      return 'late';
    },
  );
  assert.equal(out.lost, 'store-unavailable');
  assert.equal(out.ran, true);
});

test('executeWithLease: reference reasons, work errors re-thrown and released as failed', async () => {
  const mem = memory();
  const heart = new HeartFleet({ store: mem });
  assertShape(
    await executeWithLease(heart, { runId: 'missing', owner: 'w', ttlSeconds: 60 }, async () => 1),
    { ran: false, reason: 'lease-error' },
    { code: 'run-not-found', released: false },
  );
  mem.insert({ id: 'held' });
  await heart.acquire('held', 'other', 60);
  assertShape(
    await executeWithLease(heart, { runId: 'held', owner: 'w', ttlSeconds: 60 }, async () => 1),
    { ran: false, reason: 'lease-held' },
    { code: 'lease-held', released: false },
  );
  mem.insert({ id: 'ok-run' });
  assertShape(await executeWithLease(heart, { runId: 'ok-run', owner: 'w', ttlSeconds: 60 }, async () => 7), { ran: true, result: 7 }, { released: true });
  assert.equal((await executeWithLease(heart, { runId: R, owner: 'w', ttlSeconds: 60, renewEveryMs: 0 }, async () => 1)).reason, 'lease-error');
  const boom = new Error('boom');
  await assert.rejects(executeWithLease(heart, { runId: R, owner: 'w', ttlSeconds: 60 }, async () => { throw boom; }), (e) => e === boom);
  assert.equal(mem.getRun(R).status, 'failed');
  assert.equal(heartbeatIntervalMs(60), 30_000);
  assert.equal(heartbeatIntervalMs(3), 1500);
  assert.equal(heartbeatIntervalMs(1), 1000);
});

test('resource runs: find-or-create, release to ready, never wedge (fix 8)', async () => {
  const mem = new MemoryLeaseStore(T0);
  const heart = new HeartFleet({ store: mem });
  const first = await ensureResourceRun(heart, 'zoe.work-loop', 'singleton', { objective: 'tick' });
  assert.equal(first.created, true);
  assert.equal(first.run.idempotency_key, deterministicResourceId('zoe.work-loop', 'singleton'));
  const again = await heart.ensureResourceRun('zoe.work-loop', 'singleton');
  assert.equal(again.created, false);
  assert.equal(again.run.id, first.run.id);
  for (let i = 0; i < 3; i += 1) {
    const out = await executeWithLease(heart, { runId: first.run.id, owner: `w${i}`, ttlSeconds: 60, releaseToReady: true }, async () => i);
    assert.deepEqual([out.ran, out.released], [true, true]);
  }
  assert.equal(mem.getRun(first.run.id).status, 'ready');
  // Not for ordinary runs.
  mem.insert({ id: 'plain-run' });
  const { fence } = await heart.acquire('plain-run', 'w', 60);
  await assert.rejects(heart.release(fence, 'ready'), (e) => e.code === 'invalid-input');
});

test('guardIrreversible: the effect\'s own error propagates and the key stays recorded; durable ledger', async () => {
  const mem = memory();
  const heart = new HeartFleet({ store: mem });
  const { fence } = await heart.acquire(R, 'w', 60);
  const ledger = new MemoryEffectLedger();
  const boom = new Error('card declined');
  await assert.rejects(guardIrreversible(heart, fence, ledger, 'spend:1', async () => { throw boom; }), (e) => e === boom);
  const again = await guardIrreversible(heart, fence, ledger, 'spend:1', async () => 'x');
  assertShape(again, { committed: false, reason: 'already-committed' }, { code: 'deduped' });
  const durable = new DurableEffectLedger({ heart });
  let epochSeen;
  const r = await guardIrreversible(heart, fence, durable, 'spend:2', async ({ epoch }) => {
    epochSeen = epoch;
    return { id: 7 };
  });
  assertShape(r, { committed: true, result: { id: 7 } });
  assert.equal(epochSeen, 1);
  assert.equal(await durable.recordOnce(R, 'spend:2'), false);
  assert.equal(mem.intents()[0].state, 'intent');
  const events = heart.receipts().map((x) => x.event);
  assert.deepEqual(events.filter((e) => e.startsWith('effect_')), ['effect_deduped', 'effect_committed']);
});

test('sendOnce and reconcileOutbox over a JS store: send once, dedupe, reconcile a crash', async () => {
  const mem = memory();
  const store = new JsStore(mem);
  const heart = new HeartFleet({ store });
  const ledger = new DurableEffectLedger({ heart });
  const { fence } = await heart.acquire(R, 'A', 60);
  const key = effectKey('telegram', { chatId: 1, text: 'hi' });
  let sends = 0;
  const send = async () => {
    sends += 1;
    return { message_id: 42 };
  };
  const r = await sendOnce(heart, ledger, { fence, channel: 'telegram', effectKey: key, payload: { chatId: 1, text: 'hi' }, send, toExternalRef: (m) => ({ message_id: m.message_id }) });
  assertShape(r, { sent: true, result: { message_id: 42 } }, { externalRef: { message_id: 42 }, committed: true });
  const dup = await sendOnce(heart, ledger, { fence, channel: 'telegram', effectKey: key, payload: { chatId: 1, text: 'hi' }, send });
  assertShape(dup, { sent: false, reason: 'deduped' }, { code: 'deduped' });
  assert.equal(sends, 1);
  assert.equal(mem.intents()[0].state, 'committed');
  assert.deepEqual(mem.intents()[0].external_ref, { message_id: 42 });
  // A send that throws: the error propagates, the intent stays dispatched, the reconciler decides.
  const lost = new Error('network down');
  const key2 = effectKey('farcaster', { cast: 1 });
  await assert.rejects(sendOnce(heart, ledger, { fence, channel: 'farcaster', effectKey: key2, payload: { cast: 1 }, send: async () => { throw lost; } }), (e) => e === lost);
  mem.advance(61_000);
  const stale = await ledger.findStaleDispatched();
  assert.deepEqual(stale.map((i) => i.effect_key), [key2]);
  const summary = await reconcileOutbox(ledger, { probes: { farcaster: async () => ({ status: 'sent', externalRef: { cast_hash: '0xabc' } }) } });
  assert.deepEqual(summary, { scanned: 1, committed: 1, reopened: 0, abandoned: 0, left: 0, errors: [] });
  const log = await ledger.dispatchLog(R, key2);
  assert.deepEqual(log.map((e) => e.outcome), ['claimed', 'sent']);
  // A payload the canonical form refuses throws before any I/O.
  const before = store.requests.length;
  assert.throws(() => canonicalize({ n: NaN }));
  await assert.rejects(sendOnce(heart, ledger, { fence, channel: 'telegram', effectKey: 'k', payload: { n: NaN }, send }), /Non-finite number NaN/);
  assert.equal(store.requests.length, before);
});

test('liveness: LivenessReclaimer and the pure helpers', async () => {
  const mem = memory();
  const heart = new HeartFleet({ store: mem });
  const reclaimer = new LivenessReclaimer({ heart });
  await reclaimer.registerInstance('dead-1', { hostname: 'h1', pid: 10 });
  await reclaimer.registerInstance('live-1');
  await heart.acquire(R, 'dead-1', 600);
  await heart.acquire(R2, 'live-1', 600);
  mem.advance(200_000);
  assert.equal(await reclaimer.heartbeat('live-1'), true);
  const s = await reclaimer.reclaimDeadInstanceRuns();
  assertShape(s, { deadInstanceIds: ['dead-1'], reclaimedCount: 1, reclaimedIds: [R], errors: [] }, { quarantinedIds: [] });
  assert.equal(mem.getRun(R).retries, 1);
  assert.equal(mem.getRun(R2).lease_owner, 'live-1');
  assert.equal(await reclaimer.heartbeat('dead-1'), false);
  assert.equal(heart.receipts().at(-1).event, 'reclaimed');
  const now = Date.parse(T0);
  assert.equal(isInstanceExpired({ status: 'alive', last_heartbeat: new Date(now - 90_001) }, now), true);
  assert.equal(isInstanceExpired({ status: 'alive', last_heartbeat: new Date(now - 90_000) }, now), false);
  assert.deepEqual(deadInstanceIds([{ instance_id: 'a', status: 'dead', last_heartbeat: now }, { instance_id: 'b', status: 'draining', last_heartbeat: now }], now), ['a']);
  assert.deepEqual(runsLeasedToDeadInstances([{ id: 1, lease_owner: 'a', status: 'leased' }, { id: 2, lease_owner: 'a', status: 'completed' }], ['a']).map((r) => r.id), [1]);
  assert.equal(isLeaseExpired({ lease_expires_at: T0 }, new Date(T0)), true);
  assert.equal(isLeaseExpired({ lease_expires_at: null }, new Date(T0)), true);
  assert.equal(canAcquire({ status: 'completed', lease_expires_at: null }, new Date(T0)), false);
});

test('operator actions: list, inspect, requeue, force-release, with receipts', async () => {
  const mem = memory();
  const heart = new HeartFleet({ store: mem, maxRetries: 0 });
  await heart.acquire(R, 'w', 60);
  mem.advance(61_000);
  const s = await heart.reclaimExpired();
  assert.deepEqual(s.quarantinedIds, [R]);
  assert.deepEqual((await heart.listRuns({ status: 'quarantined' })).map((r) => r.id), [R]);
  const row = await heart.requeueRun(R, 'ops@example');
  assert.equal(row.status, 'ready');
  assert.equal(row.retries, 0);
  await assert.rejects(heart.requeueRun(R, 'ops'), (e) => e.code === 'invalid-state');
  await assert.rejects(heart.requeueRun('missing', 'ops'), (e) => e.code === 'run-not-found');
  const { fence } = await heart.acquire(R, 'stuck', 600);
  assert.equal((await heart.forceRelease(R)).status, 'ready');
  assert.equal(await heart.verifyFence(fence), false);
  assert.equal((await heart.getRun(R)).lease_owner, null);
  assert.equal(await heart.getRun('missing'), null);
  const events = heart.receipts().map((r) => r.event);
  assert.ok(events.includes('requeued') && events.includes('force_released'));
  assert.equal((await heart.listRuns()).length, 2);
  assert.equal((await heart.listInstances()).length, 0);
});

test('the heartbeat timer is unref\'d: a process with only a lease running can exit', async () => {
  const { execFile } = await import('node:child_process');
  const script = `
    const { HeartFleet, MemoryLeaseStore, executeWithLease } = require(${JSON.stringify(require.resolve('../index.cjs'))});
    const store = new MemoryLeaseStore();
    store.insert({ id: 'r' });
    const heart = new HeartFleet({ store });
    executeWithLease(heart, { runId: 'r', owner: 'w', ttlSeconds: 2, renewEveryMs: 100 }, () => new Promise(() => {}))
      .then(() => console.log('unexpected'));
    setTimeout(() => console.log('started'), 10);
  `;
  const started = Date.now();
  const out = await new Promise((resolve, reject) => {
    const child = execFile(process.execPath, ['-e', script], { timeout: 10_000 }, (err, stdout) => (err ? reject(err) : resolve(stdout)));
    child.on('error', reject);
  });
  assert.equal(out.trim(), 'started');
  assert.ok(Date.now() - started < 5_000, 'the process did not wait for the heartbeat timer');
});

test('executeWithLease returns once its work is done and the lease is known lost, though a renew never answers', async () => {
  const mem = memory();
  const store = new JsStore(mem);
  const heart = new HeartFleet({ store, storeTimeoutMs: 60_000 });
  const started = Date.now();
  let hung = 0;
  const out = await executeWithLease(heart, { runId: R, owner: 'w', ttlSeconds: 1, renewEveryMs: 100 }, async (_getFence, signal) => {
    // From now on every store call hangs: the renews get no answer at all.
    store.execute = () => {
      hung += 1;
      return new Promise(() => {});
    };
    // Keep the event loop alive while waiting for the signal (the timers are unref'd).
    const keepAlive = setInterval(() => {}, 50);
    await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    clearInterval(keepAlive);
    return 'done';
  });
  const took = Date.now() - started;
  assert.ok(hung >= 1, 'a renew was sent and never answered');
  assertShape(out, { ran: true, result: 'done' }, { released: false, lost: 'store-unavailable' });
  assert.ok(took < 5_000, `returned after ${took} ms, not after the 60 s store timeout`);
});
