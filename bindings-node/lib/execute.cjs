'use strict';
// executeWithLease, guardIrreversible and the in-process effect ledger.

const native = require('./native.cjs');
const contract = require('./contract.cjs');
const { HeartFleet, drive, driveStep } = require('./fleet.cjs');
const { codedError, typeError, str, fence: fenceOf, mintedFence, opts: optsOf, describe, isThenable, messageOf, withExtras } = require('./util.cjs');

/** The reference's in-process ledger: a set of (runId, effectKey), kept by the core. Lost on restart. */
class MemoryEffectLedger {
  constructor() {
    Object.defineProperty(this, '_native', { value: new native.NativeEffectLedger() });
  }

  /** true the first time (runId, effectKey) is recorded, false afterwards. */
  recordOnce(runId, effectKey) {
    return this._native.recordOnce(str('runId', runId), str('effectKey', effectKey));
  }
}

function checkLedger(ledger) {
  if (ledger === null || typeof ledger !== 'object' || typeof ledger.recordOnce !== 'function') {
    throw typeError(`ledger must have recordOnce(runId, effectKey), got ${describe(ledger)}`);
  }
}

/**
 * `guardIrreversible(heart, fence, ledger, effectKey, effect)`: verify the fence, record the
 * key once in the ledger, then run `effect({epoch, effectKey})` once. Returns
 * `{committed:true, result}`, `{committed:false, reason:"fence-rejected"}` or
 * `{committed:false, reason:"already-committed"}`, with a non-enumerable `code`
 * (`fence-rejected`, `deduped`) on a refusal. An effect that throws
 * propagates its exception; the key stays recorded (at most once).
 */
async function guardIrreversible(heart, fence, ledger, effectKey, effect) {
  if (!(heart instanceof HeartFleet)) throw typeError('guardIrreversible: heart must be a HeartFleet');
  const f = fenceOf('fence', fence);
  checkLedger(ledger);
  str('effectKey', effectKey);
  if (typeof effect !== 'function') throw typeError('guardIrreversible: effect must be a function');
  let result;
  const r = await drive(heart, 'guardIrreversible', { fence: f, effectKey }, {
    recordOnce: (runId, key) => ledger.recordOnce(runId, key),
    effect: async (key, epoch) => {
      result = await effect({ epoch, effectKey: key });
      return 'null';
    },
  });
  // The reference's fields; the code is ours (non-enumerable).
  if (r.committed) return { committed: true, result };
  return withExtras({ committed: false, reason: r.reason }, { code: r.code });
}

/** Why the lease was lost, as the lease-lost signal's `reason`. */
class LeaseLostError extends Error {
  constructor(cause, runId) {
    super(`lease on run ${runId} lost: ${cause}`);
    this.name = 'LeaseLostError';
    /** `superseded`, `expired`, `released`, `not-found` or `store-unavailable`. */
    this.lost = cause;
    /** `store-unavailable` for that cause, else `fence-rejected` (the contract's `lostCodes`). */
    this.code = contract.lostCodes[cause];
    this.runId = runId;
  }
}

const now = () => performance.now();

/**
 * `executeWithLease(heart, {runId, owner, ttlSeconds, renewEveryMs?, releaseToReady?}, work)`.
 *
 * Acquires the run, runs `work(getFence, signal, lease)` while a heartbeat renews the lease
 * every `renewEveryMs ?? max(1000, ttlSeconds*1000/2)` ms (an `unref`'d timer), then
 * releases it with the newest token: `completed` (or `ready` for resource runs with
 * `releaseToReady`) when the work resolves, `failed` when it throws (the error is
 * re-thrown). Renews and the release are serialized. `signal` is an `AbortSignal` that
 * aborts when the lease is lost (a renew definitely missed, or the held expiry passed
 * without a successful renew); its `reason` is a `LeaseLostError` naming the cause. The
 * work is not stopped; the result reports `lost`.
 *
 * Returns `{ran:true, result}` or `{ran:false, reason:"lease-held"|"lease-error"}`, the
 * reference's fields; ours are non-enumerable: `released`, `lost` (when the lease was lost)
 * and, when not run, `code`.
 *
 * Advanced options: `clock()` (monotonic milliseconds, default `performance.now`) and
 * `autoHeartbeat: false` (no timer; the work calls `lease.heartbeat()` itself). Any other
 * option name is an invalid-input TypeError.
 */
const EXECUTE_OPTIONS = ['runId', 'owner', 'ttlSeconds', 'renewEveryMs', 'releaseToReady', 'autoHeartbeat', 'clock'];

async function executeWithLease(heart, options, work) {
  if (!(heart instanceof HeartFleet)) throw typeError('executeWithLease: heart must be a HeartFleet');
  const o = optsOf('executeWithLease options', options, EXECUTE_OPTIONS);
  if (options === undefined || options === null) throw typeError('executeWithLease: options {runId, owner, ttlSeconds} required');
  if (typeof work !== 'function') throw typeError('executeWithLease: work must be a function');
  const { runId, owner, ttlSeconds, renewEveryMs, releaseToReady = false, autoHeartbeat = true } = o;
  const clock = o.clock === undefined ? now : o.clock;
  if (typeof clock !== 'function') throw typeError('executeWithLease: clock must be a function');
  const notRun = (reason, code) => withExtras({ ran: false, reason }, { code, released: false });
  const validInt = (v) => typeof v === 'number' && Number.isSafeInteger(v);
  if (!validInt(ttlSeconds) || (renewEveryMs !== undefined && renewEveryMs !== null && !validInt(renewEveryMs))) {
    return notRun(contract.notRunReasons.invalidInput, 'invalid-input');
  }
  let session;
  try {
    session = native.NativeLeaseSession.create(ttlSeconds, renewEveryMs ?? null);
  } catch {
    return notRun(contract.notRunReasons.invalidInput, 'invalid-input');
  }
  const tick = () => {
    const t = Number(clock());
    if (!Number.isFinite(t)) throw typeError('executeWithLease: clock() must return finite milliseconds');
    return Math.floor(t);
  };
  const started = tick();
  const acq = await heart.acquire(runId, owner, ttlSeconds);
  if (!acq.acquired || !acq.fence) return notRun(acq.run === null ? contract.notRunReasons.runMissing : contract.notRunReasons.runFound, acq.code);
  session.onAcquired(JSON.stringify(acq.fence), started);

  let fence = acq.fence;
  let lastBeat = started;
  let finished = false;
  let chain = Promise.resolve();
  const controller = new AbortController();
  const lose = (cause) => {
    if (cause && !controller.signal.aborted) controller.abort(new LeaseLostError(cause, runId));
  };
  const renewNow = async (at) => {
    let done;
    try {
      done = await driveStep(heart, 'renew', JSON.stringify({ fence, ttlSeconds }));
    } catch (e) {
      done = { done: true, error: { code: 'store-unavailable', message: messageOf(e) } };
    }
    const cause = session.onRenewed(JSON.stringify({ ok: done.ok, error: done.error }), at);
    if (done.ok && done.ok.outcome === 'ok') fence = mintedFence(done.ok.value);
    lose(cause);
  };
  // One beat at a time, and never during the release: every renew and the release go
  // through `chain`.
  const serialized = (f) => {
    const p = chain.then(f, f);
    chain = p.then(
      () => {},
      () => {},
    );
    return p;
  };
  let beating = false;
  // A timer callback must never throw or leave a rejected promise behind.
  const timerBeat = () => {
    if (finished) return;
    try {
      if (beating || !session.shouldRenew()) {
        lose(session.checkExpiry(tick()));
        return;
      }
    } catch {
      return;
    }
    beating = true;
    serialized(async () => {
      if (finished) return;
      const at = tick();
      lastBeat = at;
      await renewNow(at);
    })
      .catch(() => {})
      .finally(() => {
        beating = false;
      });
  };
  const lease = Object.freeze({
    get fence() {
      return fence;
    },
    signal: controller.signal,
    get lost() {
      return session.lost();
    },
    /**
     * A cooperative heartbeat: renews when a period has passed since the last beat
     * (by `clock`). Resolves to the lost cause, or null.
     */
    heartbeat: () =>
      serialized(async () => {
        const at = tick();
        if (finished) return session.lost();
        if (at - lastBeat < session.intervalMs() || !session.shouldRenew()) {
          lose(session.checkExpiry(at));
          return session.lost();
        }
        lastBeat = at;
        await renewNow(at);
        return session.lost();
      }),
  });
  const getFence = () => fence;
  let timer = null;
  if (autoHeartbeat) {
    timer = setInterval(timerBeat, session.intervalMs());
    if (typeof timer.unref === 'function') timer.unref();
  }
  let ok = false;
  let result;
  let failure;
  try {
    result = await work(getFence, controller.signal, lease);
    ok = true;
  } catch (e) {
    failure = e;
  }
  finished = true;
  if (timer) clearInterval(timer);
  let released = false;
  // A lease already known lost, with a beat still in flight, is not released: the release
  // would have to wait behind that beat (serialized, fix 7), and a store that never answers
  // would hold the result back. The lease expires on its own and is swept.
  lose(session.checkExpiry(tick()));
  if (session.lost() && beating) {
    if (!ok) throw failure;
    return withExtras({ ran: true, result }, { released, lost: session.lost() || undefined });
  }
  await serialized(async () => {
    if (!session.shouldRelease()) return;
    const newest = JSON.parse(session.fenceJson());
    const to = native.releaseStatus(ok, Boolean(releaseToReady));
    try {
      released = (await heart.release(newest, to)) !== null;
    } catch {
      // The reference swallows release errors; `released: false` reports it.
    }
  });
  if (!ok) throw failure;
  return withExtras({ ran: true, result }, { released, lost: session.lost() || undefined });
}

module.exports = { MemoryEffectLedger, guardIrreversible, executeWithLease, LeaseLostError, checkLedger, codedError, isThenable };
