//! [`FleetApi`]: the fleet operations as one object-safe trait.
//!
//! Two engines run them: the native [`HeartFleet`] (implemented here) and the WebAssembly
//! component through wasmtime (`ComponentFleet` in `heart-fleet-wasmtime-host`). Code that
//! must run on either, like the CLI's commands and the conformance runner
//! (`conformance::Engine`, with the `testkit` feature, extends this trait with the memory
//! store's controls),
//! takes `&mut dyn FleetApi`. The inherent methods of each engine stay the primary API for
//! users who know their engine; they take generic closures, the trait takes `dyn` ones.

/// The JSON value of payloads, effect evidence and work results.
pub use serde_json::Value;

use crate::fleet::{ExecuteOutcome, HeartFleet, LeaseContext, LeaseOptions};
use crate::machine::ProbeVerdict;
use crate::metrics::HeartMetrics;
use crate::model::{FencingToken, InstanceRow, IntentRow, RunRow, RunStatus};
use crate::ops::{
    AcquireResult, Fenced, GuardResult, LivenessSummary, LostCause, ReclaimSummary, ReconcileSummary, ReleaseTo,
    SendResult,
};
use crate::receipt::HeartReceipt;
use crate::{HeartError, LeaseStore, Ledger};

/// An irreversible effect: gets the fencing epoch, returns its evidence (for send-once, the
/// `external_ref`), or why it failed.
pub type Effect<'a> = &'a mut dyn FnMut(Option<i64>) -> Result<Value, String>;

/// A reconciler probe: `None` when there is no probe for the intent's channel.
pub type Probe<'a> = &'a mut dyn FnMut(&IntentRow) -> Option<Result<ProbeVerdict, String>>;

/// Work run under a lease: its result, or why it failed (the run is then released `failed`).
pub type Work<'a> = &'a mut dyn FnMut(&mut dyn LeaseWork) -> Result<Value, String>;

/// What work sees while it runs under [`FleetApi::execute_with_lease`].
pub trait LeaseWork {
    /// The newest fencing token (renewals rotate it).
    fn fence(&self) -> Option<FencingToken>;
    /// The lease-lost signal: `Some(cause)` once the lease is gone.
    fn lost(&self) -> Option<LostCause>;
    /// A cooperative heartbeat: renews when a period has passed; returns the lost cause.
    fn heartbeat(&mut self) -> Option<LostCause>;
    /// The fleet, for fenced operations inside the work (guard, send-once).
    fn fleet(&mut self) -> &mut dyn FleetApi;
}

/// The fleet operations, with [`HeartFleet`]'s signatures and closures as `dyn`.
pub trait FleetApi {
    /// The counters.
    fn metrics(&self) -> HeartMetrics;
    /// The receipts kept so far, in order (empty when a sink takes them).
    fn receipts(&self) -> Vec<HeartReceipt>;
    /// `acquire`.
    fn acquire(&mut self, run_id: &str, owner: &str, ttl_seconds: i64) -> Result<AcquireResult, HeartError>;
    /// `renew`.
    fn renew(&mut self, fence: &FencingToken, ttl_seconds: i64) -> Result<Fenced<FencingToken>, HeartError>;
    /// `release`.
    fn release(&mut self, fence: &FencingToken, to: ReleaseTo) -> Result<Fenced<RunRow>, HeartError>;
    /// `verifyFence`.
    fn verify_fence(&mut self, fence: &FencingToken) -> Result<bool, HeartError>;
    /// `guardIrreversible`: `effect` runs at most once per key in `ledger`.
    fn guard_irreversible(
        &mut self,
        fence: &FencingToken,
        ledger: Ledger<'_>,
        effect_key: &str,
        effect: Effect<'_>,
    ) -> Result<GuardResult, HeartError>;
    /// `sendOnce`: `send` is the effect.
    fn send_once(
        &mut self,
        fence: &FencingToken,
        channel: &str,
        effect_key: &str,
        payload: &Value,
        send: Effect<'_>,
    ) -> Result<SendResult, HeartError>;
    /// `reconcileOutbox`.
    fn reconcile_outbox(
        &mut self,
        probe: Probe<'_>,
        max_attempts: i64,
        limit: u32,
    ) -> Result<ReconcileSummary, HeartError>;
    /// The TTL sweep (`reclaimExpired`).
    fn reclaim_expired(&mut self, limit: u32) -> Result<ReclaimSummary, HeartError>;
    /// The liveness sweep.
    fn reclaim_dead_instance_runs(&mut self, ttl_ms: i64, limit: u32) -> Result<LivenessSummary, HeartError>;
    /// Find or create a resource run.
    fn ensure_resource_run(
        &mut self,
        kind: &str,
        key: &str,
        objective: &str,
        created_by: &str,
    ) -> Result<(RunRow, bool), HeartError>;
    /// `executeWithLease` for synchronous work.
    fn execute_with_lease(
        &mut self,
        opts: &LeaseOptions,
        work: Work<'_>,
    ) -> Result<Result<ExecuteOutcome<Value>, String>, HeartError>;
    /// Operator: list runs.
    fn list_runs(&mut self, status: Option<RunStatus>, limit: u32) -> Result<Vec<RunRow>, HeartError>;
    /// Operator: one run.
    fn get_run(&mut self, run_id: &str) -> Result<Option<RunRow>, HeartError>;
    /// Operator: requeue a quarantined run.
    fn requeue_run(&mut self, run_id: &str, operator: &str) -> Result<RunRow, HeartError>;
    /// Operator: force-release a lease.
    fn force_release(&mut self, run_id: &str) -> Result<RunRow, HeartError>;
    /// Every instance.
    fn list_instances(&mut self) -> Result<Vec<InstanceRow>, HeartError>;
    /// Register (or re-register) an instance.
    fn register_instance(
        &mut self,
        id: &str,
        hostname: Option<&str>,
        pid: Option<i64>,
    ) -> Result<InstanceRow, HeartError>;
    /// Heartbeat an instance (`false`: unknown or dead).
    fn heartbeat_instance(&mut self, id: &str) -> Result<bool, HeartError>;
    /// Drain an instance (`false`: unknown or dead).
    fn drain_instance(&mut self, id: &str) -> Result<bool, HeartError>;
}

/// Implements [`LeaseWork`] for a lease context type and [`FleetApi`] for its fleet type by
/// calling their inherent methods of the same names: `metrics` / `receipts` return
/// references there, and the closures are generic there and `dyn` here; everything else
/// passes straight through. Both engines use it, so the trait stays a pure view of the
/// inherent APIs.
///
/// `fleet_api_by_inherent_methods!(Fleet<S>, Context<'_, S>, where S: Bounds)`.
#[macro_export]
macro_rules! fleet_api_by_inherent_methods {
    ($fleet:ty, $cx:ty, where S: $($bounds:tt)+) => {
        impl<S: $($bounds)+> $crate::api::LeaseWork for $cx {
            fn fence(&self) -> Option<$crate::FencingToken> {
                <$cx>::fence(self).cloned()
            }
            fn lost(&self) -> Option<$crate::ops::LostCause> {
                <$cx>::lost(self)
            }
            fn heartbeat(&mut self) -> Option<$crate::ops::LostCause> {
                <$cx>::heartbeat(self)
            }
            fn fleet(&mut self) -> &mut dyn $crate::FleetApi {
                <$cx>::fleet(self)
            }
        }

        impl<S: $($bounds)+> $crate::FleetApi for $fleet {
            fn metrics(&self) -> $crate::HeartMetrics {
                *<$fleet>::metrics(self)
            }
            fn receipts(&self) -> Vec<$crate::HeartReceipt> {
                <$fleet>::receipts(self).to_vec()
            }
            fn acquire(
                &mut self,
                run_id: &str,
                owner: &str,
                ttl_seconds: i64,
            ) -> Result<$crate::ops::AcquireResult, $crate::HeartError> {
                <$fleet>::acquire(self, run_id, owner, ttl_seconds)
            }
            fn renew(
                &mut self,
                fence: &$crate::FencingToken,
                ttl_seconds: i64,
            ) -> Result<$crate::ops::Fenced<$crate::FencingToken>, $crate::HeartError> {
                <$fleet>::renew(self, fence, ttl_seconds)
            }
            fn release(
                &mut self,
                fence: &$crate::FencingToken,
                to: $crate::ops::ReleaseTo,
            ) -> Result<$crate::ops::Fenced<$crate::RunRow>, $crate::HeartError> {
                <$fleet>::release(self, fence, to)
            }
            fn verify_fence(&mut self, fence: &$crate::FencingToken) -> Result<bool, $crate::HeartError> {
                <$fleet>::verify_fence(self, fence)
            }
            fn guard_irreversible(
                &mut self,
                fence: &$crate::FencingToken,
                ledger: $crate::Ledger<'_>,
                effect_key: &str,
                effect: $crate::api::Effect<'_>,
            ) -> Result<$crate::ops::GuardResult, $crate::HeartError> {
                <$fleet>::guard_irreversible(self, fence, ledger, effect_key, effect)
            }
            fn send_once(
                &mut self,
                fence: &$crate::FencingToken,
                channel: &str,
                effect_key: &str,
                payload: &$crate::api::Value,
                send: $crate::api::Effect<'_>,
            ) -> Result<$crate::ops::SendResult, $crate::HeartError> {
                <$fleet>::send_once(self, fence, channel, effect_key, payload, send)
            }
            fn reconcile_outbox(
                &mut self,
                probe: $crate::api::Probe<'_>,
                max_attempts: i64,
                limit: u32,
            ) -> Result<$crate::ops::ReconcileSummary, $crate::HeartError> {
                <$fleet>::reconcile_outbox(self, probe, max_attempts, limit)
            }
            fn reclaim_expired(&mut self, limit: u32) -> Result<$crate::ops::ReclaimSummary, $crate::HeartError> {
                <$fleet>::reclaim_expired(self, limit)
            }
            fn reclaim_dead_instance_runs(
                &mut self,
                ttl_ms: i64,
                limit: u32,
            ) -> Result<$crate::ops::LivenessSummary, $crate::HeartError> {
                <$fleet>::reclaim_dead_instance_runs(self, ttl_ms, limit)
            }
            fn ensure_resource_run(
                &mut self,
                kind: &str,
                key: &str,
                objective: &str,
                created_by: &str,
            ) -> Result<($crate::RunRow, bool), $crate::HeartError> {
                <$fleet>::ensure_resource_run(self, kind, key, objective, created_by)
            }
            fn execute_with_lease(
                &mut self,
                opts: &$crate::LeaseOptions,
                work: $crate::api::Work<'_>,
            ) -> Result<Result<$crate::ExecuteOutcome<$crate::api::Value>, String>, $crate::HeartError> {
                <$fleet>::execute_with_lease(self, opts, |cx| work(cx))
            }
            fn list_runs(
                &mut self,
                status: Option<$crate::RunStatus>,
                limit: u32,
            ) -> Result<Vec<$crate::RunRow>, $crate::HeartError> {
                <$fleet>::list_runs(self, status, limit)
            }
            fn get_run(&mut self, run_id: &str) -> Result<Option<$crate::RunRow>, $crate::HeartError> {
                <$fleet>::get_run(self, run_id)
            }
            fn requeue_run(&mut self, run_id: &str, operator: &str) -> Result<$crate::RunRow, $crate::HeartError> {
                <$fleet>::requeue_run(self, run_id, operator)
            }
            fn force_release(&mut self, run_id: &str) -> Result<$crate::RunRow, $crate::HeartError> {
                <$fleet>::force_release(self, run_id)
            }
            fn list_instances(&mut self) -> Result<Vec<$crate::InstanceRow>, $crate::HeartError> {
                <$fleet>::list_instances(self)
            }
            fn register_instance(
                &mut self,
                id: &str,
                hostname: Option<&str>,
                pid: Option<i64>,
            ) -> Result<$crate::InstanceRow, $crate::HeartError> {
                <$fleet>::register_instance(self, id, hostname, pid)
            }
            fn heartbeat_instance(&mut self, id: &str) -> Result<bool, $crate::HeartError> {
                <$fleet>::heartbeat_instance(self, id)
            }
            fn drain_instance(&mut self, id: &str) -> Result<bool, $crate::HeartError> {
                <$fleet>::drain_instance(self, id)
            }
        }
    };
}

fleet_api_by_inherent_methods!(HeartFleet<S>, LeaseContext<'_, S>, where S: LeaseStore);
