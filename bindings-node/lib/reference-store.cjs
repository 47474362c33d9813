'use strict';
// A user's own store written to the TypeScript package's LeaseStore contract:
//
//   getRun(runId) -> row | null
//   conditionalUpdate(runId, updates, {eq, in, lt}) -> updated row | null   (atomic)
//   findExpiredLeases(nowIso, limit) -> rows
//   now() -> Date
//
// each sync or async. HeartFleet accepts such an object as its store. The core turns every
// store request of an operation into calls of these methods and decides it with its own
// evaluator on the rows they return (docs/ARCHITECTURE.md, "A store with the LeaseStore
// methods"): a write is a compare-and-set, conditionalUpdate conditioned (eq) on every
// column the decision read with the values as read, decided again on a fresh read when the
// row changed in between (at most casRetries times, then store-unavailable, never a silent
// miss); renew, verifyFence and a release to a final status are one conditionalUpdate with
// the conditions the core states ({eq, in}), as the TypeScript package writes them. This
// file makes the calls the core asks for; it decides nothing.
//
// What this contract cannot guarantee, unlike a store that executes requests itself:
//  * The clock is the store's now(), read by the worker: when every worker's store reads its
//    own machine's clock, skewed clocks disagree about expiry (a worker running fast can take
//    over a lease that is still live by its holder's clock). Keep clocks synchronized (NTP)
//    and leases long relative to the skew, or make now() read the database's clock.
//  * A request is a read followed by a conditional write (one the core can state whole: the
//    write alone, read only when it misses), so contention costs re-decisions.
//  * findExpiredLeases decides which expired leases a sweep sees: a store that keeps the
//    TypeScript package's strict `expiry < now` misses a lease expiring exactly now (the next
//    sweep takes it); the sweep still reclaims only what the one expiry rule (`<= now`) allows.
//  * Columns the rows do not have and the TypeScript package's schema lacks (fencing_epoch)
//    are neither compared nor written: such a store's tokens carry epoch 0.
//  * Effect intents, instances, run listings and find-or-create have no method in the
//    contract: those requests fail with code invalid-input naming what is missing.

const native = require('./native.cjs');
const { codedError, describe, messageOf, rethrowNative, isThenable, firstLine, bounded } = require('./util.cjs');
const { runRow } = require('./rows.cjs');
const { separator } = require('./compact.cjs');
const contract = require('./contract.cjs');

/** The TypeScript package's LeaseStore methods. */
const LEASE_STORE_METHODS = contract.leaseStoreMethods;
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

/**
 * A row as the core takes it: the schema's defaults where the row has no value (or null in
 * a NOT NULL column), Dates as ISO text. Only the schema's columns are kept. (The
 * LivenessStore's rows, lib/liveness.cjs.)
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

function protocol(message) {
  return codedError('store-protocol', `${WHO}.${message}`);
}

/**
 * The calls of one operation on a LeaseStore object: `rows` keeps each run's row as the
 * store last returned it (a write is conditioned on its values as read); `started` is when
 * the current store request began: its calls share one storeTimeoutMs, each waited for at
 * most what is left of it. `who` names the store in the errors of its calls.
 */
function referenceCalls(store, { casRetries, timeoutMs, who = WHO }) {
  return { store, who, casRetries, timeoutMs, rows: new Map(), started: Date.now(), requests: null };
}

/** A new store request begins: its own time budget. */
function restart(calls) {
  calls.started = Date.now();
}

/**
 * Calls one method of the user's store within what is left of the request's time; its
 * failure is a store failure (no code).
 */
async function call(calls, method, ...args) {
  const left = calls.timeoutMs - (Date.now() - calls.started);
  if (left <= 0) throw new Error(`${calls.who}.${method}: not called, the request ran out of time (storeTimeoutMs ${calls.timeoutMs})`);
  try {
    const v = calls.store[method](...args);
    return isThenable(v) ? await bounded(v, left, calls.timeoutMs) : v;
  } catch (e) {
    throw new Error(`${calls.who}.${method}: ${messageOf(e)}`);
  }
}

/** What a method returned, as JSON text for the core (null for nothing). */
function rowText(method, v) {
  if (v === null || v === undefined) return 'null';
  let text;
  try {
    text = JSON.stringify(v);
  } catch (e) {
    throw protocol(`${method} returned a value that is not JSON: ${firstLine(messageOf(e))}`);
  }
  if (text === undefined) throw protocol(`${method} returned ${describe(v)}, not a row or null`);
  return text;
}

/** The store's now(), in whole milliseconds. */
async function clockOf(calls) {
  const v = await call(calls, 'now');
  const ms = v instanceof Date ? v.getTime() : v;
  if (typeof ms !== 'number' || !Number.isFinite(ms)) throw protocol(`now() returned ${describe(v)}, not a valid Date`);
  return Math.floor(ms);
}

/**
 * Makes the call the core asked for (`text`, its compact form: the core's `bridge::reference`
 * docs) and hands the answer to `target` (the operation, or a NativeReferenceRequests):
 * returns what `target` answers next.
 */
async function leaseStoreCall(target, text, calls) {
  const tag = text.charCodeAt(0);
  // Upper case: the first call of a store request.
  if (tag < 97) restart(calls);
  switch (tag | 32) {
    case 116:
      // t: now()
      return target.resumeClock(await clockOf(calls));
    case 103: {
      // g: now(), then getRun(runId)
      const runId = text.slice(2);
      const ms = await clockOf(calls);
      const raw = await call(calls, 'getRun', runId);
      calls.rows.set(runId, raw);
      return target.resumeRead(ms, rowText('getRun', raw));
    }
    case 117: {
      // u: conditionalUpdate(runId, patch, {eq}), eq from the row as read
      const [, runId, patch, columns] = text.split(separator());
      const raw = calls.rows.get(runId);
      const eq = {};
      if (columns) for (const c of columns.split(',')) eq[c] = raw[c];
      const written = await call(calls, 'conditionalUpdate', runId, JSON.parse(patch), { eq });
      return target.resumeWritten(rowText('conditionalUpdate', written));
    }
    case 119: {
      // w: conditionalUpdate(runId, patch, {eq, in}), the conditions given whole (no read)
      const [, runId, patch, conditions] = text.split(separator());
      const written = await call(calls, 'conditionalUpdate', runId, JSON.parse(patch), JSON.parse(conditions));
      return target.resumeWritten(rowText('conditionalUpdate', written));
    }
    case 102: {
      // f: findExpiredLeases(nowIso, limit)
      const [, nowIso, limit] = text.split(separator());
      const rows = await call(calls, 'findExpiredLeases', nowIso, Number(limit));
      if (Array.isArray(rows)) for (const r of rows) if (r !== null && typeof r === 'object' && typeof r.id === 'string') calls.rows.set(r.id, r);
      return target.resumeRows(rowText('findExpiredLeases', rows));
    }
    default:
      throw codedError('store-protocol', `unknown LeaseStore call ${JSON.stringify(text.slice(0, 1))}`);
  }
}

/**
 * One store request (JSON text) of an operation over a LeaseStore object, apart from the
 * operation (for a host that routes requests): a Promise of its StoreAnswer's JSON text.
 */
async function referenceRequest(calls, requestText) {
  calls.requests ??= new native.NativeReferenceRequests(calls.casRetries);
  const requests = calls.requests;
  try {
    let text = requests.start(requestText);
    while (text.charCodeAt(0) !== 123) text = await leaseStoreCall(requests, text, calls);
    return text;
  } catch (e) {
    requests.resumeStoreError();
    return rethrowNative(e);
  }
}

module.exports = { LEASE_STORE_METHODS, missingMethods, isReferenceStore, fillRun, referenceCalls, leaseStoreCall, referenceRequest };
