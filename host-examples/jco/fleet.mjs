// The jco-transpiled component behind the Node package's API: `HeartFleet` and the free
// functions the conformance runner (bindings-node/test/helpers/runner.mjs) drives, so the
// scenarios of tests/conformance/ replay through this second component host exactly as they
// replay through the Node package, and are compared with the native replay.
//
// Everything here is translation, no lease rule: JS arguments in the reference's shapes
// become the WIT's typed values (ISO text → s64 ms, numbers → BigInt, snake_case → kebab-case
// enums), each export call's `tuple<result, emitted>` is unpacked (receipts appended, counters
// added up, `err` thrown as an Error with the core's `.code`), and the typed results go back to
// the reference's JSON shapes (rows in snake_case with ISO times). A JS value the WIT cannot
// carry (a string where a number goes, a status that is no WIT case, an ISO text that is no
// time) is refused as `invalid-input` before the component is called.
//
// Host functions (the effect, the send, a probe) must be synchronous: a jco import cannot
// await. An effect's own exception is re-thrown, as the Node package does.

import { createRequire } from 'node:module';
import { ERROR_CODES, HeartFleet as CoreFleet, MemoryLeaseStore } from '../../bindings-node/index.mjs';
import { iso, kebab, leaseStore, snake } from './lease-store.mjs';
import { open, openVerifier } from './host.mjs';

export { ERROR_CODES, MemoryLeaseStore };

/** An Error with one of the core's codes. */
function coded(code, message) {
  return Object.assign(new Error(message), { code });
}

const invalid = (message) => coded('invalid-input', message);

/** A WIT `heart-error` as a coded Error (`other` carries "code: message"). */
function heartError(e) {
  if (e.tag !== 'other') return coded(e.tag, e.val);
  const at = e.val.indexOf(': ');
  return at > 0 ? coded(e.val.slice(0, at), e.val.slice(at + 2)) : coded('other', e.val);
}

// --- JS arguments → WIT values ----------------------------------------------------------

function s64(name, n) {
  if (!Number.isSafeInteger(n)) throw invalid(`${name} must be an integer, got ${JSON.stringify(n)}`);
  return BigInt(n);
}

function u32(name, n) {
  if (!Number.isSafeInteger(n) || n < 0 || n > 0xffff_ffff) throw invalid(`${name} must be an integer in 0..=4294967295, got ${JSON.stringify(n)}`);
  return n;
}

function str(name, s) {
  if (typeof s !== 'string') throw invalid(`${name} must be a string, got ${JSON.stringify(s)}`);
  return s;
}

function millis(name, iso) {
  const ms = typeof iso === 'string' ? Date.parse(iso) : NaN;
  if (Number.isNaN(ms)) throw invalid(`${name} must be an ISO timestamp, got ${JSON.stringify(iso)}`);
  return BigInt(ms);
}

function oneOf(name, text, cases) {
  if (typeof text !== 'string' || !cases.includes(kebab(text))) throw invalid(`${name} must be one of ${cases.join(', ')}, got ${JSON.stringify(text)}`);
  return kebab(text);
}

// A placeholder no string of a caller holds (a NUL and a per-process random suffix).
const INFINITY = `\u0000heart-fleet-infinity-${Math.random().toString(36).slice(2)}`;

/**
 * JSON text of a JS value. ±Infinity is written as ±1e999, the text JSON.parse reads as
 * ±Infinity, so the component refuses it with the reference's own message; no JSON text
 * reads as NaN, and `undefined` has no JSON form, so those are refused here.
 */
function jsonText(name, value) {
  let infinite = false;
  const text = JSON.stringify(value, (_, v) => {
    if (typeof v !== 'number' || Number.isFinite(v)) return v;
    if (Number.isNaN(v)) throw invalid(`${name}: NaN has no JSON form`);
    infinite = true;
    return v > 0 ? INFINITY : `-${INFINITY}`;
  });
  if (text === undefined) throw invalid(`${name} has no JSON form`);
  if (!infinite) return text;
  const marker = JSON.stringify(INFINITY).slice(1, -1);
  return text.replaceAll(`"-${marker}"`, '-1e999').replaceAll(`"${marker}"`, '1e999');
}

/** A fencing token in the reference's shape as the WIT record. */
function tokenIn(f) {
  if (f === null || typeof f !== 'object') throw invalid('fence must be an object');
  return {
    runId: str('fence.runId', f.runId),
    owner: str('fence.owner', f.owner),
    leaseExpiresAt: millis('fence.leaseExpiresAt', f.leaseExpiresAt),
    epoch: f.epoch === undefined || f.epoch === null ? undefined : s64('fence.epoch', f.epoch),
  };
}

// The core's lists (through the Node package's contract), as the WIT's kebab-case enums.
const contract = createRequire(import.meta.url)('../../bindings-node/lib/contract.cjs');
const RELEASE_TO = contract.nextStatuses.map(kebab);
const STATUSES = contract.runStatuses.map(kebab);

/** The core's 13 counters at zero (their names from the core, through the Node package). */
const ZERO_METRICS = Object.freeze(
  Object.fromEntries(Object.keys(new CoreFleet({ store: new MemoryLeaseStore(new Date(0).toISOString()) }).metrics).map((k) => [k, 0])),
);

// --- WIT values → the reference's JSON shapes -------------------------------------------

const orNull = (v, f = (x) => x) => (v === undefined || v === null ? null : f(v));
const parsed = (text) => JSON.parse(text);

const tokenOut = (t) => ({ runId: t.runId, owner: t.owner, leaseExpiresAt: iso(t.leaseExpiresAt), epoch: orNull(t.epoch, Number) });

const runOut = (r) => ({
  id: r.id,
  task_id: orNull(r.taskId),
  assignment_id: r.assignmentId,
  objective: r.objective,
  required_capabilities: r.requiredCapabilities,
  status: snake(r.status),
  assigned_agent: orNull(r.assignedAgent),
  lease_owner: orNull(r.leaseOwner),
  lease_expires_at: orNull(r.leaseExpiresAt, iso),
  retries: Number(r.retries),
  budget: orNull(r.budget, parsed),
  approval_state: r.approvalState,
  visibility: r.visibility,
  idempotency_key: r.idempotencyKey,
  created_by: r.createdBy,
  created_at: iso(r.createdAt),
  updated_at: iso(r.updatedAt),
  fencing_epoch: Number(r.fencingEpoch),
});

const intentOut = (r) => ({
  run_id: r.runId,
  effect_key: r.effectKey,
  state: r.state,
  channel: r.channel,
  payload_digest: r.payloadDigest,
  fence_owner: orNull(r.fenceOwner),
  fence_expires_at: orNull(r.fenceExpiresAt, iso),
  fence_epoch: orNull(r.fenceEpoch, Number),
  external_ref: orNull(r.externalRef, parsed),
  attempts: Number(r.attempts),
  last_error: orNull(r.lastError),
  created_at: iso(r.createdAt),
  committed_at: orNull(r.committedAt, iso),
});

const instanceOut = (r) => ({
  instance_id: r.instanceId,
  hostname: orNull(r.hostname),
  pid: orNull(r.pid, Number),
  status: r.status,
  started_at: iso(r.startedAt),
  last_heartbeat: iso(r.lastHeartbeat),
  metadata: orNull(r.metadata, parsed),
});

const receiptOut = (r) => ({
  schemaVersion: r.schemaVersion,
  event: snake(r.event),
  runId: r.runId,
  owner: r.owner,
  leaseExpiresAt: orNull(r.leaseExpiresAt),
  effectKey: orNull(r.effectKey),
  at: r.at,
  digest: r.digest,
});

const sweepOut = (s) => ({
  reclaimedCount: Number(s.reclaimedCount),
  reclaimedIds: s.reclaimedIds,
  quarantinedIds: s.quarantinedIds,
  errors: s.errors,
});

// --- the fleet ----------------------------------------------------------------------------

/** The Node package's `HeartFleet` API over one jco instance of the component. */
export class HeartFleet {
  #fleet;
  #hooks = new Map();
  #nextHandle = 1n;
  #receipts = [];
  #metrics = { ...ZERO_METRICS };

  /** `store`: an object with a synchronous `execute(request)` in the core's JSON form. */
  constructor({ store, maxRetries = 5 }) {
    if (!store || typeof store.execute !== 'function') throw invalid('store must have an execute(request) method');
    const retries = maxRetries === Infinity || maxRetries === null ? undefined : u32('maxRetries', maxRetries);
    const { fleet } = open(leaseStore(store), this.#hooks);
    this.#fleet = new fleet.Fleet(retries);
  }

  /** Receipts in the order they were made, in the reference's JSON shape. */
  receipts() {
    return this.#receipts.slice();
  }

  /** The 13 counters, added up over every call. */
  get metrics() {
    return { ...this.#metrics };
  }

  /** Keeps what one export call emitted. */
  absorb(emitted) {
    for (const r of emitted.receipts) this.#receipts.push(receiptOut(r));
    for (const [k, n] of Object.entries(emitted.counters)) this.#metrics[k] = (this.#metrics[k] ?? 0) + Number(n);
  }

  /** Unpacks a `tuple<result, emitted>`: keeps the emitted, returns `ok` or throws `err`. */
  take([result, emitted]) {
    this.absorb(emitted);
    if (result.tag === 'err') throw heartError(result.val);
    return result.val;
  }

  /** Runs `call(fleet, handle)` with `hooks` reachable through `handle` for that call only. */
  withHooks(hooks, call) {
    const handle = this.#nextHandle++;
    this.#hooks.set(handle, hooks);
    try {
      return this.take(call(this.#fleet, handle));
    } finally {
      this.#hooks.delete(handle);
    }
  }

  #op(method, ...args) {
    return this.take(this.#fleet[method](...args));
  }

  async acquire(runId, owner, ttlSeconds) {
    const r = this.#op('acquire', str('runId', runId), str('owner', owner), s64('ttlSeconds', ttlSeconds));
    return { acquired: r.acquired, run: orNull(r.run, runOut), fence: orNull(r.fence, tokenOut), reason: orNull(r.reason), code: orNull(r.code) };
  }

  async renew(fence, ttlSeconds) {
    const r = this.#op('renew', tokenIn(fence), s64('ttlSeconds', ttlSeconds));
    return r.tag === 'ok' ? tokenOut(r.val) : null;
  }

  async release(fence, nextStatus) {
    const r = this.#op('release', tokenIn(fence), oneOf('nextStatus', nextStatus, RELEASE_TO));
    return r.tag === 'ok' ? runOut(r.val) : null;
  }

  async verifyFence(fence) {
    return this.#op('verifyFence', tokenIn(fence));
  }

  async reclaimExpired({ limit = 100 } = {}) {
    return sweepOut(this.#op('reclaimExpired', u32('limit', limit)));
  }

  async reclaimDeadInstanceRuns({ ttlMs = 90_000, maxReclaimsPerCycle = 200 } = {}) {
    const s = this.#op('reclaimDeadInstanceRuns', s64('ttlMs', ttlMs), u32('maxReclaimsPerCycle', maxReclaimsPerCycle));
    return { deadInstanceIds: s.deadInstanceIds, ...sweepOut(s) };
  }

  async registerInstance(instanceId) {
    return instanceOut(this.#op('registerInstance', str('instanceId', instanceId), undefined, undefined, undefined));
  }

  async heartbeatInstance(instanceId) {
    return this.#op('heartbeatInstance', str('instanceId', instanceId));
  }

  async drainInstance(instanceId) {
    return this.#op('drainInstance', str('instanceId', instanceId));
  }

  async ensureResourceRun(kind, key, { objective = '', createdBy = '' } = {}) {
    const e = this.#op('ensureResourceRun', str('kind', kind), str('key', key), str('objective', objective), str('createdBy', createdBy));
    return { run: runOut(e.run), created: e.created };
  }

  async requeueRun(runId, operator) {
    return runOut(this.#op('requeueRun', str('runId', runId), str('operator', operator)));
  }

  async forceRelease(runId) {
    return runOut(this.#op('forceRelease', str('runId', runId)));
  }

  async listRuns({ status = null, limit = 100 } = {}) {
    const s = status === null ? undefined : oneOf('status', status, STATUSES);
    return this.#op('listRuns', s, u32('limit', limit)).map(runOut);
  }

  /** `fleet.start-lease`: the lease-start variant (a session resource, or why not). */
  startLease(options) {
    return this.#op('startLease', options);
  }
}

/** The component's own in-instance ledger (`ledger-kind.memory`), one per fleet. */
export class MemoryEffectLedger {
  kind = 'memory';
}

/** The store's `effect_intents` table (`ledger-kind.durable`), through `heart`. */
export class DurableEffectLedger {
  kind = 'durable';
  constructor({ heart }) {
    this.heart = heart;
  }
}

/** Hooks whose `runEffect` calls `fn` and keeps its exception to re-throw. */
function effectHooks(fn) {
  const hooks = {
    thrown: null,
    runEffect(effectKey, epoch) {
      let value;
      try {
        value = fn(effectKey, epoch === undefined ? null : Number(epoch));
      } catch (e) {
        hooks.thrown = e;
        throw String(e && e.message !== undefined ? e.message : e);
      }
      if (value && typeof value.then === 'function') {
        hooks.thrown = new TypeError('a jco host cannot await: the effect must be synchronous');
        throw hooks.thrown.message;
      }
      return jsonText('the effect\'s result', value === undefined ? null : value);
    },
  };
  return hooks;
}

/** Runs `call`; an `effect-failed` caused by the effect's own exception re-throws that. */
function rethrowEffect(hooks, call) {
  try {
    return call();
  } catch (e) {
    if (e.code === 'effect-failed' && hooks.thrown !== null) throw hooks.thrown;
    throw e;
  }
}

export async function guardIrreversible(heart, fence, ledger, effectKey, fn) {
  if (!(ledger instanceof MemoryEffectLedger || ledger instanceof DurableEffectLedger)) throw invalid('ledger must be a MemoryEffectLedger or DurableEffectLedger');
  const hooks = effectHooks(fn);
  const token = tokenIn(fence);
  const r = rethrowEffect(hooks, () =>
    heart.withHooks(hooks, (f, handle) => f.guardIrreversible(token, ledger.kind, str('effectKey', effectKey), handle)),
  );
  return { committed: r.committed, result: orNull(r.result, parsed), reason: orNull(r.reason), code: orNull(r.code) };
}

export async function sendOnce(heart, ledger, { fence, channel, effectKey, payload, send }) {
  if (!(ledger instanceof DurableEffectLedger) || ledger.heart !== heart) throw invalid('sendOnce: ledger must be a DurableEffectLedger over this fleet');
  const hooks = effectHooks(send);
  const args = [tokenIn(fence), str('channel', channel), str('effectKey', effectKey), jsonText('payload', payload)];
  const r = rethrowEffect(hooks, () => heart.withHooks(hooks, (f, handle) => f.sendOnce(...args, handle)));
  return { sent: r.sent, externalRef: orNull(r.externalRef, parsed), committed: orNull(r.committed), reason: orNull(r.reason), code: orNull(r.code) };
}

/** A probe's answer (`{status, externalRef?}` or the status text) as the WIT verdict. */
function verdictIn(v) {
  const status = typeof v === 'string' ? v : v === null || v === undefined ? 'unknown' : v.status;
  if (status === 'sent') return { tag: 'sent', val: jsonText('externalRef', v.externalRef ?? null) };
  if (status === 'not-sent' || status === 'unknown') return { tag: status };
  throw `a probe answered ${JSON.stringify(v)}, not sent, not-sent or unknown`;
}

export async function reconcileOutbox(ledger, { probes = {}, maxAttempts = 5, limit = 50 } = {}) {
  if (!(ledger instanceof DurableEffectLedger)) throw invalid('reconcileOutbox: ledger must be a DurableEffectLedger');
  const hooks = {
    probe(intent) {
      const p = probes[intent.channel];
      if (typeof p !== 'function') return { tag: 'unknown' };
      let v;
      try {
        v = p(intentOut(intent));
      } catch (e) {
        throw String(e && e.message !== undefined ? e.message : e);
      }
      if (v && typeof v.then === 'function') throw 'a jco host cannot await: the probe must be synchronous';
      return verdictIn(v);
    },
  };
  const s = ledger.heart.withHooks(hooks, (f, handle) => f.reconcileOutbox(s64('maxAttempts', maxAttempts), u32('limit', limit), handle));
  return {
    scanned: Number(s.scanned),
    committed: Number(s.committed),
    reopened: Number(s.reopened),
    abandoned: Number(s.abandoned),
    left: Number(s.left),
    errors: s.errors,
  };
}

/** Heartbeats read the store's clock: `executeWithLease` takes no `clock` option. */
export const storeClock = true;

/**
 * `executeWithLease(heart, options, work)`: `fleet.start-lease`, then
 * `work(getFence, signal, lease)` (`lease.heartbeat()` beats once; with `autoHeartbeat`, the
 * default, a timer beats every `interval-ms`), then `lease-session.finish`. `signal` aborts
 * when the lease is lost. The component's heartbeats read the store's clock (`storeClock`),
 * so a `clock` option is refused rather than ignored.
 */
export async function executeWithLease(heart, options, work) {
  const { runId, owner, ttlSeconds, renewEveryMs, releaseToReady = false, autoHeartbeat = true, ...rest } = options ?? {};
  const unknown = Object.keys(rest);
  if (unknown.length > 0) throw invalid(`executeWithLease: unknown option ${unknown[0]}`);
  const start = heart.startLease({
    runId: str('runId', runId),
    owner: str('owner', owner),
    ttlSeconds: s64('ttlSeconds', ttlSeconds),
    renewEveryMs: renewEveryMs === undefined || renewEveryMs === null ? undefined : s64('renewEveryMs', renewEveryMs),
    releaseToReady: releaseToReady === true,
  });
  if (start.tag === 'not-run') {
    return { ran: false, reason: start.val.reason, code: orNull(start.val.code), released: false };
  }
  const session = start.val;
  const aborter = new AbortController();
  const lease = {
    heartbeat() {
      const [lost, emitted] = session.heartbeat();
      heart.absorb(emitted);
      if (lost !== undefined && !aborter.signal.aborted) aborter.abort(lost);
      return orNull(lost);
    },
  };
  // A timer's beat that throws (a trap) must not escape as an uncaught exception: it ends the
  // work's wait as the call's error.
  let beatFailure = null;
  const beat = () => {
    try {
      lease.heartbeat();
    } catch (e) {
      beatFailure ??= e;
      aborter.abort(e);
    }
  };
  const timer = autoHeartbeat ? setInterval(beat, Number(session.intervalMs())) : null;
  let outcome;
  try {
    outcome = { ok: true, value: await work(() => orNull(session.fence(), tokenOut), aborter.signal, lease) };
  } catch (e) {
    outcome = { ok: false, error: e };
  } finally {
    if (timer !== null) clearInterval(timer);
  }
  if (beatFailure !== null) outcome = { ok: false, error: beatFailure };
  const [finish, emitted] = session.finish(outcome.ok);
  heart.absorb(emitted);
  session[Symbol.dispose]?.();
  if (!outcome.ok) throw outcome.error;
  return { ran: true, result: outcome.value, lost: orNull(finish.lost), released: finish.released };
}

// The canonical functions need an instance but no store: one, opened on first use, whose
// `canonical` exports they call.
let pureCanonical = null;

/** `canonical.<name>(...args)` of the component, its `err` thrown as a coded Error. */
function canonical(name, ...args) {
  pureCanonical ??= open(leaseStore(new MemoryLeaseStore(new Date(0).toISOString()))).canonical;
  try {
    return pureCanonical[name](...args);
  } catch (e) {
    // jco throws a top-level result's `err` value itself: the heart-error variant.
    if (e && typeof e.tag === 'string' && typeof e.val === 'string') throw heartError(e);
    throw e;
  }
}

export const canonicalize = (value) => canonical('canonicalize', jsonText('value', value));
export const digest = (value) => canonical('digest', jsonText('value', value));
export const deterministicResourceId = (kind, key) => canonical('deterministicResourceId', str('kind', kind), str('key', key));
export const effectKey = (prefix, identity) => canonical('effectKey', str('prefix', prefix), jsonText('identity', identity));
export function verifyReceipt(receipt) {
  canonical('verifyReceipt', jsonText('receipt', receipt));
  return true;
}

let verifier = null;
const utf8 = new TextEncoder();
const VERIFY_OPTIONS = ['key', 'publicKey', 'run', 'finalSeq', 'requireChain'];
const optional = (v) => (v === undefined || v === null ? undefined : v);

/**
 * `verifyReceipts(log, options)` through the receipt-log verifier component (its own
 * component: the lease component does not carry the chain). The log and options are typed
 * here; the verifying is the component's.
 */
export function verifyReceipts(log, options = {}) {
  let bytes;
  if (typeof log === 'string') bytes = utf8.encode(log);
  else if (log instanceof Uint8Array) bytes = log;
  else if (Array.isArray(log)) bytes = utf8.encode(log.map((r, i) => `${jsonText(`log[${i}]`, r)}\n`).join(''));
  else throw invalid('verifyReceipts: the log is JSON Lines text, bytes or an array of receipts');
  if (options === null || typeof options !== 'object' || Array.isArray(options)) throw invalid('verifyReceipts: options is an object');
  const unknown = Object.keys(options).filter((k) => !VERIFY_OPTIONS.includes(k));
  if (unknown.length > 0) throw invalid(`verifyReceipts options: unknown field \`${unknown[0]}\``);
  const finalSeq = options.finalSeq ?? {};
  const typed = {
    key: optional(options.key) === undefined ? undefined : str('key', options.key),
    publicKey: optional(options.publicKey) === undefined ? undefined : str('publicKey', options.publicKey),
    run: optional(options.run) === undefined ? undefined : str('run', options.run),
    finalSeqs: Object.entries(finalSeq).map(([runId, seq]) => {
      if (!Number.isSafeInteger(seq) || seq < 0) throw invalid(`finalSeq: ${runId}: a seq is an integer, got ${JSON.stringify(seq)}`);
      return { runId, seq: BigInt(seq) };
    }),
    requireChain: options.requireChain === undefined ? false : options.requireChain === true,
  };
  verifier ??= openVerifier();
  let r;
  try {
    r = verifier.verifyReceipts(bytes, typed);
  } catch (e) {
    if (e && typeof e.tag === 'string' && typeof e.val === 'string') throw heartError(e);
    throw e;
  }
  const n = (v) => (v === undefined ? null : Number(v));
  return {
    receipts: n(r.receipts),
    ok: n(r.ok),
    tampered: n(r.tampered),
    malformed: n(r.malformed),
    chained: n(r.chained),
    unchained: n(r.unchained),
    signed: n(r.signed),
    runs: Object.fromEntries(r.runs.map((c) => [c.runId, { receipts: n(c.receipts), chained: n(c.chained), unchained: n(c.unchained), lastSeq: n(c.lastSeq) }])),
    findings: r.findings.map((f) => ({ position: n(f.position), runId: f.runId ?? null, code: f.code, message: f.message })),
  };
}
