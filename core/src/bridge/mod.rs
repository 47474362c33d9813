//! The JSON bridge that foreign-language bindings drive.
//!
//! Node (napi-rs), Deno and edge runtimes (wasm-bindgen) and Python (pyo3) all expose the
//! same operations, and all of them drive the core's sans-I/O machines from a loop written
//! in the host language, awaiting the host's store. This module is everything those
//! bindings share, so each binding is a thin layer of attributes and error conversion:
//!
//! * [`BridgeFleet`] / [`BridgeOp`]: builds an operation's [`Machine`](crate::Machine) from
//!   its name and JSON arguments, starts it, and speaks the step protocol below. With a
//!   [`BridgeMemoryStore`] attached, store requests are answered in place, so an operation
//!   on the memory store finishes inside one call.
//! * [`BridgeFleet::acquire_typed`] and its siblings (renew, release, verify): the lease
//!   cycle on an attached memory store with typed arguments, answering the core's values and
//!   the receipts for the host's sink (the Python module builds its records from them); and
//!   [`BridgeFleet::acquire_compact`] and its siblings, the same answers written in a compact
//!   text instead of JSON (the format is in the `compact` module's docs; [`compact_layouts`]
//!   exports it) for the JavaScript hosts.
//! * [`BridgeMemoryStore`]: a shared handle on the [`MemoryStore`](crate::MemoryStore), with
//!   JSON accessors for tests.
//! * [`BridgeSession`]: the execute-with-lease state ([`crate::session::LeaseSession`]); the
//!   host owns the timers.
//! * Free functions over JSON text: canonical JSON and digests, receipt verification, SQL
//!   rendering and decoding for SQL stores written in the host language, the evaluator on a
//!   snapshot of rows (for stores that decide outside a database), and the conformance
//!   replay every binding compares itself with.
//!
//! Apart from the typed outcomes, what crosses the bridge is JSON text, a string, a boolean or an `i64` well inside
//! 2^53, so no host loses precision. Failures are [`HeartError`]s whose
//! [`code`](HeartError::code) is the stable code the binding shows. Every handle is `Send`
//! (the state sits behind `Arc<Mutex<_>>`), so a host may renew from a heartbeat thread.
//!
//! ## The step protocol
//!
//! Each step is one JSON object:
//!
//! * `{"need":"store"}`: [`BridgeOp::request`] is the StoreRequest (JSON text); execute it on
//!   the host's store and call [`BridgeOp::resume_store`] with the StoreAnswer JSON, or
//!   [`BridgeOp::resume_store_error`] if it failed. (The request is kept apart so that stores
//!   that take JSON text never make the host parse it.)
//! * `{"need":"recordOnce","runId":…,"effectKey":…}`: ask the effect ledger;
//!   [`BridgeOp::resume_recorded`] / [`BridgeOp::resume_recorded_error`].
//! * `{"need":"effect","effectKey":…,"epoch":…}`: run the effect;
//!   [`BridgeOp::resume_effect`] (the result as JSON) / [`BridgeOp::resume_effect_error`].
//! * `{"need":"probe","intent":<IntentRow>}`: run the channel probe;
//!   [`BridgeOp::resume_probe`] with `{"status":"sent","externalRef":…}`,
//!   `{"status":"not-sent"}` or `{"status":"unknown"}` / [`BridgeOp::resume_probe_error`].
//! * `{"done":true,"ok":<value>}` or `{"done":true,"error":{"code":…,"message":…}}`.
//!
//! When the fleet hands receipts to a host sink, a step also carries `"receipts":[…]`: the
//! receipts emitted since the previous step, in order.
//!
//! ```
//! use heart_fleet_core::bridge::{Begun, BridgeFleet, BridgeMemoryStore};
//! use heart_fleet_core::{RunRow, Timestamp};
//!
//! let t0 = Timestamp(1_785_369_600_000);
//! let store = BridgeMemoryStore::new(t0.0);
//! store.insert(&serde_json::to_string(&RunRow::ready("run-1", "job:1", t0)).unwrap()).unwrap();
//! let mut fleet = BridgeFleet::new(Some(5), false);
//! fleet.attach_memory_store(&store);
//! let Begun::Done(step) = fleet.begin("acquire", r#"{"runId":"run-1","owner":"w","ttlSeconds":60}"#) else {
//!     unreachable!("the memory store answers in place")
//! };
//! assert!(step.starts_with(r#"{"done":true,"ok":{"acquired":true"#));
//! assert_eq!(fleet.metrics().acquire_wins, 1);
//! ```

mod call;
mod canonical;
mod compact;
mod memory;
mod op;
mod reference;
mod session;
mod sql;

pub use call::*;
pub use canonical::*;
pub use compact::*;
pub use memory::*;
pub use op::*;
pub use reference::{
    BridgeReferenceRequests, DEFAULT_CAS_RETRIES, LEASE_STORE_METHODS, LeaseStoreCall, MAX_CAS_RETRIES,
};
pub use session::*;
pub use sql::*;

use crate::model::InstanceStatus;
use crate::{ErrorCode, HeartError, RunStatus};

/// A result of the bridge: the error carries the stable code the binding shows.
pub type BridgeResult<T> = Result<T, HeartError>;

fn invalid(message: impl Into<String>) -> HeartError {
    HeartError::invalid(message)
}

fn protocol(message: impl Into<String>) -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, message)
}

fn to_text<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}

/// Parses JSON text with a message naming what it should have been.
fn parse_json<'a, T: serde::Deserialize<'a>>(text: &'a str, what: &str) -> BridgeResult<T> {
    serde_json::from_str(text).map_err(|e| invalid(format!("{what}: {e}")))
}

/// `isLeaseExpired` at a host's clock reading (milliseconds; `None`: no expiry): the
/// core's one expiry rule, [`crate::model::lease_expired_at`].
pub fn lease_expired_ms(expires_at_ms: Option<f64>, now_ms: f64) -> bool {
    crate::model::lease_expired_at(expires_at_ms, now_ms)
}

/// `canAcquire` at a host's clock reading: a status that is no run status is never
/// acquirable.
pub fn can_acquire_ms(status: &str, expires_at_ms: Option<f64>, now_ms: f64) -> bool {
    RunStatus::parse(status).is_ok_and(|s| crate::model::can_acquire_at(s, expires_at_ms, now_ms))
}

/// `isInstanceExpired` at a host's clock reading: `dead`, or silent for strictly more than
/// `ttl_ms` ([`crate::model::instance_expired_at`]).
pub fn instance_expired_ms(status: &str, last_heartbeat_ms: f64, now_ms: f64, ttl_ms: f64) -> bool {
    crate::model::instance_expired_at(status == InstanceStatus::Dead.as_str(), last_heartbeat_ms, now_ms, ttl_ms)
}

/// The contract's constants, for hosts to take instead of copying (JSON): `errorCodes`,
/// `runStatuses`, `nextStatuses` (what a release may leave a run in), `channels`,
/// `heldStatuses` (the statuses of a held lease), `maxTtlSeconds`, `invalidAcquireReason`
/// (acquire's reason for bad input, [`crate::ops::INVALID_ACQUIRE_REASON`]), `digestPrefix`,
/// `receiptSchemaVersion`, `maxJsonDepth`, `maxEvidenceDepth`, `maxCasRetries`, `operations`
/// (the names [`Call::parse`] takes), `leaseStoreMethods` (the TypeScript package's store
/// contract), `defaults` (what an option left out becomes), `lostCodes` (the error code of
/// each cause a lease is lost for, [`crate::ops::LostCause::code`]), `notRunReasons`
/// (execute-with-lease's reason when the acquire did not win, by whether the run was found,
/// [`crate::session::NotRunReason::after_acquire`], and when its options were bad). The PostgreSQL stores' deadlines are
/// [`postgres_deadlines_json`].
pub fn contract_json() -> String {
    use crate::ops;
    use crate::session::NotRunReason;
    // Inserted one at a time: collecting into the map would sort in bulk, kilobytes of wasm.
    let mut lost_codes = serde_json::Map::new();
    for cause in ops::LostCause::ALL {
        lost_codes.insert(cause.as_str().to_owned(), cause.code().as_str().into());
    }
    serde_json::json!({
        "errorCodes": error_codes(),
        "runStatuses": crate::RunStatus::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "nextStatuses": ops::ReleaseTo::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "channels": crate::model::CHANNELS,
        "heldStatuses": crate::RunStatus::ALL.iter().filter(|s| s.is_held()).map(|s| s.as_str()).collect::<Vec<_>>(),
        "maxTtlSeconds": ops::MAX_TTL_SECONDS,
        "invalidAcquireReason": ops::INVALID_ACQUIRE_REASON,
        "digestPrefix": crate::canonical::DIGEST_PREFIX,
        "receiptSchemaVersion": crate::receipt::SCHEMA_VERSION,
        "maxJsonDepth": crate::canonical::MAX_JSON_DEPTH,
        "maxEvidenceDepth": ops::MAX_EVIDENCE_DEPTH,
        "maxCasRetries": MAX_CAS_RETRIES,
        "operations": Call::NAMES,
        "leaseStoreMethods": LEASE_STORE_METHODS,
        "defaults": {
            "maxRetries": ops::DEFAULT_MAX_RETRIES,
            "sweepLimit": ops::DEFAULT_SWEEP_LIMIT,
            "livenessTtlMs": ops::DEFAULT_LIVENESS_TTL_MS,
            "livenessLimit": ops::DEFAULT_LIVENESS_LIMIT,
            "reconcileMaxAttempts": ops::DEFAULT_RECONCILE_MAX_ATTEMPTS,
            "reconcileLimit": ops::DEFAULT_RECONCILE_LIMIT,
            "storeTimeoutMs": ops::DEFAULT_STORE_TIMEOUT_MS,
            "casRetries": DEFAULT_CAS_RETRIES,
        },
        "lostCodes": lost_codes,
        "notRunReasons": {
            "runFound": NotRunReason::after_acquire(true).as_str(),
            "runMissing": NotRunReason::after_acquire(false).as_str(),
            "invalidInput": NotRunReason::ON_INVALID_INPUT.as_str(),
        },
    })
    .to_string()
}

/// A PostgreSQL store's deadlines, the same in every driver ([`crate::sql::deadlines`]), as
/// JSON: `statementTimeoutMs` (a statement's default), `maxStatementTimeoutMs`,
/// `connectTimeoutMs` and `cancelGraceMs`. Apart from [`contract_json`], so that builds
/// without a PostgreSQL store (the edge wasm) do not carry it.
pub fn postgres_deadlines_json() -> String {
    use crate::sql::deadlines;
    serde_json::json!({
        "statementTimeoutMs": deadlines::DEFAULT_STATEMENT_TIMEOUT_MS,
        "maxStatementTimeoutMs": deadlines::MAX_STATEMENT_TIMEOUT_MS,
        "connectTimeoutMs": deadlines::CONNECT_TIMEOUT_MS,
        "cancelGraceMs": deadlines::CANCEL_GRACE_MS,
    })
    .to_string()
}

/// The row `id` of `table` with every other column at the value a partial row leaves it, as
/// JSON: for `agent_runs`, [`crate::RunRow::seeded`] (`ready`, no lease, assignment `id`,
/// idempotency key `key:<id>`, created and updated at `at`); for `agent_instances`,
/// [`crate::model::InstanceRow::registered`] (`alive`, started and heard from at `at`). `at` is
/// ISO-8601 text. Hosts overlay what a row they seed or read does have; they keep no copy of
/// these defaults. Another table, or `at` not an instant, is `invalid-input`.
pub fn seeded_row_json(table: &str, id: &str, at: &str) -> BridgeResult<String> {
    let at = crate::Timestamp::parse_iso(at).map_err(|e| invalid(format!("seededRow: {e}")))?;
    match table {
        "agent_runs" => Ok(to_text(&crate::RunRow::seeded(id, at))),
        "agent_instances" => Ok(to_text(&crate::model::InstanceRow::registered(id, at))),
        other => Err(invalid(format!("seededRow: no defaults for table {other:?} (agent_runs, agent_instances)"))),
    }
}

/// [`crate::ops::unstorable_evidence`] as JSON text: what a send records as its evidence
/// when its result cannot be stored as JSON.
pub fn unstorable_evidence_json(kind: &str, reason: &str) -> String {
    crate::ops::unstorable_evidence(kind, reason).to_string()
}

/// The stable error codes of the registry, in order.
pub fn error_codes() -> Vec<&'static str> {
    ErrorCode::ALL.iter().map(|c| c.as_str()).collect()
}
