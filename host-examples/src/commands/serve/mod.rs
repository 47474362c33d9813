//! `heart-fleet serve`: the operator console. Live Prometheus metrics (`/metrics`), a JSON API
//! (`/api/…`) and a web dashboard (`/`), served by the binary itself over HTTP/1.1 (axum on
//! tokio), reading the store of `--store`.
//!
//! * [`pool`]: the store connections, each job under a deadline.
//! * [`metrics`]: the exposition and the scrapes that share store reads.
//! * [`api`]: the JSON routes and the operator actions.
//! * `dashboard.html`: the page, one self-contained file (no CDN: it works offline).
//!
//! Safety of the process: it binds to loopback unless `--listen` names another address; it
//! logs one line per request (method, path, status, time; never a header, so never a token);
//! a handler that fails answers `{code, message}` with the core's error codes, and a panic in
//! a store job is contained by tokio's blocking pool and answered 500. Operator actions need
//! `Authorization: Bearer <token>` with the token of `--token-file` (compared in constant
//! time); without a token file the console is read-only.

pub mod api;
pub mod metrics;
pub mod pool;

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use heart_fleet_core::{ErrorCode, HeartError};
use heart_fleet_stores::{DEFAULT_STORE_URL, StoreTarget, redact};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::session::{fail, store_url};
use crate::Exit;
use crate::cli::{Global, ServeArgs};

/// What every handler shares.
pub struct Console {
    pool: Arc<pool::StorePool>,
    token_digest: Option<[u8; 32]>,
    global: Global,
    scraper: metrics::Scraper,
    counters: metrics::ProcessCounters,
}

type Shared = Arc<Console>;

/// The largest request body accepted (operator actions carry at most an operator name).
pub const BODY_LIMIT: usize = 4096;

/// An error answer: a status and `{code, message}` with the core's error codes (and
/// `unauthorized`, `forbidden`, `not-found`, `payload-too-large`, `internal` for what is about
/// HTTP rather than the fleet).
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable code.
    pub code: &'static str,
    /// In words (never a credential: store errors redact URLs).
    pub message: String,
}

impl ApiError {
    /// `400 invalid-input`.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, code: ErrorCode::InvalidInput.as_str(), message: message.into() }
    }

    /// `500 internal`.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, code: "internal", message: message.into() }
    }

    fn not_found(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::NOT_FOUND, code: "not-found", message: message.into() }
    }
}

impl From<HeartError> for ApiError {
    fn from(e: HeartError) -> ApiError {
        let status = match e.code {
            ErrorCode::InvalidInput => StatusCode::BAD_REQUEST,
            ErrorCode::RunNotFound => StatusCode::NOT_FOUND,
            ErrorCode::StoreUnavailable | ErrorCode::StoreProtocol => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::CONFLICT,
        };
        ApiError { status, code: e.code.as_str(), message: e.message }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({"code": self.code, "message": self.message}))).into_response()
    }
}

/// `serve`: runs until SIGINT or SIGTERM. Exit 2 when it cannot start (a bad store URL, an
/// unreadable or empty token file, an address it cannot bind).
pub fn run(global: &Global, args: &ServeArgs, err: &mut dyn Write) -> Exit {
    let url = store_url(global).to_owned();
    if let Err(e) = StoreTarget::parse(&url) {
        return fail(err, Exit::Error, e);
    }
    if global.store.is_none()
        && let Err(e) = heart_fleet_stores::open_migrated(DEFAULT_STORE_URL)
    {
        return fail(err, Exit::Error, e);
    }
    let token_digest = match &args.token_file {
        None => None,
        Some(path) => match read_token(path) {
            Ok(d) => Some(d),
            Err(message) => return fail(err, Exit::Error, message),
        },
    };
    if let Err(message) = global.signer() {
        return fail(err, Exit::Error, message);
    }
    let console = Arc::new(Console {
        pool: Arc::new(pool::StorePool::new(&url, args.connections, Duration::from_millis(args.store_deadline_ms))),
        token_digest,
        global: global.clone(),
        scraper: metrics::Scraper::default(),
        counters: metrics::ProcessCounters::default(),
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(err, Exit::Error, format!("serve: cannot start the runtime: {e}")),
    };
    let listener = match runtime.block_on(tokio::net::TcpListener::bind(args.listen)) {
        Ok(l) => l,
        Err(e) => return fail(err, Exit::Error, format!("serve: cannot listen on {}: {e}", args.listen)),
    };
    let bound = listener.local_addr().map_or_else(|_| args.listen.to_string(), |a| a.to_string());
    let mode = if console.token_digest.is_some() { "operator actions need the bearer token" } else { "read-only" };
    let _ = writeln!(err, "heart-fleet: serving http://{bound} for {} ({mode})", redact(&url));
    let _ = err.flush();
    // The last reference to the console (and so to the pool's connections) is dropped here,
    // after the runtime is gone: a PostgreSQL client owns a runtime of its own, which must not
    // be dropped inside an async context.
    let keep = Arc::clone(&console);
    let app = router(console);
    let served = runtime.block_on(async move {
        axum::serve(listener, app.into_make_service()).with_graceful_shutdown(shutdown_signal()).await
    });
    drop(runtime);
    drop(keep);
    match served {
        Ok(()) => Exit::Success,
        Err(e) => fail(err, Exit::Error, format!("serve: {e}")),
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = interrupt => {},
            () = terminate => {},
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

fn read_token(path: &std::path::Path) -> Result<[u8; 32], String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--token-file {shown}: {e}"))?;
    let token = text.strip_suffix('\n').map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    if token.is_empty() {
        return Err(format!("--token-file {shown}: the file is empty"));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("--token-file {shown}: a token is one line without spaces"));
    }
    Ok(Sha256::digest(token.as_bytes()).into())
}

/// Whether the request carries the configured token: `Err` is the refusal (403 without a
/// token file, 401 with a missing or wrong token). The comparison is of SHA-256 digests,
/// byte by byte without an early exit, so its time says nothing about the token.
fn authorize(console: &Console, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &console.token_digest else {
        return Err(ApiError {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            message: "this console is read-only: start it with --token-file to allow operator actions".into(),
        });
    };
    let unauthorized =
        |message: &str| ApiError { status: StatusCode::UNAUTHORIZED, code: "unauthorized", message: message.into() };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| unauthorized("an operator action needs Authorization: Bearer <token>"))?;
    let digest: [u8; 32] = Sha256::digest(given.trim().as_bytes()).into();
    let differs = digest.iter().zip(expected.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if differs == 0 { Ok(()) } else { Err(unauthorized("the bearer token is not this console's")) }
}

fn router(console: Shared) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/metrics", get(metrics_route))
        .route("/api/health", get(api::health))
        .route("/api/summary", get(api::summary))
        .route("/api/runs", get(api::runs))
        .route("/api/runs/{id}", get(api::run))
        .route("/api/runs/{id}/requeue", post(api::requeue))
        .route("/api/runs/{id}/force-release", post(api::force_release))
        .route("/api/instances", get(api::instances))
        .route("/api/instances/{id}/drain", post(api::drain))
        .route("/api/activity", get(api::activity))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(Arc::clone(&console), log_and_count))
        .with_state(console)
}

/// One line per request on stderr, and the request counter of `/metrics`.
async fn log_and_count(State(console): State<Shared>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let route = req.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let response = next.run(req).await;
    let status = response.status().as_u16();
    console.counters.request(&route, method.as_str(), status);
    let at = heart_fleet_core::Timestamp::from_millis(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64),
    )
    .map_or_else(|| "-".to_owned(), heart_fleet_core::Timestamp::to_iso);
    eprintln!("{at} {method} {path} {status} {:.1}ms", started.elapsed().as_secs_f64() * 1000.0);
    response
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!("no route {} {}", req.method(), req.uri().path()))
}

async fn metrics_route(State(console): State<Shared>) -> Response {
    let text = console.scraper.scrape(&console.pool, &console.counters).await;
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

const DASHBOARD: &str = include_str!("dashboard.html");

async fn dashboard() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
            ),
        ],
        DASHBOARD,
    )
        .into_response()
}
