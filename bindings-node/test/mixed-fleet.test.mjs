// A mixed fleet on one PostgreSQL table, as during a rollout: workers running the
// TypeScript package's algorithm (bench/reference-js.mjs, over the reference's four-method
// LeaseStore as its Supabase adapter's queries reach PostgreSQL) next to ours, over
// PgLeaseStore and over that same four-method store. They contend for the same runs; the
// test checks mutual exclusion (one holder at a time), that every acquisition, old node or
// new, raises the run's fencing epoch (the migration's trigger does it for old nodes), that
// every holder's own release succeeds, and that each node's receipts verify.
//
// Needs DATABASE_URL (prints SKIPPED without it; fails under CI).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { HeartFleet, PgLeaseStore, verifyReceipt } from '../index.mjs';
import { JsHeartFleet } from '../bench/reference-js.mjs';

const url = process.env.DATABASE_URL;
const skip = url ? false : 'SKIPPED: DATABASE_URL is not set';
if (!url && process.env.CI) {
  test('PostgreSQL is required under CI', () => assert.fail('DATABASE_URL is not set (CI requires the PostgreSQL tests)'));
}

const schema = `heart_mixed_${process.pid}_${Date.now()}`;
let admin;
let pool;

before(async () => {
  if (!url) return;
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  pool = new pg.Pool({ connectionString: url, options: `-c search_path=${schema}`, max: 8 });
  await new PgLeaseStore({ pool }).migrate();
});

after(async () => {
  if (!url) return;
  await pool.end().catch(() => {});
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin.end();
});

/** A row as PostgREST hands it to the reference: timestamps as ISO text, the epoch a number. */
function asRest(row) {
  if (!row) return null;
  const out = {};
  for (const [k, v] of Object.entries(row)) out[k] = v instanceof Date ? v.toISOString() : v;
  if (out.fencing_epoch !== undefined) out.fencing_epoch = Number(out.fencing_epoch);
  return out;
}

/**
 * The reference's LeaseStore over PostgreSQL, with its Supabase adapter's query shapes:
 * `select * where id`, and `update … where id and eq (is null for null) and in and lt
 * returning *`. The clock is the worker's, as in the reference.
 */
class ReferencePgStore {
  constructor(db) {
    this.db = db;
  }

  now() {
    return new Date();
  }

  async getRun(id) {
    const r = await this.db.query('SELECT * FROM agent_runs WHERE id = $1', [id]);
    return asRest(r.rows[0]);
  }

  async conditionalUpdate(id, updates, { eq = {}, in: among = {}, lt = {} } = {}) {
    const params = [id];
    const p = (v) => {
      params.push(v);
      return `$${params.length}`;
    };
    const set = Object.entries(updates).map(([k, v]) => `${k} = ${p(v)}`);
    const where = ['id = $1'];
    for (const [k, v] of Object.entries(eq)) where.push(v === null ? `${k} IS NULL` : `${k} = ${p(v)}`);
    for (const [k, vs] of Object.entries(among)) where.push(`${k} = ANY(${p(vs)})`);
    for (const [k, v] of Object.entries(lt)) where.push(`${k} < ${p(v)}`);
    const r = await this.db.query(`UPDATE agent_runs SET ${set.join(', ')} WHERE ${where.join(' AND ')} RETURNING *`, params);
    return asRest(r.rows[0]);
  }

  async findExpiredLeases(nowIso, limit) {
    const r = await this.db.query(
      "SELECT * FROM agent_runs WHERE status IN ('leased', 'running') AND lease_expires_at < $1 LIMIT $2",
      [nowIso, limit],
    );
    return r.rows.map(asRest);
  }
}

async function seedRun() {
  const id = randomUUID();
  await admin.query(
    `INSERT INTO ${schema}.agent_runs (id, assignment_id, objective, status, retries, idempotency_key, created_by)
     VALUES ($1, gen_random_uuid(), 'mixed fleet', 'ready', 0, $2, 'test')`,
    [id, `mixed:${id}`],
  );
  return id;
}

test('reference workers and ours share one table: one holder at a time, every acquisition raises the epoch', { skip }, async () => {
  const runs = [await seedRun(), await seedRun()];
  const referenceStore = new ReferencePgStore(pool);
  const receipts = [];
  const sink = (r) => receipts.push(r);
  // Old nodes (the reference's algorithm), and ours over PgLeaseStore and over the old nodes' store.
  const workers = [
    ...[1, 2].map((i) => ({ name: `ts-${i}`, kind: 'reference', heart: new JsHeartFleet({ store: referenceStore, onReceipt: sink }) })),
    ...[1, 2].map((i) => ({ name: `pg-${i}`, kind: 'ours', heart: new HeartFleet({ store: new PgLeaseStore({ pool }), onReceipt: sink }) })),
    { name: 'ls-1', kind: 'ours', heart: new HeartFleet({ store: referenceStore, onReceipt: sink }) },
  ];
  const holders = new Map(runs.map((r) => [r, 0]));
  const epochs = new Map(runs.map((r) => [r, []]));
  const acquiredBy = new Map();
  const problems = [];
  const deadline = Date.now() + 3000;

  async function loop(w) {
    let n = 0;
    while (Date.now() < deadline) {
      const runId = runs[n % runs.length];
      n += 1;
      const a = await w.heart.acquire(runId, w.name, 5);
      if (!a.acquired) continue;
      holders.set(runId, holders.get(runId) + 1);
      if (holders.get(runId) !== 1) problems.push(`${w.name} acquired ${runId} while another worker held it`);
      epochs.get(runId).push({ by: w.name, epoch: Number(a.run.fencing_epoch) });
      acquiredBy.set(w.name, (acquiredBy.get(w.name) ?? 0) + 1);
      await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 4)));
      holders.set(runId, holders.get(runId) - 1);
      const released = await w.heart.release(a.fence, 'completed');
      if (!released) problems.push(`${w.name}'s own release of ${runId} was refused`);
      // The bot's resetRunReady: a completed run back to ready, for the next tick.
      await pool.query("UPDATE agent_runs SET status = 'ready', updated_at = now() WHERE id = $1 AND status IN ('completed', 'failed')", [runId]);
    }
  }
  await Promise.all(workers.map(loop));

  assert.deepEqual(problems, []);
  for (const w of workers) assert.ok((acquiredBy.get(w.name) ?? 0) > 0, `${w.name} never won a lease`);
  for (const runId of runs) {
    const seq = epochs.get(runId).map((e) => e.epoch);
    assert.ok(seq.length >= 5, `only ${seq.length} acquisitions of ${runId}`);
    for (let i = 1; i < seq.length; i += 1) {
      assert.ok(seq[i] > seq[i - 1], `epoch of ${runId} did not rise at acquisition ${i}: ${JSON.stringify(epochs.get(runId).slice(i - 1, i + 1))}`);
    }
    assert.equal(seq[0], 1, 'the first acquisition of a fresh run is epoch 1');
    const row = (await pool.query('SELECT fencing_epoch, status, lease_owner FROM agent_runs WHERE id = $1', [runId])).rows[0];
    assert.equal(Number(row.fencing_epoch), seq[seq.length - 1]);
    assert.deepEqual([row.status, row.lease_owner], ['ready', null]);
  }
  // Old and new receipts are the same format: every one verifies.
  assert.ok(receipts.length > 0);
  for (const r of receipts) assert.equal(verifyReceipt(r), true);
  const byKind = (kind) => workers.filter((w) => w.kind === kind).reduce((s, w) => s + (acquiredBy.get(w.name) ?? 0), 0);
  console.log(`mixed fleet: ${byKind('reference')} acquisitions by reference workers, ${byKind('ours')} by ours, ${receipts.length} receipts`);
});
