// The lease cycle on a MemoryLeaseStore takes the core's compact path (no JSON); everything
// else takes the JSON step protocol. The two must be indistinguishable: the same results,
// receipts, errors and counters, step by step, for common and odd values (a value holding
// the compact form's separator falls back to JSON), refusals and store failures.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HeartFleet, MemoryLeaseStore } from '../index.mjs';

const T0 = new Date('2026-07-30T00:00:00.000Z');

const RUNS = [
  { id: 'plain', status: 'ready', idempotency_key: 'k:plain' },
  {
    id: 'rich',
    status: 'ready',
    idempotency_key: 'k:rich',
    task_id: 'task-9',
    required_capabilities: ['gpu', 'é'],
    budget: { usd: 1.5, caps: [1, 2] },
    objective: 'résumé ✓',
  },
  { id: 'odd\u001fid', status: 'ready', idempotency_key: 'k:odd' },
  { id: 'nul\u001eobjective', status: 'ready', idempotency_key: 'k:nul', objective: 'a\u001eb' },
];

/** Two fleets over equal stores: the compact path (MemoryLeaseStore) and the JSON path. */
function pair() {
  const sides = [];
  for (const viaJson of [false, true]) {
    const mem = new MemoryLeaseStore(T0);
    for (const run of RUNS) mem.insert(run);
    const receipts = [];
    const store = viaJson ? { execute: (r) => mem.execute(r) } : mem;
    const heart = new HeartFleet({ store, onReceipt: (r) => receipts.push(r) });
    sides.push({ mem, heart, receipts });
  }
  return sides;
}

/** Runs `step` on both sides and checks they agree on the outcome and the receipts. */
async function same(sides, label, step) {
  const outcomes = [];
  for (const side of sides) {
    const before = side.receipts.length;
    let outcome;
    try {
      outcome = { value: await step(side.heart, side) };
    } catch (e) {
      outcome = { code: e.code, name: e.name };
    }
    outcomes.push({ outcome, receipts: side.receipts.slice(before) });
  }
  assert.deepStrictEqual(outcomes[0], outcomes[1], label);
  return outcomes[0].outcome.value;
}

test('the compact cycle answers as the JSON protocol does, value by value', async () => {
  const sides = pair();
  for (const { id } of RUNS) {
    const owner = id === 'plain' ? 'worker\u001fA' : 'worker-A';
    const acq = await same(sides, `${id}: acquire`, (h) => h.acquire(id, owner, 60));
    assert.equal(acq.acquired, true, id);
    assert.ok(Object.isFrozen(acq.fence));
    const fence = acq.fence;
    assert.equal(await same(sides, `${id}: verify`, (h) => h.verifyFence(fence)), true);
    const renewed = await same(sides, `${id}: renew`, (h) => h.renew(fence, 30));
    assert.ok(renewed && Object.isFrozen(renewed));
    assert.equal(await same(sides, `${id}: verify the old token`, (h) => h.verifyFence(fence)), false);
    await same(sides, `${id}: acquire while held`, (h) => h.acquire(id, 'worker-B', 60));
    await same(sides, `${id}: release with the old token`, (h) => h.tryRelease(fence, 'completed'));
    const { epoch, ...withoutEpoch } = renewed;
    assert.equal(typeof epoch, 'number');
    await same(sides, `${id}: verify a token without its epoch`, (h) => h.verifyFence(withoutEpoch));
    await same(sides, `${id}: renew a token without its epoch`, (h) => h.tryRenew(withoutEpoch, 30));
    const released = await same(sides, `${id}: release`, (h) => h.release(renewed, 'completed'));
    assert.equal(released.status, 'completed');
    await same(sides, `${id}: renew after the release`, (h) => h.tryRenew(renewed, 30));
    await same(sides, `${id}: acquire a completed run`, (h) => h.acquire(id, owner, 60));
  }
  await same(sides, 'acquire a missing run', (h) => h.acquire('missing', 'w', 60));
  await same(sides, 'acquire with bad input', (h) => h.acquire('', 'w', 60));
  await same(sides, 'release to a status that is not one', (h) => h.release({ runId: 'plain', owner: 'w', leaseExpiresAt: T0.toISOString() }, 'ready '));
  assert.deepStrictEqual(sides[0].heart.metrics, sides[1].heart.metrics);
  assert.ok(sides[0].receipts.length >= 30, `receipts: ${sides[0].receipts.length}`);
  assert.ok(sides[0].receipts.every((r) => Object.isFrozen(r)));
});

test('a store failure on the compact path is the same store-unavailable error', async () => {
  const sides = pair();
  for (const side of sides) side.mem.failNext('*', 1);
  const err = await same(sides, 'acquire on a failing store', async (h) => {
    try {
      await h.acquire('plain', 'w', 60);
      return 'no error';
    } catch (e) {
      return { code: e.code };
    }
  });
  assert.deepStrictEqual(err, { code: 'store-unavailable' });
  const acq = await same(sides, 'acquire after the failure', (h) => h.acquire('plain', 'w', 60));
  assert.equal(acq.acquired, true);
  assert.deepStrictEqual(sides[0].mem.runs(), sides[1].mem.runs());
});

test('without a sink the compact path keeps the receipts in the fleet', async () => {
  const mem = new MemoryLeaseStore(T0);
  mem.insert(RUNS[0]);
  const heart = new HeartFleet({ store: mem });
  const { fence } = await heart.acquire('plain', 'w', 60);
  assert.equal(await heart.verifyFence(fence), true);
  await heart.release(fence, 'completed');
  assert.deepStrictEqual(
    heart.receipts().map((r) => r.event),
    ['acquired', 'fence_verified', 'released'],
  );
});

test('a token the fleet handed out is taken as it is; a copy of it is checked again', async () => {
  const mem = new MemoryLeaseStore(T0);
  mem.insert({ id: 'r', status: 'ready', idempotency_key: 'k:r' });
  const heart = new HeartFleet({ store: mem });
  const { fence } = await heart.acquire('r', 'w', 60);
  // Frozen: its values are the ones the core gave it, so they need no second check.
  assert.ok(Object.isFrozen(fence));
  assert.throws(() => {
    fence.leaseExpiresAt = 'not a time';
  }, TypeError);
  assert.equal(await heart.verifyFence(fence), true);
  // A copy is the caller's own object: a bad value in it is still bad input, not a token.
  const bad = { ...fence, leaseExpiresAt: 'not a time' };
  await assert.rejects(heart.verifyFence(bad), (e) => e instanceof TypeError && e.code === 'invalid-input');
  await assert.rejects(heart.tryRelease({ ...fence, runId: 42 }, 'ready'), (e) => e instanceof TypeError && e.code === 'invalid-input');
  // The renewed token is minted too, and the old one, still frozen, is now a stale token.
  const renewed = await heart.renew(fence, 30);
  assert.ok(Object.isFrozen(renewed));
  assert.equal(await heart.verifyFence(fence), false);
  assert.equal((await heart.release(renewed, 'completed')).status, 'completed');
});
