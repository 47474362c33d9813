// The store conformance suite, ported from core/src/store_suite.rs: the same ten checks, so a
// store written in JavaScript (the memory store behind the JS contract, Deno KV, yours)
// means the same thing by every request as the Rust stores do. It works with real clocks:
// it reads the store's `now` first, places every expiry far from it, and checks each answer
// against the core's evaluator (`simulateRequest`) at the `now` the answer reports.
//
// A fixture is `{ fresh(): Promise<store> }`; the store has `execute(request)` and
// `seed({runs?, intents?, instances?})` writing rows exactly as given.

import { isDeepStrictEqual } from 'node:util';
import { runRow } from './pkg.mjs';

const HOUR = 3_600_000;

/** A UUID-shaped run id (PostgreSQL's agent_runs.id is a UUID). */
export function runId(n) {
  return `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
}

const iso = (ms) => new Date(ms).toISOString();
const text = (v) => ({ type: 'text', value: v });
const HELD = { in: ['status', [text('leased'), text('running')]] };

function baseRow(n, now) {
  return { ...runRow(runId(n), iso(now - 2 * HOUR)), assignment_id: runId(100_000 + n), idempotency_key: `suite:${n}` };
}

function holdsToken(t) {
  const all = [HELD, { eq: ['lease_owner', text(t.owner)] }, { eq: ['lease_expires_at', { type: 'time', value: t.leaseExpiresAt }] }, { live_at: 'lease_expires_at' }];
  if (t.epoch !== undefined) all.push({ eq: ['fencing_epoch', { type: 'int', value: t.epoch }] });
  return { and: all };
}

function writeShapes(token) {
  const maxRetries = 2;
  const acquireLike = [
    ['lease_owner', { val: text('worker-B') }],
    ['lease_expires_at', { now_plus: 60_000 }],
    ['status', { val: text('leased') }],
    ['updated_at', 'now'],
    ['fencing_epoch', { add: ['fencing_epoch', 1] }],
    ['retries', { case: [{ eq: ['status', text('ready')] }, { add: ['retries', 0] }, { add: ['retries', 1] }] }],
  ];
  const acquirable = { or: [{ eq: ['status', text('ready')] }, { and: [HELD, { expired_at: 'lease_expires_at' }, { at_most: ['retries', 1] }] }] };
  const recovery = [
    ['status', { case: [{ not: { at_most: ['retries', maxRetries - 1] } }, { val: text('quarantined') }, { val: text('ready') }] }],
    ['lease_owner', { val: { type: 'null' } }],
    ['lease_expires_at', { val: { type: 'null' } }],
    ['retries', { add: ['retries', 1] }],
    ['updated_at', 'now'],
  ];
  return [
    ['acquire', acquirable, acquireLike, true],
    ['renew', holdsToken(token), [['lease_expires_at', { now_plus: 30_000 }], ['updated_at', 'now']], false],
    ['reclaim', { and: [HELD, { expired_at: 'lease_expires_at' }] }, recovery, false],
    [
      'resource-release',
      { and: [holdsToken(token), { starts_with: ['idempotency_key', 'suite:'] }] },
      [['status', { val: text('ready') }], ['retries', { val: { type: 'int', value: 0 } }]],
      false,
    ],
  ];
}

/**
 * Runs every check on fresh stores from `fixture`. `api` is the package (HeartFleet,
 * effectKey), `native` its wasm exports (simulateRequest). Returns {passed, failed}.
 */
export async function runStoreSuite(fixture, api, native) {
  const fail = (m) => {
    throw new Error(m);
  };
  const same = (what, got, want) => {
    // Structural: JSON objects compare without regard to key order.
    if (!isDeepStrictEqual(got, want)) fail(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  };
  const exec = async (store, req) => {
    const a = await store.execute(req);
    return typeof a === 'string' ? JSON.parse(a) : a;
  };
  const nowOf = async (store) => Date.parse((await exec(store, { op: 'now' })).now);
  const seeded = async () => {
    const store = await fixture.fresh();
    return [store, await nowOf(store)];
  };
  const simulate = (req, snapshot, now) => JSON.parse(native.simulateRequest(JSON.stringify(req), JSON.stringify(snapshot), Date.parse(now)));

  const checks = {
    async 'clock-is-whole-milliseconds'() {
      const [store, t1] = await seeded();
      const t2 = await nowOf(store);
      if (t2 < t1) fail(`the clock went backwards: ${t1} then ${t2}`);
      const a = await exec(store, { op: 'now' });
      same('now is toISOString() text', iso(Date.parse(a.now)), a.now);
    },
    async 'read-run-round-trips'() {
      const [store, now] = await seeded();
      const row = {
        ...baseRow(1, now),
        task_id: 'task-7',
        required_capabilities: ['send', 'ünïcode ✓'],
        status: 'running',
        assigned_agent: 'agent-1',
        lease_owner: 'worker-A',
        lease_expires_at: iso(now + HOUR),
        retries: 3,
        budget: { usd: 1.5, nested: { k: [1, 2] } },
        fencing_epoch: 42,
      };
      await store.seed({ runs: [row] });
      const a = await exec(store, { op: 'read_run', run_id: row.id });
      same('read run', a.reply, { kind: 'run', run: row });
      const b = await exec(store, { op: 'read_run', run_id: runId(999) });
      same('missing run', b.reply, { kind: 'run', run: null });
    },
    async 'conditional-writes-match-the-evaluator'() {
      const [store, now] = await seeded();
      const rows = [];
      let n = 10;
      const seeds = [];
      for (const status of ['ready', 'leased', 'running', 'completed', 'quarantined']) {
        for (const expiry of [null, iso(now - HOUR), iso(now + HOUR)]) {
          for (const [owner, retries] of [[null, 0], ['worker-A', 1], ['worker-A', 2]]) {
            n += 1;
            const row = { ...baseRow(n, now), status, lease_expires_at: expiry, lease_owner: owner, retries, fencing_epoch: 5 };
            seeds.push(row);
            rows.push(row);
          }
        }
      }
      await store.seed({ runs: seeds });
      let checked = 0;
      for (const row of rows) {
        const token = { runId: row.id, owner: 'worker-A', leaseExpiresAt: row.lease_expires_at ?? iso(now + HOUR), epoch: 5 };
        for (const [name, when, set, wantBefore] of writeShapes(token)) {
          // Each shape on a fresh copy of the row, so shapes do not see each other's writes.
          n += 1;
          const copy = { ...row, id: runId(n), assignment_id: runId(100_000 + n), idempotency_key: `suite:${n}` };
          await store.seed({ runs: [copy] });
          const req = { op: 'update_run', run_id: copy.id, when, set, want_before: wantBefore };
          const answer = await exec(store, req);
          const want = simulate(req, { runs: [copy] }, answer.now);
          const ctx = `${name} on ${row.status}/${row.lease_expires_at}/${row.lease_owner}/retries ${row.retries}`;
          same(`${ctx}: answer`, answer.reply, want.reply);
          same(`${ctx}: before`, answer.reply.before, wantBefore && answer.reply.after ? copy : null);
          checked += 1;
        }
      }
      const miss = await exec(store, { op: 'update_run', run_id: runId(999_999), when: 'true', set: [], want_before: true });
      same('write to a missing run', miss.reply, { kind: 'run_write', before: null, after: null });
      if (checked < 100) fail(`only ${checked} writes checked`);
    },
    async 'scan-expired-runs'() {
      const [store, now] = await seeded();
      const cases = [
        [1, 'leased', iso(now - 3 * HOUR)],
        [2, 'running', null],
        [3, 'leased', iso(now - HOUR)],
        [4, 'leased', iso(now + HOUR)],
        [5, 'completed', iso(now - HOUR)],
        [6, 'running', iso(now - 2 * HOUR)],
      ];
      await store.seed({ runs: cases.map(([n, status, e]) => ({ ...baseRow(n, now), status, lease_expires_at: e, lease_owner: 'w' })) });
      const when = { and: [HELD, { expired_at: 'lease_expires_at' }] };
      const a = await exec(store, { op: 'scan_runs', when, order: 'expires_at', limit: 10 });
      same('expired scan order (null expiry first, then oldest)', a.reply.runs.map((r) => r.id), [runId(2), runId(1), runId(6), runId(3)]);
      const b = await exec(store, { op: 'scan_runs', when, order: 'expires_at', limit: 2 });
      same('limit', b.reply.runs.length, 2);
    },
    async 'ensure-run-is-idempotent'() {
      const [store] = await seeded();
      const req = { op: 'ensure_run', idempotency_key: 'heart:resource:suite', objective: 'o', created_by: 'suite' };
      const first = await exec(store, req);
      if (first.reply.kind !== 'ensured' || first.reply.created !== true) fail(`first ensure did not create: ${JSON.stringify(first.reply)}`);
      const second = await exec(store, req);
      if (second.reply.created !== false) fail(`second ensure created again: ${JSON.stringify(second.reply)}`);
      const a = first.reply.run;
      same('same row', second.reply.run, a);
      same('status', a.status, 'ready');
      same('visibility', a.visibility, 'team');
      same('created_at = now', a.created_at, first.now);
      if (a.id.length !== 36 || a.assignment_id.length !== 36 || a.id === a.assignment_id) {
        fail(`id and assignment_id must be distinct UUIDs: ${a.id} ${a.assignment_id}`);
      }
    },
    async 'claim-intent-dedupes-and-logs'() {
      const [store] = await seeded();
      const claim = { op: 'claim_intent', run_id: runId(1), effect_key: 'k1', channel: 'telegram', payload_digest: 'sha256:x' };
      const a = await exec(store, claim);
      if (a.reply.claimed !== true) fail(`first claim: ${JSON.stringify(a.reply)}`);
      same('state', a.reply.intent.state, 'intent');
      same('created_at', a.reply.intent.created_at, a.now);
      const b = await exec(store, claim);
      if (b.reply.claimed !== false) fail(`second claim: ${JSON.stringify(b.reply)}`);
      same('existing row', b.reply.intent, a.reply.intent);
      const log = await exec(store, { op: 'read_log', run_id: runId(1), effect_key: 'k1' });
      same('log', log.reply.entries.map((e) => [e.attempt, e.outcome]), [[0, 'claimed'], [0, 'deduped']]);
      same('claimed detail', log.reply.entries[0].detail, { channel: 'telegram' });
    },
    async 'update-intent-is-fenced-and-logs-on-hit'() {
      const [store, now] = await seeded();
      const run = { ...baseRow(1, now), status: 'leased', lease_owner: 'worker-A', lease_expires_at: iso(now + HOUR), fencing_epoch: 3 };
      await store.seed({ runs: [run] });
      await exec(store, { op: 'claim_intent', run_id: runId(1), effect_key: 'k1', channel: 'telegram', payload_digest: 'sha256:x' });
      const dispatch = (owner, epoch) => ({
        op: 'update_intent',
        run_id: runId(1),
        effect_key: 'k1',
        when: { and: [{ eq: ['state', text('intent')] }, { run_held_by: { owner, lease_expires_at: iso(now + HOUR), epoch } }] },
        set: [
          ['state', { val: text('dispatched') }],
          ['fence_owner', { val: text(owner) }],
          ['fence_expires_at', { val: { type: 'time', value: iso(now + HOUR) } }],
          ['fence_epoch', { val: { type: 'int', value: epoch } }],
        ],
        log: { run_id: runId(1), effect_key: 'k1', attempt: 0, outcome: 'reconciled', at: null, detail: { probe: true } },
      });
      for (const [owner, epoch] of [['worker-B', 3], ['worker-A', 2]]) {
        const miss = await exec(store, dispatch(owner, epoch));
        same(`dispatch by a stale token (${owner}, epoch ${epoch})`, miss.reply, { kind: 'intent', intent: null });
      }
      const hit = await exec(store, dispatch('worker-A', 3));
      if (!hit.reply.intent) fail("the live token's dispatch missed");
      same('state', hit.reply.intent.state, 'dispatched');
      same('fence epoch', hit.reply.intent.fence_epoch, 3);
      const log = await exec(store, { op: 'read_log', run_id: runId(1), effect_key: 'k1' });
      same('log entries (one claim, one hit)', log.reply.entries.length, 2);
      same('log at = the write\'s now', log.reply.entries[1].at, hit.now);
      const c = await exec(store, {
        op: 'update_intent',
        run_id: runId(1),
        effect_key: 'k1',
        when: { eq: ['state', text('dispatched')] },
        set: [
          ['state', { val: text('committed') }],
          ['external_ref', { val: { type: 'json', value: { message_id: 42, s: 'é' } } }],
          ['committed_at', 'now'],
          ['attempts', { add: ['attempts', 1] }],
        ],
        log: null,
      });
      if (!c.reply.intent) fail('commit missed');
      same('external_ref', c.reply.intent.external_ref, { message_id: 42, s: 'é' });
      same('committed_at', c.reply.intent.committed_at, c.now);
      same('attempts', c.reply.intent.attempts, 1);
    },
    async 'scan-stale-intents'() {
      const [store, now] = await seeded();
      const intents = [
        ['a', 'dispatched', iso(now - HOUR)],
        ['b', 'dispatched', iso(now + HOUR)],
        ['c', 'committed', iso(now - HOUR)],
        ['d', 'dispatched', iso(now - 2 * HOUR)],
      ].map(([k, state, expiry]) => ({
        run_id: runId(1),
        effect_key: k,
        state,
        channel: 'mail',
        payload_digest: 'sha256:y',
        fence_owner: 'w',
        fence_expires_at: expiry,
        fence_epoch: null,
        external_ref: null,
        attempts: 0,
        last_error: null,
        created_at: iso(now - 3 * HOUR),
        committed_at: null,
      }));
      await store.seed({ intents });
      const when = { and: [{ eq: ['state', text('dispatched')] }, { expired_at: 'fence_expires_at' }] };
      const a = await exec(store, { op: 'scan_intents', when, limit: 10 });
      same('stale dispatched intents, oldest fence first', a.reply.intents.map((i) => i.effect_key), ['d', 'a']);
    },
    async 'instances-and-dead-owner-scan'() {
      const [store, now] = await seeded();
      const instances = [
        ['i-alive', 'alive', 5_000],
        ['i-stale', 'alive', 200_000],
        ['i-dead', 'dead', 1_000],
        ['i-draining', 'draining', 5_000],
      ].map(([id, status, silent]) => ({
        instance_id: id,
        hostname: 'h',
        pid: 7,
        status,
        started_at: iso(now - HOUR),
        last_heartbeat: iso(now - silent),
        metadata: { v: 1 },
      }));
      const runs = [[1, 'i-alive'], [2, 'i-stale'], [3, 'i-dead'], [4, 'i-draining'], [5, 'unregistered']].map(([n, owner]) => ({
        ...baseRow(n, now),
        status: 'leased',
        lease_owner: owner,
        lease_expires_at: iso(now + HOUR),
      }));
      await store.seed({ instances, runs });
      const a = await exec(store, { op: 'scan_runs', when: { and: [HELD, { owner_instance_dead: { ttl_ms: 90_000 } }] }, order: 'expires_at', limit: 10 });
      same('runs of dead or silent instances', a.reply.runs.map((r) => r.id).sort(), [runId(2), runId(3)]);
      const mark = await exec(store, {
        op: 'update_instances',
        when: { and: [{ not: { eq: ['status', text('dead')] } }, { older_than: ['last_heartbeat', 90_000] }] },
        set: [['status', { val: text('dead') }]],
      });
      same('newly dead', mark.reply.instances.map((i) => i.instance_id), ['i-stale']);
      const up = await exec(store, { op: 'upsert_instance', instance_id: 'i-dead', hostname: null, pid: 9, metadata: null });
      const row = up.reply.instances[0];
      if (!row) fail('upsert returned no row');
      same('re-registered', [row.status, row.last_heartbeat, row.pid], ['alive', up.now, 9]);
      const all = await exec(store, { op: 'scan_instances', when: 'true' });
      same('instance count', all.reply.instances.length, 4);
    },
    async 'lease-cycle-through-the-fleet'() {
      const [store, now] = await seeded();
      const row = baseRow(1, now);
      await store.seed({ runs: [row] });
      const heart = new api.HeartFleet({ store });
      const acq = await heart.acquire(row.id, 'worker-A', 60);
      if (!acq.fence) fail('acquire lost on a ready run');
      same('epoch', acq.fence.epoch, 1);
      same('second acquire', (await heart.acquire(row.id, 'worker-B', 60)).acquired, false);
      same('verify', await heart.verifyFence(acq.fence), true);
      const fence = await heart.renew(acq.fence, 120);
      if (!fence) fail('renew refused');
      const payload = { chatId: 1, text: 'suite' };
      const key = api.effectKey('telegram', payload);
      const ledger = new api.DurableEffectLedger({ heart });
      const sent = await api.sendOnce(heart, ledger, { fence, channel: 'telegram', effectKey: key, payload, send: async () => ({ message_id: 1 }) });
      same('sent', [sent.sent, sent.committed], [true, true]);
      const again = await api.sendOnce(heart, ledger, { fence, channel: 'telegram', effectKey: key, payload, send: async () => ({}) });
      same('deduped', again.reason, 'deduped');
      const done = await heart.release(fence, 'completed');
      if (!done) fail('release refused');
      same('released row', [done.status, done.lease_owner], ['completed', null]);
      same('verify after release', await heart.verifyFence(fence), false);
      const m = heart.metrics;
      same('metrics', [m.acquireWins, m.acquireCollisions, m.renews, m.releases, m.effectCommits, m.effectDedupes], [1, 1, 1, 1, 1, 1]);
      same('nothing to reclaim', (await heart.reclaimExpired({ limit: 10 })).reclaimedCount, 0);
    },
  };

  const report = { passed: [], failed: [] };
  for (const [name, check] of Object.entries(checks)) {
    try {
      await check();
      report.passed.push(name);
    } catch (e) {
      report.failed.push([name, e && e.message]);
    }
  }
  return report;
}

/** The check names, in order (for one test per check). */
export const CHECKS = [
  'clock-is-whole-milliseconds',
  'read-run-round-trips',
  'conditional-writes-match-the-evaluator',
  'scan-expired-runs',
  'ensure-run-is-idempotent',
  'claim-intent-dedupes-and-logs',
  'update-intent-is-fenced-and-logs-on-hit',
  'scan-stale-intents',
  'instances-and-dead-owner-scan',
  'lease-cycle-through-the-fleet',
];
