//! SQL exists once: every [`StoreRequest`] rendered as parameterized SQL for PostgreSQL and
//! SQLite, and the rows a database hands back decoded into a [`StoreAnswer`].
//!
//! Both functions are pure. A SQL store in any language (Rust, node-postgres, psycopg,
//! Python's `sqlite3`) holds no lease logic and no SQL of its own beyond connecting: it
//! executes what [`render`] returns, hands every result row back as a list of
//! `(column name, value)` pairs ([`SqlRow`]), and calls [`decode`]. The schema the statements
//! expect is created by [`migrations`] (the files under `migrations/` in the repository).
//!
//! # The store's clock
//!
//! Every answer carries the `now` the store evaluated the request at, truncated to whole
//! milliseconds, and one request uses one `now` for every comparison and assignment.
//!
//! * **PostgreSQL: exactly one statement per request.** It computes the clock once, in a
//!   materialized CTE, `WITH clk AS MATERIALIZED (SELECT date_trunc('milliseconds',
//!   clock_timestamp()) AS now)`, and refers to `clk.now` everywhere else. Every statement
//!   returns at least one row: the data joined to `clk` with `LEFT JOIN ... ON true`, so a
//!   write that misses or a scan that finds nothing still reports `now` (the row's other
//!   columns are then null). Run statements in autocommit or in their own transaction.
//! * **SQLite: a short list of statements, run in one `BEGIN IMMEDIATE` transaction.** SQLite
//!   cannot put a write in a CTE, and `RETURNING` cannot see other tables, so a request is the
//!   clock read followed by one to three statements. The first statement is the clock read,
//!   [`SQLITE_CLOCK`]: the later of this process's clock and the latest instant any request on
//!   the file used (table `heart_clock`, which it updates), so the store's clock never goes
//!   backwards when processes sharing the file disagree about the time. Every later statement
//!   that needs the clock has a [`SqlParam::Now`] parameter, which the store binds to the text
//!   the first statement returned. `BEGIN IMMEDIATE` takes the write lock before the clock is
//!   read, so no other writer runs between the statements, and they all see one `now` and one
//!   state.
//!
//! A SQLite store therefore does:
//!
//! 1. `BEGIN IMMEDIATE`;
//! 2. for each statement in order: bind its parameters ([`SqlParam::Now`] = the `now` text of
//!    the first statement's row), step it to completion and keep all its rows;
//! 3. `COMMIT` (on any error: `ROLLBACK` and report a store failure);
//! 4. [`decode`] the list of row sets.
//!
//! (Python's `sqlite3`: open the connection with `isolation_level=None`, so the module issues
//! no `BEGIN` of its own.)
//!
//! A PostgreSQL store executes the one statement and passes `vec![rows]` to [`decode`].
//!
//! # Values
//!
//! Parameters are only integers and text ([`SqlParam`]); nulls are written as SQL literals, so
//! every placeholder has a fixed, non-null type. PostgreSQL placeholders are `$1, $2, ...` with
//! explicit casts (`$1::text`, `$2::bigint`, `$3::text::timestamptz`, `$4::text::jsonb`,
//! `$5::text::uuid`), so a driver may send every parameter as text or as a typed value.
//! SQLite placeholders are `?1, ?2, ...`, numbered densely from 1.
//!
//! Timestamps are passed and returned as `toISOString()` text. PostgreSQL columns are read
//! back through `to_char(... AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`, JSON and
//! UUID columns through `::text`, `required_capabilities` through `to_json(...)::text`; so a
//! driver only ever hands back text, integers and booleans ([`SqlValue`]). SQLite stores
//! timestamps as that same ISO text (text order is time order; the schema's CHECKs enforce the
//! form), JSON as text and booleans as integers.
//!
//! # Semantics
//!
//! The statements implement the pure evaluator of [`crate::request`] ([`Cond::eval`],
//! [`crate::request::apply_update`]) exactly; `tests/sql-exec` runs them against real SQLite
//! and PostgreSQL servers over a grid of row states and clock positions and compares. In
//! particular:
//!
//! * equality is null-safe: `Eq(col, Null)` is `col IS NULL`, and `Eq(col, v)` is `col = v`,
//!   which is null-safe here because every condition acts two-valued: a NULL result only
//!   arises where the evaluator says false and is read as false everywhere (WHERE, CASE WHEN,
//!   AND/OR), and a negation is `NOT COALESCE(c, FALSE)`. (`=` can use an index, `IS NOT
//!   DISTINCT FROM` cannot.);
//! * timestamps are whole milliseconds in the core; a PostgreSQL row written by another tool
//!   may hold microseconds, so an equality test on a timestamp column (`Eq`, `In`, the expiry
//!   check of [`Cond::RunHeldBy`]) compares `date_trunc('milliseconds', col)`: a value read
//!   back from a row (always truncated, see Values) equals the row's column again. These tests
//!   pick rows by primary key, so no index is lost. (Order comparisons, `<= now`, use the exact
//!   value; they differ from the truncated one by under a millisecond.);
//! * a comparison of a column with a value of another type is false, as in the evaluator,
//!   instead of a database error;
//! * statuses, states and channels that are plain lowercase words are written as SQL literals
//!   (`status IN ('leased', 'running')`), so the partial indexes of the migrations apply;
//! * text is ordered bytewise (`COLLATE "C"` in PostgreSQL), and `NULL` expiries sort first in
//!   both dialects, as in the memory store;
//! * in PostgreSQL, an expiry-ordered scan whose condition is `ExpiredAt(expiry)` or a
//!   conjunction containing it (the sweep, the reconciler's stale-dispatch scan) is rendered
//!   as two index ranges, `expiry IS NULL` and `expiry <= (SELECT now FROM clk)`, each ordered
//!   and limited, merged (`UNION ALL`) and ordered and limited again: the same rows in the same
//!   order, but the index scan stops at `now` instead of filtering every live lease (see
//!   `pg_expired_scan`);
//! * PostgreSQL statements assume READ COMMITTED (the default): a write that meets a
//!   concurrent write of its row waits for it and re-checks its condition on the new version.
//!   Under REPEATABLE READ or SERIALIZABLE the statement fails with a serialization error
//!   instead, which the store reports as a failure.
//!
//! In PostgreSQL, `agent_runs.id` and `effect_intents.run_id` are UUIDs: a run id that is not
//! valid UUID text (as PostgreSQL parses it) matches no row instead of failing the statement,
//! and an insert with such a run id is refused by [`render`] as `invalid-input`. UUIDs compare
//! by value there, so an upper-case or braced spelling of an id finds the row (which always
//! reads back in lower-case canonical form); SQLite compares ids as text.
//!
//! # Layout
//!
//! * `builder`: column kinds and lists, bound parameters, conditions and assignments (both
//!   dialects).
//! * `postgres` and `sqlite`: each dialect's statements for every request.
//! * `decode`: the rows a database hands back, as a [`StoreAnswer`].
//! * `seed`: rows written as given (fixtures, seeding) and the receipt insert.
//! * `migrate`: the migrations the repository ships and the [`MigrationPlan`] every store
//!   runs them by.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ErrorCode, HeartError};
use crate::model::{DispatchLogEntry, InstanceRow, InstanceStatus, IntentRow, IntentState, RunRow, RunStatus};
use crate::request::{
    Assign, Cond, Expr, InstanceCol, IntentCol, NewIntent, NewRun, RunCol, RunOrder, StoreAnswer, StoreReply,
    StoreRequest, Val,
};
use crate::time::Timestamp;

/// A SQL dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// PostgreSQL 13 or later.
    Postgres,
    /// SQLite 3.35 or later.
    Sqlite,
}

/// A statement parameter. Nulls never appear as parameters (they are SQL literals).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SqlParam {
    /// A 64-bit integer.
    Int(i64),
    /// Text (timestamps as ISO text, JSON as JSON text, UUIDs as text).
    Text(String),
    /// (SQLite only) the store's `now`: bind the text in the `now` column of the row the
    /// first statement of the list (the clock read) returned.
    Now,
}

/// One parameterized statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Statement {
    /// The SQL text, with `$n` (PostgreSQL) or `?n` (SQLite) placeholders.
    pub sql: String,
    /// The parameters, `params[n - 1]` for placeholder `n`.
    pub params: Vec<SqlParam>,
}

/// A column value as a driver hands it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SqlValue {
    /// SQL `NULL`.
    Null,
    /// An integer (PostgreSQL `int4`/`int8`, SQLite `INTEGER`).
    Int(i64),
    /// A floating-point number (accepted where an integer is expected if it is integral).
    Real(f64),
    /// Text (also accepted for integers and booleans, as some drivers return `int8` as text).
    Text(String),
    /// A boolean (PostgreSQL `bool`).
    Bool(bool),
}

/// One result row: column name and value, in any order.
pub type SqlRow = Vec<(String, SqlValue)>;

/// The SQLite clock read, the first statement of every SQLite list: this process's clock, or
/// the latest instant a request on the file has used if that is later (a process whose clock
/// is behind cannot take a lease that has not expired), kept as the new latest instant.
pub const SQLITE_CLOCK: &str = "INSERT INTO heart_clock (id, now) VALUES (1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) \
                                ON CONFLICT (id) DO UPDATE SET now = max(heart_clock.now, excluded.now) RETURNING now";

/// Longest shift of the clock a statement may compute (`now ± ms`): 100 years.
const MAX_SHIFT_MS: i64 = 3_155_760_000_000;

/// The PostgreSQL clock CTE.
const PG_CLOCK: &str = "WITH clk AS MATERIALIZED (SELECT date_trunc('milliseconds', clock_timestamp()) AS now)";

fn invalid(message: impl Into<String>) -> HeartError {
    HeartError::invalid(format!("sql: {}", message.into()))
}

fn protocol(message: impl Into<String>) -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, format!("sql: {}", message.into()))
}

// ------------------------------------------------------------------------------------------
// Rendering
// ------------------------------------------------------------------------------------------

/// Renders a request into the statements a store of `dialect` runs: exactly one for
/// PostgreSQL; for SQLite the clock read followed by one to three statements, all to be run
/// in one `BEGIN IMMEDIATE` transaction (see the module docs).
///
/// An `invalid-input` error means the request cannot be expressed (an assignment of the
/// wrong type, a write to an immutable column, a non-UUID run id in a PostgreSQL insert, a
/// clock shift beyond 100 years); nothing is executed.
pub fn render(req: &StoreRequest, dialect: Dialect) -> Result<Vec<Statement>, HeartError> {
    match dialect {
        Dialect::Postgres => Ok(vec![render_pg(req, PgColumns::Text)?]),
        Dialect::Sqlite => {
            let mut out = vec![Statement { sql: SQLITE_CLOCK.to_owned(), params: Vec::new() }];
            out.extend(render_sqlite(req)?);
            Ok(out)
        }
    }
}

/// How the driver that runs a PostgreSQL statement returns its result columns, which decides
/// how the statement selects them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgColumns {
    /// As text, whatever their type (node-postgres, psycopg): the statement formats every
    /// column into the text [`decode`] reads (`to_char` for timestamps, casts for `uuid` and
    /// `jsonb`). What [`render`] gives.
    Text,
    /// In their own types, read in binary (the Rust `PgStore`): the clock (`now`) and the
    /// rows of a run write are selected as they are (`timestamptz`, `uuid`, `jsonb`), and the
    /// driver's side turns them into the text [`decode`] reads (a timestamp into its
    /// `toISOString()` form, truncated to the millisecond as `to_char` does). Formatting those
    /// columns on the server was about a fifth of its time for a lease cycle. The other
    /// columns of other statements are selected as for [`PgColumns::Text`].
    Native,
}

/// [`render`] for PostgreSQL, for a driver that returns result columns as `columns` says.
pub fn render_pg_for(req: &StoreRequest, columns: PgColumns) -> Result<Statement, HeartError> {
    render_pg(req, columns)
}

mod builder;
pub mod deadlines;
mod decode;
mod migrate;
mod postgres;
pub mod readout;
mod seed;
mod sqlite;

use builder::*;
pub use decode::{decode, statement_count};
pub use migrate::{MIGRATIONS_TABLE, MigrationPlan, migration_plan, migrations};
use postgres::*;
pub use seed::{receipt_chain_head, receipt_insert, seed_instance, seed_intent, seed_run};
use sqlite::*;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;
