'use strict';
// The durable effect ledger (effect_intents + outbox_dispatch_log), sendOnce and the
// reconciler, all over the heart's store through the core's machines.

const native = require('./native.cjs');
const { HeartFleet, drive, driveStep, runRequest, checkStore } = require('./fleet.cjs');
const { MemoryLeaseStore } = require('./memory-store.cjs');
const { typeError, codedError, str, optInt, opts: optsOf, fence: fenceOf, describe, rethrowNative, withExtras } = require('./util.cjs');
const { toCoreJson } = require('./canonical.cjs');

const CHANNELS = Object.freeze(['telegram', 'farcaster', 'mail', 'onchain', 'internal']);
const U32 = 2 ** 32 - 1;

function request(kind, args) {
  try {
    return native.storeRequest(kind, JSON.stringify(args));
  } catch (e) {
    return rethrowNative(e);
  }
}

async function reply(store, kind, args, want) {
  let answer;
  try {
    answer = await runRequest(store, request(kind, args));
  } catch (e) {
    if (e && e.code === 'store-unavailable') throw e;
    throw codedError('store-unavailable', `store failed at ${kind}: ${e && e.message}`);
  }
  const r = answer && answer.reply;
  if (!r || r.kind !== want) throw codedError('store-protocol', `${kind}: the store answered ${JSON.stringify(r)}`);
  return r;
}

/**
 * The durable effect ledger: the `effect_intents` table of a store (claim = insert unless
 * present) and its `outbox_dispatch_log`. `new DurableEffectLedger({heart})` uses the
 * heart's store and reports effect receipts and counters to it; `{store}` alone works too
 * (receipts then go to a private fleet).
 */
class DurableEffectLedger {
  constructor(options) {
    const o = optsOf('DurableEffectLedger options', options);
    if (o.heart !== undefined && !(o.heart instanceof HeartFleet)) throw typeError('DurableEffectLedger: heart must be a HeartFleet');
    const heart = o.heart ?? (o.store !== undefined ? new HeartFleet({ store: o.store }) : null);
    if (!heart) throw typeError('DurableEffectLedger: {heart} or {store} required');
    if (o.store !== undefined && o.store !== heart.store) throw typeError('DurableEffectLedger: store must be the heart\'s store');
    checkStore(heart.store);
    Object.defineProperty(this, 'heart', { value: heart });
    Object.defineProperty(this, 'store', { value: heart.store, enumerable: true });
  }

  /**
   * `recordOnce(runId, effectKey)`: claims the intent with channel `internal` and an empty
   * digest (a drop-in `EffectLedger`). true the first time.
   */
  async recordOnce(runId, effectKey) {
    return drive(this.heart, 'recordOnce', { runId: str('runId', runId), effectKey: str('effectKey', effectKey) });
  }

  /**
   * Dispatched intents whose fence expired by the store's clock, oldest first (the
   * reference's `findStaleDispatched(nowIso, limit = 50)`; the store's clock replaces
   * `nowIso`, which is accepted and ignored).
   */
  async findStaleDispatched(nowIso, limit) {
    const n = typeof nowIso === 'number' && limit === undefined ? nowIso : limit;
    const r = await reply(this.store, 'staleIntents', { limit: optInt('limit', n, 0, U32, 50) }, 'intents');
    return r.intents;
  }

  /** The dispatch log entries of one effect, oldest first. */
  async dispatchLog(runId, effectKey) {
    const r = await reply(this.store, 'readLog', { runId: str('runId', runId), effectKey: str('effectKey', effectKey) }, 'log');
    return r.entries;
  }
}

function checkDurable(heart, ledger) {
  if (!(ledger instanceof DurableEffectLedger)) {
    throw typeError(`the ledger must be a DurableEffectLedger, got ${describe(ledger)}`);
  }
  if (ledger.store !== heart.store) throw typeError('the ledger must be over the heart\'s store');
}

/**
 * `sendOnce(heart, ledger, {fence, channel, effectKey, payload, send, toExternalRef?})`, in
 * the documented order: verify the fence, claim the intent, mark it dispatched (conditioned
 * on the run still holding the live token), `send({epoch, effectKey})`, then commit the
 * evidence `toExternalRef(result)` (default: the result) in the same write as the state
 * change. Returns `{sent:true, result}` (non-enumerable: `externalRef`, `committed`) or
 * `{sent:false, reason:"fence-rejected"|"deduped"|"lost-dispatch-race"}` (non-enumerable
 * `code`). A send
 * that throws propagates its exception; the intent stays dispatched for the reconciler.
 */
async function sendOnce(heart, ledger, options) {
  if (!(heart instanceof HeartFleet)) throw typeError('sendOnce: heart must be a HeartFleet');
  checkDurable(heart, ledger);
  if (options === null || typeof options !== 'object') throw typeError('sendOnce: options required');
  const { channel, effectKey, payload, send, toExternalRef } = options;
  const f = fenceOf('fence', options.fence);
  if (typeof channel !== 'string' || !CHANNELS.includes(channel)) {
    throw typeError(`channel must be one of ${CHANNELS.join(', ')}, got ${describe(channel)}`);
  }
  str('effectKey', effectKey);
  if (typeof send !== 'function') throw typeError('sendOnce: send must be a function');
  if (toExternalRef !== undefined && typeof toExternalRef !== 'function') throw typeError('sendOnce: toExternalRef must be a function');
  // The payload digest is computed first: a non-finite number throws before any I/O.
  const payloadText = toCoreJson(payload, 'payload');
  const args =
    '{"fence":' + JSON.stringify(f) + ',"channel":' + JSON.stringify(channel) + ',"effectKey":' + JSON.stringify(effectKey) +
    ',"payload":' + payloadText + '}';
  let result;
  const step = await driveStep(heart, 'sendOnce', args, {
    effect: async (key, epoch) => {
      result = await send({ epoch, effectKey: key });
      const evidence = toExternalRef ? toExternalRef(result) : result;
      return toCoreJson(evidence === undefined ? null : evidence, 'externalRef');
    },
  });
  if (step.error) throw codedError(step.error.code, step.error.message);
  const r = step.ok;
  // The reference's fields; ours are non-enumerable.
  if (r.sent) return withExtras({ sent: true, result }, { externalRef: r.externalRef, committed: r.committed });
  return withExtras({ sent: false, reason: r.reason }, { code: r.code });
}

function probeOf(probes, channel) {
  const p = probes[channel];
  return typeof p === 'function' ? p : null;
}

function verdictOf(v) {
  if (typeof v === 'string') return { status: v };
  if (v === null || v === undefined) return { status: 'unknown' };
  return v;
}

/**
 * `reconcileOutbox(ledger, {probes, maxAttempts = 5, limit = 50})`: for each dispatched
 * intent whose fence expired, ask `probes[channel](intent)`: `{status:"sent", externalRef}`
 * commits the evidence, `{status:"not-sent"}` reopens it for the run's holder,
 * `{status:"unknown"}` (or no probe) leaves it and abandons it past `maxAttempts`. Returns
 * `{scanned, committed, reopened, abandoned, left, errors}` counting only writes that
 * happened. (The reference's `now` option is ignored: the store's clock decides.)
 */
async function reconcileOutbox(ledger, options) {
  if (!(ledger instanceof DurableEffectLedger)) throw typeError('reconcileOutbox: ledger must be a DurableEffectLedger');
  const o = optsOf('reconcileOutbox options', options);
  const probes = optsOf('probes', o.probes);
  const heart = o.heart === undefined ? ledger.heart : o.heart;
  if (!(heart instanceof HeartFleet) || heart.store !== ledger.store) throw typeError('reconcileOutbox: heart must be a HeartFleet over the ledger\'s store');
  const maxAttempts = optInt('maxAttempts', o.maxAttempts, 0, Number.MAX_SAFE_INTEGER, 5);
  const limit = optInt('limit', o.limit, 0, U32, 50);
  return drive(heart, 'reconcile', { maxAttempts, limit }, {
    probe: async (intent) => {
      const p = probeOf(probes, intent.channel);
      if (!p) return { status: 'unknown' };
      return verdictOf(await p(intent));
    },
  });
}

module.exports = { DurableEffectLedger, sendOnce, reconcileOutbox, CHANNELS, MemoryLeaseStore };
