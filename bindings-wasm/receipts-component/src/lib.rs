//! # heart-fleet-receipts-component
//!
//! The receipt-log verifier as a WebAssembly component (world
//! `heart:fleet/receipt-verifier@0.1.0`, see `wit/`): the export `receipts.verify-receipts` is
//! the core's [`heart_fleet_core::chain::verify_json_lines`] over the typed WIT options and
//! report, the same verifier as the CLI's `verify-receipts` and the bindings'
//! `verifyReceipts`. A component of its own, so the lease component does not carry the chain's
//! verifier and signature crates (about 98 KB); it imports nothing. Nothing here panics:
//! failures are `heart-error` results. Built by `cargo run -p xtask -- component`.

use heart_fleet_core::chain::{self, FindingCode, LogReport, VerifyOptions};
use heart_fleet_core::{ErrorCode, HeartError};

/// The bindings wit-bindgen generates from `wit/` (world `receipt-verifier`).
#[allow(missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        world: "receipt-verifier",
        path: "../../wit",
        pub_export_macro: true,
    });
}

use bindings::exports::heart::fleet::receipts as wit;
use bindings::heart::fleet::types as wit_types;

/// The component's export.
pub struct Component;

bindings::export!(Component with_types_in bindings);

impl wit::Guest for Component {
    fn verify_receipts(log: Vec<u8>, options: wit::VerifyOptions) -> Result<wit::LogReport, wit_types::HeartError> {
        verify(&log, options).map_err(error)
    }
}

/// The core's error as the WIT `heart-error` (the verifier raises `invalid-input`; any other
/// code travels as `other`, `"<code>: <message>"`).
fn error(e: HeartError) -> wit_types::HeartError {
    match e.code {
        ErrorCode::InvalidInput => wit_types::HeartError::InvalidInput(e.message),
        code => wit_types::HeartError::Other(format!("{code}: {}", e.message)),
    }
}

fn verify(log: &[u8], o: wit::VerifyOptions) -> Result<wit::LogReport, HeartError> {
    let options = VerifyOptions {
        key: o.key,
        public_key: o.public_key,
        run: o.run,
        require_chain: o.require_chain,
        ..VerifyOptions::default()
    };
    let (keys, mut expect) = options.into_parts()?;
    for f in &o.final_seqs {
        expect
            .expect_final_seq(&f.run_id, f.seq)
            .map_err(|e| HeartError::invalid(format!("finalSeq: {}", e.message)))?;
    }
    chain::verify_json_lines(log, &keys, &expect).map(report)
}

fn report(r: LogReport) -> wit::LogReport {
    wit::LogReport {
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
            .map(|(run_id, c)| wit::RunChain {
                run_id,
                receipts: c.receipts,
                chained: c.chained,
                unchained: c.unchained,
                last_seq: c.last_seq,
            })
            .collect(),
        findings: r
            .findings
            .into_iter()
            .map(|f| wit::Finding { position: f.position, run_id: f.run_id, code: code(f.code), message: f.message })
            .collect(),
    }
}

fn code(c: FindingCode) -> wit::FindingCode {
    match c {
        FindingCode::Tampered => wit::FindingCode::ReceiptTampered,
        FindingCode::Malformed => wit::FindingCode::InvalidInput,
        FindingCode::Gap => wit::FindingCode::ChainGap,
        FindingCode::Reorder => wit::FindingCode::ChainReorder,
        FindingCode::Duplicate => wit::FindingCode::ChainDuplicate,
        FindingCode::Fork => wit::FindingCode::ChainFork,
        FindingCode::Broken => wit::FindingCode::ChainBroken,
        FindingCode::Truncated => wit::FindingCode::ChainTruncated,
        FindingCode::SignatureMissing => wit::FindingCode::SignatureMissing,
        FindingCode::SignatureInvalid => wit::FindingCode::SignatureInvalid,
        FindingCode::Unchained => wit::FindingCode::ReceiptUnchained,
    }
}
