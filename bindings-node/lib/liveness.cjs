'use strict';
// Instance liveness (agent_instances) and the reference's pure helpers.

const native = require('./native.cjs');
const { HeartFleet, drive, storeKind, leaseStoreGap } = require('./fleet.cjs');
const { missingMethods, fillRun } = require('./reference-store.cjs');
const { instanceDefaults } = require('./rows.cjs');
const { typeError, codedError, opts: optsOf, optInt, describe, messageOf, U32 } = require('./util.cjs');

const { defaults, heldStatuses: HELD_STATUSES } = require('./contract.cjs');

const DEFAULT_LIVENESS_TTL_MS = defaults.livenessTtlMs;
const RECLAIMER_OPTIONS = ['heart', 'store', 'ttlMs', 'maxRetries', 'storeTimeoutMs'];
const PASS_OPTIONS = ['maxReclaimsPerCycle', 'limit'];

function timeOf(name, v) {
  if (v instanceof Date) return v.getTime();
  if (typeof v === 'string') return Date.parse(v);
  if (typeof v === 'number') return v;
  throw typeError(`${name} must be a Date, an ISO string or milliseconds, got ${describe(v)}`);
}

/** The expiry of a run as milliseconds, or null when it has none (`null`, absent or ''). */
function expiryOf(run) {
  const e = run.lease_expires_at;
  return e === null || e === undefined || e === '' ? null : timeOf('lease_expires_at', e);
}

/** `isLeaseExpired(run, now)`: no expiry, or expiry <= now (the core's one expiry rule). */
function isLeaseExpired(run, now) {
  if (run === null || typeof run !== 'object') throw typeError('isLeaseExpired: run must be an object');
  const expiry = expiryOf(run);
  // Without an expiry the rule needs no clock: `now` is not read (as in the reference).
  return expiry === null ? native.leaseExpiredMs(null, 0) : native.leaseExpiredMs(expiry, timeOf('now', now));
}

/** `canAcquire(run, now)`: `ready`, or `leased`/`running` with an expired lease. */
function canAcquire(run, now) {
  if (run === null || typeof run !== 'object') throw typeError('canAcquire: run must be an object');
  const status = typeof run.status === 'string' ? run.status : '';
  // The clock is read only when the answer depends on it (a held run), as in the reference.
  if (!native.canAcquireMs(status, null, 0)) return false; // never acquirable
  if (native.canAcquireMs(status, 1, 0)) return true; // acquirable even under a live lease
  const expiry = expiryOf(run);
  return native.canAcquireMs(status, expiry, expiry === null ? 0 : timeOf('now', now));
}

/** `isInstanceExpired(instance, now, ttlMs = 90000)`: dead, or silent for strictly more than ttlMs. */
function isInstanceExpired(instance, now, ttlMs = DEFAULT_LIVENESS_TTL_MS) {
  if (instance === null || typeof instance !== 'object') throw typeError('isInstanceExpired: instance must be an object');
  const status = typeof instance.status === 'string' ? instance.status : '';
  if (native.instanceExpiredMs(status, 0, 0, 0)) return true; // dead, whatever its clock says
  // Number(): the comparison the reference makes (`now - last > ttlMs`) converts ttlMs so.
  return native.instanceExpiredMs(status, timeOf('last_heartbeat', instance.last_heartbeat), timeOf('now', now), Number(ttlMs));
}

/** The ids of expired instances, in input order. */
function deadInstanceIds(instances, now, ttlMs = DEFAULT_LIVENESS_TTL_MS) {
  if (!Array.isArray(instances)) throw typeError('deadInstanceIds: instances must be an array');
  return instances.filter((i) => isInstanceExpired(i, now, ttlMs)).map((i) => i.instance_id);
}

/** Runs held (`leased`/`running`) by one of `deadIds`. */
function runsLeasedToDeadInstances(runs, deadIds) {
  if (!Array.isArray(runs) || !Array.isArray(deadIds)) throw typeError('runsLeasedToDeadInstances: arrays required');
  const dead = new Set(deadIds);
  return runs.filter(
    (r) => r && r.lease_owner != null && dead.has(r.lease_owner) && HELD_STATUSES.includes(r.status),
  );
}

/** The TypeScript package's LivenessStore methods. */
const LIVENESS_STORE_METHODS = Object.freeze(['now', 'liveInstances', 'markInstancesDead', 'runsOwnedBy', 'reclaimRun']);

function protocol(message) {
  return codedError('store-protocol', `LivenessStore.${message}`);
}

/**
 * One liveness pass over a LivenessStore: it answers the store requests of the core's
 * liveness machine (mark the silent instances dead, scan their runs, recover each run), so
 * the machine keeps the bookkeeping (the summary, `reclaimed` receipts naming the dead
 * owner, the `reclaims` counter). The steps are the TypeScript package's: one `now()` for
 * the pass; a failing liveInstances or runsOwnedBy ends the pass with an `instances` or
 * `runs` error entry; a failing markInstancesDead is ignored; `reclaimRun(id, owner,
 * retries + 1)` answering false or throwing is an error entry for that run.
 */
class LivenessPass {
  constructor(store, ttlMs) {
    this.store = store;
    this.ttlMs = ttlMs;
    this.dead = [];
    this.errors = []; // the pass-ending `instances` / `runs` entries
    this.thrown = new Map(); // runId -> what its reclaimRun threw
    this.runs = new Map(); // runId -> the row runsOwnedBy returned
    this.at = null;
  }

  execute(request) {
    switch (request.op) {
      case 'update_instances':
        return this._markDead();
      case 'scan_runs':
        return this._runsOfDead(request.limit);
      case 'update_run':
        return this._reclaim(request.run_id);
      default:
        throw protocol(`the liveness pass cannot answer ${request.op}`);
    }
  }

  _answer(reply) {
    return { now: this.at, reply };
  }

  async _markDead() {
    const clock = await this.store.now();
    const ms = clock instanceof Date ? clock.getTime() : clock;
    if (typeof ms !== 'number' || !Number.isFinite(ms)) throw protocol(`now() returned ${describe(clock)}, not a valid Date`);
    this.at = new Date(Math.floor(ms)).toISOString();
    let instances;
    try {
      instances = await this.store.liveInstances();
    } catch (e) {
      this.errors.push({ id: 'instances', error: messageOf(e) });
      return this._answer({ kind: 'instances', instances: [] });
    }
    if (!Array.isArray(instances)) throw protocol(`liveInstances returned ${describe(instances)}, not an array`);
    try {
      this.dead = deadInstanceIds(instances, ms, this.ttlMs);
    } catch (e) {
      throw protocol(`liveInstances returned a row that is not an instance: ${e.message}`);
    }
    if (this.dead.length > 0) {
      try {
        await this.store.markInstancesDead(this.dead);
      } catch {
        // As in the TypeScript package: their runs are reclaimed all the same.
      }
    }
    // The machine reads only the ids of the instances it declared dead.
    const rows = this.dead.map((id) => ({ ...instanceDefaults(this.at), instance_id: id, status: 'dead' }));
    return this._answer({ kind: 'instances', instances: rows });
  }

  async _runsOfDead(limit) {
    if (this.dead.length === 0) return this._answer({ kind: 'runs', runs: [] });
    let rows;
    try {
      rows = await this.store.runsOwnedBy(this.dead, limit);
    } catch (e) {
      this.errors.push({ id: 'runs', error: messageOf(e) });
      return this._answer({ kind: 'runs', runs: [] });
    }
    if (!Array.isArray(rows)) throw protocol(`runsOwnedBy returned ${describe(rows)}, not an array of runs`);
    for (const raw of rows) {
      if (raw === null || typeof raw !== 'object' || typeof raw.id !== 'string') throw protocol(`runsOwnedBy returned ${describe(raw)} among its runs`);
      this.runs.set(raw.id, raw);
    }
    return this._answer({ kind: 'runs', runs: rows.map((raw) => fillRun(raw, this.at)) });
  }

  async _reclaim(runId) {
    const raw = this.runs.get(runId);
    const retries = (raw.retries ?? 0) + 1;
    let ok;
    try {
      ok = await this.store.reclaimRun(runId, raw.lease_owner, retries);
    } catch (e) {
      this.thrown.set(runId, messageOf(e));
      ok = false;
    }
    if (typeof ok !== 'boolean') throw protocol(`reclaimRun returned ${describe(ok)}, not a boolean`);
    // What reclaimRun writes: back to ready, the lease cleared, the retries it was given.
    const after = ok ? { ...fillRun(raw, this.at), status: 'ready', lease_owner: null, lease_expires_at: null, retries, updated_at: this.at } : null;
    return this._answer({ kind: 'run_write', before: null, after });
  }

  /** The TypeScript package's summary from the machine's. */
  summary(s) {
    const errors = this.errors.length > 0 ? this.errors : s.errors.map((e) => ({ id: e.runId, error: this.thrown.get(e.runId) ?? e.error }));
    return { deadInstanceIds: s.deadInstanceIds, reclaimedCount: s.reclaimedCount, reclaimedIds: s.reclaimedIds, errors };
  }
}

function isLivenessStore(store) {
  return store !== null && typeof store === 'object' && missingMethods(store, LIVENESS_STORE_METHODS).length === 0;
}

/**
 * The proactive dead-instance reclaimer. `reclaimDeadInstanceRuns({maxReclaimsPerCycle =
 * 200})` → `{deadInstanceIds, reclaimedCount, reclaimedIds, errors: [{id, error}]}`.
 *
 * * `new LivenessReclaimer({heart, ttlMs = 90000})` (or `{store, ttlMs, maxRetries?}` with a
 *   lease store, which makes a private fleet): the instances and runs of the heart's store.
 *   Unlike the reference, every recovery counts toward the retry ceiling, leaves a receipt
 *   and can quarantine (fix 3; the summary's non-enumerable `quarantinedIds`), and instances
 *   declared dead earlier are still swept.
 * * `new LivenessReclaimer({store, ttlMs = 90000, heart?, storeTimeoutMs?})` with a
 *   LivenessStore (`now`, `liveInstances`, `markInstancesDead`, `runsOwnedBy`, `reclaimRun`):
 *   the TypeScript package's pass over that store, plus the retry count (`reclaimRun` gets
 *   `retries + 1`) and, with a `heart`, a `reclaimed` receipt and the `reclaims` counter per
 *   recovered run. reclaimRun can only return a run to `ready`, so this form never
 *   quarantines (there is no `maxRetries`), and like the reference it only finds runs of
 *   instances that liveInstances still lists (the TTL sweep recovers the rest). Every store
 *   call is bounded by `storeTimeoutMs` (the heart's, else 30000).
 */
class LivenessReclaimer {
  constructor(options) {
    if (options === null || typeof options !== 'object') throw typeError('LivenessReclaimer: options {heart} or {store} required');
    const o = optsOf('LivenessReclaimer options', options, RECLAIMER_OPTIONS);
    this.ttlMs = optInt('ttlMs', o.ttlMs, 0, Number.MAX_SAFE_INTEGER, DEFAULT_LIVENESS_TTL_MS);
    if (o.heart !== undefined && !(o.heart instanceof HeartFleet)) throw typeError('LivenessReclaimer: heart must be a HeartFleet');
    if (isLivenessStore(o.store)) {
      if (o.maxRetries !== undefined) throw typeError('LivenessReclaimer: maxRetries cannot apply to a LivenessStore (its reclaimRun cannot quarantine)');
      if (o.heart !== undefined && o.storeTimeoutMs !== undefined) throw typeError("LivenessReclaimer: storeTimeoutMs is the heart's (set it on the HeartFleet)");
      Object.defineProperty(this, 'heart', { value: o.heart ?? null });
      Object.defineProperty(this, '_liveness', { value: o.store });
      // Without a heart, each pass runs on a private fleet whose receipts nobody reads.
      this._fleetOptions = { storeTimeoutMs: o.storeTimeoutMs };
      return;
    }
    if (o.store !== undefined && storeKind(o.store) === null) {
      throw typeError(
        `LivenessReclaimer: store must be a LivenessStore (${LIVENESS_STORE_METHODS.join(', ')}) or a lease store ` +
          `(a MemoryLeaseStore, execute(request), or getRun, conditionalUpdate, findExpiredLeases, now); ` +
          (o.store !== null && typeof o.store === 'object'
            ? `this object lacks ${missingMethods(o.store, LIVENESS_STORE_METHODS).join(', ')} of the LivenessStore, and as a lease store ${leaseStoreGap(o.store)}`
            : `got ${describe(o.store)}`),
      );
    }
    let heart = o.heart;
    if (heart === undefined) {
      if (o.store === undefined) throw typeError('LivenessReclaimer: {heart} or {store} required');
      heart = new HeartFleet({ store: o.store, maxRetries: o.maxRetries, storeTimeoutMs: o.storeTimeoutMs });
    }
    Object.defineProperty(this, 'heart', { value: heart });
  }

  async reclaimDeadInstanceRuns(options) {
    const o = optsOf('reclaimDeadInstanceRuns options', options, PASS_OPTIONS);
    const maxReclaimsPerCycle = o.maxReclaimsPerCycle ?? o.limit;
    if (!this._liveness) {
      const s = await this.heart.reclaimDeadInstanceRuns({ ttlMs: this.ttlMs, maxReclaimsPerCycle });
      // The TypeScript package's reclaimer names a run's error entry `id`.
      s.errors = s.errors.map((e) => ({ id: e.runId, error: e.error }));
      return s;
    }
    const limit = optInt('maxReclaimsPerCycle', maxReclaimsPerCycle, 0, U32);
    const pass = new LivenessPass(this._liveness, this.ttlMs);
    const fleet = this.heart ?? new HeartFleet({ store: pass, maxRetries: null, ...this._fleetOptions });
    const summary = await drive(fleet, 'reclaimDeadInstanceRuns', { ttlMs: this.ttlMs, limit }, undefined, () => pass);
    return pass.summary(summary);
  }

  _instances(what) {
    if (!this._liveness) return null;
    return Promise.reject(typeError(`LivenessReclaimer.${what}: a reclaimer over a LivenessStore has no instance table of its own; use your store's`));
  }

  registerInstance(instanceId, options) {
    return this._instances('registerInstance') ?? this.heart.registerInstance(instanceId, options);
  }

  heartbeat(instanceId) {
    return this._instances('heartbeat') ?? this.heart.heartbeatInstance(instanceId);
  }

  drainInstance(instanceId) {
    return this._instances('drainInstance') ?? this.heart.drainInstance(instanceId);
  }
}

module.exports = {
  DEFAULT_LIVENESS_TTL_MS,
  isLeaseExpired,
  canAcquire,
  isInstanceExpired,
  deadInstanceIds,
  runsLeasedToDeadInstances,
  LivenessReclaimer,
  LIVENESS_STORE_METHODS,
};
