//! [`ComponentFleet`] over the memory store as a conformance [`Engine`], so every scenario
//! in `tests/conformance/` replays through the component exactly as through the native
//! crate (`heart_fleet_core::conformance::replay`).

use heart_fleet_core::conformance::{EffectFn, Engine, LeaseWork, ProbeFn, Setup, WorkFn};
use heart_fleet_core::fleet::{ExecuteOutcome, LeaseOptions};
use heart_fleet_core::model::DispatchLogEntry;
use heart_fleet_core::ops::{
    AcquireResult, Fenced, GuardResult, LivenessSummary, LostCause, ReclaimSummary, ReconcileSummary, ReleaseTo,
    SendResult,
};
use heart_fleet_core::{
    FencingToken, HeartError, HeartMetrics, HeartReceipt, InstanceRow, IntentRow, Ledger, MemoryStore, RunRow,
    RunStatus, Timestamp,
};
use serde_json::Value;

use crate::{ComponentFleet, ComponentLeaseContext, FleetComponent};

/// Builds the component engine of a scenario (for `conformance::replay`).
pub fn engine(component: &FleetComponent, setup: Setup) -> Result<ComponentFleet<MemoryStore>, String> {
    ComponentFleet::new(component, setup.store)
        .map(|f| f.with_max_retries(setup.config.max_retries))
        .map_err(|e| e.to_string())
}

impl Engine for ComponentFleet<MemoryStore> {
    fn advance(&mut self, ms: i64) {
        self.store_mut().advance(ms);
    }
    fn set_clock(&mut self, at: Timestamp) {
        self.store_mut().set_now(at);
    }
    fn fail_after(&mut self, request: &str, after: u32, times: u32) {
        self.store_mut().fail_after(request, after, times);
    }
    fn acquire(&mut self, run_id: &str, owner: &str, ttl_seconds: i64) -> Result<AcquireResult, HeartError> {
        ComponentFleet::acquire(self, run_id, owner, ttl_seconds)
    }
    fn renew(&mut self, fence: &FencingToken, ttl_seconds: i64) -> Result<Fenced<FencingToken>, HeartError> {
        ComponentFleet::renew(self, fence, ttl_seconds)
    }
    fn release(&mut self, fence: &FencingToken, to: ReleaseTo) -> Result<Fenced<RunRow>, HeartError> {
        ComponentFleet::release(self, fence, to)
    }
    fn verify_fence(&mut self, fence: &FencingToken) -> Result<bool, HeartError> {
        ComponentFleet::verify_fence(self, fence)
    }
    fn reclaim_expired(&mut self, limit: u32) -> Result<ReclaimSummary, HeartError> {
        ComponentFleet::reclaim_expired(self, limit)
    }
    fn guard_irreversible(
        &mut self,
        fence: &FencingToken,
        ledger: Ledger<'_>,
        effect_key: &str,
        effect: &mut EffectFn<'_>,
    ) -> Result<GuardResult, HeartError> {
        ComponentFleet::guard_irreversible(self, fence, ledger, effect_key, effect)
    }
    fn send_once(
        &mut self,
        fence: &FencingToken,
        channel: &str,
        effect_key: &str,
        payload: &Value,
        send: &mut EffectFn<'_>,
    ) -> Result<SendResult, HeartError> {
        ComponentFleet::send_once(self, fence, channel, effect_key, payload, send)
    }
    fn reconcile_outbox(
        &mut self,
        probe: &mut ProbeFn<'_>,
        max_attempts: i64,
        limit: u32,
    ) -> Result<ReconcileSummary, HeartError> {
        ComponentFleet::reconcile_outbox(self, probe, max_attempts, limit)
    }
    fn execute_with_lease(
        &mut self,
        opts: &LeaseOptions,
        work: &mut WorkFn<'_>,
    ) -> Result<Result<ExecuteOutcome<Value>, String>, HeartError> {
        ComponentFleet::execute_with_lease(self, opts, |cx| work(&mut ComponentWork(cx)))
    }
    fn register_instance(&mut self, instance_id: &str) -> Result<InstanceRow, HeartError> {
        ComponentFleet::register_instance(self, instance_id, None, None)
    }
    fn heartbeat_instance(&mut self, instance_id: &str) -> Result<bool, HeartError> {
        ComponentFleet::heartbeat_instance(self, instance_id)
    }
    fn drain_instance(&mut self, instance_id: &str) -> Result<bool, HeartError> {
        ComponentFleet::drain_instance(self, instance_id)
    }
    fn reclaim_dead_instance_runs(&mut self, ttl_ms: i64, limit: u32) -> Result<LivenessSummary, HeartError> {
        ComponentFleet::reclaim_dead_instance_runs(self, ttl_ms, limit)
    }
    fn ensure_resource_run(
        &mut self,
        kind: &str,
        key: &str,
        objective: &str,
        created_by: &str,
    ) -> Result<(RunRow, bool), HeartError> {
        ComponentFleet::ensure_resource_run(self, kind, key, objective, created_by)
    }
    fn requeue_run(&mut self, run_id: &str, operator: &str) -> Result<RunRow, HeartError> {
        ComponentFleet::requeue_run(self, run_id, operator)
    }
    fn force_release(&mut self, run_id: &str) -> Result<RunRow, HeartError> {
        ComponentFleet::force_release(self, run_id)
    }
    fn list_runs(&mut self, status: Option<RunStatus>, limit: u32) -> Result<Vec<RunRow>, HeartError> {
        ComponentFleet::list_runs(self, status, limit)
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
    fn receipts(&mut self) -> Vec<HeartReceipt> {
        ComponentFleet::receipts(self).to_vec()
    }
    fn metrics(&mut self) -> HeartMetrics {
        *ComponentFleet::metrics(self)
    }
    fn runs(&mut self) -> Vec<RunRow> {
        self.store().runs().to_vec()
    }
    fn intents(&mut self) -> Vec<IntentRow> {
        self.store().intents().cloned().collect()
    }
    fn dispatch_log(&mut self) -> Vec<DispatchLogEntry> {
        self.store().dispatch_log().to_vec()
    }
    fn instances(&mut self) -> Vec<InstanceRow> {
        self.store().instances().cloned().collect()
    }
}

struct ComponentWork<'a, 'b>(&'a mut ComponentLeaseContext<'b, MemoryStore>);

impl LeaseWork for ComponentWork<'_, '_> {
    fn advance(&mut self, ms: i64) {
        self.0.fleet().store_mut().advance(ms);
    }
    fn heartbeat(&mut self) -> Option<LostCause> {
        self.0.heartbeat()
    }
    fn fence(&self) -> Option<FencingToken> {
        self.0.fence().cloned()
    }
    fn guard_irreversible(
        &mut self,
        fence: &FencingToken,
        ledger: Ledger<'_>,
        effect_key: &str,
        effect: &mut EffectFn<'_>,
    ) -> Result<GuardResult, HeartError> {
        self.0.fleet().guard_irreversible(fence, ledger, effect_key, effect)
    }
}
