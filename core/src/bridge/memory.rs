//! [`BridgeMemoryStore`], the evaluator on a snapshot, one-off store requests and the
//! conformance replay.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::{BridgeResult, invalid, parse_json, protocol, to_text};
#[cfg(feature = "testkit")]
use crate::conformance;
use crate::model::{InstanceRow, IntentRow};
use crate::request::{Cond, StoreRequest};
use crate::{ErrorCode, HeartError, LeaseStore, MemoryStore, RunRow, StoreAnswer, Timestamp, ops};

/// A shared handle on a [`MemoryStore`]: an injectable clock (milliseconds since the Unix
/// epoch), runs, effect intents, the dispatch log and instances, with injectable failures.
///
/// Cloning gives another handle on the same store.
#[derive(Debug, Clone)]
pub struct BridgeMemoryStore {
    pub(super) inner: Arc<Mutex<MemoryStore>>,
}

pub(super) fn poisoned() -> HeartError {
    HeartError::new(ErrorCode::StoreUnavailable, "the memory store is unusable (a thread panicked while using it)")
}

impl BridgeMemoryStore {
    /// A store whose clock starts at `now_ms`.
    pub fn new(now_ms: i64) -> BridgeMemoryStore {
        BridgeMemoryStore::wrap(MemoryStore::new(Timestamp(now_ms)))
    }

    /// A handle on `store`.
    pub fn wrap(store: MemoryStore) -> BridgeMemoryStore {
        BridgeMemoryStore { inner: Arc::new(Mutex::new(store)) }
    }

    /// The store seeded by a conformance scenario (its clock, runs, instances and intents).
    #[cfg(feature = "testkit")]
    pub fn from_scenario(scenario: &str) -> BridgeResult<BridgeMemoryStore> {
        let value: Value = parse_json(scenario, "bad scenario JSON")?;
        let setup = conformance::setup(&value).map_err(invalid)?;
        Ok(BridgeMemoryStore::wrap(setup.store))
    }

    fn lock(&self) -> BridgeResult<MutexGuard<'_, MemoryStore>> {
        self.inner.lock().map_err(|_| poisoned())
    }

    fn with<T>(&self, f: impl FnOnce(&mut MemoryStore) -> T) -> BridgeResult<T> {
        let mut store = self.lock()?;
        Ok(f(&mut store))
    }

    /// The clock, in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> BridgeResult<i64> {
        self.with(|s| s.now().0)
    }

    /// Sets the clock.
    pub fn set_now(&self, now_ms: i64) -> BridgeResult<()> {
        self.with(|s| s.set_now(Timestamp(now_ms)))
    }

    /// Moves the clock by `ms` (may be negative).
    pub fn advance(&self, ms: i64) -> BridgeResult<()> {
        self.with(|s| s.advance(ms))
    }

    /// Inserts a run (JSON of a full `agent_runs` row; the timestamps are set to the clock).
    /// A reused idempotency key fails with the reference's message.
    pub fn insert(&self, run: &str) -> BridgeResult<()> {
        let row: RunRow = parse_json(run, "insert: not a run row")?;
        self.with(|s| s.insert(row))?.map_err(|e| invalid(e.0))
    }

    /// Inserts an `agent_instances` row as given.
    pub fn insert_instance(&self, row: &str) -> BridgeResult<()> {
        let row: InstanceRow = parse_json(row, "insertInstance: not an instance row")?;
        self.with(|s| s.insert_instance(row))
    }

    /// Inserts an `effect_intents` row as given.
    pub fn insert_intent(&self, row: &str) -> BridgeResult<()> {
        let row: IntentRow = parse_json(row, "insertIntent: not an intent row")?;
        self.with(|s| s.insert_intent(row))
    }

    /// Lets `after` requests named `request` (`update_run`, `read_run`, …, or `*`) through,
    /// then fails the next `times` with a store error (changing nothing).
    pub fn fail_after(&self, request: &str, after: u32, times: u32) -> BridgeResult<()> {
        self.with(|s| s.fail_after(request, after, times))
    }

    /// Executes one store request (StoreRequest JSON) and returns the StoreAnswer JSON.
    /// Text that is not a StoreRequest is `store-protocol`; a failure (an injected one) is
    /// `store-unavailable`.
    pub fn execute_json(&self, request: &str) -> BridgeResult<String> {
        let req: StoreRequest =
            serde_json::from_str(request).map_err(|e| protocol(format!("not a StoreRequest: {e}")))?;
        let answer = self.with(|s| s.execute(req))?;
        answer.map(|a| to_text(&a)).map_err(|e| HeartError::new(ErrorCode::StoreUnavailable, e.0))
    }

    /// Executes one typed store request: [`BridgeMemoryStore::execute_json`] without the
    /// JSON, for a host that hands the core's request to this store as it is.
    pub fn execute(&self, request: &StoreRequest) -> BridgeResult<StoreAnswer> {
        self.with(|s| s.execute_borrowed(request))?.map_err(|e| HeartError::new(ErrorCode::StoreUnavailable, e.0))
    }

    /// One run (JSON), or `null`.
    pub fn run_json(&self, run_id: &str) -> BridgeResult<String> {
        self.with(|s| to_text(&s.run(run_id)))
    }

    /// Every run in insertion order (JSON array).
    pub fn runs_json(&self) -> BridgeResult<String> {
        self.with(|s| to_text(&s.runs()))
    }

    /// Every intent by key (JSON array).
    pub fn intents_json(&self) -> BridgeResult<String> {
        self.with(|s| to_text(&s.intents().collect::<Vec<_>>()))
    }

    /// The dispatch log in order (JSON array).
    pub fn dispatch_log_json(&self) -> BridgeResult<String> {
        self.with(|s| to_text(&s.dispatch_log()))
    }

    /// Every instance by id (JSON array).
    pub fn instances_json(&self) -> BridgeResult<String> {
        self.with(|s| to_text(&s.instances().collect::<Vec<_>>()))
    }

    /// How many requests the store answered (or failed).
    pub fn request_count(&self) -> BridgeResult<i64> {
        self.with(|s| i64::try_from(s.request_count()).unwrap_or(i64::MAX))
    }
}

/// The fleet configuration of a conformance scenario (JSON `{"maxRetries": n | null}`).
#[cfg(feature = "testkit")]
pub fn scenario_config(scenario: &str) -> BridgeResult<String> {
    let value: Value = parse_json(scenario, "bad scenario JSON")?;
    let setup = conformance::setup(&value).map_err(invalid)?;
    Ok(serde_json::json!({ "maxRetries": setup.config.max_retries }).to_string())
}

/// Replays a conformance scenario on the native Rust engine (the core's `HeartFleet` over
/// the memory store) and returns the replay (JSON): what every step returned, the receipts,
/// the counters and the final rows. Bindings compare their own replay with it.
#[cfg(feature = "testkit")]
pub fn native_replay(scenario: &str) -> BridgeResult<String> {
    let replay = conformance::replay(scenario, |setup| {
        Ok(crate::HeartFleet::new(setup.store).with_max_retries(setup.config.max_retries))
    })
    .map_err(invalid)?;
    Ok(to_text(&replay))
}

/// A store request that is not part of an operation (JSON text in, JSON text out):
///
/// * `now`, `instances`, `readRun` (`{runId}`), `staleIntents` (`{limit?}`: dispatched
///   intents whose fence expired, oldest first) and `readLog` (`{runId, effectKey}`);
/// * the reference's hand-driven ledger calls on one intent `{runId, effectKey, …}`:
///   `claimIntent` (`channel`, `payloadDigest`), `markDispatched` (`fenceOwner`,
///   `fenceExpiresAt`, an ISO instant), `markCommitted` (`externalRef`), `reopen`
///   (`lastError`), `noteUnresolved` (`currentAttempts`) and `abandon` (`reason`), each
///   built by [`ops::Transition`] as the reconciler builds its own.
///
/// An unknown kind, an unknown or missing field, or a value of the wrong type is
/// `invalid-input`. (The arguments are read from a JSON value by hand: serde's derives
/// would cost the edge `.wasm` more than the whole function.)
pub fn store_request(kind: &str, args: &str) -> BridgeResult<String> {
    let value: Value = parse_json(args, &format!("{kind}: bad arguments"))?;
    let a = Args { kind, value: &value };
    let req = match kind {
        "now" => a.only(&[]).map(|()| StoreRequest::Now)?,
        "instances" => a.only(&[]).map(|()| StoreRequest::ScanInstances { when: Cond::True })?,
        "readRun" => {
            a.only(&["runId"])?;
            StoreRequest::ReadRun { run_id: a.text("runId")? }
        }
        "staleIntents" => {
            a.only(&["limit"])?;
            let limit = match value.get("limit") {
                None | Some(Value::Null) => ops::DEFAULT_RECONCILE_LIMIT,
                Some(n) => n
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| a.bad("limit must be an integer in 0..=4294967295"))?,
            };
            StoreRequest::ScanIntents { when: ops::stale_dispatched(), limit }
        }
        _ => intent_request(&a)?,
    };
    Ok(to_text(&req))
}

/// The arguments of a one-off store request (a JSON object).
struct Args<'a> {
    kind: &'a str,
    value: &'a Value,
}

impl Args<'_> {
    fn bad(&self, message: &str) -> HeartError {
        invalid(format!("{}: bad arguments: {message}", self.kind))
    }

    /// An object with no field but `allowed`.
    fn only(&self, allowed: &[&str]) -> BridgeResult<()> {
        let object = self.value.as_object().ok_or_else(|| self.bad("not an object"))?;
        match object.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(extra) => Err(self.bad(&format!("unknown field `{extra}`"))),
            None => Ok(()),
        }
    }

    /// A required string field.
    fn text(&self, name: &str) -> BridgeResult<String> {
        match self.value.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(self.bad(&format!("`{name}` must be a string"))),
            None => Err(self.bad(&format!("missing field `{name}`"))),
        }
    }
}

/// A one-off request on one intent (see [`store_request`]).
fn intent_request(a: &Args<'_>) -> BridgeResult<StoreRequest> {
    let fields: &[&str] = match a.kind {
        "readLog" => &["runId", "effectKey"],
        "claimIntent" => &["runId", "effectKey", "channel", "payloadDigest"],
        "markDispatched" => &["runId", "effectKey", "fenceOwner", "fenceExpiresAt"],
        "markCommitted" => &["runId", "effectKey", "externalRef"],
        "reopen" => &["runId", "effectKey", "lastError"],
        "noteUnresolved" => &["runId", "effectKey", "currentAttempts"],
        "abandon" => &["runId", "effectKey", "reason"],
        other => return Err(invalid(format!("unknown store request {other:?}"))),
    };
    a.only(fields)?;
    let (run_id, effect_key) = (a.text("runId")?, a.text("effectKey")?);
    let transition = match a.kind {
        "readLog" => return Ok(StoreRequest::ReadLog { run_id, effect_key }),
        "claimIntent" => {
            let (channel, payload_digest) = (a.text("channel")?, a.text("payloadDigest")?);
            if !crate::model::CHANNELS.contains(&channel.as_str()) {
                let known = crate::model::CHANNELS.join(", ");
                return Err(a.bad(&format!("channel must be one of {known}, got {channel:?}")));
            }
            let intent = crate::request::NewIntent { run_id, effect_key, channel, payload_digest };
            return Ok(StoreRequest::ClaimIntent(intent));
        }
        "markDispatched" => {
            let at = a.text("fenceExpiresAt")?;
            let fence_expires_at =
                Timestamp::parse_iso(&at).map_err(|e| a.bad(&format!("fenceExpiresAt is not an ISO instant: {e}")))?;
            ops::Transition::MarkDispatched { fence_owner: a.text("fenceOwner")?, fence_expires_at }
        }
        "markCommitted" => {
            let external_ref = a.value.get("externalRef").cloned().unwrap_or(Value::Null);
            ops::Transition::MarkCommitted { external_ref }
        }
        "reopen" => ops::Transition::Reopen { last_error: a.text("lastError")? },
        "noteUnresolved" => {
            let current = match a.value.get("currentAttempts") {
                None | Some(Value::Null) => Some(0),
                Some(n) => n.as_i64().filter(|n| *n >= 0),
            };
            let current_attempts = current.ok_or_else(|| a.bad("currentAttempts must be an integer of at least 0"))?;
            ops::Transition::NoteUnresolved { current_attempts }
        }
        _ => ops::Transition::Abandon { reason: a.text("reason")? },
    };
    Ok(transition.request(&run_id, &effect_key))
}

/// The rows a request is evaluated against by [`simulate_request`].
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Snapshot {
    runs: Vec<RunRow>,
    intents: Vec<IntentRow>,
    instances: Vec<InstanceRow>,
}

/// Evaluates a store request (StoreRequest JSON) against a snapshot of rows (JSON
/// `{runs, intents, instances}`, database text accepted for timestamps) at `now_ms`, with
/// the core's own evaluator, and returns the StoreAnswer JSON. Stores that cannot run the
/// request language in a database (the Supabase REST store, Deno KV) read the rows a
/// request touches, simulate it here, and write the result back with a compare-and-set.
pub fn simulate_request(request: &str, snapshot: &str, now_ms: i64) -> BridgeResult<String> {
    let req: StoreRequest = serde_json::from_str(request).map_err(|e| protocol(format!("not a StoreRequest: {e}")))?;
    let snap: Snapshot = serde_json::from_str(snapshot)
        .map_err(|e| protocol(format!("the rows are not agent_runs/effect_intents/agent_instances rows: {e}")))?;
    let mut store = MemoryStore::new(Timestamp(now_ms));
    for run in snap.runs {
        store.insert_exact(run).map_err(|e| protocol(e.0))?;
    }
    for intent in snap.intents {
        store.insert_intent(intent);
    }
    for instance in snap.instances {
        store.insert_instance(instance);
    }
    let answer = store.execute(req).map_err(|e| protocol(e.0))?;
    Ok(to_text(&answer))
}

#[cfg(test)]
mod store_request_tests {
    use serde_json::{Value, json};

    use super::store_request;
    use crate::ErrorCode;

    fn request(kind: &str, args: Value) -> Value {
        serde_json::from_str(&store_request(kind, &args.to_string()).unwrap()).unwrap()
    }

    fn refused(kind: &str, args: Value) -> String {
        let e = store_request(kind, &args.to_string()).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput, "{kind} {args}");
        e.message
    }

    #[test]
    fn every_hand_driven_transition_is_the_transition_the_core_builds() {
        let reopen = request("reopen", json!({"runId": "r", "effectKey": "k", "lastError": "nope"}));
        assert_eq!(reopen["op"], "update_intent");
        assert_eq!(reopen["when"], json!({"eq": ["state", {"type": "text", "value": "dispatched"}]}));
        assert_eq!(reopen["set"].as_array().map(Vec::len), Some(5));
        assert_eq!(reopen["log"]["outcome"], "reconciled");
        let abandon = request("abandon", json!({"runId": "r", "effectKey": "k", "reason": "x".repeat(200)}));
        assert_eq!(abandon["log"]["detail"]["reason"].as_str().map(str::len), Some(120));
        let dispatched = request(
            "markDispatched",
            json!({"runId": "r", "effectKey": "k", "fenceOwner": "w", "fenceExpiresAt": "2026-01-01T00:00:00.000Z"}),
        );
        assert_eq!(dispatched["log"], Value::Null);
        let note = request("noteUnresolved", json!({"runId": "r", "effectKey": "k", "currentAttempts": 2}));
        assert_eq!(note["set"], json!([["attempts", {"val": {"type": "int", "value": 3}}]]));
        let committed = request("markCommitted", json!({"runId": "r", "effectKey": "k", "externalRef": {"id": 1}}));
        assert_eq!(committed["log"]["attempt"], 1);
        let claim =
            request("claimIntent", json!({"runId": "r", "effectKey": "k", "channel": "mail", "payloadDigest": "d"}));
        assert_eq!(claim["op"], "claim_intent");
        assert_eq!(request("staleIntents", json!({}))["limit"], crate::ops::DEFAULT_RECONCILE_LIMIT);
        assert_eq!(request("readRun", json!({"runId": "r"})), json!({"op": "read_run", "run_id": "r"}));
    }

    #[test]
    fn a_field_of_another_kind_an_unknown_field_or_a_missing_one_is_invalid_input() {
        assert!(
            refused("reopen", json!({"runId": "r", "effectKey": "k", "lastError": "e", "reason": "x"}))
                .contains("reason")
        );
        assert!(refused("reopen", json!({"runId": "r", "effectKey": "k", "lastErr": "e"})).contains("lastErr"));
        assert!(refused("reopen", json!({"runId": "r", "effectKey": "k"})).contains("lastError"));
        assert!(refused("abandon", json!({"runId": "r", "reason": "x"})).contains("effectKey"));
        refused("noteUnresolved", json!({"runId": "r", "effectKey": "k", "currentAttempts": -1}));
        refused("markDispatched", json!({"runId": "r", "effectKey": "k", "fenceOwner": "w", "fenceExpiresAt": "soon"}));
        refused("staleIntents", json!({"limit": -1}));
        refused("staleIntents", json!({"limits": 5}));
        let claim = json!({"runId": "r", "effectKey": "k", "channel": "carrier-pigeon", "payloadDigest": "d"});
        assert!(refused("claimIntent", claim).contains("channel must be one of"));
        assert!(refused("update_intent", json!({"runId": "r", "effectKey": "k"})).contains("unknown store request"));
    }
}
