//! [`PgStore`]: a [`LeaseStore`] over one PostgreSQL connection (the sync `postgres` crate).
//!
//! Each request is the one statement [`sql::render`] returns, run in autocommit (READ
//! COMMITTED, the default), then [`sql::decode`]. The statement evaluates the store's clock
//! itself (`clock_timestamp()`), so worker clock skew cannot break exclusion.
//!
//! Statements are prepared once per connection and kept by their SQL text (at most
//! [`STATEMENT_CACHE`] of them): values are bound parameters, so a request shape renders the
//! same text every time and the set of texts is small. After the first execution of a shape,
//! a request is one round trip (Bind/Execute/Sync), and the server plans it from its cache
//! instead of parsing and planning a 2–3 KB statement again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use heart_fleet_core::sql::{self, Dialect, SqlParam, SqlRow, SqlValue, Statement};
use heart_fleet_core::{LeaseStore, StoreAnswer, StoreError, StoreRequest};
use postgres::types::{ToSql, Type};

use crate::failed;

/// A [`LeaseStore`] over a PostgreSQL connection. Cloning shares the connection (the
/// receipts-table sink writes through a clone between requests).
#[derive(Clone)]
pub struct PgStore {
    client: Arc<Mutex<postgres::Client>>,
    /// Prepared statements of `client`, by SQL text. Lock order: `client`, then this.
    statements: Arc<Mutex<StatementCache>>,
}

/// The most prepared statements a [`PgStore`] keeps per connection; when full, the cache is
/// emptied (the fleet renders a few dozen distinct texts, so this is a backstop).
pub const STATEMENT_CACHE: usize = 256;

/// Prepared statements of one connection, by SQL text, cleared when full.
#[derive(Default)]
struct StatementCache {
    by_sql: HashMap<String, postgres::Statement>,
}

impl StatementCache {
    /// The prepared statement for `sql`, preparing it on `client` if it is not cached.
    fn get(&mut self, client: &mut postgres::Client, sql: &str) -> Result<postgres::Statement, postgres::Error> {
        if let Some(stmt) = self.by_sql.get(sql) {
            return Ok(stmt.clone());
        }
        let stmt = client.prepare(sql)?;
        if self.by_sql.len() >= STATEMENT_CACHE {
            self.by_sql.clear();
        }
        self.by_sql.insert(sql.to_owned(), stmt.clone());
        Ok(stmt)
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    /// A store over `client`, whose `search_path` leads to a migrated schema
    /// ([`sql::migrations`]`(Dialect::Postgres)`).
    pub fn new(client: postgres::Client) -> PgStore {
        PgStore { client: Arc::new(Mutex::new(client)), statements: Arc::default() }
    }

    /// Connects to `url` (`postgres://USER:PASSWORD@HOST:PORT/DB`, libpq-style parameters such
    /// as `?options=-csearch_path%3Dmy_schema` allowed), without TLS.
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        postgres::Client::connect(url, postgres::NoTls).map(PgStore::new).map_err(|e| failed("postgres connect", e))
    }

    /// The connection (for seeding and inspecting rows). Do not hold it across a request.
    pub fn client(&self) -> MutexGuard<'_, postgres::Client> {
        self.client.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one statement (`$n` placeholders) in autocommit and returns its rows. Columns
    /// must be text, integers or booleans (cast anything else to text). Not cached (see
    /// [`LeaseStore::execute`] for the cached path).
    pub fn query(&self, stmt: &Statement) -> Result<Vec<SqlRow>, StoreError> {
        query(&mut self.client(), stmt)
    }

    /// Runs one statement through the connection's prepared-statement cache.
    ///
    /// A cached statement the server no longer knows (someone ran `DEALLOCATE` / `DISCARD
    /// ALL` through [`PgStore::client`]) or can no longer use (its result type changed with the
    /// schema) fails without having run; it is then dropped from the cache and prepared and
    /// run once more.
    fn query_cached(&self, stmt: &Statement) -> Result<Vec<SqlRow>, StoreError> {
        let params = params(stmt)?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
        let mut client = self.client();
        let mut cache = self.statements.lock().unwrap_or_else(PoisonError::into_inner);
        let prepared = cache.get(&mut client, &stmt.sql).map_err(|e| failed("postgres prepare", e))?;
        let rows = match client.query(&prepared, &refs) {
            Err(e) if is_stale(&e) => {
                cache.by_sql.remove(&stmt.sql);
                let prepared = cache.get(&mut client, &stmt.sql).map_err(|e| failed("postgres prepare", e))?;
                client.query(&prepared, &refs)
            }
            other => other,
        }
        .map_err(|e| failed("postgres", e))?;
        sql_rows(&rows)
    }

    /// Runs a script of statements (simple query protocol, no rows).
    pub fn batch(&self, sql: &str) -> Result<(), StoreError> {
        self.client().batch_execute(sql).map_err(|e| failed("postgres", e))
    }

    /// Runs `f` inside `BEGIN` … `COMMIT` (`ROLLBACK` when it fails).
    pub fn transaction<T>(
        &self,
        f: impl FnOnce(&mut postgres::Client) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.client();
        client.batch_execute("BEGIN").map_err(|e| failed("postgres begin", e))?;
        let out = match f(&mut client) {
            Ok(v) => v,
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK");
                return Err(e);
            }
        };
        if let Err(e) = client.batch_execute("COMMIT") {
            let _ = client.batch_execute("ROLLBACK");
            return Err(failed("postgres commit", e));
        }
        Ok(out)
    }
}

fn pg_value(row: &postgres::Row, i: usize, ty: &Type) -> Result<SqlValue, postgres::Error> {
    Ok(if *ty == Type::TEXT || *ty == Type::VARCHAR || *ty == Type::NAME {
        row.try_get::<_, Option<String>>(i)?.map_or(SqlValue::Null, SqlValue::Text)
    } else if *ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(i)?.map_or(SqlValue::Null, |v| SqlValue::Int(i64::from(v)))
    } else if *ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(i)?.map_or(SqlValue::Null, SqlValue::Int)
    } else {
        row.try_get::<_, Option<bool>>(i)?.map_or(SqlValue::Null, SqlValue::Bool)
    })
}

/// Whether `e` says a prepared statement is gone or unusable before it ran (SQLSTATE 26000,
/// `invalid_sql_statement_name`; 0A000 `cached plan must not change result type`).
fn is_stale(e: &postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == postgres::error::SqlState::INVALID_SQL_STATEMENT_NAME
            || (*c == postgres::error::SqlState::FEATURE_NOT_SUPPORTED && e.to_string().contains("cached plan"))
    })
}

/// The parameters of `stmt` as driver values.
fn params(stmt: &Statement) -> Result<Vec<Box<dyn ToSql + Sync>>, StoreError> {
    let mut params: Vec<Box<dyn ToSql + Sync>> = Vec::with_capacity(stmt.params.len());
    for p in &stmt.params {
        params.push(match p {
            SqlParam::Int(n) => Box::new(*n),
            SqlParam::Text(t) => Box::new(t.clone()),
            SqlParam::Now => return Err(StoreError("postgres: SqlParam::Now in a PostgreSQL statement".into())),
        });
    }
    Ok(params)
}

/// Runs one statement on `client` and returns its rows as [`SqlRow`]s (prepared, run and
/// closed: no cache).
pub fn query(client: &mut postgres::Client, stmt: &Statement) -> Result<Vec<SqlRow>, StoreError> {
    let params = params(stmt)?;
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
    let rows = client.query(&stmt.sql, &refs).map_err(|e| failed("postgres", e))?;
    sql_rows(&rows)
}

/// Driver rows as [`SqlRow`]s (columns must be text, integers or booleans), for code that
/// runs rendered statements through its own `postgres::Client` calls.
pub fn sql_rows(rows: &[postgres::Row]) -> Result<Vec<SqlRow>, StoreError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let mut cells = Vec::with_capacity(row.len());
        for (i, col) in row.columns().iter().enumerate() {
            // Anything but text, integers and booleans fails here as a type mismatch.
            let v = pg_value(row, i, col.type_()).map_err(|e| failed(&format!("postgres column {}", col.name()), e))?;
            cells.push((col.name().to_owned(), v));
        }
        out.push(cells);
    }
    Ok(out)
}

impl LeaseStore for PgStore {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let stmts = sql::render(&req, Dialect::Postgres).map_err(|e| failed("render", e))?;
        let [stmt] = stmts.as_slice() else {
            return Err(StoreError(format!("postgres: render gave {} statements, not one", stmts.len())));
        };
        let rows = self.query_cached(stmt)?;
        sql::decode(&req, Dialect::Postgres, vec![rows]).map_err(|e| failed("decode", e))
    }
}
