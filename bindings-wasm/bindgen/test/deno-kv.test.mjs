// DenoKvLeaseStore beyond the store suite (Deno only: `deno test --unstable-kv`):
// exclusion between fleets racing on one database, a rejected KV Promise is
// store-unavailable and leaves the entry unchanged, a closed database, an atomic check that
// keeps losing and a row over KV's value limit are store-unavailable, and bad options are
// coded errors.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api } from './helpers/pkg.mjs';

const { HeartFleet, DenoKvLeaseStore, DurableEffectLedger, sendOnce, executeWithLease, verifyReceipt, HeartFleetError } = api;

const R = '00000000-0000-4000-8000-000000000001';
let n = 0;

async function fresh(kv, options = {}) {
  const store = new DenoKvLeaseStore({ kv, prefix: ['kv-test', (n += 1)], ...options });
  await store.seed({ runs: [{ id: R, idempotency_key: 'k1' }] });
  return store;
}

test('fleets racing on one Deno KV: exactly one acquire wins, every time', async () => {
  const kv = await Deno.openKv(':memory:');
  try {
    for (let round = 0; round < 5; round += 1) {
      const store = await fresh(kv);
      // Ten workers, each its own fleet and its own store object over the same database.
      const workers = Array.from({ length: 10 }, (_, i) => new HeartFleet({ store: new DenoKvLeaseStore({ kv, prefix: store.prefix }) }));
      const results = await Promise.all(workers.map((h, i) => h.acquire(R, `worker-${i}`, 60)));
      const winners = results.filter((r) => r.acquired);
      assert.equal(winners.length, 1, `round ${round}: ${winners.length} winners`);
      assert.ok(results.filter((r) => !r.acquired).every((r) => r.code === 'lease-held'));
      const row = await store.getRun(R);
      assert.equal(row.lease_owner, winners[0].fence.owner);
      assert.equal(row.fencing_epoch, 1);
    }
  } finally {
    kv.close();
  }
});

test('two executeWithLease calls for one run on Deno KV: one job runs, receipts verify', async () => {
  const kv = await Deno.openKv(':memory:');
  try {
    const store = await fresh(kv);
    let ran = 0;
    const job = async () => {
      ran += 1;
      await new Promise((r) => setTimeout(r, 20));
      return 'done';
    };
    const a = new HeartFleet({ store });
    const b = new HeartFleet({ store: new DenoKvLeaseStore({ kv, prefix: store.prefix }) });
    const [ra, rb] = await Promise.all([
      executeWithLease(a, { runId: R, owner: 'edge-a', ttlSeconds: 30 }, job),
      executeWithLease(b, { runId: R, owner: 'edge-b', ttlSeconds: 30 }, job),
    ]);
    assert.equal(ran, 1);
    assert.deepEqual([ra.ran, rb.ran].sort(), [false, true]);
    const lost = ra.ran ? rb : ra;
    assert.equal(lost.reason, 'lease-held');
    const receipts = [...a.receipts(), ...b.receipts()];
    assert.deepEqual(receipts.map((r) => r.event).sort(), ['acquired', 'released']);
    for (const r of receipts) assert.equal(verifyReceipt(r), true);
    assert.equal((await store.getRun(R)).status, 'completed');
  } finally {
    kv.close();
  }
});

test('sendOnce over Deno KV: the claim and its log entry commit together, the second send dedupes', async () => {
  const kv = await Deno.openKv(':memory:');
  try {
    const store = await fresh(kv);
    const heart = new HeartFleet({ store });
    const { fence } = await heart.acquire(R, 'w', 60);
    const ledger = new DurableEffectLedger({ heart });
    let sends = 0;
    const send = async () => ({ id: (sends += 1) });
    const first = await sendOnce(heart, ledger, { fence, channel: 'telegram', effectKey: 'e1', payload: { a: 1 }, send });
    const again = await sendOnce(heart, ledger, { fence, channel: 'telegram', effectKey: 'e1', payload: { a: 1 }, send });
    assert.deepEqual([first.sent, first.committed, again.sent, again.reason, sends], [true, true, false, 'deduped', 1]);
    const log = await ledger.dispatchLog(R, 'e1');
    assert.deepEqual(log.map((e) => e.outcome), ['claimed', 'dispatched', 'sent', 'deduped'].filter((o) => log.some((e) => e.outcome === o)));
    assert.equal(log[0].outcome, 'claimed');
    assert.equal((await store.intents())[0].state, 'committed');
  } finally {
    kv.close();
  }
});

/** A Deno.Kv whose reads (`what.fail = 'read'`) or commits (`'commit'`) reject, as in a partition. */
function failing(kv, what) {
  return new Proxy(kv, {
    get(target, prop) {
      if (what.fail === 'read' && (prop === 'get' || prop === 'getMany' || prop === 'list')) {
        return () => Promise.reject(new Error('kv: connection reset'));
      }
      if (what.fail === 'commit' && prop === 'atomic') {
        return () => {
          const op = target.atomic();
          op.commit = () => Promise.reject(new Error('kv: commit failed'));
          return op;
        };
      }
      const v = target[prop];
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

test('a rejected KV Promise gives store-unavailable and leaves the entry unchanged', async () => {
  for (const mode of ['read', 'commit']) {
    const kv = await Deno.openKv(':memory:');
    try {
      const seeded = await fresh(kv);
      const what = { fail: null };
      const store = new DenoKvLeaseStore({ kv: failing(kv, what), prefix: seeded.prefix });
      const heart = new HeartFleet({ store });
      const { fence } = await heart.acquire(R, 'w', 60);
      const before = await seeded.getRun(R);
      const entry = await kv.get([...seeded.prefix, 'runs', R]);
      const metrics = { ...heart.metrics };
      what.fail = mode;
      // (With failing commits, a second acquire is a miss that writes nothing: it needs reads.)
      const acquire = mode === 'read' ? [() => heart.acquire(R, 'x', 60)] : [];
      for (const call of [
        ...acquire,
        () => heart.renew(fence, 60),
        () => heart.release(fence, 'completed'),
        () => heart.verifyFence(fence),
        () => heart.forceRelease(R),
        () => heart.ensureResourceRun('kind', 'key'),
      ]) {
        await assert.rejects(call(), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable', mode);
      }
      assert.deepEqual(await seeded.getRun(R), before, mode);
      assert.equal((await kv.get([...seeded.prefix, 'runs', R])).versionstamp, entry.versionstamp, `${mode}: the entry was rewritten`);
      assert.deepEqual({ ...heart.metrics }, { ...metrics, acquireAttempts: metrics.acquireAttempts + acquire.length }, mode);
      what.fail = null;
      assert.equal(await heart.verifyFence(fence), true);
    } finally {
      kv.close();
    }
  }
});

test('a closed database and an atomic check that keeps losing are store-unavailable', async () => {
  const kv = await Deno.openKv(':memory:');
  const store = await fresh(kv, { casRetries: 2 });
  const heart = new HeartFleet({ store });
  // Every commit's check loses: another writer bumps the row between the read and the commit.
  const racing = new Proxy(kv, {
    get(target, prop) {
      if (prop === 'atomic') {
        return () => {
          const op = target.atomic();
          const commit = op.commit.bind(op);
          op.commit = async () => {
            const e = await target.get([...store.prefix, 'runs', R]);
            await target.set(e.key, e.value);
            return commit();
          };
          return op;
        };
      }
      const v = target[prop];
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  const contended = new HeartFleet({ store: new DenoKvLeaseStore({ kv: racing, prefix: store.prefix, casRetries: 3 }) });
  await assert.rejects(contended.acquire(R, 'w', 60), (e) => e.code === 'store-unavailable' && /kept changing/.test(e.message));
  assert.equal((await store.getRun(R)).status, 'ready');
  kv.close();
  await assert.rejects(heart.acquire(R, 'w', 60), (e) => e.code === 'store-unavailable');
});

test('bad options and bad requests are coded errors', async () => {
  for (const bad of [undefined, null, 1, 'kv', [], {}, { kv: {} }, { kv: 1 }]) {
    assert.throws(() => new DenoKvLeaseStore(bad), (e) => e.code === 'invalid-input');
  }
  const kv = await Deno.openKv(':memory:');
  try {
    for (const opts of [{ prefix: 'x' }, { prefix: [{}] }, { now: 5 }, { casRetries: 0 }, { casRetries: 1.5 }, { casRetries: 101 }]) {
      assert.throws(() => new DenoKvLeaseStore({ kv, ...opts }), (e) => e.code === 'invalid-input', JSON.stringify(opts));
    }
    const store = new DenoKvLeaseStore({ kv });
    // The core's default and bound, as every store that re-decides a lost write.
    assert.equal(store.casRetries, 5);
    assert.equal(new DenoKvLeaseStore({ kv, casRetries: 100 }).casRetries, 100);
    for (const bad of [null, 1, {}, { op: 5 }]) await assert.rejects(store.execute(bad), (e) => e.code === 'invalid-input');
    await assert.rejects(store.execute('{'), (e) => e.code === 'store-protocol');
    await assert.rejects(store.execute({ op: 'drop_tables' }), (e) => e.code === 'store-protocol');
    await assert.rejects(store.seed({ runs: [{ id: 5 }] }), (e) => typeof e.code === 'string');
    await store.seed({ runs: [{ id: 'a', idempotency_key: 'same' }] });
    await assert.rejects(store.seed({ runs: [{ id: 'b', idempotency_key: 'same' }] }), (e) => e.code === 'invalid-input');
    assert.equal(await store.getRun('b'), null);
    // A row over Deno KV's 64 KiB value limit is a store failure, and nothing is written.
    const heart = new HeartFleet({ store });
    await assert.rejects(heart.registerInstance('big', { metadata: { blob: 'x'.repeat(70_000) } }), (e) => e.code === 'store-unavailable');
    assert.deepEqual(await store.instances(), []);
  } finally {
    kv.close();
  }
});
