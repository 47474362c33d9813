'use strict';
// PgLeaseStore: a store over node-postgres that executes the one statement the core renders
// for each request (heart_fleet_core::sql) and hands the rows back to the core to decode.
// It holds no lease logic and no SQL of its own beyond the migrations the core ships.

const native = require('./native.cjs');
const { typeError, codedError, rethrowNative, messageOf, describe } = require('./util.cjs');

function loadPg() {
  try {
    // eslint-disable-next-line global-require
    return require('pg');
  } catch {
    throw typeError('PgLeaseStore: install the `pg` package (npm install pg), or pass {pool} or {client}');
  }
}

function param(p) {
  if (p && typeof p === 'object') {
    if ('text' in p) return p.text;
    // Integers go as text: exact for every i64, and the statement casts ($n::bigint).
    if ('int' in p) return String(p.int);
  }
  throw codedError('store-protocol', `an unexpected SQL parameter ${JSON.stringify(p)}`);
}

const OPTIONS = ['pool', 'client', 'connectionString', 'max', 'prepare', 'queryTimeoutMs', 'connectTimeoutMs'];
/** The longest wait for one statement's answer, by default (ms). */
const DEFAULT_QUERY_TIMEOUT_MS = 10_000;
/** The longest wait for a new connection of a pool this store creates, by default (ms). */
const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;

/** Whether a connection string asks for the pooler mode (`pgbouncer=true`, as Prisma spells it). */
function poolerUrl(connectionString) {
  return /[?&]pgbouncer=(true|1)(&|$)/.test(connectionString);
}

/**
 * A heart-fleet store over PostgreSQL (node-postgres). Every store request is one
 * statement, run in autocommit on whatever connection the pool hands out; the statement
 * reads the clock inside PostgreSQL (`clock_timestamp()`), so worker clock skew cannot
 * break exclusion.
 *
 * `new PgLeaseStore({pool})` or `{client}` (anything with node-postgres's `query(config)`),
 * or `{connectionString, max?}` (creates a `pg.Pool`; `end()` closes it).
 *
 * * Deadlines: each statement waits at most `queryTimeoutMs` (default 10000) for its
 *   answer (node-postgres's client-side `query_timeout`; the pool then discards the
 *   connection), and a pool this store creates waits at most `connectTimeoutMs` (default
 *   5000) for a connection and gives its connections the same server-side
 *   `statement_timeout`, so that a statement the client gave up on (say, waiting for a lock)
 *   is cancelled by the server instead of landing later. With a pool of your own, set its
 *   `statement_timeout` too; otherwise such a write's outcome is unknown and the recovery
 *   paths (the sweep, the reconciler) resolve it. The driver's error fails the request with
 *   store-unavailable.
 * * Lost connections: a pool replaces a connection that failed; the failed request is not
 *   retried (its outcome is unknown: the recovery paths resolve it). A single `{client}`
 *   cannot reconnect: pass a pool.
 * * Poolers: statements are prepared per connection (named by a hash of their text) unless
 *   `prepare: false`, which a transaction pooler (PgBouncer in transaction mode, Supabase's
 *   pooled connection string) needs, since named statements do not follow a client from one
 *   transaction to the next. A `connectionString` with `pgbouncer=true` chooses it; a pooler
 *   cannot be detected from the client side. Migrations take only a transaction-scoped lock.
 *
 * The schema must be migrated: `await store.migrate()` (idempotent).
 */
class PgLeaseStore {
  constructor(options) {
    if (options === null || typeof options !== 'object') throw typeError('PgLeaseStore: options {pool} | {client} | {connectionString} required');
    const unknown = Object.keys(options).filter((k) => !OPTIONS.includes(k));
    if (unknown.length > 0) throw typeError(`PgLeaseStore: unknown option ${unknown.join(', ')} (the options are ${OPTIONS.join(', ')})`);
    const { pool, client, connectionString, max } = options;
    const timeout = (name, v, fallback) => {
      if (v === undefined) return fallback;
      if (!Number.isInteger(v) || v < 1 || v > 2 ** 31 - 1) throw typeError(`PgLeaseStore: ${name} must be milliseconds (an integer in 1..2147483647), got ${describe(v)}`);
      return v;
    };
    this._queryTimeoutMs = timeout('queryTimeoutMs', options.queryTimeoutMs, DEFAULT_QUERY_TIMEOUT_MS);
    const connectTimeoutMs = timeout('connectTimeoutMs', options.connectTimeoutMs, DEFAULT_CONNECT_TIMEOUT_MS);
    let db = pool ?? client;
    this._owned = false;
    if (db === undefined || db === null) {
      if (typeof connectionString !== 'string' || connectionString === '') {
        throw typeError('PgLeaseStore: pass {pool}, {client} or {connectionString}');
      }
      if (/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(connectionString)) {
        throw typeError('PgLeaseStore: connectionString holds a lone surrogate (not text a URL can carry)');
      }
      const pg = loadPg();
      // pgbouncer=true is ours: the driver does not take it.
      const driverUrl = connectionString.replace(/([?&])pgbouncer=[^&]*(&|$)/, (_, a, b) => (b ? a : '')).replace(/[?&]$/, '');
      const config = { connectionString: driverUrl, max: max ?? 10, connectionTimeoutMillis: connectTimeoutMs };
      // The server abandons a statement at the same deadline, so one the client gave up on (a
      // lock wait) is not applied later. A pooler refuses session parameters at startup.
      // A little shorter than the client's deadline, so that the server's cancellation comes first.
      if (!poolerUrl(connectionString)) config.statement_timeout = Math.max(1, this._queryTimeoutMs - Math.min(100, Math.floor(this._queryTimeoutMs / 5)));
      db = new pg.Pool(config);
      this._owned = true;
    } else if (connectionString !== undefined) {
      throw typeError('PgLeaseStore: pass one of {pool}, {client} or {connectionString}');
    }
    if (typeof db.query !== 'function') throw typeError(`PgLeaseStore: the pool/client must have query(), got ${describe(db)}`);
    if (options.prepare !== undefined && typeof options.prepare !== 'boolean') throw typeError('PgLeaseStore: prepare must be a boolean');
    this.db = db;
    this._prepare = options.prepare ?? !(typeof connectionString === 'string' && poolerUrl(connectionString));
    this._names = new Map();
  }

  _name(sql) {
    let n = this._names.get(sql);
    if (n === undefined) {
      // The core's sha256 (no node:crypto, so the driver also runs where only Web APIs exist).
      n = 'heart_fleet_' + native.sha256Hex(sql).slice(0, 24);
      this._names.set(sql, n);
    }
    return n;
  }

  /** The store contract: one StoreRequest → its StoreAnswer (as JSON text). */
  async execute(request) {
    if (typeof request !== 'string' && (request === null || typeof request !== 'object')) {
      throw typeError(`PgLeaseStore.execute: a StoreRequest is an object, got ${describe(request)}`);
    }
    let text = request;
    if (typeof request !== 'string') {
      try {
        text = JSON.stringify(request);
      } catch (e) {
        // A circular or BigInt value, or nesting past what JSON.stringify can walk.
        throw typeError(`PgLeaseStore.execute: the request is not JSON: ${messageOf(e)}`);
      }
    }
    let statements;
    try {
      statements = JSON.parse(native.sqlRender(text, 'postgres'));
    } catch (e) {
      return rethrowNative(e);
    }
    const results = [];
    for (const st of statements) {
      const config = { text: st.sql, values: st.params.map(param), rowMode: 'array', query_timeout: this._queryTimeoutMs };
      if (this._prepare) config.name = this._name(st.sql);
      const res = await this.db.query(config);
      const names = res.fields.map((f) => f.name);
      results.push(res.rows.map((row) => row.map((v, i) => [names[i], v])));
    }
    try {
      return native.sqlDecode(text, 'postgres', JSON.stringify(results));
    } catch (e) {
      return rethrowNative(e);
    }
  }

  /** The store contract's text form (the fleet uses it: no JSON parse in JavaScript). */
  executeJson(request) {
    return this.execute(request);
  }

  /**
   * Applies every migration that `heart_fleet_migrations` does not record yet, each in one
   * transaction with its record, under a transaction-scoped advisory lock: the core's
   * migration protocol (`sqlMigrationPlan`), the one the Rust and Python stores run too, so
   * concurrent migrates from any of them apply each migration once. Idempotent. Resolves to
   * `[{name, applied}]` (applied now or earlier).
   */
  async migrate() {
    const plan = JSON.parse(native.sqlMigrationPlan('postgres'));
    const pooled = typeof this.db.connect === 'function' && typeof this.db.totalCount === 'number';
    const conn = pooled ? await this.db.connect() : this.db;
    const out = [];
    try {
      for (const [name, script] of plan.migrations) {
        let applied = false;
        try {
          await conn.query(plan.begin);
          if (plan.lock) await conn.query(plan.lock);
          await conn.query(plan.createRecordTable);
          const seen = await conn.query(plan.isApplied, [name]);
          if (seen.rows[0].n === 0) {
            await conn.query(script);
            await conn.query(plan.record, [name]);
            applied = true;
          }
          await conn.query(plan.commit);
        } catch (e) {
          await conn.query(plan.rollback).catch(() => {});
          throw codedError('store-unavailable', `migration ${name} failed: ${messageOf(e)}`);
        }
        out.push({ name, applied });
      }
    } finally {
      if (pooled) conn.release();
    }
    return out;
  }

  /**
   * An `onReceipt` sink that appends each receipt to the `heart_receipts` table. Inserts
   * run in the background, in order; a failure goes to `onError` (default: ignored), never
   * to the lease operation.
   */
  receiptSink({ onError } = {}) {
    let chain = Promise.resolve();
    const sink = (receipt) => {
      let st;
      try {
        st = JSON.parse(native.sqlReceiptInsert('postgres', JSON.stringify(receipt)));
      } catch (e) {
        if (onError) onError(e, receipt);
        return;
      }
      chain = chain
        .then(() => this.db.query({ text: st.sql, values: st.params.map(param), query_timeout: this._queryTimeoutMs }))
        .catch((e) => {
          if (onError) onError(e, receipt);
        });
    };
    sink.flush = () => chain;
    return sink;
  }

  /** Closes the pool this store created (a pool or client you passed stays yours). */
  async end() {
    if (this._owned && typeof this.db.end === 'function') await this.db.end();
  }
}

module.exports = { PgLeaseStore };
