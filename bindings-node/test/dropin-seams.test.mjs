// The seams where a user plugs in their own objects, tested as the TypeScript package's
// authors and the app's authors wrote their tests against it (their import path switched):
// a user's LeaseStore (getRun, conditionalUpdate, findExpiredLeases, now), a user's
// LivenessStore (now, liveInstances, markInstancesDead, runsOwnedBy, reclaimRun),
// MemoryLeaseStore's LeaseStore methods, maxRetries: Infinity, the app's lease manager and
// liveness delegation, and what bad stores and bad options get.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assertShape } from './helpers/shape.mjs';
import {
  HeartFleet,
  MemoryLeaseStore,
  LivenessReclaimer,
  isLeaseExpired,
  canAcquire,
  isInstanceExpired,
  deadInstanceIds,
  runsLeasedToDeadInstances,
  DEFAULT_LIVENESS_TTL_MS,
  HeartFleetError,
  DurableEffectLedger,
  sendOnce,
  SupabaseLeaseStore,
} from '../index.mjs';
import { FakeSupabase } from './helpers/fake-supabase.mjs';
import contract from '../lib/contract.cjs';

const R = '00000000-0000-4000-8000-000000000001';
const R2 = '00000000-0000-4000-8000-000000000002';
const MISSING = '00000000-0000-4000-8000-0000000000ff';
const plus = (iso, ms) => new Date(Date.parse(iso) + ms).toISOString();

/** An agent_runs row as the store hands it back: the schema's defaults, then `fields`. */
function row(fields) {
  return {
    id: fields.id,
    task_id: null,
    assignment_id: fields.id,
    objective: 'run',
    required_capabilities: [],
    status: 'ready',
    assigned_agent: null,
    lease_owner: null,
    lease_expires_at: null,
    retries: 0,
    budget: null,
    approval_state: 'auto',
    visibility: 'team',
    idempotency_key: `key:${fields.id}`,
    created_by: 'heart-fleet',
    created_at: fields.created_at,
    updated_at: fields.created_at,
    fencing_epoch: 0,
    ...fields,
  };
}

// ---------------------------------------------------------------------------------------
// A user's LeaseStore: the TypeScript package's four-method contract over a plain Map
// ---------------------------------------------------------------------------------------

/**
 * A LeaseStore as a user writes one (the TypeScript package's MemoryLeaseStore semantics:
 * strict eq, array-includes in, Date lt, shallow merge, expired means `expiry < now`),
 * sync or async. `calls` records every method called.
 */
function mapStore(rows, { now, async = true } = {}) {
  const data = new Map(rows.map((r) => [r.id, { ...r }]));
  const calls = [];
  let clock = Date.parse(now);
  const answer = (v) => (async ? Promise.resolve(v) : v);
  const store = {
    data,
    calls,
    advance(ms) {
      clock += ms;
    },
    getRun(runId) {
      calls.push('getRun');
      const r = data.get(runId);
      return answer(r ? { ...r } : null);
    },
    conditionalUpdate(runId, updates, conditions = {}) {
      calls.push('conditionalUpdate');
      const r = data.get(runId);
      if (!r) return answer(null);
      for (const [k, v] of Object.entries(conditions.eq ?? {})) if (r[k] !== v) return answer(null);
      for (const [k, vs] of Object.entries(conditions.in ?? {})) if (!vs.includes(r[k])) return answer(null);
      for (const [k, b] of Object.entries(conditions.lt ?? {})) if (typeof r[k] !== 'string' || !(new Date(r[k]) < new Date(b))) return answer(null);
      const next = { ...r, ...updates };
      data.set(runId, next);
      return answer({ ...next });
    },
    findExpiredLeases(nowIso, limit) {
      calls.push('findExpiredLeases');
      const out = [];
      for (const r of data.values()) {
        if ((r.status === 'leased' || r.status === 'running') && r.lease_expires_at && new Date(r.lease_expires_at) < new Date(nowIso)) out.push({ ...r });
        if (out.length >= limit) break;
      }
      return answer(out);
    },
    now() {
      calls.push('now');
      return new Date(clock);
    },
  };
  return store;
}

const T = '2026-07-30T00:00:00.000Z';
/** A run as a store of the TypeScript package's schema holds it (no fencing_epoch). */
const READY = { id: R, status: 'ready', lease_owner: null, lease_expires_at: null, retries: 0, idempotency_key: 'job:1', created_at: T, updated_at: T };

for (const async of [false, true]) {
  const mode = async ? 'async' : 'sync';

  test(`a user's LeaseStore (${mode}): the whole lease cycle, decided by the core, written with compare-and-set`, async () => {
    const store = mapStore([READY], { now: T, async });
    const heart = new HeartFleet({ store });
    const a = await heart.acquire(R, 'worker-A', 60);
    const leased = row({ id: R, idempotency_key: 'job:1', created_at: T, status: 'leased', lease_owner: 'worker-A', lease_expires_at: plus(T, 60_000) });
    const fenceA = { runId: R, owner: 'worker-A', leaseExpiresAt: plus(T, 60_000), epoch: 0 };
    assertShape(a, { acquired: true, run: leased, fence: fenceA });
    // Written: only what the decision changed; the store's row keeps its own columns.
    assert.deepEqual(store.data.get(R), { ...READY, status: 'leased', lease_owner: 'worker-A', lease_expires_at: plus(T, 60_000) });

    store.advance(30_000);
    const renewed = await heart.renew(a.fence, 60);
    assert.deepEqual(renewed, { runId: R, owner: 'worker-A', leaseExpiresAt: plus(T, 90_000), epoch: 0 });
    assert.equal(await heart.verifyFence(renewed), true);
    assert.equal(await heart.verifyFence(a.fence), false, 'the renew rotated the token');
    assert.equal(await heart.renew(a.fence, 60), null);

    const released = await heart.release(renewed, 'completed');
    assert.deepEqual(released, row({ id: R, idempotency_key: 'job:1', created_at: T, updated_at: plus(T, 30_000), status: 'completed' }));
    assert.equal(await heart.release(renewed, 'completed'), null);
    assert.deepEqual(store.data.get(R), { ...READY, status: 'completed', updated_at: plus(T, 30_000) });
    assert.deepEqual(
      heart.receipts().map((r) => r.event),
      ['acquired', 'renewed', 'fence_verified', 'fence_rejected', 'fence_rejected', 'released', 'fence_rejected'],
    );
    assert.deepEqual(heart.metrics, {
      acquireAttempts: 1,
      acquireWins: 1,
      acquireCollisions: 0,
      renews: 1,
      renewFailures: 1,
      releases: 1,
      releaseFailures: 1,
      reclaims: 0,
      quarantines: 0,
      fenceVerifications: 1,
      fenceRejections: 1,
      effectCommits: 0,
      effectDedupes: 0,
    });
  });

  test(`a user's LeaseStore (${mode}): the sweep goes through findExpiredLeases; the retry ceiling holds`, async () => {
    const store = mapStore([READY, { ...READY, id: R2, idempotency_key: 'job:2' }], { now: T, async });
    const heart = new HeartFleet({ store, maxRetries: 1 });
    await heart.acquire(R, 'A', 60);
    await heart.acquire(R2, 'B', 600);
    store.advance(61_000);
    store.calls.length = 0;
    assertShape(await heart.reclaimExpired(), { reclaimedCount: 1, reclaimedIds: [R], quarantinedIds: [], errors: [] });
    // One clock, one scan, one write: the scanned row is the read of its write.
    assert.deepEqual(store.calls, ['now', 'findExpiredLeases', 'conditionalUpdate']);
    assert.deepEqual(store.data.get(R), { ...READY, retries: 1, updated_at: plus(T, 61_000) });
    assert.equal(store.data.get(R2).lease_owner, 'B');
    await heart.acquire(R, 'C', 60);
    store.advance(61_000);
    assertShape(await heart.reclaimExpired(), { reclaimedCount: 0, reclaimedIds: [], quarantinedIds: [R], errors: [] });
    assert.equal(store.data.get(R).status, 'quarantined');
    assert.equal(store.data.get(R).retries, 2);
    assert.deepEqual(
      heart.receipts().filter((r) => r.event === 'reclaimed' || r.event === 'quarantined').map((r) => [r.event, r.owner]),
      [['reclaimed', 'A'], ['quarantined', 'C']],
    );
  });

  test(`a user's LeaseStore (${mode}): concurrent acquires, exactly one wins; the loser's row is read once`, async () => {
    const store = mapStore([READY], { now: T, async });
    const heart = new HeartFleet({ store });
    const results = await Promise.all([heart.acquire(R, 'A', 60), heart.acquire(R, 'B', 60)]);
    assert.deepEqual(results.map((r) => r.acquired).sort(), [false, true]);
    const winner = results.find((r) => r.acquired).fence.owner;
    const loser = results.find((r) => !r.acquired);
    assert.equal(store.data.get(R).lease_owner, winner);
    assert.equal(loser.reason, "Cannot acquire: status 'leased', lease not expired");
    assert.equal(loser.code, 'lease-held');
    assert.equal(heart.metrics.acquireWins, 1);
    assert.equal(heart.metrics.acquireCollisions, 1);

    // Acquire reads the row once, whether it wins (then writes once) or not.
    store.calls.length = 0;
    const held = await heart.acquire(R, 'C', 60);
    assert.equal(held.acquired, false);
    assert.deepEqual(store.calls, ['now', 'getRun']);
    store.calls.length = 0;
    assertShape(await heart.acquire(MISSING, 'C', 60), { acquired: false, run: null, reason: 'Run not found' }, { code: 'run-not-found' });
    assert.deepEqual(store.calls, ['now', 'getRun']);
  });

  test(`a user's LeaseStore (${mode}): renew, verifyFence and a release to a final status are the reference's own calls, the clock then one conditionalUpdate`, async () => {
    const store = mapStore([READY], { now: T, async });
    const written = [];
    const update = store.conditionalUpdate;
    store.conditionalUpdate = (id, updates, conditions) => {
      written.push([updates, conditions]);
      return update(id, updates, conditions);
    };
    const heart = new HeartFleet({ store });
    const a = await heart.acquire(R, 'worker-A', 60);
    const held = { eq: { lease_expires_at: plus(T, 60_000), lease_owner: 'worker-A' }, in: { status: ['leased', 'running'] } };
    for (const [what, op, updates] of [
      ['verifyFence', () => heart.verifyFence(a.fence), { updated_at: plus(T, 1_000) }],
      ['renew', () => heart.renew(a.fence, 60), { lease_expires_at: plus(T, 61_000), updated_at: plus(T, 1_000) }],
    ]) {
      store.advance(what === 'verifyFence' ? 1_000 : 0);
      store.calls.length = 0;
      written.length = 0;
      assert.ok(await op(), what);
      assert.deepEqual(store.calls, ['now', 'conditionalUpdate'], what);
      assert.deepEqual(written, [[updates, held]], what);
    }
    // The token the renew replaced: the write misses, and the core decides on the row why.
    store.calls.length = 0;
    assert.equal(await heart.verifyFence(a.fence), false);
    assert.deepEqual(store.calls, ['now', 'conditionalUpdate', 'now', 'getRun']);
    const fence = { ...a.fence, leaseExpiresAt: plus(T, 61_000) };
    store.calls.length = 0;
    written.length = 0;
    const released = await heart.release(fence, 'completed');
    assert.equal(released.status, 'completed');
    assert.deepEqual(store.calls, ['now', 'conditionalUpdate']);
    assert.deepEqual(written, [
      [{ lease_expires_at: null, lease_owner: null, status: 'completed', updated_at: plus(T, 1_000) }, { ...held, eq: { ...held.eq, lease_expires_at: plus(T, 61_000) } }],
    ]);
    assert.deepEqual(store.data.get(R), { ...READY, status: 'completed', updated_at: plus(T, 1_000) });
    assert.deepEqual(
      heart.receipts().map((r) => r.event),
      ['acquired', 'fence_verified', 'renewed', 'fence_rejected', 'released'],
    );
  });
}

test("a user's LeaseStore that keeps timestamps in its own text: a write stated whole misses, and the core decides it on the row", async () => {
  // PostgreSQL's text form, as a store over timestamptz returns it.
  const pgText = (iso) => (typeof iso === 'string' ? iso.replace(/\.000Z$/, '+00:00') : iso);
  const store = mapStore([READY], { now: T });
  const update = store.conditionalUpdate;
  store.conditionalUpdate = async (id, updates, conditions) => {
    const row = await update(id, updates, conditions);
    if (row) store.data.set(id, { ...store.data.get(id), lease_expires_at: pgText(row.lease_expires_at) });
    return row && { ...row, lease_expires_at: pgText(row.lease_expires_at) };
  };
  const heart = new HeartFleet({ store });
  const a = await heart.acquire(R, 'worker-A', 60);
  assert.equal(store.data.get(R).lease_expires_at, '2026-07-30T00:01:00+00:00');
  store.calls.length = 0;
  assert.equal(await heart.verifyFence(a.fence), true);
  // The stated write misses on the text; the core reads the row, decides the token holds,
  // and writes conditioned on the values as read.
  assert.deepEqual(store.calls, ['now', 'conditionalUpdate', 'now', 'getRun', 'conditionalUpdate']);
  assert.deepEqual(heart.receipts().map((r) => r.event), ['acquired', 'fence_verified']);
});

test("a user's LeaseStore: rows written by another node (other timestamp text, no fencing_epoch) are compared as read", async () => {
  // A lease an old node left: PostgreSQL's text form of the expiry, expired at T.
  const store = mapStore([{ ...READY, status: 'leased', lease_owner: 'old-node', lease_expires_at: '2026-07-29T23:59:00+00:00' }], { now: T });
  const heart = new HeartFleet({ store });
  const a = await heart.acquire(R, 'new-node', 60);
  assert.equal(a.acquired, true);
  assert.equal(a.run.retries, 1, 'a takeover counts as a recovery');
  assert.deepEqual(store.data.get(R), { ...READY, status: 'leased', lease_owner: 'new-node', lease_expires_at: plus(T, 60_000), retries: 1 });
  assert.equal('fencing_epoch' in store.data.get(R), false);
  assert.deepEqual(heart.receipts().map((r) => [r.event, r.owner]), [['reclaimed', 'old-node'], ['acquired', 'new-node']]);
});

test("a user's LeaseStore: a row that keeps changing is re-decided casRetries times, then reported, never a silent miss", async () => {
  const store = mapStore([READY], { now: T });
  const update = store.conditionalUpdate;
  let interference = 0;
  store.conditionalUpdate = (id, updates, conditions) => {
    // Another writer touches the row between every read and write.
    interference += 1;
    store.data.set(id, { ...store.data.get(id), retries: interference });
    return update(id, updates, conditions);
  };
  const heart = new HeartFleet({ store, casRetries: 3 });
  await assert.rejects(heart.acquire(R, 'A', 60), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable' && /kept changing \(compare-and-set lost 3 times\)/.test(e.message));
  assert.equal(interference, 3);
  assert.equal(store.data.get(R).status, 'ready');
  // A row that changes once is simply decided again.
  interference = 10;
  store.conditionalUpdate = (id, updates, conditions) => {
    if (interference === 10) store.data.set(id, { ...store.data.get(id), retries: (interference += 1) });
    return update(id, updates, conditions);
  };
  assert.equal((await heart.acquire(R, 'A', 60)).acquired, true);
  assert.equal(store.data.get(R).retries, 11);
});

test("a user's LeaseStore with a ledger of its own client: sendOnce fences through the LeaseStore, once", async () => {
  // The ledger's requests go to its client; the run's (the fence check) to the user's store,
  // decided by the core one request at a time.
  const store = mapStore([READY], { now: T });
  const heart = new HeartFleet({ store });
  const ledger = new DurableEffectLedger({ client: new FakeSupabase({ outboxClient: true }), now: () => new Date(T) });
  const a = await heart.acquire(R, 'A', 60);
  let fired = 0;
  const send = () => sendOnce(heart, ledger, { fence: a.fence, channel: 'telegram', effectKey: 'k-1', payload: { text: 'hi' }, send: async () => ({ id: ++fired }) });
  store.calls.length = 0;
  const first = await send();
  assert.deepEqual([first.sent, first.result], [true, { id: 1 }]);
  // The fence check (a read and a compare-and-set), then the ledger's read of the run for
  // the dispatch (the clock and the row).
  assert.deepEqual(store.calls, ['now', 'getRun', 'conditionalUpdate', 'now', 'getRun']);
  const again = await send();
  assert.deepEqual([again.sent, again.reason], [false, 'deduped']);
  assert.equal(fired, 1);
  // A fence the run no longer honours: refused before the effect, nothing sent.
  store.data.set(R, { ...store.data.get(R), lease_owner: 'B' });
  const refused = await sendOnce(heart, ledger, { fence: a.fence, channel: 'telegram', effectKey: 'k-2', payload: {}, send: async () => ({ id: ++fired }) });
  assert.deepEqual([refused.sent, refused.reason], [false, 'fence-rejected']);
  assert.equal(fired, 1);
});

test("a user's LeaseStore: requests its contract cannot serve fail with invalid-input naming what is missing", async () => {
  const store = mapStore([READY], { now: T });
  const heart = new HeartFleet({ store });
  const missing = (what) => (e) => e instanceof HeartFleetError && e.code === 'invalid-input' && e.message.includes(`cannot ${what}`) && e.message.includes('execute(request)');
  await assert.rejects(heart.listRuns(), missing('list runs'));
  await assert.rejects(heart.ensureResourceRun('kind', 'key'), missing('create runs'));
  await assert.rejects(heart.registerInstance('i-1'), missing('store agent instances'));
  await assert.rejects(heart.reclaimDeadInstanceRuns(), missing('store agent instances'));
  assert.deepEqual(store.data.get(R), READY);
});

// ---------------------------------------------------------------------------------------
// Bad stores and bad options: a clear coded error, nothing written
// ---------------------------------------------------------------------------------------

test('an object that implements no store contract is a TypeError naming what it lacks', () => {
  const half = { getRun() {}, now() {} };
  assert.throws(
    () => new HeartFleet({ store: half }),
    (e) => e instanceof TypeError && e.code === 'invalid-input' && /no execute and lacks conditionalUpdate, findExpiredLeases$/.test(e.message),
  );
  assert.throws(() => new HeartFleet({ store: 'db' }), (e) => e instanceof TypeError && /got a string/.test(e.message));
  assert.throws(
    () => new LivenessReclaimer({ store: { now() {}, liveInstances() {} } }),
    (e) =>
      e instanceof TypeError &&
      e.code === 'invalid-input' &&
      e.message.includes('lacks markInstancesDead, runsOwnedBy, reclaimRun of the LivenessStore') &&
      e.message.includes('no execute and lacks getRun, conditionalUpdate, findExpiredLeases'),
  );
  const heart = new HeartFleet({ store: new MemoryLeaseStore(T) });
  assert.throws(() => new LivenessReclaimer({ heart, store: {} }), (e) => e instanceof TypeError && e.message.includes('lacks now, liveInstances'));
});

test('unknown HeartFleet options are a TypeError naming them; options a store cannot honour too', () => {
  const store = new MemoryLeaseStore(T);
  assert.throws(() => new HeartFleet({ store, maxRetry: 3 }), (e) => e instanceof TypeError && e.code === 'invalid-input' && /unknown option maxRetry \(/.test(e.message));
  assert.throws(() => new HeartFleet({ store, onReciept() {}, ttl: 1 }), (e) => e instanceof TypeError && /unknown option onReciept, ttl/.test(e.message));
  assert.throws(() => new HeartFleet({ store, casRetries: 2 }), (e) => e instanceof TypeError && /casRetries applies only to a store with the LeaseStore methods/.test(e.message));
  for (const bad of [0, -1, 1.5, '100', 2 ** 31]) {
    assert.throws(() => new HeartFleet({ store, storeTimeoutMs: bad }), (e) => e instanceof TypeError && /storeTimeoutMs must be an integer in 1\.\.=2147483647/.test(e.message));
  }
  assert.throws(() => new HeartFleet({ store: mapStore([], { now: T }), casRetries: 0 }), (e) => e instanceof TypeError && /casRetries/.test(e.message));
  // The bound is the core's (the contract's maxCasRetries), as is the supabase store's.
  const max = contract.maxCasRetries;
  assert.ok(Number.isInteger(max) && max >= contract.defaults.casRetries);
  assert.ok(new HeartFleet({ store: mapStore([], { now: T }), casRetries: max }));
  assert.throws(() => new HeartFleet({ store: mapStore([], { now: T }), casRetries: max + 1 }), (e) => e instanceof TypeError && e.message.includes(`casRetries must be an integer in 1..=${max}`));
  assert.ok(new SupabaseLeaseStore({ client: new FakeSupabase(), casRetries: max }));
  assert.throws(() => new SupabaseLeaseStore({ client: new FakeSupabase(), casRetries: max + 1 }), (e) => e instanceof TypeError && e.message.includes(`1..=${max}`));
  assert.equal(new HeartFleet({ store, maxRetries: 3 }).maxRetries, 3);
});

/** A LeaseStore whose `method` misbehaves as `how`; the rest are a Map store's. */
function broken(method, how) {
  const store = mapStore([READY], { now: T });
  const real = store[method];
  store[method] = (...args) => {
    if (how === 'throws') throw new Error('connection reset');
    if (how === 'rejects') return Promise.reject(new Error('connection reset'));
    if (how === 'never settles') return new Promise(() => {});
    if (how === 'wrong shape') return method === 'findExpiredLeases' ? { rows: [] } : method === 'now' ? '2026-07-30' : 'ok';
    return real(...args);
  };
  return store;
}

test('a store method that throws, rejects, answers a wrong shape or never settles: a coded error, rows unchanged', async () => {
  // node:test ends a file whose event loop is empty; the store timer is unref'd by design.
  const keepAlive = setInterval(() => {}, 1000);
  try {
    const cases = [
      ['throws', 'store-unavailable', /connection reset/],
      ['rejects', 'store-unavailable', /connection reset/],
      ['wrong shape', 'store-protocol', /returned|not a valid Date/],
      ['never settles', 'store-unavailable', /no answer within 20 ms \(storeTimeoutMs\)/],
    ];
    for (const method of ['getRun', 'conditionalUpdate', 'now']) {
      for (const [how, code, message] of cases) {
        const store = broken(method, how);
        const heart = new HeartFleet({ store, storeTimeoutMs: 20 });
        await assert.rejects(
          heart.acquire(R, 'A', 60),
          (e) => e instanceof HeartFleetError && e.code === code && e.message.startsWith('store failed at acquire: conditional write: ') && message.test(e.message),
          `${method} ${how}`,
        );
        assert.deepEqual([...store.data.values()], [READY], `${method} ${how}: nothing written`);
        assert.equal(heart[Symbol.for('heart-fleet.native')].pending(), 0, `${method} ${how}: the failed operation was freed`);
      }
    }
    for (const [how, code, message] of cases) {
      const store = broken('findExpiredLeases', how);
      const heart = new HeartFleet({ store, storeTimeoutMs: 20 });
      await assert.rejects(heart.reclaimExpired(), (e) => e.code === code && e.message.startsWith('store failed at reclaim: scan: ') && message.test(e.message), how);
      assert.deepEqual([...store.data.values()], [READY]);
    }
    // Our own contract too: an execute that never settles.
    const mem = new MemoryLeaseStore(T);
    mem.insert({ id: R, idempotency_key: 'k' });
    const heart = new HeartFleet({ store: { execute: () => new Promise(() => {}) }, storeTimeoutMs: 20 });
    await assert.rejects(heart.verifyFence({ runId: R, owner: 'A', leaseExpiresAt: T }), (e) => e.code === 'store-unavailable' && /store failed at verify: conditional write: no answer within 20 ms/.test(e.message));
  } finally {
    clearInterval(keepAlive);
  }
});

test('a store answer that is late is not waited for past storeTimeoutMs, and the late store gets no further call', async () => {
  const store = mapStore([READY], { now: T });
  const read = store.getRun;
  store.getRun = (id) => new Promise((resolve) => setTimeout(() => resolve(read(id)), 300));
  const heart = new HeartFleet({ store, storeTimeoutMs: 20 });
  const started = Date.now();
  await assert.rejects(heart.acquire(R, 'A', 60), (e) => e.code === 'store-unavailable');
  assert.ok(Date.now() - started < 250, 'failed at the timeout, not when the store answered');
  await new Promise((resolve) => setTimeout(resolve, 350));
  assert.equal(store.calls.includes('conditionalUpdate'), false, 'the abandoned request wrote nothing');
  assert.deepEqual(store.data.get(R), READY);
});

// ---------------------------------------------------------------------------------------
// MemoryLeaseStore's LeaseStore methods (the TypeScript package's MemoryLeaseStore)
// ---------------------------------------------------------------------------------------

test('MemoryLeaseStore: clock, insert with the defaults, the idempotency key collision', () => {
  const store = new MemoryLeaseStore();
  assert.equal(store.now().toISOString(), '1970-01-01T00:00:00.000Z');
  store.setNow(new Date('2026-07-20T10:00:00.000Z'));
  const now = store.now();
  now.setFullYear(2000);
  assert.equal(store.now().toISOString(), '2026-07-20T10:00:00.000Z', 'now() is a copy');
  store.advance(1500);
  const inserted = store.insert({ id: R, idempotency_key: 'job:1', status: 'ready' });
  assert.deepEqual(inserted, row({ id: R, idempotency_key: 'job:1', created_at: '2026-07-20T10:00:01.500Z' }));
  assert.throws(() => store.insert({ id: R2, idempotency_key: 'job:1' }), { message: 'Idempotency key collision: job:1' });
  assert.equal(store.getRun(R2), null);
});

test('MemoryLeaseStore.conditionalUpdate: strict eq, in, lt, shallow merge, updated_at untouched, null on a miss', async () => {
  const T0 = '2026-07-20T10:00:00.000Z';
  const store = new MemoryLeaseStore(T0);
  store.insert({ id: R, idempotency_key: 'job:1', status: 'leased', lease_owner: 'w1', lease_expires_at: '2026-07-20T10:05:00.000Z' });
  const before = store.getRun(R);
  assert.equal(await store.conditionalUpdate(MISSING, { status: 'ready' }, { eq: { status: 'leased' } }), null);
  assert.equal(await store.conditionalUpdate(R, { status: 'ready' }, { eq: { status: 'running' } }), null);
  assert.equal(await store.conditionalUpdate(R, { status: 'ready' }, { eq: { retries: '0' } }), null, 'strict: "0" is not 0');
  assert.equal(await store.conditionalUpdate(R, { status: 'ready' }, { in: { status: ['ready', 'running'] } }), null);
  assert.equal(await store.conditionalUpdate(R, { status: 'ready' }, { lt: { lease_expires_at: '2026-07-20T10:05:00.000Z' } }), null, 'lt is strict');
  assert.equal(await store.conditionalUpdate(R, { status: 'ready' }, { lt: { lease_owner: '2030-01-01T00:00:00.000Z' } }), null, 'lt needs a timestamp');
  assert.deepEqual(store.getRun(R), before, 'misses change nothing');

  await assert.rejects(
    store.conditionalUpdate(R, { status: 'ready' }, { eq: { assigned_agent: null } }),
    (e) => e instanceof TypeError && /"assigned_agent" is not a column the store's conditional writes address/.test(e.message),
    'columns beyond the core\'s conditional writes are refused',
  );

  const hit = await store.conditionalUpdate(
    R,
    { lease_expires_at: '2026-07-20T10:09:00.000Z' },
    { eq: { lease_owner: 'w1' }, in: { status: ['leased', 'running'] }, lt: { lease_expires_at: '2026-07-20T10:05:00.001Z' } },
  );
  assert.deepEqual(hit, { ...before, lease_expires_at: '2026-07-20T10:09:00.000Z' });
  assert.equal(hit.updated_at, T0, 'updated_at is not touched unless given');
  assert.deepEqual(store.getRun(R), hit);
  const reset = await store.conditionalUpdate(R, { status: 'ready', lease_owner: null, lease_expires_at: null, retries: 1, updated_at: '2026-07-20T10:10:00.000Z' }, { eq: { lease_expires_at: '2026-07-20T10:09:00.000Z' } });
  assert.deepEqual(reset, { ...before, status: 'ready', lease_owner: null, lease_expires_at: null, retries: 1, updated_at: '2026-07-20T10:10:00.000Z' });
  assert.equal((await store.conditionalUpdate(R, { retries: 2 }, { eq: { lease_owner: null, lease_expires_at: null } })).retries, 2, 'null === null');
  await assert.rejects(store.conditionalUpdate(R, { retries: 'three' }, {}), (e) => e instanceof TypeError && /updates\.retries cannot be a string/.test(e.message));
  assert.equal(store.getRun(R).retries, 2);
});

test('MemoryLeaseStore.findExpiredLeases: held runs expired at nowIso (<=, the one expiry rule), insertion order, at most limit', async () => {
  const T0 = '2026-07-20T10:00:00.000Z';
  const store = new MemoryLeaseStore(T0);
  const ids = ['r-a', 'r-b', 'r-c', 'r-d', 'r-e'];
  store.insert({ id: ids[0], idempotency_key: 'a', status: 'running', lease_owner: 'w', lease_expires_at: '2026-07-20T10:05:00.000Z' });
  store.insert({ id: ids[1], idempotency_key: 'b', status: 'leased', lease_owner: 'w', lease_expires_at: '2026-07-20T09:00:00.000Z' });
  store.insert({ id: ids[2], idempotency_key: 'c', status: 'completed', lease_expires_at: '2026-07-20T09:00:00.000Z' });
  store.insert({ id: ids[3], idempotency_key: 'd', status: 'leased', lease_owner: 'w', lease_expires_at: '2026-07-20T10:06:00.000Z' });
  store.insert({ id: ids[4], idempotency_key: 'e', status: 'ready' });
  const found = async (nowIso, limit) => (await store.findExpiredLeases(nowIso, limit)).map((r) => r.id);
  assert.deepEqual(await found('2026-07-20T10:05:00.000Z', 100), ['r-a', 'r-b'], 'expiry == now is expired; insertion order, not expiry order');
  assert.deepEqual(await found('2026-07-20T10:04:59.999Z', 100), ['r-b']);
  assert.deepEqual(await found('2026-07-20T10:10:00.000Z', 2), ['r-a', 'r-b']);
  assert.deepEqual(await found('2026-07-20T10:10:00.000Z', 100), ['r-a', 'r-b', 'r-d']);
  assert.deepEqual(await store.findExpiredLeases('2026-07-20T10:10:00.000Z', 1), [store.getRun('r-a')]);
});

test('maxRetries: Infinity and null never quarantine (seven expiries past the default ceiling of 5)', async () => {
  for (const maxRetries of [Infinity, null]) {
    const store = new MemoryLeaseStore(T);
    store.insert({ id: R, idempotency_key: 'k' });
    const heart = new HeartFleet({ store, maxRetries });
    assert.equal(heart.maxRetries, Infinity);
    for (let i = 1; i <= 7; i += 1) {
      assert.equal((await heart.acquire(R, `w${i}`, 60)).acquired, true);
      store.advance(61_000);
      if (i % 2 === 0) {
        assertShape(await heart.reclaimExpired(), { reclaimedCount: 1, reclaimedIds: [R], quarantinedIds: [], errors: [] });
      }
    }
    assert.equal(store.getRun(R).status, 'leased');
    assert.equal(store.getRun(R).retries, 6, 'three sweeps and three takeovers, each a recovery');
    assert.equal(heart.metrics.quarantines, 0);
  }
});

// ---------------------------------------------------------------------------------------
// The app's recovery-acceptance suite, package-facing parts (FakeAgentRunsStore's clock,
// expiry strings without milliseconds)
// ---------------------------------------------------------------------------------------

test('recovery acceptance: isLeaseExpired / canAcquire on expiry strings without milliseconds', () => {
  const run = { status: 'leased', lease_owner: 'w1', lease_expires_at: '2026-07-20T10:05:00Z' };
  assert.equal(isLeaseExpired(run, new Date('2026-07-20T10:10:00Z')), true, 'crash then expiry');
  assert.equal(canAcquire(run, new Date('2026-07-20T10:00:00Z')), false);
  assert.equal(canAcquire(run, new Date('2026-07-20T10:06:00Z')), true);
  assert.equal(isLeaseExpired(run, new Date('2026-07-20T10:04:00Z')), false, 'clock skew: not yet');
  assert.equal(isLeaseExpired(run, new Date('2026-07-20T10:06:00Z')), true);
  assert.equal(canAcquire({ ...run, lease_expires_at: '2026-07-20T10:09:00Z' }, new Date('2026-07-20T10:04:30Z')), false, 'heartbeat in time');
  assert.equal(isLeaseExpired({ lease_expires_at: '2026-07-20T10:05:00Z' }, '2026-07-20T10:05:00Z'), true, 'equal is expired; string now');
  assert.equal(isLeaseExpired({ lease_expires_at: 'not a date' }, new Date('2026-07-20T10:05:00Z')), false, 'unparsable reads as not expired');
});

test('recovery acceptance: the conditional-update scenarios on MemoryLeaseStore', async () => {
  const store = new MemoryLeaseStore('2026-07-20T10:10:00.000Z');
  const EXP = '2026-07-20T10:05:00Z';
  store.insert({ id: 'takeover', idempotency_key: 's1', status: 'leased', lease_owner: 'w1', lease_expires_at: EXP });
  store.insert({ id: 'ready', idempotency_key: 's5', status: 'ready' });
  store.insert({ id: 'partial', idempotency_key: 's9', status: 'running', lease_owner: 'w1', lease_expires_at: EXP, retries: 2 });
  const nodes = ['n1', 'n2', 'n3', 'n4'];
  for (const [i, id] of nodes.entries()) store.insert({ id, idempotency_key: id, status: 'running', lease_owner: i < 2 ? 'w1' : 'w2', lease_expires_at: EXP });

  // 1. Crash → expiry → takeover, conditioned on status and the expiry as read.
  const taken = await store.conditionalUpdate('takeover', { lease_owner: 'w2', lease_expires_at: '2026-07-20T10:15:00Z' }, { eq: { status: 'leased', lease_expires_at: EXP } });
  assert.equal(taken.lease_owner, 'w2');
  // 12a. The old owner's renew (conditioned on owner) is refused.
  assert.equal(await store.conditionalUpdate('takeover', { lease_expires_at: '2026-07-20T10:20:00Z' }, { eq: { lease_owner: 'w1' }, in: { status: ['leased', 'running'] } }), null);
  // 5. Duplicate race on a ready run; 6. a wrong condition leaves the row unchanged.
  const first = await store.conditionalUpdate('ready', { status: 'leased', lease_owner: 'w1' }, { eq: { status: 'ready' } });
  assert.equal(first.lease_owner, 'w1');
  assert.equal(await store.conditionalUpdate('ready', { status: 'leased', lease_owner: 'w2' }, { eq: { status: 'ready' } }), null);
  assert.equal(await store.conditionalUpdate('ready', { status: 'ready' }, { eq: { status: 'running' } }), null);
  assert.equal(store.getRun('ready').lease_owner, 'w1');
  // 9. Partial execution: reset with retries + 1 conditioned on the expiry.
  const reset = await store.conditionalUpdate('partial', { status: 'ready', lease_owner: null, lease_expires_at: null, retries: 3 }, { eq: { lease_expires_at: EXP } });
  assert.deepEqual([reset.status, reset.lease_owner, reset.retries], ['ready', null, 3]);
  // 10. Retry exhaustion (v1 gap): five resets, each conditioned on the current expiry (null after the first).
  let current = EXP;
  for (let i = 1; i <= 5; i += 1) {
    const r = await store.conditionalUpdate('n1', { status: 'ready', lease_owner: null, lease_expires_at: null, retries: i }, { eq: { lease_expires_at: current } });
    assert.equal(r.retries, i);
    current = null;
  }
  assert.equal(store.getRun('n1').status, 'ready', 'no quarantine in the raw builder');
  // 14. Multi-failure: every expired run reset on its own expiry; no ready run keeps an owner.
  for (const id of nodes.slice(1)) assert.equal((await store.conditionalUpdate(id, { status: 'ready', lease_owner: null, lease_expires_at: null, retries: 1 }, { eq: { lease_expires_at: EXP } })).status, 'ready');
  assert.deepEqual(store.runs().filter((r) => r.status === 'ready' && r.lease_owner !== null).map((r) => r.id), []);
});

// ---------------------------------------------------------------------------------------
// The app's lease manager delegating to the package (lease-manager-delegation.test.ts)
// ---------------------------------------------------------------------------------------

// src/lib/heart/lease-manager.ts as the app has it: validate, delegate to HeartFleet with
// maxRetries Infinity, drop the fence; exceptions become results.
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
function validationProblem(input) {
  if (typeof input.runId !== 'string' || !UUID_RE.test(input.runId)) return 'runId: Invalid uuid';
  if (typeof input.owner !== 'string' || input.owner.length === 0) return 'owner: String must contain at least 1 character(s)';
  if (!Number.isInteger(input.ttlSeconds) || input.ttlSeconds <= 0) return 'ttlSeconds: Number must be a positive integer';
  return null;
}
async function acquireLease(input, opts = {}) {
  const problem = validationProblem(input);
  if (problem) return { acquired: false, run: null, reason: `Invalid input: ${problem}` };
  try {
    const heart = new HeartFleet({ store: opts.store, maxRetries: Infinity });
    const { fence: _fence, ...result } = await heart.acquire(input.runId, input.owner, input.ttlSeconds);
    return result;
  } catch (err) {
    return { acquired: false, run: null, reason: `Exception during acquire: ${err instanceof Error ? err.message : String(err)}` };
  }
}
async function reclaimExpiredLeases(opts = {}) {
  try {
    const heart = new HeartFleet({ store: opts.store, maxRetries: Infinity });
    const { reclaimedCount, reclaimedIds, errors } = await heart.reclaimExpired({ limit: opts.maxReclaimsPerCycle ?? 100 });
    return { reclaimedCount, reclaimedIds, errors };
  } catch (err) {
    return { reclaimedCount: 0, reclaimedIds: [], errors: [{ runId: 'unknown', error: `Exception: ${err instanceof Error ? err.message : String(err)}` }] };
  }
}

const APP_T0 = '2026-07-20T10:00:00.000Z';
function appStore() {
  const store = new MemoryLeaseStore(new Date(APP_T0));
  store.insert({ id: R, idempotency_key: 'app:run:1', status: 'ready', objective: 'agent run', created_by: 'app' });
  return store;
}
const appRow = (fields) => row({ id: R, idempotency_key: 'app:run:1', objective: 'agent run', created_by: 'app', created_at: APP_T0, ...fields });

test('lease-manager delegation: a ready run is acquired (leased, owner set)', async () => {
  const store = appStore();
  const r = await acquireLease({ runId: R, owner: 'agent-1', ttlSeconds: 60 }, { store });
  assert.deepEqual(r, { acquired: true, run: appRow({ status: 'leased', lease_owner: 'agent-1', lease_expires_at: '2026-07-20T10:01:00.000Z', fencing_epoch: 1 }) });
});

test('lease-manager delegation: a second owner on a live lease fails', async () => {
  const store = appStore();
  await acquireLease({ runId: R, owner: 'agent-1', ttlSeconds: 60 }, { store });
  const r = await acquireLease({ runId: R, owner: 'agent-2', ttlSeconds: 60 }, { store });
  assert.deepEqual(r, {
    acquired: false,
    run: appRow({ status: 'leased', lease_owner: 'agent-1', lease_expires_at: '2026-07-20T10:01:00.000Z', fencing_epoch: 1 }),
    reason: "Cannot acquire: status 'leased', lease not expired",
  });
});

test('lease-manager delegation: after +61 s the expired lease is taken over', async () => {
  const store = appStore();
  await acquireLease({ runId: R, owner: 'agent-1', ttlSeconds: 60 }, { store });
  store.advance(61_000);
  const r = await acquireLease({ runId: R, owner: 'agent-2', ttlSeconds: 60 }, { store });
  assert.equal(r.acquired, true);
  assert.equal(r.run.status, 'leased');
  assert.equal(r.run.lease_owner, 'agent-2');
  assert.equal(r.run.lease_expires_at, '2026-07-20T10:02:01.000Z');
});

test('lease-manager delegation: a missing run gives acquired=false and run null', async () => {
  const r = await acquireLease({ runId: MISSING, owner: 'agent-1', ttlSeconds: 60 }, { store: appStore() });
  assert.deepEqual(r, { acquired: false, run: null, reason: 'Run not found' });
  assert.deepEqual(await acquireLease({ runId: 'not-a-uuid', owner: 'a', ttlSeconds: 60 }, { store: appStore() }), { acquired: false, run: null, reason: 'Invalid input: runId: Invalid uuid' });
});

test('lease-manager delegation: reclaim after +61 s gives ready with retries 1', async () => {
  const store = appStore();
  await acquireLease({ runId: R, owner: 'agent-1', ttlSeconds: 60 }, { store });
  store.advance(61_000);
  assert.deepEqual(await reclaimExpiredLeases({ store }), { reclaimedCount: 1, reclaimedIds: [R], errors: [] });
  assert.deepEqual(store.getRun(R), appRow({ retries: 1, updated_at: '2026-07-20T10:01:01.000Z', fencing_epoch: 1 }));
});

test('lease-manager delegation: at +30 s nothing is reclaimed', async () => {
  const store = appStore();
  await acquireLease({ runId: R, owner: 'agent-1', ttlSeconds: 60 }, { store });
  store.advance(30_000);
  assert.deepEqual(await reclaimExpiredLeases({ store }), { reclaimedCount: 0, reclaimedIds: [], errors: [] });
  assert.equal(store.getRun(R).status, 'leased');
});

test('lease-manager delegation: eight acquire/expire/reclaim cycles with maxRetries Infinity end ready with retries 8, never quarantined', async () => {
  const store = appStore();
  for (let cycle = 1; cycle <= 8; cycle += 1) {
    const r = await acquireLease({ runId: R, owner: `agent-${cycle}`, ttlSeconds: 60 }, { store });
    assert.equal(r.acquired, true, `cycle ${cycle}`);
    store.advance(61_000);
    assert.deepEqual(await reclaimExpiredLeases({ store }), { reclaimedCount: 1, reclaimedIds: [R], errors: [] });
    assert.equal(store.getRun(R).status, 'ready');
  }
  assert.equal(store.getRun(R).retries, 8);
});

// ---------------------------------------------------------------------------------------
// The bot's heart-liveness.test.ts, through a LivenessStore in memory
// ---------------------------------------------------------------------------------------

const NOW = new Date('2026-07-30T10:00:00.000Z');
const secondsAgo = (s) => new Date(NOW.getTime() - s * 1000).toISOString();

/** A LivenessStore over arrays, as the bot's test builds one. */
function livenessStore(instances, runs) {
  return {
    instances,
    runs,
    now: () => NOW,
    async liveInstances() {
      return instances.filter((i) => i.status !== 'dead').map((i) => ({ ...i }));
    },
    async markInstancesDead(ids) {
      for (const i of instances) if (ids.includes(i.instance_id)) i.status = 'dead';
    },
    async runsOwnedBy(ids, limit) {
      return runs.filter((r) => (r.status === 'leased' || r.status === 'running') && ids.includes(r.lease_owner)).slice(0, limit).map((r) => ({ ...r }));
    },
    async reclaimRun(runId, owner, retries) {
      const r = runs.find((x) => x.id === runId && x.lease_owner === owner);
      if (!r) return false;
      Object.assign(r, { status: 'ready', lease_owner: null, lease_expires_at: null, retries, updated_at: NOW.toISOString() });
      return true;
    },
  };
}
const instance = (id, secs, status = 'alive') => ({ instance_id: id, hostname: 'host', pid: 1, status, started_at: secondsAgo(3600), last_heartbeat: secondsAgo(secs), metadata: null });
const leasedRun = (id, owner) => ({ id, status: 'leased', lease_owner: owner, lease_expires_at: secondsAgo(-600), retries: 0 });

test('heart-liveness 1: isInstanceExpired (200 s ago expired, 10 s not, dead always)', () => {
  assert.equal(isInstanceExpired(instance('a', 200), NOW, DEFAULT_LIVENESS_TTL_MS), true);
  assert.equal(isInstanceExpired(instance('a', 10), NOW, DEFAULT_LIVENESS_TTL_MS), false);
  assert.equal(isInstanceExpired(instance('a', 1, 'dead'), NOW, DEFAULT_LIVENESS_TTL_MS), true);
});

test('heart-liveness 2: deadInstanceIds in input order', () => {
  assert.deepEqual(deadInstanceIds([instance('a', 200), instance('b', 5), instance('c', 100)], NOW), ['a', 'c']);
});

test('heart-liveness 3: runsLeasedToDeadInstances', () => {
  const runs = [leasedRun('1', 'a'), leasedRun('2', 'b'), { ...leasedRun('3', 'a'), status: 'completed' }, { ...leasedRun('4', null), lease_owner: null }];
  assert.deepEqual(runsLeasedToDeadInstances(runs, ['a']), [runs[0]]);
});

test('heart-liveness 4: the reclaimer recovers the dead instance\'s run and marks it dead', async () => {
  const store = livenessStore([instance('dead-1', 200), instance('live-1', 5)], [leasedRun('r1', 'dead-1'), leasedRun('r2', 'live-1')]);
  const summary = await new LivenessReclaimer({ store }).reclaimDeadInstanceRuns();
  assertShape(summary, { deadInstanceIds: ['dead-1'], reclaimedCount: 1, reclaimedIds: ['r1'], errors: [] });
  assert.deepEqual(store.runs[0], { id: 'r1', status: 'ready', lease_owner: null, lease_expires_at: null, retries: 1, updated_at: NOW.toISOString() });
  assert.deepEqual(store.runs[1], leasedRun('r2', 'live-1'));
  assert.equal(store.instances[0].status, 'dead');
  assert.equal(store.instances[1].status, 'alive');
});

test('heart-liveness 5: a run re-leased mid-reclaim is left alone', async () => {
  const store = livenessStore([instance('dead-1', 200), instance('live-1', 5)], [leasedRun('r1', 'dead-1')]);
  const reclaim = store.reclaimRun.bind(store);
  store.reclaimRun = async (runId, owner, retries) => {
    store.runs[0].lease_owner = 'live-2'; // another worker takes it just before the conditional write
    return reclaim(runId, owner, retries);
  };
  const summary = await new LivenessReclaimer({ store }).reclaimDeadInstanceRuns();
  assertShape(summary, { deadInstanceIds: ['dead-1'], reclaimedCount: 0, reclaimedIds: [], errors: [{ id: 'r1', error: 'no rows (re-leased)' }] });
  assert.equal(store.runs[0].lease_owner, 'live-2');
  assert.equal(store.runs[0].status, 'leased');
});

test('heart-liveness 6: no dead instances, nothing reclaimed', async () => {
  const store = livenessStore([instance('live-1', 5)], [leasedRun('r1', 'live-1')]);
  assertShape(await new LivenessReclaimer({ store }).reclaimDeadInstanceRuns(), { deadInstanceIds: [], reclaimedCount: 0, reclaimedIds: [], errors: [] });
  assert.deepEqual(store.runs, [leasedRun('r1', 'live-1')]);
});

test('a LivenessStore pass: its errors as the TypeScript package reports them; with a heart, receipts and counters', async () => {
  const failing = (method) => {
    const store = livenessStore([instance('dead-1', 200)], [leasedRun('r1', 'dead-1'), leasedRun('r2', 'dead-1')]);
    store[method] = async () => {
      throw new Error(`${method} failed`);
    };
    return store;
  };
  assertShape(await new LivenessReclaimer({ store: failing('liveInstances') }).reclaimDeadInstanceRuns(), {
    deadInstanceIds: [],
    reclaimedCount: 0,
    reclaimedIds: [],
    errors: [{ id: 'instances', error: 'liveInstances failed' }],
  });
  assertShape(await new LivenessReclaimer({ store: failing('runsOwnedBy') }).reclaimDeadInstanceRuns(), {
    deadInstanceIds: ['dead-1'],
    reclaimedCount: 0,
    reclaimedIds: [],
    errors: [{ id: 'runs', error: 'runsOwnedBy failed' }],
  });
  const marking = failing('markInstancesDead');
  assertShape(await new LivenessReclaimer({ store: marking }).reclaimDeadInstanceRuns({ maxReclaimsPerCycle: 1 }), {
    deadInstanceIds: ['dead-1'],
    reclaimedCount: 1,
    reclaimedIds: ['r1'],
    errors: [],
  });
  assert.equal(marking.runs[1].lease_owner, 'dead-1', 'maxReclaimsPerCycle bounds the pass');

  const store = livenessStore([instance('dead-1', 200)], [{ ...leasedRun('r1', 'dead-1'), retries: 4 }, leasedRun('r2', 'dead-1')]);
  const reclaim = store.reclaimRun.bind(store);
  store.reclaimRun = async (runId, owner, retries) => {
    if (runId === 'r2') throw new Error('timeout writing r2');
    return reclaim(runId, owner, retries);
  };
  const heart = new HeartFleet({ store: new MemoryLeaseStore(NOW) });
  const summary = await new LivenessReclaimer({ store, heart }).reclaimDeadInstanceRuns();
  assertShape(summary, { deadInstanceIds: ['dead-1'], reclaimedCount: 1, reclaimedIds: ['r1'], errors: [{ id: 'r2', error: 'timeout writing r2' }] });
  assert.equal(store.runs[0].retries, 5, 'reclaimRun gets retries + 1; it cannot quarantine (the ceiling of 5 is not applied)');
  assert.equal(store.runs[0].status, 'ready');
  assert.equal(heart.metrics.reclaims, 1);
  assert.deepEqual(
    heart.receipts().map((r) => [r.event, r.runId, r.owner, r.at]),
    [['reclaimed', 'r1', 'dead-1', NOW.toISOString()]],
  );
  assert.throws(() => new LivenessReclaimer({ store, maxRetries: 3 }), (e) => e instanceof TypeError && /maxRetries cannot apply to a LivenessStore/.test(e.message));
  await assert.rejects(new LivenessReclaimer({ store }).registerInstance('i-1'), (e) => e instanceof TypeError && /no instance table of its own/.test(e.message));
});

test('a LivenessStore method that answers a wrong shape or never settles: a coded error', async () => {
  const keepAlive = setInterval(() => {}, 1000);
  try {
    const wrong = livenessStore([instance('dead-1', 200)], [leasedRun('r1', 'dead-1')]);
    wrong.reclaimRun = async () => 'yes';
    await assert.rejects(new LivenessReclaimer({ store: wrong }).reclaimDeadInstanceRuns(), (e) => e.code === 'store-protocol' && /reclaimRun returned a string, not a boolean/.test(e.message));
    const hanging = livenessStore([instance('dead-1', 200)], [leasedRun('r1', 'dead-1')]);
    hanging.runsOwnedBy = () => new Promise(() => {});
    await assert.rejects(
      new LivenessReclaimer({ store: hanging, storeTimeoutMs: 20 }).reclaimDeadInstanceRuns(),
      (e) => e.code === 'store-unavailable' && /no answer within 20 ms/.test(e.message),
    );
    assert.deepEqual(hanging.runs, [leasedRun('r1', 'dead-1')]);
  } finally {
    clearInterval(keepAlive);
  }
});

test('LivenessReclaimer over a heart: the error entries are the TypeScript package\'s {id, error}', async () => {
  const mem = new MemoryLeaseStore(NOW);
  mem.insert({ id: 'r1', idempotency_key: 'k1' });
  const store = {
    execute(request) {
      // Another worker re-leases r1 just before the pass's write.
      if (request.op === 'update_run' && request.run_id === 'r1' && request.set.some(([c]) => c === 'retries')) {
        mem.execute({ op: 'update_run', run_id: 'r1', when: 'true', set: [['lease_owner', { val: { type: 'text', value: 'live-2' } }]], want_before: false });
      }
      return mem.execute(request);
    },
  };
  const heart = new HeartFleet({ store });
  await heart.registerInstance('dead-1');
  await heart.acquire('r1', 'dead-1', 600);
  mem.advance(200_000);
  const summary = await new LivenessReclaimer({ heart }).reclaimDeadInstanceRuns();
  assertShape(summary, { deadInstanceIds: ['dead-1'], reclaimedCount: 0, reclaimedIds: [], errors: [{ id: 'r1', error: 'no rows (re-leased)' }] }, { quarantinedIds: [] });
  assert.equal(mem.getRun('r1').lease_owner, 'live-2');
});

// ---------------------------------------------------------------------------------------
// The app's liveness delegation (liveness-delegation.test.ts) and liveness.test.ts
// ---------------------------------------------------------------------------------------

// src/lib/heart/liveness.ts as the app has it: delegate to the package's reclaimer.
async function reclaimDeadInstanceRuns(opts = {}) {
  const reclaimer = new LivenessReclaimer({ store: opts.store, ttlMs: opts.ttlMs ?? DEFAULT_LIVENESS_TTL_MS });
  return reclaimer.reclaimDeadInstanceRuns({ maxReclaimsPerCycle: opts.maxReclaimsPerCycle ?? 200 });
}

test('liveness delegation: a dead instance\'s run is reclaimed (reclaimedCount 1)', async () => {
  const store = livenessStore([instance('dead-1', 200), instance('live-1', 5)], [leasedRun('r1', 'dead-1'), leasedRun('r2', 'live-1')]);
  const summary = await reclaimDeadInstanceRuns({ store });
  assert.equal(summary.reclaimedCount, 1);
  assert.deepEqual(summary, { deadInstanceIds: ['dead-1'], reclaimedCount: 1, reclaimedIds: ['r1'], errors: [] });
  assert.equal(store.runs[0].status, 'ready');
});

test('liveness delegation: no dead instances (reclaimedCount 0)', async () => {
  const store = livenessStore([instance('live-1', 5)], [leasedRun('r1', 'live-1')]);
  assert.deepEqual(await reclaimDeadInstanceRuns({ store }), { deadInstanceIds: [], reclaimedCount: 0, reclaimedIds: [], errors: [] });
});

test('liveness helpers: the TTL boundary, dead, draining, custom TTL, string now', () => {
  const now = NOW.getTime();
  const at = (ms, status = 'alive') => ({ instance_id: 'i', status, last_heartbeat: new Date(now - ms).toISOString() });
  assert.equal(isInstanceExpired(at(DEFAULT_LIVENESS_TTL_MS - 1), NOW), false);
  assert.equal(isInstanceExpired(at(DEFAULT_LIVENESS_TTL_MS), NOW), false, 'strictly more than the TTL');
  assert.equal(isInstanceExpired(at(DEFAULT_LIVENESS_TTL_MS + 1), NOW), true);
  assert.equal(isInstanceExpired(at(0, 'dead'), NOW), true);
  assert.equal(isInstanceExpired(at(1000, 'draining'), NOW), false);
  assert.equal(isInstanceExpired(at(DEFAULT_LIVENESS_TTL_MS + 1, 'draining'), NOW), true);
  assert.equal(isInstanceExpired(at(5000), NOW, 4000), true);
  assert.equal(isInstanceExpired(at(3000), NOW, 4000), false);
  assert.equal(isInstanceExpired(at(3000), NOW.toISOString(), 4000), false);
  assert.equal(isInstanceExpired(at(5000), NOW.toISOString(), 4000), true);
  const fleet = [{ ...at(200_000), instance_id: 'stale' }, { ...at(0, 'dead'), instance_id: 'dead' }, { ...at(1000), instance_id: 'fresh' }];
  assert.deepEqual(deadInstanceIds(fleet, NOW), ['stale', 'dead']);
  assert.deepEqual(deadInstanceIds([at(1000), at(2000)], NOW), []);
});

test('liveness helpers: runsLeasedToDeadInstances picks only leased and running runs of dead owners', () => {
  const statuses = ['leased', 'running', 'completed', 'failed', 'cancelled', 'quarantined', 'waiting_approval', 'verifying', 'blocked'];
  const runs = statuses.map((status) => ({ id: status, status, lease_owner: 'dead-1' }));
  assert.deepEqual(runsLeasedToDeadInstances(runs, ['dead-1']).map((r) => r.id), ['leased', 'running']);
  assert.deepEqual(runsLeasedToDeadInstances(runs, []), []);
  assert.deepEqual(runsLeasedToDeadInstances([{ id: 'x', status: 'leased', lease_owner: 'live-1' }], ['dead-1']), []);
});
