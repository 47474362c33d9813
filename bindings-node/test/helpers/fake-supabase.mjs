// A recording fake of the supabase-js query builder over in-memory tables with the
// reference schema's keys and defaults: enough PostgREST (select with columns / insert /
// update / upsert, eq / is / in / lt, order, range, limit, single / maybeSingle, error objects
// with Postgres codes: 23505 on a duplicate key) to run SupabaseLeaseStore without a server.
// Every query is recorded as its chain of calls.
//
// `outboxClient: true` narrows it to what the reference's DurableEffectLedger may assume of
// a client (its OutboxClient type, as the reference's own outbox tests fake it): only
// insert / update / select / eq / in / lt / limit / maybeSingle, not thenable (limit() and
// maybeSingle() run the query), strict equality in filters, and effect_intents without the
// columns our migrations add (writing one is PostgREST's PGRST204 error).

import { randomUUID } from 'node:crypto';

const TIMESTAMPS = new Set([
  'lease_expires_at', 'created_at', 'updated_at', 'fence_expires_at', 'committed_at', 'at', 'started_at', 'last_heartbeat',
]);

/** What the reference's OutboxClient type offers. */
const OUTBOX_CLIENT = ['insert', 'update', 'select', 'eq', 'in', 'lt', 'limit', 'maybeSingle'];
/** Columns the reference's schema (scripts/2148) lacks. */
const ADDED_COLUMNS = { effect_intents: ['fence_epoch'] };

const KEYS = {
  agent_runs: [['id'], ['idempotency_key'], ['assignment_id']],
  effect_intents: [['run_id', 'effect_key']],
  outbox_dispatch_log: [['id']],
  agent_instances: [['instance_id']],
};

function defaults(table) {
  switch (table) {
    case 'agent_runs':
      return {
        // created_at / updated_at default to the database's now().
        created_at: new Date().toISOString(), updated_at: new Date().toISOString(),
        id: randomUUID(), task_id: null, required_capabilities: [], status: 'created', assigned_agent: null, lease_owner: null,
        lease_expires_at: null, retries: 0, budget: null, approval_state: 'auto', visibility: 'team', fencing_epoch: 0,
      };
    case 'effect_intents':
      return { state: 'intent', fence_owner: null, fence_expires_at: null, fence_epoch: null, external_ref: null, attempts: 0, last_error: null, committed_at: null };
    case 'outbox_dispatch_log':
      return { id: randomUUID(), detail: null };
    case 'agent_instances':
      return { hostname: null, pid: null, status: 'alive', metadata: null };
    default:
      return {};
  }
}

export class FakeSupabase {
  /**
   * @param {object} options
   * @param {boolean} [options.pgTimestamps] return timestamps as PostgREST does
   *   (`2026-07-30T00:01:00.123+00:00`) instead of `toISOString()` text
   * @param {(q: FakeQuery) => void | Promise<void>} [options.beforeExecute] a hook run before
   *   each query (inject errors with `q.fail = {...}`, interleave writers, delay)
   */
  constructor({ pgTimestamps = false, beforeExecute, outboxClient = false } = {}) {
    this.tables = { agent_runs: [], effect_intents: [], outbox_dispatch_log: [], agent_instances: [] };
    this.calls = [];
    this.seq = 0;
    this.pgTimestamps = pgTimestamps;
    this.beforeExecute = beforeExecute;
    this.outboxClient = outboxClient;
  }

  from(table) {
    const q = new FakeQuery(this, table);
    return this.outboxClient ? narrowed(q) : q;
  }

  /** Columns `table` lacks in this fake's schema. */
  missing(table) {
    return this.outboxClient ? ADDED_COLUMNS[table] ?? [] : [];
  }

  ts(v) {
    if (v === null || v === undefined) return null;
    const iso = new Date(v).toISOString();
    return this.pgTimestamps ? iso.replace('Z', '+00:00') : iso;
  }

  normalize(table, row) {
    const out = { ...row };
    for (const k of this.missing(table)) delete out[k];
    for (const k of Object.keys(out)) if (TIMESTAMPS.has(k) && out[k] !== null) out[k] = this.ts(out[k]);
    return out;
  }

  /** Seeds rows as given (timestamps normalized). */
  seed(table, rows) {
    for (const r of rows) this.tables[table].push(this.normalize(table, { ...defaults(table), ...r }));
  }

  rows(table) {
    return (this.tables[table] ?? []).map((r) => structuredClone(r));
  }
}

/** The query builder narrowed to the reference's OutboxClient: `limit` and `maybeSingle` run it. */
function narrowed(q) {
  const view = {};
  for (const m of OUTBOX_CLIENT) {
    view[m] = (...args) => {
      q[m](...args);
      return m === 'limit' || m === 'maybeSingle' ? q.run() : view;
    };
  }
  return view;
}

function matches(row, [op, col, v], strict) {
  const x = row[col];
  const time = TIMESTAMPS.has(col) && !strict;
  const cmp = (a, b) => (time && a !== null && b !== null ? Date.parse(a) === Date.parse(b) : a === b);
  switch (op) {
    case 'eq':
      return x !== null && x !== undefined && cmp(x, v);
    case 'is':
      return v === null ? x === null || x === undefined : x === v;
    case 'in':
      return v.some((y) => cmp(x, y));
    case 'lt':
      if (x === null || x === undefined) return false;
      return TIMESTAMPS.has(col) ? Date.parse(x) < Date.parse(v) : x < v;
    default:
      throw new Error(`fake: unsupported filter ${op}`);
  }
}

class FakeQuery {
  constructor(db, table) {
    this.db = db;
    this.table = table;
    this.chain = [['from', table]];
    this.action = 'select';
    this.filters = [];
    this.returning = false;
    this.mode = 'many';
    this.fail = null;
  }
  rec(name, ...args) {
    this.chain.push([name, ...args]);
    return this;
  }
  select(cols = '*') {
    if (this.action !== 'select') this.returning = true;
    this.columns = cols;
    return this.rec('select', cols);
  }
  insert(values) {
    this.action = 'insert';
    this.values = values;
    return this.rec('insert', values);
  }
  update(values) {
    this.action = 'update';
    this.values = values;
    return this.rec('update', values);
  }
  upsert(values, opts) {
    this.action = 'upsert';
    this.values = values;
    return this.rec('upsert', values, opts);
  }
  eq(col, v) {
    this.filters.push(['eq', col, v]);
    return this.rec('eq', col, v);
  }
  is(col, v) {
    this.filters.push(['is', col, v]);
    return this.rec('is', col, v);
  }
  in(col, vs) {
    this.filters.push(['in', col, vs]);
    return this.rec('in', col, vs);
  }
  order(col, opts) {
    this.orderBy = [col, opts?.ascending !== false];
    return this.rec('order', col, opts);
  }
  lt(col, v) {
    this.filters.push(['lt', col, v]);
    return this.rec('lt', col, v);
  }
  range(a, b) {
    this.rangeOf = [a, b];
    return this.rec('range', a, b);
  }
  limit(n) {
    this.limitOf = n;
    return this.rec('limit', n);
  }
  single() {
    this.mode = 'single';
    return this.rec('single');
  }
  maybeSingle() {
    this.mode = 'maybeSingle';
    return this.rec('maybeSingle');
  }
  then(resolve, reject) {
    return this.run().then(resolve, reject);
  }

  async run() {
    this.db.calls.push(this.chain);
    await null;
    if (this.db.beforeExecute) await this.db.beforeExecute(this);
    if (this.fail) {
      if (this.fail.throws) throw new Error(this.fail.throws);
      return { data: null, error: this.fail };
    }
    // A table of another name (custom table options) starts empty, without keys.
    const t = (this.db.tables[this.table] ??= []);
    const hit = () => t.filter((r) => this.filters.every((f) => matches(r, f, this.db.outboxClient)));
    const absent = this.action === 'select' ? [] : Object.keys(this.values).filter((k) => this.db.missing(this.table).includes(k));
    if (absent.length > 0) {
      return { data: null, error: { code: 'PGRST204', message: `Could not find the '${absent[0]}' column of '${this.table}' in the schema cache` } };
    }
    let data;
    if (this.action === 'select') {
      data = hit();
      if (this.orderBy) {
        const [c, asc] = this.orderBy;
        data = [...data].sort((a, b) => (a[c] < b[c] ? -1 : a[c] > b[c] ? 1 : a.seq - b.seq) * (asc ? 1 : -1));
      }
      if (this.rangeOf) data = data.slice(this.rangeOf[0], this.rangeOf[1] + 1);
      if (this.limitOf !== undefined) data = data.slice(0, this.limitOf);
    } else if (this.action === 'insert' || this.action === 'upsert') {
      const row = this.db.normalize(this.table, { ...defaults(this.table), ...this.values });
      if (this.table === 'outbox_dispatch_log') row.seq = ++this.db.seq;
      for (const key of KEYS[this.table] ?? []) {
        const clash = t.findIndex((r) => key.every((k) => r[k] === row[k]));
        if (clash >= 0) {
          if (this.action === 'upsert' && key[0] === KEYS[this.table][0][0]) {
            t[clash] = { ...t[clash], ...this.db.normalize(this.table, this.values) };
            data = [t[clash]];
            break;
          }
          return { data: null, error: { code: '23505', message: `duplicate key value violates unique constraint on ${key.join(', ')}` } };
        }
      }
      if (!data) {
        t.push(row);
        data = [row];
      }
    } else if (this.action === 'update') {
      data = [];
      for (const r of hit()) {
        Object.assign(r, this.db.normalize(this.table, this.values));
        data.push(r);
      }
    }
    const pick = (r) => (this.columns && this.columns !== '*' ? Object.fromEntries(this.columns.split(',').map((c) => [c.trim(), r[c.trim()]])) : r);
    data = data.map((r) => structuredClone(pick(r)));
    if (this.action !== 'select' && !this.returning) return { data: null, error: null };
    if (this.mode === 'single') {
      return data.length === 1 ? { data: data[0], error: null } : { data: null, error: { code: 'PGRST116', message: `${data.length} rows` } };
    }
    if (this.mode === 'maybeSingle') {
      return data.length <= 1 ? { data: data[0] ?? null, error: null } : { data: null, error: { code: 'PGRST116', message: 'multiple rows' } };
    }
    return { data, error: null };
  }
}
