//! `worker`: one worker process of `simulate --processes` (started by it, never by hand).

use std::io::Write;

use super::session::fail;
use crate::Exit;
use crate::cli::{Global, WorkerArgs};
use crate::sim::processes;

/// Runs the worker until its journal says it is done.
pub fn run(g: &Global, args: &WorkerArgs, err: &mut dyn Write) -> Exit {
    let url = match g.store.clone().or_else(|| std::env::var(processes::STORE_ENV).ok()) {
        Some(u) => u,
        None => return fail(err, Exit::Error, "worker: no store (it is started by simulate --processes)"),
    };
    let cfg = processes::WorkerConfig {
        sim_id: args.sim_id.clone(),
        name: args.name.clone(),
        journal: args.journal.clone(),
        ttl_seconds: args.ttl_seconds,
        effects: args.effects,
        work_ms: args.work_ms,
        effect_ms: args.effect_ms,
        deadline_ms: args.deadline_ms,
        seed: args.seed,
        engine: g.engine,
        max_retries: args.max_retries,
        fault: args.inject_fault,
        signing_keys: g.signing_keys.clone(),
    };
    match processes::run_worker(&url, cfg) {
        Ok(()) => Exit::Success,
        Err(e) => fail(err, Exit::Error, format!("worker {}: {e}", args.name)),
    }
}
