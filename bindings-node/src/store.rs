//! [`NativeMemoryStore`]: the core's deterministic memory store, behind `MemoryLeaseStore`,
//! plus the store helpers of [`heart_fleet_core::bridge`] (one-off requests, the evaluator
//! on a snapshot, the conformance replay). Thin napi wrappers; the logic is in the bridge.

use heart_fleet_core::bridge::{self, BridgeMemoryStore};
use napi_derive::napi;

use crate::{Code, CodedResult, from_heart};

/// The memory store: an injectable clock (milliseconds since the Unix epoch), runs, effect
/// intents, the dispatch log and instances, with injectable failures for tests.
#[napi]
pub struct NativeMemoryStore {
    inner: BridgeMemoryStore,
}

fn js<T>(r: bridge::BridgeResult<T>) -> CodedResult<T> {
    r.map_err(from_heart)
}

impl NativeMemoryStore {
    pub(crate) fn bridge(&self) -> &BridgeMemoryStore {
        &self.inner
    }
}

#[napi]
impl NativeMemoryStore {
    /// A store whose clock starts at `now_ms`.
    #[napi(constructor)]
    pub fn new(now_ms: i64) -> NativeMemoryStore {
        NativeMemoryStore { inner: BridgeMemoryStore::new(now_ms) }
    }

    /// The store seeded by a conformance scenario (its clock, runs, instances and intents).
    #[napi(factory)]
    pub fn from_scenario(scenario: String) -> napi::Result<NativeMemoryStore, Code> {
        js(BridgeMemoryStore::from_scenario(&scenario)).map(|inner| NativeMemoryStore { inner })
    }

    /// The clock, in milliseconds since the Unix epoch.
    #[napi]
    pub fn now_ms(&self) -> napi::Result<i64, Code> {
        js(self.inner.now_ms())
    }

    /// Sets the clock.
    #[napi]
    pub fn set_now(&self, now_ms: i64) -> napi::Result<(), Code> {
        js(self.inner.set_now(now_ms))
    }

    /// Moves the clock by `ms` (may be negative).
    #[napi]
    pub fn advance(&self, ms: i64) -> napi::Result<(), Code> {
        js(self.inner.advance(ms))
    }

    /// Inserts a run (JSON of a full `agent_runs` row; the timestamps are set to the clock).
    /// A reused idempotency key fails with the reference's message.
    #[napi]
    pub fn insert(&self, run: String) -> napi::Result<(), Code> {
        js(self.inner.insert(&run))
    }

    /// Inserts an `agent_instances` row as given.
    #[napi]
    pub fn insert_instance(&self, row: String) -> napi::Result<(), Code> {
        js(self.inner.insert_instance(&row))
    }

    /// Inserts an `effect_intents` row as given.
    #[napi]
    pub fn insert_intent(&self, row: String) -> napi::Result<(), Code> {
        js(self.inner.insert_intent(&row))
    }

    /// Lets `after` requests named `request` (`update_run`, `read_run`, …, or `*`) through,
    /// then fails the next `times` with a store error (changing nothing).
    #[napi]
    pub fn fail_after(&self, request: String, after: u32, times: u32) -> napi::Result<(), Code> {
        js(self.inner.fail_after(&request, after, times))
    }

    /// Executes one store request (StoreRequest JSON) and returns the StoreAnswer JSON.
    /// A failure (an injected one) is thrown with code `store-unavailable`.
    #[napi]
    pub fn execute_json(&self, request: String) -> napi::Result<String, Code> {
        js(self.inner.execute_json(&request))
    }

    /// One run (JSON), or `null`.
    #[napi]
    pub fn run_json(&self, run_id: String) -> napi::Result<String, Code> {
        js(self.inner.run_json(&run_id))
    }

    /// Every run in insertion order (JSON array).
    #[napi]
    pub fn runs_json(&self) -> napi::Result<String, Code> {
        js(self.inner.runs_json())
    }

    /// Every intent by key (JSON array).
    #[napi]
    pub fn intents_json(&self) -> napi::Result<String, Code> {
        js(self.inner.intents_json())
    }

    /// The dispatch log in order (JSON array).
    #[napi]
    pub fn dispatch_log_json(&self) -> napi::Result<String, Code> {
        js(self.inner.dispatch_log_json())
    }

    /// Every instance by id (JSON array).
    #[napi]
    pub fn instances_json(&self) -> napi::Result<String, Code> {
        js(self.inner.instances_json())
    }

    /// How many requests the store answered (or failed).
    #[napi]
    pub fn request_count(&self) -> napi::Result<i64, Code> {
        js(self.inner.request_count())
    }
}

/// The fleet configuration of a conformance scenario (JSON `{"maxRetries": n | null}`).
#[napi]
pub fn scenario_config(scenario: String) -> napi::Result<String, Code> {
    js(bridge::scenario_config(&scenario))
}

/// Replays a conformance scenario on the native Rust engine (the core's `HeartFleet` over
/// the memory store) and returns the replay (JSON): what every step returned, the receipts,
/// the counters and the final rows. Bindings compare their own replay with it.
#[napi]
pub fn native_replay(scenario: String) -> napi::Result<String, Code> {
    js(bridge::native_replay(&scenario))
}

/// A store request that is not part of an operation (JSON text): the kinds and their
/// arguments are those of the core's `bridge::store_request`.
#[napi]
pub fn store_request(kind: String, args: String) -> napi::Result<String, Code> {
    js(bridge::store_request(&kind, &args))
}

/// Evaluates a store request (StoreRequest JSON) against a snapshot of rows (JSON
/// `{runs, intents, instances}`) at `now_ms` with the core's own evaluator, and returns the
/// StoreAnswer JSON (the Supabase store decides with it).
#[napi]
pub fn simulate_request(request: String, snapshot: String, now_ms: i64) -> napi::Result<String, Code> {
    js(bridge::simulate_request(&request, &snapshot, now_ms))
}

/// One operation's store requests over a store with the TypeScript package's `LeaseStore`
/// methods, one request at a time (the core's `bridge::BridgeReferenceRequests`), for a host
/// that routes an operation's requests itself. Each method returns the next call's compact
/// text or, once decided, the request's StoreAnswer (JSON text, starting with `{`).
#[napi]
pub struct NativeReferenceRequests {
    inner: bridge::BridgeReferenceRequests,
}

#[napi]
impl NativeReferenceRequests {
    /// The requests of one operation; a write is decided at most `casRetries` times (taken
    /// within 1..=the contract's `maxCasRetries`).
    #[napi(constructor)]
    pub fn new(cas_retries: u32) -> NativeReferenceRequests {
        NativeReferenceRequests { inner: bridge::BridgeReferenceRequests::new(cas_retries) }
    }

    /// Starts one request (StoreRequest JSON text).
    #[napi]
    pub fn start(&mut self, request: String) -> napi::Result<String, Code> {
        js(self.inner.start(&request))
    }

    /// `now()` answered, in milliseconds.
    #[napi]
    pub fn resume_clock(&mut self, ms: i64) -> napi::Result<String, Code> {
        js(self.inner.clock(ms))
    }

    /// `now()` (milliseconds) and `getRun` (the row as JSON, or `null`) answered.
    #[napi]
    pub fn resume_read(&mut self, ms: i64, row: String) -> napi::Result<String, Code> {
        js(self.inner.read(ms, &row))
    }

    /// `conditionalUpdate` answered: the row (JSON) or `null`.
    #[napi]
    pub fn resume_written(&mut self, row: String) -> napi::Result<String, Code> {
        js(self.inner.written(&row))
    }

    /// `findExpiredLeases` answered: the rows (a JSON array).
    #[napi]
    pub fn resume_rows(&mut self, rows: String) -> napi::Result<String, Code> {
        js(self.inner.rows(&rows))
    }

    /// A call failed: the request ends.
    #[napi]
    pub fn resume_store_error(&mut self) {
        self.inner.failed();
    }
}
