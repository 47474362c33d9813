//! The fleet operations the commands use, behind one small trait, so the same commands can
//! run through the native crate ([`heart_fleet_core::HeartFleet`], `--engine native`, the
//! default) or through the WebAssembly component (`--engine component`, a `ComponentFleet`
//! of the wasmtime host implementing [`Engine`]; not wired yet: [`EngineKind::Component`]
//! answers [`EngineUnavailable`]).
//!
//! The trait is object safe with the store as an associated type: commands take
//! `&mut dyn Engine<Store = AnyStore>`. Closures cross it as `&mut dyn FnMut`, results are
//! the core's own types, and a command never reaches past it except through
//! [`Engine::store_mut`] (raw reads the lease API does not offer: a run's rows by key, the
//! receipts table).

use serde_json::Value;

use heart_fleet_core::ops::{
    self, AcquireResult, Fenced, LivenessSummary, LostCause, ReclaimSummary, ReconcileSummary, ReleaseTo, SendResult,
};
use heart_fleet_core::{
    ExecuteOutcome, FencingToken, HeartError, HeartFleet, HeartMetrics, InstanceRow, IntentRow, LeaseContext,
    LeaseOptions, LeaseStore, ProbeVerdict, RunRow, RunStatus,
};

/// What work sees while it runs under [`Engine::execute_with_lease`].
pub trait LeaseWork {
    /// The newest fencing token.
    fn fence(&self) -> Option<FencingToken>;
    /// The lease-lost signal: `Some(cause)` once the lease is gone.
    fn lost(&self) -> Option<LostCause>;
    /// Renews when a heartbeat period has passed; returns the lost cause, if any.
    fn heartbeat(&mut self) -> Option<LostCause>;
}

/// Work run under a lease: its result, or why it failed (the run is then released `failed`).
pub type Work<'a> = &'a mut dyn FnMut(&mut dyn LeaseWork) -> Result<Value, String>;

/// An irreversible effect: gets the fencing epoch, returns its evidence.
pub type Effect<'a> = &'a mut dyn FnMut(Option<i64>) -> Result<Value, String>;

/// A reconciler probe: `None` when there is no probe for the intent's channel.
pub type Probe<'a> = &'a mut dyn FnMut(&IntentRow) -> Option<Result<ProbeVerdict, String>>;

/// The fleet operations of the `heart-fleet` commands.
pub trait Engine {
    /// The store the engine runs on.
    type Store: LeaseStore;

    /// `native` or `component`.
    fn name(&self) -> &'static str;
    /// The engine's counters (this process only).
    fn metrics(&self) -> HeartMetrics;
    /// The store, for reads the lease API does not offer.
    fn store_mut(&mut self) -> &mut Self::Store;

    /// `acquire`.
    fn acquire(&mut self, run_id: &str, owner: &str, ttl_seconds: i64) -> Result<AcquireResult, HeartError>;
    /// `renew`.
    fn renew(&mut self, fence: &FencingToken, ttl_seconds: i64) -> Result<Fenced<FencingToken>, HeartError>;
    /// `release`.
    fn release(&mut self, fence: &FencingToken, to: ReleaseTo) -> Result<Fenced<RunRow>, HeartError>;
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
    /// The TTL sweep.
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
    fn show_run(&mut self, run_id: &str) -> Result<Option<RunRow>, HeartError>;
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

/// Which engine runs the commands (`--engine`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineKind {
    /// The native crate (`heart_fleet_core::HeartFleet`).
    #[default]
    Native,
    /// The WebAssembly component through wasmtime (not built into this CLI yet).
    Component,
}

/// `--engine component` before it is wired into the CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineUnavailable;

impl std::fmt::Display for EngineUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("--engine component is not built yet: this CLI runs the native crate only (use --engine native)")
    }
}

impl std::error::Error for EngineUnavailable {}

impl EngineKind {
    /// Fails with [`EngineUnavailable`] for an engine this build cannot run.
    pub fn check(self) -> Result<(), EngineUnavailable> {
        match self {
            EngineKind::Native => Ok(()),
            EngineKind::Component => Err(EngineUnavailable),
        }
    }
}

struct Cx<'a, 'b, S: LeaseStore>(&'a mut LeaseContext<'b, S>);

impl<S: LeaseStore> LeaseWork for Cx<'_, '_, S> {
    fn fence(&self) -> Option<FencingToken> {
        self.0.fence().cloned()
    }
    fn lost(&self) -> Option<LostCause> {
        self.0.lost()
    }
    fn heartbeat(&mut self) -> Option<LostCause> {
        self.0.heartbeat()
    }
}

impl<S: LeaseStore> Engine for HeartFleet<S> {
    type Store = S;

    fn name(&self) -> &'static str {
        "native"
    }
    fn metrics(&self) -> HeartMetrics {
        *HeartFleet::metrics(self)
    }
    fn store_mut(&mut self) -> &mut S {
        HeartFleet::store_mut(self)
    }
    fn acquire(&mut self, run_id: &str, owner: &str, ttl_seconds: i64) -> Result<AcquireResult, HeartError> {
        HeartFleet::acquire(self, run_id, owner, ttl_seconds)
    }
    fn renew(&mut self, fence: &FencingToken, ttl_seconds: i64) -> Result<Fenced<FencingToken>, HeartError> {
        HeartFleet::renew(self, fence, ttl_seconds)
    }
    fn release(&mut self, fence: &FencingToken, to: ReleaseTo) -> Result<Fenced<RunRow>, HeartError> {
        HeartFleet::release(self, fence, to)
    }
    fn send_once(
        &mut self,
        fence: &FencingToken,
        channel: &str,
        effect_key: &str,
        payload: &Value,
        send: Effect<'_>,
    ) -> Result<SendResult, HeartError> {
        HeartFleet::send_once(self, fence, channel, effect_key, payload, send)
    }
    fn reconcile_outbox(
        &mut self,
        probe: Probe<'_>,
        max_attempts: i64,
        limit: u32,
    ) -> Result<ReconcileSummary, HeartError> {
        HeartFleet::reconcile_outbox(self, probe, max_attempts, limit)
    }
    fn reclaim_expired(&mut self, limit: u32) -> Result<ReclaimSummary, HeartError> {
        HeartFleet::reclaim_expired(self, limit)
    }
    fn reclaim_dead_instance_runs(&mut self, ttl_ms: i64, limit: u32) -> Result<LivenessSummary, HeartError> {
        HeartFleet::reclaim_dead_instance_runs(self, ttl_ms, limit)
    }
    fn ensure_resource_run(
        &mut self,
        kind: &str,
        key: &str,
        objective: &str,
        created_by: &str,
    ) -> Result<(RunRow, bool), HeartError> {
        HeartFleet::ensure_resource_run(self, kind, key, objective, created_by)
    }
    fn execute_with_lease(
        &mut self,
        opts: &LeaseOptions,
        work: Work<'_>,
    ) -> Result<Result<ExecuteOutcome<Value>, String>, HeartError> {
        HeartFleet::execute_with_lease(self, opts, |cx| work(&mut Cx(cx)))
    }
    fn list_runs(&mut self, status: Option<RunStatus>, limit: u32) -> Result<Vec<RunRow>, HeartError> {
        HeartFleet::list_runs(self, status, limit)
    }
    fn show_run(&mut self, run_id: &str) -> Result<Option<RunRow>, HeartError> {
        self.run(ops::show_run(run_id))
    }
    fn requeue_run(&mut self, run_id: &str, operator: &str) -> Result<RunRow, HeartError> {
        HeartFleet::requeue_run(self, run_id, operator)
    }
    fn force_release(&mut self, run_id: &str) -> Result<RunRow, HeartError> {
        HeartFleet::force_release(self, run_id)
    }
    fn list_instances(&mut self) -> Result<Vec<InstanceRow>, HeartError> {
        self.run(ops::list_instances())
    }
    fn register_instance(
        &mut self,
        id: &str,
        hostname: Option<&str>,
        pid: Option<i64>,
    ) -> Result<InstanceRow, HeartError> {
        HeartFleet::register_instance(self, id, hostname, pid)
    }
    fn heartbeat_instance(&mut self, id: &str) -> Result<bool, HeartError> {
        HeartFleet::heartbeat_instance(self, id)
    }
    fn drain_instance(&mut self, id: &str) -> Result<bool, HeartError> {
        HeartFleet::drain_instance(self, id)
    }
}
