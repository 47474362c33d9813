// A recording fake of the supabase-js query builder over in-memory tables with the
// reference schema's keys and defaults: enough PostgREST (select / insert / update / upsert,
// eq / is / in, order, range, single / maybeSingle, error objects with Postgres codes) to
// run SupabaseLeaseStore without a server. Every query is recorded as its chain of calls.

import { randomUUID } from 'node:crypto';

const TIMESTAMPS = new Set([
  'lease_expires_at', 'created_at', 'updated_at', 'fence_expires_at', 'committed_at', 'at', 'started_at', 'last_heartbeat',
]);

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
  constructor({ pgTimestamps = false, beforeExecute } = {}) {
    this.tables = { agent_runs: [], effect_intents: [], outbox_dispatch_log: [], agent_instances: [] };
    this.calls = [];
    this.seq = 0;
    this.pgTimestamps = pgTimestamps;
    this.beforeExecute = beforeExecute;
  }

  from(table) {
    return new FakeQuery(this, table);
  }

  ts(v) {
    if (v === null || v === undefined) return null;
    const iso = new Date(v).toISOString();
    return this.pgTimestamps ? iso.replace('Z', '+00:00') : iso;
  }

  normalize(table, row) {
    const out = { ...row };
    for (const k of Object.keys(out)) if (TIMESTAMPS.has(k) && out[k] !== null) out[k] = this.ts(out[k]);
    return out;
  }

  /** Seeds rows as given (timestamps normalized). */
  seed(table, rows) {
    for (const r of rows) this.tables[table].push(this.normalize(table, { ...defaults(table), ...r }));
  }

  rows(table) {
    return this.tables[table].map((r) => structuredClone(r));
  }
}

function matches(row, [op, col, v]) {
  const x = row[col];
  const cmp = (a, b) => (TIMESTAMPS.has(col) && a !== null && b !== null ? Date.parse(a) === Date.parse(b) : a === b);
  switch (op) {
    case 'eq':
      return x !== null && x !== undefined && cmp(x, v);
    case 'is':
      return v === null ? x === null || x === undefined : x === v;
    case 'in':
      return v.some((y) => cmp(x, y));
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
  range(a, b) {
    this.rangeOf = [a, b];
    return this.rec('range', a, b);
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
    const t = this.db.tables[this.table];
    const hit = () => t.filter((r) => this.filters.every((f) => matches(r, f)));
    let data;
    if (this.action === 'select') {
      data = hit();
      if (this.orderBy) {
        const [c, asc] = this.orderBy;
        data = [...data].sort((a, b) => (a[c] < b[c] ? -1 : a[c] > b[c] ? 1 : a.seq - b.seq) * (asc ? 1 : -1));
      }
      if (this.rangeOf) data = data.slice(this.rangeOf[0], this.rangeOf[1] + 1);
    } else if (this.action === 'insert' || this.action === 'upsert') {
      const row = this.db.normalize(this.table, { ...defaults(this.table), ...this.values });
      if (this.table === 'outbox_dispatch_log') row.seq = ++this.db.seq;
      for (const key of KEYS[this.table]) {
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
    data = data.map((r) => structuredClone(r));
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
