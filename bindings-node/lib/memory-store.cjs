'use strict';
// MemoryLeaseStore: the core's deterministic memory store (Rust), with the reference's
// controls (insert, setNow, advance, now), its LeaseStore methods (getRun,
// conditionalUpdate, findExpiredLeases, now) and snapshots for tests.

const native = require('./native.cjs');
const { typeError, rethrowNative, str, int, optInt, msOf, isoOf, describe, knownKeys, firstLine, messageOf, U32 } = require('./util.cjs');
const { runRow, instanceDefaults } = require('./rows.cjs');

const NATIVE = Symbol.for('heart-fleet.native');

const EPOCH = '1970-01-01T00:00:00.000Z';

/** The agent_runs columns the core's conditional writes address, and the type of their values. */
const RUN_COLUMNS = Object.freeze({
  id: 'text',
  status: 'text',
  lease_owner: 'text',
  idempotency_key: 'text',
  lease_expires_at: 'time',
  updated_at: 'time',
  retries: 'int',
  fencing_epoch: 'int',
});
const HELD = { in: ['status', require('./contract.cjs').heldStatuses.map((value) => ({ type: 'text', value }))] };
const NEVER = { or: [] };

function columnOf(what, name) {
  if (!Object.hasOwn(RUN_COLUMNS, name)) {
    throw typeError(`${what}: ${JSON.stringify(name)} is not a column the store's conditional writes address (${Object.keys(RUN_COLUMNS).join(', ')})`);
  }
  return RUN_COLUMNS[name];
}

/** Milliseconds of a Date or date text, NaN when it is neither (a comparison with NaN is false). */
function timeOf(v) {
  if (v instanceof Date) return v.getTime();
  return typeof v === 'string' ? Date.parse(v) : NaN;
}

/**
 * An `eq`/`in` value as a request value of its own type, so that a value of another type
 * never equals (strict equality). Text given for a timestamp column compares as the instant
 * it names: the store keeps timestamps as instants and hands them back in toISOString() form.
 */
function condVal(type, v) {
  if (v === null) return { type: 'null' };
  if (type === 'time' && typeof v === 'string' && Number.isFinite(Date.parse(v))) return { type: 'time', value: new Date(Date.parse(v)).toISOString() };
  if (typeof v === 'string') return { type: 'text', value: v };
  if (Number.isSafeInteger(v)) return { type: 'int', value: v };
  return { type: 'json', value: null }; // no column of agent_runs holds JSON: never equal
}

/** `{eq, in, lt}` → the request language's condition, at the store's clock `nowMs`. */
function conditionOf(conditions, nowMs) {
  const { eq, in: among, lt } = conditions ?? {};
  const all = [];
  for (const [c, v] of Object.entries(eq ?? {})) all.push({ eq: [c, condVal(columnOf('conditionalUpdate eq', c), v)] });
  for (const [c, vs] of Object.entries(among ?? {})) {
    const type = columnOf('conditionalUpdate in', c);
    if (!Array.isArray(vs)) throw typeError(`conditionalUpdate: in.${c} must be an array, got ${describe(vs)}`);
    const values = vs.filter((v) => v !== null).map((v) => condVal(type, v));
    all.push(vs.includes(null) ? { or: [{ in: [c, values] }, { eq: [c, { type: 'null' }] }] } : { in: [c, values] });
  }
  for (const [c, b] of Object.entries(lt ?? {})) {
    columnOf('conditionalUpdate lt', c);
    // col < b  ⟺  now - col > now - b: the request language compares timestamps with the clock.
    const boundary = timeOf(b);
    all.push(Number.isFinite(boundary) ? { older_than: [c, nowMs - boundary] } : NEVER);
  }
  return { and: all };
}

/** An update's value as a request value of its column's type. */
function setVal(c, v) {
  const type = columnOf('conditionalUpdate updates', c);
  if (c === 'id' || c === 'idempotency_key') throw typeError(`conditionalUpdate: ${c} cannot be changed`);
  if (v === null && (c === 'lease_owner' || c === 'lease_expires_at')) return { type: 'null' };
  if (type === 'text' && typeof v === 'string') return { type: 'text', value: v };
  if (type === 'int' && Number.isSafeInteger(v)) return { type: 'int', value: v };
  if (type === 'time' && Number.isFinite(timeOf(v))) return { type: 'time', value: new Date(timeOf(v)).toISOString() };
  throw typeError(`conditionalUpdate: updates.${c} cannot be ${describe(v)}`);
}

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

/** A seeded row as JSON text, or an invalid-input TypeError (a circular row, a bigint). */
function rowText(what, row) {
  try {
    return JSON.stringify(row);
  } catch (e) {
    throw typeError(`${what}: the row is not JSON: ${firstLine(messageOf(e))}`);
  }
}

/**
 * The deterministic in-memory store. Its clock starts at the Unix epoch (as in the
 * reference) unless given; `setNow` and `advance` move it. A `HeartFleet` over it runs
 * every operation synchronously inside Rust. It also has the TypeScript package's
 * LeaseStore methods (`getRun`, `conditionalUpdate`, `findExpiredLeases`, `now`), each one
 * of the core's store requests, so tests written against that package can call them.
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

  /**
   * The TypeScript package's conditional update, as one of the core's conditional writes:
   * when every condition holds, `updates` are merged into the row (shallowly; `updated_at`
   * only when given) and the updated row is returned, else null (also for an unknown run).
   * `eq`: strict equality (`null` matches null; text for a timestamp compares the instant);
   * `in`: one of the values; `lt`: a timestamp strictly before the given instant (never for a
   * null or non-timestamp value). Conditions and updates may name the columns of the core's
   * writes: id, status, lease_owner, idempotency_key, lease_expires_at, updated_at, retries,
   * fencing_epoch (anything else is a TypeError, as is a value of the wrong type in updates).
   */
  async conditionalUpdate(runId, updates, conditions) {
    const id = str('runId', runId);
    if (updates === null || typeof updates !== 'object' || Array.isArray(updates)) throw typeError(`conditionalUpdate: updates must be an object, got ${describe(updates)}`);
    if (conditions !== undefined && (conditions === null || typeof conditions !== 'object')) throw typeError(`conditionalUpdate: conditions must be {eq?, in?, lt?}, got ${describe(conditions)}`);
    // A misspelt condition would make the update unconditional.
    if (conditions !== undefined) knownKeys('conditionalUpdate conditions', conditions, ['eq', 'in', 'lt'], 'condition');
    const set = Object.entries(updates)
      .filter(([, v]) => v !== undefined)
      .map(([c, v]) => [c, { val: setVal(c, v) }]);
    const when = conditionOf(conditions, this[NATIVE].nowMs());
    return this.execute({ op: 'update_run', run_id: id, when, set, want_before: false }).reply.after;
  }

  /**
   * The held runs (`leased`/`running`) whose lease has expired at `nowIso`, in insertion
   * order, at most `limit`. Expired is the one expiry rule of every operation: no expiry, or
   * `lease_expires_at <= nowIso` (the TypeScript package's store uses `<`).
   */
  async findExpiredLeases(nowIso, limit) {
    const boundary = msOf('findExpiredLeases: nowIso', nowIso);
    const n = optInt('findExpiredLeases: limit', limit, 0, U32, U32);
    // Timestamps are whole milliseconds: `<= boundary` is `< boundary + 1`, i.e. older than now - boundary - 1.
    const expired = { or: [{ eq: ['lease_expires_at', { type: 'null' }] }, { older_than: ['lease_expires_at', this[NATIVE].nowMs() - boundary - 1] }] };
    const found = this.execute({ op: 'scan_runs', when: { and: [HELD, expired] }, order: 'expires_at', limit: U32 }).reply.runs;
    const ids = new Set(found.map((r) => r.id));
    return this.runs().filter((r) => ids.has(r.id)).slice(0, n);
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
    // What the row leaves out: as registering the instance now leaves it.
    const full = { ...instanceDefaults(this.now().toISOString()), ...row };
    if (row.started_at !== undefined) full.started_at = isoOf('started_at', row.started_at);
    if (row.last_heartbeat !== undefined) full.last_heartbeat = isoOf('last_heartbeat', row.last_heartbeat);
    const text = rowText('insertInstance', full);
    try {
      this[NATIVE].insertInstance(text);
    } catch (e) {
      rethrowNative(e);
    }
  }

  /** Inserts an `effect_intents` row as given (tests seed crash states this way). */
  insertIntent(row) {
    if (row === null || typeof row !== 'object') throw typeError('insertIntent: a row must be an object');
    const text = rowText('insertIntent', row);
    try {
      this[NATIVE].insertIntent(text);
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
    this[NATIVE].failAfter(str('request', request), int('after', after, 0, U32), int('times', times, 0, U32));
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
      try {
        text = JSON.stringify(request);
      } catch (e) {
        throw typeError(`execute: the StoreRequest is not JSON: ${firstLine(messageOf(e))}`);
      }
    }
    try {
      return parse(this[NATIVE].executeJson(text));
    } catch (e) {
      // The caller's request is not one (JSON the request language cannot hold, nesting
      // past the parser's limit): bad input, as when JSON.stringify itself refuses it.
      if (e && e.code === 'store-protocol' && /^not a StoreRequest/.test(messageOf(e))) {
        throw typeError(`execute: ${firstLine(messageOf(e))}`);
      }
      return rethrowNative(e);
    }
  }
}

module.exports = { MemoryLeaseStore, NATIVE };
