//! [`ComponentFleet`] over the memory store as a conformance [`Engine`], so every scenario
//! in `tests/conformance/` replays through the component exactly as through the native
//! crate (`heart_fleet_core::conformance::replay`).

use heart_fleet_core::conformance::{Engine, ScenarioWork, Setup, WorkFn};
use heart_fleet_core::fleet::{ExecuteOutcome, LeaseOptions};
use heart_fleet_core::{ErrorCode, HeartError, MemoryStore};
use serde_json::Value;

use crate::{ComponentFleet, ComponentLeaseContext, FleetComponent};

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
    fn verify_receipts(&mut self, _log: &[u8], _options: &str) -> Result<Value, HeartError> {
        // Not the native verifier behind the component's back: the component has none.
        Err(HeartError::new(ErrorCode::InvalidState, VERIFY_RECEIPTS_ABSENT))
    }
}

/// Why the component has no `verifyReceipts`: the receipt chain's verifier adds about 58 KB
/// (98 KB with Ed25519) to a component whose size is budgeted.
pub const VERIFY_RECEIPTS_ABSENT: &str = "the component does not export verifyReceipts (the receipt chain would add about 58 KB to its \
     size budget); verify logs with the CLI, Node or Python";

impl ScenarioWork for ComponentLeaseContext<'_, MemoryStore> {
    fn advance(&mut self, ms: i64) {
        self.fleet().store_mut().advance(ms);
    }
}
