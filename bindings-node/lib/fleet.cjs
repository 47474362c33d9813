'use strict';
// HeartFleet and the JS driving loop over the core's sans-I/O machines.
//
// The loop (the core's crate docs, steps 1-5): `NativeFleet.begin` builds and starts the
// machine; when the fleet's store is a MemoryLeaseStore, store requests are answered inside
// Rust and most operations come back finished. Otherwise each step names what the machine
// needs: a store request goes to `store.execute(request)` (awaited if it returns a
// Promise), the effect ledger, the effect or a probe go to the caller's host functions,
// and the answer resumes the machine. Receipts and counters are applied in Rust after every
// step; a JS `onReceipt` sink receives the receipts of each step before the next await.

const native = require('./native.cjs');
const { decodeAnswer } = require('./compact.cjs');
const { MemoryLeaseStore, NATIVE } = require('./memory-store.cjs');
const { PgLeaseStore } = require('./pg-store.cjs');
const { LEASE_STORE_METHODS, missingMethods, referenceCalls, leaseStoreCall, referenceRequest } = require('./reference-store.cjs');
const {
  codedError,
  HeartFleetError,
  typeError,
  str,
  int,
  optInt,
  opts: optsOf,
  fence: fenceOf,
  mintedFence,
  messageOf,
  isThenable,
  describe,
  referenceShape,
  withExtras,
  wellFormed,
  jsonOf,
  firstLine,
  bounded,
  U32,
} = require('./util.cjs');

const contract = require('./contract.cjs');

const { maxTtlSeconds: MAX_TTL_SECONDS, runStatuses: RUN_STATUSES, nextStatuses: NEXT_STATUSES } = contract;

const INVALID_ACQUIRE = () => withExtras({ acquired: false, run: null, reason: contract.invalidAcquireReason }, { code: 'invalid-input' });
/** The reference's AcquireResult fields; `code` is ours (non-enumerable). */
const ACQUIRE_FIELDS = ['acquired', 'run', 'fence', 'reason'];
/** The reference's liveness summary fields; `quarantinedIds` is ours (non-enumerable). */
const LIVENESS_FIELDS = ['deadInstanceIds', 'reclaimedCount', 'reclaimedIds', 'errors'];

function freezeReceipt(r) {
  return Object.freeze(r);
}

function deliver(fleet, receipts, held = null) {
  if (!receipts) return;
  if (held) {
    for (const r of receipts) held.receipt(freezeReceipt(r));
    return;
  }
  const sink = fleet._onReceipt;
  for (const r of receipts) {
    try {
      const p = sink(freezeReceipt(r));
      if (isThenable(p)) p.then(undefined, () => {});
    } catch {
      // The reference swallows sink errors.
    }
  }
}

function toError(err) {
  return codedError(err.code, err.message);
}

/** A store request's JSON text → the store's answer as JSON text (for `resumeStore`). */
function answerText(ans) {
  if (typeof ans === 'string') return ans;
  if (ans === null || typeof ans !== 'object') throw codedError('store-protocol', `the store answered ${describe(ans)}, not a StoreAnswer`);
  return JSON.stringify(ans);
}

/**
 * One store request (JSON text) on the fleet's own store, as the driving loop sends it:
 * the answer (an object or JSON text), or a Promise of it. `calls`: over a store with the
 * LeaseStore methods, the operation's calls (see operationCalls).
 */
function storeCall(fleet, requestText, calls = operationCalls(fleet)) {
  if (calls) return referenceRequest(calls, requestText);
  // Stores that take JSON text (executeJson) skip the parse and the stringify.
  return fleet._textStore ? fleet.store.executeJson(requestText) : fleet.store.execute(JSON.parse(requestText));
}

/**
 * Over a store with the LeaseStore methods, the calls of one operation (they remember the
 * rows the operation read, so a decision that needs a row once reads it once); else null.
 */
function operationCalls(fleet) {
  return fleet._reference ? referenceCalls(fleet.store, fleet._reference) : null;
}

/** The compact answers' tags (A acquired, N renewed, R released, V verified: bridge::compact). */
const COMPACT_TAGS = new Set([65, 78, 82, 86]);

/**
 * A step's text: JSON, a lease-cycle result in the compact form, or (any other first
 * character) a LeaseStore call the core asks for.
 */
function stepOf(text) {
  const tag = text.charCodeAt(0);
  if (tag === 123) return JSON.parse(text);
  if (!COMPACT_TAGS.has(tag)) return { need: 'call', call: text };
  const answer = decodeAnswer(text);
  return answer.step ?? { done: true, ok: answer.value, receipts: answer.receipts };
}

/**
 * An operation waiting for JavaScript, by its handle in the fleet's native half (the native
 * module keeps it; a native object per operation would cost more than most operations).
 * Each method is the native one of that name, on this operation's handle.
 */
class Operation {
  constructor(nf, handle) {
    this.nf = nf;
    this.handle = handle;
    /** Whether the native module answered its final step (and so freed the handle). */
    this.finished = false;
  }
}
for (const method of [
  'need',
  'request',
  'resumeStore',
  'resumeStoreFailure',
  'resumeClock',
  'resumeRead',
  'resumeWritten',
  'resumeRows',
  'resumeRecorded',
  'resumeRecordedError',
  'resumeEffect',
  'resumeEffectError',
  'resumeProbe',
  'resumeProbeError',
]) {
  // At most two values follow the handle; a native method ignores an undefined extra one.
  Operation.prototype[method] = function (a, b) {
    return this.nf[method](this.handle, a, b);
  };
}

/**
 * Resumes the machine with a store's failure (the core names the step). Our own coded
 * errors keep their code when the core allows it (a wrong-shaped answer, store-protocol;
 * a request the store's contract cannot serve, invalid-input); anything else is
 * store-unavailable.
 */
function storeFailed(op, e) {
  return op.resumeStoreFailure(e instanceof HeartFleetError ? e.code : 'store-unavailable', messageOf(e));
}

/**
 * Drives one operation to its end. `host` answers the non-store needs:
 * `recordOnce(runId, effectKey)`, `effect(effectKey, epoch)`, `probe(intent)`.
 * `storeFor(request)`, when given, routes the operation's store requests: a store object it
 * returns answers that request (`execute`), null leaves it to the fleet's store; the
 * operation then starts with `beginOnHost`, so every request comes back here even over a
 * MemoryLeaseStore (counters and receipts stay the fleet's).
 * Returns the final step `{done, ok}` / `{done, error}`; a host function that threw is
 * re-thrown as is after the machine finished (the effect's own exception propagates, as in
 * the reference).
 */
async function driveStep(fleet, kind, argsText, host, storeFor) {
  const nf = fleet[NATIVE];
  const reference = fleet._reference;
  // A fleet whose sink is its PgLeaseStore's receiptSink holds each operation's writes and
  // their receipts in one transaction (pg-store.cjs, HeldTransaction).
  const held = fleet._holdsReceipts ? fleet.store._holdFor(fleet._onReceipt, fleet._storeTimeoutMs) : null;
  const counted = held ? new Unsettled(nf) : null;
  const begin = () => {
    if (storeFor) return nf.beginOnHost(kind, argsText);
    if (reference) return nf.beginOnReference(kind, argsText, reference.casRetries);
    return nf.begin(kind, argsText);
  };
  // What `begin` counts (say acquireAttempts) belongs to the operation too.
  const first = counted ? counted.count(begin) : begin();
  if (typeof first === 'string') {
    const step = stepOf(first);
    if (step.receipts) deliver(fleet, step.receipts);
    return step;
  }
  const op = new Operation(nf, first);
  try {
    return await driveOperation(fleet, op, host, storeFor, held, counted);
  } finally {
    // An operation left behind by an exception is freed; a finished one was freed already
    // (and its handle may belong to another operation by now).
    if (!op.finished) nf.abandon(first);
    if (held?.open) {
      // Left by an exception: its writes roll back, and their counts.
      await held.abandon();
      counted.rolledBack();
    }
  }
}

/**
 * What one operation counted since its writes were last committed, so a held transaction
 * that rolls back takes it back (`uncount`). The native calls that resume an operation are
 * synchronous, so what the counters gained across one is that operation's.
 */
class Unsettled {
  constructor(nf) {
    this.nf = nf;
    this.delta = null;
  }

  /** Runs `resume` (a synchronous native call) and adds what it counted. */
  count(resume) {
    const before = this.nf.metrics();
    const text = resume();
    const after = this.nf.metrics();
    this.delta ??= Object.fromEntries(Object.keys(after).map((k) => [k, 0]));
    for (const k of Object.keys(after)) this.delta[k] += after[k] - before[k];
    return text;
  }

  /** The writes committed: nothing to take back. */
  settled() {
    this.delta = null;
  }

  /** The writes were rolled back: what they counted did not happen. */
  rolledBack() {
    if (this.delta) this.nf.uncount(this.delta);
    this.delta = null;
  }
}

/**
 * Settles the held transaction (commits what the operation wrote so far): null, or the
 * final step of an operation whose writes were rolled back (their counts taken back).
 */
async function settleHeld(held, counted) {
  try {
    await held.settle();
    counted.settled();
    return null;
  } catch (e) {
    counted.rolledBack();
    return { done: true, error: { code: e.code ?? 'store-unavailable', message: messageOf(e) } };
  }
}

/** The loop of driveStep over a begun operation (`held`, `counted`: see driveStep). */
async function driveOperation(fleet, op, host, storeFor, held, counted) {
  const calls = operationCalls(fleet);
  const resume = counted ? (f) => counted.count(f) : (f) => f();
  let step = stepOf(op.need());
  let hostThrew = null;
  for (;;) {
    if (step.done) op.finished = true;
    if (step.receipts) deliver(fleet, step.receipts, held);
    if (step.done) {
      if (held) {
        const rolledBack = await settleHeld(held, counted);
        // An operation that failed already keeps its own error.
        if (rolledBack && !step.error) return rolledBack;
      }
      if (hostThrew) throw hostThrew.error;
      return step;
    }
    if (held && step.need !== 'store' && step.need !== 'call') {
      // The caller's turn (an effect may take long): what was written is committed first.
      const rolledBack = await settleHeld(held, counted);
      if (rolledBack) return rolledBack;
    }
    let text;
    switch (step.need) {
      case 'store': {
        try {
          const request = op.request();
          const parsed = storeFor ? JSON.parse(request) : null;
          const routed = parsed && storeFor(parsed);
          let ans;
          if (held && !routed) {
            // Not raced against storeTimeoutMs: a request abandoned that way would go on inside
            // the transaction. Its own waits have deadlines (connection, each statement).
            ans = await held.execute(request);
          } else {
            ans = routed ? routed.execute(parsed) : storeCall(fleet, request, calls);
            if (isThenable(ans)) ans = await bounded(ans, fleet._storeTimeoutMs);
          }
          let answer;
          try {
            answer = answerText(ans);
          } catch (e) {
            // A store that answers nonsense ends the operation with store-protocol.
            const invalid = '{"invalid":' + JSON.stringify(messageOf(e)) + '}';
            text = resume(() => op.resumeStore(invalid));
            break;
          }
          text = resume(() => op.resumeStore(answer));
        } catch (e) {
          text = resume(() => storeFailed(op, e));
        }
        break;
      }
      case 'call': {
        try {
          text = await leaseStoreCall(op, step.call, calls);
        } catch (e) {
          text = storeFailed(op, e);
        }
        break;
      }
      case 'recordOnce': {
        try {
          let first = host.recordOnce(step.runId, step.effectKey);
          if (isThenable(first)) first = await first;
          text = resume(() => op.resumeRecorded(Boolean(first)));
        } catch (e) {
          text = resume(() => op.resumeRecordedError(messageOf(e)));
        }
        break;
      }
      case 'effect': {
        try {
          let v = host.effect(step.effectKey, step.epoch);
          if (isThenable(v)) v = await v;
          text = resume(() => op.resumeEffect(v === undefined ? 'null' : v));
        } catch (e) {
          hostThrew = { error: e };
          text = resume(() => op.resumeEffectError(messageOf(e)));
        }
        break;
      }
      case 'probe': {
        try {
          let v = host.probe(step.intent);
          if (isThenable(v)) v = await v;
          const verdict = JSON.stringify(v ?? { status: 'unknown' });
          text = resume(() => op.resumeProbe(verdict));
        } catch (e) {
          text = resume(() => op.resumeProbeError(messageOf(e)));
        }
        break;
      }
      default:
        text = resume(() => op.resumeStoreFailure('store-unavailable', `unknown need ${step.need}`));
    }
    step = stepOf(text);
  }
}

/**
 * An operation's arguments as JSON text. The arguments were checked, but a value JSON cannot
 * hold (a bigint or a circular structure inside metadata) is an invalid-input TypeError, not
 * JSON.stringify's uncoded one.
 */
function argsText(kind, args) {
  try {
    return JSON.stringify(args);
  } catch (e) {
    throw typeError(`${kind}: the arguments are not JSON: ${firstLine(messageOf(e))}`);
  }
}

/** A final step's value, or its coded error thrown. */
function valueOf(step) {
  if (step.error) throw toError(step.error);
  return step.ok;
}

/** Drives an operation and returns its value, throwing its coded error (`storeFor`: see driveStep). */
async function drive(fleet, kind, args, host, storeFor) {
  return valueOf(await driveStep(fleet, kind, argsText(kind, args), host, storeFor));
}

/**
 * The value of a lease-cycle operation answered by the core's compact path (MemoryLeaseStore),
 * in the shape `drive` returns; its receipts go to the sink first, its error is thrown.
 */
function compactValue(fleet, text) {
  const answer = decodeAnswer(text);
  const step = answer.step;
  if (step === undefined) {
    if (answer.receipts) deliver(fleet, answer.receipts);
    return answer.value;
  }
  if (step.receipts) deliver(fleet, step.receipts);
  return valueOf(step);
}

/**
 * Which lease-store contract `store` implements: `memory` (MemoryLeaseStore), `requests`
 * (`execute(request)`, the core's request language; preferred when an object has both) or
 * `reference` (the TypeScript package's getRun, conditionalUpdate, findExpiredLeases, now);
 * null for none.
 */
function storeKind(store) {
  if (store instanceof MemoryLeaseStore) return 'memory';
  if (store === null || typeof store !== 'object') return null;
  if (typeof store.execute === 'function') return 'requests';
  return missingMethods(store, LEASE_STORE_METHODS).length === 0 ? 'reference' : null;
}

/** What a lease store lacks, for the TypeError of an object that matches no contract. */
function leaseStoreGap(store) {
  if (store === null || typeof store !== 'object') return `got ${describe(store)}`;
  return `this object has no execute and lacks ${missingMethods(store, LEASE_STORE_METHODS).join(', ')}`;
}

/** `storeKind(store)`, or a TypeError naming what the object lacks. */
function checkStore(store) {
  const kind = storeKind(store);
  if (kind === null) {
    throw typeError(
      'HeartFleet: store must be a MemoryLeaseStore, an object with execute(request) -> StoreAnswer | Promise<StoreAnswer>, ' +
        `or one with the LeaseStore methods ${LEASE_STORE_METHODS.join(', ')}; ${leaseStoreGap(store)}`,
    );
  }
  return kind;
}

function maxRetriesOf(v) {
  if (v === undefined) return contract.defaults.maxRetries;
  if (v === null || v === Infinity) return null;
  return int('maxRetries', v, 0, U32);
}

const FLEET_OPTIONS = ['store', 'onReceipt', 'maxRetries', 'storeTimeoutMs', 'casRetries'];
/** The options of each method that takes an options object (an unknown key is invalid input). */
const RECLAIM_OPTIONS = ['limit'];
const LIVENESS_OPTIONS = ['ttlMs', 'maxReclaimsPerCycle', 'limit'];
const REGISTER_OPTIONS = ['hostname', 'pid', 'metadata'];
const ENSURE_OPTIONS = ['objective', 'createdBy'];
const LIST_RUNS_OPTIONS = ['status', 'limit'];
/** The longest wait for one store answer, by default (ms). */
const DEFAULT_STORE_TIMEOUT_MS = contract.defaults.storeTimeoutMs;
/** How many times a LeaseStore-methods store's write is decided, by default, when the row keeps changing. */
const DEFAULT_CAS_RETRIES = contract.defaults.casRetries;
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The lease layer over one store (the reference's `HeartFleet`).
 *
 * `new HeartFleet({store, onReceipt?, maxRetries?, storeTimeoutMs?, casRetries?})`:
 * `maxRetries` defaults to 5; `Infinity` or `null` never quarantines. Without `onReceipt`,
 * receipts are kept and `receipts()` returns them; with it, each receipt goes to the sink
 * (errors swallowed) and `receipts()` is empty, as in the reference. `storeTimeoutMs`
 * (default 30000) bounds the wait for each answer of a JS store: past it the operation fails
 * with store-unavailable naming the step. `casRetries` (default 5; only for a store with the
 * LeaseStore methods) is how many times a write is decided when the row keeps changing
 * under it. An unknown option is a TypeError.
 */
class HeartFleet {
  constructor(options) {
    if (options === null || typeof options !== 'object') {
      throw typeError(`HeartFleet: options {store, onReceipt?, maxRetries?} required, got ${describe(options)}`);
    }
    const unknown = Object.keys(options).filter((k) => !FLEET_OPTIONS.includes(k));
    if (unknown.length > 0) throw typeError(`HeartFleet: unknown option ${unknown.join(', ')} (the options are ${FLEET_OPTIONS.join(', ')})`);
    const { store, onReceipt, maxRetries, storeTimeoutMs, casRetries } = options;
    const kind = checkStore(store);
    if (onReceipt !== undefined && onReceipt !== null && typeof onReceipt !== 'function') {
      throw typeError('HeartFleet: onReceipt must be a function');
    }
    if (casRetries !== undefined && kind !== 'reference') {
      throw typeError(`HeartFleet: casRetries applies only to a store with the LeaseStore methods (${LEASE_STORE_METHODS.join(', ')})`);
    }
    const max = maxRetriesOf(maxRetries);
    this._storeTimeoutMs = optInt('storeTimeoutMs', storeTimeoutMs, 1, MAX_TIMER_MS, DEFAULT_STORE_TIMEOUT_MS);
    this._reference =
      kind === 'reference' ? { casRetries: optInt('casRetries', casRetries, 1, contract.maxCasRetries, DEFAULT_CAS_RETRIES), timeoutMs: this._storeTimeoutMs } : null;
    Object.defineProperty(this, 'store', { value: store, enumerable: true });
    Object.defineProperty(this, 'maxRetries', { value: max === null ? Infinity : max, enumerable: true });
    this._onReceipt = typeof onReceipt === 'function' ? onReceipt : null;
    this._textStore = kind !== 'reference' && typeof store.executeJson === 'function';
    // The sink is this PgLeaseStore's receiptSink: receipts commit with their writes.
    this._holdsReceipts = store instanceof PgLeaseStore && store._holdFor(this._onReceipt) !== null;
    this[NATIVE] = new native.NativeFleet(max, this._onReceipt !== null);
    // On a MemoryLeaseStore the lease cycle takes the core's compact path (no JSON).
    this._memory = store instanceof MemoryLeaseStore;
    if (this._memory) this[NATIVE].attachMemoryStore(store[NATIVE]);
  }

  /** The 13 counters (a snapshot). */
  get metrics() {
    return this[NATIVE].metrics();
  }

  /** The counters in the Prometheus text exposition format. */
  prometheus() {
    return this[NATIVE].prometheus();
  }

  /** The receipts kept so far (empty when `onReceipt` was given). */
  receipts() {
    if (this[NATIVE].receiptCount() === 0) return [];
    return JSON.parse(this[NATIVE].receiptsJson()).map(freezeReceipt);
  }

  /**
   * `acquire(runId, owner, ttlSeconds)` → `{acquired, run, fence?, reason?}`, and on a
   * failure a non-enumerable `code`. Bad input gives `{acquired:false, run:null,
   * reason:"Invalid input"}` (code `invalid-input`): an id or owner that is not a non-empty
   * well-formed string (a lone surrogate included), a ttl outside 1..=31536000.
   * A store failure throws (`store-unavailable`).
   */
  async acquire(runId, owner, ttlSeconds) {
    // What JavaScript alone can see: the types, and a lone surrogate (the native module's
    // strings are UTF-8). The values (empty ids, the ttl's bounds) are the core's to judge.
    if (
      typeof runId !== 'string' ||
      !wellFormed(runId) ||
      typeof owner !== 'string' ||
      !wellFormed(owner) ||
      typeof ttlSeconds !== 'number' ||
      !Number.isSafeInteger(ttlSeconds)
    ) {
      return INVALID_ACQUIRE();
    }
    const r = this._memory
      ? compactValue(this, this[NATIVE].acquireCompact(runId, owner, ttlSeconds))
      : await drive(this, 'acquire', { runId, owner, ttlSeconds });
    mintedFence(r.fence);
    return referenceShape(r, ACQUIRE_FIELDS);
  }

  /**
   * The renew with its outcome: `{outcome:"ok", value: token}` or
   * `{outcome:"rejected", cause, code:"fence-rejected"}` (cause: superseded, expired,
   * released, not-found).
   */
  async tryRenew(fence, ttlSeconds) {
    const f = fenceOf('fence', fence);
    int('ttlSeconds', ttlSeconds, 1, MAX_TTL_SECONDS);
    const r = this._memory
      ? compactValue(this, this[NATIVE].renewCompact(f.runId, f.owner, f.leaseExpiresAt, f.epoch, ttlSeconds))
      : await drive(this, 'renew', { fence: f, ttlSeconds });
    if (r.outcome === 'ok') return { outcome: 'ok', value: mintedFence(r.value) };
    return { outcome: 'rejected', cause: r.cause, code: contract.lostCodes[r.cause] };
  }

  /** `renew(fence, ttlSeconds)` → the new token, or null when the token no longer holds the lease. */
  async renew(fence, ttlSeconds) {
    const r = await this.tryRenew(fence, ttlSeconds);
    return r.outcome === 'ok' ? r.value : null;
  }

  /**
   * The release with its outcome: `{outcome:"ok", value: row}` or
   * `{outcome:"rejected", cause, code:"fence-rejected"}`.
   */
  async tryRelease(fence, nextStatus) {
    const f = fenceOf('fence', fence);
    if (typeof nextStatus !== 'string' || !NEXT_STATUSES.includes(nextStatus)) {
      throw typeError(`nextStatus must be one of ${NEXT_STATUSES.join(', ')}, got ${describe(nextStatus)}`);
    }
    const r = this._memory
      ? compactValue(this, this[NATIVE].releaseCompact(f.runId, f.owner, f.leaseExpiresAt, f.epoch, nextStatus))
      : await drive(this, 'release', { fence: f, nextStatus });
    if (r.outcome === 'ok') return { outcome: 'ok', value: r.value };
    return { outcome: 'rejected', cause: r.cause, code: contract.lostCodes[r.cause] };
  }

  /**
   * `release(fence, nextStatus)` → the released row, or null when the token no longer
   * holds the lease. `nextStatus`: completed, failed, cancelled, or ready (resource runs
   * only: back to `ready` with `retries = 0`).
   */
  async release(fence, nextStatus) {
    const r = await this.tryRelease(fence, nextStatus);
    return r.outcome === 'ok' ? r.value : null;
  }

  /** `verifyFence(fence)` → whether the token holds a live lease (one conditional write). */
  async verifyFence(fence) {
    const f = fenceOf('fence', fence);
    if (this._memory) return compactValue(this, this[NATIVE].verifyFenceCompact(f.runId, f.owner, f.leaseExpiresAt, f.epoch));
    return drive(this, 'verifyFence', { fence: f });
  }

  /** `reclaimExpired({limit = 100})` → `{reclaimedCount, reclaimedIds, quarantinedIds, errors}`. */
  async reclaimExpired(options) {
    const o = optsOf('reclaimExpired options', options, RECLAIM_OPTIONS);
    return drive(this, 'reclaimExpired', { limit: optInt('limit', o.limit, 0, U32) });
  }

  /**
   * The liveness pass: instances silent for more than `ttlMs` (default 90 000, strictly
   * greater) are declared dead and the held runs of dead instances are recovered (at most
   * `maxReclaimsPerCycle`, default 200), with the retry ceiling, receipts and counters.
   */
  async reclaimDeadInstanceRuns(options) {
    const o = optsOf('reclaimDeadInstanceRuns options', options, LIVENESS_OPTIONS);
    const summary = await drive(this, 'reclaimDeadInstanceRuns', {
      ttlMs: optInt('ttlMs', o.ttlMs, 0, Number.MAX_SAFE_INTEGER),
      limit: optInt('maxReclaimsPerCycle', o.maxReclaimsPerCycle ?? o.limit, 0, U32),
    });
    return referenceShape(summary, LIVENESS_FIELDS);
  }

  /** Registers (or re-registers) an instance as `alive`; returns its row. */
  async registerInstance(instanceId, options) {
    const o = optsOf('registerInstance options', options, REGISTER_OPTIONS);
    const hostname = o.hostname === undefined || o.hostname === null ? null : str('hostname', o.hostname);
    const pid = optInt('pid', o.pid, 0, Number.MAX_SAFE_INTEGER, null);
    // JSON.stringify's rules (NaN → null, functions dropped), but a bigint, a circular
    // structure or nesting deeper than the core's limit is invalid input.
    const metadata = o.metadata === undefined ? null : JSON.parse(jsonOf('metadata', o.metadata) ?? 'null');
    return drive(this, 'registerInstance', { instanceId: str('instanceId', instanceId), hostname, pid, metadata });
  }

  /** Heartbeats an instance; false when it is unknown or dead (it must re-register). */
  async heartbeatInstance(instanceId) {
    return drive(this, 'heartbeatInstance', { instanceId: str('instanceId', instanceId) });
  }

  /** Marks an instance `draining` (live until it goes silent). */
  async drainInstance(instanceId) {
    return drive(this, 'drainInstance', { instanceId: str('instanceId', instanceId) });
  }

  /** Every instance. */
  async listInstances() {
    return drive(this, 'listInstances', {});
  }

  /**
   * Find-or-create the run of a resource by `deterministicResourceId(kind, key)` as its
   * idempotency key (race-safe; the store supplies the row id) → `{run, created}`.
   */
  async ensureResourceRun(kind, key, options) {
    const o = optsOf('ensureResourceRun options', options, ENSURE_OPTIONS);
    return drive(this, 'ensureResourceRun', {
      kind: str('kind', kind),
      key: str('key', key),
      // Left out: the core's defaults (`resource <kind>:<key>`, `heart-fleet:<kind>`).
      objective: o.objective === undefined ? undefined : str('objective', o.objective),
      createdBy: o.createdBy === undefined ? undefined : str('createdBy', o.createdBy),
    });
  }

  /** Operator: runs, optionally of one status, most recently updated first. */
  async listRuns(options) {
    const o = optsOf('listRuns options', options, LIST_RUNS_OPTIONS);
    if (o.status !== undefined && o.status !== null && !RUN_STATUSES.includes(o.status)) {
      throw typeError(`status must be one of ${RUN_STATUSES.join(', ')}, got ${describe(o.status)}`);
    }
    return drive(this, 'listRuns', { status: o.status ?? null, limit: optInt('limit', o.limit, 0, U32) });
  }

  /** Operator: one run, or null. */
  async getRun(runId) {
    return drive(this, 'getRun', { runId: str('runId', runId) });
  }

  /** Operator: a quarantined run back to `ready` with `retries = 0` (receipt `requeued`). */
  async requeueRun(runId, operator) {
    return drive(this, 'requeueRun', { runId: str('runId', runId), operator: str('operator', operator) });
  }

  /** Operator: remove a lease by force, back to `ready` (receipt `force_released`). */
  async forceRelease(runId) {
    return drive(this, 'forceRelease', { runId: str('runId', runId) });
  }
}

/** `ensureResourceRun(heart, kind, key, {objective, createdBy})`: see HeartFleet#ensureResourceRun. */
function ensureResourceRun(heart, kind, key, options) {
  if (!(heart instanceof HeartFleet)) return Promise.reject(typeError('ensureResourceRun: heart must be a HeartFleet'));
  return heart.ensureResourceRun(kind, key, options);
}

module.exports = {
  HeartFleet,
  ensureResourceRun,
  drive,
  driveStep,
  storeCall,
  bounded,
  checkStore,
  storeKind,
  leaseStoreGap,
  DEFAULT_STORE_TIMEOUT_MS,
  MAX_TTL_SECONDS,
  RUN_STATUSES,
};
