//! [`SqliteStore`]: a [`LeaseStore`] over one SQLite connection (rusqlite, bundled SQLite).
//!
//! Each request is the statement list [`sql::render`] returns, run in one `BEGIN IMMEDIATE`
//! transaction (the write lock is taken before the clock read, so every statement sees one
//! `now` and one state), then [`sql::decode`]. Connections opened by [`SqliteStore::open`]
//! use WAL journaling and a busy timeout, so several processes can share one database file:
//! a writer waits for the lock (up to [`BUSY_TIMEOUT`]) instead of failing.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use heart_fleet_core::sql::{self, Dialect, SqlParam, SqlRow, SqlValue, Statement};
use heart_fleet_core::{LeaseStore, StoreAnswer, StoreError, StoreRequest};
use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags};

use crate::failed;
use crate::held::{Held, TxConn};

/// How long a statement waits for another process's write lock before it fails.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A [`LeaseStore`] over a SQLite connection. Cloning shares the connection (the
/// receipts-table sink writes through a clone between requests) and the held transaction
/// ([`crate::held`]).
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    held: Arc<Mutex<Held>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// A store over `conn`, whose schema the caller has migrated
    /// ([`sql::migrations`]`(Dialect::Sqlite)`). `conn` must be in autocommit mode.
    pub fn new(conn: Connection) -> SqliteStore {
        SqliteStore { conn: Arc::new(Mutex::new(conn)), held: Arc::default() }
    }

    /// Opens the database file at `path` (created only when `create` is set) in WAL mode
    /// with a busy timeout of [`BUSY_TIMEOUT`].
    pub fn open(path: &Path, create: bool) -> Result<SqliteStore, StoreError> {
        let mut flags =
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        if create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sq("sqlite open", &e))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| sq("sqlite busy timeout", &e))?;
        // Switching a file to WAL takes an exclusive lock, and SQLite answers SQLITE_BUSY at
        // once (no busy handler) when another connection, say a second process opening the
        // same new file, holds one: wait for it within the busy timeout.
        let started = std::time::Instant::now();
        let mode: String = loop {
            match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)) {
                Err(rusqlite::Error::SqliteFailure(f, _))
                    if f.code == rusqlite::ErrorCode::DatabaseBusy && started.elapsed() < BUSY_TIMEOUT =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => break other.map_err(|e| sq("sqlite WAL mode", &e))?,
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError(format!("sqlite: the database refused WAL mode (journal mode {mode})")));
        }
        // WAL + NORMAL: a commit survives a crash of the process (not of the machine).
        conn.execute_batch("PRAGMA synchronous = NORMAL").map_err(|e| sq("sqlite synchronous", &e))?;
        Ok(SqliteStore::new(conn))
    }

    /// Opens the database file at `path` read-only, changing nothing in it (no journal mode,
    /// no pragma, no write; only the connection's busy timeout is set): for looking at a
    /// file's schema before it is known to be ours.
    pub fn open_read_only(path: &Path) -> Result<SqliteStore, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sq("sqlite open", &e))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| sq("sqlite busy timeout", &e))?;
        Ok(SqliteStore::new(conn))
    }

    /// A private in-memory database (`sqlite::memory:`).
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        Connection::open_in_memory().map(SqliteStore::new).map_err(|e| sq("sqlite open", &e))
    }

    /// The connection (for seeding and inspecting rows). Do not hold it across a request.
    pub fn connection(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one statement (`?n` placeholders) in autocommit mode and returns its rows.
    /// [`SqlParam::Now`] is refused: there is no clock read to bind it to.
    pub fn query(&self, stmt: &Statement) -> Result<Vec<SqlRow>, StoreError> {
        let conn = self.connection();
        query(&conn, &stmt.sql, params(&stmt.params, None)?)
    }

    /// Runs a script of statements (no parameters, no rows).
    pub fn batch(&self, sql: &str) -> Result<(), StoreError> {
        self.connection().execute_batch(sql).map_err(|e| sq("sqlite", &e))
    }

    /// Runs `f` inside `BEGIN IMMEDIATE` … `COMMIT` (`ROLLBACK` when it fails).
    pub fn transaction<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        transaction(&self.connection(), f)
    }

    /// Holds each operation's writes in one transaction until it settles ([`crate::held`]).
    pub(crate) fn hold_writes(&self) {
        self.held().enabled = true;
    }

    pub(crate) fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The held transaction's calls on a SQLite connection.
struct SqliteTx<'c>(&'c Connection);

impl TxConn for SqliteTx<'_> {
    fn begin(&mut self) -> Result<(), StoreError> {
        self.0.execute_batch("BEGIN IMMEDIATE").map_err(|e| sq("sqlite begin", &e))
    }
    fn commit(&mut self) -> Result<(), StoreError> {
        self.0.execute_batch("COMMIT").map_err(|e| sq("sqlite commit", &e))
    }
    fn rollback(&mut self) {
        // Fails only when no transaction is open, which is what was wanted.
        let _ = self.0.execute_batch("ROLLBACK");
    }
}

/// Runs `f` on `conn` inside `BEGIN IMMEDIATE` … `COMMIT` (`ROLLBACK` when it fails).
fn transaction<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE").map_err(|e| sq("sqlite begin", &e))?;
    let out = match f(conn) {
        Ok(v) => v,
        Err(e) => {
            // The statement's failure is the one to report.
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    };
    if let Err(e) = conn.execute_batch("COMMIT") {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(sq("sqlite commit", &e));
    }
    Ok(out)
}

/// The one-line text of a SQLite error: the database's message, without the SQL it was
/// about (a failed script would otherwise be quoted whole), on one line.
pub fn reason(e: &rusqlite::Error) -> String {
    let text = match e {
        rusqlite::Error::SqlInputError { msg, .. } | rusqlite::Error::SqliteFailure(_, Some(msg)) => msg.clone(),
        other => other.to_string(),
    };
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

fn sq(what: &str, e: &rusqlite::Error) -> StoreError {
    failed(what, reason(e))
}

fn params(ps: &[SqlParam], now: Option<&str>) -> Result<Vec<Value>, StoreError> {
    ps.iter()
        .map(|p| match p {
            SqlParam::Int(n) => Ok(Value::Integer(*n)),
            SqlParam::Text(t) => Ok(Value::Text(t.clone())),
            SqlParam::Now => now
                .map(|t| Value::Text(t.to_owned()))
                .ok_or_else(|| StoreError("sqlite: SqlParam::Now before the clock read".into())),
        })
        .collect()
}

/// Runs one statement on `conn` and returns its rows as [`SqlRow`]s.
pub fn query(conn: &Connection, stmt: &str, params: Vec<Value>) -> Result<Vec<SqlRow>, StoreError> {
    let mut prepared = conn.prepare(stmt).map_err(|e| sq("sqlite prepare", &e))?;
    let names: Vec<String> = prepared.column_names().iter().map(|s| (*s).to_owned()).collect();
    let mut rows = prepared.query(rusqlite::params_from_iter(params)).map_err(|e| sq("sqlite query", &e))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(|e| sq("sqlite step", &e))? {
        let mut cells = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let v = match row.get_ref(i).map_err(|e| sq("sqlite column", &e))? {
                ValueRef::Null => SqlValue::Null,
                ValueRef::Integer(n) => SqlValue::Int(n),
                ValueRef::Real(f) => SqlValue::Real(f),
                ValueRef::Text(t) => {
                    SqlValue::Text(String::from_utf8(t.to_vec()).map_err(|e| failed("sqlite text", e))?)
                }
                ValueRef::Blob(_) => return Err(StoreError(format!("sqlite: a blob in column {name}"))),
            };
            cells.push((name.clone(), v));
        }
        out.push(cells);
    }
    Ok(out)
}

/// Runs the statements in order, binding [`SqlParam::Now`] to the `now` text of the first
/// statement's (the clock read's) row.
fn run(conn: &Connection, stmts: &[Statement]) -> Result<Vec<Vec<SqlRow>>, StoreError> {
    let mut out = Vec::with_capacity(stmts.len());
    let mut now: Option<String> = None;
    for stmt in stmts {
        let rows = query(conn, &stmt.sql, params(&stmt.params, now.as_deref())?)?;
        if now.is_none() {
            now = rows.first().and_then(|row| {
                row.iter().find_map(|(name, v)| match v {
                    SqlValue::Text(t) if name == "now" => Some(t.clone()),
                    _ => None,
                })
            });
        }
        out.push(rows);
    }
    Ok(out)
}

impl LeaseStore for SqliteStore {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let stmts = sql::render(&req, Dialect::Sqlite).map_err(|e| failed("render", e))?;
        let rows = {
            let conn = self.connection();
            let mut held = self.held();
            let mut tx = SqliteTx(&conn);
            if held.enter(&mut tx, req.is_write())? {
                run(&conn, &stmts).map_err(|e| held.abort(&mut tx, e))?
            } else {
                drop(held);
                transaction(&conn, |conn| run(conn, &stmts))?
            }
        };
        sql::decode(&req, Dialect::Sqlite, rows).map_err(|e| failed("decode", e))
    }

    fn settle(&mut self) -> Result<(), StoreError> {
        let conn = self.connection();
        self.held().settle(&mut SqliteTx(&conn))
    }

    fn abandon(&mut self) {
        let conn = self.connection();
        self.held().abandon(&mut SqliteTx(&conn));
    }
}
