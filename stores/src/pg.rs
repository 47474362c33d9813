//! [`PgStore`]: a [`LeaseStore`] over a PostgreSQL connection (tokio-postgres, driven by a
//! private single-threaded runtime, so the store is synchronous like the core's drivers).
//!
//! Each request is the one statement [`sql::render`] returns, run in autocommit (READ
//! COMMITTED, the default), then [`sql::decode`]. The statement evaluates the store's clock
//! itself (`clock_timestamp()`), so worker clock skew cannot break exclusion.
//!
//! # Deadlines
//!
//! Connecting is bounded by the URL's `connect_timeout` (default [`PG_CONNECT_TIMEOUT`]);
//! every statement by a client-side deadline ([`PgOptions::statement_timeout`], URL
//! parameter `heart_statement_timeout_ms`, default [`DEFAULT_STATEMENT_TIMEOUT`]). A server
//! that stops answering (frozen, partitioned) cannot hang a worker: past the deadline the
//! store asks the server to cancel the statement (best-effort, one second), drops the
//! connection, and the request fails with a [`StoreError`] naming what timed out. On a direct
//! connection the server's own `statement_timeout` is set a little shorter (unless the URL's
//! `options` set one; behind a pooler, which takes no startup settings, each statement runs in
//! a pipelined transaction of its own that sets it with `SET LOCAL`), so a statement that is
//! merely slow (a lock wait) is cancelled by the server first and its error comes back: it did
//! not happen. A statement the server could not
//! be asked about may still land; the recovery paths resolve it (a lease nobody holds a token
//! for expires and is swept).
//!
//! # Lost connections
//!
//! A request whose connection was lost (killed backend, server restart, network, deadline)
//! fails; the store never retries it, because a write whose outcome is unknown must be left to
//! the recovery paths (the sweep, the reconciler). The **next** request connects again. A
//! connection the server closed while the store was idle is noticed before the next request
//! is sent (its farewell is read first), so that request goes out on a new connection and
//! does not fail at all. Session state must come from the URL (`options=-csearch_path%3D…`),
//! never from `SET`.
//!
//! # Prepared statements and poolers
//!
//! On a direct connection statements are prepared once per connection and kept by their SQL
//! text (at most [`STATEMENT_CACHE`]): values are bound parameters, so a request shape renders
//! the same text every time, and after the first execution a request is one round trip.
//! Behind a transaction pooler (PgBouncer in `pool_mode = transaction`, Supabase's pooled
//! connection string) consecutive statements may reach different server connections, so named
//! prepared statements do not survive: set `pgbouncer=true` in the URL ([`PgOptions::pooler`])
//! and every statement goes out unnamed with its parameter types (`query_typed`), and
//! migrations take only a transaction-scoped advisory lock. A pooler cannot be detected from
//! the client side; the mode must be chosen.
//!
//! # TLS
//!
//! `sslmode=require`, `verify-ca` or `verify-full`: TLS or fail (`disable` and `prefer`, the
//! default, connect without TLS, as this store always did). TLS is rustls: the server's
//! certificate is always verified, against the Mozilla roots (`webpki-roots`) plus the
//! PEM certificates of `sslrootcert=PATH` (a private CA or a self-signed server), and its
//! name against the host. (libpq's `require` alone does not verify; here it does: a lease
//! layer's credentials should not go to an impostor.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use heart_fleet_core::Timestamp;
use heart_fleet_core::sql::{self, Dialect, SqlParam, SqlRow, SqlValue, Statement};
use heart_fleet_core::{LeaseStore, StoreAnswer, StoreError, StoreRequest};
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{Client, Config, Row};

use crate::failed;
use crate::held::{Held, TxConn};

/// How long connecting may take when the URL sets no `connect_timeout`
/// ([`sql::deadlines::CONNECT_TIMEOUT_MS`]).
pub const PG_CONNECT_TIMEOUT: Duration = Duration::from_millis(sql::deadlines::CONNECT_TIMEOUT_MS);

/// How long one statement may take, client-side, by default
/// ([`sql::deadlines::DEFAULT_STATEMENT_TIMEOUT_MS`]).
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_millis(sql::deadlines::DEFAULT_STATEMENT_TIMEOUT_MS);

/// How long a cancel request may take ([`sql::deadlines::CANCEL_GRACE_MS`]).
const CANCEL_GRACE: Duration = Duration::from_millis(sql::deadlines::CANCEL_GRACE_MS);

/// The most prepared statements a [`PgStore`] keeps per connection; when full, the cache is
/// emptied (the fleet renders a few dozen distinct texts, so this is a backstop).
pub const STATEMENT_CACHE: usize = 256;

/// The prepared statements of a connection, by SQL text. Hashed with FxHash, not std's
/// SipHash: the keys are our own rendered statements (about 2 KB for an acquire), not input
/// an attacker chooses, and SipHash of the text was about 4 % of a lease cycle's client
/// instructions.
type StatementCache = HashMap<String, tokio_postgres::Statement, rustc_hash::FxBuildHasher>;

/// How a [`PgStore`] talks to its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgOptions {
    /// The client-side deadline of one statement (URL: `heart_statement_timeout_ms`).
    pub statement_timeout: Duration,
    /// No named prepared statements or session state, for a transaction pooler (URL:
    /// `pgbouncer=true`).
    pub pooler: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions { statement_timeout: DEFAULT_STATEMENT_TIMEOUT, pooler: false }
    }
}

/// A parsed PostgreSQL URL: the driver's configuration, ours, and the TLS roots.
struct Target {
    config: Config,
    options: PgOptions,
    /// `sslrootcert`: extra PEM roots.
    root_cert: Option<String>,
}

/// Splits our parameters (`pgbouncer`, `heart_statement_timeout_ms`, `sslrootcert`, and
/// `sslmode=verify-ca|verify-full`, which the driver does not parse) off `url` and parses the
/// rest with the driver. Errors never contain the URL (it may hold a password).
fn parse_target(url: &str) -> Result<Target, StoreError> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut options = PgOptions::default();
    let mut root_cert = None;
    let mut kept: Vec<&str> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "pgbouncer" => {
                options.pooler = match value {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(StoreError("postgres URL: pgbouncer must be true or false".into())),
                }
            }
            "heart_statement_timeout_ms" => {
                let ms = value
                    .parse::<u64>()
                    .ok()
                    .filter(|ms| (1..=sql::deadlines::MAX_STATEMENT_TIMEOUT_MS).contains(ms))
                    .ok_or_else(|| {
                        StoreError(format!(
                            "postgres URL: heart_statement_timeout_ms must be milliseconds in 1..={}",
                            sql::deadlines::MAX_STATEMENT_TIMEOUT_MS
                        ))
                    })?;
                options.statement_timeout = Duration::from_millis(ms);
            }
            "sslrootcert" => root_cert = Some(crate::percent_decode(value)),
            "sslmode" if value == "verify-ca" || value == "verify-full" => kept.push("sslmode=require"),
            _ => kept.push(pair),
        }
    }
    let driver_url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    let mut config: Config = driver_url.parse().map_err(|e| StoreError(format!("postgres URL: {e}")))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(PG_CONNECT_TIMEOUT);
    }
    // The server abandons a statement a little before the client would give up on it, so a
    // statement stuck behind a lock is cancelled by the server (its error comes back, nothing
    // lands) instead of running once the lock goes. A pooler refuses startup parameters: there
    // each statement's transaction sets it (`query_on`).
    let user_set = config.get_options().is_some_and(|o| o.contains("statement_timeout"));
    if !options.pooler && !user_set {
        let server_ms = server_statement_timeout_ms(options.statement_timeout);
        let opts = match config.get_options() {
            Some(o) => format!("{o} -c statement_timeout={server_ms}"),
            None => format!("-c statement_timeout={server_ms}"),
        };
        config.options(&opts);
    }
    Ok(Target { config, options, root_cert })
}

/// The server-side `statement_timeout` for a client-side deadline
/// ([`sql::deadlines::server_statement_timeout_ms`]).
fn server_statement_timeout_ms(deadline: Duration) -> u64 {
    sql::deadlines::server_statement_timeout_ms(u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX))
}

/// A transaction's start behind a pooler: `BEGIN` and the server's deadline for it (a pooler
/// takes no session settings).
fn pooler_begin(options: PgOptions) -> String {
    format!("BEGIN; SET LOCAL statement_timeout = {}", server_statement_timeout_ms(options.statement_timeout))
}

/// The rustls connector: Mozilla's roots plus `root_cert`'s PEM certificates.
fn tls_connector(root_cert: Option<&str>) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some(path) = root_cert {
        let mut added = 0;
        for cert in
            CertificateDer::pem_file_iter(path).map_err(|e| StoreError(format!("postgres sslrootcert {path}: {e}")))?
        {
            let cert = cert.map_err(|e| StoreError(format!("postgres sslrootcert {path}: {e}")))?;
            roots.add(cert).map_err(|e| StoreError(format!("postgres sslrootcert {path}: {e}")))?;
            added += 1;
        }
        if added == 0 {
            return Err(StoreError(format!("postgres sslrootcert {path}: no PEM certificate in the file")));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError(format!("postgres TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// An open connection and its prepared statements.
struct Live {
    client: Client,
    /// The task driving the connection; aborted when the connection is given up.
    task: tokio::task::JoinHandle<()>,
    statements: StatementCache,
}

/// The connection state of one store.
struct Conn {
    runtime: tokio::runtime::Runtime,
    config: Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    options: PgOptions,
    live: Option<Live>,
    /// The held transaction's state on this connection ([`crate::held`]).
    held_tx: HeldTx,
}

/// Whether a held transaction is open on the connection, or was lost with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeldTx {
    None,
    Open,
    /// The connection went away with the transaction open: the server rolled it back. No
    /// statement may run (on a new connection it would run outside it) until it is settled.
    Lost,
}

/// A [`LeaseStore`] over a PostgreSQL connection. Cloning shares the connection (the
/// receipts-table sink writes through a clone between requests) and the held transaction
/// ([`crate::held`]).
#[derive(Clone)]
pub struct PgStore {
    conn: Arc<Mutex<Conn>>,
    held: Arc<Mutex<Held>>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

/// What went wrong with one statement.
enum Failure {
    /// The server answered with an error (the statement ran or was refused; the connection
    /// is fine).
    Db(tokio_postgres::Error),
    /// The connection is unusable (lost, closed, or the deadline passed): it is dropped.
    Lost(String),
}

impl Failure {
    fn of(e: tokio_postgres::Error) -> Failure {
        // The server ending the session (57P01 admin shutdown, 57P02 crash shutdown, 08xxx
        // connection exceptions) is a lost connection too, though it comes as a server error.
        let ends_session =
            e.is_closed() || e.code().is_some_and(|c| c.code().starts_with("57P") || c.code().starts_with("08"));
        if e.as_db_error().is_some() && !ends_session { Failure::Db(e) } else { Failure::Lost(pg_reason(&e)) }
    }
}

/// The most useful one-line text of a PostgreSQL error: the server's message (and detail,
/// hint) when there is one, else the driver's error with its causes.
pub(crate) fn pg_reason(e: &tokio_postgres::Error) -> String {
    let text = match e.as_db_error() {
        Some(db) => {
            let mut text = db.message().to_owned();
            if let Some(detail) = db.detail() {
                text = format!("{text} ({detail})");
            }
            if let Some(hint) = db.hint() {
                text = format!("{text}; hint: {hint}");
            }
            text
        }
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

impl Conn {
    /// The open connection, connecting first when there is none (or it was lost).
    fn live(&mut self, what: &str) -> Result<&mut Live, StoreError> {
        if self.live.is_some() {
            // A connection the server closed while this store was idle (a restart,
            // `pg_terminate_backend`) has its farewell waiting in the socket, unread: the
            // connection task runs only inside `block_on`. Let it read what is there, so the
            // request goes out on a new connection instead of failing on the dead one. Nothing
            // has been sent yet, so this is no retry. (Each yield lets the runtime poll its I/O
            // driver once, without waiting.)
            self.runtime.block_on(async {
                for _ in 0..2 {
                    tokio::task::yield_now().await;
                }
            });
        }
        if self.live.as_ref().is_some_and(|l| l.client.is_closed()) {
            self.drop_live();
        }
        // Checked after the closed connection is dropped: a transaction lost just now must
        // fail this request too, not send it on a new connection outside the transaction
        // (a receipt inserted there would land alone, its write rolled back).
        if self.held_tx == HeldTx::Lost {
            return Err(StoreError(format!(
                "{what}: postgres: the connection was lost inside the operation's transaction, which the server \
                 rolled back"
            )));
        }
        if self.live.is_none() {
            let live = self.connect().map_err(|reason| StoreError(format!("{what}: postgres connect: {reason}")))?;
            self.live = Some(live);
        }
        self.live.as_mut().ok_or_else(|| StoreError(format!("{what}: postgres: no connection")))
    }

    fn connect(&self) -> Result<Live, String> {
        let limit = self.config.get_connect_timeout().copied().unwrap_or(PG_CONNECT_TIMEOUT);
        let config = self.config.clone();
        let tls = self.tls.clone();
        // The driver's connect_timeout covers each address; this bounds the whole handshake.
        let (client, task) = self.runtime.block_on(async move {
            let connected = async {
                match tls {
                    Some(tls) => {
                        let (client, connection) = config.connect(tls).await?;
                        Ok::<_, tokio_postgres::Error>((client, tokio::spawn(async move { drop(connection.await) })))
                    }
                    None => {
                        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                        Ok((client, tokio::spawn(async move { drop(connection.await) })))
                    }
                }
            };
            match tokio::time::timeout(limit + Duration::from_secs(1), connected).await {
                Ok(Ok(pair)) => Ok(pair),
                Ok(Err(e)) => Err(pg_reason(&e)),
                Err(_) => Err(format!("no answer within {} ms", limit.as_millis())),
            }
        })?;
        Ok(Live { client, task, statements: StatementCache::default() })
    }

    /// Asks the server, best-effort and briefly, to cancel the statement that missed its
    /// deadline, so that a server that is merely slow (a lock wait) does not apply it after
    /// the client gave up. A server that does not answer cannot be asked: that statement's
    /// outcome stays unknown, for the recovery paths.
    fn cancel_in_flight(&self) {
        let Some(live) = self.live.as_ref() else { return };
        let token = live.client.cancel_token();
        let tls = self.tls.clone();
        let _ = self.runtime.block_on(async {
            tokio::time::timeout(CANCEL_GRACE, async {
                match tls {
                    Some(tls) => token.cancel_query(tls).await,
                    None => token.cancel_query(tokio_postgres::NoTls).await,
                }
            })
            .await
        });
    }

    fn drop_live(&mut self) {
        if let Some(live) = self.live.take() {
            live.task.abort();
        }
        if self.held_tx == HeldTx::Open {
            self.held_tx = HeldTx::Lost;
        }
    }

    fn batch(&mut self, what: &str, sql: &str) -> Result<(), StoreError> {
        self.run(what, async |live, _| live.client.batch_execute(sql).await.map_err(Failure::of))
    }

    /// Runs `f` on the connection within the statement deadline. A lost connection (or a
    /// missed deadline) is dropped, so the next call connects again; the failed call is not
    /// retried.
    fn run<T>(
        &mut self,
        what: &str,
        f: impl AsyncFnOnce(&mut Live, PgOptions) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let options = self.options;
        let limit = options.statement_timeout;
        self.live(what)?;
        let Conn { runtime, live, .. } = self;
        let Some(live) = live.as_mut() else { return Err(StoreError(format!("{what}: postgres: no connection"))) };
        let outcome = runtime.block_on(async { tokio::time::timeout(limit, f(live, options)).await });
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(Failure::Db(e))) => Err(StoreError(format!("{what}: {}", pg_reason(&e)))),
            Ok(Err(Failure::Lost(reason))) => {
                self.drop_live();
                Err(StoreError(format!("{what}: connection lost: {reason}")))
            }
            Err(_) => {
                self.cancel_in_flight();
                self.drop_live();
                Err(StoreError(format!(
                    "{what}: postgres: no answer within {} ms (heart_statement_timeout_ms); the connection was dropped",
                    limit.as_millis()
                )))
            }
        }
    }
}

/// One bound parameter: its driver value and its type.
type Param = (Box<dyn ToSql + Sync + Send>, Type);

/// The parameters of `stmt` as driver values, with their types.
fn params(stmt: &Statement) -> Result<Vec<Param>, StoreError> {
    let mut params: Vec<Param> = Vec::with_capacity(stmt.params.len());
    for p in &stmt.params {
        params.push(match p {
            SqlParam::Int(n) => (Box::new(*n), Type::INT8),
            SqlParam::Text(t) => (Box::new(t.clone()), Type::TEXT),
            SqlParam::Now => return Err(StoreError("postgres: SqlParam::Now in a PostgreSQL statement".into())),
        });
    }
    Ok(params)
}

/// Whether `e` says a prepared statement is gone or unusable before it ran (SQLSTATE 26000,
/// `invalid_sql_statement_name`; 0A000 `cached plan must not change result type`).
fn is_stale(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == tokio_postgres::error::SqlState::INVALID_SQL_STATEMENT_NAME
            || (*c == tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED && e.to_string().contains("cached plan"))
    })
}

/// One statement on `live`: unnamed and typed behind a pooler, else through the
/// connection's prepared-statement cache (a cached statement the server no longer knows, or
/// whose result type changed with the schema, fails without having run: it is prepared again
/// and run once more).
async fn query_on(
    live: &mut Live,
    options: PgOptions,
    stmt: &Statement,
    in_transaction: bool,
) -> Result<Vec<Row>, Failure> {
    let params = params(stmt).map_err(|e| Failure::Lost(e.0))?;
    if options.pooler {
        let typed: Vec<(&(dyn ToSql + Sync), Type)> =
            params.iter().map(|(v, t)| (v.as_ref() as &(dyn ToSql + Sync), t.clone())).collect();
        if in_transaction {
            return live.client.query_typed(&stmt.sql, &typed).await.map_err(Failure::of);
        }
        // A pooler takes no session settings, and a cancel request it forwards can arrive after
        // the lock a statement waits for is gone (the statement then lands after the client
        // gave up). So the statement runs in a transaction of its own that sets the server's
        // deadline first: BEGIN + SET LOCAL, the statement, COMMIT, pipelined (sent together,
        // one round trip). A failed statement aborts the transaction; COMMIT then rolls it back.
        let begin = pooler_begin(options);
        let (began, rows, committed) = tokio::join!(
            live.client.batch_execute(&begin),
            live.client.query_typed(&stmt.sql, &typed),
            live.client.batch_execute("COMMIT")
        );
        began.map_err(Failure::of)?;
        let rows = rows.map_err(Failure::of)?;
        committed.map_err(Failure::of)?;
        return Ok(rows);
    }
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| v.as_ref() as &(dyn ToSql + Sync)).collect();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let prepared = match live.statements.get(&stmt.sql) {
            Some(s) => s.clone(),
            None => {
                let s = live.client.prepare(&stmt.sql).await.map_err(Failure::of)?;
                if live.statements.len() >= STATEMENT_CACHE {
                    live.statements.clear();
                }
                live.statements.insert(stmt.sql.clone(), s.clone());
                s
            }
        };
        match live.client.query(&prepared, &refs).await {
            Err(e) if attempts == 1 && is_stale(&e) => {
                live.statements.remove(&stmt.sql);
            }
            other => return other.map_err(Failure::of),
        }
    }
}

impl PgStore {
    /// Connects to `url` (`postgres://USER:PASSWORD@HOST:PORT/DB?…`: libpq-style parameters
    /// such as `options=-csearch_path%3Dmy_schema`, `sslmode`, `connect_timeout`, plus ours:
    /// `pgbouncer=true`, `heart_statement_timeout_ms`, `sslrootcert`; see the module docs).
    /// Fails when the server cannot be reached; later requests reconnect on their own.
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        let target = parse_target(url)?;
        // `prefer` (the driver's default) connects without TLS, as libpq's opportunistic mode
        // would against a server without it; TLS is asked for with `require` / `verify-*`.
        let tls = match target.config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Require => Some(tls_connector(target.root_cert.as_deref())?),
            _ => None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError(format!("postgres: cannot start the I/O runtime: {e}")))?;
        let mut conn =
            Conn { runtime, config: target.config, tls, options: target.options, live: None, held_tx: HeldTx::None };
        conn.live = Some(conn.connect().map_err(|reason| StoreError(format!("postgres connect: {reason}")))?);
        Ok(PgStore { conn: Arc::new(Mutex::new(conn)), held: Arc::default() })
    }

    fn conn(&self) -> MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The options in force (from the URL).
    pub fn options(&self) -> PgOptions {
        self.conn().options
    }

    /// Runs one statement (`$n` placeholders) in autocommit and returns its rows. Columns
    /// must be text, integers or booleans (cast anything else to text).
    pub fn query(&self, stmt: &Statement) -> Result<Vec<SqlRow>, StoreError> {
        let mut conn = self.conn();
        // Inside the held transaction (the sink's receipt inserts) a statement must not open
        // one of its own.
        let in_transaction = self.held().is_open();
        let rows = conn.run("postgres", async |live, options| query_on(live, options, stmt, in_transaction).await)?;
        sql_rows(&rows)
    }

    /// Holds each operation's writes in one transaction until it settles ([`crate::held`]).
    pub(crate) fn hold_writes(&self) {
        self.held().enabled = true;
    }

    pub(crate) fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a script of statements (simple query protocol, no rows).
    pub fn batch(&self, sql: &str) -> Result<(), StoreError> {
        self.conn().run("postgres", async |live, _| live.client.batch_execute(sql).await.map_err(Failure::of))
    }

    /// Runs `f` inside `BEGIN` … `COMMIT` (`ROLLBACK` when it fails), on one connection (so
    /// behind a transaction pooler the whole transaction reaches one server connection).
    pub fn transaction<T>(&self, f: impl FnOnce(&mut PgTx<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self.conn();
        // Behind a pooler the server's deadline is set for the transaction (see `query_on`).
        let begin = if conn.options.pooler { pooler_begin(conn.options) } else { "BEGIN".to_owned() };
        conn.run("postgres begin", async |live, _| live.client.batch_execute(&begin).await.map_err(Failure::of))?;
        let mut tx = PgTx { conn: &mut conn };
        let out = match f(&mut tx) {
            Ok(v) => v,
            Err(e) => {
                let _ = conn.run("postgres rollback", async |live, _| {
                    live.client.batch_execute("ROLLBACK").await.map_err(Failure::of)
                });
                return Err(e);
            }
        };
        if let Err(e) =
            conn.run("postgres commit", async |live, _| live.client.batch_execute("COMMIT").await.map_err(Failure::of))
        {
            let _ = conn.run("postgres rollback", async |live, _| {
                live.client.batch_execute("ROLLBACK").await.map_err(Failure::of)
            });
            return Err(e);
        }
        Ok(out)
    }

    /// Drops the connection now (the next request connects again): what a lost connection
    /// does, for tests and for hosts that know the server went away.
    pub fn disconnect(&self) {
        self.conn().drop_live();
    }
}

/// Statements inside [`PgStore::transaction`].
pub struct PgTx<'a> {
    conn: &'a mut Conn,
}

impl PgTx<'_> {
    /// The same transaction, borrowed for a shorter time.
    pub fn reborrow(&mut self) -> PgTx<'_> {
        PgTx { conn: &mut *self.conn }
    }

    /// Runs one statement and returns its rows.
    pub fn query(&mut self, stmt: &Statement) -> Result<Vec<SqlRow>, StoreError> {
        let rows = self.conn.run("postgres", async |live, options| query_on(live, options, stmt, true).await)?;
        sql_rows(&rows)
    }

    /// Runs a script of statements (simple query protocol, no rows).
    pub fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.conn.run("postgres", async |live, _| live.client.batch_execute(sql).await.map_err(Failure::of))
    }
}

/// A column in the binary form the server sent, for the types [`native_text`] converts.
struct Binary<'a>(&'a [u8]);

impl<'a> FromSql<'a> for Binary<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Binary(raw))
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ || *ty == Type::UUID || *ty == Type::JSONB
    }
}

/// PostgreSQL's epoch (2000-01-01T00:00:00Z), in milliseconds after the Unix epoch: a
/// `timestamptz` counts microseconds from it.
const PG_EPOCH_MS: i64 = 946_684_800_000;

/// The text the core's decoder reads for a column that a [`sql::PgColumns::Native`] statement
/// selects in its own type: a `timestamptz` as `toISOString()` (truncated to the millisecond,
/// as the text statements' `to_char` does), a `uuid` in its canonical form, `jsonb` as its JSON
/// text. An instant outside years 0000-9999 (or infinity) becomes text the decoder refuses,
/// as it refuses the text statements' form of it (`store-protocol`).
fn native_text(ty: &Type, raw: &[u8]) -> Result<String, String> {
    if *ty == Type::TIMESTAMPTZ {
        let micros = i64::from_be_bytes(raw.try_into().map_err(|_| "a timestamptz that is not 8 bytes")?);
        return Ok(match micros {
            i64::MAX => "infinity".to_owned(),
            i64::MIN => "-infinity".to_owned(),
            _ => {
                let ms = micros.div_euclid(1000) + PG_EPOCH_MS;
                match Timestamp::from_millis(ms) {
                    Some(t) => t.to_iso(),
                    None => format!("{ms} ms after 1970, outside the years 0000-9999"),
                }
            }
        });
    }
    if *ty == Type::UUID {
        let bytes: &[u8; 16] = raw.try_into().map_err(|_| "a uuid that is not 16 bytes")?;
        let mut out = String::with_capacity(36);
        for (i, b) in bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                out.push('-');
            }
            for nibble in [b >> 4, b & 0xf] {
                out.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
            }
        }
        return Ok(out);
    }
    // jsonb: a version byte (1), then the JSON text.
    match raw.split_first() {
        Some((1, text)) => std::str::from_utf8(text).map(str::to_owned).map_err(|e| format!("jsonb: {e}")),
        _ => Err("a jsonb value of an unknown version".to_owned()),
    }
}

fn pg_value(row: &Row, i: usize, ty: &Type) -> Result<SqlValue, String> {
    if Binary::accepts(ty) {
        let raw: Option<Binary<'_>> = row.try_get(i).map_err(|e| e.to_string())?;
        return raw.map_or(Ok(SqlValue::Null), |b| native_text(ty, b.0).map(SqlValue::Text));
    }
    pg_plain_value(row, i, ty).map_err(|e| e.to_string())
}

fn pg_plain_value(row: &Row, i: usize, ty: &Type) -> Result<SqlValue, tokio_postgres::Error> {
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

/// Driver rows as [`SqlRow`]s (columns must be text, integers, booleans, or the
/// `timestamptz`, `uuid` and `jsonb` of a [`sql::PgColumns::Native`] statement, as text).
pub fn sql_rows(rows: &[Row]) -> Result<Vec<SqlRow>, StoreError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let mut cells = Vec::with_capacity(row.len());
        for (i, col) in row.columns().iter().enumerate() {
            // Any other type fails here as a type mismatch.
            let v = pg_value(row, i, col.type_()).map_err(|e| failed(&format!("postgres column {}", col.name()), e))?;
            cells.push((col.name().to_owned(), v));
        }
        out.push(cells);
    }
    Ok(out)
}

/// The held transaction's calls on the connection.
impl TxConn for Conn {
    fn begin(&mut self) -> Result<(), StoreError> {
        // Behind a pooler the server's deadline is set for the transaction (see `query_on`).
        let begin = if self.options.pooler { pooler_begin(self.options) } else { "BEGIN".to_owned() };
        self.batch("postgres begin", &begin)?;
        self.held_tx = HeldTx::Open;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        // A lost transaction is not committed on a new connection (where COMMIT would only
        // warn that none is open): `live` refuses, and the settle reports the rollback.
        let committed = self.batch("postgres commit", "COMMIT");
        self.held_tx = HeldTx::None;
        committed
    }

    fn rollback(&mut self) {
        if self.held_tx == HeldTx::Open {
            let _ = self.batch("postgres rollback", "ROLLBACK");
        }
        self.held_tx = HeldTx::None;
    }
}

impl LeaseStore for PgStore {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        // The driver reads results in binary: the statement need not format its columns.
        let stmt = &sql::render_pg_for(&req, sql::PgColumns::Native).map_err(|e| failed("render", e))?;
        let rows = {
            let mut conn = self.conn();
            let mut held = self.held();
            let in_transaction = held.enter(&mut *conn, req.is_write())?;
            let rows = conn.run("postgres", async |live, options| query_on(live, options, stmt, in_transaction).await);
            match rows {
                Ok(rows) => rows,
                Err(e) if in_transaction => return Err(held.abort(&mut *conn, e)),
                Err(e) => return Err(e),
            }
        };
        sql::decode(&req, Dialect::Postgres, vec![sql_rows(&rows)?]).map_err(|e| failed("decode", e))
    }

    fn settle(&mut self) -> Result<(), StoreError> {
        let mut conn = self.conn();
        self.held().settle(&mut *conn)
    }

    fn abandon(&mut self) {
        let mut conn = self.conn();
        self.held().abandon(&mut *conn);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn our_url_parameters_are_split_off_and_checked() {
        let t = parse_target(
            "postgres://u:pw@127.0.0.1:6432/db?pgbouncer=true&heart_statement_timeout_ms=250&sslmode=verify-full&\
             sslrootcert=%2Ftmp%2Fca.pem&connect_timeout=2",
        )
        .unwrap();
        assert!(t.options.pooler);
        assert_eq!(t.options.statement_timeout, Duration::from_millis(250));
        assert_eq!(t.root_cert.as_deref(), Some("/tmp/ca.pem"));
        assert_eq!(t.config.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        assert_eq!(t.config.get_connect_timeout(), Some(&Duration::from_secs(2)));
        let plain = parse_target("postgres://u@h/db").unwrap();
        assert_eq!(plain.options, PgOptions::default());
        assert_eq!(plain.config.get_connect_timeout(), Some(&PG_CONNECT_TIMEOUT));
        for bad in
            ["postgres://h/db?pgbouncer=yes", "postgres://h/db?heart_statement_timeout_ms=0", "postgres://h/db?nope=1"]
        {
            let e = parse_target(bad).err().unwrap().0;
            assert!(e.starts_with("postgres URL: "), "{bad}: {e}");
        }
        // A driver error never echoes the URL (it may hold a password).
        let e = parse_target("postgres://u:hunter2@h/db?nope=1").err().unwrap().0;
        assert!(!e.contains("hunter2"), "{e}");
    }
}
