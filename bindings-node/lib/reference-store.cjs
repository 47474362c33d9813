'use strict';
// A user's own store written to the TypeScript package's LeaseStore contract:
//
//   getRun(runId) -> row | null
//   conditionalUpdate(runId, updates, {eq, in, lt}) -> updated row | null   (atomic)
//   findExpiredLeases(nowIso, limit) -> rows
//   now() -> Date
//
// each sync or async. HeartFleet accepts such an object as its store: every store request
// of an operation is decided by the core's own evaluator on the row getRun returned
// (native.decideRunWrite), and the result is written back with conditionalUpdate conditioned
// (eq) on every column the decision read, with the values as read: a compare-and-set. When the row
// changed in between, the write misses and the request is decided again on a fresh read, at
// most `casRetries` times; then the request fails (store-unavailable, "kept changing"),
// never a silent miss. Scans of expired leases go through findExpiredLeases.
//
// What this contract cannot guarantee, unlike a store that executes requests itself:
//  * The clock is the store's now(), read by the worker: when every worker's store reads its
//    own machine's clock, skewed clocks disagree about expiry (a worker running fast can take
//    over a lease that is still live by its holder's clock). Keep clocks synchronized (NTP)
//    and leases long relative to the skew, or make now() read the database's clock.
//  * A request is a read followed by a conditional write, so contention costs re-decisions.
//  * findExpiredLeases decides which expired leases a sweep sees: a store that keeps the
//    TypeScript package's strict `expiry < now` misses a lease expiring exactly now (the next
//    sweep takes it); the sweep still reclaims only what the one expiry rule (`<= now`) allows.
//  * Columns the rows do not have and the TypeScript package's schema lacks (fencing_epoch)
//    are neither compared nor written: such a store's tokens carry epoch 0.
//  * Effect intents, instances, run listings and find-or-create have no method in the
//    contract: those requests fail with code invalid-input naming what is missing.

const native = require('./native.cjs');
const { codedError, describe, messageOf, rethrowNative } = require('./util.cjs');
const { executeRequest, simulate } = require('./store-request.cjs');
const { runRow } = require('./rows.cjs');

/** The TypeScript package's LeaseStore methods. */
const LEASE_STORE_METHODS = Object.freeze(['getRun', 'conditionalUpdate', 'findExpiredLeases', 'now']);
const WHO = 'LeaseStore';

/** The names in `methods` that `obj` does not have as functions. */
function missingMethods(obj, methods) {
  if (obj === null || (typeof obj !== 'object' && typeof obj !== 'function')) return [...methods];
  return methods.filter((m) => typeof obj[m] !== 'function');
}

/** Whether `store` implements the TypeScript package's LeaseStore contract. */
function isReferenceStore(store) {
  return missingMethods(store, LEASE_STORE_METHODS).length === 0;
}

function iso(ms) {
  return new Date(ms).toISOString();
}

/**
 * A row as the core takes it: the schema's defaults where the row has no value (or null in
 * a NOT NULL column), Dates as ISO text. Only the schema's columns are kept.
 */
function fillRun(raw, at) {
  const row = runRow(raw.id, at);
  for (const k of Object.keys(row)) {
    const v = raw[k];
    if (v === undefined || (v === null && row[k] !== null)) continue;
    row[k] = v instanceof Date && Number.isFinite(v.getTime()) ? v.toISOString() : v;
  }
  return row;
}

/**
 * The core's compare-and-set decision of an update_run request on the row `raw` (as the
 * user's store returned it), at `ms`: `{now, before, after, expect, patch}`.
 */
function decide(req, raw, ms) {
  try {
    const present = JSON.stringify(Object.keys(raw).filter((k) => raw[k] !== undefined));
    return JSON.parse(native.decideRunWrite(JSON.stringify(req), JSON.stringify(fillRun(raw, iso(ms))), present, ms));
  } catch (e) {
    return rethrowNative(e);
  }
}

function unservable(what) {
  return codedError(
    'invalid-input',
    `a store with only the LeaseStore methods (${LEASE_STORE_METHODS.join(', ')}) cannot ${what}: ` +
      'give HeartFleet a store with execute(request) (MemoryLeaseStore, PgLeaseStore, SupabaseLeaseStore or your own)',
  );
}

function protocol(message) {
  return codedError('store-protocol', `${WHO}.${message}`);
}

/** A top-level conjunct `expired_at lease_expires_at`: every row the scan wants has an expired lease. */
function isExpiredScan(when) {
  const all = when && Array.isArray(when.and) ? when.and : [when];
  return all.some((c) => c && c.expired_at === 'lease_expires_at') && !JSON.stringify(when).includes('"owner_instance_dead"');
}

/**
 * The store requests of one operation over a LeaseStore object (make one per operation:
 * it remembers the rows the operation read, so a decision that needs the row once reads
 * it once). `timeoutMs`: after that long, a request makes no further calls to the store
 * (the driver has given up on it already).
 */
class ReferenceStoreRequests {
  constructor(store, { casRetries, timeoutMs }) {
    this.target = store;
    this.casRetries = casRetries;
    this.timeoutMs = timeoutMs;
    // runId -> {raw, ms}: a row this operation read and the clock it was read at (a missed
    // decision's row explains the miss; a scanned row is the read of the write that follows).
    this._known = new Map();
  }

  /** The store contract: one StoreRequest → its StoreAnswer (lib/store-request.cjs). */
  async execute(request) {
    this._request = request;
    this._started = Date.now();
    const op = request && typeof request === 'object' ? request.op : undefined;
    // The row this operation already read for this run, if any (see `_known`).
    this._given = op === 'read_run' || op === 'update_run' ? this._take(request.run_id) : null;
    this._ms = this._given ? this._given.ms : await this._readClock();
    return executeRequest(this, WHO, request);
  }

  _take(runId) {
    const known = this._known.get(runId) ?? null;
    this._known.delete(runId);
    return known;
  }

  /** Calls one method of the user's store; its failure is a store failure (no code). */
  async _call(method, ...args) {
    if (this.timeoutMs !== undefined && Date.now() - this._started >= this.timeoutMs) {
      throw new Error(`${WHO}.${method}: not called, the request ran out of time (storeTimeoutMs ${this.timeoutMs})`);
    }
    try {
      return await this.target[method](...args);
    } catch (e) {
      throw new Error(`${WHO}.${method}: ${messageOf(e)}`);
    }
  }

  async _readClock() {
    const v = await this._call('now');
    const ms = v instanceof Date ? v.getTime() : v;
    if (typeof ms !== 'number' || !Number.isFinite(ms)) throw protocol(`now() returned ${describe(v)}, not a valid Date`);
    return Math.floor(ms);
  }

  _clock() {
    return this._ms;
  }

  _simulate(request, snapshot, ms) {
    return simulate(request, snapshot, ms);
  }

  /** A row (or null) as the user's method returned it, checked. */
  _checkedRow(method, v, runId) {
    if (v === null || v === undefined) return null;
    if (typeof v !== 'object' || Array.isArray(v)) throw protocol(`${method} returned ${describe(v)}, not a row or null`);
    if (v.id !== undefined && v.id !== runId) throw protocol(`${method} returned run ${JSON.stringify(v.id)} for run ${JSON.stringify(runId)}`);
    return v.id === undefined ? { ...v, id: runId } : v;
  }

  async _fetch(runId) {
    return this._checkedRow('getRun', await this._call('getRun', runId), runId);
  }

  async _readRun(runId) {
    const raw = this._given ? this._given.raw : await this._fetch(runId);
    return raw && fillRun(raw, iso(this._ms));
  }

  async _scan(table, when) {
    if (table !== 'runs') throw unservable(table === 'intents' ? 'store effect intents (DurableEffectLedger, sendOnce, reconcileOutbox)' : 'store agent instances (use LivenessReclaimer with a LivenessStore)');
    if (!isExpiredScan(when)) throw unservable(JSON.stringify(when).includes('"owner_instance_dead"') ? 'find the runs of dead instances (use LivenessReclaimer with a LivenessStore)' : 'list runs');
    const rows = await this._call('findExpiredLeases', iso(this._ms), this._request.limit);
    if (!Array.isArray(rows)) throw protocol(`findExpiredLeases returned ${describe(rows)}, not an array of rows`);
    return rows.map((raw) => {
      if (raw === null || typeof raw !== 'object' || typeof raw.id !== 'string') throw protocol(`findExpiredLeases returned ${describe(raw)} among its rows`);
      this._known.set(raw.id, { raw, ms: this._ms });
      return fillRun(raw, iso(this._ms));
    });
  }

  /**
   * One conditional write: decide on the row with the core's evaluator, then write the
   * columns the decision changed, conditioned on every column it read (as read).
   */
  async _updateRun(req) {
    let known = this._given;
    for (let attempt = 0; attempt < this.casRetries; ) {
      const raw = known ? known.raw : await this._fetch(req.run_id);
      const at = iso(this._ms);
      const d = raw && decide(req, raw, this._ms);
      if (!(d && d.after) && known) {
        // A row read earlier in the operation proves only hits: decide a miss on a fresh read.
        known = null;
        this._ms = await this._readClock();
        continue;
      }
      if (!(d && d.after)) {
        // The read that follows a miss (to explain it) is answered with this one.
        this._known.set(req.run_id, { raw, ms: this._ms });
        return { now: at, reply: { kind: 'run_write', before: null, after: null } };
      }
      const eq = {};
      for (const c of d.expect) eq[c] = raw[c];
      const written = this._checkedRow('conditionalUpdate', await this._call('conditionalUpdate', req.run_id, d.patch, { eq }), req.run_id);
      if (written) return { now: d.now, reply: { kind: 'run_write', before: req.want_before ? d.before : null, after: fillRun(written, at) } };
      // The row changed since the read: decide again on a fresh one.
      known = null;
      attempt += 1;
      if (attempt < this.casRetries) this._ms = await this._readClock();
    }
    throw new Error(`${WHO}: run ${req.run_id} kept changing (compare-and-set lost ${this.casRetries} times)`);
  }

  _readLog() {
    throw unservable('read the outbox dispatch log (DurableEffectLedger)');
  }

  _ensureRun() {
    throw unservable('create runs (ensureResourceRun)');
  }

  _claimIntent() {
    throw unservable('store effect intents (DurableEffectLedger, sendOnce)');
  }

  _updateIntent() {
    throw unservable('store effect intents (DurableEffectLedger, sendOnce, reconcileOutbox)');
  }

  _upsertInstance() {
    throw unservable('store agent instances (registerInstance; use LivenessReclaimer with a LivenessStore)');
  }

  _updateInstances() {
    throw unservable('store agent instances (heartbeatInstance, the liveness pass; use LivenessReclaimer with a LivenessStore)');
  }
}

module.exports = { LEASE_STORE_METHODS, ReferenceStoreRequests, missingMethods, isReferenceStore, fillRun };
