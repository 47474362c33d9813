//! Checks that the SQL `heart_fleet_core::sql` renders means what the core's pure evaluator
//! means. Its tests (`tests/sqlite.rs`, `tests/postgres.rs`) apply the migrations twice,
//! execute the rendered statements of every `StoreRequest` variant against a real SQLite
//! (bundled) and a real PostgreSQL server, and compare every answer and every resulting row
//! with `apply_update` / `Cond::eval` over a grid of row states and clock positions;
//! `tests/store_suite.rs` runs the core's store conformance suite
//! (`heart_fleet_core::store_suite`) on the two stores of `heart-fleet-stores`.
//!
//! The stores themselves ([`SqliteStore`], [`PgStore`]: thin [`heart_fleet_core::LeaseStore`]s
//! that execute what `sql::render` returns and call `sql::decode`) live in the
//! `heart-fleet-stores` crate; this library re-exports them for its tests.
//!
//! PostgreSQL tests need `DATABASE_URL` (e.g. `postgres://heart:heart@127.0.0.1:5432/heart_test`);
//! without it they print a `SKIPPED` line, or fail when `CI` is set. Each test works in a
//! namespace of its own and drops it at the end: a schema, or, for the tests that run the store
//! through PgBouncer in transaction mode (`HEART_PGBOUNCER_URL`), a database.

pub use heart_fleet_stores::{PgStore, SqliteStore};
