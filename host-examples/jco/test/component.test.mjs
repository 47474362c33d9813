// The heart:fleet component in a second host: transpiled by jco, run by Node's own
// WebAssembly engine, its lease-store written in JavaScript (lease-store.mjs) over the Node
// package's MemoryLeaseStore. What it checks: the typed WIT works outside wasmtime (records,
// variants, node lists, resources, tuple results), an operation hands back its receipts and
// counters with its result, the component agrees with the Node package's own fleet on the
// same store and clock (results, receipts with their digests, rows), and a store that fails
// or answers badly gives the right error code and writes nothing more; fleet.mjs's
// executeWithLease beats on a timer and refuses an option it would not honour.
//
// Needs `cargo run -p xtask -- component` and the Node package built (`npm run build` in
// bindings-node); `npm test` here transpiles first.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HeartFleet, MemoryLeaseStore } from '../../../bindings-node/index.mjs';
import { leaseStore } from '../lease-store.mjs';
import { open } from '../host.mjs';

const T0 = '2026-07-30T00:00:00.000Z';

function seeded() {
  const memory = new MemoryLeaseStore(T0);
  memory.insert({ id: 'run-1', idempotency_key: 'job:1', status: 'ready' });
  memory.insert({ id: 'run-2', idempotency_key: 'job:2', status: 'ready' });
  return memory;
}

function fleetOver(store, maxRetries = 5) {
  const root = open(store);
  return new root.fleet.Fleet(maxRetries);
}

/** The result of a `tuple<result, emitted>` call, asserting it is `ok`. */
function ok([result, emitted]) {
  assert.equal(result.tag, 'ok', `expected ok, got ${JSON.stringify(result, (_, v) => (typeof v === 'bigint' ? `${v}n` : v))}`);
  return [result.val, emitted];
}

const gist = (r) => ({ event: r.event, runId: r.runId, owner: r.owner, leaseExpiresAt: r.leaseExpiresAt ?? null, at: r.at, digest: r.digest });

test('a cycle through jco equals the Node package on the same store and clock', async () => {
  const memory = seeded();
  const fleet = fleetOver(leaseStore(memory));
  const [acq, acquired] = ok(fleet.acquire('run-1', 'worker-A', 60n));
  assert.equal(acq.acquired, true);
  assert.deepEqual(acq.fence, { runId: 'run-1', owner: 'worker-A', leaseExpiresAt: BigInt(Date.parse(T0) + 60_000), epoch: 1n });
  assert.equal(acquired.counters.acquireAttempts, 1n);
  assert.equal(acquired.counters.acquireWins, 1n);
  const [held, collided] = ok(fleet.acquire('run-1', 'worker-B', 60n));
  assert.equal(held.acquired, false);
  assert.equal(held.code, 'lease-held');
  assert.deepEqual(collided.receipts, []);
  assert.equal(collided.counters.acquireCollisions, 1n);
  const [valid, verified] = ok(fleet.verifyFence(acq.fence));
  assert.equal(valid, true);
  const [released, releasedEmitted] = ok(fleet.release(acq.fence, 'completed'));
  assert.equal(released.tag, 'ok');
  assert.equal(released.val.status, 'completed');
  // WIT enums are kebab-case; the receipt's event text is the reference's snake_case.
  const jcoReceipts = [acquired, verified, releasedEmitted]
    .flatMap((e) => e.receipts)
    .map((r) => gist({ ...r, event: r.event.replaceAll('-', '_') }));

  // The same cycle through the Node package (napi) on a store of its own.
  const native = seeded();
  const heart = new HeartFleet({ store: native });
  const a = await heart.acquire('run-1', 'worker-A', 60);
  assert.equal((await heart.acquire('run-1', 'worker-B', 60)).acquired, false);
  assert.equal(await heart.verifyFence(a.fence), true);
  await heart.release(a.fence, 'completed');
  assert.deepEqual(jcoReceipts, heart.receipts().map(gist));
  assert.deepEqual(memory.runs(), native.runs());
  assert.deepEqual(jcoReceipts.map((r) => r.event), ['acquired', 'fence_verified', 'released']);
});

test('a store failure is store-unavailable naming the step, and the next call works', () => {
  const memory = seeded();
  const fleet = fleetOver(leaseStore(memory));
  memory.failNext('update_run', 1);
  const [result] = fleet.acquire('run-1', 'worker-A', 60n);
  assert.equal(result.tag, 'err');
  assert.equal(result.val.tag, 'store-unavailable');
  assert.match(result.val.val, /^store failed at acquire: conditional write: /);
  assert.equal(ok(fleet.acquire('run-1', 'worker-A', 60n))[0].acquired, true);
});

test('a protocol store-error is store-protocol', () => {
  const memory = seeded();
  const broken = { execute() { throw Object.assign(new Error('the table has no such column'), { code: 'store-protocol' }); } };
  const [result, emitted] = fleetOver(leaseStore(broken)).acquire('run-1', 'worker-A', 60n);
  assert.equal(result.tag, 'err');
  assert.equal(result.val.tag, 'store-protocol');
  assert.match(result.val.val, /lease-store protocol: the table has no such column/);
  assert.deepEqual(emitted.receipts, []);
  assert.equal(memory.runs()[0].status, 'ready');
});

test('an answer out of range is store-protocol and the operation writes nothing more', () => {
  const memory = seeded();
  memory.insert({
    id: 'run-3',
    idempotency_key: 'job:3',
    status: 'leased',
    lease_owner: 'worker-gone',
    lease_expires_at: '2026-07-29T23:59:59.000Z',
  });
  const before = JSON.stringify(memory.runs());
  // Every scan answers its first row as created in the year 10000.
  const farFuture = (a) => {
    if (a.reply.tag === 'runs' && a.reply.val.length > 0) a.reply.val[0].createdAt = 253_402_300_800_000n;
    return a;
  };
  const [result, emitted] = fleetOver(leaseStore(memory, { answer: farFuture })).reclaimExpired(10);
  assert.equal(result.tag, 'err');
  assert.equal(result.val.tag, 'store-protocol');
  assert.match(result.val.val, /created_at is 253402300800000 ms, outside years 0000-9999/);
  assert.equal(JSON.stringify(memory.runs()), before, 'the sweep stopped at its scan');
  assert.deepEqual(emitted.receipts, []);
  assert.equal(emitted.counters.reclaims, 0n);
});

test('the JS lease-store refuses a malformed node list instead of reading it', async () => {
  const { requestJson } = await import('../lease-store.mjs');
  const update = (when) => ({ tag: 'update-run', val: { runId: 'R1', when, set: [], wantBefore: false } });
  assert.throws(() => requestJson(update([{ tag: 'not', val: 0 }])), { tag: 'protocol', val: /node 0 refers to node 0, which is not after it/ });
  assert.throws(() => requestJson(update([{ tag: 'not', val: 5 }])), { tag: 'protocol', val: /node 5 is outside its list of 1/ });
  assert.throws(() => requestJson(update([{ tag: 'all', val: new Uint32Array([1, 1]) }, { tag: 'always' }])), {
    tag: 'protocol',
    val: /node 1 is referred to twice/,
  });
  assert.throws(() => requestJson(update([])), { tag: 'protocol', val: /an empty condition/ });
});

test('executeWithLease through jco: a timer heartbeat renews once the store clock has moved', async () => {
  const fleetApi = await import('../fleet.mjs');
  const memory = seeded();
  const heart = new fleetApi.HeartFleet({ store: memory });
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const out = await fleetApi.executeWithLease(heart, { runId: 'run-1', owner: 'worker-A', ttlSeconds: 60, renewEveryMs: 1000 }, async (getFence, signal) => {
    const first = getFence();
    memory.advance(1_500);
    // The timer beats every 1000 ms of real time; the store clock has moved past a period.
    await sleep(1_300);
    assert.equal(signal.aborted, false);
    return [first, getFence()];
  });
  assert.equal(out.ran, true);
  assert.equal(out.released, true);
  const [first, renewed] = out.result;
  assert.notDeepEqual(renewed, first, 'the fence was rotated by a renewal');
  assert.equal(renewed.leaseExpiresAt, new Date(Date.parse(T0) + 1_500 + 60_000).toISOString());
  assert.deepEqual(heart.receipts().map((r) => r.event), ['acquired', 'renewed', 'released']);
  assert.equal(heart.metrics.renews, 1);
  assert.equal(memory.runs()[0].status, 'completed');
});

test('executeWithLease through jco refuses an option it would not honour', async () => {
  const fleetApi = await import('../fleet.mjs');
  const memory = seeded();
  const heart = new fleetApi.HeartFleet({ store: memory });
  await assert.rejects(
    fleetApi.executeWithLease(heart, { runId: 'run-1', owner: 'worker-A', ttlSeconds: 60, clock: () => 0 }, async () => 1),
    { code: 'invalid-input', message: /unknown option clock/ },
  );
  assert.equal(memory.runs()[0].status, 'ready');
  assert.deepEqual(heart.receipts(), []);
});
