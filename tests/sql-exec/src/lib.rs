//! Checks that the SQL `heart_fleet_core::sql` renders means what the core's pure evaluator
//! means. Its tests (`tests/sqlite.rs`, `tests/postgres.rs`) apply the migrations twice,
//! execute the rendered statements of every `StoreRequest` variant against a real SQLite
//! (bundled) and a real PostgreSQL server, and compare every answer and every resulting row
//! with `apply_update` / `Cond::eval` over a grid of row states and clock positions;
//! `tests/store_suite.rs` runs the core's store conformance suite
//! (`heart_fleet_core::store_suite`) on the two stores this library holds.
//!
//! The library is two thin [`LeaseStore`]s, [`SqliteStore`] and [`PgStore`]: they execute
//! what [`sql::render`] returns, hand the rows back as [`SqlRow`]s and call [`sql::decode`],
//! nothing more. Schema setup (the migrations) is the caller's.
//!
//! The drivers live only in this crate (which nothing depends on and which is not
//! published), so the core's dependency tree never contains a database driver.
//!
//! PostgreSQL tests need `DATABASE_URL` (e.g. `postgres://heart:heart@127.0.0.1:5432/heart_test`);
//! without it they print a `SKIPPED` line, or fail when `CI` is set. Each test works in a
//! schema of its own and drops it at the end.

use heart_fleet_core::sql::{self, Dialect, SqlParam, SqlRow, SqlValue};
use heart_fleet_core::{LeaseStore, StoreAnswer, StoreError, StoreRequest};
use postgres::types::{ToSql, Type};
use rusqlite::types::{Value, ValueRef};

fn failed(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("{what}: {e}"))
}

/// A [`LeaseStore`] over a SQLite connection: each request is the statement list
/// [`sql::render`] returns, run in one `BEGIN IMMEDIATE` transaction, then [`sql::decode`].
pub struct SqliteStore {
    conn: rusqlite::Connection,
}

impl SqliteStore {
    /// A store over `conn`, whose schema the caller has migrated
    /// ([`sql::migrations`]`(Dialect::Sqlite)`). `conn` must be in autocommit mode.
    pub fn new(conn: rusqlite::Connection) -> SqliteStore {
        SqliteStore { conn }
    }

    /// The connection (for seeding and inspecting rows).
    pub fn connection(&self) -> &rusqlite::Connection {
        &self.conn
    }

    fn query(&self, stmt: &str, params: Vec<Value>) -> Result<Vec<SqlRow>, StoreError> {
        let mut prepared = self.conn.prepare(stmt).map_err(|e| failed("sqlite prepare", e))?;
        let names: Vec<String> = prepared.column_names().iter().map(|s| (*s).to_owned()).collect();
        let mut rows = prepared.query(rusqlite::params_from_iter(params)).map_err(|e| failed("sqlite query", e))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| failed("sqlite step", e))? {
            let mut cells = Vec::with_capacity(names.len());
            for (i, name) in names.iter().enumerate() {
                let v = match row.get_ref(i).map_err(|e| failed("sqlite column", e))? {
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

    /// Runs the statements in order, binding [`SqlParam::Now`] to the `now` text of the
    /// first statement's (the clock read's) row.
    fn run(&self, stmts: &[sql::Statement]) -> Result<Vec<Vec<SqlRow>>, StoreError> {
        let mut out = Vec::with_capacity(stmts.len());
        let mut now: Option<String> = None;
        for stmt in stmts {
            let mut params = Vec::with_capacity(stmt.params.len());
            for p in &stmt.params {
                params.push(match p {
                    SqlParam::Int(n) => Value::Integer(*n),
                    SqlParam::Text(t) => Value::Text(t.clone()),
                    SqlParam::Now => Value::Text(
                        now.clone().ok_or_else(|| StoreError("sqlite: SqlParam::Now before the clock read".into()))?,
                    ),
                });
            }
            let rows = self.query(&stmt.sql, params)?;
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
}

impl LeaseStore for SqliteStore {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let stmts = sql::render(&req, Dialect::Sqlite).map_err(|e| failed("render", e))?;
        self.conn.execute_batch("BEGIN IMMEDIATE").map_err(|e| failed("sqlite begin", e))?;
        let rows = match self.run(&stmts) {
            Ok(rows) => rows,
            Err(e) => {
                // The statement's failure is the one to report.
                let _ = self.conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        };
        if let Err(e) = self.conn.execute_batch("COMMIT") {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(failed("sqlite commit", e));
        }
        sql::decode(&req, Dialect::Sqlite, rows).map_err(|e| failed("decode", e))
    }
}

/// A [`LeaseStore`] over a PostgreSQL connection: each request is the one statement
/// [`sql::render`] returns, run in autocommit, then [`sql::decode`].
pub struct PgStore {
    client: postgres::Client,
}

impl PgStore {
    /// A store over `client`, whose `search_path` leads to a migrated schema
    /// ([`sql::migrations`]`(Dialect::Postgres)`).
    pub fn new(client: postgres::Client) -> PgStore {
        PgStore { client }
    }

    /// The connection (for seeding and inspecting rows).
    pub fn client(&mut self) -> &mut postgres::Client {
        &mut self.client
    }
}

fn pg_value(row: &postgres::Row, i: usize, ty: &Type) -> Result<SqlValue, postgres::Error> {
    Ok(if *ty == Type::TEXT {
        row.try_get::<_, Option<String>>(i)?.map_or(SqlValue::Null, SqlValue::Text)
    } else if *ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(i)?.map_or(SqlValue::Null, |v| SqlValue::Int(i64::from(v)))
    } else if *ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(i)?.map_or(SqlValue::Null, SqlValue::Int)
    } else {
        row.try_get::<_, Option<bool>>(i)?.map_or(SqlValue::Null, SqlValue::Bool)
    })
}

impl LeaseStore for PgStore {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let stmts = sql::render(&req, Dialect::Postgres).map_err(|e| failed("render", e))?;
        let [stmt] = stmts.as_slice() else {
            return Err(StoreError(format!("postgres: render gave {} statements, not one", stmts.len())));
        };
        let mut params: Vec<Box<dyn ToSql + Sync>> = Vec::with_capacity(stmt.params.len());
        for p in &stmt.params {
            params.push(match p {
                SqlParam::Int(n) => Box::new(*n),
                SqlParam::Text(t) => Box::new(t.clone()),
                SqlParam::Now => return Err(StoreError("postgres: SqlParam::Now in a PostgreSQL statement".into())),
            });
        }
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
        let rows = self.client.query(&stmt.sql, &refs).map_err(|e| failed("postgres", e))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut cells = Vec::with_capacity(row.len());
            for (i, col) in row.columns().iter().enumerate() {
                // Anything but text, integers and booleans fails here as a type mismatch.
                let v =
                    pg_value(row, i, col.type_()).map_err(|e| failed(&format!("postgres column {}", col.name()), e))?;
                cells.push((col.name().to_owned(), v));
            }
            out.push(cells);
        }
        sql::decode(&req, Dialect::Postgres, vec![out]).map_err(|e| failed("decode", e))
    }
}
