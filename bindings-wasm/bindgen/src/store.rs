//! [`NativeMemoryStore`] (the core's deterministic memory store, behind `MemoryLeaseStore`)
//! and the free functions about stores and scenarios.

use heart_fleet_core::bridge::{self, BridgeMemoryStore};
use wasm_bindgen::prelude::*;

use crate::{from_heart, int, num, text, uint32};

/// The memory store: an injectable clock (milliseconds since the Unix epoch), runs, effect
/// intents, the dispatch log and instances, with injectable failures for tests.
#[wasm_bindgen]
pub struct NativeMemoryStore {
    inner: BridgeMemoryStore,
}

impl NativeMemoryStore {
    /// The bridge handle (shared with the fleets it is attached to).
    pub(crate) fn bridge(&self) -> &BridgeMemoryStore {
        &self.inner
    }
}

#[wasm_bindgen]
impl NativeMemoryStore {
    /// A store whose clock starts at `nowMs`.
    #[wasm_bindgen(constructor)]
    pub fn new(now_ms: JsValue) -> Result<NativeMemoryStore, JsValue> {
        Ok(NativeMemoryStore { inner: BridgeMemoryStore::new(int("nowMs", &now_ms)?) })
    }

    /// The store seeded by a conformance scenario (its clock, runs, instances and intents).
    #[wasm_bindgen(js_name = fromScenario)]
    pub fn from_scenario(scenario: JsValue) -> Result<NativeMemoryStore, JsValue> {
        let inner = BridgeMemoryStore::from_scenario(&text("scenario", &scenario)?).map_err(from_heart)?;
        Ok(NativeMemoryStore { inner })
    }

    /// The clock, in milliseconds since the Unix epoch.
    #[wasm_bindgen(js_name = nowMs)]
    pub fn now_ms(&self) -> Result<f64, JsValue> {
        self.inner.now_ms().map(num).map_err(from_heart)
    }

    /// Sets the clock.
    #[wasm_bindgen(js_name = setNow)]
    pub fn set_now(&self, now_ms: JsValue) -> Result<(), JsValue> {
        self.inner.set_now(int("nowMs", &now_ms)?).map_err(from_heart)
    }

    /// Moves the clock by `ms` (may be negative).
    pub fn advance(&self, ms: JsValue) -> Result<(), JsValue> {
        self.inner.advance(int("ms", &ms)?).map_err(from_heart)
    }

    /// Inserts a run (JSON of a full `agent_runs` row; the timestamps are set to the clock).
    /// A reused idempotency key fails with the reference's message.
    pub fn insert(&self, run: JsValue) -> Result<(), JsValue> {
        self.inner.insert(&text("run", &run)?).map_err(from_heart)
    }

    /// Inserts an `agent_instances` row as given.
    #[wasm_bindgen(js_name = insertInstance)]
    pub fn insert_instance(&self, row: JsValue) -> Result<(), JsValue> {
        self.inner.insert_instance(&text("row", &row)?).map_err(from_heart)
    }

    /// Inserts an `effect_intents` row as given.
    #[wasm_bindgen(js_name = insertIntent)]
    pub fn insert_intent(&self, row: JsValue) -> Result<(), JsValue> {
        self.inner.insert_intent(&text("row", &row)?).map_err(from_heart)
    }

    /// Lets `after` requests named `request` (`update_run`, `read_run`, …, or `*`) through,
    /// then fails the next `times` with a store error (changing nothing).
    #[wasm_bindgen(js_name = failAfter)]
    pub fn fail_after(&self, request: JsValue, after: JsValue, times: JsValue) -> Result<(), JsValue> {
        let request = text("request", &request)?;
        self.inner.fail_after(&request, uint32("after", &after)?, uint32("times", &times)?).map_err(from_heart)
    }

    /// Executes one store request (StoreRequest JSON) and returns the StoreAnswer JSON.
    /// A failure (an injected one) is thrown with code `store-unavailable`.
    #[wasm_bindgen(js_name = executeJson)]
    pub fn execute_json(&self, request: JsValue) -> Result<String, JsValue> {
        self.inner.execute_json(&text("request", &request)?).map_err(from_heart)
    }

    /// One run (JSON), or `null`.
    #[wasm_bindgen(js_name = runJson)]
    pub fn run_json(&self, run_id: JsValue) -> Result<String, JsValue> {
        self.inner.run_json(&text("runId", &run_id)?).map_err(from_heart)
    }

    /// Every run in insertion order (JSON array).
    #[wasm_bindgen(js_name = runsJson)]
    pub fn runs_json(&self) -> Result<String, JsValue> {
        self.inner.runs_json().map_err(from_heart)
    }

    /// Every intent by key (JSON array).
    #[wasm_bindgen(js_name = intentsJson)]
    pub fn intents_json(&self) -> Result<String, JsValue> {
        self.inner.intents_json().map_err(from_heart)
    }

    /// The dispatch log in order (JSON array).
    #[wasm_bindgen(js_name = dispatchLogJson)]
    pub fn dispatch_log_json(&self) -> Result<String, JsValue> {
        self.inner.dispatch_log_json().map_err(from_heart)
    }

    /// Every instance by id (JSON array).
    #[wasm_bindgen(js_name = instancesJson)]
    pub fn instances_json(&self) -> Result<String, JsValue> {
        self.inner.instances_json().map_err(from_heart)
    }

    /// How many requests the store answered (or failed).
    #[wasm_bindgen(js_name = requestCount)]
    pub fn request_count(&self) -> Result<f64, JsValue> {
        self.inner.request_count().map(num).map_err(from_heart)
    }
}

/// The fleet configuration of a conformance scenario: `{"maxRetries": n | null}`.
#[cfg(feature = "replay")]
#[wasm_bindgen(js_name = scenarioConfig)]
pub fn scenario_config(scenario: JsValue) -> Result<String, JsValue> {
    bridge::scenario_config(&text("scenario", &scenario)?).map_err(from_heart)
}

/// Replays a conformance scenario on the core's own `HeartFleet` over the memory store and
/// returns the replay (JSON). Bindings compare their own replay with it.
#[cfg(feature = "replay")]
#[wasm_bindgen(js_name = nativeReplay)]
pub fn native_replay(scenario: JsValue) -> Result<String, JsValue> {
    bridge::native_replay(&text("scenario", &scenario)?).map_err(from_heart)
}

/// A store request that is not part of an operation (JSON text): the kinds and their
/// arguments are those of the core's `bridge::store_request`.
#[wasm_bindgen(js_name = storeRequest)]
pub fn store_request(kind: JsValue, args: JsValue) -> Result<String, JsValue> {
    bridge::store_request(&text("kind", &kind)?, &text("args", &args)?).map_err(from_heart)
}

/// Evaluates a store request (StoreRequest JSON) against a snapshot of rows (JSON
/// `{runs, intents, instances}`) at `nowMs` with the core's own evaluator, and returns the
/// StoreAnswer JSON. The Deno KV store decides every request this way.
#[wasm_bindgen(js_name = simulateRequest)]
pub fn simulate_request(request: JsValue, snapshot: JsValue, now_ms: JsValue) -> Result<String, JsValue> {
    let request = text("request", &request)?;
    let snapshot = text("snapshot", &snapshot)?;
    bridge::simulate_request(&request, &snapshot, int("nowMs", &now_ms)?).map_err(from_heart)
}

/// The statements (JSON array of `{sql, params}`) that a SQL store of `dialect` runs for a
/// request (StoreRequest JSON).
#[cfg(feature = "sql")]
#[wasm_bindgen(js_name = sqlRender)]
pub fn sql_render(request_json: JsValue, dialect_name: JsValue) -> Result<String, JsValue> {
    bridge::sql_render(&text("request", &request_json)?, &text("dialect", &dialect_name)?).map_err(from_heart)
}

/// Decodes the rows a SQL driver returned (one array of rows per statement) into the
/// StoreAnswer JSON. Malformed rows are `store-protocol` errors.
#[cfg(feature = "sql")]
#[wasm_bindgen(js_name = sqlDecode)]
pub fn sql_decode(request_json: JsValue, dialect_name: JsValue, results_json: JsValue) -> Result<String, JsValue> {
    let request = text("request", &request_json)?;
    let dialect = text("dialect", &dialect_name)?;
    bridge::sql_decode(&request, &dialect, &text("results", &results_json)?).map_err(from_heart)
}

/// The migration protocol of a dialect (JSON; `heart_fleet_core::sql::MigrationPlan`).
#[cfg(feature = "sql")]
#[wasm_bindgen(js_name = sqlMigrationPlan)]
pub fn sql_migration_plan(dialect_name: JsValue) -> Result<String, JsValue> {
    bridge::sql_migration_plan(&text("dialect", &dialect_name)?).map_err(from_heart)
}

/// The insert of one receipt (JSON) into `heart_receipts`, as `{sql, params}` JSON.
#[cfg(feature = "sql")]
#[wasm_bindgen(js_name = sqlReceiptInsert)]
pub fn sql_receipt_insert(dialect_name: JsValue, receipt_json: JsValue) -> Result<String, JsValue> {
    let dialect = text("dialect", &dialect_name)?;
    bridge::sql_receipt_insert(&dialect, &text("receipt", &receipt_json)?).map_err(from_heart)
}

/// One operation's store requests over a store with the TypeScript package's `LeaseStore`
/// methods, one request at a time (the core's `bridge::BridgeReferenceRequests`), for a host
/// that routes an operation's requests itself. Each method returns the next call's compact
/// text or, once decided, the request's StoreAnswer (JSON text, starting with `{`).
#[wasm_bindgen]
pub struct NativeReferenceRequests {
    inner: bridge::BridgeReferenceRequests,
}

#[wasm_bindgen]
impl NativeReferenceRequests {
    /// The requests of one operation; a write is decided at most `casRetries` times (taken
    /// within 1..=the contract's `maxCasRetries`).
    #[wasm_bindgen(constructor)]
    pub fn new(cas_retries: JsValue) -> Result<NativeReferenceRequests, JsValue> {
        let cas_retries = crate::uint32("casRetries", &cas_retries)?;
        Ok(NativeReferenceRequests { inner: bridge::BridgeReferenceRequests::new(cas_retries) })
    }

    /// Starts one request (StoreRequest JSON text).
    pub fn start(&mut self, request: JsValue) -> Result<String, JsValue> {
        self.inner.start(&text("request", &request)?).map_err(from_heart)
    }

    /// `now()` answered, in milliseconds.
    #[wasm_bindgen(js_name = resumeClock)]
    pub fn resume_clock(&mut self, ms: JsValue) -> Result<String, JsValue> {
        self.inner.clock(int("ms", &ms)?).map_err(from_heart)
    }

    /// `now()` (milliseconds) and `getRun` (the row as JSON, or `null`) answered.
    #[wasm_bindgen(js_name = resumeRead)]
    pub fn resume_read(&mut self, ms: JsValue, row: JsValue) -> Result<String, JsValue> {
        self.inner.read(int("ms", &ms)?, &text("row", &row)?).map_err(from_heart)
    }

    /// `conditionalUpdate` answered: the row (JSON) or `null`.
    #[wasm_bindgen(js_name = resumeWritten)]
    pub fn resume_written(&mut self, row: JsValue) -> Result<String, JsValue> {
        self.inner.written(&text("row", &row)?).map_err(from_heart)
    }

    /// `findExpiredLeases` answered: the rows (a JSON array).
    #[wasm_bindgen(js_name = resumeRows)]
    pub fn resume_rows(&mut self, rows: JsValue) -> Result<String, JsValue> {
        self.inner.rows(&text("rows", &rows)?).map_err(from_heart)
    }

    /// A call failed: the request ends.
    #[wasm_bindgen(js_name = resumeStoreError)]
    pub fn resume_store_error(&mut self) {
        self.inner.failed();
    }
}

/// A PostgreSQL store's deadlines (JSON: `statementTimeoutMs`, `maxStatementTimeoutMs`,
/// `connectTimeoutMs`, `cancelGraceMs`), the same in every driver.
#[cfg(feature = "sql")]
#[wasm_bindgen(js_name = postgresDeadlines)]
pub fn postgres_deadlines() -> String {
    bridge::postgres_deadlines_json()
}

/// The server-side `statement_timeout` for a statement deadline of `clientMs` (a fifth
/// shorter, by at most 100 ms): the core's `sql::deadlines::server_statement_timeout_ms`.
#[cfg(feature = "sql")]
#[wasm_bindgen(js_name = serverStatementTimeoutMs)]
pub fn server_statement_timeout_ms(client_ms: JsValue) -> Result<f64, JsValue> {
    let ms = uint32("clientMs", &client_ms)?;
    let server = heart_fleet_core::sql::deadlines::server_statement_timeout_ms(u64::from(ms));
    // At most the client's deadline, so within u32.
    Ok(f64::from(u32::try_from(server).unwrap_or(ms)))
}
