// A pure-JS equivalent of the reference package's lease cycle (the TypeScript package's
// acquire, verifyFence and release over its four-method LeaseStore, an async memory store
// with getRun / conditionalUpdate, receipts with the DreamNet digest, the 13 counters),
// transcribed from that package's documented behaviour. Used by the benchmark as the
// baseline and by test/mixed-fleet.test.mjs as an old node sharing a table with ours. No
// lease logic of the package depends on it.

import { createHash } from 'node:crypto';

const DIGEST_PREFIX = 'sha256:dreamnet-sorted-json:v0:';

/** The reference canonical form (semantics §3.1), plain JS. */
export function canonicalizeJs(v) {
  if (v === null) return 'null';
  switch (typeof v) {
    case 'boolean':
      return v ? 'true' : 'false';
    case 'string':
      return JSON.stringify(v);
    case 'number':
      if (!Number.isFinite(v)) throw new Error(`Canonical JSON Error: Non-finite number ${v} cannot be serialized.`);
      return Object.is(v, -0) ? '0' : String(v);
    case 'object':
      if (Array.isArray(v)) return '[' + v.map((x) => (x === undefined ? 'null' : canonicalizeJs(x))).join(',') + ']';
      return (
        '{' +
        Object.keys(v)
          .sort()
          .filter((k) => v[k] !== undefined && typeof v[k] !== 'function' && typeof v[k] !== 'symbol')
          .map((k) => JSON.stringify(k) + ':' + canonicalizeJs(v[k]))
          .join(',') +
        '}'
      );
    default:
      throw new Error(`Canonical JSON Error: Unsupported value type ${typeof v}`);
  }
}

const sha256Hex = (s) => createHash('sha256').update(s, 'utf8').digest('hex');

export class JsMemoryLeaseStore {
  constructor(now = new Date(0)) {
    this.clock = new Date(now.getTime());
    this.rows = new Map();
  }
  now() {
    return new Date(this.clock.getTime());
  }
  insert(run) {
    const at = this.clock.toISOString();
    this.rows.set(run.id, { ...run, created_at: at, updated_at: at });
  }
  async getRun(id) {
    const r = this.rows.get(id);
    return r ? { ...r } : null;
  }
  async conditionalUpdate(id, updates, cond = {}) {
    const r = this.rows.get(id);
    if (!r) return null;
    for (const [k, v] of Object.entries(cond.eq ?? {})) if (r[k] !== v) return null;
    for (const [k, vs] of Object.entries(cond.in ?? {})) if (!vs.includes(r[k])) return null;
    const next = { ...r, ...updates };
    this.rows.set(id, next);
    return { ...next };
  }
}

const isLeaseExpired = (run, now) => !run.lease_expires_at || new Date(run.lease_expires_at) <= now;
const canAcquire = (run, now) =>
  run.status === 'ready' || ((run.status === 'leased' || run.status === 'running') && isLeaseExpired(run, now));

export class JsHeartFleet {
  constructor({ store, onReceipt }) {
    this.store = store;
    this.onReceipt = onReceipt;
    this.metrics = {
      acquireAttempts: 0, acquireWins: 0, acquireCollisions: 0, renews: 0, renewFailures: 0, releases: 0,
      releaseFailures: 0, reclaims: 0, quarantines: 0, fenceVerifications: 0, fenceRejections: 0,
      effectCommits: 0, effectDedupes: 0,
    };
    this._receipts = [];
  }
  emit(event, runId, owner, leaseExpiresAt) {
    const body = { event, runId, owner, leaseExpiresAt, effectKey: null };
    const r = Object.freeze({
      schemaVersion: 'zao.heart.receipt.v1', event, runId, owner, leaseExpiresAt, effectKey: null,
      at: this.store.now().toISOString(), digest: DIGEST_PREFIX + sha256Hex(canonicalizeJs(body)),
    });
    if (this.onReceipt) this.onReceipt(r);
    else this._receipts.push(r);
  }
  async acquire(runId, owner, ttlSeconds) {
    if (!runId || !owner || !Number.isInteger(ttlSeconds) || ttlSeconds <= 0) return { acquired: false, run: null, reason: 'Invalid input' };
    this.metrics.acquireAttempts++;
    const now = this.store.now();
    const leaseExpiresAt = new Date(now.getTime() + ttlSeconds * 1000).toISOString();
    const run = await this.store.getRun(runId);
    if (!run) return { acquired: false, run: null, reason: 'Run not found' };
    if (!canAcquire(run, now)) {
      this.metrics.acquireCollisions++;
      return { acquired: false, run, reason: `Cannot acquire: status '${run.status}', lease not expired` };
    }
    const cond = run.status === 'ready' ? { eq: { status: 'ready' } } : { eq: { status: run.status, lease_expires_at: run.lease_expires_at } };
    const updated = await this.store.conditionalUpdate(
      runId,
      { lease_owner: owner, lease_expires_at: leaseExpiresAt, status: 'leased', updated_at: now.toISOString() },
      cond,
    );
    if (!updated) {
      this.metrics.acquireCollisions++;
      return { acquired: false, run, reason: 'Collision: another owner won the lease' };
    }
    this.metrics.acquireWins++;
    const fence = Object.freeze({ runId, owner, leaseExpiresAt });
    this.emit('acquired', runId, owner, leaseExpiresAt);
    return { acquired: true, run: updated, fence };
  }
  async verifyFence(fence) {
    const now = this.store.now();
    const updated = await this.store.conditionalUpdate(
      fence.runId,
      { updated_at: now.toISOString() },
      { eq: { lease_owner: fence.owner, lease_expires_at: fence.leaseExpiresAt }, in: { status: ['leased', 'running'] } },
    );
    if (!updated || isLeaseExpired(updated, now)) {
      this.metrics.fenceRejections++;
      this.emit('fence_rejected', fence.runId, fence.owner, fence.leaseExpiresAt);
      return false;
    }
    this.metrics.fenceVerifications++;
    this.emit('fence_verified', fence.runId, fence.owner, fence.leaseExpiresAt);
    return true;
  }
  async release(fence, nextStatus) {
    const now = this.store.now();
    const updated = await this.store.conditionalUpdate(
      fence.runId,
      { lease_owner: null, lease_expires_at: null, status: nextStatus, updated_at: now.toISOString() },
      { eq: { lease_owner: fence.owner, lease_expires_at: fence.leaseExpiresAt } },
    );
    if (!updated) {
      this.metrics.releaseFailures++;
      this.emit('fence_rejected', fence.runId, fence.owner, fence.leaseExpiresAt);
      return null;
    }
    this.metrics.releases++;
    this.emit('released', fence.runId, fence.owner, null);
    return updated;
  }
}

/** The benchmark's canonicalize + digest baseline: JSON.stringify of sorted keys + node:crypto. */
export function sortedStringifyDigest(value) {
  const sort = (v) => {
    if (Array.isArray(v)) return v.map(sort);
    if (v !== null && typeof v === 'object') {
      const out = {};
      for (const k of Object.keys(v).sort()) out[k] = sort(v[k]);
      return out;
    }
    return v;
  };
  return DIGEST_PREFIX + sha256Hex(JSON.stringify(sort(value)));
}
