//! The fleet operations the commands use, behind one small trait, so the same commands can
//! run through the native crate ([`heart_fleet_core::HeartFleet`], `--engine native`, the
//! default) or through the WebAssembly component (`--engine component`: a
//! [`ComponentFleet`] of `heart-fleet-wasmtime-host` running `target/component/heart_fleet.wasm`).
//!
//! The trait is object safe with the store as an associated type: commands take
//! `&mut dyn Engine<Store = AnyStore>`. Closures cross it as `&mut dyn FnMut`, results are
//! the core's own types, and a command never reaches past it except through
//! [`Engine::store_mut`] (raw reads the lease API does not offer: a run's rows by key, the
//! receipts table).
//!
//! [`EngineKind::prepare`] turns `--engine` into a [`Prepared`] engine (for the component:
//! located and compiled once per process, before any store is opened), and
//! [`Prepared::build`] puts a fleet over a store. Errors of the component engine are flattened
//! to one line (a trap's message carries a multi-line wasm backtrace): a trap is contained by
//! [`ComponentFleet`] (the instance is discarded) and reaches the commands as an ordinary
//! `store-protocol` error.

use std::path::PathBuf;
use std::sync::OnceLock;

use heart_fleet_core::receipt::ReceiptSink;
use heart_fleet_wasmtime_host::{
    COMPONENT_ENV, ComponentFleet, ComponentLeaseContext, DEFAULT_FUEL_PER_CALL, FleetComponent,
};
use serde_json::Value;

use heart_fleet_core::ops::{
    self, AcquireResult, Fenced, GuardResult, LivenessSummary, LostCause, ReclaimSummary, ReconcileSummary, ReleaseTo,
    SendResult,
};
use heart_fleet_core::{
    ExecuteOutcome, FencingToken, HeartError, HeartFleet, HeartMetrics, InstanceRow, IntentRow, LeaseContext,
    LeaseOptions, LeaseStore, Ledger, ProbeVerdict, RunRow, RunStatus,
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
    /// The WebAssembly component (`target/component/heart_fleet.wasm`, or the file named by
    /// `$HEART_FLEET_COMPONENT`) through wasmtime.
    Component,
}

/// The command that builds the component; errors about a missing component name it.
pub const BUILD_COMPONENT: &str = "cargo run -p xtask -- component";

/// `--engine component` without a usable component: one line naming the file and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineUnavailable(pub String);

impl std::fmt::Display for EngineUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EngineUnavailable {}

impl EngineKind {
    /// `native` or `component`, as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Native => "native",
            EngineKind::Component => "component",
        }
    }

    /// Makes the engine ready to build fleets: nothing to do for the native crate; for the
    /// component, locates it (`$HEART_FLEET_COMPONENT`, else where [`BUILD_COMPONENT`] writes
    /// it) and compiles it, once per process and file. A missing or broken component is an
    /// [`EngineUnavailable`] naming the file and how to build it.
    pub fn prepare(self) -> Result<Prepared, EngineUnavailable> {
        match self {
            EngineKind::Native => Ok(Prepared::Native),
            EngineKind::Component => load_component()
                .map(|component| Prepared::Component { component, fuel_per_call: DEFAULT_FUEL_PER_CALL }),
        }
    }

    /// Fails with [`EngineUnavailable`] for an engine this build cannot run here (see
    /// [`EngineKind::prepare`]).
    pub fn check(self) -> Result<(), EngineUnavailable> {
        self.prepare().map(|_| ())
    }
}

/// The component file `--engine component` uses: `$HEART_FLEET_COMPONENT`, else
/// [`FleetComponent::default_path`] (tidied: no `..` components).
pub fn component_path() -> PathBuf {
    let path = std::env::var_os(COMPONENT_ENV).map_or_else(FleetComponent::default_path, PathBuf::from);
    let mut tidy = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir if tidy.file_name().is_some() => {
                tidy.pop();
            }
            std::path::Component::CurDir => {}
            other => tidy.push(other),
        }
    }
    tidy
}

/// Compiled components by file (compiling takes a second or more; commands run in-process by
/// the tests open many sessions).
fn load_component() -> Result<FleetComponent, EngineUnavailable> {
    static LOADED: OnceLock<std::sync::Mutex<Vec<(PathBuf, FleetComponent)>>> = OnceLock::new();
    let path = component_path();
    let cache = LOADED.get_or_init(Default::default);
    if let Some((_, c)) = cache.lock().ok().and_then(|l| l.iter().find(|(p, _)| *p == path).cloned()) {
        return Ok(c);
    }
    if !path.is_file() {
        return Err(EngineUnavailable(format!(
            "--engine component: the component {} is missing: build it with `{BUILD_COMPONENT}` \
             (or name one with ${COMPONENT_ENV})",
            path.display()
        )));
    }
    let component = FleetComponent::from_file(&path).map_err(|e| {
        EngineUnavailable(format!("--engine component: {} (rebuild it with `{BUILD_COMPONENT}`)", one_line(&e.message)))
    })?;
    if let Ok(mut l) = cache.lock() {
        l.push((path, component.clone()));
    }
    Ok(component)
}

/// `text` on one line: its lines trimmed and joined with `; ` (with a space after a line
/// ending in `:`). A trap's message carries a wasm backtrace, one frame a line.
pub fn one_line(text: &str) -> String {
    if !text.contains(['\n', '\r']) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !out.is_empty() {
            out.push_str(if out.ends_with(':') { " " } else { "; " });
        }
        out.push_str(line);
    }
    out
}

/// An engine ready to put fleets over stores (see [`EngineKind::prepare`]).
#[derive(Debug, Clone)]
pub enum Prepared {
    /// The native crate.
    Native,
    /// The compiled component.
    Component {
        /// The component, compiled.
        component: FleetComponent,
        /// The fuel one export call may burn before it traps (roughly: wasm instructions).
        fuel_per_call: u64,
    },
}

impl Prepared {
    /// Sets the component's fuel per export call (`None`, or the native engine: unchanged).
    /// A call that runs out traps; the trap is contained and reported as an error.
    #[must_use]
    pub fn with_fuel_per_call(self, fuel: Option<u64>) -> Prepared {
        match (self, fuel) {
            (Prepared::Component { component, .. }, Some(fuel_per_call)) => {
                Prepared::Component { component, fuel_per_call }
            }
            (other, _) => other,
        }
    }

    /// A fleet over `store` with the retry ceiling `max_retries` (`None`: never quarantine),
    /// its receipts going to `sink`. The component is instantiated here; that can fail (a
    /// trap in its start-up) with a one-line `store-protocol` error.
    pub fn build<S: LeaseStore + 'static>(
        &self,
        store: S,
        max_retries: Option<u32>,
        sink: Box<dyn ReceiptSink>,
    ) -> Result<Box<dyn Engine<Store = S>>, HeartError> {
        match self {
            Prepared::Native => Ok(Box::new(HeartFleet::new(store).with_max_retries(max_retries).with_sink(sink))),
            Prepared::Component { component, fuel_per_call } => {
                let fleet = ComponentFleet::new(component, store).map_err(flat)?;
                Ok(Box::new(fleet.with_max_retries(max_retries).with_sink(sink).with_fuel_per_call(*fuel_per_call)))
            }
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
    fn guard_irreversible(
        &mut self,
        fence: &FencingToken,
        ledger: Ledger<'_>,
        effect_key: &str,
        effect: Effect<'_>,
    ) -> Result<GuardResult, HeartError> {
        HeartFleet::guard_irreversible(self, fence, ledger, effect_key, effect)
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

/// A component error on one line (see [`one_line`]).
fn flat(e: HeartError) -> HeartError {
    HeartError { message: one_line(&e.message), ..e }
}

struct ComponentCx<'a, 'b, S: LeaseStore + 'static>(&'a mut ComponentLeaseContext<'b, S>);

impl<S: LeaseStore + 'static> LeaseWork for ComponentCx<'_, '_, S> {
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

/// The commands through the component: every operation is the [`ComponentFleet`] method of
/// the same name, its error flattened to one line. A trap inside the component comes back as
/// a `store-protocol` error (the instance is discarded and the next call instantiates a
/// fresh one), never as a panic.
impl<S: LeaseStore + 'static> Engine for ComponentFleet<S> {
    type Store = S;

    fn name(&self) -> &'static str {
        "component"
    }
    fn metrics(&self) -> HeartMetrics {
        *ComponentFleet::metrics(self)
    }
    fn store_mut(&mut self) -> &mut S {
        ComponentFleet::store_mut(self)
    }
    fn acquire(&mut self, run_id: &str, owner: &str, ttl_seconds: i64) -> Result<AcquireResult, HeartError> {
        ComponentFleet::acquire(self, run_id, owner, ttl_seconds).map_err(flat)
    }
    fn renew(&mut self, fence: &FencingToken, ttl_seconds: i64) -> Result<Fenced<FencingToken>, HeartError> {
        ComponentFleet::renew(self, fence, ttl_seconds).map_err(flat)
    }
    fn release(&mut self, fence: &FencingToken, to: ReleaseTo) -> Result<Fenced<RunRow>, HeartError> {
        ComponentFleet::release(self, fence, to).map_err(flat)
    }
    fn guard_irreversible(
        &mut self,
        fence: &FencingToken,
        ledger: Ledger<'_>,
        effect_key: &str,
        effect: Effect<'_>,
    ) -> Result<GuardResult, HeartError> {
        ComponentFleet::guard_irreversible(self, fence, ledger, effect_key, effect).map_err(flat)
    }
    fn send_once(
        &mut self,
        fence: &FencingToken,
        channel: &str,
        effect_key: &str,
        payload: &Value,
        send: Effect<'_>,
    ) -> Result<SendResult, HeartError> {
        ComponentFleet::send_once(self, fence, channel, effect_key, payload, send).map_err(flat)
    }
    fn reconcile_outbox(
        &mut self,
        probe: Probe<'_>,
        max_attempts: i64,
        limit: u32,
    ) -> Result<ReconcileSummary, HeartError> {
        ComponentFleet::reconcile_outbox(self, probe, max_attempts, limit).map_err(flat)
    }
    fn reclaim_expired(&mut self, limit: u32) -> Result<ReclaimSummary, HeartError> {
        ComponentFleet::reclaim_expired(self, limit).map_err(flat)
    }
    fn reclaim_dead_instance_runs(&mut self, ttl_ms: i64, limit: u32) -> Result<LivenessSummary, HeartError> {
        ComponentFleet::reclaim_dead_instance_runs(self, ttl_ms, limit).map_err(flat)
    }
    fn ensure_resource_run(
        &mut self,
        kind: &str,
        key: &str,
        objective: &str,
        created_by: &str,
    ) -> Result<(RunRow, bool), HeartError> {
        ComponentFleet::ensure_resource_run(self, kind, key, objective, created_by).map_err(flat)
    }
    fn execute_with_lease(
        &mut self,
        opts: &LeaseOptions,
        work: Work<'_>,
    ) -> Result<Result<ExecuteOutcome<Value>, String>, HeartError> {
        ComponentFleet::execute_with_lease(self, opts, |cx| work(&mut ComponentCx(cx))).map_err(flat)
    }
    fn list_runs(&mut self, status: Option<RunStatus>, limit: u32) -> Result<Vec<RunRow>, HeartError> {
        ComponentFleet::list_runs(self, status, limit).map_err(flat)
    }
    fn show_run(&mut self, run_id: &str) -> Result<Option<RunRow>, HeartError> {
        ComponentFleet::show_run(self, run_id).map_err(flat)
    }
    fn requeue_run(&mut self, run_id: &str, operator: &str) -> Result<RunRow, HeartError> {
        ComponentFleet::requeue_run(self, run_id, operator).map_err(flat)
    }
    fn force_release(&mut self, run_id: &str) -> Result<RunRow, HeartError> {
        ComponentFleet::force_release(self, run_id).map_err(flat)
    }
    fn list_instances(&mut self) -> Result<Vec<InstanceRow>, HeartError> {
        ComponentFleet::list_instances(self).map_err(flat)
    }
    fn register_instance(
        &mut self,
        id: &str,
        hostname: Option<&str>,
        pid: Option<i64>,
    ) -> Result<InstanceRow, HeartError> {
        ComponentFleet::register_instance(self, id, hostname, pid).map_err(flat)
    }
    fn heartbeat_instance(&mut self, id: &str) -> Result<bool, HeartError> {
        ComponentFleet::heartbeat_instance(self, id).map_err(flat)
    }
    fn drain_instance(&mut self, id: &str) -> Result<bool, HeartError> {
        ComponentFleet::drain_instance(self, id).map_err(flat)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_trap_message_is_flattened_to_one_line() {
        let trap = "the component trapped during acquire; its instance was discarded: error while executing at \
                    wasm backtrace:\n    0:  0x46b71 - <unknown>!<wasm function 1183>\n    1:  0x20319 - \
                    <unknown>!<wasm function 548>: wasm trap: all fuel consumed by WebAssembly\n";
        assert_eq!(
            one_line(trap),
            "the component trapped during acquire; its instance was discarded: error while executing at wasm \
             backtrace: 0:  0x46b71 - <unknown>!<wasm function 1183>; 1:  0x20319 - <unknown>!<wasm function 548>: \
             wasm trap: all fuel consumed by WebAssembly"
        );
        assert_eq!(one_line("no newline"), "no newline");
    }

    #[test]
    fn the_default_component_path_has_no_parent_components() {
        if std::env::var_os(COMPONENT_ENV).is_none() {
            let path = component_path();
            assert!(path.ends_with("target/component/heart_fleet.wasm"), "{}", path.display());
            assert!(!path.components().any(|c| c == std::path::Component::ParentDir), "{}", path.display());
        }
    }

    #[test]
    fn the_native_engine_needs_no_component() {
        let engine = EngineKind::Native.prepare().unwrap().with_fuel_per_call(Some(1));
        let store = heart_fleet_core::MemoryStore::new(heart_fleet_core::Timestamp(0));
        let fleet = engine.build(store, None, Box::new(|_: &heart_fleet_core::HeartReceipt| {})).unwrap();
        assert_eq!(fleet.name(), "native");
    }
}
