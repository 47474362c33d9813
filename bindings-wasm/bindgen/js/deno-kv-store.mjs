// DenoKvLeaseStore: heart-fleet's edge-native store, over Deno KV (`Deno.openKv()`).
//
// Each store request is decided by the core's own evaluator (`simulateRequest`, the one
// the memory store runs) on the rows the request touches, read with their versionstamps,
// and written back with ONE atomic commit whose checks cover every row the decision read
// (`kv.atomic().check({key, versionstamp})…set(…).commit()`). A failed check means another
// writer got there first: the request is read and decided again, at most `casRetries`
// times, then it fails (store-unavailable). Exclusion therefore holds across isolates and
// regions; it never rests on a read that was not checked at commit.
//
// Key layout, under `prefix` (default ["heart-fleet"]):
//
//   [...prefix, "runs", runId]                       the agent_runs row (the core's JSON form)
//   [...prefix, "runs_by_key", idempotencyKey]       runId: the unique index ensure_run and
//                                                    seeding go through (a reused key fails)
//   [...prefix, "intents", runId, effectKey]         the effect_intents row
//   [...prefix, "log_seq", runId, effectKey]         how many dispatch-log entries the effect has
//   [...prefix, "log", runId, effectKey, seq]        outbox_dispatch_log entry seq (1, 2, …)
//   [...prefix, "instances", instanceId]             the agent_instances row
//
// What that costs and what it cannot do (compare PgLeaseStore, one SQL statement each):
//  * acquire / renew / release / verify and every intent transition: one read (two or three
//    keys) and one atomic commit. A claim or a logged intent write appends its dispatch-log
//    entry in the SAME commit (unlike the Supabase store).
//  * Scans (the TTL sweep, the liveness sweep, listRuns, the stale-intent scan) list the
//    whole `runs` / `intents` / `instances` prefix and filter in the worker: O(rows) reads
//    per sweep. Fine for operational tables (thousands of runs); a fleet with millions of
//    runs wants a secondary index by expiry, which this layout leaves room for.
//  * The clock is the worker's (`Date.now()`, or the `now` option), as with the Supabase
//    store: isolates whose clocks are skewed disagree about expiry. Deno Deploy's clocks are
//    synchronized; keep leases long relative to any skew.
//  * Conditions across rows (an intent's run still held by a token; a run's owner being a
//    dead instance) are checked atomically: the other row's versionstamp is in the commit.
//  * Deno KV's own limits apply: a row must fit in one value (64 KiB: mind large `budget` or
//    `metadata` JSON) and a key in 2 KiB (run ids, idempotency and effect keys are key parts).
//    A write over them fails, which is a store failure (store-unavailable), not a miss.
//  * Errors are errors: a KV failure (closed database, quota, network) rejects, and the
//    operation ends with store-unavailable, never "not found" or a collision.

import native from './native-slot.cjs';
// The Node package's coded errors and argument descriptions, bundled with its driver.
import { codedError, typeError, describe, int } from '../../../bindings-node/lib/util.cjs';
import contract from '../../../bindings-node/lib/contract.cjs';
// Rows with the core's defaults (RunRow::seeded, InstanceRow::registered, through the wasm module), bundled with the driver.
import { runRow, instanceDefaults } from '../../../bindings-node/lib/rows.cjs';
// The request dispatch it shares with SupabaseLeaseStore.
import { executeRequest, mentions, decideRunWrite, runWritten } from '../../../bindings-node/lib/store-request.cjs';

const U32 = 2 ** 32 - 1;

/** A coded HeartFleetError: store-unavailable unless `code` says otherwise. */
function storeError(message, code = 'store-unavailable') {
  return codedError(code, message);
}

function iso(ms) {
  return new Date(ms).toISOString();
}

function intentDefaults(at) {
  return {
    state: 'intent',
    channel: 'internal',
    payload_digest: '',
    fence_owner: null,
    fence_expires_at: null,
    fence_epoch: null,
    external_ref: null,
    attempts: 0,
    last_error: null,
    created_at: at,
    committed_at: null,
  };
}

function newUuid() {
  if (globalThis.crypto && typeof globalThis.crypto.randomUUID === 'function') return globalThis.crypto.randomUUID();
  throw storeError('DenoKvLeaseStore: crypto.randomUUID() is not available in this runtime');
}

/**
 * A heart-fleet store over Deno KV. `new DenoKvLeaseStore({kv, prefix?, now?, casRetries?})`
 * with `kv` from `await Deno.openKv(path?)`, or `await DenoKvLeaseStore.open(path?, options)`
 * (which also closes it on `close()`). See the key layout and the costs at the top of this file.
 */
export class DenoKvLeaseStore {
  constructor(options) {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw typeError(`DenoKvLeaseStore: options {kv} required, got ${describe(options)}`);
    }
    const { kv, prefix = ['heart-fleet'], now, casRetries = contract.defaults.casRetries } = options;
    if (kv === null || typeof kv !== 'object' || typeof kv.atomic !== 'function' || typeof kv.get !== 'function') {
      throw typeError(`DenoKvLeaseStore: kv must be a Deno.Kv (await Deno.openKv()), got ${describe(kv)}`);
    }
    if (!Array.isArray(prefix) || prefix.some((p) => typeof p !== 'string' && typeof p !== 'number')) {
      throw typeError('DenoKvLeaseStore: prefix must be an array of strings or numbers');
    }
    if (now !== undefined && typeof now !== 'function') {
      throw typeError('DenoKvLeaseStore: now must be a function returning a Date or milliseconds');
    }
    // The core's bound and default, as for every store that re-decides a lost write.
    int('DenoKvLeaseStore: casRetries', casRetries, 1, contract.maxCasRetries);
    this.kv = kv;
    this.prefix = Object.freeze([...prefix]);
    this._now = now ?? (() => Date.now());
    this.casRetries = casRetries;
    this._owned = false;
  }

  /** Opens `Deno.openKv(path)` (`:memory:` for a private in-memory database) and a store over it. */
  static async open(path, options = {}) {
    if (typeof Deno === 'undefined' || typeof Deno.openKv !== 'function') {
      throw storeError('DenoKvLeaseStore.open: Deno.openKv is not available (run Deno with --unstable-kv)');
    }
    const kv = await Deno.openKv(path);
    const store = new DenoKvLeaseStore({ ...options, kv });
    store._owned = true;
    return store;
  }

  /** Closes the database when `open` opened it. */
  close() {
    if (this._owned) this.kv.close();
  }

  _clock() {
    const v = this._now();
    const ms = v instanceof Date ? v.getTime() : Number(v);
    if (!Number.isFinite(ms)) throw storeError('DenoKvLeaseStore: the clock returned an invalid time');
    return Math.floor(ms);
  }

  _key(...parts) {
    return [...this.prefix, ...parts];
  }

  _simulate(request, snapshot, now) {
    let text;
    try {
      text = native.simulateRequest(JSON.stringify(request), JSON.stringify(snapshot), now);
    } catch (e) {
      throw storeError(e && e.message ? e.message : String(e), e && typeof e.code === 'string' ? e.code : 'store-protocol');
    }
    return JSON.parse(text);
  }

  async _list(...parts) {
    const out = [];
    for await (const entry of this.kv.list({ prefix: this._key(...parts) })) out.push(entry);
    return out;
  }

  async _values(...parts) {
    return (await this._list(...parts)).map((e) => e.value);
  }

  _lost(what) {
    return storeError(`DenoKvLeaseStore: ${what} kept changing (the atomic check lost ${this.casRetries} times)`);
  }

  /** The store contract: one StoreRequest (object or JSON text) → a Promise of its StoreAnswer. */
  execute(request) {
    return executeRequest(this, 'DenoKvLeaseStore', request);
  }

  async _readRun(id) {
    return (await this.kv.get(this._key('runs', id))).value;
  }

  /** Every row of `table` ('runs', 'intents' or 'instances'): the whole prefix. */
  _scan(table) {
    return this._values(table);
  }

  _readLog(runId, effectKey) {
    return this._values('log', runId, effectKey);
  }

  async _upsertInstance(req) {
    const sim = this._simulate(req, {}, this._clock());
    const row = sim.reply.instances[0];
    await this.kv.set(this._key('instances', row.instance_id), row);
    return sim;
  }

  async _updateRun(req) {
    const key = this._key('runs', req.run_id);
    for (let attempt = 0; attempt < this.casRetries; attempt += 1) {
      const now = this._clock();
      const entry = await this.kv.get(key);
      if (!entry.value) return runWritten(req, iso(now), null, null);
      // A liveness reclaim depends on the owner's instance row: read it, and check it at commit.
      const owner = mentions(req.when, 'owner_instance_dead') && entry.value.lease_owner ? entry.value.lease_owner : null;
      const inst = owner === null ? null : await this.kv.get(this._key('instances', owner));
      const snapshot = { runs: [entry.value], instances: inst && inst.value ? [inst.value] : [] };
      const sim = decideRunWrite(this, req, snapshot, now);
      const { before, after } = sim.reply;
      if (!after) return runWritten(req, sim.now, null, null);
      const op = this.kv.atomic().check(entry);
      if (inst) op.check(inst);
      const res = await op.set(key, after).commit();
      if (res.ok) return runWritten(req, sim.now, before, after);
    }
    throw this._lost(`run ${req.run_id}`);
  }

  async _ensureRun(req) {
    const indexKey = this._key('runs_by_key', req.idempotency_key);
    for (let attempt = 0; attempt < this.casRetries; attempt += 1) {
      const now = this._clock();
      const index = await this.kv.get(indexKey);
      if (index.value !== null) {
        const { value } = await this.kv.get(this._key('runs', index.value));
        if (value) return { now: iso(now), reply: { kind: 'ensured', run: value, created: false } };
        throw storeError(`DenoKvLeaseStore: the index names run ${index.value}, which is missing`);
      }
      const sim = this._simulate(req, {}, now);
      // The evaluator's memory store numbers its ids; the row id comes from the store.
      const run = { ...sim.reply.run, id: newUuid(), assignment_id: newUuid() };
      const runKey = this._key('runs', run.id);
      const res = await this.kv
        .atomic()
        .check({ key: indexKey, versionstamp: null })
        .check({ key: runKey, versionstamp: null })
        .set(indexKey, run.id)
        .set(runKey, run)
        .commit();
      if (res.ok) return { now: sim.now, reply: { kind: 'ensured', run, created: true } };
      // Lost the race: the next round finds the winner's row.
    }
    throw this._lost(`the run of ${req.idempotency_key}`);
  }

  async _claimIntent(req) {
    const intentKey = this._key('intents', req.run_id, req.effect_key);
    const seqKey = this._key('log_seq', req.run_id, req.effect_key);
    for (let attempt = 0; attempt < this.casRetries; attempt += 1) {
      const now = this._clock();
      const [intent, seq] = await this.kv.getMany([intentKey, seqKey]);
      const n = (seq.value ?? 0) + 1;
      const claimed = intent.value === null;
      const row = claimed ? this._simulate(req, {}, now).reply.intent : intent.value;
      const entry = {
        run_id: req.run_id,
        effect_key: req.effect_key,
        attempt: 0,
        outcome: claimed ? 'claimed' : 'deduped',
        at: iso(now),
        detail: claimed ? { channel: req.channel } : null,
      };
      const op = this.kv.atomic().check(intent).check(seq);
      if (claimed) op.set(intentKey, row);
      const res = await op.set(seqKey, n).set(this._key('log', req.run_id, req.effect_key, n), entry).commit();
      if (res.ok) return { now: iso(now), reply: { kind: 'claim', intent: row, claimed } };
    }
    throw this._lost(`intent ${req.effect_key}`);
  }

  async _updateIntent(req) {
    const intentKey = this._key('intents', req.run_id, req.effect_key);
    const seqKey = this._key('log_seq', req.run_id, req.effect_key);
    const runKey = this._key('runs', req.run_id);
    const needsRun = mentions(req.when, 'run_held_by');
    for (let attempt = 0; attempt < this.casRetries; attempt += 1) {
      const now = this._clock();
      const keys = [intentKey, seqKey];
      if (needsRun) keys.push(runKey);
      const [intent, seq, run] = await this.kv.getMany(keys);
      if (intent.value === null) return { now: iso(now), reply: { kind: 'intent', intent: null } };
      const snapshot = { intents: [intent.value], runs: run && run.value ? [run.value] : [] };
      const sim = this._simulate(req, snapshot, now);
      const after = sim.reply.intent;
      if (!after) return sim;
      const op = this.kv.atomic().check(intent);
      if (run) op.check(run);
      op.set(intentKey, after);
      if (req.log) {
        const n = (seq.value ?? 0) + 1;
        op.check(seq)
          .set(seqKey, n)
          .set(this._key('log', req.run_id, req.effect_key, n), { ...req.log, at: sim.now });
      }
      const res = await op.commit();
      if (res.ok) return sim;
    }
    throw this._lost(`intent ${req.effect_key}`);
  }

  async _updateInstances(req) {
    const now = this._clock();
    const entries = await this._list('instances');
    const sim = this._simulate(req, { instances: entries.map((e) => e.value) }, now);
    const written = [];
    for (const after of sim.reply.instances) {
      const entry = entries.find((e) => e.value.instance_id === after.instance_id);
      // An instance that changed since the read (it heartbeated) is not written by this request.
      const res = await this.kv.atomic().check(entry).set(entry.key, after).commit();
      if (res.ok) written.push(after);
    }
    return { now: sim.now, reply: { kind: 'instances', instances: written } };
  }

  // ---- seeding and inspection (tests, migrations from another store, operators) ----

  /**
   * Writes rows as given (every column, timestamps included), after the core has checked
   * and normalized them: `{runs?, intents?, instances?}`. Missing columns take the schema's
   * defaults (as MemoryLeaseStore.insert does; timestamps default to the clock). A run whose
   * idempotency key another run already uses is refused (code `invalid-input`).
   */
  async seed(rows) {
    if (rows === null || typeof rows !== 'object') throw typeError('DenoKvLeaseStore.seed: {runs?, intents?, instances?} required');
    const now = this._clock();
    const at = iso(now);
    const object = (what, v) => {
      if (v === null || typeof v !== 'object' || Array.isArray(v)) throw typeError(`DenoKvLeaseStore.seed: a ${what} row must be an object, got ${describe(v)}`);
      return v;
    };
    for (const raw of rows.runs ?? []) {
      const { id } = object('run', raw);
      if (typeof id !== 'string' || id === '') throw typeError(`DenoKvLeaseStore.seed: run.id must be a non-empty string, got ${describe(id)}`);
      const full = { ...runRow(id, at), ...raw };
      const run = this._simulate({ op: 'read_run', run_id: id }, { runs: [full] }, now).reply.run;
      const indexKey = this._key('runs_by_key', run.idempotency_key);
      const index = await this.kv.get(indexKey);
      if (index.value !== null && index.value !== run.id) {
        throw typeError(`Idempotency key collision: ${run.idempotency_key}`);
      }
      await this.kv.atomic().check(index).set(indexKey, run.id).set(this._key('runs', run.id), run).commit();
    }
    const intents = (rows.intents ?? []).map((r) => ({ ...intentDefaults(at), ...object('intent', r) }));
    const all = { op: 'scan_intents', when: 'true', limit: U32 };
    for (const row of this._simulate(all, { intents }, now).reply.intents) {
      await this.kv.set(this._key('intents', row.run_id, row.effect_key), row);
    }
    const instances = (rows.instances ?? []).map((r) => ({ ...instanceDefaults(at), ...object('instance', r) }));
    for (const row of this._simulate({ op: 'scan_instances', when: 'true' }, { instances }, now).reply.instances) {
      await this.kv.set(this._key('instances', row.instance_id), row);
    }
  }

  /** Every run (key order). */
  async runs() {
    return this._values('runs');
  }

  /** One run, or null. */
  async getRun(runId) {
    if (typeof runId !== 'string' || runId === '') throw typeError('getRun: runId must be a non-empty string');
    return (await this.kv.get(this._key('runs', runId))).value;
  }

  /** Every intent (key order). */
  async intents() {
    return this._values('intents');
  }

  /** Every instance (key order). */
  async instances() {
    return this._values('instances');
  }

  /** The dispatch log entries of every effect, by effect, in order. */
  async dispatchLog() {
    return this._values('log');
  }

  /** Deletes every key under the prefix (tests). */
  async clear() {
    for (const e of await this._list()) await this.kv.delete(e.key);
  }
}
