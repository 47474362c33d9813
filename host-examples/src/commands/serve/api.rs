//! The JSON API of the console.
//!
//! Reads (`GET`) go through the pool's read-only statements
//! ([`heart_fleet_core::sql::readout`]); every answer carries `now`, the store's clock, so a
//! client shows lease time left and heartbeat age as the store sees them. Operator actions
//! (`POST`) run the same fleet operations as the CLI verbs (`runs requeue`, `runs
//! force-release`, `instances drain`) through a [`Session`], so they leave the same receipts
//! in `heart_receipts`; a requeue names the operator (the body's `operator`, default
//! `heart-fleet-console`). Parameters are checked before anything is read: an unknown or
//! malformed one is `400 invalid-input`, and nothing is written.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use heart_fleet_core::sql::readout;
use heart_fleet_core::{ErrorCode, HeartError, RunStatus, Timestamp};
use heart_fleet_stores::AnyStore;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, Console, authorize};
use crate::cli::ReceiptsArg;
use crate::commands::session::Session;

/// The query parameters of a route; a malformed query string is `400 invalid-input`.
pub struct Params(BTreeMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Params, ApiError> {
        Query::<BTreeMap<String, String>>::from_request_parts(parts, state)
            .await
            .map(|Query(map)| Params(map))
            .map_err(|e| ApiError::invalid(e.body_text()))
    }
}

/// The `{id}` of a route; a path that does not decode is `400 invalid-input`.
pub struct Id(String);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Id, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(id)| Id(id))
            .map_err(|e| ApiError::invalid(e.body_text()))
    }
}

/// Refuses parameters a route does not take (a typo is an error, never silently ignored).
fn only(params: &BTreeMap<String, String>, allowed: &[&str]) -> Result<(), ApiError> {
    match params.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ApiError::invalid(format!(
            "unknown parameter {k:?} (this route takes {})",
            if allowed.is_empty() { "none".to_owned() } else { allowed.join(", ") }
        ))),
        None => Ok(()),
    }
}

fn bounded(params: &BTreeMap<String, String>, name: &str, default: u32, max: u32) -> Result<u32, ApiError> {
    match params.get(name) {
        None => Ok(default),
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::invalid(format!("{name} must be a whole number from 1 to {max}, not {text:?}"))),
        },
    }
}

fn now_of(store: &mut AnyStore) -> Result<Timestamp, HeartError> {
    let rows =
        store.query(&readout::store_now(store.dialect())).map_err(|e| HeartError::store("the store clock", &e))?;
    readout::decode_store_now(&rows)
}

/// `GET /api/health`: 200 `{status, store: "up", now}`, or 503 with `store: "down"`.
pub async fn health(State(console): State<Arc<Console>>, Params(params): Params) -> Response {
    if let Err(e) = only(&params, &[]) {
        return e.into_response();
    }
    match console.pool.run("health", now_of).await {
        Ok(now) => Json(json!({"status": "ok", "store": "up", "now": now.to_iso()})).into_response(),
        Err(e) => (e.status, Json(json!({"code": e.code, "message": e.message, "store": "down"}))).into_response(),
    }
}

/// `GET /api/summary`: the same numbers as `/metrics` (runs and instances by status,
/// receipts by event, lease gauges) as JSON, for the dashboard.
pub async fn summary(State(console): State<Arc<Console>>, Params(params): Params) -> Result<Response, ApiError> {
    only(&params, &[])?;
    // The counts are the scrapes' shared reading (the heavy part); the clock is read apart.
    let reading = console.scraper.reading(&console.pool, &console.counters).await?;
    let now = console.pool.run("summary", now_of).await?;
    let leases = &reading.leases;
    Ok(Json(json!({
        "now": now.to_iso(),
        "runs": reading.runs,
        "instances": reading.instances,
        "receipts": reading.receipts,
        "leases": {"live": leases.live, "expired": leases.expired, "oldestExpiredMs": leases.oldest_expired_ms},
    }))
    .into_response())
}

/// `GET /api/runs?status=a,b&limit=N&cursor=ID`: runs in id order, a page at a time
/// (`nextCursor` is the cursor of the next page, null after the last).
pub async fn runs(State(console): State<Arc<Console>>, Params(params): Params) -> Result<Response, ApiError> {
    only(&params, &["status", "limit", "cursor"])?;
    let statuses = match params.get("status") {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|s| RunStatus::parse(s.trim()).map_err(|e| ApiError::invalid(format!("status: {}", e.message))))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let limit = bounded(&params, "limit", 50, 500)?;
    let cursor = params.get("cursor").cloned();
    if cursor.as_deref().is_some_and(str::is_empty) {
        return Err(ApiError::invalid("cursor must not be empty"));
    }
    let (now, runs) = console
        .pool
        .run("list runs", move |store| {
            // Checked before anything is read: a cursor that is no run id is bad input.
            // One row past the page says whether there is a next page.
            let stmt = readout::run_page(store.dialect(), &statuses, cursor.as_deref(), limit + 1)?;
            let now = now_of(store)?;
            let rows = store.query(&stmt).map_err(|e| HeartError::store("list runs", &e))?;
            Ok((now, readout::decode_runs(&rows)?))
        })
        .await?;
    let mut runs = runs;
    let page = usize::try_from(limit).unwrap_or(usize::MAX);
    let next = if runs.len() > page {
        runs.truncate(page);
        runs.last().map(|r| r.id.clone())
    } else {
        None
    };
    Ok(Json(json!({"now": now.to_iso(), "runs": runs, "nextCursor": next})).into_response())
}

/// `GET /api/runs/{id}`: the row, and its receipts oldest first, each with its verification
/// (digest, link, and the run's chain), and the report of the whole run's log.
pub async fn run(
    State(console): State<Arc<Console>>,
    Id(id): Id,
    Params(params): Params,
) -> Result<Response, ApiError> {
    only(&params, &[])?;
    let answer = console
        .pool
        .run("show run", move |store| {
            let now = now_of(store)?;
            let not_found = || HeartError::new(ErrorCode::RunNotFound, format!("run {id} not found"));
            let stmt = readout::run_by_id(store.dialect(), &id).ok_or_else(not_found)?;
            let rows = store.query(&stmt).map_err(|e| HeartError::store("show run", &e))?;
            let run = readout::decode_runs(&rows)?.into_iter().next().ok_or_else(not_found)?;
            let (receipts, report) = store.run_receipts(&id, 10_000)?;
            let receipts: Vec<Value> = receipts
                .iter()
                .map(|row| {
                    let position = u64::try_from(row.id).ok();
                    let findings: Vec<Value> = report
                        .findings
                        .iter()
                        .filter(|f| f.position.is_some() && f.position == position)
                        .map(|f| json!({"code": f.code.to_string(), "message": f.message}))
                        .collect();
                    let tampered = report
                        .findings
                        .iter()
                        .any(|f| f.position == position && f.code == heart_fleet_core::chain::FindingCode::Tampered);
                    json!({"id": row.id, "receipt": row.receipt, "verified": findings.is_empty(),
                           "tampered": tampered, "findings": findings})
                })
                .collect();
            let chain: Vec<Value> = report
                .findings
                .iter()
                .filter(|f| f.position.is_none())
                .map(|f| json!({"code": f.code.to_string(), "message": f.message}))
                .collect();
            Ok(json!({
                "now": now.to_iso(),
                "run": run,
                "receipts": receipts,
                "verification": {"summary": report.summary_line(), "passed": report.passed(),
                                 "ok": report.ok, "tampered": report.tampered, "chainFindings": chain},
            }))
        })
        .await?;
    Ok(Json(answer).into_response())
}

/// `GET /api/instances`: every instance with `heartbeatAgeMs` at the store's clock.
pub async fn instances(State(console): State<Arc<Console>>, Params(params): Params) -> Result<Response, ApiError> {
    only(&params, &[])?;
    let answer = console
        .pool
        .run("list instances", |store| {
            let now = now_of(store)?;
            let rows = store
                .query(&readout::instances(store.dialect()))
                .map_err(|e| HeartError::store("list instances", &e))?;
            let list: Vec<Value> = readout::decode_instances(&rows)?
                .into_iter()
                .map(|i| {
                    let age = now.millis() - i.last_heartbeat.millis();
                    let mut v = serde_json::to_value(&i).unwrap_or(Value::Null);
                    if let Some(o) = v.as_object_mut() {
                        o.insert("heartbeatAgeMs".into(), json!(age.max(0)));
                    }
                    v
                })
                .collect();
            Ok(json!({"now": now.to_iso(), "instances": list}))
        })
        .await?;
    Ok(Json(answer).into_response())
}

/// `GET /api/activity?minutes=N` (default 60): acquisitions, recoveries (reclaims) and
/// quarantines per minute from the receipts table, one bucket per minute, oldest first.
pub async fn activity(State(console): State<Arc<Console>>, Params(params): Params) -> Result<Response, ApiError> {
    only(&params, &["minutes"])?;
    let minutes = bounded(&params, "minutes", 60, 1440)?;
    let answer = console
        .pool
        .run("activity", move |store| {
            let now = now_of(store)?;
            let window = i64::from(minutes) * 60_000;
            // Whole minutes: the first bucket starts `minutes - 1` minutes before this one.
            let first = now.millis() - now.millis().rem_euclid(60_000) - window + 60_000;
            let since = Timestamp::from_millis(first).ok_or_else(|| HeartError::invalid("minutes reach before 1970"))?;
            let rows = store
                .query(&readout::activity(store.dialect(), since))
                .map_err(|e| HeartError::store("activity", &e))?;
            let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
            for row in &rows {
                let cell = |name: &str| row.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
                if let (
                    Some(heart_fleet_core::sql::SqlValue::Text(event)),
                    Some(heart_fleet_core::sql::SqlValue::Text(minute)),
                    Some(heart_fleet_core::sql::SqlValue::Int(n)),
                ) = (cell("event"), cell("minute"), cell("n"))
                {
                    counts.insert((minute, event), u64::try_from(n).unwrap_or(0));
                }
            }
            let buckets: Vec<Value> = (0..i64::from(minutes))
                .filter_map(|k| Timestamp::from_millis(first + k * 60_000))
                .map(|t| {
                    let minute: String = t.to_iso().chars().take(16).collect();
                    let mut b = serde_json::Map::new();
                    b.insert("minute".into(), json!(minute));
                    for event in readout::ACTIVITY_EVENTS {
                        let n = counts.get(&(minute.clone(), event.to_owned())).copied().unwrap_or(0);
                        b.insert(event.into(), json!(n));
                    }
                    Value::Object(b)
                })
                .collect();
            Ok(json!({"now": now.to_iso(), "since": since.to_iso(), "events": readout::ACTIVITY_EVENTS, "buckets": buckets}))
        })
        .await?;
    Ok(Json(answer).into_response())
}

/// The body an operator action may carry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionBody {
    /// Who acts (named in the requeue receipt).
    operator: Option<String>,
}

/// The default operator of an action without `operator`.
pub const DEFAULT_OPERATOR: &str = "heart-fleet-console";

fn action_body(body: Result<Bytes, BytesRejection>) -> Result<ActionBody, ApiError> {
    let bytes = body.map_err(|rejection| ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "payload-too-large",
        message: format!("the body is refused ({rejection}); an action takes at most {} bytes", super::BODY_LIMIT),
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(ActionBody::default());
    }
    let body: ActionBody =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::invalid(format!("the body is not an action: {e}")))?;
    if let Some(op) = &body.operator
        && (op.trim().is_empty() || op.len() > 200 || op.chars().any(char::is_control))
    {
        return Err(ApiError::invalid("operator must be 1 to 200 printable characters"));
    }
    Ok(body)
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Requeue,
    ForceRelease,
    Drain,
}

/// Runs an operator action through a fleet on a fresh connection (as the CLI verb would),
/// answering the row (or the drained instance) and the receipts it left.
async fn act(
    console: Arc<Console>,
    headers: HeaderMap,
    id: String,
    body: Result<Bytes, BytesRejection>,
    action: Action,
) -> Result<Response, ApiError> {
    authorize(&console, &headers)?;
    let body = action_body(body)?;
    let global = console.global.clone();
    let deadline = console.pool.deadline();
    let job = tokio::task::spawn_blocking(move || -> Result<Value, ApiError> {
        let mut messages = Vec::new();
        let session = Session::open(
            &global,
            &ReceiptsArg::default(),
            Some(heart_fleet_core::ops::DEFAULT_MAX_RETRIES),
            &mut messages,
        );
        let mut s = session.map_err(|_| {
            let text = String::from_utf8_lossy(&messages).trim().trim_start_matches("heart-fleet: ").to_owned();
            ApiError::from(HeartError::new(ErrorCode::StoreUnavailable, text))
        })?;
        let operator = body.operator.unwrap_or_else(|| DEFAULT_OPERATOR.to_owned());
        let result = match action {
            Action::Requeue => s.fleet.requeue_run(&id, &operator).map(|r| json!({"run": r})),
            Action::ForceRelease => s.fleet.force_release(&id).map(|r| json!({"run": r})),
            Action::Drain => match s.fleet.drain_instance(&id) {
                Ok(true) => Ok(json!({"instanceId": id, "drained": true})),
                Ok(false) => Err(HeartError::new(
                    ErrorCode::InvalidState,
                    format!("drain: instance {id} is unknown or dead (register it again)"),
                )),
                Err(e) => Err(e),
            },
        };
        let receipts = s.queue.drain();
        let mut sink_messages = Vec::new();
        let sinks = s.finish(&mut sink_messages);
        let mut answer = result.map_err(ApiError::from)?;
        if let Some(o) = answer.as_object_mut() {
            o.insert("receipts".into(), serde_json::to_value(&receipts).unwrap_or(Value::Null));
            if sinks.is_err() {
                // The action happened; its receipt did not reach the table. Said, not hidden.
                let text = String::from_utf8_lossy(&sink_messages).trim().to_owned();
                o.insert("receiptError".into(), json!(text));
            }
        }
        Ok(answer)
    });
    match tokio::time::timeout(deadline, job).await {
        Err(_) => Err(ApiError::from(HeartError::new(
            ErrorCode::StoreUnavailable,
            format!("the store did not answer within {} ms (the action may still complete)", deadline.as_millis()),
        ))),
        Ok(Err(join)) => Err(ApiError::internal(format!("the action failed ({join})"))),
        Ok(Ok(answer)) => answer.map(|v| Json(v).into_response()),
    }
}

/// `POST /api/runs/{id}/requeue`: a quarantined run back to `ready` (receipt `requeued`,
/// owner = the operator).
pub async fn requeue(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Id(id): Id,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    act(console, headers, id, body, Action::Requeue).await
}

/// `POST /api/runs/{id}/force-release`: a held run back to `ready` (receipt
/// `force_released`, owner = the previous holder); its token stops working at once.
pub async fn force_release(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Id(id): Id,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    act(console, headers, id, body, Action::ForceRelease).await
}

/// `POST /api/instances/{id}/drain`: the instance takes no new work.
pub async fn drain(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Id(id): Id,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    act(console, headers, id, body, Action::Drain).await
}
