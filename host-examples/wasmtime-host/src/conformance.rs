//! [`ComponentFleet`] over the memory store as a conformance [`Engine`], so every scenario
//! in `tests/conformance/` replays through the component exactly as through the native
//! crate (`heart_fleet_core::conformance::replay`).

use heart_fleet_core::conformance::{Engine, ScenarioWork, Setup, WorkFn};
use heart_fleet_core::fleet::{ExecuteOutcome, LeaseOptions};
use std::sync::OnceLock;

use heart_fleet_core::chain::VerifyOptions;
use heart_fleet_core::{HeartError, MemoryStore};
use serde_json::Value;

use crate::{ComponentFleet, ComponentLeaseContext, FleetComponent, ReceiptVerifier};

/// Builds the component engine of a scenario (for `conformance::replay`).
pub fn engine(component: &FleetComponent, setup: Setup) -> Result<ComponentFleet<MemoryStore>, String> {
    ComponentFleet::new(component, setup.store)
        .map(|f| f.with_max_retries(setup.config.max_retries))
        .map_err(|e| e.to_string())
}

impl Engine for ComponentFleet<MemoryStore> {
    fn memory(&mut self) -> &mut MemoryStore {
        self.store_mut()
    }
    fn execute_scenario_work(
        &mut self,
        opts: &LeaseOptions,
        work: &mut WorkFn<'_>,
    ) -> Result<Result<ExecuteOutcome<Value>, String>, HeartError> {
        ComponentFleet::execute_with_lease(self, opts, |cx| work(cx))
    }
    fn canonicalize(&mut self, json: &str) -> Result<String, HeartError> {
        ComponentFleet::canonicalize(self, json)
    }
    fn digest(&mut self, json: &str) -> Result<String, HeartError> {
        ComponentFleet::digest(self, json)
    }
    fn deterministic_resource_id(&mut self, kind: &str, key: &str) -> Result<String, HeartError> {
        ComponentFleet::deterministic_resource_id(self, kind, key)
    }
    fn effect_key(&mut self, prefix: &str, identity: &Value) -> Result<String, HeartError> {
        ComponentFleet::effect_key(self, prefix, identity)
    }
    fn verify_receipt(&mut self, receipt: &Value) -> Result<(), HeartError> {
        ComponentFleet::verify_receipt(self, receipt)
    }
    /// Through the receipt-log verifier component (the lease component does not carry it); the
    /// scenario's JSON options become its typed options here.
    fn verify_receipts(&mut self, log: &[u8], options: &str) -> Result<Value, HeartError> {
        let options = VerifyOptions::parse(options)?;
        let report = verifier()?.verify_receipts(log, &options)?;
        serde_json::to_value(report).map_err(|e| HeartError::invalid(format!("the report: {e}")))
    }
}

/// The verifier component, compiled once per process.
fn verifier() -> Result<&'static ReceiptVerifier, HeartError> {
    static VERIFIER: OnceLock<Result<ReceiptVerifier, HeartError>> = OnceLock::new();
    VERIFIER.get_or_init(ReceiptVerifier::locate).as_ref().map_err(Clone::clone)
}

impl ScenarioWork for ComponentLeaseContext<'_, MemoryStore> {
    fn advance(&mut self, ms: i64) {
        self.fleet().store_mut().advance(ms);
    }
}
