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
//!   `SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS now`; every later statement that needs
//!   the clock has a [`SqlParam::Now`] parameter, which the store binds to the text the first
//!   statement returned. `BEGIN IMMEDIATE` takes the write lock before the clock is read, so no
//!   other writer runs between the statements, and they all see one `now` and one state.
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

/// The SQLite clock read, the first statement of every SQLite list.
pub const SQLITE_CLOCK: &str = "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS now";

const PG_MIGRATIONS: &[(&str, &str)] = &[
    ("0001_reference_schema", include_str!("../../migrations/postgres/0001_reference_schema.sql")),
    ("0002_heart_fleet", include_str!("../../migrations/postgres/0002_heart_fleet.sql")),
];

const SQLITE_MIGRATIONS: &[(&str, &str)] = &[("0001_schema", include_str!("../../migrations/sqlite/0001_schema.sql"))];

/// The schema migrations of a dialect, in order: `(name, sql)`. Each is idempotent (safe to
/// run again) and should run in one transaction; a file may hold several statements, so run
/// it with a driver's batch/simple-query API (`batch_execute`, `executescript`, ...).
pub fn migrations(dialect: Dialect) -> &'static [(&'static str, &'static str)] {
    match dialect {
        Dialect::Postgres => PG_MIGRATIONS,
        Dialect::Sqlite => SQLITE_MIGRATIONS,
    }
}

/// The table in which every store records the migrations it applied.
pub const MIGRATIONS_TABLE: &str = "heart_fleet_migrations";

/// How every store, in every language, applies the migrations: one protocol, so that a Rust,
/// Node and Python `migrate` of one database exclude each other and agree on what is applied.
///
/// For each of `migrations`, in order, in one transaction: `begin`; `lock` when there is one
/// (PostgreSQL: a transaction-scoped advisory lock, which a transaction pooler keeps, unlike a
/// session lock); `create_record_table`; `is_applied` with the migration's name as its one
/// parameter (one row, column `n`: 0 or 1); when 0, the migration's script (several
/// statements: a driver's batch / simple-query API) and `record` with the name; `commit`.
/// On any failure `rollback` and stop: the failed migration is not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationPlan {
    /// Opens the transaction.
    pub begin: &'static str,
    /// Serializes concurrent migrates (PostgreSQL); SQLite's `BEGIN IMMEDIATE` already does.
    pub lock: Option<&'static str>,
    /// Creates the record table when it is missing.
    pub create_record_table: &'static str,
    /// Whether a migration is recorded; one parameter, the name.
    pub is_applied: &'static str,
    /// Records a migration; one parameter, the name.
    pub record: &'static str,
    /// Ends the transaction.
    pub commit: &'static str,
    /// Abandons it.
    pub rollback: &'static str,
    /// `(name, script)`, in order.
    pub migrations: &'static [(&'static str, &'static str)],
}

/// The one advisory lock key every PostgreSQL migrate takes (arbitrary, fixed forever).
const PG_MIGRATE_LOCK: &str = "SELECT pg_advisory_xact_lock(7264817345)";

/// The migration protocol of a dialect (see [`MigrationPlan`]).
pub fn migration_plan(dialect: Dialect) -> MigrationPlan {
    match dialect {
        Dialect::Postgres => MigrationPlan {
            begin: "BEGIN",
            lock: Some(PG_MIGRATE_LOCK),
            create_record_table: "CREATE TABLE IF NOT EXISTS heart_fleet_migrations (name TEXT NOT NULL PRIMARY KEY, \
                                  applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            is_applied: "SELECT count(*)::int AS n FROM heart_fleet_migrations WHERE name = $1::text",
            record: "INSERT INTO heart_fleet_migrations (name) VALUES ($1::text)",
            commit: "COMMIT",
            rollback: "ROLLBACK",
            migrations: PG_MIGRATIONS,
        },
        Dialect::Sqlite => MigrationPlan {
            begin: "BEGIN IMMEDIATE",
            lock: None,
            create_record_table: "CREATE TABLE IF NOT EXISTS heart_fleet_migrations (name TEXT NOT NULL PRIMARY KEY, \
                                  applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))",
            is_applied: "SELECT count(*) AS n FROM heart_fleet_migrations WHERE name = ?1",
            record: "INSERT INTO heart_fleet_migrations (name) VALUES (?1)",
            commit: "COMMIT",
            rollback: "ROLLBACK",
            migrations: SQLITE_MIGRATIONS,
        },
    }
}

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
// Columns
// ------------------------------------------------------------------------------------------

/// The SQL type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    /// Text from a closed set (a status, a state, a channel). Values that are plain
    /// lowercase words are written as SQL literals instead of parameters, so the planners can
    /// match the partial indexes (`WHERE status IN ('leased', 'running')`,
    /// `WHERE state = 'dispatched'`) whatever plan a driver's statement cache picks.
    Label,
    /// `uuid` in PostgreSQL, text in SQLite; compared with text values.
    Uuid,
    Int,
    Time,
    Json,
    /// `text[]` in PostgreSQL, JSON text in SQLite (output only).
    TextArray,
}

impl Kind {
    fn pg_type(self) -> &'static str {
        match self {
            Kind::Text | Kind::Label => "text",
            Kind::Uuid => "uuid",
            Kind::Int => "bigint",
            Kind::Time => "timestamptz",
            Kind::Json => "jsonb",
            Kind::TextArray => "text[]",
        }
    }

    /// Whether a (non-null) value can be compared with or assigned to a column of this kind.
    fn accepts(self, v: &Val) -> bool {
        matches!(
            (self, v),
            (Kind::Text | Kind::Label | Kind::Uuid, Val::Text(_))
                | (Kind::Int, Val::Int(_))
                | (Kind::Time, Val::Time(_))
                | (Kind::Json, Val::Json(_))
        )
    }
}

/// A column type of the request language, with what rendering needs to know about it.
trait Column: Copy + PartialEq {
    /// The table.
    const TABLE: &'static str;
    /// A column a write with no assignments sets to itself.
    const NOOP: &'static str;
    fn name(self) -> &'static str;
    fn kind(self) -> Kind;
    fn immutable(self) -> bool;
    /// The column naming the run this row belongs to ([`Cond::RunHeldBy`]) and its kind.
    fn run_ref() -> (&'static str, Kind);
    /// The column naming the lease owner ([`Cond::OwnerInstanceDead`]), if the table has one.
    fn owner_ref() -> Option<&'static str>;
}

impl Column for RunCol {
    const TABLE: &'static str = "agent_runs";
    const NOOP: &'static str = "status";
    fn name(self) -> &'static str {
        RunCol::name(self)
    }
    fn kind(self) -> Kind {
        match self {
            RunCol::Id => Kind::Uuid,
            RunCol::Status => Kind::Label,
            RunCol::LeaseOwner | RunCol::IdempotencyKey => Kind::Text,
            RunCol::LeaseExpiresAt | RunCol::UpdatedAt => Kind::Time,
            RunCol::Retries | RunCol::FencingEpoch => Kind::Int,
        }
    }
    fn immutable(self) -> bool {
        matches!(self, RunCol::Id | RunCol::IdempotencyKey)
    }
    fn run_ref() -> (&'static str, Kind) {
        ("id", Kind::Uuid)
    }
    fn owner_ref() -> Option<&'static str> {
        Some("lease_owner")
    }
}

impl Column for IntentCol {
    const TABLE: &'static str = "effect_intents";
    const NOOP: &'static str = "state";
    fn name(self) -> &'static str {
        IntentCol::name(self)
    }
    fn kind(self) -> Kind {
        match self {
            IntentCol::State | IntentCol::Channel => Kind::Label,
            IntentCol::PayloadDigest | IntentCol::FenceOwner | IntentCol::LastError => Kind::Text,
            IntentCol::FenceExpiresAt | IntentCol::CommittedAt => Kind::Time,
            IntentCol::FenceEpoch | IntentCol::Attempts => Kind::Int,
            IntentCol::ExternalRef => Kind::Json,
        }
    }
    fn immutable(self) -> bool {
        false
    }
    fn run_ref() -> (&'static str, Kind) {
        ("run_id", Kind::Uuid)
    }
    fn owner_ref() -> Option<&'static str> {
        None
    }
}

impl Column for InstanceCol {
    const TABLE: &'static str = "agent_instances";
    const NOOP: &'static str = "status";
    fn name(self) -> &'static str {
        InstanceCol::name(self)
    }
    fn kind(self) -> Kind {
        match self {
            InstanceCol::InstanceId => Kind::Text,
            InstanceCol::Status => Kind::Label,
            InstanceCol::LastHeartbeat => Kind::Time,
        }
    }
    fn immutable(self) -> bool {
        matches!(self, InstanceCol::InstanceId)
    }
    fn run_ref() -> (&'static str, Kind) {
        ("instance_id", Kind::Text)
    }
    fn owner_ref() -> Option<&'static str> {
        None
    }
}

/// The output columns of each table, in the model's field order.
const RUN_COLUMNS: [(&str, Kind); 18] = [
    ("id", Kind::Uuid),
    ("task_id", Kind::Text),
    ("assignment_id", Kind::Uuid),
    ("objective", Kind::Text),
    ("required_capabilities", Kind::TextArray),
    ("status", Kind::Text),
    ("assigned_agent", Kind::Text),
    ("lease_owner", Kind::Text),
    ("lease_expires_at", Kind::Time),
    ("retries", Kind::Int),
    ("budget", Kind::Json),
    ("approval_state", Kind::Text),
    ("visibility", Kind::Text),
    ("idempotency_key", Kind::Text),
    ("created_by", Kind::Text),
    ("created_at", Kind::Time),
    ("updated_at", Kind::Time),
    ("fencing_epoch", Kind::Int),
];

const INTENT_COLUMNS: [(&str, Kind); 13] = [
    ("run_id", Kind::Uuid),
    ("effect_key", Kind::Text),
    ("state", Kind::Text),
    ("channel", Kind::Text),
    ("payload_digest", Kind::Text),
    ("fence_owner", Kind::Text),
    ("fence_expires_at", Kind::Time),
    ("fence_epoch", Kind::Int),
    ("external_ref", Kind::Json),
    ("attempts", Kind::Int),
    ("last_error", Kind::Text),
    ("created_at", Kind::Time),
    ("committed_at", Kind::Time),
];

const INSTANCE_COLUMNS: [(&str, Kind); 7] = [
    ("instance_id", Kind::Text),
    ("hostname", Kind::Text),
    ("pid", Kind::Int),
    ("status", Kind::Text),
    ("started_at", Kind::Time),
    ("last_heartbeat", Kind::Time),
    ("metadata", Kind::Json),
];

const LOG_COLUMNS: [(&str, Kind); 6] = [
    ("run_id", Kind::Uuid),
    ("effect_key", Kind::Text),
    ("attempt", Kind::Int),
    ("outcome", Kind::Text),
    ("at", Kind::Time),
    ("detail", Kind::Json),
];

/// PostgreSQL: `timestamptz` as `toISOString()` text.
fn pg_iso(expr: &str) -> String {
    format!("to_char({expr} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')")
}

/// The select list of a table's columns read from relation `rel`, each named `prefix` + column.
fn select_list(dialect: Dialect, columns: &[(&str, Kind)], rel: &str, prefix: &str) -> String {
    columns
        .iter()
        .map(|(name, kind)| {
            let col = if rel.is_empty() { (*name).to_owned() } else { format!("{rel}.{name}") };
            let expr = match (dialect, kind) {
                (Dialect::Sqlite, _) | (Dialect::Postgres, Kind::Text | Kind::Label | Kind::Int) => col,
                (Dialect::Postgres, Kind::Uuid | Kind::Json) => format!("{col}::text"),
                (Dialect::Postgres, Kind::Time) => pg_iso(&col),
                (Dialect::Postgres, Kind::TextArray) => format!("to_json({col})::text"),
            };
            if expr == *name && prefix.is_empty() { expr } else { format!("{expr} AS {prefix}{name}") }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether PostgreSQL's `uuid` input accepts `s` (its `string_to_uuid`: optional braces, 32
/// hex digits, an optional `-` after any group of four but the last).
fn pg_uuid_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let braces = b.first() == Some(&b'{');
    let mut i = usize::from(braces);
    for k in 0..16 {
        let hex = |at: usize| b.get(at).is_some_and(u8::is_ascii_hexdigit);
        if !(hex(i) && hex(i + 1)) {
            return false;
        }
        i += 2;
        if b.get(i) == Some(&b'-') && k % 2 == 1 && k < 15 {
            i += 1;
        }
    }
    if braces {
        if b.get(i) != Some(&b'}') {
            return false;
        }
        i += 1;
    }
    i == b.len()
}

/// Whether a text value of a [`Kind::Label`] column may be written as a SQL literal: a
/// plain lowercase word, which cannot contain a quote.
fn is_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && s.bytes().all(|c| c.is_ascii_lowercase() || c == b'_')
}

/// `±S.mmm seconds`, a SQLite date modifier that shifts by `ms` milliseconds exactly.
fn sqlite_shift_modifier(ms: i64) -> String {
    let sign = if ms < 0 { '-' } else { '+' };
    let abs = ms.unsigned_abs();
    format!("{sign}{}.{:03} seconds", abs / 1000, abs % 1000)
}

/// The SQLite expression generating a random (version 4) UUID in canonical text form.
const SQLITE_UUID: &str = "(lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' || \
    substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (random() & 3), 1) || \
    substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6))))";

// ------------------------------------------------------------------------------------------
// Statement builder
// ------------------------------------------------------------------------------------------

/// Builds one statement: allocates placeholders and knows how to spell values and the clock.
struct Builder {
    dialect: Dialect,
    params: Vec<SqlParam>,
    now: Option<String>,
}

impl Builder {
    fn new(dialect: Dialect) -> Builder {
        Builder { dialect, params: Vec::new(), now: None }
    }

    fn pg(&self) -> bool {
        self.dialect == Dialect::Postgres
    }

    fn push(&mut self, p: SqlParam) -> String {
        self.params.push(p);
        let n = self.params.len();
        match self.dialect {
            Dialect::Postgres => format!("${n}"),
            Dialect::Sqlite => format!("?{n}"),
        }
    }

    fn cast(&mut self, p: SqlParam, pg_cast: &str) -> String {
        let ph = self.push(p);
        if self.pg() { format!("{ph}{pg_cast}") } else { ph }
    }

    fn truth(&self, b: bool) -> &'static str {
        match (self.pg(), b) {
            (true, true) => "TRUE",
            (true, false) => "FALSE",
            (false, true) => "1",
            (false, false) => "0",
        }
    }

    /// The store's `now`: `clk.now` in PostgreSQL, a [`SqlParam::Now`] placeholder in SQLite.
    fn now(&mut self) -> String {
        if self.pg() {
            return "clk.now".to_owned();
        }
        if let Some(ph) = &self.now {
            return ph.clone();
        }
        let ph = self.push(SqlParam::Now);
        self.now = Some(ph.clone());
        ph
    }

    /// `now + ms` (whole milliseconds).
    fn now_plus(&mut self, ms: i64) -> Result<String, HeartError> {
        if !(-MAX_SHIFT_MS..=MAX_SHIFT_MS).contains(&ms) {
            return Err(invalid(format!("a clock shift of {ms} ms is out of range")));
        }
        let now = self.now();
        Ok(if self.pg() {
            let n = self.cast(SqlParam::Int(ms), "::bigint");
            format!("({now} + {n} * interval '1 millisecond')")
        } else {
            let m = self.push(SqlParam::Text(sqlite_shift_modifier(ms)));
            format!("strftime('%Y-%m-%dT%H:%M:%fZ', {now}, {m})")
        })
    }

    /// A parameter, or a (typed, in PostgreSQL) `NULL` when there is none.
    fn opt(&mut self, p: Option<SqlParam>, pg_cast: &str) -> String {
        match p {
            Some(p) => self.cast(p, pg_cast),
            None if self.pg() => format!("NULL{pg_cast}"),
            None => "NULL".to_owned(),
        }
    }

    fn text(&mut self, s: &str) -> String {
        self.cast(SqlParam::Text(s.to_owned()), "::text")
    }

    fn int(&mut self, i: i64) -> String {
        self.cast(SqlParam::Int(i), "::bigint")
    }

    fn time(&mut self, t: Timestamp) -> String {
        self.cast(SqlParam::Text(t.to_iso()), "::text::timestamptz")
    }

    fn json(&mut self, v: &Value) -> String {
        self.cast(SqlParam::Text(v.to_string()), "::text::jsonb")
    }

    /// A UUID value: `None` in PostgreSQL when the text is not a UUID (no row can match).
    fn uuid(&mut self, s: &str) -> Option<String> {
        if self.pg() && !pg_uuid_ok(s) {
            return None;
        }
        Some(self.cast(SqlParam::Text(s.to_owned()), "::text::uuid"))
    }

    /// `col = <uuid>`, or false when the text is not a UUID (PostgreSQL).
    fn uuid_eq(&mut self, col: &str, s: &str) -> String {
        match self.uuid(s) {
            Some(v) => format!("{col} = {v}"),
            None => self.truth(false).to_owned(),
        }
    }

    /// A non-null literal for a column of `kind` (the caller checked `kind.accepts(v)`).
    fn value(&mut self, kind: Kind, v: &Val) -> Option<String> {
        Some(match v {
            Val::Null => return None,
            Val::Text(s) if kind == Kind::Uuid => return self.uuid(s),
            Val::Text(s) if kind == Kind::Label && is_label(s) => format!("'{s}'"),
            Val::Text(s) => self.text(s),
            Val::Int(i) => self.int(*i),
            Val::Time(t) => self.time(*t),
            Val::Json(j) => self.json(j),
        })
    }

    /// The left operand of an equality test (`Eq`, `In`) on `col`. PostgreSQL timestamps
    /// hold microseconds, and a row written by another tool may carry sub-millisecond digits,
    /// while the core sees (and compares) every timestamp in whole milliseconds: the column
    /// is truncated to milliseconds first, so a value read back from the row equals it.
    /// These tests pick one row by key, so no index on the timestamp is lost.
    fn eq_operand<C: Column>(&self, col: C) -> String {
        if self.pg() && col.kind() == Kind::Time {
            format!("date_trunc('milliseconds', {})", qualified(col))
        } else {
            qualified(col)
        }
    }

    fn not(&self, inner: &str) -> String {
        format!("NOT COALESCE({inner}, {})", self.truth(false))
    }

    fn finish(self, sql: String) -> Statement {
        Statement { sql, params: self.params }
    }
}

// ------------------------------------------------------------------------------------------
// Conditions and assignments
// ------------------------------------------------------------------------------------------

fn qualified<C: Column>(c: C) -> String {
    format!("{}.{}", C::TABLE, c.name())
}

/// Renders a condition as a boolean SQL expression over the row of `C::TABLE`. It may be
/// NULL only where the evaluator says false; [`Cond::Not`] coalesces its operand.
fn cond<C: Column>(b: &mut Builder, c: &Cond<C>) -> Result<String, HeartError> {
    Ok(match c {
        Cond::True => b.truth(true).to_owned(),
        Cond::Eq(col, Val::Null) => format!("{} IS NULL", qualified(*col)),
        Cond::Eq(col, v) => {
            if !col.kind().accepts(v) {
                return Ok(b.truth(false).to_owned());
            }
            // `=` is null-safe here: the value is not null, so `col = v` is NULL only when
            // the column is, where the evaluator says false, and a NULL condition acts as
            // false everywhere it is used (WHERE, CASE WHEN, AND/OR, and NOT, which
            // coalesces). Unlike IS NOT DISTINCT FROM, `=` can use an index.
            match b.value(col.kind(), v) {
                Some(lit) => format!("{} = {lit}", b.eq_operand(*col)),
                None => b.truth(false).to_owned(),
            }
        }
        Cond::In(col, vs) => {
            let mut lits = Vec::new();
            for v in vs.iter().filter(|v| col.kind().accepts(v)) {
                if let Some(lit) = b.value(col.kind(), v) {
                    lits.push(lit);
                }
            }
            if lits.is_empty() {
                b.truth(false).to_owned()
            } else {
                format!("{} IN ({})", b.eq_operand(*col), lits.join(", "))
            }
        }
        Cond::AtMost(col, n) => {
            if col.kind() != Kind::Int {
                return Ok(b.truth(false).to_owned());
            }
            let lit = b.int(*n);
            format!("{} <= {lit}", qualified(*col))
        }
        Cond::ExpiredAt(col) => {
            if col.kind() != Kind::Time {
                return Ok(b.truth(true).to_owned());
            }
            let q = qualified(*col);
            let now = b.now();
            format!("({q} IS NULL OR {q} <= {now})")
        }
        Cond::LiveAt(col) => {
            if col.kind() != Kind::Time {
                return Ok(b.truth(false).to_owned());
            }
            let q = qualified(*col);
            let now = b.now();
            format!("({q} IS NOT NULL AND {q} > {now})")
        }
        Cond::OlderThan(col, ms) => {
            if col.kind() != Kind::Time {
                return Ok(b.truth(false).to_owned());
            }
            // now - col > ms  <=>  col < now - ms
            let shift = ms.checked_neg().ok_or_else(|| invalid("older-than offset out of range"))?;
            let bound = b.now_plus(shift)?;
            format!("{} < {bound}", qualified(*col))
        }
        Cond::StartsWith(col, prefix) => match col.kind() {
            Kind::Text | Kind::Label | Kind::Uuid => {
                let q = qualified(*col);
                if b.pg() {
                    let p = b.text(prefix);
                    let q = if col.kind() == Kind::Uuid { format!("{q}::text") } else { q };
                    format!("starts_with({q}, {p})")
                } else {
                    let p = b.text(prefix);
                    format!("substr({q}, 1, length({p})) = {p}")
                }
            }
            _ => b.truth(false).to_owned(),
        },
        Cond::And(cs) if cs.is_empty() => b.truth(true).to_owned(),
        Cond::Or(cs) if cs.is_empty() => b.truth(false).to_owned(),
        Cond::And(cs) | Cond::Or(cs) => {
            let op = if matches!(c, Cond::And(_)) { " AND " } else { " OR " };
            let parts = cs.iter().map(|c| cond(b, c)).collect::<Result<Vec<_>, _>>()?;
            format!("({})", parts.join(op))
        }
        Cond::Not(inner) => {
            let inner = cond(b, inner)?;
            b.not(&inner)
        }
        Cond::RunHeldBy { owner, lease_expires_at, epoch } => {
            let (col, kind) = C::run_ref();
            let join = if b.pg() && kind != Kind::Uuid {
                format!("hr.id::text = {}.{col}", C::TABLE)
            } else {
                format!("hr.id = {}.{col}", C::TABLE)
            };
            let owner = b.text(owner);
            let expiry = b.time(*lease_expires_at);
            let held_expiry =
                if b.pg() { "date_trunc('milliseconds', hr.lease_expires_at)" } else { "hr.lease_expires_at" };
            let now = b.now();
            let epoch = match epoch {
                Some(e) => format!(" AND hr.fencing_epoch = {}", b.int(*e)),
                None => String::new(),
            };
            format!(
                "EXISTS (SELECT 1 FROM agent_runs hr WHERE {join} AND hr.status IN ('leased', 'running') \
                 AND hr.lease_owner = {owner} AND {held_expiry} = {expiry} AND hr.lease_expires_at > {now}{epoch})"
            )
        }
        Cond::OwnerInstanceDead { ttl_ms } => match C::owner_ref() {
            None => b.truth(false).to_owned(),
            Some(owner) => {
                let shift = ttl_ms.checked_neg().ok_or_else(|| invalid("liveness ttl out of range"))?;
                let bound = b.now_plus(shift)?;
                format!(
                    "EXISTS (SELECT 1 FROM agent_instances di WHERE di.instance_id = {}.{owner} \
                     AND (di.status = 'dead' OR di.last_heartbeat < {bound}))",
                    C::TABLE
                )
            }
        },
    })
}

/// Renders an assigned value for a column of kind `target`, evaluated on the row before the
/// write (SQL `UPDATE` semantics).
fn expr<C: Column>(b: &mut Builder, e: &Expr<C>, target: Kind, what: &str) -> Result<String, HeartError> {
    Ok(match e {
        Expr::Val(Val::Null) if b.pg() => format!("NULL::{}", target.pg_type()),
        Expr::Val(Val::Null) => "NULL".to_owned(),
        Expr::Val(v) => {
            if !target.accepts(v) {
                return Err(invalid(format!("{what}: cannot assign {v:?}")));
            }
            b.value(target, v).ok_or_else(|| invalid(format!("{what}: {v:?} is not a UUID")))?
        }
        Expr::Now | Expr::NowPlus(_) if target != Kind::Time => {
            return Err(invalid(format!("{what}: a timestamp assigned to a non-timestamp column")));
        }
        Expr::Now => b.now(),
        Expr::NowPlus(ms) => b.now_plus(*ms)?,
        Expr::Add(col, n) => {
            if target != Kind::Int || col.kind() != Kind::Int {
                return Err(invalid(format!("{what}: arithmetic on a non-integer column")));
            }
            let n = b.int(*n);
            format!("({} + {n})", qualified(*col))
        }
        Expr::Case(c, then, otherwise) => {
            let c = cond(b, c)?;
            let then = expr(b, then, target, what)?;
            let otherwise = expr(b, otherwise, target, what)?;
            format!("CASE WHEN {c} THEN {then} ELSE {otherwise} END")
        }
    })
}

/// The `SET` list. A column assigned twice keeps its last assignment (as the evaluator
/// applies them in order); no assignment at all is a no-op write of one column.
fn set_list<C: Column>(b: &mut Builder, set: &[Assign<C>]) -> Result<String, HeartError> {
    let mut parts = Vec::new();
    for (i, (col, e)) in set.iter().enumerate() {
        if set[i + 1..].iter().any(|(later, _)| later == col) {
            continue;
        }
        if col.immutable() {
            return Err(invalid(format!("{}.{} is immutable", C::TABLE, col.name())));
        }
        let value = expr(b, e, col.kind(), col.name())?;
        parts.push(format!("{} = {value}", col.name()));
    }
    if parts.is_empty() {
        parts.push(format!("{0} = {1}.{0}", C::NOOP, C::TABLE));
    }
    Ok(parts.join(", "))
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
        Dialect::Postgres => Ok(vec![render_pg(req)?]),
        Dialect::Sqlite => {
            let mut out = vec![Statement { sql: SQLITE_CLOCK.to_owned(), params: Vec::new() }];
            out.extend(render_sqlite(req)?);
            Ok(out)
        }
    }
}

fn pg_now_col() -> String {
    format!("{} AS now", pg_iso("clk.now"))
}

fn render_pg(req: &StoreRequest) -> Result<Statement, HeartError> {
    let d = Dialect::Postgres;
    let mut b = Builder::new(d);
    let now = pg_now_col();
    let runs = |rel: &str, prefix: &str| select_list(d, &RUN_COLUMNS, rel, prefix);
    let intents = |rel: &str| select_list(d, &INTENT_COLUMNS, rel, "");
    let instances = |rel: &str| select_list(d, &INSTANCE_COLUMNS, rel, "");
    let sql = match req {
        StoreRequest::Now => format!("{PG_CLOCK} SELECT {now} FROM clk"),
        StoreRequest::ReadRun { run_id } => {
            let on = b.uuid_eq("agent_runs.id", run_id);
            format!("{PG_CLOCK} SELECT {now}, {} FROM clk LEFT JOIN agent_runs ON {on}", runs("agent_runs", ""))
        }
        StoreRequest::UpdateRun { run_id, when, set, want_before: false } => {
            let id = b.uuid_eq("agent_runs.id", run_id);
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            format!(
                "{PG_CLOCK}, upd AS (UPDATE agent_runs SET {set} FROM clk WHERE {id} AND {when} RETURNING agent_runs.*) \
                 SELECT {now}, {} FROM clk LEFT JOIN upd ON TRUE",
                runs("upd", "")
            )
        }
        StoreRequest::UpdateRun { run_id, when, set, want_before: true } => {
            // The row before the write, consistent with what the UPDATE saw, under READ
            // COMMITTED: `prev` locks the row (FOR UPDATE) and returns its newest committed
            // version, waiting for any concurrent writer first. The UPDATE joins `prev`, so it
            // cannot write before `prev` has locked the row; if its own snapshot holds an older
            // version, PostgreSQL re-checks the WHERE clause and recomputes the SET list on the
            // newest version (EvalPlanQual), which is the one `prev` returned, and which nobody
            // can change while we hold the lock. So the condition and the assignments see
            // exactly the row reported as `before`.
            let id = b.uuid_eq("agent_runs.id", run_id);
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            format!(
                "{PG_CLOCK}, prev AS MATERIALIZED (SELECT agent_runs.* FROM agent_runs WHERE {id} FOR UPDATE), \
                 upd AS (UPDATE agent_runs SET {set} FROM clk, prev WHERE agent_runs.id = prev.id AND {when} \
                 RETURNING agent_runs.*) \
                 SELECT {now}, {}, {} FROM clk LEFT JOIN prev ON TRUE LEFT JOIN upd ON TRUE",
                runs("prev", "b_"),
                runs("upd", "")
            )
        }
        StoreRequest::ScanRuns { when, order: RunOrder::ExpiresAt, limit }
            if expired_rest(when, RunCol::LeaseExpiresAt).is_some() =>
        {
            let rest = expired_rest(when, RunCol::LeaseExpiresAt).unwrap_or_default();
            let order = |rel: &str| format!("{rel}.lease_expires_at NULLS FIRST, {rel}.id");
            let s = pg_expired_scan(&mut b, &rest, "agent_runs", "lease_expires_at", &order, *limit)?;
            format!(
                "{PG_CLOCK}, {s} SELECT {now}, {} FROM clk LEFT JOIN s ON TRUE ORDER BY {}",
                runs("s", ""),
                order("s")
            )
        }
        StoreRequest::ScanRuns { when, order, limit } => {
            let when = cond(&mut b, when)?;
            let limit = b.int(i64::from(*limit));
            let order = |rel: &str| match order {
                RunOrder::ExpiresAt => format!("{rel}.lease_expires_at NULLS FIRST, {rel}.id"),
                RunOrder::UpdatedAtDesc => format!("{rel}.updated_at DESC, {rel}.id"),
            };
            format!(
                "{PG_CLOCK}, s AS (SELECT agent_runs.* FROM agent_runs, clk WHERE {when} ORDER BY {} LIMIT {limit}) \
                 SELECT {now}, {} FROM clk LEFT JOIN s ON TRUE ORDER BY {}",
                order("agent_runs"),
                runs("s", ""),
                order("s")
            )
        }
        StoreRequest::EnsureRun(new) => pg_ensure_run(&mut b, new),
        StoreRequest::ClaimIntent(new) => pg_claim_intent(&mut b, new)?,
        StoreRequest::UpdateIntent { run_id, effect_key, when, set, log } => {
            let Some(rid) = b.uuid(run_id) else {
                // No intent can have this run id: a write that misses.
                return Ok(b.finish(format!(
                    "{PG_CLOCK} SELECT {now}, {} FROM clk LEFT JOIN effect_intents ON FALSE",
                    intents("effect_intents")
                )));
            };
            let key = b.text(effect_key);
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            let log = match log {
                None => String::new(),
                Some(entry) => {
                    let lrid = b.uuid(&entry.run_id).ok_or_else(|| invalid("log entry run_id is not a UUID"))?;
                    let lkey = b.text(&entry.effect_key);
                    let attempt = b.int(entry.attempt);
                    let outcome = b.text(&entry.outcome);
                    let detail = entry.detail.as_ref().map_or_else(|| "NULL::jsonb".to_owned(), |v| b.json(v));
                    format!(
                        ", logged AS (INSERT INTO outbox_dispatch_log (run_id, effect_key, attempt, outcome, at, detail) \
                         SELECT {lrid}, {lkey}, {attempt}, {outcome}, clk.now, {detail} FROM clk \
                         WHERE EXISTS (SELECT 1 FROM upd))"
                    )
                }
            };
            format!(
                "{PG_CLOCK}, upd AS (UPDATE effect_intents SET {set} FROM clk WHERE effect_intents.run_id = {rid} \
                 AND effect_intents.effect_key = {key} AND {when} RETURNING effect_intents.*){log} \
                 SELECT {now}, {} FROM clk LEFT JOIN upd ON TRUE",
                intents("upd")
            )
        }
        StoreRequest::ScanIntents { when, limit } if expired_rest(when, IntentCol::FenceExpiresAt).is_some() => {
            let rest = expired_rest(when, IntentCol::FenceExpiresAt).unwrap_or_default();
            let s = pg_expired_scan(&mut b, &rest, "effect_intents", "fence_expires_at", &intent_order, *limit)?;
            format!(
                "{PG_CLOCK}, {s} SELECT {now}, {} FROM clk LEFT JOIN s ON TRUE ORDER BY {}",
                intents("s"),
                intent_order("s")
            )
        }
        StoreRequest::ScanIntents { when, limit } => {
            let when = cond(&mut b, when)?;
            let limit = b.int(i64::from(*limit));
            let order = intent_order;
            format!(
                "{PG_CLOCK}, s AS (SELECT effect_intents.* FROM effect_intents, clk WHERE {when} ORDER BY {} LIMIT {limit}) \
                 SELECT {now}, {} FROM clk LEFT JOIN s ON TRUE ORDER BY {}",
                order("effect_intents"),
                intents("s"),
                order("s")
            )
        }
        StoreRequest::ReadLog { run_id, effect_key } => {
            let id = b.uuid_eq("outbox_dispatch_log.run_id", run_id);
            let key = b.text(effect_key);
            format!(
                "{PG_CLOCK} SELECT {now}, {} FROM clk LEFT JOIN outbox_dispatch_log ON {id} \
                 AND outbox_dispatch_log.effect_key = {key} \
                 ORDER BY outbox_dispatch_log.at, outbox_dispatch_log.seq",
                select_list(d, &LOG_COLUMNS, "outbox_dispatch_log", "")
            )
        }
        StoreRequest::UpsertInstance { instance_id, hostname, pid, metadata } => {
            let id = b.text(instance_id);
            let host = hostname.as_deref().map_or_else(|| "NULL::text".to_owned(), |h| b.text(h));
            let pid = pid.map_or_else(|| "NULL::bigint".to_owned(), |p| b.int(p));
            let meta = metadata.as_ref().map_or_else(|| "NULL::jsonb".to_owned(), |m| b.json(m));
            format!(
                "{PG_CLOCK}, ups AS (INSERT INTO agent_instances \
                 (instance_id, hostname, pid, status, started_at, last_heartbeat, metadata) \
                 SELECT {id}, {host}, {pid}, 'alive', clk.now, clk.now, {meta} FROM clk \
                 ON CONFLICT (instance_id) DO UPDATE SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, \
                 status = 'alive', started_at = EXCLUDED.started_at, last_heartbeat = EXCLUDED.last_heartbeat, \
                 metadata = EXCLUDED.metadata RETURNING agent_instances.*) \
                 SELECT {now}, {} FROM clk LEFT JOIN ups ON TRUE",
                instances("ups")
            )
        }
        StoreRequest::UpdateInstances { when, set } => {
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            format!(
                "{PG_CLOCK}, upd AS (UPDATE agent_instances SET {set} FROM clk WHERE {when} RETURNING agent_instances.*) \
                 SELECT {now}, {} FROM clk LEFT JOIN upd ON TRUE ORDER BY upd.instance_id COLLATE \"C\"",
                instances("upd")
            )
        }
        StoreRequest::ScanInstances { when } => {
            let when = cond(&mut b, when)?;
            format!(
                "{PG_CLOCK}, s AS (SELECT agent_instances.* FROM agent_instances, clk WHERE {when}) \
                 SELECT {now}, {} FROM clk LEFT JOIN s ON TRUE ORDER BY s.instance_id COLLATE \"C\"",
                instances("s")
            )
        }
    };
    Ok(b.finish(sql))
}

/// The order of an intent scan over relation `rel` (fence expiry, nulls first; then key).
fn intent_order(rel: &str) -> String {
    format!("{rel}.fence_expires_at NULLS FIRST, {rel}.run_id, {rel}.effect_key COLLATE \"C\"")
}

/// For a scan ordered by `col` (nulls first) whose condition is `ExpiredAt(col)` or a
/// conjunction containing it: the other conjuncts (empty: none).
fn expired_rest<C: Column>(when: &Cond<C>, col: C) -> Option<Vec<&Cond<C>>> {
    let is_expired = |c: &Cond<C>| matches!(c, Cond::ExpiredAt(x) if *x == col);
    match when {
        Cond::ExpiredAt(_) if is_expired(when) => Some(Vec::new()),
        Cond::And(cs) if cs.iter().any(is_expired) => Some(cs.iter().filter(|c| !is_expired(c)).collect()),
        _ => None,
    }
}

/// The CTE `s AS (...)` of an expiry-ordered scan whose condition is `rest AND
/// ExpiredAt(table.col)` (see [`expired_rest`]), for PostgreSQL.
///
/// `col IS NULL OR col <= now` cannot bound an index scan: the planner applies it as a
/// filter, so a scan that finds fewer than `limit` rows walks every live entry of the index
/// (every live lease, for the sweep). It is rendered as the two ranges of the index order
/// instead, each scanned on its own and limited, then merged in the same order:
/// `(... AND col IS NULL ORDER BY .. LIMIT n) UNION ALL (... AND col <= (SELECT now FROM clk)
/// ORDER BY .. LIMIT n)`, ordered and limited again. The ranges are disjoint and both keep the
/// scan's order, so the result is the same rows in the same order (null expiries first, then
/// ascending expiry, then the tie-breakers). The clock is a scalar subquery in the bound, so the
/// planner can use it as an index condition (`Index Cond: col <= $0`).
fn pg_expired_scan<C: Column>(
    b: &mut Builder,
    rest: &[&Cond<C>],
    table: &str,
    col: &str,
    order: &dyn Fn(&str) -> String,
    limit: u32,
) -> Result<String, HeartError> {
    let mut parts = vec![];
    for c in rest {
        parts.push(cond(b, c)?);
    }
    let limit = b.int(i64::from(limit));
    let part = |bound: &str| {
        let when = parts.iter().map(String::as_str).chain([bound]).collect::<Vec<_>>().join(" AND ");
        format!("(SELECT {table}.* FROM {table}, clk WHERE {when} ORDER BY {} LIMIT {limit})", order(table))
    };
    let nulls = part(&format!("{table}.{col} IS NULL"));
    let expired = part(&format!("{table}.{col} <= (SELECT c.now FROM clk c)"));
    Ok(format!("s AS (SELECT u.* FROM ({nulls} UNION ALL {expired}) u ORDER BY {} LIMIT {limit})", order("u")))
}

/// Find-or-create, race-safe in one statement, with documented behaviour only:
/// `found` reads the key in the statement's snapshot (the common case: no write at all);
/// `ins` inserts when it was not found; if a concurrent transaction inserted the key after
/// our snapshot, `ins` waits for it and does nothing, and `raced` then fetches (and locks)
/// the committed row with a no-op `ON CONFLICT DO UPDATE`, which sees the newest version.
/// `created` is true only for the row `ins` inserted. The no-op update changes no column,
/// so the epoch trigger leaves it alone.
fn pg_ensure_run(b: &mut Builder, new: &NewRun) -> String {
    let key = b.text(&new.idempotency_key);
    let objective = b.text(&new.objective);
    let created_by = b.text(&new.created_by);
    let insert = format!(
        "INSERT INTO agent_runs (id, assignment_id, objective, status, retries, approval_state, visibility, \
         idempotency_key, created_by, created_at, updated_at) \
         SELECT gen_random_uuid(), gen_random_uuid(), {objective}, 'ready', 0, 'auto', 'team', {key}, {created_by}, \
         clk.now, clk.now FROM clk"
    );
    format!(
        "{PG_CLOCK}, found AS (SELECT agent_runs.* FROM agent_runs WHERE agent_runs.idempotency_key = {key}), \
         ins AS ({insert} WHERE NOT EXISTS (SELECT 1 FROM found) \
         ON CONFLICT (idempotency_key) DO NOTHING RETURNING agent_runs.*), \
         raced AS ({insert} WHERE NOT EXISTS (SELECT 1 FROM found) AND NOT EXISTS (SELECT 1 FROM ins) \
         ON CONFLICT (idempotency_key) DO UPDATE SET updated_at = agent_runs.updated_at RETURNING agent_runs.*), \
         cur AS (SELECT found.*, FALSE AS created FROM found UNION ALL SELECT ins.*, TRUE FROM ins \
         UNION ALL SELECT raced.*, FALSE FROM raced) \
         SELECT {}, cur.created, {} FROM clk LEFT JOIN cur ON TRUE",
        pg_now_col(),
        select_list(Dialect::Postgres, &RUN_COLUMNS, "cur", "")
    )
}

/// Claim-once in one statement, with the same `found` / `ins` / `raced` pattern as
/// [`pg_ensure_run`], and the dispatch-log entry in the same statement: `claimed` with
/// `{"channel": …}` when `ins` inserted the intent, else `deduped` with no detail.
fn pg_claim_intent(b: &mut Builder, new: &NewIntent) -> Result<String, HeartError> {
    let rid = b
        .uuid(&new.run_id)
        .ok_or_else(|| invalid(format!("run_id {:?} is not a UUID (effect_intents.run_id is uuid)", new.run_id)))?;
    let key = b.text(&new.effect_key);
    let channel = b.text(&new.channel);
    let digest = b.text(&new.payload_digest);
    let insert = format!(
        "INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, attempts, created_at) \
         SELECT {rid}, {key}, 'intent', {channel}, {digest}, 0, clk.now FROM clk"
    );
    Ok(format!(
        "{PG_CLOCK}, found AS (SELECT effect_intents.* FROM effect_intents \
         WHERE effect_intents.run_id = {rid} AND effect_intents.effect_key = {key}), \
         ins AS ({insert} WHERE NOT EXISTS (SELECT 1 FROM found) \
         ON CONFLICT (run_id, effect_key) DO NOTHING RETURNING effect_intents.*), \
         raced AS ({insert} WHERE NOT EXISTS (SELECT 1 FROM found) AND NOT EXISTS (SELECT 1 FROM ins) \
         ON CONFLICT (run_id, effect_key) DO UPDATE SET attempts = effect_intents.attempts RETURNING effect_intents.*), \
         logged AS (INSERT INTO outbox_dispatch_log (run_id, effect_key, attempt, outcome, at, detail) \
         SELECT {rid}, {key}, 0, CASE WHEN EXISTS (SELECT 1 FROM ins) THEN 'claimed' ELSE 'deduped' END, clk.now, \
         CASE WHEN EXISTS (SELECT 1 FROM ins) THEN jsonb_build_object('channel', {channel}) END FROM clk), \
         cur AS (SELECT found.*, FALSE AS claimed FROM found UNION ALL SELECT ins.*, TRUE FROM ins \
         UNION ALL SELECT raced.*, FALSE FROM raced) \
         SELECT {}, cur.claimed, {} FROM clk LEFT JOIN cur ON TRUE",
        pg_now_col(),
        select_list(Dialect::Postgres, &INTENT_COLUMNS, "cur", "")
    ))
}

/// The SQLite statements after the clock read.
fn render_sqlite(req: &StoreRequest) -> Result<Vec<Statement>, HeartError> {
    let d = Dialect::Sqlite;
    let runs = select_list(d, &RUN_COLUMNS, "", "");
    let intents = select_list(d, &INTENT_COLUMNS, "", "");
    let instances = select_list(d, &INSTANCE_COLUMNS, "", "");
    let one = |b: Builder, sql: String| -> Result<Vec<Statement>, HeartError> { Ok(vec![b.finish(sql)]) };
    let mut b = Builder::new(d);
    match req {
        StoreRequest::Now => Ok(Vec::new()),
        StoreRequest::ReadRun { run_id } => {
            let id = b.text(run_id);
            one(b, format!("SELECT {runs} FROM agent_runs WHERE id = {id}"))
        }
        StoreRequest::UpdateRun { run_id, when, set, want_before } => {
            let mut out = Vec::new();
            if *want_before {
                let mut pb = Builder::new(d);
                let id = pb.text(run_id);
                out.push(pb.finish(format!("SELECT {runs} FROM agent_runs WHERE id = {id}")));
            }
            let id = b.text(run_id);
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            out.push(
                b.finish(format!("UPDATE agent_runs SET {set} WHERE agent_runs.id = {id} AND {when} RETURNING {runs}")),
            );
            Ok(out)
        }
        StoreRequest::ScanRuns { when, order, limit } => {
            let when = cond(&mut b, when)?;
            let limit = b.int(i64::from(*limit));
            let order = match order {
                RunOrder::ExpiresAt => "lease_expires_at, id",
                RunOrder::UpdatedAtDesc => "updated_at DESC, id",
            };
            one(b, format!("SELECT {runs} FROM agent_runs WHERE {when} ORDER BY {order} LIMIT {limit}"))
        }
        StoreRequest::EnsureRun(new) => {
            let key = b.text(&new.idempotency_key);
            let objective = b.text(&new.objective);
            let created_by = b.text(&new.created_by);
            let now = b.now();
            let insert = b.finish(format!(
                "INSERT INTO agent_runs (id, assignment_id, objective, required_capabilities, status, retries, \
                 approval_state, visibility, idempotency_key, created_by, created_at, updated_at, fencing_epoch) \
                 VALUES ({SQLITE_UUID}, {SQLITE_UUID}, {objective}, '[]', 'ready', 0, 'auto', 'team', {key}, {created_by}, \
                 {now}, {now}, 0) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id"
            ));
            let mut sb = Builder::new(d);
            let key = sb.text(&new.idempotency_key);
            let select = sb.finish(format!("SELECT {runs} FROM agent_runs WHERE idempotency_key = {key}"));
            Ok(vec![insert, select])
        }
        StoreRequest::ClaimIntent(new) => {
            // 1. the log entry, decided on the state before the insert (the write lock is
            //    held, so the insert below sees the same state);
            let rid = b.text(&new.run_id);
            let key = b.text(&new.effect_key);
            let detail = b.text(&serde_json::json!({ "channel": new.channel }).to_string());
            let now = b.now();
            let exists = format!("EXISTS (SELECT 1 FROM effect_intents WHERE run_id = {rid} AND effect_key = {key})");
            let log = b.finish(format!(
                "INSERT INTO outbox_dispatch_log (id, run_id, effect_key, attempt, outcome, at, detail) \
                 SELECT {SQLITE_UUID}, {rid}, {key}, 0, CASE WHEN {exists} THEN 'deduped' ELSE 'claimed' END, {now}, \
                 CASE WHEN {exists} THEN NULL ELSE {detail} END"
            ));
            // 2. the claim (returns a row only when it inserted);
            let mut ib = Builder::new(d);
            let rid = ib.text(&new.run_id);
            let key = ib.text(&new.effect_key);
            let channel = ib.text(&new.channel);
            let digest = ib.text(&new.payload_digest);
            let now = ib.now();
            let insert = ib.finish(format!(
                "INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, attempts, created_at) \
                 VALUES ({rid}, {key}, 'intent', {channel}, {digest}, 0, {now}) \
                 ON CONFLICT (run_id, effect_key) DO NOTHING RETURNING run_id"
            ));
            // 3. the intent as it now is.
            let mut sb = Builder::new(d);
            let rid = sb.text(&new.run_id);
            let key = sb.text(&new.effect_key);
            let select =
                sb.finish(format!("SELECT {intents} FROM effect_intents WHERE run_id = {rid} AND effect_key = {key}"));
            Ok(vec![log, insert, select])
        }
        StoreRequest::UpdateIntent { run_id, effect_key, when, set, log } => {
            let mut out = Vec::new();
            if let Some(entry) = log {
                // The log entry first, under the same condition on the same (locked) state
                // the UPDATE below evaluates: it is appended exactly when the UPDATE hits.
                let mut lb = Builder::new(d);
                let lrid = lb.text(&entry.run_id);
                let lkey = lb.text(&entry.effect_key);
                let attempt = lb.int(entry.attempt);
                let outcome = lb.text(&entry.outcome);
                let detail = entry.detail.as_ref().map_or_else(|| "NULL".to_owned(), |v| lb.json(v));
                let now = lb.now();
                let rid = lb.text(run_id);
                let key = lb.text(effect_key);
                let when = cond(&mut lb, when)?;
                out.push(lb.finish(format!(
                    "INSERT INTO outbox_dispatch_log (id, run_id, effect_key, attempt, outcome, at, detail) \
                     SELECT {SQLITE_UUID}, {lrid}, {lkey}, {attempt}, {outcome}, {now}, {detail} FROM effect_intents \
                     WHERE effect_intents.run_id = {rid} AND effect_intents.effect_key = {key} AND {when}"
                )));
            }
            let rid = b.text(run_id);
            let key = b.text(effect_key);
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            out.push(b.finish(format!(
                "UPDATE effect_intents SET {set} WHERE effect_intents.run_id = {rid} \
                 AND effect_intents.effect_key = {key} AND {when} RETURNING {intents}"
            )));
            Ok(out)
        }
        StoreRequest::ScanIntents { when, limit } => {
            let when = cond(&mut b, when)?;
            let limit = b.int(i64::from(*limit));
            one(
                b,
                format!(
                    "SELECT {intents} FROM effect_intents WHERE {when} \
                     ORDER BY fence_expires_at, run_id, effect_key LIMIT {limit}"
                ),
            )
        }
        StoreRequest::ReadLog { run_id, effect_key } => {
            let rid = b.text(run_id);
            let key = b.text(effect_key);
            one(
                b,
                format!(
                    "SELECT {} FROM outbox_dispatch_log WHERE run_id = {rid} AND effect_key = {key} ORDER BY at, rowid",
                    select_list(d, &LOG_COLUMNS, "", "")
                ),
            )
        }
        StoreRequest::UpsertInstance { instance_id, hostname, pid, metadata } => {
            let id = b.text(instance_id);
            let host = hostname.as_deref().map_or_else(|| "NULL".to_owned(), |h| b.text(h));
            let pid = pid.map_or_else(|| "NULL".to_owned(), |p| b.int(p));
            let meta = metadata.as_ref().map_or_else(|| "NULL".to_owned(), |m| b.json(m));
            let now = b.now();
            one(
                b,
                format!(
                    "INSERT INTO agent_instances (instance_id, hostname, pid, status, started_at, last_heartbeat, metadata) \
                     VALUES ({id}, {host}, {pid}, 'alive', {now}, {now}, {meta}) \
                     ON CONFLICT (instance_id) DO UPDATE SET hostname = excluded.hostname, pid = excluded.pid, \
                     status = 'alive', started_at = excluded.started_at, last_heartbeat = excluded.last_heartbeat, \
                     metadata = excluded.metadata RETURNING {instances}"
                ),
            )
        }
        StoreRequest::UpdateInstances { when, set } => {
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            one(b, format!("UPDATE agent_instances SET {set} WHERE {when} RETURNING {instances}"))
        }
        StoreRequest::ScanInstances { when } => {
            let when = cond(&mut b, when)?;
            one(b, format!("SELECT {instances} FROM agent_instances WHERE {when} ORDER BY instance_id"))
        }
    }
}

fn text_param(s: &str) -> SqlParam {
    SqlParam::Text(s.to_owned())
}

fn time_param(t: Option<Timestamp>) -> Option<SqlParam> {
    t.map(|t| SqlParam::Text(t.to_iso()))
}

fn json_param(v: Option<&Value>) -> Option<SqlParam> {
    v.map(|v| SqlParam::Text(v.to_string()))
}

const PG_TIME: &str = "::text::timestamptz";

/// The insert of one run exactly as given: every column, timestamps and epoch included
/// (in PostgreSQL `id` and `assignment_id` must be UUID text). Fixtures are seeded this
/// way, and hosts use it to create rows the lease operations do not create.
pub fn seed_run(dialect: Dialect, r: &RunRow) -> Statement {
    let mut b = Builder::new(dialect);
    let caps = SqlParam::Text(Value::from(r.required_capabilities.clone()).to_string());
    let values = [
        b.cast(text_param(&r.id), "::text::uuid"),
        b.opt(r.task_id.as_deref().map(text_param), "::text"),
        b.cast(text_param(&r.assignment_id), "::text::uuid"),
        b.text(&r.objective),
        if b.pg() {
            format!("ARRAY(SELECT json_array_elements_text({}))", b.cast(caps, "::text::json"))
        } else {
            b.push(caps)
        },
        b.text(r.status.as_str()),
        b.opt(r.assigned_agent.as_deref().map(text_param), "::text"),
        b.opt(r.lease_owner.as_deref().map(text_param), "::text"),
        b.opt(time_param(r.lease_expires_at), PG_TIME),
        b.int(r.retries),
        b.opt(json_param(r.budget.as_ref()), "::text::jsonb"),
        b.text(&r.approval_state),
        b.text(&r.visibility),
        b.text(&r.idempotency_key),
        b.text(&r.created_by),
        b.time(r.created_at),
        b.time(r.updated_at),
        b.int(r.fencing_epoch),
    ];
    b.finish(format!(
        "INSERT INTO agent_runs (id, task_id, assignment_id, objective, required_capabilities, status, \
         assigned_agent, lease_owner, lease_expires_at, retries, budget, approval_state, visibility, \
         idempotency_key, created_by, created_at, updated_at, fencing_epoch) VALUES ({})",
        values.join(", ")
    ))
}

/// The insert of one instance exactly as given.
pub fn seed_instance(dialect: Dialect, i: &InstanceRow) -> Statement {
    let mut b = Builder::new(dialect);
    let values = [
        b.text(&i.instance_id),
        b.opt(i.hostname.as_deref().map(text_param), "::text"),
        b.opt(i.pid.map(SqlParam::Int), "::bigint"),
        b.text(i.status.as_str()),
        b.time(i.started_at),
        b.time(i.last_heartbeat),
        b.opt(json_param(i.metadata.as_ref()), "::text::jsonb"),
    ];
    b.finish(format!(
        "INSERT INTO agent_instances (instance_id, hostname, pid, status, started_at, last_heartbeat, metadata) \
         VALUES ({})",
        values.join(", ")
    ))
}

/// The insert of one effect intent exactly as given (in PostgreSQL `run_id` must be UUID
/// text).
pub fn seed_intent(dialect: Dialect, i: &IntentRow) -> Statement {
    let mut b = Builder::new(dialect);
    let values = [
        b.cast(text_param(&i.run_id), "::text::uuid"),
        b.text(&i.effect_key),
        b.text(i.state.as_str()),
        b.text(&i.channel),
        b.text(&i.payload_digest),
        b.opt(i.fence_owner.as_deref().map(text_param), "::text"),
        b.opt(time_param(i.fence_expires_at), PG_TIME),
        b.opt(i.fence_epoch.map(SqlParam::Int), "::bigint"),
        b.opt(json_param(i.external_ref.as_ref()), "::text::jsonb"),
        b.int(i.attempts),
        b.opt(i.last_error.as_deref().map(text_param), "::text"),
        b.time(i.created_at),
        b.opt(time_param(i.committed_at), PG_TIME),
    ];
    b.finish(format!(
        "INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, fence_owner, \
         fence_expires_at, fence_epoch, external_ref, attempts, last_error, created_at, committed_at) VALUES ({})",
        values.join(", ")
    ))
}

/// Renders the insert of one receipt into `heart_receipts` (the table sink). `receipt` is
/// the receipt's JSON object (`schemaVersion`, `event`, `runId`, `owner`, `leaseExpiresAt`,
/// `effectKey`, `at`, `digest`); it is stored as is in the `receipt` column too.
pub fn receipt_insert(dialect: Dialect, receipt: &Value) -> Result<Statement, HeartError> {
    let obj = receipt.as_object().ok_or_else(|| invalid("a receipt must be a JSON object"))?;
    let field = |name: &str, nullable: bool| -> Result<Option<String>, HeartError> {
        match obj.get(name) {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Null) | None if nullable => Ok(None),
            _ => Err(invalid(format!("receipt field {name} must be a string"))),
        }
    };
    let mut b = Builder::new(dialect);
    let mut values = Vec::new();
    for (name, nullable) in [
        ("schemaVersion", false),
        ("event", false),
        ("runId", false),
        ("owner", false),
        ("leaseExpiresAt", true),
        ("effectKey", true),
        ("at", false),
        ("digest", false),
    ] {
        values.push(match field(name, nullable)? {
            Some(s) => b.text(&s),
            None if b.pg() => "NULL::text".to_owned(),
            None => "NULL".to_owned(),
        });
    }
    values.push(b.json(receipt));
    Ok(b.finish(format!(
        "INSERT INTO heart_receipts (schema_version, event, run_id, owner, lease_expires_at, effect_key, at, digest, receipt) \
         VALUES ({})",
        values.join(", ")
    )))
}

// ------------------------------------------------------------------------------------------
// Decoding
// ------------------------------------------------------------------------------------------

/// How many statements [`render`] returns for `req` (and so how many row sets [`decode`]
/// expects).
pub fn statement_count(req: &StoreRequest, dialect: Dialect) -> usize {
    match dialect {
        Dialect::Postgres => 1,
        Dialect::Sqlite => {
            1 + match req {
                StoreRequest::Now => 0,
                StoreRequest::UpdateRun { want_before: true, .. } => 2,
                StoreRequest::UpdateIntent { log: Some(_), .. } => 2,
                StoreRequest::EnsureRun(_) => 2,
                StoreRequest::ClaimIntent(_) => 3,
                _ => 1,
            }
        }
    }
}

/// A view of one row, reading columns named `prefix` + name.
struct Cells<'a> {
    row: &'a SqlRow,
    prefix: &'a str,
}

impl<'a> Cells<'a> {
    fn new(row: &'a SqlRow, prefix: &'a str) -> Cells<'a> {
        Cells { row, prefix }
    }

    fn get(&self, name: &str) -> Result<&'a SqlValue, HeartError> {
        self.row
            .iter()
            .find(|(n, _)| n.strip_prefix(self.prefix) == Some(name))
            .map(|(_, v)| v)
            .ok_or_else(|| protocol(format!("missing column {}{name}", self.prefix)))
    }

    fn is_null(&self, name: &str) -> Result<bool, HeartError> {
        Ok(matches!(self.get(name)?, SqlValue::Null))
    }

    fn opt_text(&self, name: &str) -> Result<Option<String>, HeartError> {
        match self.get(name)? {
            SqlValue::Null => Ok(None),
            SqlValue::Text(s) => Ok(Some(s.clone())),
            other => Err(protocol(format!("column {name}: expected text, got {other:?}"))),
        }
    }

    fn text(&self, name: &str) -> Result<String, HeartError> {
        self.opt_text(name)?.ok_or_else(|| protocol(format!("column {name} is null")))
    }

    fn opt_int(&self, name: &str) -> Result<Option<i64>, HeartError> {
        match self.get(name)? {
            SqlValue::Null => Ok(None),
            SqlValue::Int(i) => Ok(Some(*i)),
            // 2^63 as f64: every integral f64 below it in magnitude fits an i64.
            SqlValue::Real(f) if f.fract() == 0.0 && f.abs() < 9_223_372_036_854_775_808.0 => Ok(Some(*f as i64)),
            SqlValue::Text(s) => {
                s.trim().parse().map(Some).map_err(|_| protocol(format!("column {name}: {s:?} is not an integer")))
            }
            other => Err(protocol(format!("column {name}: expected an integer, got {other:?}"))),
        }
    }

    fn int(&self, name: &str) -> Result<i64, HeartError> {
        self.opt_int(name)?.ok_or_else(|| protocol(format!("column {name} is null")))
    }

    fn opt_time(&self, name: &str) -> Result<Option<Timestamp>, HeartError> {
        self.opt_text(name)?
            .map(|s| Timestamp::parse_iso(&s).map_err(|e| protocol(format!("column {name}: {e}"))))
            .transpose()
    }

    fn time(&self, name: &str) -> Result<Timestamp, HeartError> {
        self.opt_time(name)?.ok_or_else(|| protocol(format!("column {name} is null")))
    }

    fn opt_json(&self, name: &str) -> Result<Option<Value>, HeartError> {
        self.opt_text(name)?
            .map(|s| serde_json::from_str(&s).map_err(|e| protocol(format!("column {name}: bad JSON: {e}"))))
            .transpose()
    }

    fn strings(&self, name: &str) -> Result<Vec<String>, HeartError> {
        let text = self.text(name)?;
        serde_json::from_str(&text).map_err(|e| protocol(format!("column {name}: expected a JSON array of text: {e}")))
    }

    fn boolean(&self, name: &str) -> Result<bool, HeartError> {
        match self.get(name)? {
            SqlValue::Bool(b) => Ok(*b),
            SqlValue::Int(0) => Ok(false),
            SqlValue::Int(1) => Ok(true),
            SqlValue::Text(s) if matches!(s.as_str(), "t" | "true" | "1") => Ok(true),
            SqlValue::Text(s) if matches!(s.as_str(), "f" | "false" | "0") => Ok(false),
            other => Err(protocol(format!("column {name}: expected a boolean, got {other:?}"))),
        }
    }

    /// A run, or `None` when the row is the null side of an outer join.
    fn run(&self) -> Result<Option<RunRow>, HeartError> {
        if self.is_null("id")? {
            return Ok(None);
        }
        let status = self.text("status")?;
        Ok(Some(RunRow {
            id: self.text("id")?,
            task_id: self.opt_text("task_id")?,
            assignment_id: self.text("assignment_id")?,
            objective: self.text("objective")?,
            required_capabilities: self.strings("required_capabilities")?,
            status: RunStatus::parse(&status).map_err(|_| protocol(format!("unknown run status {status:?}")))?,
            assigned_agent: self.opt_text("assigned_agent")?,
            lease_owner: self.opt_text("lease_owner")?,
            lease_expires_at: self.opt_time("lease_expires_at")?,
            retries: self.int("retries")?,
            budget: self.opt_json("budget")?,
            approval_state: self.text("approval_state")?,
            visibility: self.text("visibility")?,
            idempotency_key: self.text("idempotency_key")?,
            created_by: self.text("created_by")?,
            created_at: self.time("created_at")?,
            updated_at: self.time("updated_at")?,
            fencing_epoch: self.int("fencing_epoch")?,
        }))
    }

    fn intent(&self) -> Result<Option<IntentRow>, HeartError> {
        if self.is_null("run_id")? {
            return Ok(None);
        }
        let state = self.text("state")?;
        let state = [IntentState::Intent, IntentState::Dispatched, IntentState::Committed, IntentState::Abandoned]
            .into_iter()
            .find(|s| s.as_str() == state)
            .ok_or_else(|| protocol(format!("unknown intent state {state:?}")))?;
        Ok(Some(IntentRow {
            run_id: self.text("run_id")?,
            effect_key: self.text("effect_key")?,
            state,
            channel: self.text("channel")?,
            payload_digest: self.text("payload_digest")?,
            fence_owner: self.opt_text("fence_owner")?,
            fence_expires_at: self.opt_time("fence_expires_at")?,
            fence_epoch: self.opt_int("fence_epoch")?,
            external_ref: self.opt_json("external_ref")?,
            attempts: self.int("attempts")?,
            last_error: self.opt_text("last_error")?,
            created_at: self.time("created_at")?,
            committed_at: self.opt_time("committed_at")?,
        }))
    }

    fn instance(&self) -> Result<Option<InstanceRow>, HeartError> {
        if self.is_null("instance_id")? {
            return Ok(None);
        }
        let status = self.text("status")?;
        let status = [InstanceStatus::Alive, InstanceStatus::Draining, InstanceStatus::Dead]
            .into_iter()
            .find(|s| s.as_str() == status)
            .ok_or_else(|| protocol(format!("unknown instance status {status:?}")))?;
        Ok(Some(InstanceRow {
            instance_id: self.text("instance_id")?,
            hostname: self.opt_text("hostname")?,
            pid: self.opt_int("pid")?,
            status,
            started_at: self.time("started_at")?,
            last_heartbeat: self.time("last_heartbeat")?,
            metadata: self.opt_json("metadata")?,
        }))
    }

    fn log_entry(&self) -> Result<Option<DispatchLogEntry>, HeartError> {
        if self.is_null("run_id")? {
            return Ok(None);
        }
        Ok(Some(DispatchLogEntry {
            run_id: self.text("run_id")?,
            effect_key: self.text("effect_key")?,
            attempt: self.int("attempt")?,
            outcome: self.text("outcome")?,
            at: Some(self.time("at")?),
            detail: self.opt_json("detail")?,
        }))
    }
}

fn at_most_one<'a>(rows: &'a [SqlRow], what: &str) -> Result<Option<&'a SqlRow>, HeartError> {
    match rows {
        [] => Ok(None),
        [row] => Ok(Some(row)),
        _ => Err(protocol(format!("{what}: expected at most one row, got {}", rows.len()))),
    }
}

fn exactly_one<'a>(rows: &'a [SqlRow], what: &str) -> Result<&'a SqlRow, HeartError> {
    at_most_one(rows, what)?.ok_or_else(|| protocol(format!("{what}: expected one row, got none")))
}

fn all<'a, T>(
    rows: &'a [SqlRow],
    f: impl Fn(&Cells<'a>) -> Result<Option<T>, HeartError>,
) -> Result<Vec<T>, HeartError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        if let Some(x) = f(&Cells::new(row, ""))? {
            out.push(x);
        }
    }
    Ok(out)
}

fn sorted_instances(mut instances: Vec<InstanceRow>) -> StoreReply {
    instances.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    StoreReply::Instances { instances }
}

/// Decodes the rows of the statements [`render`] returned for `req` (one row set per
/// statement, in order) into the store's answer. Malformed rows (a missing column, a value
/// of the wrong type, an unknown status, an unexpected number of rows) are `store-protocol`
/// errors.
pub fn decode(req: &StoreRequest, dialect: Dialect, results: Vec<Vec<SqlRow>>) -> Result<StoreAnswer, HeartError> {
    let expected = statement_count(req, dialect);
    if results.len() != expected {
        return Err(protocol(format!("expected {expected} row sets, got {}", results.len())));
    }
    let clock = results.first().and_then(|rows| rows.first()).ok_or_else(|| protocol("no row carries `now`"))?;
    let now = Cells::new(clock, "").time("now")?;
    let reply = match dialect {
        Dialect::Postgres => decode_pg(req, results.first().map_or(&[][..], Vec::as_slice))?,
        Dialect::Sqlite => decode_sqlite(req, &results)?,
    };
    Ok(StoreAnswer { now, reply })
}

fn decode_pg(req: &StoreRequest, rows: &[SqlRow]) -> Result<StoreReply, HeartError> {
    let single = |what: &str| exactly_one(rows, what).map(|r| Cells::new(r, ""));
    Ok(match req {
        StoreRequest::Now => {
            single("now")?;
            StoreReply::Now
        }
        StoreRequest::ReadRun { .. } => StoreReply::Run { run: single("read_run")?.run()? },
        StoreRequest::UpdateRun { want_before, .. } => {
            let row = exactly_one(rows, "update_run")?;
            let after = Cells::new(row, "").run()?;
            let before = if *want_before && after.is_some() {
                let before = Cells::new(row, "b_").run()?;
                if before.is_none() {
                    return Err(protocol("update_run: a hit without the row before it"));
                }
                before
            } else {
                None
            };
            StoreReply::RunWrite { before, after }
        }
        StoreRequest::ScanRuns { .. } => StoreReply::Runs { runs: all(rows, Cells::run)? },
        StoreRequest::EnsureRun(_) => {
            let cells = single("ensure_run")?;
            let run = cells.run()?.ok_or_else(|| protocol("ensure_run: no row"))?;
            StoreReply::Ensured { run, created: cells.boolean("created")? }
        }
        StoreRequest::ClaimIntent(_) => {
            let cells = single("claim_intent")?;
            let intent = cells.intent()?.ok_or_else(|| protocol("claim_intent: no row"))?;
            StoreReply::Claim { intent, claimed: cells.boolean("claimed")? }
        }
        StoreRequest::UpdateIntent { .. } => StoreReply::Intent { intent: single("update_intent")?.intent()? },
        StoreRequest::ScanIntents { .. } => StoreReply::Intents { intents: all(rows, Cells::intent)? },
        StoreRequest::ReadLog { .. } => StoreReply::Log { entries: all(rows, Cells::log_entry)? },
        StoreRequest::UpsertInstance { .. } => {
            let row = single("upsert_instance")?.instance()?.ok_or_else(|| protocol("upsert_instance: no row"))?;
            StoreReply::Instances { instances: vec![row] }
        }
        StoreRequest::UpdateInstances { .. } | StoreRequest::ScanInstances { .. } => {
            sorted_instances(all(rows, Cells::instance)?)
        }
    })
}

fn decode_sqlite(req: &StoreRequest, results: &[Vec<SqlRow>]) -> Result<StoreReply, HeartError> {
    let set = |i: usize| results.get(i).map_or(&[][..], Vec::as_slice);
    let one_of = |i: usize, what: &str| -> Result<Option<Cells<'_>>, HeartError> {
        Ok(at_most_one(set(i), what)?.map(|r| Cells::new(r, "")))
    };
    Ok(match req {
        StoreRequest::Now => StoreReply::Now,
        StoreRequest::ReadRun { .. } => {
            StoreReply::Run { run: one_of(1, "read_run")?.map(|c| c.run()).transpose()?.flatten() }
        }
        StoreRequest::UpdateRun { want_before, .. } => {
            let (before_at, after_at) = if *want_before { (Some(1), 2) } else { (None, 1) };
            let after = one_of(after_at, "update_run")?.map(|c| c.run()).transpose()?.flatten();
            let before = match (before_at, &after) {
                (Some(i), Some(_)) => {
                    let before = one_of(i, "update_run (before)")?.map(|c| c.run()).transpose()?.flatten();
                    if before.is_none() {
                        return Err(protocol("update_run: a hit without the row before it"));
                    }
                    before
                }
                _ => None,
            };
            StoreReply::RunWrite { before, after }
        }
        StoreRequest::ScanRuns { .. } => StoreReply::Runs { runs: all(set(1), Cells::run)? },
        StoreRequest::EnsureRun(_) => {
            let created = at_most_one(set(1), "ensure_run (insert)")?.is_some();
            let run = Cells::new(exactly_one(set(2), "ensure_run")?, "").run()?;
            StoreReply::Ensured { run: run.ok_or_else(|| protocol("ensure_run: no row"))?, created }
        }
        StoreRequest::ClaimIntent(_) => {
            let claimed = at_most_one(set(2), "claim_intent (insert)")?.is_some();
            let intent = Cells::new(exactly_one(set(3), "claim_intent")?, "").intent()?;
            StoreReply::Claim { intent: intent.ok_or_else(|| protocol("claim_intent: no row"))?, claimed }
        }
        StoreRequest::UpdateIntent { log, .. } => {
            let at = if log.is_some() { 2 } else { 1 };
            StoreReply::Intent { intent: one_of(at, "update_intent")?.map(|c| c.intent()).transpose()?.flatten() }
        }
        StoreRequest::ScanIntents { .. } => StoreReply::Intents { intents: all(set(1), Cells::intent)? },
        StoreRequest::ReadLog { .. } => StoreReply::Log { entries: all(set(1), Cells::log_entry)? },
        StoreRequest::UpsertInstance { .. } => {
            let row = Cells::new(exactly_one(set(1), "upsert_instance")?, "").instance()?;
            StoreReply::Instances { instances: vec![row.ok_or_else(|| protocol("upsert_instance: no row"))?] }
        }
        StoreRequest::UpdateInstances { .. } | StoreRequest::ScanInstances { .. } => {
            sorted_instances(all(set(1), Cells::instance)?)
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::model::FencingToken;
    use crate::request::{held, holds_token};

    fn t(iso: &str) -> Timestamp {
        Timestamp::parse_iso(iso).unwrap()
    }

    const RUN: &str = "0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab";

    fn token() -> FencingToken {
        FencingToken {
            run_id: RUN.to_owned(),
            owner: "worker-A".to_owned(),
            lease_expires_at: t("2026-07-30T00:01:00.000Z"),
            epoch: Some(3),
        }
    }

    /// The acquire write of `ops::acquire` (ceiling 5).
    fn acquire() -> StoreRequest {
        let was_ready = Cond::Eq(RunCol::Status, Val::status(RunStatus::Ready));
        let ceiling = Cond::Not(Box::new(Cond::AtMost(RunCol::Retries, 4)));
        StoreRequest::UpdateRun {
            run_id: RUN.to_owned(),
            when: Cond::Or(vec![
                was_ready.clone(),
                Cond::And(vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt), Cond::Not(Box::new(ceiling))]),
            ]),
            set: vec![
                (RunCol::LeaseOwner, Expr::Val(Val::Text("worker-A".to_owned()))),
                (RunCol::LeaseExpiresAt, Expr::NowPlus(60_000)),
                (RunCol::Status, Expr::Val(Val::status(RunStatus::Leased))),
                (RunCol::UpdatedAt, Expr::Now),
                (RunCol::FencingEpoch, Expr::Add(RunCol::FencingEpoch, 1)),
                (
                    RunCol::Retries,
                    Expr::Case(
                        Box::new(was_ready),
                        Box::new(Expr::Add(RunCol::Retries, 0)),
                        Box::new(Expr::Add(RunCol::Retries, 1)),
                    ),
                ),
            ],
            want_before: true,
        }
    }

    fn renew() -> StoreRequest {
        StoreRequest::UpdateRun {
            run_id: RUN.to_owned(),
            when: holds_token(&token()),
            set: vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(60_000)), (RunCol::UpdatedAt, Expr::Now)],
            want_before: false,
        }
    }

    fn mark_dispatched() -> StoreRequest {
        let tok = token();
        StoreRequest::UpdateIntent {
            run_id: RUN.to_owned(),
            effect_key: "telegram:abc".to_owned(),
            when: Cond::And(vec![
                Cond::Eq(IntentCol::State, Val::Text("intent".to_owned())),
                Cond::RunHeldBy { owner: tok.owner.clone(), lease_expires_at: tok.lease_expires_at, epoch: tok.epoch },
            ]),
            set: vec![
                (IntentCol::State, Expr::Val(Val::Text("dispatched".to_owned()))),
                (IntentCol::FenceOwner, Expr::Val(Val::Text(tok.owner.clone()))),
                (IntentCol::FenceExpiresAt, Expr::Val(Val::Time(tok.lease_expires_at))),
                (IntentCol::FenceEpoch, Expr::Val(Val::Int(3))),
            ],
            log: Some(DispatchLogEntry {
                run_id: RUN.to_owned(),
                effect_key: "telegram:abc".to_owned(),
                attempt: 0,
                outcome: "reconciled".to_owned(),
                at: None,
                detail: Some(serde_json::json!({"reopened": true})),
            }),
        }
    }

    /// One request of every kind (and both shapes of the ones with options).
    fn samples() -> Vec<StoreRequest> {
        vec![
            StoreRequest::Now,
            StoreRequest::ReadRun { run_id: RUN.to_owned() },
            acquire(),
            renew(),
            StoreRequest::ScanRuns {
                when: Cond::And(vec![held(), Cond::OwnerInstanceDead { ttl_ms: 90_000 }]),
                order: RunOrder::ExpiresAt,
                limit: 100,
            },
            StoreRequest::ScanRuns { when: Cond::True, order: RunOrder::UpdatedAtDesc, limit: 10 },
            StoreRequest::EnsureRun(NewRun {
                idempotency_key: "heart:resource:abc".to_owned(),
                objective: "mutex".to_owned(),
                created_by: "heart-fleet".to_owned(),
            }),
            StoreRequest::ClaimIntent(NewIntent {
                run_id: RUN.to_owned(),
                effect_key: "telegram:abc".to_owned(),
                channel: "telegram".to_owned(),
                payload_digest: "sha256:x".to_owned(),
            }),
            mark_dispatched(),
            StoreRequest::UpdateIntent {
                run_id: RUN.to_owned(),
                effect_key: "k".to_owned(),
                when: Cond::True,
                set: vec![(IntentCol::Attempts, Expr::Add(IntentCol::Attempts, 1))],
                log: None,
            },
            StoreRequest::ScanIntents {
                when: Cond::And(vec![
                    Cond::Eq(IntentCol::State, Val::Text("dispatched".to_owned())),
                    Cond::Not(Box::new(Cond::LiveAt(IntentCol::FenceExpiresAt))),
                ]),
                limit: 50,
            },
            StoreRequest::ReadLog { run_id: RUN.to_owned(), effect_key: "k".to_owned() },
            StoreRequest::UpsertInstance {
                instance_id: "w-1".to_owned(),
                hostname: Some("host".to_owned()),
                pid: None,
                metadata: Some(serde_json::json!({"v": 1})),
            },
            StoreRequest::UpdateInstances {
                when: Cond::OlderThan(InstanceCol::LastHeartbeat, 90_000),
                set: vec![(InstanceCol::Status, Expr::Val(Val::Text("dead".to_owned())))],
            },
            StoreRequest::ScanInstances {
                when: Cond::Not(Box::new(Cond::Eq(InstanceCol::Status, Val::Text("dead".to_owned())))),
            },
        ]
    }

    /// Placeholder numbers used in `sql`.
    fn placeholders(sql: &str, sigil: char) -> Vec<usize> {
        let mut out = Vec::new();
        let b = sql.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == sigil as u8 {
                let start = i + 1;
                let mut end = start;
                while end < b.len() && b[end].is_ascii_digit() {
                    end += 1;
                }
                if end > start {
                    out.push(sql[start..end].parse().unwrap());
                }
                i = end.max(i + 1);
            } else {
                i += 1;
            }
        }
        out
    }

    #[test]
    fn every_statement_numbers_its_parameters_densely() {
        for req in samples() {
            for dialect in [Dialect::Postgres, Dialect::Sqlite] {
                let stmts = render(&req, dialect).unwrap();
                assert_eq!(stmts.len(), statement_count(&req, dialect), "{req:?}");
                if dialect == Dialect::Postgres {
                    assert_eq!(stmts.len(), 1);
                    assert!(stmts[0].sql.starts_with(PG_CLOCK), "{}", stmts[0].sql);
                    assert!(!stmts[0].params.contains(&SqlParam::Now));
                    assert_eq!(stmts[0].sql.matches("clock_timestamp()").count(), 1);
                } else {
                    assert_eq!(stmts[0].sql, SQLITE_CLOCK);
                    assert!(!stmts.iter().any(|s| s.sql.contains("'now'") && s.sql != SQLITE_CLOCK));
                }
                let sigil = if dialect == Dialect::Postgres { '$' } else { '?' };
                for s in &stmts {
                    let used: std::collections::BTreeSet<usize> = placeholders(&s.sql, sigil).into_iter().collect();
                    let want: std::collections::BTreeSet<usize> = (1..=s.params.len()).collect();
                    assert_eq!(used, want, "{dialect:?} {}", s.sql);
                    assert!(s.params.iter().filter(|p| **p == SqlParam::Now).count() <= 1);
                }
            }
        }
    }

    #[test]
    fn renew_renders_one_guarded_update_in_postgres() {
        let s = &render(&renew(), Dialect::Postgres).unwrap()[0];
        assert_eq!(
            s.sql,
            "WITH clk AS MATERIALIZED (SELECT date_trunc('milliseconds', clock_timestamp()) AS now), \
             upd AS (UPDATE agent_runs SET lease_expires_at = (clk.now + $2::bigint * interval '1 millisecond'), \
             updated_at = clk.now FROM clk WHERE agent_runs.id = $1::text::uuid AND \
             (agent_runs.status IN ('leased', 'running') AND agent_runs.lease_owner = $3::text \
             AND date_trunc('milliseconds', agent_runs.lease_expires_at) = $4::text::timestamptz \
             AND (agent_runs.lease_expires_at IS NOT NULL AND agent_runs.lease_expires_at > clk.now) \
             AND agent_runs.fencing_epoch = $5::bigint) RETURNING agent_runs.*) \
             SELECT to_char(clk.now AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS now, \
             upd.id::text AS id, upd.task_id AS task_id, upd.assignment_id::text AS assignment_id, \
             upd.objective AS objective, to_json(upd.required_capabilities)::text AS required_capabilities, \
             upd.status AS status, upd.assigned_agent AS assigned_agent, upd.lease_owner AS lease_owner, \
             to_char(upd.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS lease_expires_at, \
             upd.retries AS retries, upd.budget::text AS budget, upd.approval_state AS approval_state, \
             upd.visibility AS visibility, upd.idempotency_key AS idempotency_key, upd.created_by AS created_by, \
             to_char(upd.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS created_at, \
             to_char(upd.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS updated_at, \
             upd.fencing_epoch AS fencing_epoch FROM clk LEFT JOIN upd ON TRUE"
        );
        assert_eq!(
            s.params,
            vec![
                SqlParam::Text(RUN.to_owned()),
                SqlParam::Int(60_000),
                SqlParam::Text("worker-A".to_owned()),
                SqlParam::Text("2026-07-30T00:01:00.000Z".to_owned()),
                SqlParam::Int(3),
            ]
        );
    }

    #[test]
    fn renew_renders_clock_and_update_in_sqlite() {
        let stmts = render(&renew(), Dialect::Sqlite).unwrap();
        assert_eq!(stmts.len(), 2);
        let s = &stmts[1];
        assert_eq!(
            s.sql,
            format!(
                "UPDATE agent_runs SET lease_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', ?2, ?3), updated_at = ?2 \
                 WHERE agent_runs.id = ?1 AND (agent_runs.status IN ('leased', 'running') \
                 AND agent_runs.lease_owner = ?4 AND agent_runs.lease_expires_at = ?5 \
                 AND (agent_runs.lease_expires_at IS NOT NULL AND agent_runs.lease_expires_at > ?2) \
                 AND agent_runs.fencing_epoch = ?6) RETURNING {}",
                select_list(Dialect::Sqlite, &RUN_COLUMNS, "", "")
            )
        );
        assert_eq!(
            s.params,
            vec![
                SqlParam::Text(RUN.to_owned()),
                SqlParam::Now,
                SqlParam::Text("+60.000 seconds".to_owned()),
                SqlParam::Text("worker-A".to_owned()),
                SqlParam::Text("2026-07-30T00:01:00.000Z".to_owned()),
                SqlParam::Int(3),
            ]
        );
    }

    #[test]
    fn acquire_locks_the_row_before_and_reports_it() {
        let s = &render(&acquire(), Dialect::Postgres).unwrap()[0];
        assert!(s.sql.contains(
            "prev AS MATERIALIZED (SELECT agent_runs.* FROM agent_runs WHERE agent_runs.id = $1::text::uuid FOR UPDATE)"
        ));
        assert!(s.sql.contains("UPDATE agent_runs SET lease_owner = $2::text, "));
        assert!(s.sql.contains("FROM clk, prev WHERE agent_runs.id = prev.id AND ("));
        assert!(s.sql.contains(
            "retries = CASE WHEN agent_runs.status = 'ready' THEN (agent_runs.retries + $5::bigint) \
             ELSE (agent_runs.retries + $6::bigint) END"
        ));
        assert!(s.sql.contains("NOT COALESCE(NOT COALESCE(agent_runs.retries <= $"));
        assert!(s.sql.contains("prev.id::text AS b_id"));
        assert!(s.sql.contains("FROM clk LEFT JOIN prev ON TRUE LEFT JOIN upd ON TRUE"));
        let lite = render(&acquire(), Dialect::Sqlite).unwrap();
        assert_eq!(lite.len(), 3);
        assert!(lite[1].sql.starts_with("SELECT id, task_id,"));
        assert_eq!(lite[1].params, vec![SqlParam::Text(RUN.to_owned())]);
        assert!(lite[2].sql.starts_with("UPDATE agent_runs SET lease_owner = ?2, "));
    }

    #[test]
    fn intents_check_the_run_and_log_only_on_a_hit() {
        let s = &render(&mark_dispatched(), Dialect::Postgres).unwrap()[0];
        assert!(s.sql.contains(
            "EXISTS (SELECT 1 FROM agent_runs hr WHERE hr.id = effect_intents.run_id AND hr.status IN ('leased', 'running') \
             AND hr.lease_owner = $"
        ));
        assert!(s.sql.contains("AND hr.lease_expires_at > clk.now AND hr.fencing_epoch = $"));
        assert!(s.sql.contains("FROM clk WHERE EXISTS (SELECT 1 FROM upd))"));
        let lite = render(&mark_dispatched(), Dialect::Sqlite).unwrap();
        assert_eq!(lite.len(), 3);
        assert!(lite[1].sql.starts_with("INSERT INTO outbox_dispatch_log"));
        assert!(lite[1].sql.contains("FROM effect_intents WHERE effect_intents.run_id = ?"));
        assert!(lite[2].sql.starts_with("UPDATE effect_intents SET state = 'dispatched', fence_owner = ?"));
        let claim = render(&samples()[7], Dialect::Postgres).unwrap();
        assert!(claim[0].sql.contains("ON CONFLICT (run_id, effect_key) DO NOTHING"));
        assert!(claim[0].sql.contains("jsonb_build_object('channel', $3::text)"));
    }

    #[test]
    fn plain_labels_are_literals_and_everything_else_a_parameter() {
        let mut b = Builder::new(Dialect::Postgres);
        assert_eq!(cond(&mut b, &held()).unwrap(), "agent_runs.status IN ('leased', 'running')");
        let odd = Cond::Eq(RunCol::Status, Val::Text("it's".into()));
        assert_eq!(cond(&mut b, &odd).unwrap(), "agent_runs.status = $1::text");
        let owner = Cond::Eq(RunCol::LeaseOwner, Val::Text("leased".into()));
        assert_eq!(cond(&mut b, &owner).unwrap(), "agent_runs.lease_owner = $2::text");
        let state = Cond::Eq(IntentCol::State, Val::Text("dispatched".into()));
        assert_eq!(cond(&mut b, &state).unwrap(), "effect_intents.state = 'dispatched'");
        assert_eq!(b.params, vec![SqlParam::Text("it's".into()), SqlParam::Text("leased".into())]);
        for (text, ok) in
            [("ready", true), ("waiting_approval", true), ("", false), ("Ready", false), ("a'b", false), ("a b", false)]
        {
            assert_eq!(is_label(text), ok, "{text:?}");
        }
    }

    #[test]
    fn conditions_are_two_valued_and_type_safe() {
        let mut b = Builder::new(Dialect::Postgres);
        let not_in =
            Cond::Not(Box::new(Cond::In(RunCol::LeaseOwner, vec![Val::Text("a".into()), Val::Null, Val::Int(1)])));
        assert_eq!(cond(&mut b, &not_in).unwrap(), "NOT COALESCE(agent_runs.lease_owner IN ($1::text), FALSE)");
        assert_eq!(cond(&mut b, &Cond::Eq(RunCol::Retries, Val::Text("1".into()))).unwrap(), "FALSE");
        assert_eq!(cond(&mut b, &Cond::Eq(RunCol::Id, Val::Text("not-a-uuid".into()))).unwrap(), "FALSE");
        assert_eq!(cond(&mut b, &Cond::Eq(RunCol::LeaseOwner, Val::Null)).unwrap(), "agent_runs.lease_owner IS NULL");
        assert_eq!(cond(&mut b, &Cond::ExpiredAt(RunCol::Status)).unwrap(), "TRUE");
        assert_eq!(cond(&mut b, &Cond::<RunCol>::Or(vec![])).unwrap(), "FALSE");
        assert_eq!(cond(&mut b, &Cond::<RunCol>::And(vec![])).unwrap(), "TRUE");
        assert_eq!(cond(&mut b, &Cond::<IntentCol>::OwnerInstanceDead { ttl_ms: 1 }).unwrap(), "FALSE");
        assert_eq!(
            cond(&mut b, &Cond::StartsWith(RunCol::IdempotencyKey, "heart:resource:".into())).unwrap(),
            "starts_with(agent_runs.idempotency_key, $2::text)"
        );
        assert_eq!(
            cond(&mut b, &Cond::OlderThan(InstanceCol::LastHeartbeat, 90_000)).unwrap(),
            "agent_instances.last_heartbeat < (clk.now + $3::bigint * interval '1 millisecond')"
        );
        assert_eq!(b.params[2], SqlParam::Int(-90_000));
        let mut l = Builder::new(Dialect::Sqlite);
        assert_eq!(
            cond(&mut l, &Cond::StartsWith(RunCol::IdempotencyKey, "p".into())).unwrap(),
            "substr(agent_runs.idempotency_key, 1, length(?1)) = ?1"
        );
        assert_eq!(cond(&mut l, &Cond::Not(Box::new(Cond::True::<RunCol>))).unwrap(), "NOT COALESCE(1, 0)");
    }

    #[test]
    fn malformed_writes_are_refused() {
        let bad = |set: Vec<Assign<RunCol>>| StoreRequest::UpdateRun {
            run_id: RUN.into(),
            when: Cond::True,
            set,
            want_before: false,
        };
        for set in [
            vec![(RunCol::Id, Expr::Val(Val::Text(RUN.into())))],
            vec![(RunCol::IdempotencyKey, Expr::Val(Val::Text("k".into())))],
            vec![(RunCol::Retries, Expr::Now)],
            vec![(RunCol::Retries, Expr::Val(Val::Text("1".into())))],
            vec![(RunCol::UpdatedAt, Expr::Add(RunCol::Retries, 1))],
            vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(MAX_SHIFT_MS + 1))],
        ] {
            for d in [Dialect::Postgres, Dialect::Sqlite] {
                let err = render(&bad(set.clone()), d).unwrap_err();
                assert_eq!(err.code, ErrorCode::InvalidInput, "{set:?}");
            }
        }
        let claim = StoreRequest::ClaimIntent(NewIntent {
            run_id: "run-1".into(),
            effect_key: "k".into(),
            channel: "internal".into(),
            payload_digest: String::new(),
        });
        assert_eq!(render(&claim, Dialect::Postgres).unwrap_err().code, ErrorCode::InvalidInput);
        assert_eq!(render(&claim, Dialect::Sqlite).unwrap().len(), 4);
    }

    #[test]
    fn assignments_keep_the_last_of_a_column_and_never_render_empty() {
        let mut b = Builder::new(Dialect::Postgres);
        let set = vec![(RunCol::Retries, Expr::Val(Val::Int(1))), (RunCol::Retries, Expr::Val(Val::Int(2)))];
        assert_eq!(set_list(&mut b, &set).unwrap(), "retries = $1::bigint");
        assert_eq!(b.params, vec![SqlParam::Int(2)]);
        assert_eq!(set_list::<RunCol>(&mut b, &[]).unwrap(), "status = agent_runs.status");
        let mut l = Builder::new(Dialect::Sqlite);
        let set = vec![(RunCol::LeaseOwner, Expr::Val(Val::Null))];
        assert_eq!(set_list(&mut l, &set).unwrap(), "lease_owner = NULL");
        let mut p = Builder::new(Dialect::Postgres);
        assert_eq!(set_list(&mut p, &set).unwrap(), "lease_owner = NULL::text");
    }

    #[test]
    fn non_uuid_run_ids_match_nothing_in_postgres() {
        let s = &render(&StoreRequest::ReadRun { run_id: "run-1".into() }, Dialect::Postgres).unwrap()[0];
        assert!(s.sql.ends_with("FROM clk LEFT JOIN agent_runs ON FALSE"));
        assert!(s.params.is_empty());
        let upd = StoreRequest::UpdateIntent {
            run_id: "run-1".into(),
            effect_key: "k".into(),
            when: Cond::True,
            set: vec![],
            log: None,
        };
        let s = &render(&upd, Dialect::Postgres).unwrap()[0];
        assert!(s.sql.ends_with("LEFT JOIN effect_intents ON FALSE"));
        for ok in [
            RUN,
            "0B3F5C1E9D2A4C1B8E7F1234567890AB",
            "{0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab}",
            "0b3f-5c1e-9d2a-4c1b-8e7f-1234-5678-90ab",
            "0b3f5c1e-9d2a-4c1b-8e7f-12345678-90ab",
        ] {
            assert!(pg_uuid_ok(ok), "{ok}");
        }
        for bad in [
            "",
            "run-1",
            "0b3f5c1e-9d2a-4c1b-8e7f-1234567890a",
            "0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab-",
            "0b3f5c1-e9d2a-4c1b-8e7f-1234567890ab",
            "{0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab",
            "0b3f5c1e-9d2a-4c1b-8e7f-1234567890abc",
            "-0b3f5c1e9d2a4c1b8e7f1234567890ab",
            " 0b3f5c1e9d2a4c1b8e7f1234567890ab",
        ] {
            assert!(!pg_uuid_ok(bad), "{bad}");
        }
    }

    #[test]
    fn sqlite_shifts_are_exact_modifiers() {
        assert_eq!(sqlite_shift_modifier(60_000), "+60.000 seconds");
        assert_eq!(sqlite_shift_modifier(-90_001), "-90.001 seconds");
        assert_eq!(sqlite_shift_modifier(5), "+0.005 seconds");
        assert_eq!(sqlite_shift_modifier(i64::MIN), "-9223372036854775.808 seconds");
    }

    fn text(v: &str) -> SqlValue {
        SqlValue::Text(v.to_owned())
    }

    fn run_row(prefix: &str, status: &str, epoch: i64) -> SqlRow {
        let c = |n: &str, v: SqlValue| (format!("{prefix}{n}"), v);
        vec![
            c("id", text(RUN)),
            c("task_id", SqlValue::Null),
            c("assignment_id", text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
            c("objective", text("run")),
            c("required_capabilities", text("[\"x\"]")),
            c("status", text(status)),
            c("assigned_agent", SqlValue::Null),
            c("lease_owner", text("worker-A")),
            c("lease_expires_at", text("2026-07-30T00:01:00.000Z")),
            c("retries", SqlValue::Int(0)),
            c("budget", text("{\"max\":1}")),
            c("approval_state", text("auto")),
            c("visibility", text("team")),
            c("idempotency_key", text("job:1")),
            c("created_by", text("me")),
            c("created_at", text("2026-07-30 00:00:00.123456+00")),
            c("updated_at", text("2026-07-30T00:00:00.000Z")),
            c("fencing_epoch", text(&epoch.to_string())),
        ]
    }

    fn nulls(prefix: &str) -> SqlRow {
        RUN_COLUMNS.iter().map(|(n, _)| (format!("{prefix}{n}"), SqlValue::Null)).collect()
    }

    #[test]
    fn decodes_a_postgres_write_hit_and_miss() {
        let now = ("now".to_owned(), text("2026-07-30T00:00:01.000Z"));
        let mut hit = vec![now.clone()];
        hit.extend(run_row("b_", "ready", 2));
        hit.extend(run_row("", "leased", 3));
        let answer = decode(&acquire(), Dialect::Postgres, vec![vec![hit]]).unwrap();
        assert_eq!(answer.now, t("2026-07-30T00:00:01.000Z"));
        let StoreReply::RunWrite { before: Some(before), after: Some(after) } = answer.reply else { panic!() };
        assert_eq!((before.status, before.fencing_epoch), (RunStatus::Ready, 2));
        assert_eq!((after.status, after.fencing_epoch), (RunStatus::Leased, 3));
        assert_eq!(after.created_at, t("2026-07-30T00:00:00.123Z"));
        assert_eq!(after.required_capabilities, vec!["x".to_owned()]);
        assert_eq!(after.budget, Some(serde_json::json!({"max": 1})));
        let mut miss = vec![now];
        miss.extend(nulls("b_"));
        miss.extend(nulls(""));
        let answer = decode(&acquire(), Dialect::Postgres, vec![vec![miss]]).unwrap();
        assert_eq!(answer.reply, StoreReply::RunWrite { before: None, after: None });
    }

    #[test]
    fn decodes_sqlite_row_sets() {
        let clock: Vec<Vec<SqlRow>> = vec![vec![vec![("now".to_owned(), text("2026-07-30T00:00:01.000Z"))]]];
        let mut sets = clock.clone();
        sets.push(vec![run_row("", "ready", 2)]);
        sets.push(vec![]);
        let answer = decode(&acquire(), Dialect::Sqlite, sets).unwrap();
        assert_eq!(answer.reply, StoreReply::RunWrite { before: None, after: None });
        let intent: SqlRow = INTENT_COLUMNS
            .iter()
            .map(|(n, _)| {
                let v = match *n {
                    "run_id" => text(RUN),
                    "effect_key" => text("telegram:abc"),
                    "state" => text("intent"),
                    "channel" => text("telegram"),
                    "payload_digest" => text("sha256:x"),
                    "attempts" => SqlValue::Int(0),
                    "created_at" => text("2026-07-30T00:00:01.000Z"),
                    _ => SqlValue::Null,
                };
                ((*n).to_owned(), v)
            })
            .collect();
        let claim = &samples()[7];
        let mut sets = clock.clone();
        sets.extend([vec![], vec![vec![("run_id".to_owned(), text(RUN))]], vec![intent.clone()]]);
        let answer = decode(claim, Dialect::Sqlite, sets).unwrap();
        let StoreReply::Claim { intent: row, claimed: true } = answer.reply else { panic!() };
        assert_eq!(row.state, IntentState::Intent);
        let mut sets = clock;
        sets.extend([vec![], vec![], vec![intent]]);
        assert!(matches!(
            decode(claim, Dialect::Sqlite, sets).unwrap().reply,
            StoreReply::Claim { claimed: false, .. }
        ));
    }

    #[test]
    fn malformed_rows_are_protocol_errors() {
        let now = ("now".to_owned(), text("2026-07-30T00:00:01.000Z"));
        let read = StoreRequest::ReadRun { run_id: RUN.into() };
        let cases: Vec<Vec<Vec<SqlRow>>> = vec![
            vec![],
            vec![vec![]],
            vec![vec![vec![now.clone()]]],
            vec![vec![{
                let mut r = vec![now.clone()];
                r.extend(run_row("", "sleeping", 0));
                r
            }]],
            vec![vec![{
                let mut r = vec![("now".to_owned(), text("yesterday"))];
                r.extend(run_row("", "ready", 0));
                r
            }]],
            vec![vec![
                {
                    let mut r = vec![now.clone()];
                    r.extend(run_row("", "ready", 0));
                    r
                };
                2
            ]],
            vec![vec![{
                let mut r = vec![now.clone()];
                let mut run = run_row("", "ready", 0);
                run[9].1 = text("many");
                r.extend(run);
                r
            }]],
        ];
        for rows in cases {
            let err = decode(&read, Dialect::Postgres, rows.clone()).unwrap_err();
            assert_eq!(err.code, ErrorCode::StoreProtocol, "{rows:?}");
        }
    }

    #[test]
    fn receipts_insert_their_fields() {
        let receipt = serde_json::json!({
            "schemaVersion": "zao.heart.receipt.v1", "event": "acquired", "runId": "r", "owner": "o",
            "leaseExpiresAt": "2026-07-30T00:01:00.000Z", "effectKey": null, "at": "2026-07-30T00:00:00.000Z",
            "digest": "sha256:dreamnet-sorted-json:v0:00"
        });
        let s = receipt_insert(Dialect::Postgres, &receipt).unwrap();
        assert!(s.sql.contains(
            "VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, NULL::text, $6::text, $7::text, $8::text::jsonb)"
        ));
        assert_eq!(s.params.len(), 8);
        assert!(receipt_insert(Dialect::Sqlite, &serde_json::json!({"event": 1})).is_err());
    }

    #[test]
    fn migrations_are_listed_in_order() {
        let pg = migrations(Dialect::Postgres);
        assert_eq!(pg.iter().map(|m| m.0).collect::<Vec<_>>(), ["0001_reference_schema", "0002_heart_fleet"]);
        assert!(pg[1].1.contains("heart_fencing_epoch_monotonic"));
        let lite = migrations(Dialect::Sqlite);
        assert!(lite[0].1.contains("CREATE TRIGGER IF NOT EXISTS heart_fencing_epoch_monotonic"));
    }

    #[test]
    fn statements_and_values_serialize_for_bindings() {
        let s =
            Statement { sql: "x".into(), params: vec![SqlParam::Int(1), SqlParam::Text("a".into()), SqlParam::Now] };
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"sql":"x","params":[{"int":1},{"text":"a"},"now"]}"#);
        let v: Vec<SqlValue> = serde_json::from_str(r#"[null, 1, 1.5, "t", true]"#).unwrap();
        assert_eq!(v, vec![SqlValue::Null, SqlValue::Int(1), SqlValue::Real(1.5), text("t"), SqlValue::Bool(true)]);
    }
}
