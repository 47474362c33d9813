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
//! one file; [`open`] looks at a file read-only first and changes nothing in a file whose
//! schema is not ours (only [`connect`], for [`migrate`], and [`open_migrated`] write to it).
//! Every statement failure is a [`StoreError`]: never a panic, never a silent miss.
//!
//! The drivers live here, never in the core, so the core's dependency tree holds no
//! database crate.

pub mod held;
pub mod pg;
pub mod receipts;
pub mod seed;
pub mod sqlite;

use std::fmt;
use std::path::{Path, PathBuf};

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

pub use pg::{DEFAULT_STATEMENT_TIMEOUT, PG_CONNECT_TIMEOUT, PgOptions};

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

/// What a redacted credential is replaced with.
const MASK: &str = "****";

/// A store URL, or a libpq key/value connection string, with every credential replaced by
/// `****`, for messages, reports and logs:
///
/// * the password of the URL's userinfo (`postgres://user:****@host/db`; a password with an
///   unencoded `@`, `/` or `?` is hidden whole);
/// * the value of every query parameter whose name is a secret (`?password=****`,
///   `sslpassword=****`; any name containing `password`, `secret` or `token`, or `pass`,
///   `passwd`, `pwd`, matched case-insensitively and after percent-decoding);
/// * the same parameters in a key/value string (`host=h password=****`, a quoted value
///   `password='…'` whole, backslash escapes included).
///
/// Everything else is kept as written. Where the text is ambiguous, more is hidden, never less.
pub fn redact(url: &str) -> String {
    match url.find("://") {
        Some(i) => redact_url(&url[..i + 3], &url[i + 3..]),
        None => redact_key_values(url),
    }
}

/// Whether a parameter name names a credential.
fn is_secret_key(key: &str) -> bool {
    let key = percent_decode(key).trim().to_ascii_lowercase();
    ["password", "secret", "token"].iter().any(|s| key.contains(s)) || matches!(key.as_str(), "pass" | "passwd" | "pwd")
}

/// `%XX` escapes decoded (URL query keys and values).
pub(crate) fn percent_decode(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let hex =
            b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (c, hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `scheme` is `postgres://` (…), `rest` what follows it.
fn redact_url(scheme: &str, rest: &str) -> String {
    let query_at = rest.find('?');
    let before_query = &rest[..query_at.unwrap_or(rest.len())];
    // The userinfo ends at the last '@' before the query; a '?' in an unencoded password
    // moves that '@' behind it (no parameter, `=` or `&`, stands between them then).
    let at = before_query.rfind('@').or_else(|| {
        let q = query_at?;
        let a = q + rest[q..].find('@')?;
        (!rest[q..a].contains(['=', '&'])).then_some(a)
    });
    let (userinfo, after) = match at {
        Some(a) => (&rest[..a], &rest[a..]),
        None => ("", rest),
    };
    let mut out = String::from(scheme);
    match userinfo.split_once(':') {
        Some((user, _password)) => {
            out.push_str(user);
            out.push(':');
            out.push_str(MASK);
        }
        None => out.push_str(userinfo),
    }
    match after.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            out.push_str(&redact_query(query));
        }
        None => out.push_str(after),
    }
    out
}

/// `a=1&password=****`: a piece without `=` right after a secret is hidden too (an
/// unencoded `&` inside the secret).
fn redact_query(query: &str) -> String {
    let mut after_secret = false;
    let parts: Vec<String> = query
        .split('&')
        .map(|part| match part.split_once('=') {
            Some((key, _)) if is_secret_key(key) => {
                after_secret = true;
                format!("{key}={MASK}")
            }
            None if after_secret => MASK.to_owned(),
            _ => {
                after_secret = false;
                part.to_owned()
            }
        })
        .collect();
    parts.join("&")
}

/// libpq's `key=value key='quoted value'` form (spaces around `=` allowed, `\` escapes).
fn redact_key_values(text: &str) -> String {
    let b = text.as_bytes();
    let at = |i: usize| b.get(i).copied();
    let skip_space = |mut i: usize| {
        while at(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        i
    };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let start = skip_space(i);
        out.push_str(&text[i..start]);
        // Every index below stops at an ASCII byte or at the end: a char boundary.
        let mut key_end = start;
        while at(key_end).is_some_and(|c| c != b'=' && !c.is_ascii_whitespace()) {
            key_end += 1;
        }
        let eq = skip_space(key_end);
        if at(eq) != Some(b'=') {
            // A word that is no `key=`: kept (the loop goes on after it).
            out.push_str(&text[start..key_end]);
            i = key_end.max(start + 1).min(b.len());
            continue;
        }
        let value = skip_space(eq + 1);
        let mut end = value;
        if at(value) == Some(b'\'') {
            end += 1;
            while let Some(c) = at(end) {
                end += if c == b'\\' { 2 } else { 1 };
                if c == b'\'' {
                    break;
                }
            }
        } else {
            while let Some(c) = at(end).filter(|c| !c.is_ascii_whitespace()) {
                end += if c == b'\\' { 2 } else { 1 };
            }
        }
        let end = end.min(b.len());
        out.push_str(&text[start..value]);
        if is_secret_key(&text[start..key_end]) {
            out.push_str(MASK);
        } else {
            out.push_str(&text[value..end]);
        }
        i = end;
    }
    out
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

    fn settle(&mut self) -> Result<(), StoreError> {
        match self {
            AnyStore::Sqlite(s) => s.settle(),
            AnyStore::Postgres(s) => s.settle(),
        }
    }

    fn abandon(&mut self) {
        match self {
            AnyStore::Sqlite(s) => s.abandon(),
            AnyStore::Postgres(s) => s.abandon(),
        }
    }
}

/// The held transaction of a store ([`held`]), for its receipts-table sink.
impl AnyStore {
    /// From now on, this store and its clones hold each operation's writes in one transaction
    /// until the operation settles.
    pub(crate) fn hold_writes(&self) {
        match self {
            AnyStore::Sqlite(s) => s.hold_writes(),
            AnyStore::Postgres(s) => s.hold_writes(),
        }
    }

    /// A receipt could not be inserted: the held transaction, if one is open, rolls back at
    /// the settle (`true`); else the receipt recorded no held write and is lost alone.
    pub(crate) fn doom_held(&self, reason: &str) -> bool {
        match self {
            AnyStore::Sqlite(s) => s.held().doom(reason),
            AnyStore::Postgres(s) => s.held().doom(reason),
        }
    }

    /// Held transactions rolled back so far.
    pub(crate) fn held_rollbacks(&self) -> u64 {
        match self {
            AnyStore::Sqlite(s) => s.held().rollbacks,
            AnyStore::Postgres(s) => s.held().rollbacks,
        }
    }
}

/// Opens the store at `url` and checks that it was migrated. A SQLite file must exist.
pub fn open(url: &str) -> Result<AnyStore, StoreOpenError> {
    let target = StoreTarget::parse(url)?;
    let shown = redact(url);
    if let StoreTarget::SqliteFile(path) = &target {
        if !path.exists() {
            if parent_exists(path) {
                return Err(StoreOpenError::NotMigrated { url: shown, missing: "database file".into() });
            }
            return Err(unreachable_dir(&shown, path));
        }
        // Read-only until the schema is known to be ours: the read-write open below switches
        // the file to WAL mode, so a command that then failed on another application's file
        // would have changed it. Looked at read-only, that file stays byte for byte as it was.
        let probe = SqliteStore::open_read_only(path)
            .map(AnyStore::Sqlite)
            .map_err(|e| StoreOpenError::Unreachable { url: shown.clone(), reason: e.0 })?;
        drop(schema_checked(probe, &shown)?);
    }
    let store = connect_target(&target, &shown, false)?;
    schema_checked(store, &shown)
}

/// `store`, if its schema is complete; else [`StoreOpenError::NotMigrated`] naming what is missing.
fn schema_checked(mut store: AnyStore, shown: &str) -> Result<AnyStore, StoreOpenError> {
    match store.missing_schema() {
        Ok(None) => Ok(store),
        Ok(Some(missing)) => Err(StoreOpenError::NotMigrated { url: shown.to_owned(), missing }),
        Err(e) => Err(StoreOpenError::Unreachable { url: shown.to_owned(), reason: e.0 }),
    }
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
        StoreTarget::Postgres(url) => PgStore::connect(url).map(AnyStore::Postgres).map_err(unreachable),
    }
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
                // sqlite::reason: the database's one-line message, never the whole script.
                let table = |e: rusqlite::Error| failed("sqlite migrations table", sqlite::reason(&e));
                conn.execute_batch(plan.create_record_table).map_err(table)?;
                let seen: i64 = conn.query_row(plan.is_applied, [name], |r| r.get(0)).map_err(table)?;
                if seen > 0 {
                    return Ok(false);
                }
                conn.execute_batch(script).map_err(|e| failed(&format!("migration {name}"), sqlite::reason(&e)))?;
                conn.execute(plan.record, [name]).map_err(table)?;
                Ok(true)
            })?,
            AnyStore::Postgres(s) => s.transaction(|tx| {
                let named = |sql: &str| Statement {
                    sql: sql.to_owned(),
                    params: vec![sql::SqlParam::Text((*name).to_owned())],
                };
                for step in plan.lock.iter().chain([&plan.create_record_table]) {
                    tx.batch(step).map_err(|e| failed("postgres migrations table", e))?;
                }
                let rows = tx.query(&named(plan.is_applied)).map_err(|e| failed("postgres migrations table", e))?;
                let seen = rows.first().and_then(|r| r.first()).is_some_and(|(_, v)| *v != sql::SqlValue::Int(0));
                if seen {
                    return Ok(false);
                }
                tx.batch(script).map_err(|e| failed(&format!("migration {name}"), e))?;
                tx.query(&named(plan.record)).map_err(|e| failed("postgres migrations table", e))?;
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
        // Catalog questions with a count for an answer, so that a store failure stays an
        // error (a lost connection is not a missing column).
        let text = |t: &str| vec![sql::SqlParam::Text(t.into())];
        let sqlite = self.dialect() == Dialect::Sqlite;
        let (table_sql, column_sql) = match self.dialect() {
            Dialect::Sqlite => (
                "SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name = ?1",
                "SELECT count(*) AS n FROM pragma_table_info('agent_runs') WHERE name = 'fencing_epoch'",
            ),
            Dialect::Postgres => (
                "SELECT (to_regclass($1::text) IS NOT NULL)::int AS n",
                "SELECT count(*)::int AS n FROM pg_attribute WHERE attrelid = to_regclass('agent_runs') \
                 AND attname = 'fencing_epoch' AND NOT attisdropped",
            ),
        };
        let mut present = |sql: &str, params: Vec<sql::SqlParam>| -> Result<bool, StoreError> {
            let rows = self.query(&Statement { sql: sql.into(), params })?;
            Ok(rows.first().and_then(|r| r.first()).is_some_and(|(_, v)| *v == sql::SqlValue::Int(1)))
        };
        for table in REQUIRED_TABLES {
            if !present(table_sql, text(table))? {
                return Ok(Some(format!("table {table}")));
            }
        }
        if !present(column_sql, vec![])? {
            return Ok(Some("column agent_runs.fencing_epoch".into()));
        }
        // SQLite's store clock (sql::SQLITE_CLOCK reads and advances it).
        if sqlite && !present(table_sql, text("heart_clock"))? {
            return Ok(Some("table heart_clock".into()));
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
    Postgres(&'a mut pg::PgTx<'a>),
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
            Tx::Postgres(tx) => tx.query(stmt),
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
            AnyStore::Postgres(s) => s.transaction(|tx| {
                let mut tx = tx.reborrow();
                f(&mut Tx::Postgres(&mut tx))
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod redact_tests {
    use super::redact;

    #[test]
    fn the_userinfo_password_is_hidden() {
        assert_eq!(redact("postgres://u:pw@host/db"), "postgres://u:****@host/db");
        assert_eq!(redact("postgresql://heart:s3cret@127.0.0.1:5432/db"), "postgresql://heart:****@127.0.0.1:5432/db");
        assert_eq!(redact("postgres://u@host/db"), "postgres://u@host/db");
        assert_eq!(redact("postgres://host:5432/db"), "postgres://host:5432/db");
        assert_eq!(redact("postgres://u:p%40ss@h1:5432,h2:5433/db"), "postgres://u:****@h1:5432,h2:5433/db");
        // Unencoded '@', '/' and '?' inside the password: hidden whole.
        assert_eq!(redact("postgres://u:p@ss@host/db"), "postgres://u:****@host/db");
        assert_eq!(redact("postgres://u:pa/ss@host/db"), "postgres://u:****@host/db");
        assert_eq!(redact("postgres://u:pa?ss@host/db"), "postgres://u:****@host/db");
        assert_eq!(redact("postgres://u:@host/db"), "postgres://u:****@host/db");
    }

    #[test]
    fn secret_parameters_are_hidden() {
        assert_eq!(redact("postgres://u@host/db?password=hunter2"), "postgres://u@host/db?password=****");
        assert_eq!(
            redact("postgres://u:a@h/db?sslmode=require&sslpassword=k3y&application_name=x"),
            "postgres://u:****@h/db?sslmode=require&sslpassword=****&application_name=x"
        );
        assert_eq!(redact("postgres://h/db?PassWord=x&Pass%77ord=y"), "postgres://h/db?PassWord=****&Pass%77ord=****");
        assert_eq!(redact("postgres://h/db?password=a&b&c=d"), "postgres://h/db?password=****&****&c=d");
        assert_eq!(redact("postgres://h/db?password=a#b"), "postgres://h/db?password=****");
        assert_eq!(
            redact("postgres://h/db?api_token=t&client_secret=s"),
            "postgres://h/db?api_token=****&client_secret=****"
        );
        let kept = "postgres://h/db?options=-csearch_path%3Dx&connect_timeout=3";
        assert_eq!(redact(kept), kept);
        // An '@' in a parameter is no userinfo.
        let at = "postgres://h/db?application_name=a@b";
        assert_eq!(redact(at), at);
    }

    #[test]
    fn key_value_strings_are_hidden() {
        assert_eq!(redact("host=h port=1 password=hunter2 user=u"), "host=h port=1 password=**** user=u");
        assert_eq!(redact("host=h password = 'hunter 2' user=u"), "host=h password = **** user=u");
        assert_eq!(redact(r"password='it\'s secret' dbname=d"), "password=**** dbname=d");
        assert_eq!(redact(r"password=a\ b sslpassword=c"), "password=**** sslpassword=****");
        assert_eq!(redact("password='unterminated secret"), "password=****");
        assert_eq!(redact("password="), "password=****");
        assert_eq!(redact("host=ĥost password=pässwörd\\é"), "host=ĥost password=****");
        assert_eq!(redact("sqlite:/tmp/fleet.db"), "sqlite:/tmp/fleet.db");
        assert_eq!(redact("just some words"), "just some words");
        assert_eq!(redact(""), "");
        for text in ["\\", "'", "=", "==", "a='", "é=\\é", "password=\\", "x = ", "  =  '\\"] {
            let _ = redact(text); // never panics on odd input
        }
        assert!(!redact("password=\\").contains('\\'));
    }
}
