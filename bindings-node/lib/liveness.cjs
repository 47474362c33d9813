'use strict';
// Instance liveness (agent_instances) and the reference's pure helpers.

const { HeartFleet } = require('./fleet.cjs');
const { typeError, opts: optsOf, optInt, describe } = require('./util.cjs');

const DEFAULT_LIVENESS_TTL_MS = 90_000;

function timeOf(name, v) {
  if (v instanceof Date) return v.getTime();
  if (typeof v === 'string') return Date.parse(v);
  if (typeof v === 'number') return v;
  throw typeError(`${name} must be a Date, an ISO string or milliseconds, got ${describe(v)}`);
}

/** `isLeaseExpired(run, now)`: no expiry, or expiry <= now (the one expiry rule). */
function isLeaseExpired(run, now) {
  if (run === null || typeof run !== 'object') throw typeError('isLeaseExpired: run must be an object');
  const e = run.lease_expires_at;
  if (e === null || e === undefined || e === '') return true;
  return timeOf('lease_expires_at', e) <= timeOf('now', now);
}

/** `canAcquire(run, now)`: `ready`, or `leased`/`running` with an expired lease. */
function canAcquire(run, now) {
  if (run === null || typeof run !== 'object') throw typeError('canAcquire: run must be an object');
  if (run.status === 'ready') return true;
  return (run.status === 'leased' || run.status === 'running') && isLeaseExpired(run, now);
}

/** `isInstanceExpired(instance, now, ttlMs = 90000)`: dead, or silent for strictly more than ttlMs. */
function isInstanceExpired(instance, now, ttlMs = DEFAULT_LIVENESS_TTL_MS) {
  if (instance === null || typeof instance !== 'object') throw typeError('isInstanceExpired: instance must be an object');
  if (instance.status === 'dead') return true;
  return timeOf('now', now) - timeOf('last_heartbeat', instance.last_heartbeat) > ttlMs;
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
    (r) => r && r.lease_owner != null && dead.has(r.lease_owner) && (r.status === 'leased' || r.status === 'running'),
  );
}

/**
 * The proactive dead-instance reclaimer. `new LivenessReclaimer({heart, ttlMs = 90000})`
 * (or `{store, ttlMs, maxRetries?}`, which makes a private fleet).
 * `reclaimDeadInstanceRuns({maxReclaimsPerCycle = 200})` → `{deadInstanceIds,
 * reclaimedCount, reclaimedIds, quarantinedIds, errors}`. Unlike the reference, every
 * recovery counts toward the retry ceiling and leaves a receipt (fix 3), and instances
 * declared dead earlier are still swept.
 */
class LivenessReclaimer {
  constructor(options) {
    if (options === null || typeof options !== 'object') throw typeError('LivenessReclaimer: options {heart} or {store} required');
    const o = optsOf('LivenessReclaimer options', options);
    let heart = o.heart;
    if (heart === undefined) {
      if (o.store === undefined) throw typeError('LivenessReclaimer: {heart} or {store} required');
      heart = new HeartFleet({ store: o.store, maxRetries: o.maxRetries });
    }
    if (!(heart instanceof HeartFleet)) throw typeError('LivenessReclaimer: heart must be a HeartFleet');
    Object.defineProperty(this, 'heart', { value: heart });
    this.ttlMs = optInt('ttlMs', o.ttlMs, 0, Number.MAX_SAFE_INTEGER, DEFAULT_LIVENESS_TTL_MS);
  }

  async reclaimDeadInstanceRuns(options) {
    const o = optsOf('reclaimDeadInstanceRuns options', options);
    return this.heart.reclaimDeadInstanceRuns({ ttlMs: this.ttlMs, maxReclaimsPerCycle: o.maxReclaimsPerCycle ?? o.limit });
  }

  registerInstance(instanceId, options) {
    return this.heart.registerInstance(instanceId, options);
  }

  heartbeat(instanceId) {
    return this.heart.heartbeatInstance(instanceId);
  }

  drainInstance(instanceId) {
    return this.heart.drainInstance(instanceId);
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
};
