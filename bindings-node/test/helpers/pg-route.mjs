// The two routes a PostgreSQL test body runs on: `direct` (DATABASE_URL) and `pooler`
// (HEART_PGBOUNCER_URL, PgBouncer in transaction mode). Through such a pooler session state
// does not follow a client and the startup parameter `options` is refused, so a route isolates
// its tests in a database of its own, not a schema: created and dropped over a direct
// connection to DATABASE_URL, migrated through the route, reached by the stores under test
// through the route (with `pgbouncer=true` on the pooler) and by the test's instruments
// (admin queries, lock holders) directly.
//
// A route whose service is missing skips its tests with the reason, except under CI (env CI
// set), where each of its tests fails with it.

import { test, before, after } from 'node:test';
import pg from 'pg';
import { HeartFleet, PgLeaseStore } from '../../index.mjs';

const directUrl = process.env.DATABASE_URL;
const poolerUrl = process.env.HEART_PGBOUNCER_URL;
const stamp = `${process.pid}_${Date.now()}`;

/** `url` with another database, without our `pgbouncer` parameter. */
function retarget(url, database) {
  const u = new URL(url);
  u.pathname = `/${database}`;
  u.searchParams.delete('pgbouncer');
  return u.href;
}

/** A fresh database made by a route: its name and its URLs. */
class Database {
  constructor(name, server, pooled) {
    this.name = name;
    /** Direct, for the test's instruments. */
    this.adminUrl = retarget(directUrl, name);
    /** Through the route, for the driver (no parameter of ours). */
    this.url = retarget(server, name);
    /** Through the route, for PgLeaseStore: `pgbouncer=true` on the pooler. */
    const store = new URL(this.url);
    if (pooled) store.searchParams.set('pgbouncer', 'true');
    this.storeUrl = store.href;
  }
}

/** One route: its databases, the stores and connections its tests open, and their cleanup. */
class Route {
  constructor(name, server, missing) {
    this.name = name;
    this.pooled = name === 'pooler';
    this.server = server;
    this.missing = missing;
    this.databases = [];
    this.closers = [];
    this.opened = null;
  }

  /** Skip reason, or false: under CI a missing service is a failure, never a skip. */
  get skip() {
    return this.missing && !process.env.CI ? this.missing : false;
  }

  /**
   * Opens the route once: its migrated database (`db`), its store (`store`, the store under
   * test), a fleet on it (`heart`) and a direct client on the same database (`admin`).
   */
  open() {
    this.opened ??= (async () => {
      if (this.missing) throw new Error(`${this.missing}: CI requires the ${this.name} route of the PostgreSQL tests`);
      const maintenance = new pg.Client({ connectionString: directUrl });
      await maintenance.connect();
      this.maintenance = maintenance;
      this.db = await this.createDatabase('main');
      this.admin = await this.client(this.db.adminUrl);
      this.store = this.newStore();
      const applied = await this.store.migrate();
      if (!applied.every((m) => m.applied)) throw new Error(`a fresh database had migrations already: ${JSON.stringify(applied)}`);
      this.heart = new HeartFleet({ store: this.store });
      return this;
    })();
    return this.opened;
  }

  /** A new, empty (unmigrated) database, dropped when the route closes. */
  async createDatabase(tag) {
    const db = new Database(`heart_node_${this.name}_${stamp}_${tag}_${this.databases.length}`, this.server, this.pooled);
    await this.maintenance.query(`CREATE DATABASE ${db.name}`);
    this.databases.push(db);
    return db;
  }

  /** A PgLeaseStore (its own pool) on `db` through the route; `options` override. */
  newStore(options = {}, db = this.db) {
    const store = new PgLeaseStore({ connectionString: db.storeUrl, max: 4, ...options });
    this.closers.push(() => store.end());
    return store;
  }

  /** A node-postgres pool on `db` through the route (give PgLeaseStore `prepare: !pooled`). */
  pool(config = {}, db = this.db) {
    const p = new pg.Pool({ connectionString: db.url, max: 4, ...config });
    // As on PgLeaseStore's own pools: an idle connection ended by the teardown's DROP … WITH
    // (FORCE) while the pool closes would otherwise raise an unhandled 'error'.
    p.on('error', () => {});
    this.closers.push(() => p.end());
    return p;
  }

  /** A connected client on `url` (direct, for instruments unless told otherwise). */
  async client(url = this.db.adminUrl) {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    this.closers.push(() => c.end());
    return c;
  }

  /** Closes everything opened, then drops the databases (FORCE: the pooler's idle server connections). */
  async close() {
    if (!this.maintenance) return;
    // Connections first: the DROP would terminate them under their clients (an unhandled 'error').
    await Promise.all(this.closers.map((end) => end().catch(() => {})));
    for (const db of this.databases) await this.maintenance.query(`DROP DATABASE IF EXISTS ${db.name} WITH (FORCE)`);
    await this.maintenance.end();
  }
}

/** The routes: `direct` always, `pooler` where PgBouncer is given. */
export const routes = [
  new Route('direct', directUrl, directUrl ? null : 'DATABASE_URL is not set'),
  new Route('pooler', poolerUrl, !directUrl ? 'DATABASE_URL is not set' : poolerUrl ? null : 'HEART_PGBOUNCER_URL is not set (scripts/test-all.sh starts PgBouncer)'),
];
// Both routes set up at once (creating a database takes a few hundred ms); a route's tests
// await its setup and fail with its error.
before(() => {
  for (const route of routes) if (!route.skip) route.open().catch(() => {});
});
after(() => Promise.all(routes.map((r) => r.close())));

/** Registers `body(route)` once per route, named `[route] name`. */
export function routeTest(name, body) {
  for (const route of routes) {
    test(`[${route.name}] ${name}`, { skip: route.skip }, async () => body(await route.open()));
  }
}

/** Registers a body that only the direct route can run; `why` goes into its name. */
export function directOnlyTest(name, why, body) {
  const [route] = routes;
  test(`[direct only: ${why}] ${name}`, { skip: route.skip }, async () => body(await route.open()));
}
