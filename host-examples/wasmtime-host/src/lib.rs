//! # heart-fleet-wasmtime-host
//!
//! Runs the `heart:fleet` component (built by `cargo run -p xtask -- component` into
//! `target/component/heart_fleet.wasm`) in wasmtime 48 and offers the core's
//! [`HeartFleet`](heart_fleet_core::HeartFleet) API on top of it: [`ComponentFleet`] takes any
//! [`LeaseStore`] and returns the core's own result types, so a host can switch between the
//! native crate and the component (`--engine native` / `--engine component` in the CLI).
//!
//! * [`FleetComponent`] compiles the component once (cranelift; share it, compiling takes
//!   about 1.6 s in a debug build) and refuses a component that imports anything outside
//!   `heart:fleet/*` before it is ever instantiated.
//! * [`ComponentFleet`] links the imported `lease-store` to the Rust store `S` (each request
//!   and answer typed, checked by module `store`; a store failure goes back as a
//!   `store-error` result, never a trap), and the imported `effects` to the closures of the
//!   call in progress, found through the opaque handle the host passes into that call.
//! * Guest CPU is bounded with fuel ([`DEFAULT_FUEL_PER_CALL`] per export call) and guest
//!   memory with a store limiter ([`DEFAULT_MEMORY_LIMIT`]).
//! * A trap is contained: the call returns a `store-protocol` [`HeartError`] with the trap
//!   message, the instance is discarded, and the next call instantiates a fresh one (its
//!   counters continue from the last completed operation; receipts of completed operations
//!   are already on the host side). Nothing here panics.
//! * [`ReceiptVerifier`] loads the receipt-log verifier, a component of its own
//!   (`target/component/heart_fleet_receipts.wasm`), and checks logs with it.
//!
//! ```no_run
//! use heart_fleet_core::{MemoryStore, RunRow, Timestamp, ops::ReleaseTo};
//! use heart_fleet_wasmtime_host::{ComponentFleet, FleetComponent};
//!
//! # fn main() -> Result<(), heart_fleet_core::HeartError> {
//! let component = FleetComponent::locate()?;
//! let t0 = Timestamp(1_785_369_600_000);
//! let mut store = MemoryStore::new(t0);
//! store.insert(RunRow::ready("run-1", "job:1", t0)).map_err(|e| heart_fleet_core::HeartError::store("seed", &e))?;
//! let mut heart = ComponentFleet::new(&component, store)?;
//! let acq = heart.acquire("run-1", "worker-A", 60)?;
//! if let Some(fence) = acq.fence {
//!     heart.release(&fence, ReleaseTo::Completed)?;
//! }
//! assert_eq!(heart.metrics().acquire_wins, 1);
//! # Ok(())
//! # }
//! ```

mod api;
mod convert;
mod hooks;
mod receipts;
mod store;

pub mod conformance;

use std::path::{Path, PathBuf};

use heart_fleet_core::driver::MemoryEffectLedger;
use heart_fleet_core::fleet::{ExecuteOutcome, LeaseOptions};
use heart_fleet_core::ops::{
    AcquireResult, Fenced, FleetConfig, GuardResult, LivenessSummary, LostCause, ReclaimSummary, ReconcileSummary,
    ReleaseTo, SendResult,
};
use heart_fleet_core::receipt::ReceiptSink;
use heart_fleet_core::{
    ErrorCode, FencingToken, HeartError, HeartMetrics, HeartReceipt, InstanceRow, IntentRow, LeaseStore, Ledger,
    ProbeVerdict, RunRow, RunStatus, Timestamp,
};
use serde_json::Value;
use wasmtime::component::{Component, HasSelf, Linker, ResourceAny};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};

use crate::hooks::{CallHooks, HookSlot, NoHooks, with_hooks};
pub use crate::receipts::{RECEIPTS_COMPONENT_ENV, ReceiptVerifier};

/// The bindings wasmtime generates from `wit/` (world `heart-fleet`, sync).
#[allow(missing_docs, clippy::all)]
mod bindings {
    wasmtime::component::bindgen!({
        world: "heart-fleet",
        path: "../../wit",
    });
}

use bindings::exports::heart::fleet::{canonical as xcanonical, fleet as xfleet};
use bindings::heart::fleet::{effects, lease_store, types as wit};

/// Every import of the component must come from this package.
pub const ALLOWED_IMPORT_PREFIX: &str = "heart:fleet/";
/// Fuel (roughly: wasm instructions) one export call may burn before it traps.
pub const DEFAULT_FUEL_PER_CALL: u64 = 2_000_000_000;
/// The most linear memory the component may grow to, in bytes.
pub const DEFAULT_MEMORY_LIMIT: usize = 256 << 20;
/// The environment variable that names the component file for [`FleetComponent::locate`].
pub const COMPONENT_ENV: &str = "HEART_FLEET_COMPONENT";

/// A `store-protocol` error, on one line: wasmtime's messages (a trap's wasm backtrace, a
/// compile error's causes) span lines, and errors are shown and logged as one line.
fn protocol(message: impl Into<String>) -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, one_line(&message.into()))
}

/// The compiled component and its engine. Cheap to clone; compile once, share everywhere.
#[derive(Clone)]
pub struct FleetComponent {
    engine: Engine,
    component: Component,
}

impl std::fmt::Debug for FleetComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetComponent").field("imports", &self.imports()).finish()
    }
}

impl FleetComponent {
    /// Compiles a component from its bytes, after checking that it only imports
    /// `heart:fleet/*`.
    pub fn from_bytes(bytes: &[u8]) -> Result<FleetComponent, HeartError> {
        let (engine, component) = compile_checked(bytes, "the component")?;
        Ok(FleetComponent { engine, component })
    }

    /// Reads and compiles a component file.
    pub fn from_file(path: &Path) -> Result<FleetComponent, HeartError> {
        let bytes = std::fs::read(path).map_err(|e| {
            protocol(format!(
                "cannot read the component {}: {e} (build it with `cargo run -p xtask -- component`)",
                path.display()
            ))
        })?;
        FleetComponent::from_bytes(&bytes)
    }

    /// The component named by `$HEART_FLEET_COMPONENT`, else [`FleetComponent::default_path`].
    pub fn locate() -> Result<FleetComponent, HeartError> {
        let path = std::env::var_os(COMPONENT_ENV).map_or_else(FleetComponent::default_path, PathBuf::from);
        FleetComponent::from_file(&path)
    }

    /// Where `cargo run -p xtask -- component` writes the component in this workspace.
    pub fn default_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/component/heart_fleet.wasm")
    }

    /// The names of the component's imports.
    pub fn imports(&self) -> Vec<String> {
        self.component.component_type().imports(&self.engine).map(|(name, _)| name.to_owned()).collect()
    }

    /// The names of the component's exports.
    pub fn exports(&self) -> Vec<String> {
        self.component.component_type().exports(&self.engine).map(|(name, _)| name.to_owned()).collect()
    }
}

/// Compiles a component with fuel metering, after checking that it imports only
/// `heart:fleet/*` (`what` names it in errors).
fn compile_checked(bytes: &[u8], what: &str) -> Result<(Engine, Component), HeartError> {
    let mut config = Config::new();
    config.consume_fuel(true);
    let engine = Engine::new(&config).map_err(|e| protocol(format!("cannot start wasmtime: {e:#}")))?;
    let component = Component::new(&engine, bytes).map_err(|e| protocol(format!("cannot compile {what}: {e:#}")))?;
    let foreign: Vec<String> = component
        .component_type()
        .imports(&engine)
        .map(|(name, _)| name.to_owned())
        .filter(|n| !n.starts_with(ALLOWED_IMPORT_PREFIX))
        .collect();
    if !foreign.is_empty() {
        return Err(protocol(format!(
            "{what} imports {} outside {ALLOWED_IMPORT_PREFIX}*; refusing to instantiate it",
            foreign.join(", ")
        )));
    }
    Ok((engine, component))
}

/// The store data: the Rust store (it outlives any one wasmtime store: a trap poisons the
/// wasmtime store, so it is replaced), the hooks of the call in progress, the limits.
struct HostState<S> {
    lease: S,
    hooks: HookSlot,
    limits: StoreLimits,
}

fn new_store<S: LeaseStore + 'static>(engine: &Engine, lease: S) -> Store<HostState<S>> {
    let limits = StoreLimitsBuilder::new().memory_size(DEFAULT_MEMORY_LIMIT).build();
    let mut store = Store::new(engine, HostState { lease, hooks: HookSlot::default(), limits });
    store.limiter(|s| &mut s.limits);
    store
}

fn hook_slot<S>(store: &mut Store<HostState<S>>) -> &mut HookSlot {
    &mut store.data_mut().hooks
}

impl<S: LeaseStore> lease_store::Host for HostState<S> {
    fn execute(
        &mut self,
        request: lease_store::StoreRequest,
    ) -> Result<lease_store::StoreAnswer, lease_store::StoreError> {
        let req =
            store::request(request).map_err(|m| lease_store::StoreError::Protocol(format!("the request: {m}")))?;
        let answer = self.lease.execute(req).map_err(|e| lease_store::StoreError::Unavailable(e.0))?;
        Ok(store::answer(answer))
    }
}

impl<S: LeaseStore> HostState<S> {
    /// The host's turn inside an operation (an effect may take long): the writes so far
    /// are committed first (`LeaseStore::settle`).
    fn settle_before_host(&mut self) -> Result<(), String> {
        self.lease.settle().map_err(|e| format!("the writes were rolled back: {e}"))
    }
}

impl<S: LeaseStore> effects::Host for HostState<S> {
    fn run_effect(&mut self, handle: u64, effect_key: String, epoch: Option<i64>) -> Result<String, String> {
        self.settle_before_host()?;
        self.hooks.get(handle)?.run_effect(&effect_key, epoch).map(|v| v.to_string())
    }

    fn record_once(&mut self, handle: u64, run_id: String, effect_key: String) -> Result<bool, String> {
        self.settle_before_host()?;
        self.hooks.get(handle)?.record_once(&run_id, &effect_key)
    }

    fn probe(&mut self, handle: u64, intent: wit::IntentRow) -> Result<effects::ProbeVerdict, String> {
        self.settle_before_host()?;
        let intent = convert::intent(intent)?;
        Ok(match self.hooks.get(handle)?.probe(&intent)? {
            ProbeVerdict::Sent(evidence) => effects::ProbeVerdict::Sent(evidence.to_string()),
            ProbeVerdict::NotSent => effects::ProbeVerdict::NotSent,
            ProbeVerdict::Unknown => effects::ProbeVerdict::Unknown,
        })
    }
}

impl<S> wit::Host for HostState<S> {}

/// Hooks of `guard-irreversible` and `send-once`: the effect, and the memory ledger.
struct EffectHooks<'l, F> {
    effect: Option<F>,
    ledger: Option<&'l mut MemoryEffectLedger>,
}

impl<F: FnOnce(Option<i64>) -> Result<Value, String>> CallHooks for EffectHooks<'_, F> {
    fn run_effect(&mut self, _: &str, epoch: Option<i64>) -> Result<Value, String> {
        match self.effect.take() {
            Some(f) => f(epoch),
            None => Err("the effect was already run".into()),
        }
    }
    fn record_once(&mut self, run_id: &str, effect_key: &str) -> Result<bool, String> {
        match self.ledger.as_mut() {
            Some(l) => Ok(l.record_once(run_id, effect_key)),
            None => Err("no effect ledger".into()),
        }
    }
    fn probe(&mut self, _: &IntentRow) -> Result<ProbeVerdict, String> {
        Ok(ProbeVerdict::Unknown)
    }
}

/// Hooks of `reconcile-outbox`: the probe.
struct ProbeHooks<'p>(&'p mut dyn FnMut(&IntentRow) -> Option<Result<ProbeVerdict, String>>);

impl CallHooks for ProbeHooks<'_> {
    fn run_effect(&mut self, k: &str, e: Option<i64>) -> Result<Value, String> {
        NoHooks.run_effect(k, e)
    }
    fn record_once(&mut self, r: &str, k: &str) -> Result<bool, String> {
        NoHooks.record_once(r, k)
    }
    fn probe(&mut self, intent: &IntentRow) -> Result<ProbeVerdict, String> {
        (self.0)(intent).unwrap_or(Ok(ProbeVerdict::Unknown))
    }
}

/// A live instance and its `fleet` resource.
struct Live {
    bindings: bindings::HeartFleet,
    fleet: ResourceAny,
}

impl Live {
    fn fleet(&self) -> xfleet::GuestFleet<'_> {
        self.bindings.heart_fleet_fleet().fleet()
    }
    fn session(&self) -> xfleet::GuestLeaseSession<'_> {
        self.bindings.heart_fleet_fleet().lease_session()
    }
}

type Wasm<T> = wasmtime::Result<T>;

/// The core's `HeartFleet` API, running inside the component over the Rust store `S`.
pub struct ComponentFleet<S: LeaseStore + 'static> {
    engine: Engine,
    pre: bindings::HeartFleetPre<HostState<S>>,
    store: Store<HostState<S>>,
    live: Option<Live>,
    generation: u64,
    discarded: u64,
    config: FleetConfig,
    fuel_per_call: u64,
    metrics: HeartMetrics,
    receipts: Vec<HeartReceipt>,
    sink: Option<Box<dyn ReceiptSink>>,
    in_call: bool,
}

impl<S: LeaseStore + 'static> std::fmt::Debug for ComponentFleet<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentFleet")
            .field("config", &self.config)
            .field("metrics", &self.metrics)
            .field("receipts", &self.receipts.len())
            .field("discarded_instances", &self.discarded)
            .finish()
    }
}

fn trapped(what: &str, e: &wasmtime::Error) -> HeartError {
    protocol(format!("the component trapped during {what}; its instance was discarded: {e:#}"))
}

/// `text` on one line: its lines trimmed and joined with `; ` (with a space after a line
/// ending in `:`).
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

impl<S: LeaseStore + 'static> ComponentFleet<S> {
    /// A fleet with the reference's defaults (`maxRetries` 5, receipts kept in memory) over
    /// `store`, instantiating the component.
    pub fn new(component: &FleetComponent, store: S) -> Result<ComponentFleet<S>, HeartError> {
        let mut linker = Linker::new(&component.engine);
        bindings::HeartFleet::add_to_linker::<HostState<S>, HasSelf<HostState<S>>>(&mut linker, |s| s)
            .map_err(|e| protocol(format!("cannot link the host functions: {e:#}")))?;
        let pre = linker
            .instantiate_pre(&component.component)
            .and_then(bindings::HeartFleetPre::new)
            .map_err(|e| protocol(format!("cannot link the component: {e:#}")))?;
        let mut fleet = ComponentFleet {
            engine: component.engine.clone(),
            store: new_store(&component.engine, store),
            pre,
            live: None,
            generation: 0,
            discarded: 0,
            config: FleetConfig::default(),
            fuel_per_call: DEFAULT_FUEL_PER_CALL,
            metrics: HeartMetrics::default(),
            receipts: Vec::new(),
            sink: None,
            in_call: false,
        };
        fleet.ensure_live()?;
        Ok(fleet)
    }

    /// Sets the retry ceiling (`None`: never quarantine). This replaces the component's
    /// `fleet` resource; counters and receipts carry over.
    pub fn with_max_retries(mut self, max_retries: Option<u32>) -> Self {
        self.config.max_retries = max_retries;
        if let Some(live) = self.live.as_ref() {
            let _ = live.fleet.resource_drop(&mut self.store);
        }
        // Without a live instance (or after a trap here) the next call instantiates one
        // with the new configuration.
        let _ = self.construct_fleet();
        self
    }

    /// Sends receipts to `sink` instead of keeping them (`onReceipt`).
    pub fn with_sink(mut self, sink: Box<dyn ReceiptSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Sets the fuel one export call may burn (default [`DEFAULT_FUEL_PER_CALL`]).
    pub fn with_fuel_per_call(mut self, fuel: u64) -> Self {
        self.fuel_per_call = fuel;
        self
    }

    /// Changes the fuel one export call may burn.
    pub fn set_fuel_per_call(&mut self, fuel: u64) {
        self.fuel_per_call = fuel;
    }

    /// The configuration.
    pub fn config(&self) -> FleetConfig {
        self.config
    }

    /// The counters.
    pub fn metrics(&self) -> &HeartMetrics {
        &self.metrics
    }

    /// Receipts kept so far (empty when a sink was given).
    pub fn receipts(&self) -> &[HeartReceipt] {
        &self.receipts
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store.data().lease
    }

    /// The store, mutably (tests move the memory store's clock this way).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store.data_mut().lease
    }

    /// How many instances were discarded after a trap.
    pub fn discarded_instances(&self) -> u64 {
        self.discarded
    }

    fn construct_fleet(&mut self) -> Result<(), HeartError> {
        let Some(live) = self.live.as_mut() else {
            return Err(protocol("no component instance"));
        };
        self.store.set_fuel(self.fuel_per_call).map_err(|e| protocol(format!("{e:#}")))?;
        let fleet = live.fleet().call_constructor(&mut self.store, self.config.max_retries);
        match fleet {
            Ok(fleet) => {
                live.fleet = fleet;
                Ok(())
            }
            Err(e) => {
                self.discard();
                Err(trapped("the fleet constructor", &e))
            }
        }
    }

    /// Instantiates the component when there is no live instance.
    fn ensure_live(&mut self) -> Result<(), HeartError> {
        if self.in_call {
            // A host callback panicked through an earlier call: that instance is poisoned.
            self.discard();
        }
        if self.live.is_some() {
            return Ok(());
        }
        self.store.set_fuel(self.fuel_per_call).map_err(|e| protocol(format!("{e:#}")))?;
        let bindings = self.pre.instantiate(&mut self.store).map_err(|e| trapped("instantiation", &e))?;
        let fleet = bindings
            .heart_fleet_fleet()
            .fleet()
            .call_constructor(&mut self.store, self.config.max_retries)
            .map_err(|e| trapped("the fleet constructor", &e))?;
        self.generation += 1;
        self.live = Some(Live { bindings, fleet });
        Ok(())
    }

    /// Forgets the instance after a trap, with its wasmtime store (a store that trapped
    /// cannot enter any instance again, and dropping it frees the instance's memory); the
    /// Rust store moves on to a fresh one. Counters continue from the last synced values.
    fn discard(&mut self) {
        // The trapped call's writes never got their receipts: a store holding them rolls back.
        self.store.data_mut().lease.abandon();
        self.live = None;
        let engine = &self.engine;
        // Moves the Rust store into a fresh wasmtime store; dropping the old one frees the
        // discarded instance. (Nothing in the closure can panic short of allocation failure,
        // which aborts anyway.)
        replace_with::replace_with_or_abort(&mut self.store, |old| new_store(engine, old.into_data().lease));
        self.in_call = false;
        self.discarded += 1;
    }

    /// Runs one export call with `hooks`, then takes the receipts and counters it produced.
    fn call<R>(
        &mut self,
        what: &str,
        hooks: &mut dyn CallHooks,
        f: impl FnOnce(&mut Store<HostState<S>>, &Live, u64) -> Wasm<R>,
    ) -> Result<R, HeartError> {
        self.ensure_live()?;
        let Some(live) = self.live.as_ref() else {
            return Err(protocol("no component instance"));
        };
        self.store.set_fuel(self.fuel_per_call).map_err(|e| protocol(format!("{e:#}")))?;
        self.in_call = true;
        let out = with_hooks(&mut self.store, hook_slot::<S>, hooks, |store, handle| f(store, live, handle));
        self.in_call = false;
        match out {
            Ok(r) => Ok(r),
            Err(e) => {
                self.discard();
                Err(trapped(what, &e))
            }
        }
    }

    /// [`Self::call`] of an export that runs an operation: its result, with the receipts and
    /// counters it emitted taken in.
    fn op<R>(
        &mut self,
        what: &str,
        hooks: &mut dyn CallHooks,
        f: impl FnOnce(&mut Store<HostState<S>>, &Live, u64) -> Wasm<(R, xfleet::Emitted)>,
    ) -> Result<R, HeartError> {
        let (result, emitted) = self.call(what, hooks, f)?;
        let before = self.metrics;
        self.absorb(emitted);
        // The receipts went to the sink: a store that holds the writes until then commits
        // them now, or rolls them back with their receipts (`LeaseStore::settle`).
        if let Err(e) = self.store.data_mut().lease.settle() {
            self.metrics = before;
            return Err(HeartError::store("the writes were rolled back with their receipts", &e));
        }
        Ok(result)
    }

    /// Takes in what one operation emitted: its receipts (to the sink, or kept) and its
    /// counters (added to the totals).
    fn absorb(&mut self, emitted: xfleet::Emitted) {
        self.metrics = convert::add_metrics(&self.metrics, &convert::metrics(emitted.counters));
        for r in emitted.receipts {
            let r = convert::receipt(r);
            match self.sink.as_mut() {
                Some(sink) => sink.emit(&r),
                None => self.receipts.push(r),
            }
        }
    }

    /// `acquire(runId, owner, ttlSeconds)`.
    pub fn acquire(&mut self, run_id: &str, owner: &str, ttl_seconds: i64) -> Result<AcquireResult, HeartError> {
        self.op("acquire", &mut NoHooks, |s, l, _| l.fleet().call_acquire(s, l.fleet, run_id, owner, ttl_seconds))?
            .map_err(convert::error)
            .and_then(convert::acquire_result)
    }

    /// `renew(fence, ttlSeconds)`: the new token, or the cause of the refusal.
    pub fn renew(&mut self, fence: &FencingToken, ttl_seconds: i64) -> Result<Fenced<FencingToken>, HeartError> {
        let token = convert::token_out(fence);
        self.op("renew", &mut NoHooks, |s, l, _| l.fleet().call_renew(s, l.fleet, &token, ttl_seconds))?
            .map(convert::renewed)
            .map_err(convert::error)
    }

    /// `release(fence, nextStatus)`.
    pub fn release(&mut self, fence: &FencingToken, to: ReleaseTo) -> Result<Fenced<RunRow>, HeartError> {
        let token = convert::token_out(fence);
        let to = convert::release_to(to);
        self.op("release", &mut NoHooks, |s, l, _| l.fleet().call_release(s, l.fleet, &token, to))?
            .map_err(convert::error)
            .and_then(convert::released)
    }

    /// `verifyFence(fence)`.
    pub fn verify_fence(&mut self, fence: &FencingToken) -> Result<bool, HeartError> {
        let token = convert::token_out(fence);
        self.op("verify-fence", &mut NoHooks, |s, l, _| l.fleet().call_verify_fence(s, l.fleet, &token))?
            .map_err(convert::error)
    }

    /// `reclaimExpired({limit})`.
    pub fn reclaim_expired(&mut self, limit: u32) -> Result<ReclaimSummary, HeartError> {
        self.op("reclaim-expired", &mut NoHooks, |s, l, _| l.fleet().call_reclaim_expired(s, l.fleet, limit))?
            .map(convert::reclaim_summary)
            .map_err(convert::error)
    }

    /// The liveness pass.
    pub fn reclaim_dead_instance_runs(&mut self, ttl_ms: i64, limit: u32) -> Result<LivenessSummary, HeartError> {
        self.op("reclaim-dead-instance-runs", &mut NoHooks, |s, l, _| {
            l.fleet().call_reclaim_dead_instance_runs(s, l.fleet, ttl_ms, limit)
        })?
        .map(convert::liveness_summary)
        .map_err(convert::error)
    }

    /// `guardIrreversible(heart, fence, ledger, effectKey, effect)`. The effect gets the
    /// run's fencing epoch to hand to the receiving system. A memory ledger is answered on
    /// the host side (`ledger-kind.host`), so it outlives the component instance.
    pub fn guard_irreversible(
        &mut self,
        fence: &FencingToken,
        ledger: Ledger<'_>,
        effect_key: &str,
        effect: impl FnOnce(Option<i64>) -> Result<Value, String>,
    ) -> Result<GuardResult, HeartError> {
        let token = convert::token_out(fence);
        let (kind, memory) = match ledger {
            Ledger::Memory(l) => (wit::LedgerKind::Host, Some(l)),
            Ledger::Durable => (wit::LedgerKind::Durable, None),
        };
        let mut hooks = EffectHooks { effect: Some(effect), ledger: memory };
        self.op("guard-irreversible", &mut hooks, |s, l, handle| {
            l.fleet().call_guard_irreversible(s, l.fleet, &token, kind, effect_key, handle)
        })?
        .map_err(convert::error)
        .and_then(convert::guard_result)
    }

    /// `sendOnce`: `send` gets the fencing epoch and returns the `external_ref` evidence.
    pub fn send_once(
        &mut self,
        fence: &FencingToken,
        channel: &str,
        effect_key: &str,
        payload: &Value,
        send: impl FnOnce(Option<i64>) -> Result<Value, String>,
    ) -> Result<SendResult, HeartError> {
        let token = convert::token_out(fence);
        let payload = payload.to_string();
        let mut hooks = EffectHooks { effect: Some(send), ledger: None };
        self.op("send-once", &mut hooks, |s, l, handle| {
            l.fleet().call_send_once(s, l.fleet, &token, channel, effect_key, &payload, handle)
        })?
        .map_err(convert::error)
        .and_then(convert::send_result)
    }

    /// `reconcileOutbox`: `probe` answers per intent (`None`: no probe for that channel).
    pub fn reconcile_outbox(
        &mut self,
        probe: &mut dyn FnMut(&IntentRow) -> Option<Result<ProbeVerdict, String>>,
        max_attempts: i64,
        limit: u32,
    ) -> Result<ReconcileSummary, HeartError> {
        let mut hooks = ProbeHooks(probe);
        self.op("reconcile-outbox", &mut hooks, |s, l, handle| {
            l.fleet().call_reconcile_outbox(s, l.fleet, max_attempts, limit, handle)
        })?
        .map(convert::reconcile_summary)
        .map_err(convert::error)
    }

    /// Find or create a resource run (fix 8): the row and whether this call created it.
    pub fn ensure_resource_run(
        &mut self,
        kind: &str,
        key: &str,
        objective: &str,
        created_by: &str,
    ) -> Result<(RunRow, bool), HeartError> {
        let e = self
            .op("ensure-resource-run", &mut NoHooks, |s, l, _| {
                l.fleet().call_ensure_resource_run(s, l.fleet, kind, key, objective, created_by)
            })?
            .map_err(convert::error)?;
        Ok((convert::run(e.run)?, e.created))
    }

    /// Registers an instance.
    pub fn register_instance(
        &mut self,
        id: &str,
        hostname: Option<&str>,
        pid: Option<i64>,
    ) -> Result<InstanceRow, HeartError> {
        self.op("register-instance", &mut NoHooks, |s, l, _| {
            l.fleet().call_register_instance(s, l.fleet, id, hostname, pid, None)
        })?
        .map_err(convert::error)
        .and_then(convert::instance)
    }

    /// Heartbeats an instance.
    pub fn heartbeat_instance(&mut self, id: &str) -> Result<bool, HeartError> {
        self.op("heartbeat-instance", &mut NoHooks, |s, l, _| l.fleet().call_heartbeat_instance(s, l.fleet, id))?
            .map_err(convert::error)
    }

    /// Drains an instance.
    pub fn drain_instance(&mut self, id: &str) -> Result<bool, HeartError> {
        self.op("drain-instance", &mut NoHooks, |s, l, _| l.fleet().call_drain_instance(s, l.fleet, id))?
            .map_err(convert::error)
    }

    /// Lists every instance.
    pub fn list_instances(&mut self) -> Result<Vec<InstanceRow>, HeartError> {
        self.op("list-instances", &mut NoHooks, |s, l, _| l.fleet().call_list_instances(s, l.fleet))?
            .map_err(convert::error)?
            .into_iter()
            .map(convert::instance)
            .collect()
    }

    /// Lists runs.
    pub fn list_runs(&mut self, status: Option<RunStatus>, limit: u32) -> Result<Vec<RunRow>, HeartError> {
        let status = status.map(convert::status_out);
        self.op("list-runs", &mut NoHooks, |s, l, _| l.fleet().call_list_runs(s, l.fleet, status, limit))?
            .map_err(convert::error)
            .and_then(convert::runs)
    }

    /// One run.
    pub fn get_run(&mut self, run_id: &str) -> Result<Option<RunRow>, HeartError> {
        self.op("get-run", &mut NoHooks, |s, l, _| l.fleet().call_get_run(s, l.fleet, run_id))?
            .map_err(convert::error)?
            .map(convert::run)
            .transpose()
    }

    /// Requeues a quarantined run.
    pub fn requeue_run(&mut self, run_id: &str, operator: &str) -> Result<RunRow, HeartError> {
        self.op("requeue-run", &mut NoHooks, |s, l, _| l.fleet().call_requeue_run(s, l.fleet, run_id, operator))?
            .map_err(convert::error)
            .and_then(convert::run)
    }

    /// Force-releases a lease.
    pub fn force_release(&mut self, run_id: &str) -> Result<RunRow, HeartError> {
        self.op("force-release", &mut NoHooks, |s, l, _| l.fleet().call_force_release(s, l.fleet, run_id))?
            .map_err(convert::error)
            .and_then(convert::run)
    }

    /// The store's clock.
    pub fn now(&mut self) -> Result<Timestamp, HeartError> {
        self.call("now", &mut NoHooks, |s, l, _| l.fleet().call_now(s, l.fleet))?.map(Timestamp).map_err(convert::error)
    }

    /// The counters in Prometheus text exposition format.
    pub fn prometheus(&self) -> String {
        self.metrics.to_prometheus()
    }

    fn canonical<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&xcanonical::Guest, &mut Store<HostState<S>>) -> Wasm<Result<T, wit::HeartError>>,
    ) -> Result<T, HeartError> {
        self.call(what, &mut NoHooks, |s, l, _| f(l.bindings.heart_fleet_canonical(), s))?.map_err(convert::error)
    }

    /// The canonical form of JSON text, computed by the component.
    pub fn canonicalize(&mut self, json: &str) -> Result<String, HeartError> {
        self.canonical("canonicalize", |c, s| c.call_canonicalize(s, json))
    }

    /// The `sha256:dreamnet-sorted-json:v0:` digest of JSON text, computed by the component.
    pub fn digest(&mut self, json: &str) -> Result<String, HeartError> {
        self.canonical("digest", |c, s| c.call_digest(s, json))
    }

    /// The sha256 hex of text, computed by the component.
    pub fn sha256_hex(&mut self, text: &str) -> Result<String, HeartError> {
        self.canonical("sha256-hex", |c, s| c.call_sha256_hex(s, text).map(Ok))
    }

    /// `deterministicResourceId(kind, key)`, computed by the component.
    pub fn deterministic_resource_id(&mut self, kind: &str, key: &str) -> Result<String, HeartError> {
        self.canonical("deterministic-resource-id", |c, s| c.call_deterministic_resource_id(s, kind, key))
    }

    /// `effectKey(prefix, identity)`, computed by the component.
    pub fn effect_key(&mut self, prefix: &str, identity: &Value) -> Result<String, HeartError> {
        let identity = identity.to_string();
        self.canonical("effect-key", |c, s| c.call_effect_key(s, prefix, &identity))
    }

    /// `verifyReceipt(receipt)`, computed by the component.
    pub fn verify_receipt(&mut self, receipt: &Value) -> Result<(), HeartError> {
        let receipt = receipt.to_string();
        self.canonical("verify-receipt", |c, s| c.call_verify_receipt(s, &receipt))
    }

    /// `executeWithLease(heart, {runId, owner, ttlSeconds, renewEveryMs}, work)` for
    /// synchronous work, through the component's `start-lease` and `lease-session`: acquire,
    /// run `work` (which may call [`ComponentLeaseContext::heartbeat`] to renew on schedule
    /// and [`ComponentLeaseContext::lost`] to observe a loss), then release with the newest
    /// token: `completed` (or `ready` for resource runs with `release_to_ready`) when the
    /// work returns `Ok`, else `failed`.
    pub fn execute_with_lease<T, E>(
        &mut self,
        opts: &LeaseOptions,
        work: impl FnOnce(&mut ComponentLeaseContext<'_, S>) -> Result<T, E>,
    ) -> Result<Result<ExecuteOutcome<T>, E>, HeartError> {
        let options = wit::LeaseOptions {
            run_id: opts.run_id.clone(),
            owner: opts.owner.clone(),
            ttl_seconds: opts.ttl_seconds,
            renew_every_ms: opts.renew_every_ms,
            release_to_ready: opts.release_to_ready,
        };
        let start = self
            .op("start-lease", &mut NoHooks, |s, l, _| {
                let (start, emitted) = l.fleet().call_start_lease(&mut *s, l.fleet, &options)?;
                let fence = match &start {
                    Ok(xfleet::LeaseStart::Started(session)) => l.session().call_fence(&mut *s, *session)?,
                    _ => None,
                };
                Ok((start.map(|st| (st, fence)), emitted))
            })?
            .map_err(convert::error)?;
        let (session, fence) = match start {
            (xfleet::LeaseStart::NotRun(n), _) => {
                let (reason, code) = convert::not_run(n);
                return Ok(Ok(ExecuteOutcome {
                    ran: false,
                    result: None,
                    reason: Some(reason),
                    code,
                    lost: None,
                    released: false,
                }));
            }
            (xfleet::LeaseStart::Started(session), fence) => (session, fence.map(convert::token)),
        };
        let generation = self.generation;
        let mut cx = ComponentLeaseContext { fleet: self, session, generation, fence, lost: None };
        let outcome = work(&mut cx);
        let (fence, cached_lost) = (cx.fence.take(), cx.lost);
        let success = outcome.is_ok();
        let finished = if self.generation == generation {
            self.op("lease-session.finish", &mut NoHooks, |s, l, _| {
                let finished = l.session().call_finish(&mut *s, session, success)?;
                session.resource_drop(&mut *s)?;
                Ok(finished)
            })
            .ok()
        } else {
            None
        };
        let (lost, released) = match finished {
            Some(f) => (f.lost.map(convert::lost), f.released),
            None => {
                // The instance (and the session in it) is gone: release with the newest
                // token we saw, unless the lease is definitely lost.
                let to = match (success, opts.release_to_ready) {
                    (true, true) => ReleaseTo::Ready,
                    (true, false) => ReleaseTo::Completed,
                    (false, _) => ReleaseTo::Failed,
                };
                let worth = matches!(cached_lost, None | Some(LostCause::StoreUnavailable));
                let released = match fence.filter(|_| worth) {
                    Some(fence) => matches!(self.release(&fence, to), Ok(Fenced::Ok { .. })),
                    None => false,
                };
                (cached_lost, released)
            }
        };
        Ok(outcome.map(|result| ExecuteOutcome {
            ran: true,
            result: Some(result),
            reason: None,
            code: None,
            lost,
            released,
        }))
    }
}

/// What the work sees while it runs under a lease (the core's `LeaseContext`).
pub struct ComponentLeaseContext<'a, S: LeaseStore + 'static> {
    fleet: &'a mut ComponentFleet<S>,
    session: ResourceAny,
    generation: u64,
    fence: Option<FencingToken>,
    lost: Option<LostCause>,
}

impl<S: LeaseStore + 'static> ComponentLeaseContext<'_, S> {
    /// The newest fencing token (renewals rotate it).
    pub fn fence(&self) -> Option<&FencingToken> {
        self.fence.as_ref()
    }

    /// The lease-lost signal: `Some(cause)` once the lease is gone.
    pub fn lost(&self) -> Option<LostCause> {
        self.lost
    }

    /// A cooperative heartbeat: reads the store clock and renews when a period has passed
    /// since the last beat. Returns the lost cause, if any. If the instance holding the
    /// session was discarded after a trap, it renews nothing and reports what it last knew.
    pub fn heartbeat(&mut self) -> Option<LostCause> {
        if self.fleet.generation != self.generation {
            return self.lost;
        }
        let session = self.session;
        let beat = self.fleet.op("lease-session.heartbeat", &mut NoHooks, |s, l, _| {
            let (lost, emitted) = l.session().call_heartbeat(&mut *s, session)?;
            let fence = l.session().call_fence(&mut *s, session)?;
            Ok(((lost, fence), emitted))
        });
        if let Ok((lost, fence)) = beat {
            self.lost = lost.map(convert::lost);
            self.fence = fence.map(convert::token);
        }
        self.lost
    }

    /// The fleet, for fenced operations inside the work (guard, send-once).
    pub fn fleet(&mut self) -> &mut ComponentFleet<S> {
        self.fleet
    }
}
