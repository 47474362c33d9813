'use strict';
// The StoreRequest dispatch of the stores that decide every request with the core's
// evaluator (`simulateRequest`) on the rows they read: SupabaseLeaseStore, and
// heart-fleet-wasm's DenoKvLeaseStore (bundled from here). The reads and the scans are the
// same for both (read the rows, decide on them at the clock read first); each store brings
// how it reads rows and how it writes.
//
// A store hands `executeRequest` itself, with:
//   _clock() → ms                          the worker's clock
//   _simulate(request, snapshot, ms)       the evaluator's StoreAnswer on those rows
//   _readRun(id) → row | null              one agent_runs row
//   _scan(table, when?) → rows             every row of 'runs' | 'intents' | 'instances'
//                                          (at least those that may meet `when`)
//   _readLog(runId, effectKey) → entries   the effect's outbox_dispatch_log, in order
//   _updateRun, _ensureRun, _claimIntent, _updateIntent, _upsertInstance, _updateInstances
//                                          (request) → the StoreAnswer of a write

const native = require('./native.cjs');
const { codedError, typeError, describe, firstLine, messageOf, rethrowNative } = require('./util.cjs');

/** The core's evaluator: `request`'s StoreAnswer on the rows of `snapshot`, at `nowMs`. */
function simulate(request, snapshot, nowMs) {
  try {
    return JSON.parse(native.simulateRequest(JSON.stringify(request), JSON.stringify(snapshot), nowMs));
  } catch (e) {
    return rethrowNative(e);
  }
}

/**
 * A conditional run write decided on the rows as read (`snapshot`): the evaluator's answer
 * with both rows, before and after, whatever `req` asks for (the store writes `after` and
 * compares with `before`). Answer the request with `runWritten`.
 */
function decideRunWrite(store, req, snapshot, now) {
  return store._simulate({ ...req, want_before: true, want_after: true }, snapshot, now);
}

/**
 * The answer to `req`, a conditional run write that went through (`after`) or missed (null):
 * the rows it asks for, or only whether it hit when it wants neither row (`want_after: false`
 * without `want_before`, verifyFence's), as the core's own stores answer.
 */
function runWritten(req, now, before, after) {
  if (req.want_after === false && !req.want_before) return { now, reply: { kind: 'run_hit', hit: after !== null } };
  return { now, reply: { kind: 'run_write', before: req.want_before && after !== null ? before : null, after } };
}

/** Whether a condition (the core's JSON form) uses `tag` anywhere. */
function mentions(cond, tag) {
  return JSON.stringify(cond).includes(`"${tag}"`);
}

/**
 * Checks that a request object is JSON: one JSON cannot hold (a circular structure, a bigint)
 * is the caller's bad input (an invalid-input TypeError), not a TypeError thrown from deep
 * inside a decision.
 */
function requestJson(who, req) {
  try {
    JSON.stringify(req);
  } catch (e) {
    throw typeError(`${who}.execute: the StoreRequest is not JSON: ${firstLine(messageOf(e))}`);
  }
}

/** One StoreRequest (an object or JSON text) → a Promise of its StoreAnswer, for `store` (named `who`). */
async function executeRequest(store, who, request) {
  let req = request;
  if (typeof request === 'string') {
    try {
      req = JSON.parse(request);
    } catch (e) {
      throw codedError('store-protocol', `${who}.execute: not a StoreRequest: ${e.message}`);
    }
  }
  if (req === null || typeof req !== 'object' || typeof req.op !== 'string') {
    throw typeError(`${who}.execute: a StoreRequest is an object with an op, got ${describe(req)}`);
  }
  if (typeof request !== 'string') requestJson(who, req);
  switch (req.op) {
    case 'now':
      return { now: new Date(store._clock()).toISOString(), reply: { kind: 'now' } };
    case 'read_run': {
      const now = store._clock();
      const row = await store._readRun(req.run_id);
      return store._simulate(req, { runs: row ? [row] : [] }, now);
    }
    case 'scan_runs': {
      const now = store._clock();
      const runs = await store._scan('runs', req.when);
      const instances = mentions(req.when, 'owner_instance_dead') ? await store._scan('instances') : [];
      return store._simulate(req, { runs, instances }, now);
    }
    case 'scan_intents': {
      const now = store._clock();
      return store._simulate(req, { intents: await store._scan('intents', req.when) }, now);
    }
    case 'scan_instances': {
      const now = store._clock();
      return store._simulate(req, { instances: await store._scan('instances', req.when) }, now);
    }
    case 'read_log': {
      const now = store._clock();
      const entries = await store._readLog(req.run_id, req.effect_key);
      return { now: new Date(now).toISOString(), reply: { kind: 'log', entries } };
    }
    case 'update_run':
      return store._updateRun(req);
    case 'ensure_run':
      return store._ensureRun(req);
    case 'claim_intent':
      return store._claimIntent(req);
    case 'update_intent':
      return store._updateIntent(req);
    case 'upsert_instance':
      return store._upsertInstance(req);
    case 'update_instances':
      return store._updateInstances(req);
    default:
      throw codedError('store-protocol', `${who}: unknown request ${req.op}`);
  }
}

module.exports = { executeRequest, mentions, requestJson, simulate, decideRunWrite, runWritten };
