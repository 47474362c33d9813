//! `verify-receipts`: a JSON Lines file of receipts, or the store's `heart_receipts` table
//! (`--table`), checked by the core's chain verifier
//! ([`heart_fleet_core::chain::verify_json_lines`], [`heart_fleet_stores::AnyStore::verify_receipts`]).
//!
//! Output: one line per finding, `line N: CODE: MESSAGE` (`row N` for the table; `run ID` for
//! a finding about a whole run, a truncation), then the summary line
//! ([`LogReport::summary_line`]); with `--json`, the report as one JSON object instead. Exit 0
//! when nothing was found, 1 when something was, 2 when the log or a key cannot be read or is
//! not what it must be (a line that is not JSON, a receipt of an unknown schema version or of
//! another run than `--run`), with nothing printed on stdout.

use std::io::Write;

use heart_fleet_core::chain::{LogExpectations, LogReport, verify_json_lines};

use crate::Exit;
use crate::cli::{Global, VerifyReceiptsArgs};
use crate::commands::session::{fail, open_store};
use crate::keys;

/// Runs `verify-receipts`.
pub fn run(global: &Global, args: &VerifyReceiptsArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let keys = match keys::verify_keys(args.key.as_deref(), args.public_key.as_deref()) {
        Ok(keys) => keys,
        Err(e) => return fail(err, Exit::Error, format!("verify-receipts: {e}")),
    };
    let mut expect = LogExpectations { run: args.run.clone(), require_chain: args.require_chain, ..Default::default() };
    for (run, seq) in &args.final_seq {
        if let Err(e) = expect.expect_final_seq(run, *seq) {
            return fail(err, Exit::Error, format!("verify-receipts: --final-seq: {}", e.message));
        }
    }
    let (report, where_) = if args.table {
        let mut store = match open_store(global, err) {
            Ok(store) => store,
            Err(exit) => return exit,
        };
        match store.verify_receipts(&keys, &expect) {
            Ok(report) => (report, "row"),
            Err(e) => return fail(err, Exit::Error, format!("verify-receipts --table: {e}")),
        }
    } else {
        let Some(path) = args.file.as_deref() else {
            return fail(err, Exit::Error, "verify-receipts needs a FILE or --table");
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) => return fail(err, Exit::Error, format!("cannot read {}: {e}", path.display())),
        };
        match verify_json_lines(&bytes, &keys, &expect) {
            Ok(report) => (report, "line"),
            Err(e) => return fail(err, Exit::Error, format!("verify-receipts {}: {e}", path.display())),
        }
    };
    let written = if args.json {
        match serde_json::to_string(&report) {
            Ok(text) => writeln!(out, "{text}"),
            Err(e) => return fail(err, Exit::Error, format!("verify-receipts: {e}")),
        }
    } else {
        write_report(out, &report, where_)
    };
    if let Err(e) = written.and_then(|()| out.flush()) {
        return crate::io_failure(err, &e);
    }
    if report.passed() { Exit::Success } else { Exit::Failure }
}

/// The findings, one per line, then the summary line.
fn write_report(out: &mut dyn Write, report: &LogReport, where_: &str) -> std::io::Result<()> {
    for f in &report.findings {
        match (f.position, f.run_id.as_deref()) {
            (Some(position), _) => writeln!(out, "{where_} {position}: {}: {}", f.code, f.message)?,
            (None, Some(run)) => writeln!(out, "run {run}: {}: {}", f.code, f.message)?,
            (None, None) => writeln!(out, "{}: {}", f.code, f.message)?,
        }
    }
    writeln!(out, "{}", report.summary_line())
}
