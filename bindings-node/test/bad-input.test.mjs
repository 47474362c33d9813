// The bad-input matrix: every exported function and method, every argument position, tried
// with wrong types (numbers for strings, null, undefined, NaN, ±Infinity, 1e300, BigInt,
// objects, arrays, empty strings, booleans, symbols, functions) and odd values (strings with
// a lone surrogate, arrays nested 6,000 and 10,000 deep, a circular object, an object holding
// a BigInt). Each call must answer with an Error whose `.code` is in the core's registry (or,
// where a value is legitimately accepted, succeed), never crash the process, and a call that
// fails must change nothing (rows, intents, log, instances, counters, receipts).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as api from '../index.mjs';

const {
  HeartFleet,
  MemoryLeaseStore,
  MemoryEffectLedger,
  DurableEffectLedger,
  LivenessReclaimer,
  ERROR_CODES,
  MAX_TTL_SECONDS,
} = api;

const T0 = '2026-07-30T00:00:00.000Z';
const R = '00000000-0000-4000-8000-000000000001';
const R2 = '00000000-0000-4000-8000-000000000002';

const BAD = [
  ['a number', 123],
  ['zero', 0],
  ['a negative number', -1],
  ['a fraction', 1.5],
  ['null', null],
  ['undefined', undefined],
  ['NaN', NaN],
  ['Infinity', Infinity],
  ['-Infinity', -Infinity],
  ['1e300', 1e300],
  ['a BigInt', 10n],
  ['an object', {}],
  ['an object with junk', { runId: 5, owner: null, leaseExpiresAt: 'soon', toString: 7 }],
  ['an array', []],
  ['an empty string', ''],
  ['a boolean', true],
  ['a symbol', Symbol('s')],
  ['a function', () => 'x'],
];

const circular = { a: 1 };
circular.self = circular;

/** Odd values: ids must be well-formed, JSON values bounded, acyclic and bigint-free. */
const ODD = [
  ['a lone high surrogate', 'run\ud800'],
  ['a lone low surrogate', '\udc00owner'],
  ['an array nested 6,000 deep', nested(6000)],
  ['an array nested 10,000 deep', nested(10_000)],
  ['a circular object', circular],
  ['an object holding a BigInt', { n: 10n }],
];

const isInt = (v, min, max) => typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;
const isOpts = (v) => v === undefined || v === null || (typeof v === 'object' && !Array.isArray(v));
const nullish = (v) => v === undefined || v === null;
const never = () => false;
const always = () => true;

async function world() {
  const store = new MemoryLeaseStore(T0);
  store.insert({ id: R, idempotency_key: 'k1' });
  store.insert({ id: R2, idempotency_key: 'k2' });
  const heart = new HeartFleet({ store });
  const { fence } = await heart.acquire(R, 'worker-A', 60);
  const durable = new DurableEffectLedger({ heart });
  const ledger = new MemoryEffectLedger();
  const reclaimer = new LivenessReclaimer({ heart });
  return { store, heart, fence, durable, ledger, reclaimer };
}

function snapshot(w) {
  return JSON.stringify({
    runs: w.store.runs(),
    intents: w.store.intents(),
    log: w.store.dispatchLog(),
    instances: w.store.instances(),
    metrics: w.heart.metrics,
    receipts: w.heart.receipts().length,
    now: w.store.now().toISOString(),
  });
}

const goodOpts = (extra) => ({ runId: R2, owner: 'w', ttlSeconds: 60, ...extra });
const sendOpts = (w, extra) => ({
  fence: w.fence,
  channel: 'telegram',
  effectKey: 'k',
  payload: { a: 1 },
  send: async () => ({ id: 1 }),
  ...extra,
});

/**
 * [name, call(w, v), accepted(v)]: `accepted(v)` says whether success is a legitimate
 * answer for that value (the position takes it); otherwise the call must fail.
 * `shape` entries return a result whose shape reports the bad input instead.
 */
const MATRIX = [
  // HeartFleet
  ['new HeartFleet(v)', (w, v) => new HeartFleet(v), never],
  ['new HeartFleet({store: v})', (w, v) => new HeartFleet({ store: v }), never],
  ['new HeartFleet({onReceipt: v})', (w, v) => new HeartFleet({ store: w.store, onReceipt: v }), (v) => nullish(v) || typeof v === 'function'],
  ['new HeartFleet({maxRetries: v})', (w, v) => new HeartFleet({ store: w.store, maxRetries: v }), (v) => nullish(v) || v === Infinity || isInt(v, 0, 2 ** 32 - 1)],
  ['heart.acquire(v, owner, ttl)', (w, v) => w.heart.acquire(v, 'w', 60), 'acquire'],
  ['heart.acquire(runId, v, ttl)', (w, v) => w.heart.acquire(R2, v, 60), 'acquire'],
  ['heart.acquire(runId, owner, v)', (w, v) => w.heart.acquire(R2, 'w', v), 'acquire'],
  ['heart.renew(v, ttl)', (w, v) => w.heart.renew(v, 60), never],
  ['heart.renew(fence, v)', (w, v) => w.heart.renew(w.fence, v), (v) => isInt(v, 1, MAX_TTL_SECONDS)],
  ['heart.tryRenew(v, ttl)', (w, v) => w.heart.tryRenew(v, 60), never],
  ['heart.release(v, status)', (w, v) => w.heart.release(v, 'completed'), never],
  ['heart.release(fence, v)', (w, v) => w.heart.release(w.fence, v), never],
  ['heart.tryRelease(fence, v)', (w, v) => w.heart.tryRelease(w.fence, v), never],
  ['heart.verifyFence(v)', (w, v) => w.heart.verifyFence(v), never],
  ['heart.verifyFence({...fence, epoch: v})', (w, v) => w.heart.verifyFence({ ...w.fence, epoch: v }), (v) => nullish(v) || isInt(v, 0, Number.MAX_SAFE_INTEGER)],
  ['heart.verifyFence({...fence, leaseExpiresAt: v})', (w, v) => w.heart.verifyFence({ ...w.fence, leaseExpiresAt: v }), (v) => isInt(v, -8.64e15, 8.64e15)],
  ['heart.reclaimExpired(v)', (w, v) => w.heart.reclaimExpired(v), isOpts],
  ['heart.reclaimExpired({limit: v})', (w, v) => w.heart.reclaimExpired({ limit: v }), (v) => nullish(v) || isInt(v, 0, 2 ** 32 - 1)],
  ['heart.reclaimDeadInstanceRuns(v)', (w, v) => w.heart.reclaimDeadInstanceRuns(v), isOpts],
  ['heart.reclaimDeadInstanceRuns({ttlMs: v})', (w, v) => w.heart.reclaimDeadInstanceRuns({ ttlMs: v }), (v) => nullish(v) || isInt(v, 0, Number.MAX_SAFE_INTEGER)],
  ['heart.reclaimDeadInstanceRuns({maxReclaimsPerCycle: v})', (w, v) => w.heart.reclaimDeadInstanceRuns({ maxReclaimsPerCycle: v }), (v) => nullish(v) || isInt(v, 0, 2 ** 32 - 1)],
  ['heart.registerInstance(v)', (w, v) => w.heart.registerInstance(v), never],
  ['heart.registerInstance(id, v)', (w, v) => w.heart.registerInstance('i1', v), isOpts],
  ['heart.registerInstance(id, {hostname: v})', (w, v) => w.heart.registerInstance('i1', { hostname: v }), nullish],
  ['heart.registerInstance(id, {pid: v})', (w, v) => w.heart.registerInstance('i1', { pid: v }), (v) => nullish(v) || isInt(v, 0, Number.MAX_SAFE_INTEGER)],
  ['heart.registerInstance(id, {metadata: v})', (w, v) => w.heart.registerInstance('i1', { metadata: v }), (v) => typeof v !== 'bigint'],
  ['heart.heartbeatInstance(v)', (w, v) => w.heart.heartbeatInstance(v), never],
  ['heart.drainInstance(v)', (w, v) => w.heart.drainInstance(v), never],
  ['heart.ensureResourceRun(v, key)', (w, v) => w.heart.ensureResourceRun(v, 'key'), never],
  ['heart.ensureResourceRun(kind, v)', (w, v) => w.heart.ensureResourceRun('kind', v), never],
  ['heart.ensureResourceRun(kind, key, v)', (w, v) => w.heart.ensureResourceRun('kind', 'key', v), isOpts],
  ['heart.ensureResourceRun(kind, key, {objective: v})', (w, v) => w.heart.ensureResourceRun('kind', 'key', { objective: v }), (v) => v === undefined],
  ['heart.ensureResourceRun(kind, key, {createdBy: v})', (w, v) => w.heart.ensureResourceRun('kind', 'key', { createdBy: v }), (v) => v === undefined],
  ['heart.listRuns(v)', (w, v) => w.heart.listRuns(v), isOpts],
  ['heart.listRuns({status: v})', (w, v) => w.heart.listRuns({ status: v }), nullish],
  ['heart.listRuns({limit: v})', (w, v) => w.heart.listRuns({ limit: v }), (v) => nullish(v) || isInt(v, 0, 2 ** 32 - 1)],
  ['heart.getRun(v)', (w, v) => w.heart.getRun(v), never],
  ['heart.requeueRun(v, operator)', (w, v) => w.heart.requeueRun(v, 'ops'), never],
  ['heart.requeueRun(runId, v)', (w, v) => w.heart.requeueRun(R, v), never],
  ['heart.forceRelease(v)', (w, v) => w.heart.forceRelease(v), never],
  // MemoryLeaseStore
  ['new MemoryLeaseStore(v)', (w, v) => new MemoryLeaseStore(v), (v) => v === undefined || isInt(v, -8.64e15, 8.64e15)],
  ['store.setNow(v)', (w, v) => w.store.setNow(v), (v) => isInt(v, -8.64e15, 8.64e15)],
  ['store.advance(v)', (w, v) => w.store.advance(v), (v) => isInt(v, -8.64e15, 8.64e15)],
  ['store.insert(v)', (w, v) => w.store.insert(v), never],
  ['store.insert({id: v})', (w, v) => w.store.insert({ id: v }), never],
  ['store.insert({status: v})', (w, v) => w.store.insert({ id: 'new', idempotency_key: 'new', status: v }), (v) => v === undefined],
  ['store.insert({retries: v})', (w, v) => w.store.insert({ id: 'new2', idempotency_key: 'new2', retries: v }), (v) => v === undefined || isInt(v, -(2 ** 53), 2 ** 53)],
  ['store.insert({lease_expires_at: v})', (w, v) => w.store.insert({ id: 'new3', idempotency_key: 'new3', lease_expires_at: v }), nullish],
  ['store.getRun(v)', (w, v) => w.store.getRun(v), never],
  ['store.failNext(v)', (w, v) => w.store.failNext(v, 0), (v) => v === undefined],
  ['store.failNext(op, v)', (w, v) => w.store.failNext('no_such_op', v), (v) => v === undefined || isInt(v, 0, 2 ** 32 - 1)],
  ['store.execute(v)', (w, v) => w.store.execute(v), never],
  ['store.insertInstance(v)', (w, v) => w.store.insertInstance(v), never],
  ['store.insertIntent(v)', (w, v) => w.store.insertIntent(v), never],
  // PgLeaseStore (no database is contacted: every one of these fails before any query).
  ['new PgLeaseStore(v)', (w, v) => new api.PgLeaseStore(v), never],
  ['new PgLeaseStore({pool: v})', (w, v) => new api.PgLeaseStore({ pool: v }), never],
  ['new PgLeaseStore({connectionString: v})', (w, v) => new api.PgLeaseStore({ connectionString: v }), never],
  ['pgStore.execute(v)', (w, v) => new api.PgLeaseStore({ pool: { query: async () => ({ rows: [], fields: [] }) } }).execute(v), never],
  ['new SupabaseLeaseStore(v)', (w, v) => new api.SupabaseLeaseStore(v), never],
  ['new SupabaseLeaseStore({client: v})', (w, v) => new api.SupabaseLeaseStore({ client: v }), never],
  ['new SupabaseLeaseStore({now: v})', (w, v) => new api.SupabaseLeaseStore({ client: { from() {} }, now: v }), (v) => v === undefined || typeof v === 'function'],
  ['supabaseStore.execute(v)', (w, v) => new api.SupabaseLeaseStore({ client: { from() { throw new Error('no'); } } }).execute(v), never],
  // executeWithLease, guard, outbox, liveness
  ['executeWithLease(v, opts, work)', (w, v) => api.executeWithLease(v, goodOpts(), async () => 1), never],
  ['executeWithLease(heart, v, work)', (w, v) => api.executeWithLease(w.heart, v, async () => 1), 'notRun'],
  ['executeWithLease(heart, {runId: v}, work)', (w, v) => api.executeWithLease(w.heart, goodOpts({ runId: v }), async () => 1), 'notRun'],
  ['executeWithLease(heart, {owner: v}, work)', (w, v) => api.executeWithLease(w.heart, goodOpts({ owner: v }), async () => 1), 'notRun'],
  ['executeWithLease(heart, {ttlSeconds: v}, work)', (w, v) => api.executeWithLease(w.heart, goodOpts({ ttlSeconds: v }), async () => 1), 'notRun'],
  ['executeWithLease(heart, {renewEveryMs: v}, work)', (w, v) => api.executeWithLease(w.heart, goodOpts({ renewEveryMs: v }), async () => 1), 'notRun'],
  ['executeWithLease(heart, {clock: v}, work)', (w, v) => api.executeWithLease(w.heart, goodOpts({ clock: v }), async () => 1), (v) => v === undefined],
  ['executeWithLease(heart, opts, v)', (w, v) => api.executeWithLease(w.heart, goodOpts(), v), (v) => typeof v === 'function'],
  ['guardIrreversible(v, …)', (w, v) => api.guardIrreversible(v, w.fence, w.ledger, 'k', async () => 1), never],
  ['guardIrreversible(heart, v, …)', (w, v) => api.guardIrreversible(w.heart, v, w.ledger, 'k', async () => 1), never],
  ['guardIrreversible(heart, fence, v, …)', (w, v) => api.guardIrreversible(w.heart, w.fence, v, 'k', async () => 1), never],
  ['guardIrreversible(heart, fence, ledger, v, …)', (w, v) => api.guardIrreversible(w.heart, w.fence, w.ledger, v, async () => 1), never],
  ['guardIrreversible(heart, fence, ledger, key, v)', (w, v) => api.guardIrreversible(w.heart, w.fence, w.ledger, 'k', v), (v) => typeof v === 'function'],
  ['sendOnce(v, ledger, opts)', (w, v) => api.sendOnce(v, w.durable, sendOpts(w)), never],
  ['sendOnce(heart, v, opts)', (w, v) => api.sendOnce(w.heart, v, sendOpts(w)), never],
  ['sendOnce(heart, ledger, v)', (w, v) => api.sendOnce(w.heart, w.durable, v), never],
  ['sendOnce({fence: v})', (w, v) => api.sendOnce(w.heart, w.durable, sendOpts(w, { fence: v })), never],
  ['sendOnce({channel: v})', (w, v) => api.sendOnce(w.heart, w.durable, sendOpts(w, { channel: v })), never],
  ['sendOnce({effectKey: v})', (w, v) => api.sendOnce(w.heart, w.durable, sendOpts(w, { effectKey: v })), never],
  ['sendOnce({payload: v})', (w, v) => api.sendOnce(w.heart, w.durable, sendOpts(w, { effectKey: `p${typeof v}`, payload: v })), (v) => !['bigint', 'symbol', 'function'].includes(typeof v) && (typeof v !== 'number' || Number.isFinite(v))],
  ['sendOnce({send: v})', (w, v) => api.sendOnce(w.heart, w.durable, sendOpts(w, { send: v })), (v) => typeof v === 'function'],
  ['sendOnce({toExternalRef: v})', (w, v) => api.sendOnce(w.heart, w.durable, sendOpts(w, { effectKey: 'x', toExternalRef: v })), (v) => v === undefined || typeof v === 'function'],
  ['reconcileOutbox(v)', (w, v) => api.reconcileOutbox(v), never],
  ['reconcileOutbox(ledger, v)', (w, v) => api.reconcileOutbox(w.durable, v), isOpts],
  ['reconcileOutbox(ledger, {probes: v})', (w, v) => api.reconcileOutbox(w.durable, { probes: v }), isOpts],
  ['reconcileOutbox(ledger, {maxAttempts: v})', (w, v) => api.reconcileOutbox(w.durable, { maxAttempts: v }), (v) => nullish(v) || isInt(v, 0, Number.MAX_SAFE_INTEGER)],
  ['reconcileOutbox(ledger, {limit: v})', (w, v) => api.reconcileOutbox(w.durable, { limit: v }), (v) => nullish(v) || isInt(v, 0, 2 ** 32 - 1)],
  ['new DurableEffectLedger(v)', (w, v) => new DurableEffectLedger(v), never],
  ['new DurableEffectLedger({heart: v})', (w, v) => new DurableEffectLedger({ heart: v }), never],
  ['durable.recordOnce(v, key)', (w, v) => w.durable.recordOnce(v, 'k'), never],
  ['durable.recordOnce(runId, v)', (w, v) => w.durable.recordOnce(R, v), never],
  ['durable.findStaleDispatched(now, v)', (w, v) => w.durable.findStaleDispatched(T0, v), (v) => nullish(v) || isInt(v, 0, 2 ** 32 - 1)],
  ['durable.dispatchLog(v, key)', (w, v) => w.durable.dispatchLog(v, 'k'), never],
  ['memoryLedger.recordOnce(v, key)', (w, v) => w.ledger.recordOnce(v, 'k'), never],
  ['memoryLedger.recordOnce(runId, v)', (w, v) => w.ledger.recordOnce(R, v), never],
  ['new LivenessReclaimer(v)', (w, v) => new LivenessReclaimer(v), never],
  ['new LivenessReclaimer({heart, ttlMs: v})', (w, v) => new LivenessReclaimer({ heart: w.heart, ttlMs: v }), (v) => nullish(v) || isInt(v, 0, Number.MAX_SAFE_INTEGER)],
  ['reclaimer.reclaimDeadInstanceRuns(v)', (w, v) => w.reclaimer.reclaimDeadInstanceRuns(v), isOpts],
  ['reclaimer.heartbeat(v)', (w, v) => w.reclaimer.heartbeat(v), never],
  ['ensureResourceRun(v, kind, key)', (w, v) => api.ensureResourceRun(v, 'kind', 'key'), never],
  ['ensureResourceRun(heart, v, key)', (w, v) => api.ensureResourceRun(w.heart, v, 'key'), never],
  // canonical
  ['canonicalize(v)', (w, v) => api.canonicalize(v), (v) => !['bigint', 'symbol', 'function', 'undefined'].includes(typeof v) && (typeof v !== 'number' || Number.isFinite(v))],
  ['digest(v)', (w, v) => api.digest(v), (v) => !['bigint', 'symbol', 'function', 'undefined'].includes(typeof v) && (typeof v !== 'number' || Number.isFinite(v))],
  ['sha256Hex(v)', (w, v) => api.sha256Hex(v), (v) => typeof v === 'string'],
  ['deterministicResourceId(v, key)', (w, v) => api.deterministicResourceId(v, 'key'), never],
  ['deterministicResourceId(kind, v)', (w, v) => api.deterministicResourceId('kind', v), never],
  ['effectKey(v, identity)', (w, v) => api.effectKey(v, { a: 1 }), (v) => typeof v === 'string'],
  ['effectKey(prefix, v)', (w, v) => api.effectKey('p', v), (v) => !['bigint', 'symbol', 'function', 'undefined'].includes(typeof v) && (typeof v !== 'number' || Number.isFinite(v))],
  ['verifyReceipt(v)', (w, v) => api.verifyReceipt(v), never],
  ['heartbeatIntervalMs(v)', (w, v) => api.heartbeatIntervalMs(v), (v) => isInt(v, -(2 ** 53), 2 ** 53)],
  ['heartbeatIntervalMs(ttl, v)', (w, v) => api.heartbeatIntervalMs(60, v), (v) => nullish(v) || isInt(v, -(2 ** 53), 2 ** 53)],
  ['isLeaseExpired(v, now)', (w, v) => api.isLeaseExpired(v, T0), (v) => v !== null && typeof v === 'object'],
  ['canAcquire(v, now)', (w, v) => api.canAcquire(v, T0), (v) => v !== null && typeof v === 'object'],
  ['isInstanceExpired(v, now)', (w, v) => api.isInstanceExpired(v, T0), (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0],
  ['deadInstanceIds(v, now)', (w, v) => api.deadInstanceIds(v, T0), (v) => Array.isArray(v)],
  ['runsLeasedToDeadInstances(v, ids)', (w, v) => api.runsLeasedToDeadInstances(v, []), (v) => Array.isArray(v)],
];

function okError(e) {
  // A TypeError too must carry its code (every one the package throws is invalid-input).
  return e instanceof Error && typeof e.code === 'string' && ERROR_CODES.includes(e.code);
}

for (const [name, call, accepted, only] of MATRIX) {
  test(`bad input: ${name}`, async () => {
    for (const [label, v] of only === 'typesOnly' ? BAD : [...BAD, ...ODD]) {
      const w = await world();
      const before = snapshot(w);
      let outcome;
      try {
        let r = call(w, v);
        if (r && typeof r.then === 'function') r = await r;
        outcome = { ok: true, value: r };
      } catch (e) {
        outcome = { ok: false, error: e };
      }
      const where = `${name} with ${label}`;
      if (!outcome.ok) {
        assert.ok(okError(outcome.error), `${where}: threw ${outcome.error && outcome.error.name}: ${outcome.error && outcome.error.message} (code ${outcome.error && outcome.error.code})`);
        assert.equal(snapshot(w), before, `${where}: a failed call changed the store or the counters`);
        continue;
      }
      if (accepted === 'acquire') {
        const r = outcome.value;
        if (!r.acquired) {
          assertShape(r, { acquired: false, run: null, reason: 'Invalid input' }, { code: 'invalid-input' }, where);
          assert.equal(snapshot(w), before, `${where}: invalid input changed something`);
        } else {
          assert.ok(typeof v === 'number' && Number.isInteger(v), `${where}: acquired with a bad value`);
        }
      } else if (accepted === 'notRun') {
        const r = outcome.value;
        if (!r.ran) {
          assert.equal(r.reason, 'lease-error', where);
          assert.equal(r.code, 'invalid-input', where);
          assert.equal(snapshot(w), before, `${where}: invalid input changed something`);
        } else {
          assert.ok(nullish(v) || isInt(v, 1, 31_536_000_000), `${where}: ran with a bad value`);
        }
      } else {
        assert.ok(accepted(v), `${where}: accepted a bad value (returned ${String(outcome.value)})`);
      }
    }
  });
}

test('a lone surrogate in a run id or owner: acquire answers its documented shape, every other id is coded invalid input', async () => {
  for (const [runId, owner] of [[`${R2}\ud800`, 'w'], [R2, '\udc00w'], [R2, 'w\ud83d'], ['\udfff', '\ud800']]) {
    const w = await world();
    const before = snapshot(w);
    const r = await w.heart.acquire(runId, owner, 60);
    assertShape(r, { acquired: false, run: null, reason: 'Invalid input' }, { code: 'invalid-input' }, `acquire(${JSON.stringify(runId)}, ${JSON.stringify(owner)})`);
    const x = await api.executeWithLease(w.heart, { runId, owner, ttlSeconds: 60 }, async () => assert.fail('the work ran'));
    assert.deepEqual([x.ran, x.reason, x.code], [false, 'lease-error', 'invalid-input']);
    assert.equal(snapshot(w), before);
  }
  const lone = 'id\ud800';
  const w = await world();
  const before = snapshot(w);
  const calls = [
    () => w.heart.getRun(lone),
    () => w.heart.requeueRun(lone, 'ops'),
    () => w.heart.requeueRun(R, lone),
    () => w.heart.forceRelease(lone),
    () => w.heart.registerInstance(lone),
    () => w.heart.registerInstance('i', { hostname: lone }),
    () => w.heart.heartbeatInstance(lone),
    () => w.heart.ensureResourceRun(lone, 'k'),
    () => w.heart.ensureResourceRun('k', lone),
    () => w.heart.ensureResourceRun('k', 'v', { objective: lone }),
    () => w.heart.verifyFence({ ...w.fence, owner: lone }),
    () => w.heart.renew({ ...w.fence, runId: lone }, 60),
    () => api.deterministicResourceId('kind', lone),
    () => api.deterministicResourceId(lone, 'key'),
    () => api.effectKey(lone, { a: 1 }),
    () => w.ledger.recordOnce(R, lone),
    () => w.durable.recordOnce(lone, 'k'),
    () => api.guardIrreversible(w.heart, w.fence, w.ledger, lone, async () => assert.fail('the effect ran')),
    () => api.sendOnce(w.heart, w.durable, sendOpts(w, { effectKey: lone, send: async () => assert.fail('sent') })),
  ];
  for (const call of calls) {
    await assert.rejects(async () => call(), (e) => e.code === 'invalid-input' && /lone surrogate/.test(e.message), String(call));
  }
  assert.equal(snapshot(w), before);
  // sha256Hex hashes text, not an id: a lone surrogate is U+FFFD, as TextEncoder (the reference) has it.
  assert.equal(api.sha256Hex('a\ud800'), api.sha256Hex('a\ufffd'));
});

test("values nested past the core's MAX_JSON_DEPTH (512) are coded invalid input, never a RangeError", async () => {
  // The limit itself: 512 levels of arrays are canonical JSON, 513 are not.
  assert.equal(api.canonicalize(nested(512)), '['.repeat(512) + ']'.repeat(512));
  for (const n of [513, 5000, 10_000]) {
    const v = nested(n);
    const w = await world();
    const before = snapshot(w);
    const sent = { n: 0 };
    const calls = {
      canonicalize: () => api.canonicalize(v),
      digest: () => api.digest(v),
      effectKey: () => api.effectKey('p', { deep: v }),
      'sendOnce payload': () => api.sendOnce(w.heart, w.durable, sendOpts(w, { payload: v, send: async () => { sent.n += 1; } })),
      'registerInstance metadata': () => w.heart.registerInstance('i1', { metadata: v }),
    };
    if (n > 513) {
      // Past what JSON.stringify itself can write.
      calls['store.execute'] = () => w.store.execute({ op: 'read_run', run_id: R, extra: v });
      calls['store.insertIntent'] = () => w.store.insertIntent({ run_id: R, effect_key: 'deep', detail: v });
    }
    for (const [name, call] of Object.entries(calls)) {
      await assert.rejects(async () => call(), (e) => e.code === 'invalid-input' && !(e instanceof RangeError), `${name} at depth ${n}`);
    }
    assert.equal(sent.n, 0);
    assert.equal(snapshot(w), before, `depth ${n}`);
  }
  for (const n of [5000, 10_000]) {
    assert.throws(() => api.canonicalize(nested(n)), /nesting deeper than 512 levels/);
    assert.throws(() => api.effectKey('p', nested(n)), /nesting deeper than 512 levels/);
  }
});

test('BigInt or circular metadata and circular store requests are coded invalid input', async () => {
  const w = await world();
  const before = snapshot(w);
  const calls = [
    () => w.heart.registerInstance('i1', { metadata: circular }),
    () => w.heart.registerInstance('i1', { metadata: { n: 10n } }),
    () => w.heart.registerInstance('i1', { metadata: [1, 2n] }),
    () => w.store.execute(circular),
    () => w.store.execute({ op: 'read_run', run_id: R, x: circular }),
    () => w.store.execute({ op: 'read_run', run_id: R, x: 1n }),
    () => w.store.insertInstance({ instance_id: 'i9', metadata: circular }),
    () => w.store.insertIntent({ run_id: R, effect_key: 'c', detail: { n: 1n } }),
    () => new api.SupabaseLeaseStore({ client: { from() { throw new Error('no'); } } }).execute({ op: 'scan_intents', when: circular }),
    () => new api.SupabaseLeaseStore({ client: { from() { throw new Error('no'); } } }).execute({ op: 'scan_runs', when: circular }),
    () => api.canonicalize(circular),
    () => api.digest({ n: 10n }),
  ];
  for (const call of calls) {
    await assert.rejects(async () => call(), (e) => e.code === 'invalid-input' && !/\n/.test(e.message), String(call));
  }
  assert.equal(snapshot(w), before);
});

test('an unknown option name is invalid input in every options object, and changes nothing', async () => {
  const client = { from() { throw new Error('no'); } };
  const typos = [
    ['new HeartFleet', (w) => new HeartFleet({ store: w.store, maxRetry: 3 })],
    ['heart.reclaimExpired', (w) => w.heart.reclaimExpired({ limt: 5 })],
    ['heart.reclaimDeadInstanceRuns', (w) => w.heart.reclaimDeadInstanceRuns({ ttl: 1 })],
    ['heart.registerInstance', (w) => w.heart.registerInstance('i1', { host: 'h' })],
    ['heart.ensureResourceRun', (w) => w.heart.ensureResourceRun('kind', 'key', { created_by: 'me' })],
    ['ensureResourceRun', (w) => api.ensureResourceRun(w.heart, 'kind', 'key', { objectve: 'x' })],
    ['heart.listRuns', (w) => w.heart.listRuns({ statuses: ['ready'] })],
    ['executeWithLease', (w) => api.executeWithLease(w.heart, goodOpts({ renewEvery: 10 }), async () => assert.fail('the work ran'))],
    ['sendOnce', (w) => api.sendOnce(w.heart, w.durable, sendOpts(w, { toExternalref: (r) => r, send: async () => assert.fail('sent') }))],
    ['reconcileOutbox', (w) => api.reconcileOutbox(w.durable, { maxAttempt: 1 })],
    ['reconcileOutbox probes', (w) => api.reconcileOutbox(w.durable, { probes: { telgram: async () => 'sent' } })],
    ['new DurableEffectLedger', (w) => new DurableEffectLedger({ heart: w.heart, stor: w.store })],
    ['new DurableEffectLedger {client}', () => new DurableEffectLedger({ client, intentTable: 'x' })],
    ['durable.claimIntent', (w) => w.durable.claimIntent({ runId: R, effectKey: 'k', channel: 'mail', payloadDigest: 'd', payload_digest: 'd' })],
    ['durable.markDispatched', (w) => w.durable.markDispatched({ runId: R, effectKey: 'k', fenceOwner: 'w', fenceExpiresAt: T0, fenceEpoch: 1 })],
    ['durable.markCommitted', (w) => w.durable.markCommitted({ runId: R, effectKey: 'k', externalref: 'ref' })],
    ['new LivenessReclaimer', (w) => new LivenessReclaimer({ heart: w.heart, ttl: 5 })],
    ['reclaimer.reclaimDeadInstanceRuns', (w) => w.reclaimer.reclaimDeadInstanceRuns({ maxReclaims: 1 })],
    ['reclaimer.registerInstance', (w) => w.reclaimer.registerInstance('i1', { pId: 1 })],
    ['new SupabaseLeaseStore', () => new api.SupabaseLeaseStore({ client, page_size: 10 })],
    ['new PgLeaseStore', () => new api.PgLeaseStore({ pool: { query: async () => ({ rows: [], fields: [] }) }, prepared: false })],
    ['new SupabaseLeaseStore tables', () => new api.SupabaseLeaseStore({ client, tables: { run: 'agent_runs' } })],
    ['store.conditionalUpdate conditions', (w) => w.store.conditionalUpdate(R, { status: 'ready' }, { eq: { status: 'leased' }, gt: { retries: 0 } })],
  ];
  for (const [name, call] of typos) {
    const w = await world();
    const before = snapshot(w);
    await assert.rejects(async () => call(w), (e) => e instanceof TypeError && e.code === 'invalid-input' && /unknown (option|channel|table|condition)/.test(e.message), name);
    assert.equal(snapshot(w), before, `${name} changed something`);
  }
  // Every option the API documents is still accepted.
  const w = await world();
  assert.ok((await w.heart.listRuns({ status: 'ready', limit: 5 })).length >= 1);
  await w.heart.reclaimExpired({ limit: 1 });
  await w.heart.reclaimDeadInstanceRuns({ ttlMs: 1, maxReclaimsPerCycle: 1 });
  await w.heart.registerInstance('i1', { hostname: 'h', pid: 1, metadata: { a: 1 } });
  await new HeartFleet({ store: new MemoryLeaseStore(T0) }).ensureResourceRun('kind', 'key', { objective: 'o', createdBy: 'me' });
  await api.reconcileOutbox(w.durable, { probes: { telegram: async () => 'unknown' }, maxAttempts: 1, limit: 1, heart: w.heart });
  await w.reclaimer.reclaimDeadInstanceRuns({ maxReclaimsPerCycle: 1 });
  assert.ok(new LivenessReclaimer({ heart: w.heart, ttlMs: 5 }));
  assert.ok(new api.SupabaseLeaseStore({ client, now: () => 0, tables: { runs: 'r', intents: 'i', log: 'l', instances: 'n' }, casRetries: 2, pageSize: 10 }));
  const opts = { runId: R2, owner: 'w', ttlSeconds: 60, renewEveryMs: 1000, releaseToReady: false, autoHeartbeat: false, clock: () => 0 };
  assert.equal((await api.executeWithLease(w.heart, opts, async () => 7)).result, 7);
});

test('the process survives garbage sent straight to the native module', () => {
  // The package never exposes these, but nothing that reaches them may abort the process.
  const native = api.default && require_native();
  assert.ok(native);
  const fleet = new native.NativeFleet(5, false);
  for (const args of ['', '{', 'null', '[]', '{"fence":1}', '{"runId":"r","owner":"w","ttlSeconds":1e300}']) {
    for (const kind of ['acquire', 'renew', 'release', 'verifyFence', 'guardIrreversible', 'sendOnce', 'reclaimExpired', 'nope']) {
      const r = fleet.begin(kind, args);
      if (typeof r === 'string') {
        const step = JSON.parse(r);
        assert.ok(step.done);
      } else {
        assert.equal(JSON.parse(fleet.resumeStore(r, 'garbage')).error.code, 'store-protocol');
        assert.equal(JSON.parse(fleet.resumeStore(r, '{}')).error.code, 'store-protocol');
      }
    }
  }
  assert.equal(fleet.pending(), 0, 'every finished operation freed its handle');
  // A handle that is not an operation's (finished, or never given) ends nothing else.
  assert.equal(JSON.parse(fleet.resumeStore(12345, '{}')).error.code, 'store-protocol');
  assert.equal(fleet.need(12345), '');
  fleet.abandon(12345);
  for (const bad of [undefined, null, 1, {}, 10n, Symbol('s')]) {
    assert.throws(() => fleet.begin(bad, bad), (e) => e instanceof Error);
    if (typeof bad !== 'number') assert.throws(() => fleet.resumeStore(bad, '{}'), (e) => e instanceof Error);
  }
  assert.throws(() => native.NativeLeaseSession.create(0, null), (e) => e.code === 'invalid-input');
  assert.throws(() => native.canonicalizeJson('[1,'), (e) => e.code === 'invalid-input');
  assert.throws(() => native.sqlRender('{}', 'postgres'), (e) => e.code === 'store-protocol');
});

import { createRequire } from 'node:module';
import { assertShape } from './helpers/shape.mjs';
import { nested } from './helpers/nested.mjs';
function require_native() {
  return createRequire(import.meta.url)('../lib/native.cjs');
}
