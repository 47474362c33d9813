// The reference's outbox seams, as the bot uses them, ported to this package with only the
// import path changed: `new DurableEffectLedger({client, now})` over a supabase-js-like
// client next to a heart over another store (the transactional-outbox and outbox-reconcile
// suites), the bot's heart-run find-or-create and reset over a recording client, and the
// canary's beat (`new SupabaseLeaseStore(client)` + `new DurableEffectLedger({client})`).
// Results are compared with the reference's exact shapes (assertShape: what we add is
// non-enumerable). The outbox suites run over FakeSupabase narrowed to the reference's
// OutboxClient type (insert / update / select, eq / in / lt, limit, maybeSingle; not
// thenable; effect_intents without our added columns), as the reference's own fake client.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeSupabase } from './helpers/fake-supabase.mjs';
import { assertShape } from './helpers/shape.mjs';
import {
  HeartFleet,
  MemoryLeaseStore,
  SupabaseLeaseStore,
  DurableEffectLedger,
  executeWithLease,
  sendOnce,
  reconcileOutbox,
  effectKey,
  canonicalize,
  sha256Hex,
  deterministicResourceId,
  HeartFleetError,
} from '../index.mjs';

const RUN_ID = '00000000-0000-4000-8000-000000000001';
const T0 = new Date('2026-07-30T00:00:00.000Z');

/** The reference suite's run (its fields as the TypeScript test writes them). */
function makeRun() {
  return {
    id: RUN_ID, task_id: null, assignment_id: 'a', objective: 'o', required_capabilities: [], status: 'ready',
    assigned_agent: null, lease_owner: null, lease_expires_at: null, retries: 0, budget: null, approval_state: 'auto',
    visibility: 'internal', idempotency_key: 'k', created_by: 't',
  };
}

/** The transactional-outbox suite's world: A holds a fence at T0 over a MemoryLeaseStore. */
async function outboxWorld(clientOptions = {}) {
  const store = new MemoryLeaseStore(T0);
  const heart = new HeartFleet({ store });
  const client = new FakeSupabase({ outboxClient: true, ...clientOptions });
  const ledger = new DurableEffectLedger({ client, now: () => store.now() });
  store.insert(makeRun());
  const acq = await heart.acquire(RUN_ID, 'worker-A', 60);
  return { store, heart, client, ledger, fence: acq.fence };
}

const tg = (fence, chatId, text) => ({
  fence,
  channel: 'telegram',
  effectKey: effectKey('telegram', { chatId, text }),
  payload: { chatId, text },
  send: async () => ({ message_id: 555 }),
  toExternalRef: (r) => ({ message_id: r.message_id }),
});

const intents = (client) => client.rows('effect_intents');
const outcomes = (client) => client.rows('outbox_dispatch_log').map((e) => e.outcome);

// ---------------------------------------------------------------------------------------
// transactional-outbox (the reference's 5 tests)
// ---------------------------------------------------------------------------------------

test('transactional outbox: sends once and records external evidence', async () => {
  const { heart, client, ledger, fence } = await outboxWorld();
  let fired = 0;
  const res = await sendOnce(heart, ledger, { ...tg(fence, 1, 'hi'), send: async () => { fired++; return { message_id: 42 }; } });
  assertShape(res, { sent: true, result: { message_id: 42 } }, { externalRef: { message_id: 42 }, committed: true });
  assert.equal(fired, 1);
  const [row] = intents(client);
  assert.equal(row.state, 'committed');
  assert.deepEqual(row.external_ref, { message_id: 42 });
  // The reference ledger's claim, as its client sees it.
  const claim = client.calls.find((c) => c[1][0] === 'insert' && c[0][1] === 'effect_intents');
  assert.deepEqual(claim, [
    ['from', 'effect_intents'],
    ['insert', {
      run_id: RUN_ID, effect_key: effectKey('telegram', { chatId: 1, text: 'hi' }), state: 'intent', channel: 'telegram',
      payload_digest: `sha256:dreamnet-sorted-json:v0:${sha256Hex(canonicalize({ chatId: 1, text: 'hi' }))}`, attempts: 0,
      created_at: T0.toISOString(),
    }],
    ['select', 'run_id'],
    ['maybeSingle'],
  ]);
  assert.deepEqual(outcomes(client), ['claimed', 'sent']);
  // The run is read from the heart's store, never from the client's runs table; the counters
  // and receipts are the heart's (deliberate fix 4: effect_committed).
  assert.equal(client.calls.some((c) => c[0][1] === 'agent_runs'), false);
  assert.equal(heart.metrics.effectCommits, 1);
  assert.deepEqual(heart.receipts().map((r) => r.event), ['acquired', 'fence_verified', 'effect_committed']);
});

test('transactional outbox: a duplicate effect_key dedupes - send fires exactly once across retries', async () => {
  const { heart, client, ledger, fence } = await outboxWorld();
  let fired = 0;
  const mk = () => ({ ...tg(fence, 1, 'same'), send: async () => { fired++; return { message_id: 1 }; } });
  const r1 = await sendOnce(heart, ledger, mk());
  const r2 = await sendOnce(heart, ledger, mk());
  assert.equal(r1.sent, true);
  assertShape(r2, { sent: false, reason: 'deduped' }, { code: 'deduped' });
  assert.equal(fired, 1);
  assert.deepEqual(outcomes(client), ['claimed', 'sent', 'deduped']);
  assert.equal(heart.metrics.effectDedupes, 1);
});

test('transactional outbox: NEVER fires the send on a stale fence (and the stale worker burns no key)', async () => {
  const { store, heart, client, ledger, fence } = await outboxWorld();
  store.advance(61_000);
  await heart.reclaimExpired();
  const b = await heart.acquire(RUN_ID, 'worker-B', 60);
  let fired = 0;
  const res = await sendOnce(heart, ledger, { ...tg(fence, 1, 'x'), send: async () => { fired++; return { message_id: 1 }; } });
  assertShape(res, { sent: false, reason: 'fence-rejected' }, { code: 'fence-rejected' });
  assert.equal(fired, 0);
  // Deliberate fix 5: the fence is checked before the claim, so the stale worker wrote no
  // intent and the live holder's send of the same key still fires (the reference dedupes it
  // forever).
  assert.deepEqual(intents(client), []);
  const live = await sendOnce(heart, ledger, { ...tg(b.fence, 1, 'x'), send: async () => { fired++; return { message_id: 2 }; } });
  assertShape(live, { sent: true, result: { message_id: 2 } }, { externalRef: { message_id: 2 }, committed: true });
  assert.equal(fired, 1);
});

test('transactional outbox: crash after send -> reconcilable dispatched row; the retry fires nothing', async () => {
  const { store, heart, client, ledger, fence } = await outboxWorld();
  const ek = effectKey('telegram', { chatId: 1, text: 'crash' });
  assert.equal(await ledger.claimIntent({ runId: RUN_ID, effectKey: ek, channel: 'telegram', payloadDigest: 'sha256:x' }), true);
  assert.equal(await ledger.markDispatched({ runId: RUN_ID, effectKey: ek, fenceOwner: fence.owner, fenceExpiresAt: fence.leaseExpiresAt }), true);
  assert.equal(intents(client)[0].state, 'dispatched');

  store.advance(61_000);
  const stale = await ledger.findStaleDispatched(store.now().toISOString());
  assert.ok(stale.map((r) => r.effect_key).includes(ek));

  let fired = 0;
  const res = await sendOnce(heart, ledger, {
    fence, channel: 'telegram', effectKey: ek, payload: { chatId: 1, text: 'crash' },
    send: async () => { fired++; return { message_id: 9 }; }, toExternalRef: (r) => ({ message_id: r.message_id }),
  });
  // The one deliberate change to this suite: the reference answers `deduped` here because it
  // claims before checking the fence; we check the fence first (fix 5), and A's fence expired
  // with the 61 s, so the answer is `fence-rejected`. Either way nothing fires, and the row
  // stays dispatched for the reconciler.
  assertShape(res, { sent: false, reason: 'fence-rejected' }, { code: 'fence-rejected' });
  assert.equal(fired, 0);
  assert.equal(intents(client)[0].state, 'dispatched');
});

test('effectKey is deterministic and identity-order independent', () => {
  assert.equal(effectKey('telegram', { chatId: 1, text: 'a' }), effectKey('telegram', { text: 'a', chatId: 1 }));
  assert.notEqual(effectKey('telegram', { chatId: 1, text: 'a' }), effectKey('telegram', { chatId: 1, text: 'b' }));
});

// Our fixes on this seam, beyond the reference's suite.

test('outbox over a client: a takeover between the fence check and the dispatch is a lost dispatch race; the new holder sends', async () => {
  let world;
  let takeOver = true;
  // The claim's insert is the moment between verify and mark-dispatched: the lease moves on.
  const beforeExecute = async (q) => {
    if (takeOver && q.action === 'insert' && q.table === 'effect_intents') {
      takeOver = false;
      world.store.advance(61_000);
      await world.heart.reclaimExpired();
      world.b = await world.heart.acquire(RUN_ID, 'worker-B', 60);
    }
  };
  world = await outboxWorld({ beforeExecute });
  const { heart, client, ledger, fence } = world;
  let fired = 0;
  const send = async () => { fired++; return { message_id: fired }; };
  const a = await sendOnce(heart, ledger, { ...tg(fence, 7, 'race'), send });
  // The run is read from the heart's store (a MemoryLeaseStore) at its clock: B holds it.
  assertShape(a, { sent: false, reason: 'lost-dispatch-race' }, { code: 'fence-rejected' });
  assert.equal(fired, 0);
  assert.equal(intents(client)[0].state, 'intent');
  // The claimed-but-undispatched intent is the live holder's to send.
  const b = await sendOnce(heart, ledger, { ...tg(world.b.fence, 7, 'race'), send });
  assertShape(b, { sent: true, result: { message_id: 1 } }, { externalRef: { message_id: 1 }, committed: true });
  assert.equal(intents(client)[0].fence_owner, 'worker-B');
});

test('outbox over a client: whether the token holds the run is decided at the heart\'s store clock, not the ledger\'s', async () => {
  // The ledger stamps its rows with the wall clock (months after T0); the heart's store is at
  // T0, where A's lease is live. Decided by the wall clock, A's lease would look expired.
  const store = new MemoryLeaseStore(T0);
  const heart = new HeartFleet({ store });
  store.insert(makeRun());
  const { fence } = await heart.acquire(RUN_ID, 'worker-A', 60);
  const client = new FakeSupabase({ outboxClient: true });
  const ledger = new DurableEffectLedger({ client });
  const res = await sendOnce(heart, ledger, tg(fence, 1, 'clocks'));
  assertShape(res, { sent: true, result: { message_id: 555 } }, { externalRef: { message_id: 555 }, committed: true });
  assert.ok(Date.parse(intents(client)[0].created_at) > Date.parse('2026-08-01T00:00:00.000Z'), 'the ledger\'s own clock');
});

test('outbox over a client: a reopened intent is re-dispatched by the run\'s current holder, once', async () => {
  const { store, heart, client, ledger, fence } = await outboxWorld();
  const lost = new Error('socket hang up');
  const opts = tg(fence, 3, 'reopen');
  await assert.rejects(sendOnce(heart, ledger, { ...opts, send: async () => { throw lost; } }), (e) => e === lost);
  assert.equal(intents(client)[0].state, 'dispatched');
  store.advance(61_000);
  await heart.reclaimExpired();
  const b = await heart.acquire(RUN_ID, 'worker-B', 60);
  const summary = await reconcileOutbox(ledger, { probes: { telegram: async () => ({ status: 'not-sent' }) } });
  assertShape(summary, { scanned: 1, committed: 0, reopened: 1, abandoned: 0, left: 0, errors: [] });
  assert.equal(intents(client)[0].state, 'intent');
  let fired = 0;
  const send = async () => { fired++; return { message_id: 77 }; };
  // The stale worker still cannot; the current holder can, and only once.
  assertShape(await sendOnce(heart, ledger, { ...opts, send }), { sent: false, reason: 'fence-rejected' }, { code: 'fence-rejected' });
  assertShape(await sendOnce(heart, ledger, { ...opts, fence: b.fence, send }), { sent: true, result: { message_id: 77 } }, { externalRef: { message_id: 77 }, committed: true });
  assertShape(await sendOnce(heart, ledger, { ...opts, fence: b.fence, send }), { sent: false, reason: 'deduped' }, { code: 'deduped' });
  assert.equal(fired, 1);
  assert.deepEqual(outcomes(client), ['claimed', 'reconciled', 'deduped', 'sent', 'deduped']);
});

test('outbox over a client: the reference ledger\'s methods, 23505 as the duplicate, logs only for transitions that happened', async () => {
  const { client, ledger, fence } = await outboxWorld();
  const input = { runId: RUN_ID, effectKey: 'internal:1', channel: 'internal', payloadDigest: '' };
  assert.equal(await ledger.claimIntent(input), true);
  assert.equal(await ledger.claimIntent(input), false);
  assert.equal(await ledger.recordOnce(RUN_ID, 'internal:1'), false);
  assert.equal(await ledger.recordOnce(RUN_ID, 'internal:2'), true);
  const dispatch = { runId: RUN_ID, effectKey: 'internal:1', fenceOwner: fence.owner, fenceExpiresAt: fence.leaseExpiresAt };
  assert.equal(await ledger.markDispatched(dispatch), true);
  assert.equal(await ledger.markDispatched(dispatch), false);
  assert.equal(await ledger.noteUnresolved(RUN_ID, 'internal:1', 0), 1);
  assert.equal(await ledger.noteUnresolved(RUN_ID, 'internal:1', Number.NaN), 1);
  assert.equal(await ledger.markCommitted({ runId: RUN_ID, effectKey: 'internal:1', externalRef: { id: 'x' } }), true);
  assert.equal(await ledger.markCommitted({ runId: RUN_ID, effectKey: 'internal:1', externalRef: { id: 'y' } }), false);
  // Not dispatched any more: reopen and abandon change nothing and log nothing (the
  // reference logs `reconciled` and `abandoned` regardless).
  assert.equal(await ledger.reopen(RUN_ID, 'internal:1', 'no'), undefined);
  assert.equal(await ledger.abandon(RUN_ID, 'internal:1', 'no'), undefined);
  // noteUnresolved returns the count even when no row matched, as the reference.
  assert.equal(await ledger.noteUnresolved(RUN_ID, 'internal:1', 4), 5);
  const row = intents(client).find((r) => r.effect_key === 'internal:1');
  assert.deepEqual([row.state, row.attempts, row.external_ref, row.fence_owner], ['committed', 1, { id: 'x' }, 'worker-A']);
  assert.deepEqual(outcomes(client), ['claimed', 'deduped', 'deduped', 'claimed', 'sent']);
  assert.deepEqual(client.rows('outbox_dispatch_log')[4].detail, { id: 'x' });
  // abandon: intent → abandoned, the reason cut to 500 (last_error) and 120 (log) units.
  const reason = 'r'.repeat(600);
  await ledger.abandon(RUN_ID, 'internal:2', reason);
  const abandoned = intents(client).find((r) => r.effect_key === 'internal:2');
  assert.deepEqual([abandoned.state, abandoned.last_error], ['abandoned', 'r'.repeat(500)]);
  assert.deepEqual(client.rows('outbox_dispatch_log').at(-1).detail, { reason: 'r'.repeat(120) });
  // logAttempt: best-effort, the reference's row.
  assert.equal(await ledger.logAttempt(RUN_ID, 'internal:2', 0, 'failed', { why: 'test' }), undefined);
  const { id, seq, ...entry } = client.rows('outbox_dispatch_log').at(-1);
  assert.deepEqual(entry, { run_id: RUN_ID, effect_key: 'internal:2', attempt: 0, outcome: 'failed', at: T0.toISOString(), detail: { why: 'test' } });
  assert.equal(typeof id, 'string');
});

test('the reference ledger\'s methods over a store ledger ({heart} on a MemoryLeaseStore) too', async () => {
  const store = new MemoryLeaseStore(T0);
  store.insert(makeRun());
  const heart = new HeartFleet({ store });
  const ledger = new DurableEffectLedger({ heart });
  const ek = 'mail:1';
  assert.equal(await ledger.claimIntent({ runId: RUN_ID, effectKey: ek, channel: 'mail', payloadDigest: 'd' }), true);
  assert.equal(await ledger.claimIntent({ runId: RUN_ID, effectKey: ek, channel: 'mail', payloadDigest: 'd' }), false);
  assert.equal(await ledger.markDispatched({ runId: RUN_ID, effectKey: ek, fenceOwner: 'w', fenceExpiresAt: T0 }), true);
  assert.equal(await ledger.noteUnresolved(RUN_ID, ek, 0), 1);
  await ledger.reopen(RUN_ID, ek, 'not sent');
  assert.deepEqual(store.intents().map((i) => [i.state, i.attempts, i.fence_owner, i.last_error]), [['intent', 1, null, 'not sent']]);
  await ledger.abandon(RUN_ID, ek, 'gave up');
  assert.equal(await ledger.markCommitted({ runId: RUN_ID, effectKey: ek, externalRef: {} }), false);
  assert.deepEqual(store.intents().map((i) => i.state), ['abandoned']);
  assert.deepEqual(store.dispatchLog().map((e) => e.outcome), ['claimed', 'deduped', 'reconciled', 'abandoned']);
  store.failNext('*');
  await assert.rejects(ledger.markDispatched({ runId: RUN_ID, effectKey: ek, fenceOwner: 'w', fenceExpiresAt: T0 }), (e) => e.code === 'store-unavailable' && /^markDispatched failed: /.test(e.message));
});

// ---------------------------------------------------------------------------------------
// outbox-reconcile (the reference's 6 tests): seeded dispatched rows, fence expiry 09:00
// ---------------------------------------------------------------------------------------

const NOW = () => new Date('2026-07-30T10:00:00.000Z'); // past the seeded fence expiry

function reconcileWorld() {
  const client = new FakeSupabase({ outboxClient: true });
  const ledger = new DurableEffectLedger({ client, now: NOW });
  const seedDispatched = (key, channel, attempts) =>
    client.seed('effect_intents', [{
      run_id: 'run-1', effect_key: key, state: 'dispatched', channel, payload_digest: 'd', fence_owner: 'dead-worker',
      fence_expires_at: '2026-07-30T09:00:00.000Z', external_ref: null, attempts, last_error: null,
      created_at: '2026-07-30T08:00:00.000Z', committed_at: null,
    }]);
  return { client, ledger, seedDispatched, row: () => intents(client)[0] };
}

const summaryOf = (fields) => ({ scanned: 1, committed: 0, reopened: 0, abandoned: 0, left: 0, errors: [], ...fields });

test('reconcileOutbox: commits a stale row the probe proves was \'sent\'', async () => {
  const { client, ledger, seedDispatched, row } = reconcileWorld();
  seedDispatched('e-sent', 'farcaster', 1);
  const probe = async () => ({ status: 'sent', externalRef: { cast_hash: '0xabc' } });
  const s = await reconcileOutbox(ledger, { probes: { farcaster: probe }, now: NOW });
  assertShape(s, summaryOf({ committed: 1 }));
  assert.equal(row().state, 'committed');
  assert.deepEqual(row().external_ref, { cast_hash: '0xabc' });
  assert.equal(row().committed_at, '2026-07-30T10:00:00.000Z');
  assert.deepEqual(outcomes(client), ['sent']);
  // The reference ledger's scan (`<= now`: lt now + 1 ms), then its conditional update.
  assert.deepEqual(client.calls[0], [
    ['from', 'effect_intents'], ['select', '*'], ['eq', 'state', 'dispatched'], ['lt', 'fence_expires_at', '2026-07-30T10:00:00.001Z'], ['limit', 50],
  ]);
  const write = client.calls.find((c) => c[1][0] === 'update');
  assert.deepEqual(write.slice(2), [['eq', 'run_id', 'run-1'], ['eq', 'effect_key', 'e-sent'], ['eq', 'state', 'dispatched'], ['select', 'run_id'], ['maybeSingle']]);
});

test('reconcileOutbox: reopens a stale row the probe proves was \'not-sent\'', async () => {
  const { client, ledger, seedDispatched, row } = reconcileWorld();
  seedDispatched('e-notsent', 'farcaster', 1);
  const s = await reconcileOutbox(ledger, { probes: { farcaster: async () => ({ status: 'not-sent' }) }, now: NOW });
  assertShape(s, summaryOf({ reopened: 1 }));
  assert.deepEqual([row().state, row().fence_owner, row().fence_expires_at, row().last_error], ['intent', null, null, 'reconciler: provably not sent, reopened for retry']);
  assert.deepEqual(client.rows('outbox_dispatch_log').map((e) => [e.attempt, e.outcome, e.detail]), [[0, 'reconciled', { reopened: true }]]);
});

test('reconcileOutbox: NEVER resends an \'unknown\' row under the ceiling - leaves it dispatched', async () => {
  const { ledger, seedDispatched, row } = reconcileWorld();
  seedDispatched('e-unknown', 'telegram', 2); // no probe -> unknown, attempts < 5
  const s = await reconcileOutbox(ledger, { now: NOW });
  assertShape(s, summaryOf({ left: 1 }));
  assert.equal(row().state, 'dispatched');
  assert.equal(row().attempts, 3);
});

test('reconcileOutbox: abandons an \'unknown\' row past the ceiling (at-most-once: never resent)', async () => {
  const { client, ledger, seedDispatched, row } = reconcileWorld();
  seedDispatched('e-old', 'telegram', 5);
  const s = await reconcileOutbox(ledger, { maxAttempts: 5, now: NOW });
  assertShape(s, summaryOf({ abandoned: 1 }));
  const reason = "reconciler: unverifiable send on 'telegram' past 5 attempts - abandoned (not resent, at-most-once)";
  assert.deepEqual([row().state, row().last_error], ['abandoned', reason]);
  assert.ok(row().last_error.includes('at-most-once'));
  assert.deepEqual(client.rows('outbox_dispatch_log').map((e) => e.detail), [{ reason: reason.slice(0, 120) }]);
});

test('reconcileOutbox: counts each unresolved pass so an \'unknown\' row reaches the ceiling', async () => {
  const { ledger, seedDispatched, row } = reconcileWorld();
  seedDispatched('e-real', 'telegram', 0);
  assertShape(await reconcileOutbox(ledger, { maxAttempts: 2, now: NOW }), summaryOf({ left: 1 }));
  assert.equal(row().attempts, 1);
  assertShape(await reconcileOutbox(ledger, { maxAttempts: 2, now: NOW }), summaryOf({ left: 1 }));
  assert.equal(row().attempts, 2);
  assertShape(await reconcileOutbox(ledger, { maxAttempts: 2, now: NOW }), summaryOf({ abandoned: 1 }));
  assert.equal(row().state, 'abandoned');
});

test('reconcileOutbox: scans nothing when there are no stale dispatched rows', async () => {
  const { ledger } = reconcileWorld();
  assertShape(await reconcileOutbox(ledger, { now: NOW }), { scanned: 0, committed: 0, reopened: 0, abandoned: 0, left: 0, errors: [] });
});

test('reconcileOutbox over a client: the clock is the `now` passed, else the ledger\'s; the one expiry rule (<=)', async () => {
  const { client, seedDispatched } = reconcileWorld();
  seedDispatched('e-x', 'telegram', 0);
  const ledger = new DurableEffectLedger({ client }); // the wall clock: long past 09:00
  const at = (iso) => () => new Date(iso);
  assert.equal((await reconcileOutbox(ledger, { now: at('2026-07-30T08:59:59.999Z') })).scanned, 0);
  assert.deepEqual(await ledger.findStaleDispatched('2026-07-30T08:59:59.999Z'), []);
  // At exactly the expiry the fence is dead (the reference's strict `<` would skip it).
  assert.deepEqual((await ledger.findStaleDispatched('2026-07-30T09:00:00.000Z')).map((r) => r.effect_key), ['e-x']);
  assert.equal((await ledger.findStaleDispatched()).length, 1);
  assert.equal((await reconcileOutbox(ledger)).left, 1);
  assert.equal(intents(client)[0].attempts, 1);
});

// ---------------------------------------------------------------------------------------
// heart-run (the bot's 9 tests): find-or-create and reset over a recording client
// ---------------------------------------------------------------------------------------

/** The bot's heart-run module, as it is written against the package (its log line `featureRan` left out). */
const TERMINAL_STATUSES = ['completed', 'failed'];

async function ensureLeaseRun(client, kind, key, objective) {
  const idempotencyKey = deterministicResourceId(kind, key);
  try {
    const { data: existing } = await client.from('agent_runs').select('id').eq('idempotency_key', idempotencyKey).maybeSingle();
    if (existing?.id) return existing.id;
    const { data: created, error } = await client
      .from('agent_runs')
      .insert({
        id: globalThis.crypto.randomUUID(),
        assignment_id: globalThis.crypto.randomUUID(),
        objective,
        required_capabilities: [],
        status: 'ready',
        retries: 0,
        approval_state: 'auto',
        visibility: 'team',
        idempotency_key: idempotencyKey,
        created_by: `zoe:${kind}`,
      })
      .select('id')
      .single();
    if (!error && created?.id) return created.id;
    const { data: raced } = await client.from('agent_runs').select('id').eq('idempotency_key', idempotencyKey).maybeSingle();
    if (raced?.id) return raced.id;
    console.error(`[zoe/heart-run] could not ensure lease run for ${kind}:${key}: ${error?.message ?? 'unknown error'}`);
    return null;
  } catch (err) {
    console.error(`[zoe/heart-run] could not ensure lease run for ${kind}:${key}: ${err?.message ?? String(err)}`);
    return null;
  }
}

async function resetRunReady(client, runId) {
  try {
    await client.from('agent_runs').update({ status: 'ready', updated_at: new Date().toISOString() }).eq('id', runId).in('status', TERMINAL_STATUSES);
  } catch (err) {
    console.error(`[zoe/heart-run] could not reset run ${runId} to ready: ${err?.message ?? String(err)}`);
  }
}

/** The bot suite's recording stand-in for the three Supabase chains heart-run uses. */
function makeClient(opts) {
  const calls = [];
  let selects = 0;
  const client = {
    from(table) {
      calls.push({ op: 'from', args: [table] });
      return {
        select() {
          return {
            eq(field, value) {
              calls.push({ op: 'select.eq', args: [field, value] });
              return {
                async maybeSingle() {
                  if (opts.throwOn === 'select') throw new Error('network down');
                  selects += 1;
                  const id = selects === 1 ? (opts.existingId ?? null) : (opts.racedId ?? null);
                  return { data: id ? { id } : null, error: null };
                },
              };
            },
          };
        },
        insert(values) {
          calls.push({ op: 'insert', args: [values] });
          return {
            select() {
              return {
                async single() {
                  if (opts.throwOn === 'insert') throw new Error('insert exploded');
                  return { data: opts.insertId ? { id: opts.insertId } : null, error: opts.insertError ?? null };
                },
              };
            },
          };
        },
        update(values) {
          calls.push({ op: 'update', args: [values] });
          return {
            eq(field, value) {
              calls.push({ op: 'update.eq', args: [field, value] });
              return {
                async in(field2, values2) {
                  if (opts.throwOn === 'update') throw new Error('update exploded');
                  calls.push({ op: 'update.in', args: [field2, [...values2]] });
                  return { data: null, error: null };
                },
              };
            },
          };
        },
      };
    },
  };
  return { client, calls };
}

/** Runs `fn` with console.error recorded (and silenced); returns what it logged. */
async function capturingErrors(fn) {
  const logged = [];
  const original = console.error;
  console.error = (...args) => logged.push(args.join(' '));
  try {
    return { value: await fn(), logged };
  } finally {
    console.error = original;
  }
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

test('heart-run: returns the existing row id when the resource already exists', async () => {
  const { client, calls } = makeClient({ existingId: 'a1b2c3d4-0000-4000-8000-000000000001' });
  assert.equal(await ensureLeaseRun(client, 'zoe.work-loop', 'singleton', 'obj'), 'a1b2c3d4-0000-4000-8000-000000000001');
  assert.deepEqual(calls.find((c) => c.op === 'select.eq').args, ['idempotency_key', deterministicResourceId('zoe.work-loop', 'singleton')]);
});

test('heart-run: returns a row UUID, never the heart:resource idempotency key', async () => {
  const { client } = makeClient({ existingId: null, insertId: 'b1b2c3d4-0000-4000-8000-000000000002' });
  const id = await ensureLeaseRun(client, 'zoe.work-loop', 'singleton', 'obj');
  assert.equal(id, 'b1b2c3d4-0000-4000-8000-000000000002');
  assert.doesNotMatch(id, /^heart:resource:/);
});

test('heart-run: creates the row with a schema-valid shape when it is missing', async () => {
  const { client, calls } = makeClient({ existingId: null, insertId: 'c1b2c3d4-0000-4000-8000-000000000003' });
  await ensureLeaseRun(client, 'zoe.orchestrator-tick', 'singleton', 'the objective');
  const inserted = calls.find((c) => c.op === 'insert').args[0];
  assert.match(inserted.idempotency_key, /^heart:resource:[0-9a-f]{64}$/);
  assert.match(String(inserted.id), UUID_RE);
  assert.match(String(inserted.assignment_id), UUID_RE);
  assert.ok(['private', 'team', 'public'].includes(inserted.visibility));
  assert.equal(inserted.status, 'ready');
  assert.equal(inserted.objective, 'the objective');
});

test('heart-run: the same (kind, key) gives the same idempotency key, a different kind a different one', async () => {
  const keyOf = async (kind) => {
    const m = makeClient({ existingId: null, insertId: 'd1b2c3d4-0000-4000-8000-000000000004' });
    await ensureLeaseRun(m.client, kind, 'singleton', 'o');
    return m.calls.find((x) => x.op === 'insert').args[0].idempotency_key;
  };
  assert.equal(await keyOf('zoe.work-loop'), await keyOf('zoe.work-loop'));
  assert.notEqual(await keyOf('zoe.work-loop'), await keyOf('zoe.orchestrator-tick'));
  // The canary's key, byte for byte the reference's.
  assert.equal(deterministicResourceId('zoe.heart.canary', 'singleton'), 'heart:resource:feafc855c8ea80bff32ad3d81a37a199ae66bc65d256288bd91683ffd8438bed');
});

test('heart-run: re-reads instead of failing when a sibling host wins the insert race', async () => {
  const { client } = makeClient({
    existingId: null, insertId: null, insertError: { message: 'duplicate key value violates unique constraint' }, racedId: 'e1b2c3d4-0000-4000-8000-000000000005',
  });
  assert.equal(await ensureLeaseRun(client, 'zoe.work-loop', 'singleton', 'o'), 'e1b2c3d4-0000-4000-8000-000000000005');
});

test('heart-run: returns null rather than throwing when the row can neither be read nor created', async () => {
  const { client } = makeClient({ existingId: null, insertId: null, insertError: { message: 'boom' }, racedId: null });
  const { value, logged } = await capturingErrors(() => ensureLeaseRun(client, 'zoe.work-loop', 'singleton', 'o'));
  assert.equal(value, null);
  assert.deepEqual(logged, ['[zoe/heart-run] could not ensure lease run for zoe.work-loop:singleton: boom']);
});

test('heart-run: returns null rather than throwing when the client itself throws', async () => {
  const { client } = makeClient({ throwOn: 'select' });
  const { value, logged } = await capturingErrors(() => ensureLeaseRun(client, 'zoe.work-loop', 'singleton', 'o'));
  assert.equal(value, null);
  assert.equal(logged.length, 1);
});

test('heart-run: resetRunReady parks the row back at ready, conditional on it still being terminal', async () => {
  const { client, calls } = makeClient({});
  await resetRunReady(client, 'f1b2c3d4-0000-4000-8000-000000000006');
  assert.equal(calls.find((c) => c.op === 'update').args[0].status, 'ready');
  assert.deepEqual(calls.find((c) => c.op === 'update.eq').args, ['id', 'f1b2c3d4-0000-4000-8000-000000000006']);
  assert.deepEqual(calls.find((c) => c.op === 'update.in').args[1], ['completed', 'failed']);
});

test('heart-run: resetRunReady swallows a failure - the tick it follows has already done its work', async () => {
  const { client } = makeClient({ throwOn: 'update' });
  const { value, logged } = await capturingErrors(() => resetRunReady(client, 'f1b2c3d4-0000-4000-8000-000000000007'));
  assert.equal(value, undefined);
  assert.equal(logged.length, 1);
});

test('heart-run over the package: the row it finds or creates is leased, released and reset by id', async () => {
  const fake = new FakeSupabase({ pgTimestamps: true });
  const heart = new HeartFleet({ store: new SupabaseLeaseStore(fake) });
  const id = await ensureLeaseRun(fake, 'zoe.work-loop', 'singleton', 'obj');
  assert.equal(await ensureLeaseRun(fake, 'zoe.work-loop', 'singleton', 'obj'), id);
  for (const round of [1, 2]) {
    const out = await executeWithLease(heart, { runId: id, owner: 'zoe:scheduler:host:1', ttlSeconds: 600 }, async () => round);
    assertShape(out, { ran: true, result: round }, { released: true });
    await resetRunReady(fake, id);
    assert.equal(fake.rows('agent_runs')[0].status, 'ready');
  }
});

// ---------------------------------------------------------------------------------------
// The canary's beat (the bot's heart-canary module, flags on, against one database)
// ---------------------------------------------------------------------------------------

const OUTBOX_DEMO_TEXT =
  '[outbox-demo] ZOE outbox is live - this message was delivered exactly once via the transactional outbox (doc 2145).';
const CANARY_ASSIGNMENT_ID = '00000000-0000-4000-8000-00000000ca27';

/** One process's canary: its HeartFleet and DurableEffectLedger singletons over `client`. */
function canaryProcess(client, log) {
  let heart = null;
  let ledger = null;
  const h = () =>
    (heart ??= new HeartFleet({
      store: new SupabaseLeaseStore(client),
      onReceipt: (r) => log(`[zoe/heart-canary] receipt ${r.event} run=${r.runId.slice(0, 8)} owner=${r.owner}`),
    }));
  const l = () => (ledger ??= new DurableEffectLedger({ client }));

  async function ensureCanaryRun() {
    const idempotencyKey = deterministicResourceId('zoe.heart.canary', 'singleton');
    const { data: existing } = await client.from('agent_runs').select('id').eq('idempotency_key', idempotencyKey).maybeSingle();
    if (existing?.id) return existing.id;
    const { data: created, error } = await client
      .from('agent_runs')
      .insert({
        id: globalThis.crypto.randomUUID(),
        assignment_id: CANARY_ASSIGNMENT_ID,
        objective: 'Heart fleet canary: lease-guarded no-op proving the shared lease layer on the live table',
        required_capabilities: [],
        status: 'ready',
        retries: 0,
        approval_state: 'auto',
        visibility: 'team',
        idempotency_key: idempotencyKey,
        created_by: 'zoe:heart-canary',
      })
      .select('id')
      .single();
    if (error) {
      const { data: raced } = await client.from('agent_runs').select('id').eq('idempotency_key', idempotencyKey).maybeSingle();
      if (raced?.id) return raced.id;
      log(`[zoe/heart-canary] could not ensure canary run: ${error.message}`);
      return null;
    }
    return created.id;
  }

  async function runOutboxDemo(fence, deps) {
    if (!deps.send || !deps.groupId) return 'no-send-deps';
    try {
      const outcome = await sendOnce(h(), l(), {
        fence,
        channel: 'telegram',
        effectKey: effectKey('telegram', { chatId: deps.groupId, text: OUTBOX_DEMO_TEXT }),
        payload: { chatId: deps.groupId, text: OUTBOX_DEMO_TEXT },
        send: () => deps.send(deps.groupId, OUTBOX_DEMO_TEXT),
        toExternalRef: (r) => ({ message_id: r.message_id ?? null }),
      });
      log(`[zoe/heart-canary] outbox demo: ${JSON.stringify(outcome.sent ? { sent: true } : outcome)}`);
      try {
        const rec = await reconcileOutbox(l());
        if (rec.scanned > 0) log(`[zoe/heart-canary] outbox reconcile: ${JSON.stringify(rec)}`);
      } catch (e) {
        log(`[zoe/heart-canary] outbox reconcile skipped: ${e?.message}`);
      }
      return outcome.sent ? 'sent' : outcome.reason;
    } catch (err) {
      log(`[zoe/heart-canary] outbox demo skipped: ${err?.message ?? String(err)}`);
      return 'error';
    }
  }

  /** runHeartFleetCanary(owner, deps) with both flags on. */
  async function beat(owner, deps) {
    const runId = await ensureCanaryRun();
    if (!runId) return { skipped: 'no-run' };
    let outboxResult;
    const outcome = await executeWithLease(h(), { runId, owner, ttlSeconds: 60 }, async (fence) => {
      outboxResult = await runOutboxDemo(fence(), deps);
      return 'ok';
    });
    if (outcome.ran) {
      await client.from('agent_runs').update({ status: 'ready', updated_at: new Date().toISOString() }).eq('id', runId).eq('status', 'completed');
    }
    const m = h().metrics;
    const summary = {
      ran: outcome.ran,
      ...(outcome.ran ? {} : { reason: outcome.reason }),
      ...(outboxResult ? { outbox: outboxResult } : {}),
      metrics: {
        acquireWins: m.acquireWins,
        acquireCollisions: m.acquireCollisions,
        renews: m.renews,
        releases: m.releases,
        fenceRejections: m.fenceRejections,
        effectCommits: m.effectCommits,
        effectDedupes: m.effectDedupes,
      },
    };
    log(`[zoe/heart-canary] beat: ${JSON.stringify(summary)}`);
    return summary;
  }
  return { beat };
}

const canaryMetrics = (m) => ({ acquireWins: 0, acquireCollisions: 0, renews: 0, releases: 0, fenceRejections: 0, effectCommits: 0, effectDedupes: 0, ...m });

test('the canary: a first beat sends once, a second beat dedupes (one process, the reference\'s constructors)', async () => {
  const db = new FakeSupabase({ pgTimestamps: true });
  const lines = [];
  const canary = canaryProcess(db, (l) => lines.push(l));
  const sent = [];
  const deps = { groupId: -1001, send: async (chatId, text) => { sent.push([chatId, text]); return { message_id: 777 }; } };

  const first = await canary.beat('zoe:host:1', deps);
  // Deliberate fix 4: sendOnce counts its commit and its dedupe on the heart (the reference's
  // canary line shows 0 for both, and emits no effect receipts).
  assertShape(first, { ran: true, outbox: 'sent', metrics: canaryMetrics({ acquireWins: 1, releases: 1, effectCommits: 1 }) });
  assert.deepEqual(sent, [[-1001, OUTBOX_DEMO_TEXT]]);
  const runId = db.rows('agent_runs')[0].id;
  const short = runId.slice(0, 8);
  assert.deepEqual(lines, [
    `[zoe/heart-canary] receipt acquired run=${short} owner=zoe:host:1`,
    `[zoe/heart-canary] receipt fence_verified run=${short} owner=zoe:host:1`,
    `[zoe/heart-canary] receipt effect_committed run=${short} owner=zoe:host:1`,
    '[zoe/heart-canary] outbox demo: {"sent":true}',
    `[zoe/heart-canary] receipt released run=${short} owner=zoe:host:1`,
    `[zoe/heart-canary] beat: ${JSON.stringify(first)}`,
  ]);
  const [intent] = db.rows('effect_intents');
  assert.deepEqual([intent.run_id, intent.state, intent.external_ref, intent.fence_owner], [runId, 'committed', { message_id: 777 }, 'zoe:host:1']);
  assert.equal(db.rows('agent_runs')[0].status, 'ready');

  lines.length = 0;
  const second = await canary.beat('zoe:host:1', deps);
  assertShape(second, { ran: true, outbox: 'deduped', metrics: canaryMetrics({ acquireWins: 2, releases: 2, effectCommits: 1, effectDedupes: 1 }) });
  assert.ok(lines.includes('[zoe/heart-canary] outbox demo: {"sent":false,"reason":"deduped"}'));
  assert.equal(sent.length, 1);
  assert.deepEqual(db.rows('outbox_dispatch_log').map((e) => e.outcome), ['claimed', 'sent', 'deduped']);
});

test('the canary: two instances beating at once give one run and one `lease-held`; the message goes out once', async () => {
  const db = new FakeSupabase({ pgTimestamps: true });
  const lines = [];
  let open;
  const gate = new Promise((resolve) => { open = resolve; });
  const sent = [];
  // The holder's send waits until the other beat has answered, so the two leases overlap.
  const deps = { groupId: -1001, send: async (chatId, text) => { await gate; sent.push([chatId, text]); return { message_id: 1 }; } };
  const beats = [canaryProcess(db, (l) => lines.push(l)).beat('zoe:a:1', deps), canaryProcess(db, (l) => lines.push(l)).beat('zoe:b:2', deps)];
  const loser = await Promise.race(beats);
  open();
  const results = await Promise.all(beats);
  assertShape(loser, { ran: false, reason: 'lease-held', metrics: canaryMetrics({ acquireCollisions: 1 }) });
  assert.deepEqual(results.map((r) => r.ran).sort(), [false, true]);
  assert.equal(results.find((r) => r.ran).outbox, 'sent');
  assert.equal(db.rows('agent_runs').length, 1);
  assert.equal(sent.length, 1);
  assert.ok(lines.some((l) => l.startsWith('[zoe/heart-canary] beat: {"ran":false,"reason":"lease-held",')));
});

// ---------------------------------------------------------------------------------------
// The constructors and bad input
// ---------------------------------------------------------------------------------------

const isTypeError = (e) => e instanceof TypeError && e.code === 'invalid-input';

test('new SupabaseLeaseStore(client, table?): the reference\'s positional form next to {client}', async () => {
  const fake = new FakeSupabase();
  assert.deepEqual(new SupabaseLeaseStore(fake).tables, { runs: 'agent_runs', intents: 'effect_intents', log: 'outbox_dispatch_log', instances: 'agent_instances' });
  const store = new SupabaseLeaseStore(fake, 'runs2');
  assert.equal(store.tables.runs, 'runs2');
  assertShape(await new HeartFleet({ store }).acquire(RUN_ID, 'w', 60), { acquired: false, run: null, reason: 'Run not found' }, { code: 'run-not-found' });
  assert.deepEqual(fake.calls.at(-1).slice(0, 2), [['from', 'runs2'], ['select', '*']]);
  assert.equal(new SupabaseLeaseStore({ client: fake }).client, fake);
  for (const bad of [
    () => new SupabaseLeaseStore(),
    () => new SupabaseLeaseStore(null),
    () => new SupabaseLeaseStore({ select() {} }),
    () => new SupabaseLeaseStore({ client: { from: 1 } }),
    () => new SupabaseLeaseStore(fake, ''),
    () => new SupabaseLeaseStore(fake, 5),
    () => new SupabaseLeaseStore({ client: fake }, 'agent_runs'),
    () => new SupabaseLeaseStore({ client: fake, tables: { runs: 7 } }),
  ]) {
    assert.throws(bad, isTypeError);
  }
  assert.throws(() => new SupabaseLeaseStore(undefined), /a supabase-js client \(with from\(\)\)/);
});

test('new DurableEffectLedger({client, ...}): wrong options are TypeErrors, nothing is called', () => {
  const fake = new FakeSupabase();
  const heart = new HeartFleet({ store: new MemoryLeaseStore(T0) });
  for (const options of [
    { client: {} },
    { client: null },
    { client: fake, intentsTable: 5 },
    { client: fake, logTable: '' },
    { client: fake, now: 'yesterday' },
    { client: fake, heart },
    { client: fake, table: 'x' },
    {},
  ]) {
    assert.throws(() => new DurableEffectLedger(options), isTypeError, JSON.stringify(Object.keys(options)));
  }
  assert.deepEqual(fake.calls, []);
});

test('DurableEffectLedger({client}) with its own table names', async () => {
  const fake = new FakeSupabase();
  const ledger = new DurableEffectLedger({ client: fake, intentsTable: 'intents2', logTable: 'log2', now: () => T0 });
  assert.equal(await ledger.claimIntent({ runId: RUN_ID, effectKey: 'k', channel: 'mail', payloadDigest: 'd' }), true);
  assert.deepEqual([...new Set(fake.calls.map((c) => c[0][1]))], ['intents2', 'log2']);
  assert.equal(fake.rows('intents2')[0].created_at, T0.toISOString());
});

test('a client whose calls throw or return {error}: coded errors in the reference\'s words, nothing written', async () => {
  for (const [fail, message] of [
    [{ code: '08006', message: 'connection failure' }, 'connection failure'],
    [{ throws: 'fetch failed' }, 'fetch failed'],
  ]) {
    let failing = false;
    const world = await outboxWorld({ beforeExecute: (q) => { if (failing) q.fail = fail; } });
    const { heart, client, ledger, fence } = world;
    client.seed('effect_intents', [{ run_id: RUN_ID, effect_key: 'seeded', state: 'dispatched', channel: 'mail', payload_digest: 'd', fence_owner: 'w', fence_expires_at: T0, created_at: T0 }]);
    const before = intents(client);
    failing = true;
    const calls = [
      ['claimIntent', () => ledger.claimIntent({ runId: RUN_ID, effectKey: 'k', channel: 'telegram', payloadDigest: 'd' })],
      ['markDispatched', () => ledger.markDispatched({ runId: RUN_ID, effectKey: 'seeded', fenceOwner: 'w', fenceExpiresAt: T0 })],
      ['markCommitted', () => ledger.markCommitted({ runId: RUN_ID, effectKey: 'seeded', externalRef: {} })],
      ['findStaleDispatched', () => ledger.findStaleDispatched(T0.toISOString())],
      ['reopen', () => ledger.reopen(RUN_ID, 'seeded', 'x')],
      ['noteUnresolved', () => ledger.noteUnresolved(RUN_ID, 'seeded', 0)],
      ['abandon', () => ledger.abandon(RUN_ID, 'seeded', 'x')],
    ];
    for (const [method, call] of calls) {
      await assert.rejects(call(), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable' && e.message === `${method} failed: ${message}`, method);
    }
    await assert.rejects(ledger.recordOnce(RUN_ID, 'k'), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable');
    let fired = 0;
    await assert.rejects(
      sendOnce(heart, ledger, { ...tg(fence, 1, 'x'), send: async () => { fired++; return {}; } }),
      (e) => e instanceof HeartFleetError && e.code === 'store-unavailable' && e.message.includes(message),
    );
    assert.equal(fired, 0);
    // A failed scan is an error (the reference returns it in the summary's errors).
    await assert.rejects(reconcileOutbox(ledger, { now: () => T0 }), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable');
    // logAttempt is best-effort (the reference's contract): it never throws for the client.
    assert.equal(await ledger.logAttempt(RUN_ID, 'k', 0, 'claimed'), undefined);
    failing = false;
    assert.deepEqual(intents(client), before);
    assert.deepEqual(client.rows('outbox_dispatch_log'), []);
  }
});

test('the reference ledger\'s methods and the outbox over a client: wrong input is invalid-input before any call', async () => {
  const { heart, client, ledger, fence } = await outboxWorld();
  const n = client.calls.length;
  const bad = [
    () => ledger.claimIntent(null),
    () => ledger.claimIntent({ runId: 5, effectKey: 'k', channel: 'telegram', payloadDigest: '' }),
    () => ledger.claimIntent({ runId: RUN_ID, effectKey: 'k', channel: 'sms', payloadDigest: '' }),
    () => ledger.claimIntent({ runId: RUN_ID, effectKey: 'k', channel: 'telegram' }),
    () => ledger.markDispatched({ runId: RUN_ID, effectKey: 'k', fenceOwner: 'w', fenceExpiresAt: 'soon' }),
    () => ledger.markCommitted({ runId: RUN_ID, effectKey: 'k', externalRef: { n: Number.NaN } }),
    () => ledger.reopen(RUN_ID, 'k', 42),
    () => ledger.noteUnresolved(RUN_ID, 'k', 1.5),
    () => ledger.abandon('', 'k', 'x'),
    () => ledger.findStaleDispatched('not a time'),
    () => ledger.findStaleDispatched(T0.toISOString(), -1),
    () => ledger.logAttempt(RUN_ID, 'k', 'zero', 'claimed'),
    () => reconcileOutbox(ledger, { now: 'x' }),
    () => reconcileOutbox(ledger, { heart: {} }),
    () => sendOnce(heart, ledger, { ...tg(fence, 1, 'x'), channel: 'pigeon' }),
    () => sendOnce(heart, {}, tg(fence, 1, 'x')),
  ];
  for (const call of bad) {
    await assert.rejects(call(), (e) => e.code === 'invalid-input');
  }
  assert.equal(client.calls.length, n);
  // logAttempt belongs to the {client} form; a store ledger logs with its transitions.
  await assert.rejects(new DurableEffectLedger({ heart }).logAttempt(RUN_ID, 'k', 0, 'claimed'), (e) => e.code === 'invalid-state');
});
