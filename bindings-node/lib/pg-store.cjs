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

/**
 * A heart-fleet store over PostgreSQL (node-postgres). Every store request is one
 * statement, run in autocommit on whatever connection the pool hands out; the statement
 * reads the clock inside PostgreSQL (`clock_timestamp()`), so worker clock skew cannot
 * break exclusion.
 *
 * `new PgLeaseStore({pool})` or `{client}` (anything with node-postgres's `query(config)`),
 * or `{connectionString, max?}` (creates a `pg.Pool`; `end()` closes it). Statements are
 * prepared per connection (named by a hash of their text) unless `prepare: false`.
 * The schema must be migrated: `await store.migrate()` (idempotent).
 */
class PgLeaseStore {
  constructor(options) {
    if (options === null || typeof options !== 'object') throw typeError('PgLeaseStore: options {pool} | {client} | {connectionString} required');
    const { pool, client, connectionString, max, prepare = true } = options;
    let db = pool ?? client;
    this._owned = false;
    if (db === undefined || db === null) {
      if (typeof connectionString !== 'string' || connectionString === '') {
        throw typeError('PgLeaseStore: pass {pool}, {client} or {connectionString}');
      }
      const pg = loadPg();
      db = new pg.Pool({ connectionString, max: max ?? 10 });
      this._owned = true;
    }
    if (typeof db.query !== 'function') throw typeError(`PgLeaseStore: the pool/client must have query(), got ${describe(db)}`);
    this.db = db;
    this._prepare = Boolean(prepare);
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
    const text = typeof request === 'string' ? request : JSON.stringify(request);
    let statements;
    try {
      statements = JSON.parse(native.sqlRender(text, 'postgres'));
    } catch (e) {
      return rethrowNative(e);
    }
    const results = [];
    for (const st of statements) {
      const config = { text: st.sql, values: st.params.map(param), rowMode: 'array' };
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
        .then(() => this.db.query({ text: st.sql, values: st.params.map(param) }))
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
