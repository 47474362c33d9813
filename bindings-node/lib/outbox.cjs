'use strict';
// The durable effect ledger (effect_intents + outbox_dispatch_log), sendOnce and the
// reconciler, through the core's machines: over the heart's store (`{heart}`, `{store}`),
// or over an injected supabase-js-like client (`{client}`, the reference's form).
//
// The `{client}` form keeps an internal SupabaseLeaseStore over the client for the two
// tables; one operation's intent and log requests go to it, every other request (the fence
// check, the run a dispatch is conditioned on) to the heart's store, whatever it is. What a
// REST client cannot guarantee, unlike the SQL stores (see lib/supabase-store.cjs):
//  * each transition is a read plus a conditional write (compare-and-set on the columns the
//    decision read, re-decided when the row changed), not one statement;
//  * the clock is the worker's: the ledger's `now` (default the wall clock) stamps the rows
//    and decides which dispatches are stale; `findStaleDispatched(nowIso)` and
//    `reconcileOutbox({now})` may pass their own instant, as in the reference;
//  * mark-dispatched's condition that the run is still held by the live token is checked on
//    the run read from the heart's store (at that store's clock) just before the write, not
//    atomically with it: a takeover in the moment between that read and the write goes
//    unseen, and the old holder's dispatch goes ahead;
//  * a dispatch-log entry is a second insert after the transition, best-effort as in the
//    reference (a failed insert never fails the transition).

const native = require('./native.cjs');
const { HeartFleet, drive, driveStep, storeCall, bounded, checkStore } = require('./fleet.cjs');
const { MemoryLeaseStore } = require('./memory-store.cjs');
const { SupabaseLeaseStore, RUN_SOURCE } = require('./supabase-store.cjs');
const {
  typeError,
  codedError,
  str,
  int,
  optInt,
  isoOf,
  msOf,
  messageOf,
  opts: optsOf,
  fence: fenceOf,
  describe,
  rethrowNative,
  withExtras,
  knownKeys,
  U32,
} = require('./util.cjs');
const { toCoreJson, evidenceJson, unstorableEvidence } = require('./canonical.cjs');

const { channels: CHANNELS } = require('./contract.cjs');
/** The store requests of the two ledger tables (routed to a `{client}` ledger's store). */
const LEDGER_OPS = new Set(['claim_intent', 'update_intent', 'scan_intents', 'read_log']);
const CLIENT_OPTIONS = ['client', 'intentsTable', 'logTable', 'now'];
const STORE_LEDGER_OPTIONS = ['heart', 'store'];
const SEND_OPTIONS = ['fence', 'channel', 'effectKey', 'payload', 'send', 'toExternalRef'];
const RECONCILE_OPTIONS = ['probes', 'maxAttempts', 'limit', 'now', 'heart'];

function channelOf(v) {
  if (typeof v !== 'string' || !CHANNELS.includes(v)) throw typeError(`channel must be one of ${CHANNELS.join(', ')}, got ${describe(v)}`);
  return v;
}

function textOf(name, v) {
  if (typeof v !== 'string') throw typeError(`${name} must be a string, got ${describe(v)}`);
  return v;
}

/** The request language's literals. */
function storeRequest(kind, args) {
  try {
    return JSON.parse(native.storeRequest(kind, JSON.stringify(args)));
  } catch (e) {
    return rethrowNative(e);
  }
}

/** A failed ledger call as the reference words it (`<method> failed: <message>`), coded. */
function failure(method, e) {
  const code = e && e.code === 'store-protocol' ? 'store-protocol' : 'store-unavailable';
  const message = e && typeof e.pgMessage === 'string' ? e.pgMessage : messageOf(e);
  return codedError(code, `${method} failed: ${message}`);
}

/**
 * The answer of one store call (`call()` → a StoreAnswer, its JSON text, or a Promise of
 * either), waited for at most `heart`'s storeTimeoutMs.
 */
async function answerOf(method, call, want, heart) {
  let answer;
  try {
    answer = await bounded(Promise.resolve(call()), heart._storeTimeoutMs);
    if (typeof answer === 'string') answer = JSON.parse(answer);
  } catch (e) {
    throw failure(method, e);
  }
  const r = answer && answer.reply;
  if (!r || r.kind !== want || !Number.isFinite(Date.parse(answer.now))) {
    // One line naming what came, never the rows the store sent.
    const what = r && typeof r.kind === 'string' ? `a reply of kind ${JSON.stringify(r.kind).slice(0, 40)}` : describe(answer);
    throw codedError('store-protocol', `${method}: the store answered ${what}, not a ${want} reply with a valid now`);
  }
  return answer;
}

/**
 * Where a dispatch's run is read: the heart's own store, as the driving loop calls it
 * (`{run, now}`: the row or null, and that store's clock in milliseconds).
 */
function runsOf(heart) {
  return async (runId) => {
    const a = await answerOf('read the run', () => storeCall(heart, JSON.stringify(storeRequest('readRun', { runId }))), 'run', heart);
    return { run: a.reply.run, now: Date.parse(a.now) };
  };
}

/** Routes one operation's ledger requests to `view` (driveStep's `storeFor`). */
function routeTo(view) {
  return (req) => (LEDGER_OPS.has(req.op) ? view : null);
}

/**
 * The durable effect ledger: the `effect_intents` table (claim = insert unless present) and
 * its `outbox_dispatch_log`.
 *
 * * `new DurableEffectLedger({client, intentsTable?, logTable?, now?})` (the reference's
 *   form): over a supabase-js-like client (`from(table)` with insert / update / select, eq /
 *   in / lt, limit, maybeSingle; an error 23505 is the duplicate). Tables default to
 *   `effect_intents` and `outbox_dispatch_log`, `now` (a Date or milliseconds) to the wall
 *   clock. `sendOnce` and `reconcileOutbox` over it work with a heart over any store.
 * * `new DurableEffectLedger({heart})`: the heart's store's tables; effect receipts and
 *   counters go to the heart. `{store}` alone works too (receipts then go to a private fleet).
 *
 * The reference's single transitions (`claimIntent`, `markDispatched`, `markCommitted`,
 * `findStaleDispatched`, `reopen`, `noteUnresolved`, `abandon`, `logAttempt`) are there for
 * code that drives the protocol by hand; they are unfenced, as in the reference, while
 * `sendOnce` is the fenced protocol. A store or client failure throws `<method> failed:
 * <message>` (code `store-unavailable`); a transition that did not happen logs nothing.
 */
class DurableEffectLedger {
  constructor(options) {
    const o = optsOf('DurableEffectLedger options', options);
    if (o.client !== undefined) {
      clientForm(this, o);
      return;
    }
    knownKeys('DurableEffectLedger options', o, STORE_LEDGER_OPTIONS);
    if (o.heart !== undefined && !(o.heart instanceof HeartFleet)) throw typeError('DurableEffectLedger: heart must be a HeartFleet');
    const heart = o.heart ?? (o.store !== undefined ? new HeartFleet({ store: o.store }) : null);
    if (!heart) throw typeError('DurableEffectLedger: {client}, {heart} or {store} required');
    if (o.store !== undefined && o.store !== heart.store) throw typeError('DurableEffectLedger: store must be the heart\'s store');
    checkStore(heart.store);
    Object.defineProperty(this, 'heart', { value: heart });
    Object.defineProperty(this, 'store', { value: heart.store, enumerable: true });
  }

  /**
   * The `{client}` form's store for one operation: the ledger's tables and clock (or `now`),
   * the run of a dispatch read through `runs`.
   */
  _view({ now, runs } = {}) {
    return new SupabaseLeaseStore({ client: this._client, tables: this._tables, now: now ?? this._now, [RUN_SOURCE]: runs });
  }

  /** One request on the ledger's tables: on `view` when given, else on the ledger's store. */
  async _call(method, request, want, view) {
    const call = view ? () => view.execute(request) : () => storeCall(this.heart, JSON.stringify(request));
    return (await answerOf(method, call, want, this.heart)).reply;
  }

  /**
   * One hand-driven transition of an intent (the core builds its request: what it sets, its
   * condition, its dispatch-log entry); true when it happened.
   */
  async _transition(method, runId, effectKey, fields) {
    const request = storeRequest(method, { runId: str('runId', runId), effectKey: str('effectKey', effectKey), ...fields });
    return (await this._call(method, request, 'intent')).intent !== null;
  }

  /**
   * `claimIntent({runId, effectKey, channel, payloadDigest})` → true when this call inserted
   * the intent; false when it exists (a duplicate, logged `deduped`).
   */
  async claimIntent(input) {
    const i = optsOf('claimIntent input', input, ['runId', 'effectKey', 'channel', 'payloadDigest']);
    const request = storeRequest('claimIntent', {
      runId: str('runId', i.runId),
      effectKey: str('effectKey', i.effectKey),
      channel: channelOf(i.channel),
      payloadDigest: textOf('payloadDigest', i.payloadDigest),
    });
    return (await this._call('claimIntent', request, 'claim')).claimed;
  }

  /**
   * `recordOnce(runId, effectKey)`: claims the intent with channel `internal` and an empty
   * digest (a drop-in `EffectLedger`). true the first time.
   */
  async recordOnce(runId, effectKey) {
    return drive(this.heart, 'recordOnce', { runId: str('runId', runId), effectKey: str('effectKey', effectKey) });
  }

  /**
   * `markDispatched({runId, effectKey, fenceOwner, fenceExpiresAt})`: intent → dispatched
   * with the fence recorded; true when it happened (the intent was in state `intent`).
   */
  async markDispatched(input) {
    const i = optsOf('markDispatched input', input, ['runId', 'effectKey', 'fenceOwner', 'fenceExpiresAt']);
    return this._transition('markDispatched', i.runId, i.effectKey, {
      fenceOwner: str('fenceOwner', i.fenceOwner),
      fenceExpiresAt: isoOf('fenceExpiresAt', i.fenceExpiresAt),
    });
  }

  /**
   * `markCommitted({runId, effectKey, externalRef})`: dispatched → committed with the
   * evidence, in one write, logged `sent`; true when it happened.
   */
  async markCommitted(input) {
    const i = optsOf('markCommitted input', input, ['runId', 'effectKey', 'externalRef']);
    const externalRef = JSON.parse(toCoreJson(i.externalRef, 'externalRef'));
    return this._transition('markCommitted', i.runId, i.effectKey, { externalRef });
  }

  /**
   * Dispatched intents whose fence expired (`<= now`), oldest first, at most `limit` (50).
   * The `{client}` form decides at `nowIso` when given (else its clock), as the reference;
   * a store ledger decides by the store's clock and ignores `nowIso`.
   */
  async findStaleDispatched(nowIso, limit) {
    const limitOnly = typeof nowIso === 'number' && limit === undefined;
    const request = storeRequest('staleIntents', { limit: optInt('limit', limitOnly ? nowIso : limit, 0, U32) });
    let view = null;
    if (this._client && !limitOnly && nowIso !== undefined && nowIso !== null) {
      const at = msOf('nowIso', nowIso);
      view = this._view({ now: () => at });
    }
    return (await this._call('findStaleDispatched', request, 'intents', view)).intents;
  }

  /**
   * `reopen(runId, effectKey, lastError)`: dispatched → intent (proved not sent), the fence
   * cleared; logged `reconciled` only when it happened. The current holder of the run may
   * then dispatch it again through `sendOnce`.
   */
  async reopen(runId, effectKey, lastError) {
    await this._transition('reopen', runId, effectKey, { lastError: textOf('lastError', lastError) });
  }

  /**
   * `noteUnresolved(runId, effectKey, currentAttempts)`: records one undecided reconcile
   * pass on a dispatched intent (`attempts = current + 1`); returns that count.
   */
  async noteUnresolved(runId, effectKey, currentAttempts) {
    const current = Number.isFinite(currentAttempts) ? int('currentAttempts', currentAttempts, 0, Number.MAX_SAFE_INTEGER - 1) : 0;
    await this._transition('noteUnresolved', runId, effectKey, { currentAttempts: current });
    return current + 1;
  }

  /**
   * `abandon(runId, effectKey, reason)`: intent or dispatched → abandoned (terminal, never
   * resent); logged `abandoned` only when it happened.
   */
  async abandon(runId, effectKey, reason) {
    await this._transition('abandon', runId, effectKey, { reason: textOf('reason', reason) });
  }

  /**
   * `logAttempt(runId, effectKey, attempt, outcome, detail?)`: appends a dispatch-log entry
   * by hand, best-effort (never throws for a client failure), as in the reference. Only the
   * `{client}` form: a store ledger logs with the transitions it records.
   */
  async logAttempt(runId, effectKey, attempt, outcome, detail) {
    if (!this._client) throw codedError('invalid-state', 'logAttempt: a store ledger writes its dispatch log with the transitions it records');
    const entry = {
      run_id: str('runId', runId),
      effect_key: str('effectKey', effectKey),
      attempt: int('attempt', attempt, 0, Number.MAX_SAFE_INTEGER),
      outcome: str('outcome', outcome),
      detail: detail === undefined ? null : JSON.parse(toCoreJson(detail, 'detail')),
    };
    let at;
    try {
      at = new Date(this.store._clock()).toISOString();
    } catch {
      return; // a broken clock fails the log entry only
    }
    await this.store._log({ ...entry, at });
  }

  /** The dispatch log entries of one effect, oldest first. */
  async dispatchLog(runId, effectKey) {
    const request = storeRequest('readLog', { runId: str('runId', runId), effectKey: str('effectKey', effectKey) });
    return (await this._call('dispatchLog', request, 'log')).entries;
  }
}

/** The `{client}` form's state: the client, its tables and clock, a store over them. */
function clientForm(ledger, o) {
  const unknown = Object.keys(o).filter((k) => !CLIENT_OPTIONS.includes(k));
  if (unknown.length > 0) throw typeError(`DurableEffectLedger: unknown option ${unknown[0]} with {client} (options: ${CLIENT_OPTIONS.join(', ')})`);
  const { client, intentsTable = 'effect_intents', logTable = 'outbox_dispatch_log', now } = o;
  if (client === null || typeof client !== 'object' || typeof client.from !== 'function') {
    throw typeError(`DurableEffectLedger: client must be a supabase-js client (with from()), got ${describe(client)}`);
  }
  for (const [name, v] of [['intentsTable', intentsTable], ['logTable', logTable]]) {
    if (typeof v !== 'string' || v === '') throw typeError(`DurableEffectLedger: ${name} must be a non-empty string, got ${describe(v)}`);
  }
  if (now !== undefined && typeof now !== 'function') throw typeError(`DurableEffectLedger: now must be a function returning a Date, got ${describe(now)}`);
  const hidden = (k, value) => Object.defineProperty(ledger, k, { value });
  hidden('_client', client);
  hidden('_tables', { intents: intentsTable, log: logTable });
  hidden('_now', now);
  const store = ledger._view();
  // A private fleet over the ledger's store drives recordOnce and a reconcile without a heart.
  hidden('heart', new HeartFleet({ store }));
  Object.defineProperty(ledger, 'store', { value: store, enumerable: true });
}

function checkDurable(heart, ledger) {
  if (!(ledger instanceof DurableEffectLedger)) {
    throw typeError(`the ledger must be a DurableEffectLedger, got ${describe(ledger)}`);
  }
  // A {client} ledger works with a heart over any store; the others share the heart's store.
  if (!ledger._client && ledger.store !== heart.store) throw typeError('the ledger must be over the heart\'s store');
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
 *
 * Everything that can be checked is checked before any I/O (the options, the fence, the
 * channel, the key, the payload). What the send returns can only be checked after it went
 * out, so it is never reported as bad input: evidence that cannot be stored as JSON (NaN, a
 * bigint, a circular object, nesting deeper than 100 levels) is committed as
 * `{"unstorable":{"type":…,"reason":…}}`, and a toExternalRef that throws commits that form
 * too, then its exception propagates (the intent is committed: a retry dedupes).
 */
async function sendOnce(heart, ledger, options) {
  if (!(heart instanceof HeartFleet)) throw typeError('sendOnce: heart must be a HeartFleet');
  checkDurable(heart, ledger);
  if (options === null || typeof options !== 'object') throw typeError('sendOnce: options required');
  knownKeys('sendOnce options', options, SEND_OPTIONS);
  const { channel, effectKey, payload, send, toExternalRef } = options;
  const f = fenceOf('fence', options.fence);
  channelOf(channel);
  str('effectKey', effectKey);
  if (typeof send !== 'function') throw typeError('sendOnce: send must be a function');
  if (toExternalRef !== undefined && typeof toExternalRef !== 'function') throw typeError('sendOnce: toExternalRef must be a function');
  // The payload digest is computed first: a non-finite number throws before any I/O.
  const payloadText = toCoreJson(payload, 'payload');
  const args =
    '{"fence":' + JSON.stringify(f) + ',"channel":' + JSON.stringify(channel) + ',"effectKey":' + JSON.stringify(effectKey) +
    ',"payload":' + payloadText + '}';
  let result;
  let refThrew = null;
  const host = {
    effect: async (key, epoch) => {
      result = await send({ epoch, effectKey: key });
      // The send went out: from here on nothing is bad input, and the evidence is stored.
      if (!toExternalRef) return evidenceJson(result);
      let evidence;
      try {
        evidence = toExternalRef(result);
      } catch (e) {
        refThrew = { error: e };
        const name = e instanceof Error && e.name ? e.name : typeof e;
        return unstorableEvidence('toExternalRef', `toExternalRef threw ${name}: ${messageOf(e)}`);
      }
      return evidenceJson(evidence);
    },
  };
  // A {client} ledger's requests go to its tables; the fence and the run to the heart's store.
  const storeFor = ledger._client ? routeTo(ledger._view({ runs: runsOf(heart) })) : undefined;
  const step = await driveStep(heart, 'sendOnce', args, host, storeFor);
  if (step.error) throw codedError(step.error.code, step.error.message);
  if (refThrew) throw refThrew.error;
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
 * `reconcileOutbox(ledger, {probes, maxAttempts = 5, limit = 50, now?, heart?})`: for each
 * dispatched intent whose fence expired, ask `probes[channel](intent)`: `{status:"sent",
 * externalRef}` commits the evidence, `{status:"not-sent"}` reopens it for the run's holder,
 * `{status:"unknown"}` (or no probe) leaves it and abandons it past `maxAttempts`. Returns
 * `{scanned, committed, reopened, abandoned, left, errors}` counting only writes that
 * happened. Over a `{client}` ledger the clock is `now` when given (else the ledger's), as
 * in the reference; a store ledger's store decides and `now` is ignored. Receipts and
 * counters go to `heart` (default: the ledger's).
 */
async function reconcileOutbox(ledger, options) {
  if (!(ledger instanceof DurableEffectLedger)) throw typeError('reconcileOutbox: ledger must be a DurableEffectLedger');
  const o = optsOf('reconcileOutbox options', options, RECONCILE_OPTIONS);
  // A probe under a misspelt channel would never be asked.
  const probes = knownKeys('probes', optsOf('probes', o.probes), CHANNELS, 'channel');
  const heart = o.heart === undefined ? ledger.heart : o.heart;
  if (!(heart instanceof HeartFleet) || (!ledger._client && heart.store !== ledger.store)) {
    throw typeError('reconcileOutbox: heart must be a HeartFleet over the ledger\'s store');
  }
  if (o.now !== undefined && typeof o.now !== 'function') throw typeError(`reconcileOutbox: now must be a function returning a Date, got ${describe(o.now)}`);
  const maxAttempts = optInt('maxAttempts', o.maxAttempts, 0, Number.MAX_SAFE_INTEGER);
  const limit = optInt('limit', o.limit, 0, U32);
  const host = {
    probe: async (intent) => {
      const p = probeOf(probes, intent.channel);
      if (!p) return { status: 'unknown' };
      return verdictOf(await p(intent));
    },
  };
  return drive(heart, 'reconcileOutbox', { maxAttempts, limit }, host, ledger._client ? routeTo(ledger._view({ now: o.now })) : undefined);
}

module.exports = { DurableEffectLedger, sendOnce, reconcileOutbox, CHANNELS, MemoryLeaseStore };
