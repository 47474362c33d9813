//! [`NativeMemoryStore`]: the core's deterministic memory store, behind `MemoryLeaseStore`.

use std::cell::RefCell;
use std::rc::Rc;

use heart_fleet_core::conformance;
use heart_fleet_core::model::{InstanceRow, IntentRow};
use heart_fleet_core::request::{Cond, IntentCol, StoreRequest};
use heart_fleet_core::{ErrorCode, HeartFleet, LeaseStore, MemoryStore, RunRow, StoreAnswer, Timestamp};
use napi_derive::napi;
use serde_json::Value;

use crate::{Code, coded, invalid};

/// The memory store: an injectable clock (milliseconds since the Unix epoch), runs, effect
/// intents, the dispatch log and instances, with injectable failures for tests.
#[napi]
pub struct NativeMemoryStore {
    inner: Rc<RefCell<MemoryStore>>,
}

fn busy() -> napi::Error<crate::Code> {
    coded(ErrorCode::StoreUnavailable, "the memory store is busy")
}

fn to_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

impl NativeMemoryStore {
    pub(crate) fn shared(&self) -> Rc<RefCell<MemoryStore>> {
        self.inner.clone()
    }

    fn with<T>(&self, f: impl FnOnce(&mut MemoryStore) -> T) -> napi::Result<T, Code> {
        let mut store = self.inner.try_borrow_mut().map_err(|_| busy())?;
        Ok(f(&mut store))
    }
}

#[napi]
impl NativeMemoryStore {
    /// A store whose clock starts at `now_ms`.
    #[napi(constructor)]
    pub fn new(now_ms: i64) -> NativeMemoryStore {
        NativeMemoryStore { inner: Rc::new(RefCell::new(MemoryStore::new(Timestamp(now_ms)))) }
    }

    /// The store seeded by a conformance scenario (its clock, runs, instances and intents).
    #[napi(factory)]
    pub fn from_scenario(scenario: String) -> napi::Result<NativeMemoryStore, Code> {
        let value: Value = serde_json::from_str(&scenario).map_err(|e| invalid(format!("bad scenario JSON: {e}")))?;
        let setup = conformance::setup(&value).map_err(invalid)?;
        Ok(NativeMemoryStore { inner: Rc::new(RefCell::new(setup.store)) })
    }

    /// The clock, in milliseconds since the Unix epoch.
    #[napi]
    pub fn now_ms(&self) -> napi::Result<i64, Code> {
        self.with(|s| s.now().0)
    }

    /// Sets the clock.
    #[napi]
    pub fn set_now(&self, now_ms: i64) -> napi::Result<(), Code> {
        self.with(|s| s.set_now(Timestamp(now_ms)))
    }

    /// Moves the clock by `ms` (may be negative).
    #[napi]
    pub fn advance(&self, ms: i64) -> napi::Result<(), Code> {
        self.with(|s| s.advance(ms))
    }

    /// Inserts a run (JSON of a full `agent_runs` row; the timestamps are set to the clock).
    /// A reused idempotency key fails with the reference's message.
    #[napi]
    pub fn insert(&self, run: String) -> napi::Result<(), Code> {
        let row: RunRow = serde_json::from_str(&run).map_err(|e| invalid(format!("insert: not a run row: {e}")))?;
        self.with(|s| s.insert(row))?.map_err(|e| invalid(e.0))
    }

    /// Inserts an `agent_instances` row as given.
    #[napi]
    pub fn insert_instance(&self, row: String) -> napi::Result<(), Code> {
        let row: InstanceRow =
            serde_json::from_str(&row).map_err(|e| invalid(format!("insertInstance: not an instance row: {e}")))?;
        self.with(|s| s.insert_instance(row))
    }

    /// Inserts an `effect_intents` row as given.
    #[napi]
    pub fn insert_intent(&self, row: String) -> napi::Result<(), Code> {
        let row: IntentRow =
            serde_json::from_str(&row).map_err(|e| invalid(format!("insertIntent: not an intent row: {e}")))?;
        self.with(|s| s.insert_intent(row))
    }

    /// Lets `after` requests named `request` (`update_run`, `read_run`, …, or `*`) through,
    /// then fails the next `times` with a store error (changing nothing).
    #[napi]
    pub fn fail_after(&self, request: String, after: u32, times: u32) -> napi::Result<(), Code> {
        self.with(|s| s.fail_after(&request, after, times))
    }

    /// Executes one store request (StoreRequest JSON) and returns the StoreAnswer JSON.
    /// A failure (an injected one) is thrown with code `store-unavailable`.
    #[napi]
    pub fn execute_json(&self, request: String) -> napi::Result<String, Code> {
        let req: StoreRequest = serde_json::from_str(&request)
            .map_err(|e| coded(ErrorCode::StoreProtocol, format!("not a StoreRequest: {e}")))?;
        let answer = self.with(|s| s.execute(req))?;
        answer.map(|a: StoreAnswer| to_text(&a)).map_err(|e| coded(ErrorCode::StoreUnavailable, e.0))
    }

    /// One run (JSON), or `null`.
    #[napi]
    pub fn run_json(&self, run_id: String) -> napi::Result<String, Code> {
        self.with(|s| to_text(&s.run(&run_id)))
    }

    /// Every run in insertion order (JSON array).
    #[napi]
    pub fn runs_json(&self) -> napi::Result<String, Code> {
        self.with(|s| to_text(&s.runs()))
    }

    /// Every intent by key (JSON array).
    #[napi]
    pub fn intents_json(&self) -> napi::Result<String, Code> {
        self.with(|s| to_text(&s.intents().collect::<Vec<_>>()))
    }

    /// The dispatch log in order (JSON array).
    #[napi]
    pub fn dispatch_log_json(&self) -> napi::Result<String, Code> {
        self.with(|s| to_text(&s.dispatch_log()))
    }

    /// Every instance by id (JSON array).
    #[napi]
    pub fn instances_json(&self) -> napi::Result<String, Code> {
        self.with(|s| to_text(&s.instances().collect::<Vec<_>>()))
    }

    /// How many requests the store answered (or failed).
    #[napi]
    pub fn request_count(&self) -> napi::Result<i64, Code> {
        self.with(|s| i64::try_from(s.request_count()).unwrap_or(i64::MAX))
    }
}

/// The fleet configuration of a conformance scenario: `{"maxRetries": n | null}`.
#[napi]
pub fn scenario_config(scenario: String) -> napi::Result<String, Code> {
    let value: Value = serde_json::from_str(&scenario).map_err(|e| invalid(format!("bad scenario JSON: {e}")))?;
    let setup = conformance::setup(&value).map_err(invalid)?;
    Ok(serde_json::json!({ "maxRetries": setup.config.max_retries }).to_string())
}

/// Replays a conformance scenario on the native Rust engine (the core's `HeartFleet` over
/// the memory store) and returns the replay (JSON): what every step returned, the receipts,
/// the counters and the final rows. Bindings compare their own replay with it.
#[napi]
pub fn native_replay(scenario: String) -> napi::Result<String, Code> {
    let replay = conformance::replay(&scenario, |setup| {
        Ok(HeartFleet::new(setup.store).with_max_retries(setup.config.max_retries))
    })
    .map_err(invalid)?;
    Ok(to_text(&replay))
}

/// A store request that is not part of an operation (JSON text): `now`,
/// `staleIntents` (`{limit}`: dispatched intents whose fence expired, oldest first),
/// `readLog` (`{runId, effectKey}`), `intents` (`{runId?}`) and `instances`.
#[napi]
pub fn store_request(kind: String, args: String) -> napi::Result<String, Code> {
    let args: Value = serde_json::from_str(&args).map_err(|e| invalid(format!("{kind}: bad arguments: {e}")))?;
    let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let req = match kind.as_str() {
        "now" => StoreRequest::Now,
        "staleIntents" => {
            let limit = args.get("limit").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok()).unwrap_or(50);
            let when = Cond::And(vec![
                Cond::Eq(IntentCol::State, heart_fleet_core::request::Val::Text("dispatched".into())),
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
/// request language in the database (the Supabase REST store) read the rows a request
/// touches, simulate it here, and write the result back with a compare-and-set.
#[napi]
pub fn simulate_request(request: String, snapshot: String, now_ms: i64) -> napi::Result<String, Code> {
    let req: StoreRequest = serde_json::from_str(&request)
        .map_err(|e| coded(ErrorCode::StoreProtocol, format!("not a StoreRequest: {e}")))?;
    let snap: Snapshot = serde_json::from_str(&snapshot).map_err(|e| {
        coded(ErrorCode::StoreProtocol, format!("the rows are not agent_runs/effect_intents/agent_instances rows: {e}"))
    })?;
    let mut store = MemoryStore::new(Timestamp(now_ms));
    for run in snap.runs {
        store.insert_exact(run).map_err(|e| coded(ErrorCode::StoreProtocol, e.0))?;
    }
    for intent in snap.intents {
        store.insert_intent(intent);
    }
    for instance in snap.instances {
        store.insert_instance(instance);
    }
    let answer = store.execute(req).map_err(|e| coded(ErrorCode::StoreProtocol, e.0))?;
    Ok(to_text(&answer))
}
