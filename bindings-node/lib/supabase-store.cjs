'use strict';
// SupabaseLeaseStore: a store for teams that only have Supabase's REST API (PostgREST), over
// an injected supabase-js client. It maps each store request onto the reference adapter's
// query shapes (select('*').eq('id', …).maybeSingle(); update(…).eq(…).is(…).select('*')),
// decides with the core's own evaluator (native.simulateRequest) on the rows it read, and
// writes the result back with a compare-and-set on every column the decision read.
//
// What it cannot guarantee, unlike PgLeaseStore (which runs one statement per request with
// the database's clock):
//  * The clock is the worker's (Date.now(), or the `now` option). Workers whose clocks are
//    skewed disagree about expiry: a worker running fast can take over a lease that is still
//    live by its holder's clock. Keep clocks synchronized (NTP) and leases long relative to
//    the skew.
//  * A request is a read followed by a conditional write, not one statement: the write is
//    refused when the row changed since the read (compare-and-set on status, owner, expiry,
//    retries, epoch and updated_at), and the request is re-decided, at most `casRetries`
//    times; then it fails with store-unavailable. Exclusion holds; progress under heavy
//    contention may need retries.
//  * Conditions across tables (an intent's run still held by a token, a run's owner being a
//    dead instance) are checked on rows read moments apart, not atomically with the write.
//  * A dispatch-log entry is a second insert after the intent write, not part of it; a crash
//    between the two leaves the intent written and the log entry missing.
//  * Scans read every candidate row (paged, `pageSize` rows per request) and filter, order and
//    limit in the worker; fine for operational tables, slow for huge ones.
//  * Errors are errors: a PostgREST or network error fails the request (store-unavailable),
//    never reads as "not found" or a collision (the reference adapter's hole).

/** A v4 UUID: Web Crypto where it exists (Deno, browsers, Node >= 19), node:crypto on Node 18. */
function randomUUID() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  // eslint-disable-next-line global-require
  return require('node:crypto').randomUUID();
}
const native = require('./native.cjs');
const { typeError, rethrowNative, describe } = require('./util.cjs');
const { executeRequest, mentions } = require('./store-request.cjs');

const RUN_CAS = ['status', 'lease_owner', 'lease_expires_at', 'retries', 'fencing_epoch', 'updated_at'];
const INTENT_CAS = ['state', 'fence_owner', 'fence_expires_at', 'fence_epoch', 'attempts', 'committed_at', 'last_error'];
const INTENT_WRITABLE = [...INTENT_CAS, 'external_ref', 'channel', 'payload_digest'];
const INSTANCE_CAS = ['status', 'last_heartbeat'];

class RestError extends Error {
  constructor(what, error) {
    super(`supabase ${what}: ${error && (error.message || error.code || JSON.stringify(error))}`);
    this.pgCode = error && error.code;
  }
}

function same(a, b) {
  return JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
}

function diff(before, after, cols) {
  const patch = {};
  for (const c of cols) if (!same(before[c], after[c])) patch[c] = after[c] ?? null;
  return patch;
}

/** Adds the compare-and-set filters: every column as read (raw database text). */
function cas(query, raw, cols) {
  let q = query;
  for (const c of cols) {
    if (!(c in raw)) continue;
    q = raw[c] === null ? q.is(c, null) : q.eq(c, raw[c]);
  }
  return q;
}

/** Top-level equality / membership on text columns, to narrow a scan on the server. */
function coarse(cond, out = []) {
  if (cond && typeof cond === 'object') {
    if (Array.isArray(cond.and)) for (const c of cond.and) coarse(c, out);
    else if (Array.isArray(cond.eq) && cond.eq[1] && cond.eq[1].type === 'text') out.push(['eq', cond.eq[0], cond.eq[1].value]);
    else if (Array.isArray(cond.in) && cond.in[1].every((v) => v.type === 'text')) out.push(['in', cond.in[0], cond.in[1].map((v) => v.value)]);
  }
  return out;
}

/**
 * A heart-fleet store over a supabase-js client (`createClient(url, serviceRoleKey)`), for
 * deployments that only reach PostgREST. See the caveats at the top of this file and in the
 * README: the worker's clock decides expiry.
 *
 * `new SupabaseLeaseStore({client, now?, tables?, casRetries = 5, pageSize = 1000})`.
 */
class SupabaseLeaseStore {
  constructor(options) {
    if (options === null || typeof options !== 'object') throw typeError('SupabaseLeaseStore: options {client} required');
    const { client, now, tables = {}, casRetries = 5, pageSize = 1000 } = options;
    if (client === null || typeof client !== 'object' || typeof client.from !== 'function') {
      throw typeError(`SupabaseLeaseStore: client must be a supabase-js client (with from()), got ${describe(client)}`);
    }
    if (now !== undefined && typeof now !== 'function') throw typeError('SupabaseLeaseStore: now must be a function returning a Date or milliseconds');
    if (!Number.isInteger(casRetries) || casRetries < 1 || casRetries > 100) throw typeError('casRetries must be an integer in 1..=100');
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 100_000) throw typeError('pageSize must be an integer in 1..=100000');
    this.client = client;
    this._now = now ?? (() => Date.now());
    this.tables = {
      runs: tables.runs ?? 'agent_runs',
      intents: tables.intents ?? 'effect_intents',
      log: tables.log ?? 'outbox_dispatch_log',
      instances: tables.instances ?? 'agent_instances',
    };
    this.casRetries = casRetries;
    this.pageSize = pageSize;
  }

  _clock() {
    const v = this._now();
    const ms = v instanceof Date ? v.getTime() : Number(v);
    if (!Number.isFinite(ms)) throw new Error('the clock returned an invalid time');
    return Math.floor(ms);
  }

  from(table) {
    return this.client.from(this.tables[table]);
  }

  async _run(what, query) {
    const { data, error } = await query;
    if (error) throw new RestError(what, error);
    return data;
  }

  /** Every row matching the coarse filters, page by page. */
  async _all(table, filters = []) {
    const rows = [];
    for (let from = 0; ; from += this.pageSize) {
      let q = this.from(table).select('*');
      for (const [op, col, v] of filters) q = q[op](col, v);
      const page = await this._run(`scan ${this.tables[table]}`, q.range(from, from + this.pageSize - 1));
      rows.push(...(page ?? []));
      if (!page || page.length < this.pageSize) return rows;
    }
  }

  async _readRun(id) {
    try {
      return await this._run(`read ${this.tables.runs}`, this.from('runs').select('*').eq('id', id).maybeSingle());
    } catch (e) {
      if (e.pgCode === '22P02') return null; // not a UUID: no such run (as in PostgreSQL)
      throw e;
    }
  }

  _simulate(request, snapshot, now) {
    try {
      return JSON.parse(native.simulateRequest(JSON.stringify(request), JSON.stringify(snapshot), now));
    } catch (e) {
      return rethrowNative(e);
    }
  }

  /** The store contract: one StoreRequest → its StoreAnswer (lib/store-request.cjs). */
  execute(request) {
    return executeRequest(this, 'SupabaseLeaseStore', request);
  }

  /** Every row of `table` that may meet `when` (the coarse filters run on the server). */
  _scan(table, when) {
    return this._all(table, coarse(when));
  }

  async _readLog(runId, effectKey) {
    const entries = await this._run(
      `read ${this.tables.log}`,
      this.from('log').select('*').eq('run_id', runId).eq('effect_key', effectKey).order('at', { ascending: true }),
    );
    return entries ?? [];
  }

  async _upsertInstance(req) {
    const now = new Date(this._clock()).toISOString();
    const row = await this._run(
      `upsert ${this.tables.instances}`,
      this.from('instances')
        .upsert(
          { instance_id: req.instance_id, hostname: req.hostname, pid: req.pid, status: 'alive', started_at: now, last_heartbeat: now, metadata: req.metadata },
          { onConflict: 'instance_id' },
        )
        .select('*')
        .single(),
    );
    return { now, reply: { kind: 'instances', instances: [row] } };
  }

  async _updateRun(req) {
    for (let attempt = 0; attempt < this.casRetries; attempt += 1) {
      const now = this._clock();
      const raw = await this._readRun(req.run_id);
      if (!raw) return { now: new Date(now).toISOString(), reply: { kind: 'run_write', before: null, after: null } };
      const instances = mentions(req.when, 'owner_instance_dead') ? await this._all('instances') : [];
      const sim = this._simulate({ ...req, want_before: true }, { runs: [raw], instances }, now);
      const { before, after } = sim.reply;
      if (!after) return { now: sim.now, reply: { kind: 'run_write', before: null, after: null } };
      const patch = diff(before, after, RUN_CAS);
      if (Object.keys(patch).length === 0) patch.updated_at = after.updated_at;
      const written = await this._run(
        `update ${this.tables.runs}`,
        cas(this.from('runs').update(patch).eq('id', req.run_id), raw, RUN_CAS).select('*').maybeSingle(),
      );
      if (written) return { now: sim.now, reply: { kind: 'run_write', before: req.want_before ? before : null, after } };
      // The row changed since the read: decide again on the new row.
    }
    throw new Error(`supabase: run ${req.run_id} kept changing (compare-and-set lost ${this.casRetries} times)`);
  }

  async _ensureRun(req) {
    const now = new Date(this._clock()).toISOString();
    const find = () =>
      this._run(`read ${this.tables.runs}`, this.from('runs').select('*').eq('idempotency_key', req.idempotency_key).maybeSingle());
    const found = await find();
    if (found) return { now, reply: { kind: 'ensured', run: found, created: false } };
    const { data, error } = await this.from('runs')
      .insert({
        assignment_id: randomUUID(),
        objective: req.objective,
        required_capabilities: [],
        status: 'ready',
        retries: 0,
        approval_state: 'auto',
        visibility: 'team',
        idempotency_key: req.idempotency_key,
        created_by: req.created_by,
        created_at: now,
        updated_at: now,
      })
      .select('*')
      .single();
    if (!error) return { now, reply: { kind: 'ensured', run: data, created: true } };
    if (error.code !== '23505') throw new RestError(`insert ${this.tables.runs}`, error);
    const raced = await find();
    if (!raced) throw new RestError(`insert ${this.tables.runs}`, error);
    return { now, reply: { kind: 'ensured', run: raced, created: false } };
  }

  async _log(entry) {
    await this._run(`insert ${this.tables.log}`, this.from('log').insert(entry));
  }

  async _claimIntent(req) {
    const now = new Date(this._clock()).toISOString();
    const { data, error } = await this.from('intents')
      .insert({
        run_id: req.run_id,
        effect_key: req.effect_key,
        state: 'intent',
        channel: req.channel,
        payload_digest: req.payload_digest,
        attempts: 0,
        created_at: now,
      })
      .select('*')
      .single();
    if (!error) {
      await this._log({ run_id: req.run_id, effect_key: req.effect_key, attempt: 0, outcome: 'claimed', at: now, detail: { channel: req.channel } });
      return { now, reply: { kind: 'claim', intent: data, claimed: true } };
    }
    if (error.code !== '23505') throw new RestError(`insert ${this.tables.intents}`, error);
    const existing = await this._run(
      `read ${this.tables.intents}`,
      this.from('intents').select('*').eq('run_id', req.run_id).eq('effect_key', req.effect_key).maybeSingle(),
    );
    if (!existing) throw new RestError(`insert ${this.tables.intents}`, error);
    await this._log({ run_id: req.run_id, effect_key: req.effect_key, attempt: 0, outcome: 'deduped', at: now, detail: null });
    return { now, reply: { kind: 'claim', intent: existing, claimed: false } };
  }

  async _updateIntent(req) {
    for (let attempt = 0; attempt < this.casRetries; attempt += 1) {
      const now = this._clock();
      const raw = await this._run(
        `read ${this.tables.intents}`,
        this.from('intents').select('*').eq('run_id', req.run_id).eq('effect_key', req.effect_key).maybeSingle(),
      );
      if (!raw) return { now: new Date(now).toISOString(), reply: { kind: 'intent', intent: null } };
      const run = mentions(req.when, 'run_held_by') ? await this._readRun(req.run_id) : null;
      const snapshot = { intents: [raw], runs: run ? [run] : [] };
      const sim = this._simulate(req, snapshot, now);
      const after = sim.reply.intent;
      if (!after) return sim;
      const before = this._simulate({ op: 'scan_intents', when: 'true', limit: 1 }, { intents: [raw] }, now).reply.intents[0];
      const patch = diff(before, after, INTENT_WRITABLE);
      if (Object.keys(patch).length === 0) patch.state = after.state;
      const written = await this._run(
        `update ${this.tables.intents}`,
        cas(this.from('intents').update(patch).eq('run_id', req.run_id).eq('effect_key', req.effect_key), raw, INTENT_CAS)
          .select('*')
          .maybeSingle(),
      );
      if (written) {
        if (req.log) await this._log({ ...req.log, at: sim.now });
        return sim;
      }
    }
    throw new Error(`supabase: intent ${req.effect_key} kept changing (compare-and-set lost ${this.casRetries} times)`);
  }

  async _updateInstances(req) {
    const now = this._clock();
    const raws = await this._all('instances', coarse(req.when));
    const sim = this._simulate(req, { instances: raws }, now);
    const before = this._simulate({ op: 'scan_instances', when: 'true' }, { instances: raws }, now).reply.instances;
    const written = [];
    for (const after of sim.reply.instances) {
      const raw = raws.find((r) => r.instance_id === after.instance_id);
      const prev = before.find((r) => r.instance_id === after.instance_id);
      const patch = diff(prev, after, INSTANCE_CAS);
      if (Object.keys(patch).length === 0) patch.status = after.status;
      const row = await this._run(
        `update ${this.tables.instances}`,
        cas(this.from('instances').update(patch).eq('instance_id', after.instance_id), raw, INSTANCE_CAS).select('*').maybeSingle(),
      );
      // An instance that changed since the read was not written by this request.
      if (row) written.push(after);
    }
    return { now: sim.now, reply: { kind: 'instances', instances: written } };
  }
}

module.exports = { SupabaseLeaseStore };
