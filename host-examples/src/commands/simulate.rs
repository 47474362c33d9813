//! `simulate`: the in-process fleet on the memory store ([`crate::sim::in_process`]), or
//! with `--processes N` real worker processes on one store ([`crate::sim::processes`]).

use std::io::Write;

use super::session::{check_receipts, fail, signed_receipts_file};
use crate::Exit;
use crate::cli::{DEFAULT_MAX_SECONDS, DEFAULT_WORK_MS, Global, SimulateArgs};
use crate::sim::in_process;
use crate::sim::processes::{self, ProcConfig};

/// Refuses a flag the simulation mode would not use: one line, exit 2.
pub fn refuse_foreign_flags(args: &SimulateArgs, processes: bool, err: &mut dyn Write) -> Result<(), Exit> {
    match args.foreign_flags(processes).first() {
        Some((flag, why)) if processes => {
            Err(fail(err, Exit::Error, format!("simulate: {flag} cannot be used with --processes ({why})")))
        }
        Some((flag, why)) => Err(fail(err, Exit::Error, format!("simulate: {flag} needs --processes ({why})"))),
        None => Ok(()),
    }
}

/// `simulate` without `--processes`.
pub fn in_process(g: &Global, args: &SimulateArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    if let Err(exit) = refuse_foreign_flags(args, false, err) {
        return exit;
    }
    let engine = match g.prepare_engine() {
        Ok(engine) => engine,
        Err(e) => return fail(err, Exit::Error, e),
    };
    let cfg = args.sim_config();
    let (sink, health) = match signed_receipts_file(g, &args.receipts, err) {
        Ok(opened) => opened.unzip(),
        Err(exit) => return exit,
    };
    let live = !(args.json || args.quiet);
    let result = if live {
        in_process::run_on(&engine, &cfg, sink, Some(&mut *out))
    } else {
        in_process::run_on(&engine, &cfg, sink, None)
    };
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "heart-fleet: {e}");
            return Exit::Error;
        }
    };
    if let Err(exit) = check_receipts(health.as_ref(), args.receipts.receipts.as_deref(), err) {
        return exit;
    }
    match print(&report, args.json, |out| report.write_human(out), out, err) {
        Ok(()) => report.verdict.exit(),
        Err(exit) => exit,
    }
}

/// `simulate --processes N`.
pub fn processes(g: &Global, args: &SimulateArgs, n: u32, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    // Checked here (compiled once) so a missing component is one line before any worker starts.
    if let Err(e) = g.engine.check() {
        return fail(err, Exit::Error, e);
    }
    let cfg = ProcConfig {
        processes: n,
        runs: args.runs,
        effects: args.effects,
        ttl_seconds: args.ttl_seconds,
        kills: args.kills.unwrap_or(n),
        seed: args.seed,
        max_seconds: args.max_seconds.unwrap_or(DEFAULT_MAX_SECONDS),
        work_ms: args.work_ms.unwrap_or(DEFAULT_WORK_MS),
        effect_ms: 25,
        engine: g.engine,
        max_retries: args.max_retries,
        fault: args.inject_fault,
        signing_keys: g.signing_keys.clone(),
    };
    // The default is a fresh SQLite file of its own, never the embedded store.
    let (url, temp) = match g.store.clone() {
        Some(url) => (url, None),
        None => {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            let path = std::env::temp_dir().join(format!("heart-fleet-simulate-{}-{nanos}.db", std::process::id()));
            let url = format!("sqlite:{}", path.display());
            if let Err(e) = heart_fleet_stores::open_migrated(&url) {
                return fail(err, Exit::Error, e);
            }
            (url, Some(path))
        }
    };
    let (sink, health) = match signed_receipts_file(g, &args.receipts, err) {
        Ok(opened) => opened.unzip(),
        Err(exit) => return exit,
    };
    let live = !(args.json || args.quiet);
    let result =
        if live { processes::run(&cfg, &url, sink, Some(&mut *out)) } else { processes::run(&cfg, &url, sink, None) };
    if let Some(path) = temp {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    let report = match result {
        Ok(r) => r,
        Err(e) => return fail(err, Exit::Error, format!("simulate: {e}")),
    };
    if let Err(exit) = check_receipts(health.as_ref(), args.receipts.receipts.as_deref(), err) {
        return exit;
    }
    match print(&report, args.json, |out| report.write_human(out), out, err) {
        Ok(()) => report.verdict.exit(),
        Err(exit) => exit,
    }
}

/// Prints a simulation's report: one JSON line with `--json`, else the report for people.
fn print<R: serde::Serialize>(
    report: &R,
    json: bool,
    write_human: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), Exit> {
    let written = if json {
        match serde_json::to_string(report) {
            Ok(text) => writeln!(out, "{text}"),
            Err(e) => return Err(fail(err, Exit::Error, e)),
        }
    } else {
        write_human(out)
    };
    written.and_then(|()| out.flush()).map_err(|e| crate::io_failure(err, &e))
}
