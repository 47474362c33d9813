//! The commands: one module each, all with the same shape. A command takes the parsed
//! [`Global`] options and its own arguments (from [`crate::cli`]), writes its results to `out`
//! and its diagnostics to `err`, and returns an [`Exit`], so it can be tested without a
//! process. [`run`] dispatches a parsed command line; [`session`] holds what they share.
//!
//! Exit statuses: 0 success; 1 the command ran but the answer is a refusal or a failed check
//! (run not found, not quarantined, a canary whose work failed, a tampered receipt, an unsafe
//! simulation); 2 the command could not run (store unreachable or not migrated, a store
//! failure mid-operation, an unwritable receipts file, a component that is missing or
//! trapped); 3 a `simulate --processes` that reached `--max-seconds` before it could be judged.

pub mod canary;
pub mod canonical;
pub mod chaos_worker;
pub mod check_history;
pub mod fleet_chaos;
pub mod instances;
pub mod keygen;
pub mod metrics;
pub mod migrate;
pub mod reclaim;
pub mod runs;
pub mod serve;
pub mod session;
pub mod simulate;
pub mod verify_receipts;
pub mod worker;

use std::io::{BufRead, Write};

use crate::Exit;
use crate::cli::{Cli, Command};
use canonical::Form;

/// Runs a parsed command line against the given streams.
pub fn run(cli: Cli, input: &mut dyn BufRead, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let g = &cli.global;
    match cli.command {
        Command::Canonicalize => canonical::run(Form::Canonical, input, out, err),
        Command::Digest => canonical::run(Form::Digest, input, out, err),
        Command::VerifyReceipts(args) => verify_receipts::run(g, &args, out, err),
        Command::Keygen(args) => keygen::keygen(&args, out, err),
        Command::Simulate(args) => match args.processes {
            Some(n) => match simulate::refuse_foreign_flags(&args, true, err) {
                Ok(()) => simulate::processes(g, &args, n, out, err),
                Err(exit) => exit,
            },
            None if g.store.is_some() => session::fail(
                err,
                Exit::Error,
                "simulate --store needs --processes N: the in-process simulation runs on the memory store's \
                 virtual clock; --processes runs real worker processes against the store",
            ),
            None => simulate::in_process(g, &args, out, err),
        },
        Command::Migrate => migrate::migrate(g, out, err),
        Command::Canary(args) => canary::canary(g, &args, out, err),
        Command::Reclaim(args) => reclaim::reclaim(g, &args, out, err),
        Command::Runs(args) => runs::runs(g, &args, out, err),
        Command::Instances(args) => instances::instances(g, &args, out, err),
        Command::Metrics => metrics::metrics(g, out, err),
        Command::Serve(args) => serve::run(g, &args, err),
        Command::Worker(args) => worker::run(g, &args, err),
        Command::FleetChaos(args) => fleet_chaos::run(g, args, out, err),
        Command::CheckHistory(args) => check_history::run(g, &args, out, err),
        Command::ChaosWorker => chaos_worker::run(g, err),
    }
}
