// The 24 property tests of the reference's heart-fleet-properties suite (semantics §5.1),
// written against this package's public API. Numbering follows §5.1.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import {
  HeartFleet,
  MemoryLeaseStore,
  MemoryEffectLedger,
  executeWithLease,
  guardIrreversible,
  canonicalize,
  sha256Hex,
  deterministicResourceId,
} from '../index.mjs';

const T0 = '2026-07-30T00:00:00.000Z';
const R = '00000000-0000-4000-8000-000000000001';

function setup(options = {}) {
  const store = new MemoryLeaseStore(new Date(T0));
  store.insert({
    id: R,
    assignment_id: `assign:${R}`,
    objective: 'property test',
    status: 'ready',
    idempotency_key: 'prop:run:1',
    created_by: 'test',
  });
  const heart = new HeartFleet({ store, ...options });
  return { store, heart };
}

/** A store and fleet where A's lease died and B took the run over (the §5.1 #6/#7 setup). */
async function staleSetup() {
  const { store, heart } = setup();
  const a = await heart.acquire(R, 'worker-A', 60);
  assert.equal(a.acquired, true);
  store.advance(61_000);
  await heart.reclaimExpired();
  const b = await heart.acquire(R, 'worker-B', 60);
  assert.equal(b.acquired, true);
  return { store, heart, fenceA: a.fence, fenceB: b.fence };
}

test('1. P1 concurrent acquires: exactly one wins', async () => {
  const { heart } = setup();
  const [x, y] = await Promise.all([heart.acquire(R, 'worker-A', 60), heart.acquire(R, 'worker-B', 60)]);
  assert.equal([x, y].filter((r) => r.acquired).length, 1);
  assert.equal(heart.metrics.acquireWins, 1);
  assert.equal(heart.metrics.acquireCollisions, 1);
  const loser = x.acquired ? y : x;
  assert.equal(loser.fence, undefined);
  assert.equal(loser.code, 'lease-held');
});

test('2. P1 a second executeWithLease on a live lease does not run its work', async () => {
  const { heart } = setup();
  const a = await heart.acquire(R, 'worker-A', 60);
  assert.equal(a.acquired, true);
  let ran = false;
  const out = await executeWithLease(heart, { runId: R, owner: 'worker-B', ttlSeconds: 60 }, async () => {
    ran = true;
  });
  assert.equal(out.ran, false);
  assert.equal(out.reason, 'lease-held');
  assert.equal(ran, false);
});

test('3. P2 a killed worker is recovered by the sweep', async () => {
  const { store, heart } = setup();
  await heart.acquire(R, 'worker-A', 60);
  store.advance(61_000);
  const s = await heart.reclaimExpired();
  assert.deepEqual(s.reclaimedIds, [R]);
  const row = store.getRun(R);
  assert.equal(row.status, 'ready');
  assert.equal(row.retries, 1);
  assert.equal(row.lease_owner, null);
  assert.equal((await heart.acquire(R, 'worker-B', 60)).acquired, true);
});

test('4. P2 a renewed lease survives the sweep', async () => {
  const { store, heart } = setup();
  const a = await heart.acquire(R, 'worker-A', 60);
  store.advance(30_000);
  const renewed = await heart.renew(a.fence, 60);
  assert.notEqual(renewed, null);
  store.advance(45_000);
  const s = await heart.reclaimExpired();
  assert.equal(s.reclaimedCount, 0);
});

test('5. P2 the retry ceiling quarantines (maxRetries 2)', async () => {
  const { store, heart } = setup({ maxRetries: 2 });
  const outcomes = [];
  for (let i = 0; i < 3; i += 1) {
    assert.equal((await heart.acquire(R, `worker-${i}`, 60)).acquired, true);
    store.advance(61_000);
    const s = await heart.reclaimExpired();
    outcomes.push(s.quarantinedIds.length ? 'quarantined' : s.reclaimedIds.length ? 'reclaimed' : 'none');
    if (i === 2) assert.deepEqual(s.quarantinedIds, [R]);
  }
  assert.deepEqual(outcomes, ['reclaimed', 'reclaimed', 'quarantined']);
  assert.equal(store.getRun(R).status, 'quarantined');
  assert.equal(heart.metrics.quarantines, 1);
  const x = await heart.acquire(R, 'worker-X', 60);
  assert.equal(x.acquired, false);
  assert.equal(x.code, 'quarantined');
});

test('6. P3 a dead fence is refused everywhere', async () => {
  const { store, heart, fenceA } = await staleSetup();
  assert.equal(await heart.verifyFence(fenceA), false);
  assert.equal(await heart.renew(fenceA, 60), null);
  assert.equal(await heart.release(fenceA, 'completed'), null);
  const row = store.getRun(R);
  assert.equal(row.status, 'leased');
  assert.equal(row.lease_owner, 'worker-B');
  assert.ok(heart.metrics.fenceRejections >= 1);
});

test('7. P3 guardIrreversible on a stale fence does not fire', async () => {
  const { heart, fenceA } = await staleSetup();
  let fired = 0;
  const r = await guardIrreversible(heart, fenceA, new MemoryEffectLedger(), 'send:tg:123', async () => {
    fired += 1;
  });
  assert.equal(r.committed, false);
  assert.equal(r.reason, 'fence-rejected');
  assert.equal(fired, 0);
});

test('8. P3 the zombie window: an expired, unreclaimed token does not verify', async () => {
  const { store, heart } = setup();
  const a = await heart.acquire(R, 'worker-A', 60);
  store.advance(61_000);
  assert.equal(await heart.verifyFence(a.fence), false);
});

test('9. P4 a retry after a crash dedupes the effect', async () => {
  const { store, heart } = setup();
  const ledger = new MemoryEffectLedger();
  let fired = 0;
  const effect = async () => {
    fired += 1;
    return 'paid';
  };
  const a = await heart.acquire(R, 'worker-A', 60);
  const first = await guardIrreversible(heart, a.fence, ledger, 'spend:invoice:42', effect);
  assert.deepEqual({ committed: first.committed, result: first.result }, { committed: true, result: 'paid' });
  store.advance(61_000);
  await heart.reclaimExpired();
  const b = await heart.acquire(R, 'worker-B', 60);
  const second = await guardIrreversible(heart, b.fence, ledger, 'spend:invoice:42', effect);
  assert.equal(second.committed, false);
  assert.equal(second.reason, 'already-committed');
  assert.equal(fired, 1);
  assert.equal(heart.metrics.effectCommits, 1);
  assert.equal(heart.metrics.effectDedupes, 1);
});

test('10. P4 distinct keys both fire', async () => {
  const { heart } = setup();
  const ledger = new MemoryEffectLedger();
  let fired = 0;
  const a = await heart.acquire(R, 'worker-A', 60);
  for (const key of ['effect:1', 'effect:2']) {
    const r = await guardIrreversible(heart, a.fence, ledger, key, async () => {
      fired += 1;
    });
    assert.equal(r.committed, true);
  }
  assert.equal(fired, 2);
});

test('11. P5 the lifecycle leaves one acquired and one released receipt', async () => {
  const { store, heart } = setup();
  const out = await executeWithLease(heart, { runId: R, owner: 'worker-A', ttlSeconds: 60 }, async () => 'done');
  assert.equal(out.ran, true);
  assert.equal(out.result, 'done');
  assert.equal(store.getRun(R).status, 'completed');
  const events = heart.receipts().filter((r) => r.runId === R).map((r) => r.event);
  assert.equal(events.filter((e) => e === 'acquired').length, 1);
  assert.equal(events.filter((e) => e === 'released').length, 1);
  assert.equal(events.includes('reclaimed'), false);
  assert.equal(heart.metrics.releases, 1);
});

test('12. P5 receipts are tamper-evident: every digest recomputes', async () => {
  const { heart } = setup();
  await executeWithLease(heart, { runId: R, owner: 'worker-A', ttlSeconds: 60 }, async () => 'done');
  const receipts = heart.receipts();
  assert.ok(receipts.length >= 2);
  for (const r of receipts) {
    const body = { event: r.event, runId: r.runId, owner: r.owner, leaseExpiresAt: r.leaseExpiresAt, effectKey: r.effectKey };
    const want = 'sha256:dreamnet-sorted-json:v0:' + sha256Hex(canonicalize(body));
    assert.equal(r.digest, want);
    // And independently of this package: node:crypto over the canonical text.
    assert.equal(r.digest.slice(31), createHash('sha256').update(canonicalize(body), 'utf8').digest('hex'));
    assert.ok(Object.isFrozen(r));
  }
});

test('13. P5 crash recovery leaves receipts in order', async () => {
  const { store, heart } = setup();
  const a = await heart.acquire(R, 'worker-A', 60);
  assert.equal(a.acquired, true);
  store.advance(61_000);
  await heart.reclaimExpired();
  const b = await heart.acquire(R, 'worker-B', 60);
  await heart.release(b.fence, 'completed');
  assert.deepEqual(
    heart.receipts().map((r) => r.event),
    ['acquired', 'reclaimed', 'acquired', 'released'],
  );
  const row = store.getRun(R);
  assert.equal(row.status, 'completed');
  assert.equal(row.retries, 1);
});

// 14-23: the ten DreamNet cross-runtime fixture pins. The expected sha256 values are the
// ones recorded in core/tests/vectors/golden-vectors.json (upstream_fixture_crosscheck).
const golden = JSON.parse(readFileSync(new URL('../../core/tests/vectors/golden-vectors.json', import.meta.url), 'utf8'));
const pinned = Object.fromEntries(golden.upstream_fixture_crosscheck.names_and_sha256.map((v) => [v.name, v.sha256]));
const fixtures = [
  ['phase1-golden', { z: 100, a: 'dreamnet-spore', m: { b: true, a: null } }, '{"a":"dreamnet-spore","m":{"a":null,"b":true},"z":100}'],
  ['simple-sort', { b: 2, a: 1 }, '{"a":1,"b":2}'],
  ['nested-sort-arrays', { z: [3, 2, 1], a: { y: 'test', x: true } }, '{"a":{"x":true,"y":"test"},"z":[3,2,1]}'],
  ['undefined-omission', { active: true, gone: undefined, list: [1, undefined, 3] }, '{"active":true,"list":[1,null,3]}'],
  ['integer-like-keys', { 2: 4, 10: 3, B: 1, a: 2, _z: 5 }, '{"10":3,"2":4,"B":1,"_z":5,"a":2}'],
  ['unicode-escapes', { 'käy': 'väl"ue\n\t', emoji: 'x' }, '{"emoji":"x","käy":"väl\\"ue\\n\\t"}'],
  ['numbers', { a: 0, b: 1.5, c: 1e21, d: -3, e: 0.1, f: 9007199254740991 }, '{"a":0,"b":1.5,"c":1e+21,"d":-3,"e":0.1,"f":9007199254740991}'],
  ['null-empty', { a: null, b: [null, null], c: {}, d: [] }, '{"a":null,"b":[null,null],"c":{},"d":[]}'],
  ['deep-nesting', { d: { c: { b: { a: [{ z: 1, y: 2 }] } } } }, '{"d":{"c":{"b":{"a":[{"y":2,"z":1}]}}}}'],
  ['top-level-array', [{ b: 1, a: 2 }, 3], '[{"a":2,"b":1},3]'],
];
fixtures.forEach(([name, input, canonical], i) => {
  test(`${14 + i}. fixture pin ${name}`, () => {
    assert.equal(canonicalize(input), canonical);
    assert.equal(sha256Hex(canonicalize(input)), pinned[name]);
  });
});

test('24. deterministicResourceId is stable and order-sensitive', () => {
  const canary = deterministicResourceId('zoe.heart.canary', 'singleton');
  assert.equal(canary, 'heart:resource:feafc855c8ea80bff32ad3d81a37a199ae66bc65d256288bd91683ffd8438bed');
  assert.equal(deterministicResourceId('zoe.heart.canary', 'singleton'), canary);
  assert.notEqual(deterministicResourceId('a', 'b'), deterministicResourceId('b', 'a'));
});
