//! [`BridgeMemoryStore`], the evaluator on a snapshot, one-off store requests and the
//! conformance replay.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::{BridgeResult, invalid, parse_json, protocol, to_text};
#[cfg(feature = "testkit")]
use crate::conformance;
use crate::model::{InstanceRow, IntentRow};
use crate::request::{Cond, IntentCol, StoreRequest, Val};
use crate::{ErrorCode, HeartError, LeaseStore, MemoryStore, RunRow, Timestamp};

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

/// A store request that is not part of an operation (JSON text): `now`,
/// `staleIntents` (`{limit}`: dispatched intents whose fence expired, oldest first),
/// `readLog` (`{runId, effectKey}`) and `instances`.
pub fn store_request(kind: &str, args: &str) -> BridgeResult<String> {
    let args: Value = parse_json(args, &format!("{kind}: bad arguments"))?;
    let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let req = match kind {
        "now" => StoreRequest::Now,
        "staleIntents" => {
            let limit = args
                .get("limit")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(crate::ops::DEFAULT_RECONCILE_LIMIT);
            let when = Cond::And(vec![
                Cond::Eq(IntentCol::State, Val::Text("dispatched".into())),
                Cond::ExpiredAt(IntentCol::FenceExpiresAt),
            ]);
            StoreRequest::ScanIntents { when, limit }
        }
        "readLog" => StoreRequest::ReadLog { run_id: text("runId"), effect_key: text("effectKey") },
        "instances" => StoreRequest::ScanInstances { when: Cond::True },
        other => return Err(invalid(format!("unknown store request {other:?}"))),
    };
    Ok(to_text(&req))
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
