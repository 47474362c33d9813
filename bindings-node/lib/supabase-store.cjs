'use strict';
// SupabaseLeaseStore: a store for teams that only have Supabase's REST API (PostgREST), over
// an injected supabase-js client. It maps each store request onto the reference adapter's
// query shapes (select('*').eq('id', …).maybeSingle(); update(…).eq(…).is(…).select('*')),
// decides with the core's own evaluator (native.simulateRequest) on the rows it read, and
// writes the result back with a compare-and-set on every column the decision read. A run
// write is the core's own calls over the runs table, as for a user's LeaseStore
// (reference-store.cjs): renew, verifyFence and a release to a final status are one update
// with the conditions the core states, no read before it, as the reference adapter's.
//
// The effect_intents and outbox_dispatch_log requests use only the reference ledger's query
// vocabulary (insert/update/select, eq/in/lt, limit, maybeSingle; an error 23505 is the
// duplicate claim), so a ledger over any client the reference's DurableEffectLedger accepts
// works here too (lib/outbox.cjs builds its `{client}` form on this store).
//
// What it cannot guarantee, unlike PgLeaseStore (which runs one statement per request with
// the database's clock):
//  * The clock is the worker's (Date.now(), or the `now` option). Workers whose clocks are
//    skewed disagree about expiry: a worker running fast can take over a lease that is still
//    live by its holder's clock. Keep clocks synchronized (NTP) and leases long relative to
//    the skew.
//  * A request is a read followed by a conditional write (a run write the core can state
//    whole: the update alone), not one statement: the write is refused when the row changed
//    since the read (compare-and-set on the columns the decision read, as read), and the
//    request is re-decided, at most `casRetries` times; then it fails with store-unavailable.
//    Exclusion holds; progress under heavy contention may need retries.
//  * Conditions across tables (an intent's run still held by a token, a run's owner being a
//    dead instance) are checked on rows read moments apart, not atomically with the write.
//    The run of a dispatch may live in another store (the heart's): it is read there, and
//    whether the token still holds it is decided at that store's clock.
//  * A dispatch-log entry is a second insert after the intent write, not part of it, and is
//    best-effort as in the reference (a failed log insert never fails the transition it
//    records): a crash or an error between the two leaves the intent written and the entry
//    missing.
//  * Scans read every candidate row (paged, `pageSize` rows per request) and filter, order and
//    limit in the worker; fine for operational tables, slow for huge ones. The stale-dispatch
//    scan is the reference ledger's one query (state = dispatched, fence_expires_at before
//    now + 1 ms, its limit; ordered by expiry when the client can order): a dispatched intent
//    without a fence expiry, which no code path writes, is not found.
//  * Columns the intents table lacks (a database with only the reference's schema, without
//    `fence_epoch`) are not written: the epoch is then not recorded on the intent.
//  * Errors are errors: a PostgREST or network error fails the request (store-unavailable),
//    never reads as "not found" or a collision (the reference adapter's hole).

/** A v4 UUID: Web Crypto where it exists (Deno, browsers, Node >= 19), node:crypto on Node 18. */
function randomUUID() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  // eslint-disable-next-line global-require
  return require('node:crypto').randomUUID();
}
const { typeError, describe, knownKeys, int } = require('./util.cjs');
const { defaults, maxCasRetries: MAX_CAS_RETRIES } = require('./contract.cjs');
const { executeRequest, mentions, requestJson, simulate, decideRunWrite, runWritten } = require('./store-request.cjs');
const { runRow } = require('./rows.cjs');
const { referenceCalls, referenceRequest } = require('./reference-store.cjs');

/** No deadline of its own: the fleet's storeTimeoutMs bounds the whole request. */
const NO_DEADLINE = 2 ** 31 - 1;

/** The options of `new SupabaseLeaseStore({...})` and the keys of its `tables` (others are invalid input). */
const STORE_OPTIONS = ['client', 'now', 'tables', 'casRetries', 'pageSize'];
const TABLES = ['runs', 'intents', 'log', 'instances'];
const INSTANCE_CAS = ['status', 'last_heartbeat'];

/**
 * Internal option (not part of the public API): `(runId) => Promise<{run, now}>`, where the
 * run of an intent's cross-table condition is read (`run`: the row or null, `now`: that
 * store's clock in milliseconds). Default: this store's runs table at this store's clock.
 */
const RUN_SOURCE = Symbol('heart-fleet.runSource');

class RestError extends Error {
  constructor(what, error) {
    const message = error && (error.message || error.code || JSON.stringify(error));
    super(`supabase ${what}: ${message}`);
    this.pgCode = error && error.code;
    // PostgREST's own text, for the reference ledger's `<method> failed: <message>` errors.
    this.pgMessage = message;
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

/**
 * Adds an equality filter (is() for null) on each of `cols` that `row` has, with its value
 * there: a compare-and-set on the values as read, or the conditions the core states.
 */
function cas(query, row, cols) {
  let q = query;
  for (const c of cols) {
    if (!(c in row)) continue;
    q = row[c] === null ? q.is(c, null) : q.eq(c, row[c]);
  }
  return q;
}

/**
 * What a decided write updates: the columns the request assigns, as the core wrote them,
 * that the table has (`raw`, the row as read); `touched` alone when there is none, so the
 * write still proves its compare-and-set.
 */
function assigned(req, raw, after, touched) {
  const patch = {};
  for (const [col] of req.set) if (col in raw) patch[col] = after[col] ?? null;
  if (Object.keys(patch).length === 0) patch[touched] = after[touched];
  return patch;
}

/** The columns of its own row a condition or an assignment (the core's JSON form) reads. */
function columnsRead(node, out = new Set()) {
  if (Array.isArray(node)) {
    for (const n of node) columnsRead(n, out);
  } else if (node !== null && typeof node === 'object') {
    for (const [tag, v] of Object.entries(node)) {
      if (['eq', 'in', 'at_most', 'older_than', 'starts_with', 'add'].includes(tag)) out.add(v[0]);
      else if (tag === 'expired_at' || tag === 'live_at') out.add(v);
      // Whether the owner's instance is dead reads the owner.
      else if (tag === 'owner_instance_dead') out.add('lease_owner');
      else if (['and', 'or', 'not', 'case'].includes(tag)) columnsRead(v, out);
      // val, now_plus and the cross-table conditions read no column of this row.
    }
  }
  return out;
}

/** The columns a top-level `expired_at` condition tests (to bound a scan on the server). */
function expiring(cond) {
  const all = cond && Array.isArray(cond.and) ? cond.and : [cond];
  return all.filter((c) => c && typeof c === 'object' && typeof c.expired_at === 'string').map((c) => c.expired_at);
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
 * `new SupabaseLeaseStore(client, table = 'agent_runs')` (the reference's form), or
 * `new SupabaseLeaseStore({client, now?, tables?, casRetries = 5, pageSize = 1000})`.
 */
class SupabaseLeaseStore {
  constructor(clientOrOptions, table) {
    const positional = clientOrOptions !== null && typeof clientOrOptions === 'object' && typeof clientOrOptions.from === 'function';
    if (!positional && (clientOrOptions === null || typeof clientOrOptions !== 'object')) {
      throw typeError(`SupabaseLeaseStore: a supabase-js client (with from()) or options {client} required, got ${describe(clientOrOptions)}`);
    }
    if (table !== undefined && (!positional || typeof table !== 'string' || table === '')) {
      throw typeError(
        positional
          ? `SupabaseLeaseStore: table must be a non-empty string, got ${describe(table)}`
          : 'SupabaseLeaseStore: a table name goes with a client: new SupabaseLeaseStore(client, table)',
      );
    }
    const options = positional ? { client: clientOrOptions, tables: { runs: table } } : clientOrOptions;
    knownKeys('SupabaseLeaseStore options', options, STORE_OPTIONS);
    const { client, now, tables = {}, casRetries = defaults.casRetries, pageSize = 1000 } = options;
    if (client === null || typeof client !== 'object' || typeof client.from !== 'function') {
      throw typeError(`SupabaseLeaseStore: client must be a supabase-js client (with from()), got ${describe(client)}`);
    }
    if (now !== undefined && typeof now !== 'function') throw typeError('SupabaseLeaseStore: now must be a function returning a Date or milliseconds');
    if (tables === null || typeof tables !== 'object') throw typeError(`SupabaseLeaseStore: tables must be an object, got ${describe(tables)}`);
    knownKeys('SupabaseLeaseStore tables', tables, TABLES, 'table');
    for (const [k, v] of Object.entries(tables)) {
      if (v !== undefined && (typeof v !== 'string' || v === '')) throw typeError(`SupabaseLeaseStore: tables.${k} must be a non-empty string, got ${describe(v)}`);
    }
    int('SupabaseLeaseStore: casRetries', casRetries, 1, MAX_CAS_RETRIES);
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 100_000) throw typeError('pageSize must be an integer in 1..=100000');
    const runSource = options[RUN_SOURCE];
    if (runSource !== undefined && typeof runSource !== 'function') throw typeError('SupabaseLeaseStore: the run source must be a function');
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
    // The runs table as the LeaseStore contract the core drives for run writes.
    this._runMethods = {
      getRun: (runId) => this._readRun(runId),
      conditionalUpdate: (runId, patch, conditions) => this._writeRun(runId, patch, conditions),
      now: () => this._clock(),
    };
    this._runSource = runSource ?? (async (runId) => {
      const at = this._clock();
      return { run: await this._readRun(runId), now: at };
    });
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
    return simulate(request, snapshot, now);
  }

  /** The store contract: one StoreRequest → its StoreAnswer (lib/store-request.cjs). */
  execute(request) {
    let req = request;
    if (typeof request === 'string') {
      try {
        req = JSON.parse(request);
      } catch {
        req = request; // executeRequest reports it
      }
    }
    // The stale-dispatch scan keeps the reference ledger's one query (see _scanIntents).
    if (req !== null && typeof req === 'object' && req.op === 'scan_intents') {
      if (typeof request !== 'string') requestJson('SupabaseLeaseStore', req);
      return this._scanIntents(req);
    }
    return executeRequest(this, 'SupabaseLeaseStore', req);
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

  /**
   * A run write: the core's own calls over the runs table (reference-store.cjs), as for a
   * user's LeaseStore. It decides the compare-and-set (the columns its decision read, as
   * read) and writes renew, verifyFence and a release to a final status with one update and
   * no read before it. A write conditioned on the owner's instance reads the instances too.
   */
  async _updateRun(req) {
    if (mentions(req.when, 'owner_instance_dead')) return this._updateRunOnInstances(req);
    const calls = referenceCalls(this._runMethods, { casRetries: this.casRetries, timeoutMs: NO_DEADLINE, who: 'SupabaseLeaseStore' });
    return JSON.parse(await referenceRequest(calls, JSON.stringify(req)));
  }

  /** `conditionalUpdate` of the LeaseStore contract: the row written, or null on a miss. */
  async _writeRun(runId, patch, conditions) {
    const eq = conditions.eq ?? {};
    let q = cas(this.from('runs').update(patch).eq('id', runId), eq, Object.keys(eq));
    for (const [col, vs] of Object.entries(conditions.in ?? {})) q = q.in(col, vs);
    try {
      return await this._run(`update ${this.tables.runs}`, q.select('*').maybeSingle());
    } catch (e) {
      // Not a UUID: no such run (as in PostgreSQL), when the id cannot be read either;
      // otherwise the write's own error.
      if (e.pgCode === '22P02' && (await this._readRun(runId)) === null) return null;
      throw e;
    }
  }

  /** A run write conditioned on its owner's instance: decided on both tables' rows. */
  async _updateRunOnInstances(req) {
    const reads = [...columnsRead(req.set, columnsRead(req.when))];
    for (let attempt = 0; attempt < this.casRetries; attempt += 1) {
      const now = this._clock();
      const raw = await this._readRun(req.run_id);
      if (!raw) return runWritten(req, new Date(now).toISOString(), null, null);
      const sim = decideRunWrite(this, req, { runs: [raw], instances: await this._all('instances') }, now);
      const { before, after } = sim.reply;
      if (!after) return runWritten(req, sim.now, null, null);
      const patch = assigned(req, raw, after, 'updated_at');
      const written = await this._run(
        `update ${this.tables.runs}`,
        cas(this.from('runs').update(patch).eq('id', req.run_id), raw, reads).select('*').maybeSingle(),
      );
      if (written) return runWritten(req, sim.now, before, after);
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
    // What a new run starts with: the core's defaults (the table supplies the id).
    const { required_capabilities, status, retries, approval_state, visibility } = runRow(req.idempotency_key, now);
    const { data, error } = await this.from('runs')
      .insert({
        assignment_id: randomUUID(),
        objective: req.objective,
        required_capabilities,
        status,
        retries,
        approval_state,
        visibility,
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

  /** One effect_intents row as stored (raw database text), or null. */
  async _readIntent(runId, effectKey) {
    const rows = await this._run(
      `read ${this.tables.intents}`,
      this.from('intents').select('*').eq('run_id', runId).eq('effect_key', effectKey).limit(1),
    );
    return rows && rows.length > 0 ? rows[0] : null;
  }

  /** Dispatched intents whose fence expired, in the reference ledger's query shape. */
  async _scanIntents(req) {
    const now = this._clock();
    let q = this.from('intents').select('*');
    for (const [op, col, v] of coarse(req.when)) q = q[op](col, v);
    // `lt now + 1 ms` is `<= now` on millisecond timestamps (the one expiry rule).
    for (const col of expiring(req.when)) q = q.lt(col, new Date(now + 1).toISOString());
    if (typeof q.order === 'function') q = q.order('fence_expires_at', { ascending: true });
    const rows = await this._run(`scan ${this.tables.intents}`, q.limit(req.limit));
    return this._simulate(req, { intents: rows ?? [] }, now);
  }

  /** Appends a dispatch-log entry: best-effort, as in the reference (see the top of this file). */
  async _log({ run_id, effect_key, attempt, outcome, at, detail }) {
    try {
      await this.from('log').insert({ run_id, effect_key, attempt, outcome, at, detail: detail ?? null }).select('id').maybeSingle();
    } catch {
      // The transition it records already happened; a missing audit entry must not undo that.
    }
  }

  async _claimIntent(req) {
    const now = this._clock();
    const { error } = await this.from('intents')
      .insert({
        run_id: req.run_id,
        effect_key: req.effect_key,
        state: 'intent',
        channel: req.channel,
        payload_digest: req.payload_digest,
        attempts: 0,
        created_at: new Date(now).toISOString(),
      })
      .select('run_id')
      .maybeSingle();
    let existing = [];
    if (error) {
      if (error.code !== '23505') throw new RestError(`insert ${this.tables.intents}`, error);
      const row = await this._readIntent(req.run_id, req.effect_key);
      if (!row) throw new RestError(`insert ${this.tables.intents}`, error);
      existing = [row];
    }
    // The core's claim on what the table holds: the row just inserted, or the one that was there.
    const sim = this._simulate(req, { intents: existing }, now);
    const { claimed } = sim.reply;
    await this._log({
      run_id: req.run_id,
      effect_key: req.effect_key,
      attempt: 0,
      outcome: claimed ? 'claimed' : 'deduped',
      at: sim.now,
      detail: claimed ? { channel: req.channel } : null,
    });
    return sim;
  }

  async _updateIntent(req) {
    const reads = [...columnsRead(req.set, columnsRead(req.when))];
    for (let attempt = 0; attempt < this.casRetries; attempt += 1) {
      let now = this._clock();
      const raw = await this._readIntent(req.run_id, req.effect_key);
      if (!raw) return { now: new Date(now).toISOString(), reply: { kind: 'intent', intent: null } };
      let runs = [];
      if (mentions(req.when, 'run_held_by')) {
        const held = await this._runSource(req.run_id);
        runs = held.run ? [held.run] : [];
        now = held.now; // whether the token holds the run is decided by the run's store clock
      }
      const sim = this._simulate(req, { intents: [raw], runs }, now);
      const after = sim.reply.intent;
      if (!after) return sim;
      const patch = assigned(req, raw, after, 'state');
      const written = await this._run(
        `update ${this.tables.intents}`,
        cas(this.from('intents').update(patch).eq('run_id', req.run_id).eq('effect_key', req.effect_key), raw, reads)
          .select('run_id')
          .maybeSingle(),
      );
      if (written) {
        if (req.log) await this._log({ ...req.log, at: sim.now });
        return sim;
      }
      // The row changed since the read: decide again on the new row.
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

module.exports = { SupabaseLeaseStore, RUN_SOURCE };
