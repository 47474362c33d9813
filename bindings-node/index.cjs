'use strict';
// heart-fleet for Node.js: the public API (CommonJS). See README.md and index.d.ts.

const { HeartFleet, ensureResourceRun, RUN_STATUSES, MAX_TTL_SECONDS } = require('./lib/fleet.cjs');
const { MemoryLeaseStore } = require('./lib/memory-store.cjs');
const { MemoryEffectLedger, guardIrreversible, executeWithLease, LeaseLostError } = require('./lib/execute.cjs');
const { DurableEffectLedger, sendOnce, reconcileOutbox, CHANNELS } = require('./lib/outbox.cjs');
const liveness = require('./lib/liveness.cjs');
const canonical = require('./lib/canonical.cjs');
const { HeartFleetError, ERROR_CODES } = require('./lib/util.cjs');
const native = require('./lib/native.cjs');
const { PgLeaseStore } = require('./lib/pg-store.cjs');
const { SupabaseLeaseStore } = require('./lib/supabase-store.cjs');

/** The receipt schema version (the core's, e.g. `zao.heart.receipt.v1`). */
const RECEIPT_SCHEMA_VERSION = require('./lib/contract.cjs').receiptSchemaVersion;

/** The heartbeat cadence of executeWithLease: `renewEveryMs ?? max(1000, floor(ttlSeconds*1000/2))`. */
function heartbeatIntervalMs(ttlSeconds, renewEveryMs) {
  if (typeof ttlSeconds !== 'number' || !Number.isSafeInteger(ttlSeconds)) {
    const e = new TypeError('ttlSeconds must be an integer');
    e.code = 'invalid-input';
    throw e;
  }
  if (renewEveryMs !== undefined && renewEveryMs !== null) {
    if (typeof renewEveryMs !== 'number' || !Number.isSafeInteger(renewEveryMs)) {
      const e = new TypeError('renewEveryMs must be an integer');
      e.code = 'invalid-input';
      throw e;
    }
  }
  // The cadence is the core's (a given renewEveryMs included); only the types are checked here.
  return native.heartbeatInterval(ttlSeconds, renewEveryMs ?? null);
}

module.exports = {
  HeartFleet,
  MemoryLeaseStore,
  PgLeaseStore,
  SupabaseLeaseStore,
  MemoryEffectLedger,
  DurableEffectLedger,
  executeWithLease,
  guardIrreversible,
  sendOnce,
  reconcileOutbox,
  ensureResourceRun,
  LivenessReclaimer: liveness.LivenessReclaimer,
  isLeaseExpired: liveness.isLeaseExpired,
  canAcquire: liveness.canAcquire,
  isInstanceExpired: liveness.isInstanceExpired,
  deadInstanceIds: liveness.deadInstanceIds,
  runsLeasedToDeadInstances: liveness.runsLeasedToDeadInstances,
  DEFAULT_LIVENESS_TTL_MS: liveness.DEFAULT_LIVENESS_TTL_MS,
  canonicalize: canonical.canonicalize,
  sha256Hex: canonical.sha256Hex,
  digest: canonical.digest,
  deterministicResourceId: canonical.deterministicResourceId,
  effectKey: canonical.effectKey,
  verifyReceipt: canonical.verifyReceipt,
  verifyReceipts: canonical.verifyReceipts,
  DIGEST_PREFIX: canonical.DIGEST_PREFIX,
  RECEIPT_SCHEMA_VERSION,
  heartbeatIntervalMs,
  HeartFleetError,
  LeaseLostError,
  ERROR_CODES,
  RUN_STATUSES,
  CHANNELS,
  MAX_TTL_SECONDS,
};
