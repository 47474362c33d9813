//! Checks that the SQL `heart_fleet_core::sql` renders means what the core's pure evaluator
//! means. The crate has no code of its own: its tests (`tests/sqlite.rs`,
//! `tests/postgres.rs`) apply the migrations twice, execute the rendered statements of every
//! `StoreRequest` variant against a real SQLite (bundled) and a real PostgreSQL server, and
//! compare every answer and every resulting row with `apply_update` / `Cond::eval` over a
//! grid of row states and clock positions.
//!
//! The drivers live only here, as dev-dependencies, so the core's dependency tree never
//! contains a database driver.
//!
//! PostgreSQL tests need `DATABASE_URL` (e.g. `postgres://heart:heart@127.0.0.1:5432/heart_test`);
//! without it they print a `SKIPPED` line, or fail when `CI` is set. Each test works in a
//! schema of its own and drops it at the end.
