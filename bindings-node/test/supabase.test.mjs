// SupabaseLeaseStore with a recording fake supabase-js client (no PostgREST server can run
// here): the reference adapter's query shapes, PostgREST timestamp text, errors that stay
// errors, compare-and-set under interleaved writers. The conformance runner also replays
// every scenario through this store (test/conformance.test.mjs, mode `supabase`).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeSupabase } from './helpers/fake-supabase.mjs';
import { HeartFleet, SupabaseLeaseStore, DurableEffectLedger, sendOnce, effectKey, HeartFleetError } from '../index.mjs';

const R = '00000000-0000-4000-8000-000000000001';
const T0 = Date.parse('2026-07-30T10:00:00.000Z');

function world(options = {}) {
  const fake = new FakeSupabase({ pgTimestamps: true, ...options });
  fake.seed('agent_runs', [{ id: R, assignment_id: 'a1', objective: 'o', status: 'ready', idempotency_key: 'k1', created_by: 't', created_at: T0, updated_at: T0 }]);
  let now = T0;
  const store = new SupabaseLeaseStore({ client: fake, now: () => now });
  const heart = new HeartFleet({ store });
  return { fake, store, heart, tick: (ms) => (now += ms) };
}

test('the reference query shapes: select * by id, conditional update filtered eq/is, select *', async () => {
  const { fake, heart, tick } = world();
  tick(500);
  const a = await heart.acquire(R, 'worker-A', 60);
  assert.equal(a.acquired, true);
  assert.equal(a.fence.leaseExpiresAt, '2026-07-30T10:01:00.500Z');
  const [read, write] = fake.calls;
  assert.deepEqual(read, [['from', 'agent_runs'], ['select', '*'], ['eq', 'id', R], ['maybeSingle']]);
  assert.deepEqual(write[0], ['from', 'agent_runs']);
  assert.equal(write[1][0], 'update');
  assert.deepEqual(Object.keys(write[1][1]).sort(), ['fencing_epoch', 'lease_expires_at', 'lease_owner', 'status', 'updated_at']);
  assert.deepEqual(write[2], ['eq', 'id', R]);
  // Conditioned on the columns the core's decision read, as read: a null one with is().
  assert.deepEqual(write.slice(3, -2), [['eq', 'status', 'ready'], ['is', 'lease_expires_at', null], ['eq', 'retries', 0], ['eq', 'fencing_epoch', 0]]);
  assert.deepEqual(write.slice(-2), [['select', '*'], ['maybeSingle']]);
  // Database text comes back as toISOString() text in tokens and rows.
  assert.equal(a.run.updated_at, '2026-07-30T10:00:00.500Z');
  assert.equal(a.run.created_at, '2026-07-30T10:00:00.000Z');
  assert.equal(fake.rows('agent_runs')[0].lease_expires_at, '2026-07-30T10:01:00.500+00:00');
});

test("renew, verifyFence and a release to a final status are one update each, no read, as the reference's adapter writes them", async () => {
  const { fake, heart, tick } = world();
  const a = await heart.acquire(R, 'worker-A', 60);
  tick(1000);
  const held = (expiry) => [['eq', 'fencing_epoch', 1], ['eq', 'lease_expires_at', expiry], ['eq', 'lease_owner', 'worker-A'], ['in', 'status', ['leased', 'running']]];
  fake.calls.length = 0;
  assert.equal(await heart.verifyFence(a.fence), true);
  const renewed = await heart.renew(a.fence, 60);
  assert.equal(renewed.leaseExpiresAt, '2026-07-30T10:01:01.000Z');
  assert.ok(await heart.release(renewed, 'completed'));
  assert.deepEqual(
    fake.calls.map((q) => [q[1][0], ...q.slice(3, -2)]),
    [['update', ...held('2026-07-30T10:01:00.000Z')], ['update', ...held('2026-07-30T10:01:00.000Z')], ['update', ...held('2026-07-30T10:01:01.000Z')]],
  );
  assert.equal(fake.rows('agent_runs')[0].status, 'completed');
  // A takeover is decided on the row as read, and conditioned on its raw database text.
  const w = world();
  w.fake.tables.agent_runs[0] = { ...w.fake.tables.agent_runs[0], status: 'leased', lease_owner: 'old', lease_expires_at: '2026-07-30T09:59:00.000+00:00' };
  w.fake.calls.length = 0;
  assert.equal((await w.heart.acquire(R, 'new', 60)).acquired, true);
  assert.ok(w.fake.calls[1].some((c) => c[0] === 'eq' && c[1] === 'lease_expires_at' && c[2] === '2026-07-30T09:59:00.000+00:00'), JSON.stringify(w.fake.calls[1]));
});

test("a run write conditioned on its owner's dead instance is a compare-and-set on the owner as read", async () => {
  const { fake, store, heart, tick } = world();
  await heart.registerInstance('i-dead', { hostname: 'h', pid: 1 });
  await heart.acquire(R, 'i-dead', 600);
  tick(120_000);
  fake.calls.length = 0;
  const held = { in: ['status', [{ type: 'text', value: 'leased' }, { type: 'text', value: 'running' }]] };
  const answer = await store.execute({
    op: 'update_run',
    run_id: R,
    when: { and: [held, { owner_instance_dead: { ttl_ms: 90_000 } }] },
    set: [['status', { val: { type: 'text', value: 'ready' } }], ['lease_owner', { val: { type: 'null' } }]],
    want_before: false,
    want_after: true,
  });
  assert.equal(answer.reply.after.status, 'ready');
  const write = fake.calls.find((q) => q[0][1] === 'agent_runs' && q[1][0] === 'update');
  // Whether the owner's instance is dead was decided on the owner read: the write holds only
  // while the owner is still that one.
  assert.ok(write.some((c) => c[0] === 'eq' && c[1] === 'lease_owner' && c[2] === 'i-dead'), JSON.stringify(write));
});

test('an error is an error: store-unavailable, never "not found" or a collision, nothing written', async () => {
  for (const fail of [{ code: '08006', message: 'connection failure' }, { throws: 'fetch failed' }]) {
    const { fake, heart } = world({ beforeExecute: (q) => { q.fail = fail; } });
    await assert.rejects(heart.acquire(R, 'w', 60), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable' && /store failed at/.test(e.message));
    assert.equal(fake.rows('agent_runs')[0].status, 'ready');
  }
  // A non-UUID id is a missing run, as in PostgreSQL.
  const { heart } = world({ beforeExecute: (q) => { if (q.filters.some((f) => f[2] === 'nope')) q.fail = { code: '22P02', message: 'invalid input syntax for type uuid' }; } });
  assert.equal((await heart.acquire('nope', 'w', 60)).code, 'run-not-found');
});

test('compare-and-set: a writer that slips in between the read and the write wins, the loser re-decides', async () => {
  let interfere = true;
  const { fake, heart } = world({
    beforeExecute: (q) => {
      if (interfere && q.action === 'update' && q.table === 'agent_runs') {
        interfere = false;
        const row = q.db.tables.agent_runs[0];
        Object.assign(row, { status: 'leased', lease_owner: 'sneaky', lease_expires_at: '2026-07-30T10:05:00.000+00:00', updated_at: '2026-07-30T10:00:00.001+00:00' });
      }
    },
  });
  const a = await heart.acquire(R, 'worker-A', 60);
  assert.equal(a.acquired, false);
  assert.equal(a.code, 'lease-held');
  assert.equal(fake.rows('agent_runs')[0].lease_owner, 'sneaky');
  assert.equal(heart.metrics.acquireWins, 0);
});

test('concurrent acquires through one REST client: exactly one wins', async () => {
  const { heart } = world();
  const results = await Promise.all(['A', 'B', 'C', 'D'].map((w) => heart.acquire(R, w, 60)));
  assert.equal(results.filter((r) => r.acquired).length, 1);
});

test('sendOnce over REST: claim, dispatch, commit, then dedupe', async () => {
  const { fake, heart, tick } = world();
  const ledger = new DurableEffectLedger({ heart });
  const { fence } = await heart.acquire(R, 'A', 60);
  tick(1000);
  const key = effectKey('telegram', { chatId: 1, text: 'hi' });
  let sends = 0;
  const opts = { fence, channel: 'telegram', effectKey: key, payload: { chatId: 1, text: 'hi' }, send: async () => ({ message_id: ++sends }) };
  assert.equal((await sendOnce(heart, ledger, opts)).committed, true);
  assert.equal((await sendOnce(heart, ledger, opts)).reason, 'deduped');
  assert.equal(sends, 1);
  const [intent] = fake.rows('effect_intents');
  assert.equal(intent.state, 'committed');
  assert.deepEqual(intent.external_ref, { message_id: 1 });
  assert.deepEqual(fake.rows('outbox_dispatch_log').map((e) => e.outcome), ['claimed', 'sent', 'deduped']);
  assert.deepEqual((await ledger.dispatchLog(R, key)).map((e) => e.outcome), ['claimed', 'sent', 'deduped']);
});

test('constructor checks', () => {
  assert.throws(() => new SupabaseLeaseStore(), TypeError);
  assert.throws(() => new SupabaseLeaseStore({ client: {} }), TypeError);
  assert.throws(() => new SupabaseLeaseStore({ client: new FakeSupabase(), now: 5 }), TypeError);
  assert.throws(() => new SupabaseLeaseStore({ client: new FakeSupabase(), casRetries: 0 }), TypeError);
  assert.equal(new SupabaseLeaseStore({ client: new FakeSupabase(), tables: { runs: 'runs2' } }).tables.runs, 'runs2');
});
