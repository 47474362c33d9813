//! # heart-fleet-stores
//!
//! heart-fleet's SQL stores for Rust hosts: [`SqliteStore`] (rusqlite, bundled SQLite: the
//! embedded default) and [`PgStore`] (the sync `postgres` crate), both implementing the
//! core's [`LeaseStore`]. They execute the statements [`heart_fleet_core::sql::render`]
//! produces (one atomic statement per conditional write, with the database's clock) and
//! hand the rows to [`heart_fleet_core::sql::decode`]; they hold no lease logic and no SQL
//! of their own beyond connecting, migrating, seeding and the receipts table.
//!
//! * [`open`] a store from a URL ([`StoreTarget`]): `sqlite:PATH`, `sqlite::memory:`,
//!   `postgres://…` / `postgresql://…`. It checks the schema and refuses a database that was
//!   not migrated ([`StoreOpenError::NotMigrated`], naming the missing table and telling the
//!   user to run `heart-fleet migrate`). [`connect`] skips the check (and creates a SQLite
//!   file), for [`migrate`].
//! * [`migrate`] applies [`heart_fleet_core::sql::migrations`] in order, each in one
//!   transaction, recording applied ones in `heart_fleet_migrations`; running it again
//!   applies nothing (and every migration is idempotent anyway).
//! * [`AnyStore`] is either store behind one type; it implements [`LeaseStore`].
//! * Seeding (`insert_run`, `insert_instance`, `insert_intent`) writes rows exactly as given.
//! * [`receipts`]: the receipts-table sink ([`receipts::ReceiptTableSink`], rendered by
//!   [`heart_fleet_core::sql::receipt_insert`]) and [`AnyStore::verify_receipts`].
//!
//! SQLite files are opened in WAL mode with a busy timeout, so several processes can share
//! one file. Every statement failure is a [`StoreError`]: never a panic, never a silent miss.
//!
//! The drivers live here, never in the core, so the core's dependency tree holds no
//! database crate.

pub mod pg;
pub mod receipts;
pub mod seed;
pub mod sqlite;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use heart_fleet_core::sql::{self, Dialect, SqlRow, Statement};
use heart_fleet_core::{InstanceRow, IntentRow, LeaseStore, RunRow, StoreAnswer, StoreError, StoreRequest};

pub use pg::PgStore;
pub use sqlite::SqliteStore;

/// The store the `heart-fleet` CLI uses when none is given: a SQLite file in the current
/// directory.
pub const DEFAULT_STORE_URL: &str = "sqlite:heart-fleet.db";

/// The table that records applied migrations.
pub use heart_fleet_core::sql::MIGRATIONS_TABLE;

/// The tables the statements need, in the order the schema check looks for them.
pub const REQUIRED_TABLES: [&str; 5] =
    ["agent_runs", "agent_instances", "effect_intents", "outbox_dispatch_log", "heart_receipts"];

/// How long connecting to PostgreSQL may take when the URL sets no `connect_timeout`.
pub const PG_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) fn failed(what: &str, e: impl fmt::Display) -> StoreError {
    StoreError(format!("{what}: {e}"))
}

/// Where a store URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreTarget {
    /// `sqlite:PATH` (or `sqlite://PATH`).
    SqliteFile(PathBuf),
    /// `sqlite::memory:`: a private in-memory database, gone when the store is dropped.
    SqliteMemory,
    /// `postgres://…` or `postgresql://…`, passed to the driver as is.
    Postgres(String),
}

impl StoreTarget {
    /// Parses a store URL.
    pub fn parse(url: &str) -> Result<StoreTarget, StoreOpenError> {
        if url == "sqlite::memory:" {
            return Ok(StoreTarget::SqliteMemory);
        }
        if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(StoreOpenError::UnknownScheme { url: url.to_owned() });
            }
            return Ok(StoreTarget::SqliteFile(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(StoreTarget::Postgres(url.to_owned()));
        }
        Err(StoreOpenError::UnknownScheme { url: redact(url) })
    }

    /// The SQL dialect of the target.
    pub fn dialect(&self) -> Dialect {
        match self {
            StoreTarget::Postgres(_) => Dialect::Postgres,
            _ => Dialect::Sqlite,
        }
    }
}

/// A URL with its password replaced by `****`, for messages.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else { return url.to_owned() };
    let rest = &url[scheme_end + 3..];
    let Some(at) = rest.find('@') else { return url.to_owned() };
    let userinfo = &rest[..at];
    match userinfo.find(':') {
        Some(colon) => format!("{}{}:****{}", &url[..scheme_end + 3], &userinfo[..colon], &rest[at..]),
        None => url.to_owned(),
    }
}

/// Why a store could not be opened. Each displays as one line naming the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreOpenError {
    /// The URL's scheme is not one of the supported ones.
    UnknownScheme {
        /// The URL (password redacted).
        url: String,
    },
    /// The database could not be reached or opened.
    Unreachable {
        /// The URL (password redacted).
        url: String,
        /// The driver's reason.
        reason: String,
    },
    /// The database is reachable but has not been migrated (or only partly).
    NotMigrated {
        /// The URL (password redacted).
        url: String,
        /// What is missing (`table agent_runs`, `column agent_runs.fencing_epoch`, …).
        missing: String,
    },
}

impl fmt::Display for StoreOpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreOpenError::UnknownScheme { url } => write!(
                f,
                "unknown store URL {url:?}: use sqlite:PATH, sqlite::memory: or postgres://USER:PASSWORD@HOST:PORT/DATABASE"
            ),
            StoreOpenError::Unreachable { url, reason } => write!(f, "cannot open store {url}: {reason}"),
            StoreOpenError::NotMigrated { url, missing } => write!(
                f,
                "store {url} has no {missing}: run `heart-fleet migrate` with the same --store to create or upgrade \
                 the tables"
            ),
        }
    }
}

impl std::error::Error for StoreOpenError {}

/// Either SQL store behind one type.
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// SQLite.
    Sqlite(SqliteStore),
    /// PostgreSQL.
    Postgres(PgStore),
}

impl LeaseStore for AnyStore {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.execute(req),
            AnyStore::Postgres(s) => s.execute(req),
        }
    }
}

/// Opens the store at `url` and checks that it was migrated. A SQLite file must exist.
pub fn open(url: &str) -> Result<AnyStore, StoreOpenError> {
    let target = StoreTarget::parse(url)?;
    let shown = redact(url);
    if let StoreTarget::SqliteFile(path) = &target
        && !path.exists()
    {
        if parent_exists(path) {
            return Err(StoreOpenError::NotMigrated { url: shown, missing: "database file".into() });
        }
        return Err(unreachable_dir(&shown, path));
    }
    let mut store = connect_target(&target, &shown, false)?;
    if let Some(missing) =
        store.missing_schema().map_err(|e| StoreOpenError::Unreachable { url: shown.clone(), reason: e.0 })?
    {
        return Err(StoreOpenError::NotMigrated { url: shown, missing });
    }
    Ok(store)
}

/// Connects to the store at `url` without checking the schema (a SQLite file is created
/// when missing): for [`migrate`].
pub fn connect(url: &str) -> Result<AnyStore, StoreOpenError> {
    let target = StoreTarget::parse(url)?;
    let shown = redact(url);
    if let StoreTarget::SqliteFile(path) = &target
        && !parent_exists(path)
    {
        return Err(unreachable_dir(&shown, path));
    }
    connect_target(&target, &shown, true)
}

/// Connects to `url`, then applies any pending migration: the store is ready to use.
pub fn open_migrated(url: &str) -> Result<(AnyStore, Vec<MigrationStatus>), StoreOpenError> {
    let mut store = connect(url)?;
    let applied = migrate(&mut store).map_err(|e| StoreOpenError::Unreachable { url: redact(url), reason: e.0 })?;
    Ok((store, applied))
}

fn parent_exists(path: &Path) -> bool {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.is_dir(),
        _ => true,
    }
}

fn unreachable_dir(shown: &str, path: &Path) -> StoreOpenError {
    let dir = path.parent().map(|p| p.display().to_string()).unwrap_or_default();
    StoreOpenError::Unreachable { url: shown.to_owned(), reason: format!("directory {dir} does not exist") }
}

fn connect_target(target: &StoreTarget, shown: &str, create: bool) -> Result<AnyStore, StoreOpenError> {
    let unreachable = |e: StoreError| StoreOpenError::Unreachable { url: shown.to_owned(), reason: e.0 };
    match target {
        StoreTarget::SqliteMemory => SqliteStore::open_in_memory().map(AnyStore::Sqlite).map_err(unreachable),
        StoreTarget::SqliteFile(path) => SqliteStore::open(path, create).map(AnyStore::Sqlite).map_err(unreachable),
        StoreTarget::Postgres(url) => {
            let mut config = postgres::Config::from_str(url)
                .map_err(|e| StoreOpenError::Unreachable { url: shown.to_owned(), reason: e.to_string() })?;
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(PG_CONNECT_TIMEOUT);
            }
            config
                .connect(postgres::NoTls)
                .map(|c| AnyStore::Postgres(PgStore::new(c)))
                .map_err(|e| StoreOpenError::Unreachable { url: shown.to_owned(), reason: pg_reason(&e) })
        }
    }
}

/// The most useful one-line text of a PostgreSQL error (the server's message when there is one).
fn pg_reason(e: &postgres::Error) -> String {
    let text = match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        }
    };
    text.replace('\n', " ")
}

/// A migration and whether this call applied it (`false`: it was already recorded).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigrationStatus {
    /// The migration's name (`0001_schema`, …).
    pub name: String,
    /// Applied now.
    pub applied: bool,
}

/// Applies every migration of the store's dialect that `heart_fleet_migrations` does not
/// record yet, in order, each in one transaction together with its record (PostgreSQL:
/// under an advisory lock, so concurrent `migrate`s apply each migration once; SQLite:
/// under `BEGIN IMMEDIATE`). Idempotent.
pub fn migrate(store: &mut AnyStore) -> Result<Vec<MigrationStatus>, StoreError> {
    // The core's protocol (sql::MigrationPlan), the one every store in every language runs;
    // `transaction` opens and ends it with the plan's `begin` / `commit`.
    let plan = sql::migration_plan(store.dialect());
    let mut out = Vec::new();
    for (name, script) in plan.migrations {
        let applied = match store {
            AnyStore::Sqlite(s) => s.transaction(|conn| {
                conn.execute_batch(plan.create_record_table).map_err(|e| failed("sqlite migrations table", e))?;
                let seen: i64 = conn
                    .query_row(plan.is_applied, [name], |r| r.get(0))
                    .map_err(|e| failed("sqlite migrations table", e))?;
                if seen > 0 {
                    return Ok(false);
                }
                conn.execute_batch(script).map_err(|e| failed(&format!("migration {name}"), e))?;
                conn.execute(plan.record, [name]).map_err(|e| failed("sqlite migrations table", e))?;
                Ok(true)
            })?,
            AnyStore::Postgres(s) => s.transaction(|client| {
                for step in plan.lock.iter().chain([&plan.create_record_table]) {
                    client.batch_execute(step).map_err(|e| failed("postgres migrations table", pg_reason(&e)))?;
                }
                let seen: i32 = client
                    .query_one(plan.is_applied, &[name])
                    .and_then(|r| r.try_get(0))
                    .map_err(|e| failed("postgres migrations table", pg_reason(&e)))?;
                if seen > 0 {
                    return Ok(false);
                }
                client.batch_execute(script).map_err(|e| failed(&format!("migration {name}"), pg_reason(&e)))?;
                client.execute(plan.record, &[name]).map_err(|e| failed("postgres migrations table", pg_reason(&e)))?;
                Ok(true)
            })?,
        };
        out.push(MigrationStatus { name: (*name).to_owned(), applied });
    }
    Ok(out)
}

impl AnyStore {
    /// The SQL dialect.
    pub fn dialect(&self) -> Dialect {
        match self {
            AnyStore::Sqlite(_) => Dialect::Sqlite,
            AnyStore::Postgres(_) => Dialect::Postgres,
        }
    }

    /// What the schema lacks (`table agent_runs`, `column agent_runs.fencing_epoch`), or
    /// `None` when every table and column the statements use is there.
    pub fn missing_schema(&mut self) -> Result<Option<String>, StoreError> {
        for table in REQUIRED_TABLES {
            let stmt = match self.dialect() {
                Dialect::Sqlite => Statement {
                    sql: "SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name = ?1".into(),
                    params: vec![sql::SqlParam::Text(table.into())],
                },
                Dialect::Postgres => Statement {
                    sql: "SELECT (to_regclass($1::text) IS NOT NULL)::int AS n".into(),
                    params: vec![sql::SqlParam::Text(table.into())],
                },
            };
            let rows = self.query(&stmt)?;
            let found = rows.first().and_then(|r| r.first()).is_some_and(|(_, v)| *v == sql::SqlValue::Int(1));
            if !found {
                return Ok(Some(format!("table {table}")));
            }
        }
        let probe = Statement { sql: "SELECT fencing_epoch FROM agent_runs WHERE 1 = 0".into(), params: vec![] };
        if self.query(&probe).is_err() {
            return Ok(Some("column agent_runs.fencing_epoch".into()));
        }
        Ok(None)
    }

    /// Runs one statement of the store's dialect in autocommit and returns its rows.
    pub fn query(&mut self, stmt: &Statement) -> Result<Vec<SqlRow>, StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.query(stmt),
            AnyStore::Postgres(s) => s.query(stmt),
        }
    }

    /// Runs a script (no parameters, no rows).
    pub fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.batch(sql),
            AnyStore::Postgres(s) => s.batch(sql),
        }
    }

    /// Inserts a run exactly as given.
    pub fn insert_run(&mut self, row: &RunRow) -> Result<(), StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.insert_run(row),
            AnyStore::Postgres(s) => s.insert_run(row),
        }
    }

    /// Inserts an instance exactly as given.
    pub fn insert_instance(&mut self, row: &InstanceRow) -> Result<(), StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.insert_instance(row),
            AnyStore::Postgres(s) => s.insert_instance(row),
        }
    }

    /// Inserts an intent exactly as given.
    pub fn insert_intent(&mut self, row: &IntentRow) -> Result<(), StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.insert_intent(row),
            AnyStore::Postgres(s) => s.insert_intent(row),
        }
    }
}

/// A transaction of [`AnyStore::transaction`]: statements of the store's dialect.
pub enum Tx<'a> {
    /// Inside `BEGIN IMMEDIATE` on SQLite.
    Sqlite(&'a rusqlite::Connection),
    /// Inside `BEGIN` on PostgreSQL.
    Postgres(&'a mut postgres::Client),
}

impl Tx<'_> {
    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        match self {
            Tx::Sqlite(_) => Dialect::Sqlite,
            Tx::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Runs one statement and returns its rows.
    pub fn query(&mut self, stmt: &Statement) -> Result<Vec<SqlRow>, StoreError> {
        match self {
            Tx::Sqlite(conn) => {
                let params = stmt
                    .params
                    .iter()
                    .map(|p| match p {
                        sql::SqlParam::Int(n) => Ok(rusqlite::types::Value::Integer(*n)),
                        sql::SqlParam::Text(t) => Ok(rusqlite::types::Value::Text(t.clone())),
                        sql::SqlParam::Now => Err(StoreError("sqlite: SqlParam::Now outside a request".into())),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                sqlite::query(conn, &stmt.sql, params)
            }
            Tx::Postgres(client) => pg::query(client, stmt),
        }
    }
}

impl AnyStore {
    /// Runs `f` in one transaction (SQLite: `BEGIN IMMEDIATE`, so it holds the write lock
    /// from the start; PostgreSQL: `BEGIN`, READ COMMITTED), committing when it returns `Ok`
    /// and rolling back otherwise.
    pub fn transaction<T>(&mut self, f: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.transaction(|conn| f(&mut Tx::Sqlite(conn))),
            AnyStore::Postgres(s) => s.transaction(|client| f(&mut Tx::Postgres(client))),
        }
    }
}
