//! The fleet operations the commands use, behind one small trait, so the same commands can
//! run through the native crate ([`heart_fleet_core::HeartFleet`], `--engine native`, the
//! default) or through the WebAssembly component (`--engine component`: a
//! [`ComponentFleet`] of `heart-fleet-wasmtime-host` running `target/component/heart_fleet.wasm`).
//!
//! [`Engine`] is the core's [`FleetApi`] (every fleet operation, object safe, implemented by
//! both engines) plus the store as an associated type: commands take
//! `&mut dyn Engine<Store = AnyStore>`, and never reach past it except through
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
use heart_fleet_core::{FleetApi, HeartError, HeartFleet, LeaseStore};
use heart_fleet_wasmtime_host::{COMPONENT_ENV, ComponentFleet, DEFAULT_FUEL_PER_CALL, FleetComponent};

pub use heart_fleet_core::api::LeaseWork;

/// The fleet operations of the `heart-fleet` commands ([`FleetApi`]), and the store.
pub trait Engine: FleetApi {
    /// The store the engine runs on.
    type Store: LeaseStore;

    /// `native` or `component`.
    fn name(&self) -> &'static str;
    /// The store, for reads the lease API does not offer.
    fn store_mut(&mut self) -> &mut Self::Store;
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
        EngineUnavailable(format!("--engine component: {} (rebuild it with `{BUILD_COMPONENT}`)", e.message))
    })?;
    if let Ok(mut l) = cache.lock() {
        l.push((path, component.clone()));
    }
    Ok(component)
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
                let fleet = ComponentFleet::new(component, store)?;
                Ok(Box::new(fleet.with_max_retries(max_retries).with_sink(sink).with_fuel_per_call(*fuel_per_call)))
            }
        }
    }
}

impl<S: LeaseStore> Engine for HeartFleet<S> {
    type Store = S;

    fn name(&self) -> &'static str {
        "native"
    }
    fn store_mut(&mut self) -> &mut S {
        HeartFleet::store_mut(self)
    }
}

/// The commands through the component: every operation is the [`ComponentFleet`] method of
/// the same name. A trap inside the component comes back as a one-line `store-protocol`
/// error (the instance is discarded and the next call instantiates a fresh one), never as a
/// panic.
impl<S: LeaseStore + 'static> Engine for ComponentFleet<S> {
    type Store = S;

    fn name(&self) -> &'static str {
        "component"
    }
    fn store_mut(&mut self) -> &mut S {
        ComponentFleet::store_mut(self)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

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
