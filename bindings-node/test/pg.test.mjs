// PgLeaseStore against a real PostgreSQL, every test body on two routes (helpers/pg-route.mjs):
// `[direct]` (DATABASE_URL, e.g. postgres://heart:heart@127.0.0.1:5432/heart_test) and
// `[pooler]` (HEART_PGBOUNCER_URL: PgBouncer in transaction mode, pool size 2, `pgbouncer=true`).
// Each route works in a database of its own, created, migrated through the route and dropped
// here. A missing service prints SKIPPED, except under CI (env CI set), where it is a failure.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
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
  verifyReceipts,
  HeartFleetError,
  guardIrreversible,
  MemoryEffectLedger,
} from '../index.mjs';
import { assertShape } from './helpers/shape.mjs';
import native from '../lib/native.cjs';
import { routeTest, directOnlyTest } from './helpers/pg-route.mjs';

if (!process.env.DATABASE_URL) console.log('pg tests SKIPPED: DATABASE_URL is not set');

/** Inserts a run on the route's database (directly, not through the store under test). */
async function seedRun({ admin }, fields = {}) {
  const id = randomUUID();
  const f = { status: 'ready', lease_owner: null, lease_expires_at: null, retries: 0, ...fields };
  await admin.query(
    `INSERT INTO agent_runs (id, assignment_id, objective, status, lease_owner, lease_expires_at, retries, idempotency_key, created_by)
     VALUES ($1, gen_random_uuid(), 'pg test', $2, $3, $4, $5, $6, 'test')`,
    [id, f.status, f.lease_owner, f.lease_expires_at, f.retries, `pg:${id}`],
  );
  return id;
}

async function row({ admin }, id) {
  const r = await admin.query('SELECT status, lease_owner, retries, fencing_epoch FROM agent_runs WHERE id = $1', [id]);
  return r.rows[0];
}

routeTest('migrations are idempotent: two more migrates at once apply nothing', async (route) => {
  const again = await Promise.all([route.store.migrate(), route.newStore({ max: 2 }).migrate()]);
  for (const plan of again) assert.ok(plan.length >= 2 && plan.every((m) => !m.applied), JSON.stringify(plan));
  const recorded = await route.admin.query('SELECT name, count(*)::int AS n FROM heart_fleet_migrations GROUP BY name ORDER BY name');
  assert.deepEqual(recorded.rows, again[0].map((m) => m.name).sort().map((name) => ({ name, n: 1 })));
});

// The CLI for the mixed-runtime migrate test: $HEART_FLEET_CLI (the README's test command
// builds it first), else the workspace's release build.
const cliPath = process.env.HEART_FLEET_CLI || new URL('../../target/release/heart-fleet', import.meta.url).pathname;

routeTest('a Node migrate and Rust migrates at once on a fresh database apply each migration once', async (route) => {
  const { existsSync } = await import('node:fs');
  const { execFile } = await import('node:child_process');
  if (!existsSync(cliPath)) {
    if (process.env.CI) assert.fail(`the heart-fleet CLI is not at ${cliPath} (set HEART_FLEET_CLI)`);
    console.log(`SKIPPED: no heart-fleet CLI at ${cliPath}`);
    return;
  }
  const db = await route.createDatabase('migrate');
  const stores = [1, 2, 3].map(() => route.newStore({ max: 1 }, db));
  const rust = () =>
    new Promise((resolve, reject) =>
      execFile(cliPath, ['--store', db.storeUrl, 'migrate'], { timeout: 120_000 }, (err, stdout, stderr) =>
        err ? reject(new Error(`heart-fleet migrate: ${stderr || err.message}`)) : resolve(stdout),
      ),
    );
  const [node1, node2, node3, ...cli] = await Promise.all([...stores.map((s) => s.migrate()), rust(), rust()]);
  const names = node1.map((m) => m.name);
  assert.ok(names.length >= 2, 'the PostgreSQL plan has migrations');
  // Every migration recorded once, and applied by exactly one of the five migrates.
  const check = await route.client(db.adminUrl);
  const recorded = await check.query('SELECT name, count(*)::int AS n FROM heart_fleet_migrations GROUP BY name ORDER BY name');
  assert.deepEqual(recorded.rows, [...names].sort().map((name) => ({ name, n: 1 })));
  for (const name of names) {
    const byNode = [node1, node2, node3].filter((r) => r.find((m) => m.name === name).applied).length;
    const byRust = cli.filter((out) => out.split('\n').includes(`${name}: applied`)).length;
    assert.equal(byNode + byRust, 1, `${name} applied by ${byNode} Node and ${byRust} Rust migrates`);
  }
  // The schema works for a fleet afterwards.
  const fleet = new HeartFleet({ store: stores[0] });
  assert.deepEqual((await fleet.listRuns()).length, 0);
});

routeTest('a lease cycle through PostgreSQL: acquire, verify, renew, release, receipts', async (route) => {
  const { heart } = route;
  const id = await seedRun(route);
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

routeTest('concurrent acquires from two fleets on two pools: exactly one wins per run', async (route) => {
  const { heart } = route;
  // The second fleet on a pool of the test's own: the {pool} form, the pooler mode as an option.
  const other = new HeartFleet({ store: new PgLeaseStore({ pool: route.pool(), prepare: !route.pooled }) });
  const ids = [];
  for (let i = 0; i < 8; i += 1) ids.push(await seedRun(route));
  const results = await Promise.all(
    ids.flatMap((id) => [heart.acquire(id, 'A', 60), other.acquire(id, 'B', 60), heart.acquire(id, 'C', 60)]),
  );
  for (let i = 0; i < ids.length; i += 1) {
    const trio = results.slice(i * 3, i * 3 + 3);
    assert.equal(trio.filter((r) => r.acquired).length, 1, `run ${ids[i]}`);
    const winner = trio.find((r) => r.acquired);
    assert.equal((await row(route, ids[i])).lease_owner, winner.fence.owner);
  }
});

routeTest('an expired lease is taken over or swept, retries counted (fixes 1 and 3)', async (route) => {
  const { heart } = route;
  const past = new Date(Date.now() - 60_000).toISOString();
  const takeover = await seedRun(route, { status: 'leased', lease_owner: 'dead', lease_expires_at: past });
  const a = await heart.acquire(takeover, 'alive', 60);
  assert.equal(a.acquired, true);
  assert.equal(a.run.retries, 1);
  const swept = await seedRun(route, { status: 'running', lease_owner: 'dead', lease_expires_at: past, retries: 5 });
  const s = await heart.reclaimExpired({ limit: 1000 });
  assert.ok(s.quarantinedIds.includes(swept), JSON.stringify(s));
  assert.equal((await row(route, swept)).status, 'quarantined');
  const events = heart.receipts().filter((r) => r.runId === takeover).map((r) => r.event);
  assert.deepEqual(events, ['reclaimed', 'acquired']);
});

routeTest('ensureResourceRun is race-safe: one row, one creator', async (route) => {
  const { heart } = route;
  const kind = `pg.test.${randomUUID()}`;
  const all = await Promise.all(Array.from({ length: 6 }, () => heart.ensureResourceRun(kind, 'singleton', { objective: 'tick' })));
  assert.equal(new Set(all.map((r) => r.run.id)).size, 1);
  assert.equal(all.filter((r) => r.created).length, 1);
  const id = all[0].run.id;
  for (let i = 0; i < 3; i += 1) {
    const out = await executeWithLease(heart, { runId: id, owner: `w${i}`, ttlSeconds: 30, releaseToReady: true }, async () => i);
    assert.deepEqual([out.ran, out.released], [true, true]);
  }
  assert.equal((await row(route, id)).status, 'ready');
});

routeTest('executeWithLease renews on its timer against the database clock', async (route) => {
  const { heart } = route;
  const id = await seedRun(route);
  const out = await executeWithLease(heart, { runId: id, owner: 'beater', ttlSeconds: 1, renewEveryMs: 40 }, async () => {
    await new Promise((r) => setTimeout(r, 300));
    return 'ok';
  });
  assert.deepEqual([out.ran, out.released, out.lost], [true, true, undefined]);
  assert.ok(heart.receipts().filter((r) => r.runId === id && r.event === 'renewed').length >= 2);
  assert.equal((await row(route, id)).status, 'completed');
});

routeTest('sendOnce, dedupe and the reconciler on the real tables', async (route) => {
  const { heart, admin } = route;
  const id = await seedRun(route);
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
    `INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, fence_owner, fence_expires_at)
     VALUES ($1, 'mail:crashed', 'dispatched', 'mail', 'sha256:x', 'gone', now() - interval '1 minute')`,
    [id],
  );
  const stale = await ledger.findStaleDispatched();
  assert.ok(stale.some((i) => i.effect_key === 'mail:crashed'));
  const summary = await reconcileOutbox(ledger, { probes: { mail: async () => ({ status: 'not-sent' }) } });
  assert.ok(summary.reopened >= 1, JSON.stringify(summary));
  const log = await ledger.dispatchLog(id, key);
  assert.deepEqual(log.map((e) => e.outcome), ['claimed', 'sent', 'deduped']);
  const intent = await admin.query('SELECT state, external_ref FROM effect_intents WHERE run_id = $1 AND effect_key = $2', [id, key]);
  assert.deepEqual(intent.rows[0], { state: 'committed', external_ref: { message_id: 1 } });
});

routeTest('liveness: a silent instance is declared dead and its runs recovered', async (route) => {
  const { heart, admin } = route;
  const dead = `dead-${randomUUID()}`;
  await admin.query(`INSERT INTO agent_instances (instance_id, status, last_heartbeat) VALUES ($1, 'alive', now() - interval '5 minutes')`, [dead]);
  const future = new Date(Date.now() + 600_000).toISOString();
  const id = await seedRun(route, { status: 'leased', lease_owner: dead, lease_expires_at: future });
  const live = new LivenessReclaimer({ heart });
  await live.registerInstance(`live-${randomUUID()}`, { hostname: 'h', pid: 1 });
  const s = await live.reclaimDeadInstanceRuns();
  assert.ok(s.deadInstanceIds.includes(dead));
  assert.ok(s.reclaimedIds.includes(id));
  assert.deepEqual(await row(route, id), { status: 'ready', lease_owner: null, retries: 1, fencing_epoch: '0' });
  assert.equal(await live.heartbeat(dead), false);
});

/** A failed acquire through `store`: store-unavailable (matching `message`), and the run untouched. */
async function assertUnavailable(route, store, message) {
  const id = await seedRun(route);
  const fleet = new HeartFleet({ store });
  await assert.rejects(fleet.acquire(id, 'w', 60), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable' && message.test(e.message));
  assert.deepEqual(await row(route, id), { status: 'ready', lease_owner: null, retries: 0, fencing_epoch: '0' });
  assert.equal(fleet.metrics.acquireWins, 0);
}

routeTest('a database that fails gives store-unavailable and changes nothing', async (route) => {
  const unreachable = new URL(route.db.storeUrl);
  unreachable.port = '1';
  await assertUnavailable(route, route.newStore({ connectionString: unreachable.href, connectTimeoutMs: 500 }), /./);
  // A statement error (the schema is missing in this database) is a store failure too.
  await assertUnavailable(route, route.newStore({}, await route.createDatabase('bare')), /agent_runs/);
});

directOnlyTest("the server abandons a statement a little before the client's deadline (the core's margin)", 'PgBouncer refuses the startup parameter statement_timeout', async (route) => {
  const store = route.newStore({ queryTimeoutMs: 300, max: 1 });
  const { rows } = await store.db.query('SHOW statement_timeout');
  assert.equal(rows[0].statement_timeout, '240ms');
});

directOnlyTest('a session search_path without the schema gives store-unavailable', 'PgBouncer refuses the startup parameter options', async (route) => {
  await assertUnavailable(route, new PgLeaseStore({ pool: route.pool({ options: '-c search_path=no_such_schema' }) }), /agent_runs/);
});

routeTest('the receipts table sink chains and signs, and the constructor checks', async (route) => {
  const { store, admin } = route;
  const key = `heart-fleet-hmac-sha256-key:${'ab'.repeat(32)}`;
  const sink = store.receiptSink({ signingKeys: [key] });
  const h = new HeartFleet({ store, onReceipt: sink });
  const id = await seedRun(route);
  const { fence } = await h.acquire(id, 'w', 60);
  await sink.flush();
  // A second sink (another process, say) appends to the same run in between: the first
  // sink's next insert finds its position taken, reads the head again and chains after it.
  const other = store.receiptSink({ signingKeys: [key] });
  assert.equal(await new HeartFleet({ store, onReceipt: other }).verifyFence(fence), true);
  await other.flush();
  await h.release(fence, 'completed');
  await sink.flush();
  const r = await admin.query('SELECT event, receipt::text AS receipt FROM heart_receipts WHERE run_id = $1 ORDER BY id', [id]);
  const receipts = r.rows.map((x) => JSON.parse(x.receipt));
  assert.deepEqual(receipts.map((x) => x.event), ['acquired', 'fence_verified', 'released']);
  assert.deepEqual(receipts.map((x) => x.seq), [1, 2, 3]);
  const report = verifyReceipts(receipts, { key, requireChain: true });
  assert.deepEqual([report.findings, report.signed], [[], 3]);
  assert.throws(() => store.receiptSink({ signingKeys: ['heart-fleet-hmac-sha256-key:00'] }), (e) => e.code === 'invalid-input' && /signing key 0/.test(e.message));
  assert.throws(() => store.receiptSink({ signingKeys: key }), (e) => e.code === 'invalid-input');
  assert.throws(() => new PgLeaseStore(null), TypeError);
  assert.throws(() => new PgLeaseStore({}), TypeError);
  assert.throws(() => new PgLeaseStore({ pool: {} }), TypeError);
  const own = new PgLeaseStore({ connectionString: route.db.storeUrl });
  await own.end();
});

/** The run's receipts in the table, oldest first (their events). */
async function receiptEvents({ admin }, id) {
  const r = await admin.query('SELECT event FROM heart_receipts WHERE run_id = $1 ORDER BY id', [id]);
  return r.rows.map((x) => x.event);
}

routeTest('with its own receiptSink a fleet commits each receipt with its write, and the effect runs after the commit', async (route) => {
  const { store, admin } = route;
  const sink = store.receiptSink();
  const h = new HeartFleet({ store, onReceipt: sink });
  const id = await seedRun(route);
  const { fence } = await h.acquire(id, 'w', 60);
  // No flush: the receipt committed with the acquire.
  assert.deepEqual(await receiptEvents(route, id), ['acquired']);
  assert.equal(await h.verifyFence(fence), true);
  assert.deepEqual(await receiptEvents(route, id), ['acquired', 'fence_verified']);
  // sendOnce: the claim and the dispatch mark are committed before the send runs (another
  // session sees them), and the evidence commits with its receipt afterwards.
  const key = effectKey('internal', { id });
  let seen = null;
  const sent = await sendOnce(h, new DurableEffectLedger({ heart: h }), {
    fence,
    channel: 'internal',
    effectKey: key,
    payload: { id },
    send: async () => {
      const r = await admin.query('SELECT state FROM effect_intents WHERE run_id = $1 AND effect_key = $2', [id, key]);
      seen = r.rows.map((x) => x.state);
      return { ok: true };
    },
  });
  assert.equal(sent.committed, true);
  assert.deepEqual(seen, ['dispatched'], 'the dispatch mark was committed before the send');
  await h.release(fence, 'completed');
  const events = await receiptEvents(route, id);
  assert.deepEqual([events[0], events[1], events.at(-1)], ['acquired', 'fence_verified', 'released']);
  assert.ok(events.includes('effect_committed'), events.join());
  const r = await admin.query('SELECT receipt::text AS receipt FROM heart_receipts WHERE run_id = $1 ORDER BY id', [id]);
  const report = verifyReceipts(r.rows.map((x) => JSON.parse(x.receipt)), { requireChain: true });
  assert.deepEqual(report.findings, []);
});

routeTest('a receipt that cannot be inserted rolls its write back: store-unavailable, the run and the counters as they were', async (route) => {
  const { store, admin } = route;
  const h = new HeartFleet({ store, onReceipt: store.receiptSink() });
  const id = await seedRun(route);
  const tag = `no_receipts_${id.replaceAll('-', '_')}`;
  await admin.query(`CREATE FUNCTION ${tag}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
    IF NEW.run_id = '${id}' THEN RAISE EXCEPTION 'receipts refused for this run'; END IF; RETURN NEW; END $$`);
  await admin.query(`CREATE TRIGGER ${tag} BEFORE INSERT ON heart_receipts FOR EACH ROW EXECUTE FUNCTION ${tag}()`);
  try {
    await assert.rejects(h.acquire(id, 'w', 60), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable' && /rolled back with their receipts/.test(e.message) && /receipts refused/.test(e.message));
    assert.deepEqual(await row(route, id), { status: 'ready', lease_owner: null, retries: 0, fencing_epoch: '0' });
    assert.deepEqual(await receiptEvents(route, id), []);
    assert.equal(h.metrics.acquireWins, 0);
    assert.equal(h.metrics.acquireAttempts, 0, 'what the rolled-back acquire counted was taken back');
  } finally {
    await admin.query(`DROP TRIGGER ${tag} ON heart_receipts`);
    await admin.query(`DROP FUNCTION ${tag}()`);
  }
  // The fleet and its connections go on: the same acquire now commits with its receipt.
  const { acquired, fence } = await h.acquire(id, 'w', 60);
  assert.equal(acquired, true);
  assert.equal(fence.epoch, 1);
  assert.deepEqual(await receiptEvents(route, id), ['acquired']);
  assert.deepEqual([h.metrics.acquireAttempts, h.metrics.acquireWins], [1, 1]);
});

routeTest('concurrent held operations on one fleet, on a pool and on a single client, each keep their own chain of receipts', async (route) => {
  const runs = [];
  for (let i = 0; i < 6; i += 1) runs.push((await route.heart.ensureResourceRun('held', randomUUID())).run.id);
  const client = await route.client(route.db.url);
  for (const store of [route.newStore({ max: 2 }), new PgLeaseStore({ client, prepare: !route.pooled })]) {
    const h = new HeartFleet({ store, onReceipt: store.receiptSink() });
    // Six cycles at once: acquire, verify, guard an effect (its receipt records no write), release to ready.
    await Promise.all(
      runs.map(async (id, i) => {
        const { fence } = await h.acquire(id, `w${i}`, 60);
        assert.equal(await h.verifyFence(fence), true);
        const out = await guardIrreversible(h, fence, new MemoryEffectLedger(), `fx:${id}`, async () => i);
        assert.equal(out.committed, true);
        assert.ok(await h.release(fence, 'ready'));
      }),
    );
  }
  // guardIrreversible verifies the fence itself, then its effect's receipt follows.
  const cycle = ['acquired', 'fence_verified', 'fence_verified', 'effect_committed', 'released'];
  for (const id of runs) assert.deepEqual(await receiptEvents(route, id), [...cycle, ...cycle]);
  const r = await route.admin.query('SELECT receipt::text AS receipt FROM heart_receipts WHERE run_id = ANY($1) ORDER BY id', [runs]);
  const report = verifyReceipts(r.rows.map((x) => JSON.parse(x.receipt)), { requireChain: true });
  assert.deepEqual([report.findings, report.chained], [[], 60]);
});

routeTest('a worker killed between its write and its receipt leaves neither', async (route) => {
  const { admin } = route;
  const id = await seedRun(route);
  // The receipts table is locked, so the worker's receipt insert waits inside its
  // transaction, after its acquire's UPDATE; then the worker is killed.
  const locker = await route.client();
  await locker.query('BEGIN');
  await locker.query('LOCK TABLE heart_receipts IN EXCLUSIVE MODE');
  const { spawn } = await import('node:child_process');
  const index = new URL('../index.mjs', import.meta.url).href;
  const worker = spawn(process.execPath, ['--input-type=module', '-e', `
    const { HeartFleet, PgLeaseStore } = await import(${JSON.stringify(index)});
    const store = new PgLeaseStore({ connectionString: process.env.STORE_URL });
    const h = new HeartFleet({ store, onReceipt: store.receiptSink() });
    h.acquire(process.env.RUN_ID, 'doomed', 60);
  `], { env: { ...process.env, STORE_URL: route.db.storeUrl, RUN_ID: id }, stdio: 'inherit' });
  try {
    // Wait until the worker's insert waits for the lock (its UPDATE has run).
    let waiting = false;
    for (let i = 0; i < 200 && !waiting; i += 1) {
      const r = await admin.query(`SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND relation = 'heart_receipts'::regclass`);
      waiting = r.rows[0].n > 0;
      if (!waiting) await new Promise((resolve) => setTimeout(resolve, 25));
    }
    assert.ok(waiting, 'the worker reached its receipt insert');
  } finally {
    worker.kill('SIGKILL');
    await new Promise((resolve) => worker.once('exit', resolve));
    await locker.query('COMMIT');
  }
  // The server rolls the dead worker's transaction back once it finds its connection gone.
  for (let i = 0; i < 200; i += 1) {
    const open = await admin.query(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL',
    );
    if (open.rows[0].n === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  const left = await row(route, id);
  assert.deepEqual(left, { status: 'ready', lease_owner: null, retries: 0, fencing_epoch: '0' });
  assert.deepEqual(await receiptEvents(route, id), []);
});

/**
 * Another session (direct) holds a run's row, so an acquire through `store` (queryTimeoutMs
 * 300) waits for the lock with no answer: it fails at the deadline with store-unavailable
 * (matching `message`), the statement does not land, and the store's next requests work.
 */
async function assertDeadlineCancels(route, store, message) {
  const id = await seedRun(route);
  const timed = new HeartFleet({ store });
  const blocker = await route.client();
  await blocker.query('BEGIN');
  await blocker.query('SELECT 1 FROM agent_runs WHERE id = $1 FOR UPDATE', [id]);
  const started = Date.now();
  await assert.rejects(timed.acquire(id, 'w', 60), (e) => e.code === 'store-unavailable' && message.test(e.message));
  assert.ok(Date.now() - started < 3000, 'the deadline held');
  // While the lock is still held, the abandoned UPDATE stops waiting for it: cancelled on the
  // server (a statement only left by its client would wait, then land once the lock goes).
  const waiting = "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
  let waiters = (await route.admin.query(waiting)).rows[0].n;
  for (let i = 0; i < 50 && waiters > 0; i += 1) {
    await new Promise((r) => setTimeout(r, 20));
    waiters = (await route.admin.query(waiting)).rows[0].n;
  }
  assert.equal(waiters, 0, 'the abandoned statement still waits for the lock on the server');
  await blocker.query('ROLLBACK');
  // A later request gets a working connection.
  let later;
  for (let i = 0; i < 20 && !later?.acquired; i += 1) {
    later = await timed.acquire(id, 'w', 60).catch(() => null);
    if (!later?.acquired) await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(later?.acquired, true, `no acquire once the lock went (${later?.reason}); the run: ${JSON.stringify(await row(route, id))}`);
  assert.equal(later.fence.epoch, 1, 'the abandoned acquire was cancelled by the server, not applied');
}

routeTest('a statement without an answer fails at queryTimeoutMs, and the pool goes on', async (route) => {
  // The store's own pool. Directly, the server also abandons the statement at the same
  // deadline; through the pooler the store cannot set that at startup: its cancel request must.
  await assertDeadlineCancels(route, route.newStore({ queryTimeoutMs: 300 }), /timeout/i);
});

routeTest('a pg.Pool of yours: a statement past queryTimeoutMs is cancelled on the server, its connection dropped', async (route) => {
  // No server-side statement_timeout on this pool, on either route: only the cancel request holds.
  const pool = route.pool({ max: 2 });
  let removed = 0;
  pool.on('remove', () => {
    removed += 1;
  });
  await assertDeadlineCancels(route, new PgLeaseStore({ pool, prepare: !route.pooled, queryTimeoutMs: 300 }), /no answer within 300 ms \(queryTimeoutMs\)/);
  assert.equal(removed, 1, 'the connection that missed the deadline was not returned to the pool');
});

/**
 * A TCP proxy to the route's server that can freeze like a server that stopped: frozen, it
 * forwards nothing either way and answers no new connection. Counts the connections it took
 * while frozen and how many of them their client has closed since.
 */
async function freezableProxy(route) {
  const net = await import('node:net');
  const target = new URL(route.server);
  const sockets = new Set();
  const proxy = { frozen: false, frozenAccepted: 0, frozenClosed: 0 };
  const server = net.createServer((client) => {
    sockets.add(client);
    client.on('error', () => {});
    if (proxy.frozen) {
      proxy.frozenAccepted += 1;
      // Read and dropped, so that the client's close is heard.
      client.resume();
      client.on('close', () => {
        proxy.frozenClosed += 1;
      });
      return;
    }
    const upstream = net.connect(Number(target.port), target.hostname);
    sockets.add(upstream);
    upstream.on('error', () => {});
    client.on('data', (d) => proxy.frozen || upstream.write(d));
    upstream.on('data', (d) => proxy.frozen || client.write(d));
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.port = server.address().port;
  route.closers.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return proxy;
}

routeTest('a server that stops answering: the cancel request is bounded, the request fails, the pool goes on', async (route) => {
  const proxy = await freezableProxy(route);
  const url = new URL(route.db.storeUrl);
  url.host = `127.0.0.1:${proxy.port}`;
  const fleet = new HeartFleet({ store: route.newStore({ connectionString: url.href, queryTimeoutMs: 300, max: 1 }) });
  const id = await seedRun(route);
  assert.equal((await fleet.acquire(randomUUID(), 'w', 60)).code, 'run-not-found', 'a connection through the proxy');
  proxy.frozen = true;
  const started = Date.now();
  await assert.rejects(fleet.acquire(id, 'w', 60), (e) => e.code === 'store-unavailable' && /no answer within 300 ms \(queryTimeoutMs\)/.test(e.message));
  const took = Date.now() - started;
  // The cancel request went out (a connection of its own), and the store gave it up after a
  // second, before failing the request (the proxy hears the close a moment later).
  for (let i = 0; i < 25 && proxy.frozenClosed === 0; i += 1) await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual([proxy.frozenAccepted, proxy.frozenClosed], [1, 1], 'one cancel request, given up');
  assert.ok(took >= 1250 && took < 2500, `failed after ${took} ms (300 ms deadline, 1000 ms for the cancel request)`);
  proxy.frozen = false;
  const later = await fleet.acquire(id, 'w', 60);
  assert.equal(later.acquired, true, later.reason);
  assert.equal(later.fence.epoch, 1);
});

routeTest('a lost connection fails no one: the pool replaces it, the next request works', async (route) => {
  // The store's connections carry a name of their own, so that only they are terminated.
  const conn = new URL(route.db.storeUrl);
  conn.searchParams.set('application_name', 'heart-lost-connection');
  const fleet = new HeartFleet({ store: route.newStore({ connectionString: conn.href, max: 1 }) });
  const id = await seedRun(route);
  const { fence } = await fleet.acquire(id, 'w', 60);
  // Directly its idle connection, through the pooler the server connection behind it.
  const backends = "FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'heart-lost-connection'";
  const killed = await route.admin.query(`SELECT count(pg_terminate_backend(pid))::int AS n ${backends}`);
  assert.equal(killed.rows[0].n, 1);
  for (let i = 0; i < 50 && (await route.admin.query(`SELECT 1 ${backends}`)).rowCount > 0; i += 1) await new Promise((r) => setTimeout(r, 20));
  // The idle connection's error has arrived: an unhandled pool error would have ended the process.
  await new Promise((r) => setTimeout(r, 50));
  assert.notEqual(await fleet.release(fence, 'completed'), null);
  assert.equal((await row(route, id)).status, 'completed');
});

routeTest('a held transaction whose connection dies between two statements fails its operation, not the process', async (route) => {
  const conn = new URL(route.db.storeUrl);
  conn.searchParams.set('application_name', 'heart-held-lost');
  const store = route.newStore({ connectionString: conn.href, max: 1 });
  const sink = store.receiptSink();
  const id = await seedRun(route);
  // One held transaction driven by hand: its first request opens it and keeps the connection.
  const held = store._holdFor(sink);
  await held.execute(JSON.stringify({ op: 'read_run', run_id: id }));
  assert.equal(held.open, true);
  const backends = "FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'heart-held-lost'";
  const killed = await route.admin.query(`SELECT count(pg_terminate_backend(pid))::int AS n ${backends}`);
  assert.equal(killed.rows[0].n, 1);
  for (let i = 0; i < 50 && (await route.admin.query(`SELECT 1 ${backends}`)).rowCount > 0; i += 1) await new Promise((r) => setTimeout(r, 20));
  // The connection's error has arrived while the transaction held it: the process lives on.
  await new Promise((r) => setTimeout(r, 50));
  await assert.rejects(held.settle(), (e) => e instanceof HeartFleetError && e.code === 'store-unavailable' && /rolled back/.test(e.message));
  // The pool replaces the connection: a fleet over the store goes on.
  const fleet = new HeartFleet({ store, onReceipt: sink });
  assert.equal((await fleet.acquire(id, 'w', 60)).acquired, true);
  assert.deepEqual(await receiptEvents(route, id), ['acquired']);
});

routeTest('PgLeaseStore options: unknown names and bad values are TypeErrors; the route store is in its mode', async (route) => {
  const pool = route.pool();
  assert.throws(() => new PgLeaseStore({ pool, queryTimeout: 5 }), (e) => e instanceof TypeError && e.code === 'invalid-input' && /queryTimeout/.test(e.message));
  assert.throws(() => new PgLeaseStore({ pool, queryTimeoutMs: 0 }), TypeError);
  // A statement deadline of at most a day, as in every driver (the core's).
  const deadlines = JSON.parse(native.postgresDeadlines());
  assert.equal(deadlines.maxStatementTimeoutMs, 86_400_000);
  assert.throws(() => new PgLeaseStore({ pool, queryTimeoutMs: 86_400_001 }), (e) => e.code === 'invalid-input' && /queryTimeoutMs must be milliseconds \(an integer in 1\.\.86400000\)/.test(e.message));
  assert.equal(new PgLeaseStore({ pool, queryTimeoutMs: 86_400_000 })._queryTimeoutMs, 86_400_000);
  assert.equal(new PgLeaseStore({ pool })._queryTimeoutMs, deadlines.statementTimeoutMs);
  assert.throws(() => new PgLeaseStore({ pool, prepare: 'no' }), TypeError);
  assert.equal(new PgLeaseStore({ connectionString: `${route.db.url}?pgbouncer=true` })._prepare, false);
  assert.equal(new PgLeaseStore({ connectionString: route.db.url })._prepare, true);
  // Named prepared statements directly, unnamed ones through the pooler.
  assert.equal(route.store._prepare, !route.pooled);
});

// Through PgBouncer in transaction mode (2 server connections), named prepared statements
// would not follow a client: four fleets at once make them meet other clients' connections.
routeTest('four fleets of two connections each cycling at once: acquire, verify, release', async (route) => {
  const stores = [1, 2, 3, 4].map(() => route.newStore({ max: 2 }));
  const tag = `${process.pid}-${Date.now()}`;
  const runs = [];
  for (let i = 0; i < 4; i += 1) runs.push((await route.heart.ensureResourceRun('cycle-test', `${tag}-${i}`)).run.id);
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
});
