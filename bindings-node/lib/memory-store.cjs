'use strict';
// MemoryLeaseStore: the core's deterministic memory store (Rust), with the reference's
// controls (insert, setNow, advance, now) and snapshots for tests.

const native = require('./native.cjs');
const { typeError, rethrowNative, str, int, msOf, isoOf, describe } = require('./util.cjs');
const { runRow } = require('./rows.cjs');

const NATIVE = Symbol.for('heart-fleet.native');

const EPOCH = '1970-01-01T00:00:00.000Z';

/** A run as the native store takes it: the row's defaults, then what `run` sets. */
function fullRow(run) {
  if (run === null || typeof run !== 'object' || Array.isArray(run)) {
    throw typeError(`insert: a run must be an object, got ${describe(run)}`);
  }
  const id = str('run.id', run.id);
  const row = runRow(id, EPOCH);
  for (const [k, v] of Object.entries(run)) {
    if (v === undefined) continue;
    if (typeof v === 'symbol' || typeof v === 'function' || typeof v === 'bigint' || (typeof v === 'number' && !Number.isFinite(v))) {
      throw typeError(`insert: run.${k} cannot be ${describe(v)}`);
    }
    row[k] = v instanceof Date ? isoOf(`run.${k}`, v) : v;
  }
  // insert() stamps both with the clock, as the reference does.
  row.created_at = EPOCH;
  row.updated_at = EPOCH;
  return row;
}

function parse(text) {
  return JSON.parse(text);
}

/**
 * The deterministic in-memory store. Its clock starts at the Unix epoch (as in the
 * reference) unless given; `setNow` and `advance` move it. A `HeartFleet` over it runs
 * every operation synchronously inside Rust.
 */
class MemoryLeaseStore {
  /** @param {Date|string|number} [now] the starting clock (default: the Unix epoch). */
  constructor(now) {
    const ms = now === undefined ? 0 : msOf('now', now);
    this[NATIVE] = new native.NativeMemoryStore(ms);
  }

  /** A store seeded by a conformance scenario (JSON text); for scenario runners. */
  static fromScenario(scenarioText) {
    if (typeof scenarioText !== 'string') throw typeError('fromScenario: the scenario must be JSON text');
    const store = Object.create(MemoryLeaseStore.prototype);
    try {
      store[NATIVE] = native.NativeMemoryStore.fromScenario(scenarioText);
    } catch (e) {
      rethrowNative(e);
    }
    return store;
  }

  /** The clock (a new Date). */
  now() {
    return new Date(this[NATIVE].nowMs());
  }

  /** Sets the clock (a Date, ISO text or milliseconds). */
  setNow(d) {
    this[NATIVE].setNow(msOf('setNow', d));
  }

  /** Moves the clock by `ms` milliseconds (may be negative). */
  advance(ms) {
    this[NATIVE].advance(int('advance: ms', ms, -8.64e15, 8.64e15));
  }

  /**
   * Inserts a run; `created_at` and `updated_at` are set to the clock. Missing columns take
   * the schema's defaults (status `ready`, idempotency key `key:<id>`). A reused
   * idempotency key throws `Idempotency key collision: <key>` (code `invalid-input`).
   * Returns the stored row.
   */
  insert(run) {
    const row = fullRow(run);
    let text;
    try {
      text = JSON.stringify(row);
    } catch (e) {
      throw typeError(`insert: the run is not JSON: ${e.message}`);
    }
    try {
      this[NATIVE].insert(text);
    } catch (e) {
      rethrowNative(e);
    }
    return this.getRun(row.id);
  }

  /** One run (a snapshot), or null. */
  getRun(runId) {
    return parse(this[NATIVE].runJson(str('runId', runId)));
  }

  /** Every run in insertion order (snapshots). */
  runs() {
    return parse(this[NATIVE].runsJson());
  }

  /** Every effect intent (snapshots). */
  intents() {
    return parse(this[NATIVE].intentsJson());
  }

  /** The outbox dispatch log, in order. */
  dispatchLog() {
    return parse(this[NATIVE].dispatchLogJson());
  }

  /** Every `agent_instances` row. */
  instances() {
    return parse(this[NATIVE].instancesJson());
  }

  /** Inserts an `agent_instances` row as given (tests seed liveness this way). */
  insertInstance(row) {
    if (row === null || typeof row !== 'object') throw typeError('insertInstance: a row must be an object');
    const full = { hostname: null, pid: null, status: 'alive', metadata: null, ...row };
    const now = this.now().toISOString();
    full.started_at = full.started_at === undefined ? now : isoOf('started_at', full.started_at);
    full.last_heartbeat = full.last_heartbeat === undefined ? now : isoOf('last_heartbeat', full.last_heartbeat);
    try {
      this[NATIVE].insertInstance(JSON.stringify(full));
    } catch (e) {
      rethrowNative(e);
    }
  }

  /** Inserts an `effect_intents` row as given (tests seed crash states this way). */
  insertIntent(row) {
    if (row === null || typeof row !== 'object') throw typeError('insertIntent: a row must be an object');
    try {
      this[NATIVE].insertIntent(JSON.stringify(row));
    } catch (e) {
      rethrowNative(e);
    }
  }

  /** Makes the next `times` store requests named `request` (or `*`) fail, changing nothing. */
  failNext(request = '*', times = 1) {
    this.failAfter(request, 0, times);
  }

  /** Lets `after` matching requests through, then fails the next `times`. */
  failAfter(request, after, times) {
    this[NATIVE].failAfter(str('request', request), int('after', after, 0, 2 ** 32 - 1), int('times', times, 0, 2 ** 32 - 1));
  }

  /** How many store requests were answered (or failed). */
  requestCount() {
    return this[NATIVE].requestCount();
  }

  /**
   * The store contract's text form: a StoreRequest as JSON text → the StoreAnswer as JSON
   * text. An injected failure throws (code `store-unavailable`).
   */
  executeJson(request) {
    if (typeof request !== 'string') throw typeError('executeJson: a StoreRequest as JSON text');
    try {
      return this[NATIVE].executeJson(request);
    } catch (e) {
      return rethrowNative(e);
    }
  }

  /**
   * The store contract: executes one StoreRequest and returns the StoreAnswer (so this
   * store can also stand behind a JS store object). An injected failure throws
   * (code `store-unavailable`).
   */
  execute(request) {
    let text;
    if (typeof request === 'string') text = request;
    else {
      if (request === null || typeof request !== 'object') throw typeError('execute: a StoreRequest is an object');
      text = JSON.stringify(request);
    }
    try {
      return parse(this[NATIVE].executeJson(text));
    } catch (e) {
      return rethrowNative(e);
    }
  }
}

module.exports = { MemoryLeaseStore, NATIVE };
