//! Where a PostgreSQL test's store connects, and the namespace it works in.
//!
//! Every store test runs on two routes: [`Route::Direct`] (straight to the server at
//! `DATABASE_URL`) and [`Route::Pooler`] (through the PgBouncer in transaction mode at
//! `HEART_PGBOUNCER_URL`, with `pgbouncer=true`, the mode of Supabase's pooled connection
//! string). A transaction pooler lets no session state follow a client (no `SET search_path`,
//! and PgBouncer refuses the startup parameter `options`), so the two routes isolate tests
//! differently: the direct route in a fresh schema (named by the URL's `options`, so a
//! reconnect keeps it), the pooler route in a fresh database. Either is dropped with the
//! [`Namespace`]. Test instruments (seeding by hand, a session holding a lock) connect
//! directly into the same namespace ([`Namespace::direct_url`]); only the store under test
//! takes the route.
//!
//! Without `DATABASE_URL` (or, for the pooler route, `HEART_PGBOUNCER_URL`) a test prints a
//! SKIPPED line and passes, except under `CI`, where it fails: CI runs both routes.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};

use heart_fleet_stores::{AnyStore, PgStore};
use postgres::{Client, NoTls};

static NAMESPACES: AtomicUsize = AtomicUsize::new(0);

/// How the store under test reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Straight to the server.
    Direct,
    /// Through PgBouncer in transaction mode (`pgbouncer=true`).
    Pooler,
}

/// The value of `name`, or `None` after a SKIPPED line (a failure under `CI`).
pub fn env(name: &str, what: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert!(std::env::var_os("CI").is_none(), "{name} is not set, and CI is: the {what} tests must run in CI");
            eprintln!("SKIPPED: {what} (set {name} to run it)");
            None
        }
    }
}

/// Whether `route`'s servers are configured (false after a SKIPPED line; a failure under `CI`),
/// checked without creating anything.
pub fn configured(route: Route, what: &str) -> bool {
    env("DATABASE_URL", what).is_some()
        && (route == Route::Direct || env("HEART_PGBOUNCER_URL", &format!("{what} through the pooler")).is_some())
}

/// Terminates the backends whose `application_name` is `app` (a test's store); how many.
pub fn terminate(admin: &mut Client, app: &str) -> i64 {
    admin
        .query_one("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", &[&app])
        .unwrap()
        .get::<_, i64>(0)
}

/// `url` plus query parameters.
pub fn with(url: &str, params: &str) -> String {
    format!("{url}{}{params}", if url.contains('?') { '&' } else { '?' })
}

/// `url` naming database `db` instead of its own (query parameters kept).
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_end..].find('/') {
        Some(slash) => &base[..authority_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

/// A fresh namespace (schema or database, by route), dropped with the value.
pub struct Namespace {
    /// The route the store under test takes.
    pub route: Route,
    /// The URL of the store under test: the route into the namespace.
    pub url: String,
    /// A direct URL into the same namespace, for the test's own instruments.
    pub direct_url: String,
    /// A direct connection outside the namespace, which drops it.
    admin: Client,
    name: String,
}

impl Namespace {
    /// A fresh, empty namespace on `route`; `None` when the route's server is not configured
    /// (outside CI).
    pub fn new(route: Route, what: &str) -> Option<Namespace> {
        let base = env("DATABASE_URL", what)?;
        let mut admin = Client::connect(&base, NoTls).unwrap_or_else(|e| panic!("connect to DATABASE_URL: {e}"));
        let name = format!("heart_t{}_{}", std::process::id(), NAMESPACES.fetch_add(1, Ordering::SeqCst));
        let (url, direct_url) = match route {
            Route::Direct => {
                admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}")).unwrap();
                let url = with(&base, &format!("options=-csearch_path%3D{name}"));
                (url.clone(), url)
            }
            Route::Pooler => {
                let pooled = env("HEART_PGBOUNCER_URL", &format!("{what} through the pooler"))?;
                admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
                admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
                (with(&with_database(&pooled, &name), "pgbouncer=true"), with_database(&base, &name))
            }
        };
        Some(Namespace { route, url, direct_url, admin, name })
    }

    /// A fresh namespace with the migrations applied through the route (the way a user
    /// migrates).
    pub fn migrated(route: Route, what: &str) -> Option<Namespace> {
        let ns = Namespace::new(route, what)?;
        let mut store = AnyStore::Postgres(ns.store());
        heart_fleet_stores::migrate(&mut store).unwrap_or_else(|e| panic!("migrate ({route:?}): {e}"));
        Some(ns)
    }

    /// The store under test, on the route.
    pub fn store(&self) -> PgStore {
        PgStore::connect(&self.url).unwrap_or_else(|e| panic!("connect ({:?}): {e}", self.route))
    }

    /// A direct session in the namespace, for the test's instruments.
    pub fn instrument(&self) -> Client {
        Client::connect(&self.direct_url, NoTls).unwrap_or_else(|e| panic!("connect (instrument): {e}"))
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let sql = match self.route {
            Route::Direct => format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name),
            Route::Pooler => format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        };
        if let Err(e) = self.admin.batch_execute(&sql) {
            eprintln!("could not drop {}: {e}", self.name);
        }
    }
}

#[test]
fn with_database_replaces_only_the_path() {
    assert_eq!(with_database("postgres://u:p@h:6432/a", "b"), "postgres://u:p@h:6432/b");
    assert_eq!(with_database("postgres://u:p@h:6432/a?x=1&y=2", "b"), "postgres://u:p@h:6432/b?x=1&y=2");
    assert_eq!(with_database("postgres://h", "b"), "postgres://h/b");
}
