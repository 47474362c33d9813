//! The migrations the repository ships and the one protocol every store runs them by.

use super::*;

pub(super) const PG_MIGRATIONS: &[(&str, &str)] = &[
    ("0001_reference_schema", include_str!("../../../migrations/postgres/0001_reference_schema.sql")),
    ("0002_heart_fleet", include_str!("../../../migrations/postgres/0002_heart_fleet.sql")),
    ("0003_receipt_chain", include_str!("../../../migrations/postgres/0003_receipt_chain.sql")),
    ("0004_console_indexes", include_str!("../../../migrations/postgres/0004_console_indexes.sql")),
];

pub(super) const SQLITE_MIGRATIONS: &[(&str, &str)] = &[
    ("0001_schema", include_str!("../../../migrations/sqlite/0001_schema.sql")),
    ("0002_store_clock", include_str!("../../../migrations/sqlite/0002_store_clock.sql")),
    ("0003_receipt_chain", include_str!("../../../migrations/sqlite/0003_receipt_chain.sql")),
    ("0004_console_indexes", include_str!("../../../migrations/sqlite/0004_console_indexes.sql")),
];

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
pub(super) const PG_MIGRATE_LOCK: &str = "SELECT pg_advisory_xact_lock(7264817345)";

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
