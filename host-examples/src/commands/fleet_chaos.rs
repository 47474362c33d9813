//! `fleet-chaos`: a mixed fleet under faults on a fresh store ([`crate::chaos`]).

use std::io::Write;

use super::session::fail;
use crate::Exit;
use crate::chaos::{self, ChaosConfig};
use crate::cli::{FleetChaosArgs, Global};
use crate::engine::EngineKind;

/// Runs the harness and prints its report.
pub fn run(g: &Global, args: FleetChaosArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    if g.store.is_some() {
        return fail(
            err,
            Exit::Error,
            "fleet-chaos makes its own store: --store-kind, and --database-url for postgres",
        );
    }
    if let Err(e) = EngineKind::Component.check() {
        return fail(err, Exit::Error, format!("fleet-chaos runs component workers too: {e}"));
    }
    let cfg = ChaosConfig {
        store: args.store_kind,
        seconds: args.seconds,
        seed: args.seed,
        database_url: args.database_url,
        pooler_url: args.pooler_url,
        restart_command: args.restart_command,
        faketime: args.faketime,
        node_worker: args.node_worker,
        python: args.python,
        python_worker: args.python_worker,
        runs: args.runs,
        ttl_seconds: args.ttl_seconds,
        work_ms: args.work_ms,
        dir: args.dir,
    };
    let result = if args.json { chaos::run(cfg, None) } else { chaos::run(cfg, Some(&mut *out)) };
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            if args.json {
                let _ = writeln!(out, "{}", serde_json::json!({ "errors": [e.clone()], "verdict": "fail" }));
            }
            return fail(err, Exit::Error, format!("fleet-chaos: {e}"));
        }
    };
    let written = if args.json { writeln!(out, "{}", report.to_json()) } else { report.write_human(out) };
    if let Err(e) = written.and_then(|()| out.flush()) {
        return crate::io_failure(err, &e);
    }
    if report.verdict == "pass" { Exit::Success } else { Exit::Failure }
}
