// PgLeaseStore against a real PostgreSQL (DATABASE_URL, e.g.
// postgres://heart:heart@127.0.0.1:5432/heart_test). Without DATABASE_URL the tests print
// SKIPPED, except under CI (env CI set), where a missing database is a failure.
// Each run works in a schema of its own, created and dropped here.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import {
  HeartFleet,
  PgLeaseStore,
  DurableEffectLedger,
  LivenessReclaimer,
  executeWithLease,
  sendOnce,
  reconcileOutbox,
  effectKey,
  verifyReceipt,
  HeartFleetError,
} from '../index.mjs';
import { assertShape } from './helpers/shape.mjs';

const url = process.env.DATABASE_URL;
const skip = url ? false : 'SKIPPED: DATABASE_URL is not set';
if (!url) {
  console.log('pg tests SKIPPED: DATABASE_URL is not set');
  if (process.env.CI) {
    test('PostgreSQL is required under CI', () => assert.fail('DATABASE_URL is not set (CI requires the PostgreSQL tests)'));
  }
}

const schema = `heart_node_${process.pid}_${Date.now()}`;
const pools = [];
function pool(extra = {}) {
  const p = new pg.Pool({ connectionString: url, options: `-c search_path=${schema}`, max: 4, ...extra });
  pools.push(p);
  return p;
}
let admin;
let store;
let heart;

before(async () => {
  if (!url) return;
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  store = new PgLeaseStore({ pool: pool() });
  await store.migrate();
  heart = new HeartFleet({ store });
});

after(async () => {
  if (!url) return;
  await Promise.all(pools.map((p) => p.end().catch(() => {})));
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin.end();
});

async function seedRun(fields = {}) {
  const id = randomUUID();
  const f = { status: 'ready', lease_owner: null, lease_expires_at: null, retries: 0, ...fields };
  await admin.query(
    `INSERT INTO ${schema}.agent_runs (id, assignment_id, objective, status, lease_owner, lease_expires_at, retries, idempotency_key, created_by)
     VALUES ($1, gen_random_uuid(), 'pg test', $2, $3, $4, $5, $6, 'test')`,
    [id, f.status, f.lease_owner, f.lease_expires_at, f.retries, `pg:${id}`],
  );
  return id;
}

async function row(id) {
  const r = await admin.query(`SELECT status, lease_owner, retries, fencing_epoch FROM ${schema}.agent_runs WHERE id = $1`, [id]);
  return r.rows[0];
}

test('migrations are idempotent', { skip }, async () => {
  await store.migrate();
  await store.migrate();
});

// The CLI for the mixed-runtime migrate test: $HEART_FLEET_CLI (the README's test command
// builds it first), else the workspace's release build.
const cliPath = process.env.HEART_FLEET_CLI || new URL('../../target/release/heart-fleet', import.meta.url).pathname;

test('a Node migrate and Rust migrates at once on a fresh database apply each migration once', { skip }, async () => {
  const { existsSync } = await import('node:fs');
  const { execFile } = await import('node:child_process');
  if (!existsSync(cliPath)) {
    if (process.env.CI) assert.fail(`the heart-fleet CLI is not at ${cliPath} (set HEART_FLEET_CLI)`);
    console.log(`SKIPPED: no heart-fleet CLI at ${cliPath}`);
    return;
  }
  const db = `heart_node_migrate_${process.pid}_${Date.now()}`;
  await admin.query(`CREATE DATABASE ${db}`);
  const dbUrl = new URL(url);
  dbUrl.pathname = `/${db}`;
  const pools = [1, 2, 3].map(() => new pg.Pool({ connectionString: dbUrl.href, max: 1 }));
  try {
    const rust = () =>
      new Promise((resolve, reject) =>
        execFile(cliPath, ['--store', dbUrl.href, 'migrate'], { timeout: 120_000 }, (err, stdout, stderr) =>
          err ? reject(new Error(`heart-fleet migrate: ${stderr || err.message}`)) : resolve(stdout),
        ),
      );
    const [node1, node2, node3, ...cli] = await Promise.all([
      ...pools.map((p) => new PgLeaseStore({ pool: p }).migrate()),
      rust(),
      rust(),
    ]);
    const names = node1.map((m) => m.name);
    assert.ok(names.length >= 2, 'the PostgreSQL plan has migrations');
    // Every migration recorded once, and applied by exactly one of the five migrates.
    const check = new pg.Client({ connectionString: dbUrl.href });
    await check.connect();
    const recorded = await check.query('SELECT name, count(*)::int AS n FROM heart_fleet_migrations GROUP BY name ORDER BY name');
    await check.end();
    assert.deepEqual(recorded.rows, [...names].sort().map((name) => ({ name, n: 1 })));
    for (const name of names) {
      const byNode = [node1, node2, node3].filter((r) => r.find((m) => m.name === name).applied).length;
      const byRust = cli.filter((out) => out.split('\n').includes(`${name}: applied`)).length;
      assert.equal(byNode + byRust, 1, `${name} applied by ${byNode} Node and ${byRust} Rust migrates`);
    }
    // The schema works for a fleet afterwards.
    const fleet = new HeartFleet({ store: new PgLeaseStore({ pool: pools[0] }) });
    assert.deepEqual((await fleet.listRuns()).length, 0);
  } finally {
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await admin.query(`DROP DATABASE IF EXISTS ${db}`);
  }
});

test('a lease cycle through PostgreSQL: acquire, verify, renew, release, receipts', { skip }, async () => {
  const id = await seedRun();
  const a = await heart.acquire(id, 'worker-A', 60);
  assert.equal(a.acquired, true);
  assert.match(a.fence.leaseExpiresAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.equal(a.fence.epoch, 1);
  assert.equal(a.run.id, id);
  const b = await heart.acquire(id, 'worker-B', 60);
  assert.deepEqual([b.acquired, b.code], [false, 'lease-held']);
  assert.equal(await heart.verifyFence(a.fence), true);
  await new Promise((r) => setTimeout(r, 5));
  const renewed = await heart.renew(a.fence, 120);
  assert.ok(renewed && renewed.leaseExpiresAt > a.fence.leaseExpiresAt);
  assert.equal(await heart.verifyFence(a.fence), false);
  const released = await heart.release(renewed, 'completed');
  assert.equal(released.status, 'completed');
  assert.equal(await heart.release(renewed, 'completed'), null);
  const mine = heart.receipts().filter((r) => r.runId === id);
  assert.deepEqual(mine.map((r) => r.event), ['acquired', 'fence_verified', 'renewed', 'fence_rejected', 'released', 'fence_rejected']);
  for (const r of mine) assert.equal(verifyReceipt(r), true);
  assertShape(await heart.acquire(randomUUID(), 'w', 60), { acquired: false, run: null, reason: 'Run not found' }, { code: 'run-not-found' });
  assert.equal((await heart.acquire('not-a-uuid', 'w', 60)).code, 'run-not-found');
});

test('concurrent acquires from two fleets on two pools: exactly one wins per run', { skip }, async () => {
  const other = new HeartFleet({ store: new PgLeaseStore({ pool: pool() }) });
  const ids = [];
  for (let i = 0; i < 8; i += 1) ids.push(await seedRun());
  const results = await Promise.all(
    ids.flatMap((id) => [heart.acquire(id, 'A', 60), other.acquire(id, 'B', 60), heart.acquire(id, 'C', 60)]),
  );
  for (let i = 0; i < ids.length; i += 1) {
    const trio = results.slice(i * 3, i * 3 + 3);
    assert.equal(trio.filter((r) => r.acquired).length, 1, `run ${ids[i]}`);
    const winner = trio.find((r) => r.acquired);
    assert.equal((await row(ids[i])).lease_owner, winner.fence.owner);
  }
});

test('an expired lease is taken over or swept, retries counted (fixes 1 and 3)', { skip }, async () => {
  const past = new Date(Date.now() - 60_000).toISOString();
  const takeover = await seedRun({ status: 'leased', lease_owner: 'dead', lease_expires_at: past });
  const a = await heart.acquire(takeover, 'alive', 60);
  assert.equal(a.acquired, true);
  assert.equal(a.run.retries, 1);
  const swept = await seedRun({ status: 'running', lease_owner: 'dead', lease_expires_at: past, retries: 5 });
  const s = await heart.reclaimExpired({ limit: 1000 });
  assert.ok(s.quarantinedIds.includes(swept), JSON.stringify(s));
  assert.equal((await row(swept)).status, 'quarantined');
  const events = heart.receipts().filter((r) => r.runId === takeover).map((r) => r.event);
  assert.deepEqual(events, ['reclaimed', 'acquired']);
});

test('ensureResourceRun is race-safe: one row, one creator', { skip }, async () => {
  const kind = `pg.test.${randomUUID()}`;
  const all = await Promise.all(Array.from({ length: 6 }, () => heart.ensureResourceRun(kind, 'singleton', { objective: 'tick' })));
  assert.equal(new Set(all.map((r) => r.run.id)).size, 1);
  assert.equal(all.filter((r) => r.created).length, 1);
  const id = all[0].run.id;
  for (let i = 0; i < 3; i += 1) {
    const out = await executeWithLease(heart, { runId: id, owner: `w${i}`, ttlSeconds: 30, releaseToReady: true }, async () => i);
    assert.deepEqual([out.ran, out.released], [true, true]);
  }
  assert.equal((await row(id)).status, 'ready');
});

test('executeWithLease renews on its timer against the database clock', { skip }, async () => {
  const id = await seedRun();
  const out = await executeWithLease(heart, { runId: id, owner: 'beater', ttlSeconds: 1, renewEveryMs: 40 }, async () => {
    await new Promise((r) => setTimeout(r, 300));
    return 'ok';
  });
  assert.deepEqual([out.ran, out.released, out.lost], [true, true, undefined]);
  assert.ok(heart.receipts().filter((r) => r.runId === id && r.event === 'renewed').length >= 2);
  assert.equal((await row(id)).status, 'completed');
});

test('sendOnce, dedupe and the reconciler on the real tables', { skip }, async () => {
  const id = await seedRun();
  const ledger = new DurableEffectLedger({ heart });
  const { fence } = await heart.acquire(id, 'sender', 60);
  const key = effectKey('telegram', { chatId: 7, text: 'hello' });
  let sends = 0;
  const opts = { fence, channel: 'telegram', effectKey: key, payload: { chatId: 7, text: 'hello' }, send: async () => ({ message_id: ++sends }) };
  const first = await sendOnce(heart, ledger, opts);
  assert.deepEqual([first.sent, first.committed, first.externalRef], [true, true, { message_id: 1 }]);
  assert.equal((await sendOnce(heart, ledger, opts)).reason, 'deduped');
  assert.equal(sends, 1);
  assert.equal(await ledger.recordOnce(id, 'internal:1'), true);
  assert.equal(await ledger.recordOnce(id, 'internal:1'), false);
  // A crash after dispatch: a dispatched intent whose fence expired.
  await admin.query(
    `INSERT INTO ${schema}.effect_intents (run_id, effect_key, state, channel, payload_digest, fence_owner, fence_expires_at)
     VALUES ($1, 'mail:crashed', 'dispatched', 'mail', 'sha256:x', 'gone', now() - interval '1 minute')`,
    [id],
  );
  const stale = await ledger.findStaleDispatched();
  assert.ok(stale.some((i) => i.effect_key === 'mail:crashed'));
  const summary = await reconcileOutbox(ledger, { probes: { mail: async () => ({ status: 'not-sent' }) } });
  assert.ok(summary.reopened >= 1, JSON.stringify(summary));
  const log = await ledger.dispatchLog(id, key);
  assert.deepEqual(log.map((e) => e.outcome), ['claimed', 'sent', 'deduped']);
  const intent = await admin.query(`SELECT state, external_ref FROM ${schema}.effect_intents WHERE run_id = $1 AND effect_key = $2`, [id, key]);
  assert.deepEqual(intent.rows[0], { state: 'committed', external_ref: { message_id: 1 } });
});

test('liveness: a silent instance is declared dead and its runs recovered', { skip }, async () => {
  const dead = `dead-${randomUUID()}`;
  await admin.query(`INSERT INTO ${schema}.agent_instances (instance_id, status, last_heartbeat) VALUES ($1, 'alive', now() - interval '5 minutes')`, [dead]);
  const future = new Date(Date.now() + 600_000).toISOString();
  const id = await seedRun({ status: 'leased', lease_owner: dead, lease_expires_at: future });
  const live = new LivenessReclaimer({ heart });
  await live.registerInstance(`live-${randomUUID()}`, { hostname: 'h', pid: 1 });
  const s = await live.reclaimDeadInstanceRuns();
  assert.ok(s.deadInstanceIds.includes(dead));
  assert.ok(s.reclaimedIds.includes(id));
  assert.deepEqual(await row(id), { status: 'ready', lease_owner: null, retries: 1, fencing_epoch: '0' });
  assert.equal(await live.heartbeat(dead), false);
});

test('a database that fails gives store-unavailable and changes nothing', { skip }, async () => {
  const id = await seedRun();
  const broken = pool({ connectionString: url.replace(/:\d+\//, ':1/'), connectionTimeoutMillis: 500 });
  const down = new HeartFleet({ store: new PgLeaseStore({ pool: broken }) });
  await assert.rejects(down.acquire(id, 'w', 60), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable');
  assert.deepEqual(await row(id), { status: 'ready', lease_owner: null, retries: 0, fencing_epoch: '0' });
  // A statement error (the schema is missing on this connection) is a store failure too.
  const noSchema = new HeartFleet({ store: new PgLeaseStore({ pool: pool({ options: '-c search_path=no_such_schema' }) }) });
  await assert.rejects(noSchema.acquire(id, 'w', 60), (e) => e.code === 'store-unavailable' && /agent_runs/.test(e.message));
  assert.equal(down.metrics.acquireWins + noSchema.metrics.acquireWins, 0);
});

test('the receipts table sink and the constructor checks', { skip }, async () => {
  const sink = store.receiptSink();
  const h = new HeartFleet({ store, onReceipt: sink });
  const id = await seedRun();
  const { fence } = await h.acquire(id, 'w', 60);
  await h.release(fence, 'completed');
  await sink.flush();
  const r = await admin.query(`SELECT event, digest FROM ${schema}.heart_receipts WHERE run_id = $1 ORDER BY at, event`, [id]);
  assert.deepEqual(r.rows.map((x) => x.event).sort(), ['acquired', 'released']);
  assert.throws(() => new PgLeaseStore(null), TypeError);
  assert.throws(() => new PgLeaseStore({}), TypeError);
  assert.throws(() => new PgLeaseStore({ pool: {} }), TypeError);
  const own = new PgLeaseStore({ connectionString: url });
  await own.end();
});

test('a statement without an answer fails at queryTimeoutMs, and the pool goes on', { skip }, async () => {
  const id = await seedRun();
  // The store's own pool: the server abandons the statement at the same deadline.
  const conn = new URL(url);
  conn.searchParams.set('options', `-c search_path=${schema}`);
  const timedStore = new PgLeaseStore({ connectionString: conn.href, queryTimeoutMs: 300 });
  const timed = new HeartFleet({ store: timedStore });
  // Another session holds the row: the acquire's UPDATE waits for the lock, with no answer.
  const blocker = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` });
  await blocker.connect();
  await blocker.query('BEGIN');
  await blocker.query('SELECT 1 FROM agent_runs WHERE id = $1 FOR UPDATE', [id]);
  const started = Date.now();
  await assert.rejects(timed.acquire(id, 'w', 60), (e) => e.code === 'store-unavailable' && /timeout/i.test(e.message));
  assert.ok(Date.now() - started < 3000, 'the deadline held');
  await blocker.query('ROLLBACK');
  await blocker.end();
  // A later request gets a working connection.
  let later;
  for (let i = 0; i < 20 && !later?.acquired; i += 1) {
    later = await timed.acquire(id, 'w', 60).catch(() => null);
    if (!later?.acquired) await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(later.acquired, true);
  assert.equal(later.fence.epoch, 1, 'the abandoned acquire was cancelled by the server, not applied');
  await timedStore.end();
});

test('PgLeaseStore options: unknown names and bad values are TypeErrors', { skip }, async () => {
  assert.throws(() => new PgLeaseStore({ pool: pool(), queryTimeout: 5 }), (e) => e instanceof TypeError && e.code === 'invalid-input' && /queryTimeout/.test(e.message));
  assert.throws(() => new PgLeaseStore({ pool: pool(), queryTimeoutMs: 0 }), TypeError);
  assert.throws(() => new PgLeaseStore({ pool: pool(), prepare: 'no' }), TypeError);
  assert.equal(new PgLeaseStore({ connectionString: `${url}?pgbouncer=true` })._prepare, false);
  assert.equal(new PgLeaseStore({ connectionString: url })._prepare, true);
});

// Through PgBouncer in transaction mode (2 server connections): named prepared statements
// would not follow a client, so `pgbouncer=true` sends every statement unnamed.
const pooled = process.env.HEART_PGBOUNCER_URL;
const skipPooled = !url ? 'SKIPPED: DATABASE_URL is not set' : pooled ? false : 'SKIPPED: HEART_PGBOUNCER_URL is not set';
if (url && !pooled && process.env.CI) {
  test('PgBouncer is required under CI', () => assert.fail('HEART_PGBOUNCER_URL is not set (scripts/test-all.sh starts PgBouncer)'));
}

test('through a transaction pooler: migrate, and four fleets cycling at once', { skip: skipPooled }, async () => {
  const conn = `${pooled}${pooled.includes('?') ? '&' : '?'}pgbouncer=true`;
  const stores = [1, 2, 3, 4].map(() => new PgLeaseStore({ connectionString: conn, max: 2 }));
  try {
    await stores[0].migrate();
    assert.ok((await stores[1].migrate()).every((m) => !m.applied));
    const tag = `${process.pid}-${Date.now()}`;
    const setup = new HeartFleet({ store: stores[0] });
    const runs = [];
    for (let i = 0; i < 4; i += 1) runs.push((await setup.ensureResourceRun('pooler-test', `${tag}-${i}`)).run.id);
    const cycles = await Promise.all(
      stores.map(async (store, i) => {
        const fleet = new HeartFleet({ store });
        for (let n = 0; n < 25; n += 1) {
          const a = await fleet.acquire(runs[i], `w${i}`, 60);
          assert.equal(a.acquired, true, `fleet ${i} cycle ${n}: ${a.reason}`);
          assert.equal(await fleet.verifyFence(a.fence), true);
          assert.notEqual(await fleet.release(a.fence, 'ready'), null);
        }
        return 25;
      }),
    );
    assert.equal(cycles.reduce((a, b) => a + b, 0), 100);
  } finally {
    await Promise.all(stores.map((s) => s.end()));
  }
});
