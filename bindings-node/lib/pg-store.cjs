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
let pgDeadlines = null;
/**
 * The PostgreSQL stores' deadlines, the same in every driver (the core's, ms):
 * `statementTimeoutMs` (one statement's answer, by default), `maxStatementTimeoutMs`,
 * `connectTimeoutMs` (a new connection of a pool this store creates, by default) and
 * `cancelGraceMs` (the longest a cancel request may take). Read when first needed: the edge
 * build of heart-fleet-wasm has no PostgreSQL store, and says so then.
 */
function deadlines() {
  pgDeadlines ??= Object.freeze(JSON.parse(native.postgresDeadlines()));
  return pgDeadlines;
}
/** PostgreSQL's CancelRequest code (the protocol's "1234.5678"). */
const CANCEL_REQUEST_CODE = 80877102;
/** The deadline's mark in a race with a statement's answer. */
const MISSED = Symbol('missed');

/** Whether a connection string asks for the pooler mode (`pgbouncer=true`, as Prisma spells it). */
function poolerUrl(connectionString) {
  return /[?&]pgbouncer=(true|1)(&|$)/.test(connectionString);
}

/**
 * Asks the server behind `conn` (a node-postgres client) to cancel the statement its backend
 * runs: a CancelRequest with the backend's key on a connection of its own, in plain text as
 * libpq and node-postgres send it (the key is its only credential). PgBouncer
 * forwards it to the server connection its client is linked to. Resolves once the server has
 * closed that connection (it acted on the request) or after the deadlines' cancelGraceMs, and never
 * rejects: a server that cannot be reached cannot be asked, and that statement's outcome
 * stays unknown (the recovery paths resolve it).
 */
function cancelStatement(conn) {
  const { processID, secretKey, host, port } = conn;
  if (!Number.isInteger(processID) || !Number.isInteger(secretKey) || typeof host !== 'string' || host === '' || !port) return Promise.resolve();
  return new Promise((resolve) => {
    let socket;
    try {
      // eslint-disable-next-line global-require
      const net = require('node:net');
      // A host that is a directory is node-postgres's Unix socket form.
      socket = host.startsWith('/') ? net.connect(`${host}/.s.PGSQL.${port}`) : net.connect(Number(port), host);
    } catch {
      resolve();
      return;
    }
    const timer = setTimeout(() => socket.destroy(), deadlines().cancelGraceMs);
    // An error closes the socket; 'close' settles.
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve();
    });
    socket.on('connect', () => {
      const packet = Buffer.alloc(16);
      packet.writeInt32BE(16, 0);
      packet.writeInt32BE(CANCEL_REQUEST_CODE, 4);
      packet.writeInt32BE(processID, 8);
      packet.writeInt32BE(secretKey, 12);
      // Not half-closed: PgBouncer could drop a request whose client has gone.
      socket.write(packet);
    });
  });
}

/** A receipts-table sink's link to its store, its signing keys and its onError (see receiptSink). */
const RECEIPT_TABLE = Symbol('heart-fleet.receiptTable');

/** A node-postgres result in `rowMode: 'array'` as the core reads rows: `[[column, value], ...]` per row. */
function rowsOf(res) {
  const names = res.fields.map((f) => f.name);
  return res.rows.map((row) => row.map((v, i) => [names[i], v]));
}

/**
 * Appends one receipt to `heart_receipts`: the core's appender decides each statement (the
 * run's head, the chained insert, chaining again when the position was taken), `query`
 * runs it.
 */
async function appendReceipt(appender, receipt, query) {
  let st = JSON.parse(appender.begin(JSON.stringify(receipt)));
  for (;;) {
    let res;
    try {
      res = await query({ text: st.sql, values: st.params.map(param), rowMode: 'array' });
    } catch (e) {
      appender.failed();
      throw e;
    }
    const next = appender.answer(JSON.stringify(rowsOf(res)));
    if (next === null) return;
    st = JSON.parse(next);
  }
}

/** The listener that keeps a held connection's 'error' event from ending the process. */
const IGNORE = () => {};

/** Resolves to `MISSED` after `ms` (and `clear()` stops the timer). */
function timeout(ms) {
  let timer;
  const missed = new Promise((resolve) => {
    timer = setTimeout(resolve, ms, MISSED);
  });
  return { missed, clear: () => clearTimeout(timer) };
}

/**
 * One operation's requests and the receipts of its writes, in one transaction on one
 * connection (receiptSink). The first request opens it (BEGIN); each receipt the core emits
 * is inserted inside it before the next request runs; `settle` commits it, or rolls it back
 * when a receipt could not be inserted, a request failed inside it or the COMMIT failed, and
 * then throws store-unavailable saying why. On PostgreSQL a write's row lock holds until the
 * commit, so the next writer of the run waits and chains its receipts after these.
 *
 * Each transaction has an appender of its own (the receipt chain's heads are read from the
 * table inside it), so concurrent operations never share an append in progress. A receipt
 * that records no write of the operation (guard's effect receipts, which follow the caller's
 * ledger) is inserted at the settle in a transaction of its own; its failure goes to the
 * sink's `onError`, as it cannot undo the effect. Every wait has a deadline: a connection
 * within `connectMs` (the fleet's storeTimeoutMs), each statement within queryTimeoutMs.
 */
class HeldTransaction {
  constructor(store, table, connectMs) {
    this.store = store;
    this.table = table;
    this.connectMs = connectMs;
    /** The connection while a transaction is open. */
    this.conn = null;
    /** The open connection was dropped by a deadline (it is not given back again). */
    this.dropped = false;
    this.appender = null;
    /** The receipt inserts queued in the open transaction. */
    this.appends = Promise.resolve();
    /** Receipts that record no write of the operation (see the class comment). */
    this.alone = [];
    /** Why the open transaction must roll back (a receipt insert failed). */
    this.doomed = null;
    /** Why a transaction was rolled back since the last settle. */
    this.rolledBack = null;
  }

  /** Whether a transaction is open. */
  get open() {
    return this.conn !== null;
  }

  /** One statement on the open connection (a deadline that drops it is remembered). */
  async _query(config) {
    try {
      return await this.store._queryOn(this.conn, config);
    } catch (e) {
      if (e?.connectionDropped) this.dropped = true;
      throw e;
    }
  }

  /** A connection of the pool (or the single client) within connectMs, for this transaction alone. */
  async _connection() {
    const store = this.store;
    const limit = timeout(this.connectMs);
    const late = () => codedError('store-unavailable', `postgres: no connection within ${this.connectMs} ms (storeTimeoutMs)`);
    try {
      if (store._pooled) {
        const pending = store.db.connect();
        const conn = await Promise.race([pending, limit.missed]);
        if (conn !== MISSED) return conn;
        // Given back as soon as the pool hands it over.
        pending.then((c) => c.release(), () => {});
        throw late();
      }
      while (store._clientHeld) {
        if ((await Promise.race([store._clientHeld, limit.missed])) === MISSED) throw late();
      }
      store._clientHeld = new Promise((resolve) => {
        this._freeClient = resolve;
      });
      return store.db;
    } finally {
      limit.clear();
    }
  }

  async _begin() {
    this.conn = await this._connection();
    this.dropped = false;
    // A connection that dies while this transaction holds it (between two statements, say)
    // fails the next statement; unheard, its 'error' event would end the process (the pool
    // listens only to its idle connections).
    if (this.store._pooled) this.conn.on('error', IGNORE);
    this.appender ??= native.NativeReceiptAppender.create('postgres', this.table.signingKeys);
    try {
      await this._query({ text: 'BEGIN' });
    } catch (e) {
      this._close(e);
      throw e;
    }
  }

  /** Gives the connection back (destroyed after `error`; not again when a deadline dropped it). */
  _close(error) {
    const conn = this.conn;
    this.conn = null;
    if (this.store._pooled) {
      conn.removeListener('error', IGNORE);
      if (!this.dropped) conn.release(error);
    } else {
      this.store._clientHeld = null;
      this._freeClient();
    }
  }

  async _rollBack(reason, error) {
    if (!this.open) return;
    if (!this.dropped) await this._query({ text: 'ROLLBACK' }).catch(() => {});
    this._close(error);
    this.doomed = null;
    this.rolledBack ??= reason;
    // The rolled-back receipts may have been heads: read them from the table again.
    this.appender.forgetHeads();
  }

  /** One store request (JSON text) inside the transaction, which it opens if none is. */
  async execute(request) {
    const rendered = PgLeaseStore._rendered(request);
    await this.appends;
    if (this.doomed !== null) {
      await this._rollBack(`a receipt could not be written: ${this.doomed}`);
      throw codedError('store-unavailable', `the operation's writes were rolled back with their receipts: ${this.rolledBack}`);
    }
    if (!this.open) await this._begin();
    try {
      return await this.store._answer(rendered, (config) => this._query(config));
    } catch (e) {
      // PostgreSQL aborts the transaction anyway: everything in it goes now.
      await this._rollBack(`a request of the operation failed: ${messageOf(e)}`, e);
      throw e;
    }
  }

  /** A receipt of the operation: inserted in the open transaction, else at the settle (see the class comment). */
  receipt(receipt) {
    if (!this.open) {
      this.alone.push(receipt);
      return;
    }
    const conn = this.conn;
    this.appends = this.appends.then(async () => {
      if (this.doomed !== null || this.conn !== conn) return;
      try {
        await appendReceipt(this.appender, receipt, (config) => this._query(config));
      } catch (e) {
        this.doomed = messageOf(e);
      }
    });
  }

  /**
   * Commits the open transaction (or rolls it back, see the class comment). Throws
   * store-unavailable when anything was rolled back since the last settle.
   */
  async settle() {
    await this.appends;
    if (this.open) {
      if (this.doomed !== null) {
        await this._rollBack(`a receipt could not be written: ${this.doomed}`);
      } else {
        try {
          await this._query({ text: 'COMMIT' });
          this._close();
        } catch (e) {
          await this._rollBack(`the commit failed: ${messageOf(e)}`, e);
        }
      }
    }
    const reason = this.rolledBack;
    this.rolledBack = null;
    if (reason !== null) throw codedError('store-unavailable', `the operation's writes were rolled back with their receipts: ${reason}`);
    if (this.alone.length > 0) await this._insertAlone();
  }

  /** Inserts the receipts that record no write, in a transaction of their own; a failure goes to onError. */
  async _insertAlone() {
    const receipts = this.alone;
    this.alone = [];
    try {
      await this._begin();
      for (const r of receipts) await appendReceipt(this.appender, r, (config) => this._query(config));
      await this._query({ text: 'COMMIT' });
      this._close();
    } catch (e) {
      await this._rollBack('', e);
      this.rolledBack = null;
      for (const r of receipts) this.table.onError?.(e, r);
    }
  }

  /** Rolls back what is open (the operation was left by an exception). */
  async abandon() {
    await this.appends;
    await this._rollBack('the operation was abandoned');
    this.rolledBack = null;
    this.alone = [];
  }
}

/**
 * A heart-fleet store over PostgreSQL (node-postgres). Every store request is one
 * statement, run in autocommit on whatever connection the pool hands out (for a fleet whose
 * sink is this store's receiptSink, an operation's statements share one transaction on one
 * connection: see receiptSink); the statement
 * reads the clock inside PostgreSQL (`clock_timestamp()`), so worker clock skew cannot
 * break exclusion.
 *
 * `new PgLeaseStore({pool})` or `{client}` (anything with node-postgres's `query(config)`),
 * or `{connectionString, max?}` (creates a `pg.Pool`; `end()` closes it).
 *
 * * Deadlines: each statement waits at most `queryTimeoutMs` (default 10000, at most
 *   86400000: a day, as in every driver) for its answer, and a pool this store creates waits
 *   at most `connectTimeoutMs` (default 5000) for a connection. A server backend does not notice that its client gave up, so a statement
 *   past its deadline (say, waiting for a lock) would still land once it could. On a pool
 *   (this store's, or a `pg.Pool` you pass) each statement runs on a connection checked out
 *   for it; one that misses the deadline makes the store send the server a cancel request for
 *   that connection's backend (through PgBouncer too, which forwards it; bounded, one second),
 *   then discard the connection, and the request fails with store-unavailable naming the
 *   deadline. Directly (not `pgbouncer=true`), a pool this store creates also gives its
 *   connections a server-side `statement_timeout` a little shorter, so the server abandons
 *   such a statement first and says so. A single `{client}` gets node-postgres's client-side
 *   `query_timeout` only: node-postgres has no supported way to tell whether the timed-out
 *   statement is still the one its backend runs, and a cancel request cancels whatever that
 *   is (maybe a later query of yours), so none is sent; nor can a client of yours be
 *   discarded. The timed-out statement then keeps running on the server (it may still land)
 *   and the client's later queries wait behind it: set `statement_timeout` on such a session,
 *   or pass a pool. A write whose outcome is unknown is resolved by the recovery paths (the
 *   sweep, the reconciler). A driver error fails the request with store-unavailable.
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
    const { statementTimeoutMs, maxStatementTimeoutMs, connectTimeoutMs: defaultConnectMs } = deadlines();
    // A timer's longest delay (2^31 - 1 ms) bounds the connect deadline; the core's, a statement's.
    const timeout = (name, v, fallback, most) => {
      if (v === undefined) return fallback;
      if (!Number.isInteger(v) || v < 1 || v > most) throw typeError(`PgLeaseStore: ${name} must be milliseconds (an integer in 1..${most}), got ${describe(v)}`);
      return v;
    };
    this._queryTimeoutMs = timeout('queryTimeoutMs', options.queryTimeoutMs, statementTimeoutMs, maxStatementTimeoutMs);
    const connectTimeoutMs = timeout('connectTimeoutMs', options.connectTimeoutMs, defaultConnectMs, 2 ** 31 - 1);
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
      // Besides the cancel request at the deadline (_query), the server abandons a statement
      // itself a little before it, so a lock wait ends with the server's own error even when a
      // cancel request cannot get through. A pooler refuses session parameters at startup.
      if (!poolerUrl(connectionString)) config.statement_timeout = native.serverStatementTimeoutMs(this._queryTimeoutMs);
      db = new pg.Pool(config);
      // An idle connection that dies (a restart, pg_terminate_backend) is dropped by the pool and
      // replaced on the next request; unheard, its 'error' event would end the process.
      db.on('error', () => {});
      this._owned = true;
    } else if (connectionString !== undefined) {
      throw typeError('PgLeaseStore: pass one of {pool}, {client} or {connectionString}');
    }
    if (typeof db.query !== 'function') throw typeError(`PgLeaseStore: the pool/client must have query(), got ${describe(db)}`);
    if (options.prepare !== undefined && typeof options.prepare !== 'boolean') throw typeError('PgLeaseStore: prepare must be a boolean');
    this.db = db;
    // A node-postgres pool: statements run on connections checked out for them (see _query).
    this._pooled = typeof db.connect === 'function' && typeof db.totalCount === 'number';
    this._prepare = options.prepare ?? !(typeof connectionString === 'string' && poolerUrl(connectionString));
    this._names = new Map();
    /** Over a single client: the open held transaction's end (its statements go first). */
    this._clientHeld = null;
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

  /**
   * Runs one statement (a node-postgres query config) within queryTimeoutMs. On a pool, on a
   * connection of its own: one that misses the deadline is asked to cancel the statement, then
   * discarded, and the request fails (store-unavailable). See the class comment.
   */
  async _query(config) {
    if (!this._pooled) {
      // A held transaction owns the single client until it settles (see HeldTransaction).
      while (this._clientHeld) await this._clientHeld;
      return this.db.query({ ...config, query_timeout: this._queryTimeoutMs });
    }
    const conn = await this.db.connect();
    let res;
    try {
      res = await this._queryOn(conn, config);
    } catch (e) {
      // As pg.Pool#query does: a connection whose statement failed is not reused (one that
      // missed its deadline was dropped already).
      if (!e.connectionDropped) conn.release(e);
      throw e;
    }
    conn.release();
    return res;
  }

  /**
   * Runs one statement on `conn`, a connection the caller checked out of the pool (or the
   * single client), within queryTimeoutMs. A pooled connection that misses the deadline is
   * asked to cancel the statement and then destroyed (released with an error): the caller
   * must not release it again.
   */
  async _queryOn(conn, config) {
    const ms = this._queryTimeoutMs;
    if (!this._pooled) return conn.query({ ...config, query_timeout: ms });
    // The connection dying while it is ours fails the statement below; unheard, its 'error'
    // event would end the process.
    const ignore = () => {};
    conn.on('error', ignore);
    let timer;
    const deadline = new Promise((resolve) => {
      timer = setTimeout(resolve, ms, MISSED);
    });
    let res;
    try {
      // The race also hears the statement's failure after the deadline (the dropped connection).
      res = await Promise.race([conn.query(config), deadline]);
    } finally {
      clearTimeout(timer);
      conn.removeListener('error', ignore);
    }
    if (res === MISSED) {
      // Cancelled before the connection goes: PgBouncer links a cancel request to its client.
      await cancelStatement(conn);
      conn.release(true);
      const e = codedError('store-unavailable', `postgres: no answer within ${ms} ms (queryTimeoutMs); the server was asked to cancel the statement and the connection was dropped`);
      e.connectionDropped = true;
      throw e;
    }
    return res;
  }

  /** A request's statements (as the core renders them) and the request's JSON text. */
  static _rendered(request) {
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
    try {
      return { text, statements: JSON.parse(native.sqlRender(text, 'postgres')) };
    } catch (e) {
      return rethrowNative(e);
    }
  }

  /** Runs a rendered request with `query` (one statement's config → its result) and decodes the answer. */
  async _answer({ text, statements }, query) {
    const results = [];
    for (const st of statements) {
      const config = { text: st.sql, values: st.params.map(param), rowMode: 'array' };
      if (this._prepare) config.name = this._name(st.sql);
      results.push(rowsOf(await query(config)));
    }
    try {
      return native.sqlDecode(text, 'postgres', JSON.stringify(results));
    } catch (e) {
      return rethrowNative(e);
    }
  }

  /** The store contract: one StoreRequest → its StoreAnswer (as JSON text). */
  async execute(request) {
    return this._answer(PgLeaseStore._rendered(request), (config) => this._query(config));
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
    const conn = this._pooled ? await this.db.connect() : this.db;
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
      if (this._pooled) conn.release();
    }
    return out;
  }

  /**
   * An `onReceipt` sink that appends each receipt to the `heart_receipts` table, chained per
   * run (`seq`, `prev`, `link`, as the CLI and the Rust stores write them) and, with
   * `signingKeys` (key file texts: an HMAC key and/or an Ed25519 secret key), signed. The
   * core decides every statement (the run's head, the insert, chaining again when another
   * writer took the position); this code only runs them. A bad signing key throws here,
   * `invalid-input`, without the key.
   *
   * Given to a `HeartFleet` over this same store (`new HeartFleet({store, onReceipt:
   * store.receiptSink()})`), the receipts commit with the writes they record: each
   * operation's requests run in one transaction on one connection (HeldTransaction), the
   * receipts are inserted inside it as the core emits them, and it commits when the
   * operation ends or hands control to the caller (an effect, a probe), so no effect runs
   * inside a transaction. A process killed before the commit leaves neither the writes nor
   * their receipts; a receipt that cannot be inserted rolls its writes back and the
   * operation fails with store-unavailable, its counters taken back. Used anywhere else (a
   * fleet over another store, a call of your own), the sink appends in the background, in
   * order, after the write; a failure goes to `onError` (default: ignored), never to the
   * lease operation.
   */
  receiptSink({ onError, signingKeys = [] } = {}) {
    if (!Array.isArray(signingKeys) || !signingKeys.every((k) => typeof k === 'string')) {
      throw typeError('receiptSink: signingKeys is a list of key texts');
    }
    // heart-fleet-wasm leaves the receipt chain out (its size budget): there the sink appends
    // the reference's receipt unchained, as TypeScript nodes do, and refuses keys.
    if (typeof native.NativeReceiptAppender?.create !== 'function') {
      if (signingKeys.length > 0) {
        throw codedError('invalid-state', 'receiptSink: signingKeys need the receipt chain, which heart-fleet-wasm leaves out');
      }
      return this._unchainedSink(onError);
    }
    let appender;
    try {
      appender = native.NativeReceiptAppender.create('postgres', JSON.stringify(signingKeys));
    } catch (e) {
      rethrowNative(e);
    }
    let chain = Promise.resolve();
    const sink = (receipt) => {
      chain = chain
        .then(() => appendReceipt(appender, receipt, (config) => this._query(config)))
        .catch((e) => {
          if (onError) onError(e, receipt);
        });
    };
    sink.flush = () => chain;
    Object.defineProperty(sink, RECEIPT_TABLE, { value: { store: this, signingKeys: JSON.stringify(signingKeys), onError } });
    return sink;
  }

  /**
   * A held transaction for one operation of a fleet whose `onReceipt` is `sink`, a
   * `receiptSink()` of this store (see receiptSink), waiting at most `connectMs` for a
   * connection; null for any other sink.
   */
  _holdFor(sink, connectMs = deadlines().connectTimeoutMs) {
    const table = typeof sink === 'function' ? sink[RECEIPT_TABLE] : undefined;
    return table && table.store === this ? new HeldTransaction(this, table, connectMs) : null;
  }

  _unchainedSink(onError) {
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
        .then(() => this._query({ text: st.sql, values: st.params.map(param) }))
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
