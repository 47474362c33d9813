//! The receipt-log verifier component (`target/component/heart_fleet_receipts.wasm`, world
//! `heart:fleet/receipt-verifier`) in wasmtime: [`ReceiptVerifier::verify_receipts`] hands it a
//! JSON Lines log and the typed options, and converts its typed report back into the core's
//! [`LogReport`], so it compares with [`heart_fleet_core::chain::verify_json_lines`].
//!
//! Each call runs in a fresh wasmtime store (the verifier keeps nothing between calls), with
//! the lease component's fuel and memory bounds; a trap is a `store-protocol` error.

use std::path::{Path, PathBuf};

use heart_fleet_core::chain::{Finding, FindingCode, LogReport, RunChain, VerifyOptions};
use heart_fleet_core::{ErrorCode, HeartError};
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store, StoreLimits, StoreLimitsBuilder};

use crate::{DEFAULT_FUEL_PER_CALL, DEFAULT_MEMORY_LIMIT, compile_checked, convert};

/// The bindings wasmtime generates for world `receipt-verifier`; its `heart-error` is the
/// lease component's.
#[allow(missing_docs, clippy::all)]
mod bindings {
    wasmtime::component::bindgen!({
        world: "receipt-verifier",
        path: "../../wit",
        with: { "heart:fleet/types": crate::bindings::heart::fleet::types },
    });
}

use bindings::exports::heart::fleet::receipts as wit;

/// The environment variable naming the verifier component's file.
pub const RECEIPTS_COMPONENT_ENV: &str = "HEART_FLEET_RECEIPTS_COMPONENT";

fn protocol(message: impl Into<String>) -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, message)
}

/// The compiled verifier component.
pub struct ReceiptVerifier {
    engine: Engine,
    component: Component,
    linker: Linker<StoreLimits>,
}

impl std::fmt::Debug for ReceiptVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiptVerifier").finish_non_exhaustive()
    }
}

impl ReceiptVerifier {
    /// Compiles the verifier from its bytes, after checking that it imports only
    /// `heart:fleet/*`.
    pub fn from_bytes(bytes: &[u8]) -> Result<ReceiptVerifier, HeartError> {
        let (engine, component) = compile_checked(bytes, "the verifier component")?;
        let linker = Linker::new(&engine);
        Ok(ReceiptVerifier { engine, component, linker })
    }

    /// The verifier named by `$HEART_FLEET_RECEIPTS_COMPONENT`, else
    /// [`ReceiptVerifier::default_path`].
    pub fn locate() -> Result<ReceiptVerifier, HeartError> {
        let path = std::env::var_os(RECEIPTS_COMPONENT_ENV).map_or_else(ReceiptVerifier::default_path, PathBuf::from);
        let bytes = std::fs::read(&path).map_err(|e| {
            protocol(format!(
                "cannot read the verifier component {}: {e} (build it with `cargo run -p xtask -- component`)",
                path.display()
            ))
        })?;
        ReceiptVerifier::from_bytes(&bytes)
    }

    /// Where `cargo run -p xtask -- component` writes the verifier in this workspace.
    pub fn default_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/component/heart_fleet_receipts.wasm")
    }

    /// `verifyReceipts(log, options)`, computed by the component.
    pub fn verify_receipts(&self, log: &[u8], options: &VerifyOptions) -> Result<LogReport, HeartError> {
        let options = wit::VerifyOptions {
            key: options.key.clone(),
            public_key: options.public_key.clone(),
            run: options.run.clone(),
            final_seqs: options
                .final_seq
                .iter()
                .map(|(run_id, seq)| wit::FinalSeq { run_id: run_id.clone(), seq: *seq })
                .collect(),
            require_chain: options.require_chain,
        };
        let limits = StoreLimitsBuilder::new().memory_size(DEFAULT_MEMORY_LIMIT).build();
        let mut store = Store::new(&self.engine, limits);
        store.limiter(|l| l);
        store.set_fuel(DEFAULT_FUEL_PER_CALL).map_err(|e| protocol(format!("{e:#}")))?;
        let trapped = |e: wasmtime::Error| protocol(format!("the verifier component trapped: {e:#}"));
        let instance = bindings::ReceiptVerifier::instantiate(&mut store, &self.component, &self.linker)
            .map_err(|e| protocol(format!("cannot instantiate the verifier component: {e:#}")))?;
        let report = instance
            .heart_fleet_receipts()
            .call_verify_receipts(&mut store, log, &options)
            .map_err(trapped)?
            .map_err(convert::error)?;
        Ok(log_report(report))
    }
}

/// The component's report as the core's.
fn log_report(r: wit::LogReport) -> LogReport {
    let code = |c: wit::FindingCode| match c {
        wit::FindingCode::ReceiptTampered => FindingCode::Tampered,
        wit::FindingCode::InvalidInput => FindingCode::Malformed,
        wit::FindingCode::ChainGap => FindingCode::Gap,
        wit::FindingCode::ChainReorder => FindingCode::Reorder,
        wit::FindingCode::ChainDuplicate => FindingCode::Duplicate,
        wit::FindingCode::ChainFork => FindingCode::Fork,
        wit::FindingCode::ChainBroken => FindingCode::Broken,
        wit::FindingCode::ChainTruncated => FindingCode::Truncated,
        wit::FindingCode::SignatureMissing => FindingCode::SignatureMissing,
        wit::FindingCode::SignatureInvalid => FindingCode::SignatureInvalid,
        wit::FindingCode::ReceiptUnchained => FindingCode::Unchained,
    };
    LogReport {
        receipts: r.receipts,
        ok: r.ok,
        tampered: r.tampered,
        malformed: r.malformed,
        chained: r.chained,
        unchained: r.unchained,
        signed: r.signed,
        runs: r
            .runs
            .into_iter()
            .map(|c| {
                let chain =
                    RunChain { receipts: c.receipts, chained: c.chained, unchained: c.unchained, last_seq: c.last_seq };
                (c.run_id, chain)
            })
            .collect(),
        findings: r
            .findings
            .into_iter()
            .map(|f| Finding { position: f.position, run_id: f.run_id, code: code(f.code), message: f.message })
            .collect(),
    }
}
