//! The `heart-fleet` argument grammar and the dispatch to the commands.
//!
//! Every command is one variant of [`Command`] with its own `Args` struct and one arm in
//! [`run`]; options shared by several commands are small `Args` structs flattened into
//! them ([`ReceiptsArg`] for `--receipts FILE`). A command writes its results to `out`
//! and its diagnostics to `err` and returns an [`Exit`], so it can be tested without a
//! process. New commands (canary, reclaim, migrate, runs, instances, metrics) and a global
//! `--store URL` (a field of [`Cli`] marked `global = true`) slot in the same way.
//!
//! Exit statuses (see [`Exit`]): 0 success, 1 a check failed, 2 the command could not run
//! (clap also exits with 2 on wrong arguments, after a one-line `error: ...` and usage).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use heart_fleet_core::receipt::ReceiptSink;

use crate::Exit;
use crate::canonical_cmd::{self, Form};
use crate::receipts_file::{self, JsonlFileSink, SinkHealth};
use crate::simulate::{self, Fault, SimConfig};

/// heart-fleet: fenced leases for fleets of workers, from the command line.
#[derive(Debug, Parser)]
#[command(name = "heart-fleet", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the canonical JSON of each JSON document read from stdin, one per line.
    ///
    /// Blank lines are skipped. The first invalid line stops the command with
    /// `line N: ...` on stderr and exit status 1.
    Canonicalize,
    /// Print the canonical digest (`sha256:dreamnet-sorted-json:v0:...`) of each JSON
    /// document read from stdin, one per line.
    ///
    /// Blank lines are skipped. The first invalid line stops the command with
    /// `line N: ...` on stderr and exit status 1.
    Digest,
    /// Check a JSON Lines file of receipts; exit 0 if all verify, 1 otherwise, 2 if the
    /// file cannot be read.
    VerifyReceipts(VerifyReceiptsArgs),
    /// Run an in-process fleet with crashes and pauses on the memory store and report
    /// whether every safety count stayed 0 (exit 0) or not (exit 1).
    Simulate(SimulateArgs),
}

/// `--receipts FILE`, for every command that emits receipts.
#[derive(Debug, Clone, Default, Args)]
pub struct ReceiptsArg {
    /// Append every receipt to FILE as JSON Lines (created if missing).
    #[arg(long, value_name = "FILE")]
    pub receipts: Option<PathBuf>,
}

/// Arguments of `verify-receipts`.
#[derive(Debug, Args)]
pub struct VerifyReceiptsArgs {
    /// The JSON Lines file (one receipt per line; blank lines are skipped).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

/// Arguments of `simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Workers sharing the fleet.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub workers: u32,
    /// Runs to complete.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub runs: u32,
    /// Probability that a worker crashes at a step (0 to 1).
    #[arg(long, default_value_t = 0.1, value_parser = probability)]
    pub crash_rate: f64,
    /// Probability that a worker pauses (freezes, then acts with its old token) at a step.
    #[arg(long, default_value_t = 0.05, value_parser = probability)]
    pub pause_rate: f64,
    /// Effects per run (even ones through send-once, odd ones through guard).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=1_000))]
    pub effects: u32,
    /// Seed of the generator: the same seed reproduces the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Steps with faults before recovery is driven to quiescence.
    #[arg(long, default_value_t = 10_000)]
    pub steps: u64,
    /// Lease length in seconds (one step is one second, so a lease must span two).
    #[arg(long = "ttl", value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(i64).range(2..=3_600))]
    pub ttl_seconds: i64,
    /// The sweeper (reclaim, reconcile, requeue) runs every N steps.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub sweep_every: u64,
    /// Retry ceiling; quarantined runs are then requeued by the sweeper [default: unlimited].
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,
    /// Break the store on purpose, to see the safety checks catch it (the run must then
    /// come out unsafe, exit 1).
    #[arg(long, value_enum, value_name = "FAULT", default_value_t = Fault::None)]
    pub inject_fault: Fault,
    /// Print only the final report, as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Print only the final report (no receipts, faults or metrics as it goes).
    #[arg(long, conflicts_with = "json")]
    pub quiet: bool,
    /// Where receipts also go.
    #[command(flatten)]
    pub receipts: ReceiptsArg,
}

fn probability(text: &str) -> Result<f64, String> {
    let p: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&p) { Ok(p) } else { Err(format!("{p} is not a probability between 0 and 1")) }
}

/// Runs a parsed command line against the given streams.
pub fn run(cli: Cli, input: &mut dyn BufRead, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    match cli.command {
        Command::Canonicalize => canonical_cmd::run(Form::Canonical, input, out, err),
        Command::Digest => canonical_cmd::run(Form::Digest, input, out, err),
        Command::VerifyReceipts(args) => verify_receipts(&args, out, err),
        Command::Simulate(args) => simulate_cmd(&args, out, err),
    }
}

fn verify_receipts(args: &VerifyReceiptsArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let file = match std::fs::File::open(&args.file) {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(err, "heart-fleet: cannot read {}: {e}", args.file.display());
            return Exit::Error;
        }
    };
    let mut reader = std::io::BufReader::new(file);
    let summary = match receipts_file::verify_lines(&mut reader, out) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "heart-fleet: cannot read {}: {e}", args.file.display());
            return Exit::Error;
        }
    };
    let line = format!(
        "{} receipts, {} ok, {} tampered, {} malformed",
        summary.receipts, summary.ok, summary.tampered, summary.malformed
    );
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        return crate::io_failure(err, &e);
    }
    if summary.all_ok() { Exit::Success } else { Exit::Failure }
}

/// An opened `--receipts` file: the sink to hand to the fleet, and its health handle.
pub type OpenedReceipts = (Box<dyn ReceiptSink>, SinkHealth);

/// Opens the `--receipts` file, if any.
pub fn open_receipts(arg: &ReceiptsArg, err: &mut dyn Write) -> Result<Option<OpenedReceipts>, Exit> {
    let Some(path) = arg.receipts.as_deref() else { return Ok(None) };
    match JsonlFileSink::open(path) {
        Ok((sink, health)) => Ok(Some((Box::new(sink), health))),
        Err(e) => {
            let _ = writeln!(err, "heart-fleet: cannot open {}: {e}", path.display());
            Err(Exit::Error)
        }
    }
}

/// Reports a receipts file that could not be written to: `Exit::Error` then.
pub fn check_receipts(health: Option<&SinkHealth>, path: Option<&Path>, err: &mut dyn Write) -> Result<(), Exit> {
    match health.and_then(SinkHealth::error) {
        Some(e) => {
            let shown = path.map(|p| p.display().to_string()).unwrap_or_default();
            let _ = writeln!(err, "heart-fleet: receipts file {shown}: {e}");
            Err(Exit::Error)
        }
        None => Ok(()),
    }
}

fn simulate_cmd(args: &SimulateArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let cfg = SimConfig {
        workers: args.workers,
        runs: args.runs,
        crash_rate: args.crash_rate,
        pause_rate: args.pause_rate,
        effects: args.effects,
        seed: args.seed,
        steps: args.steps,
        ttl_seconds: args.ttl_seconds,
        max_retries: args.max_retries,
        sweep_every: args.sweep_every,
        fault: args.inject_fault,
    };
    let (sink, health) = match open_receipts(&args.receipts, err) {
        Ok(Some((sink, health))) => (Some(sink), Some(health)),
        Ok(None) => (None, None),
        Err(exit) => return exit,
    };
    let live = !(args.json || args.quiet);
    let result = if live { simulate::run(&cfg, sink, Some(&mut *out)) } else { simulate::run(&cfg, sink, None) };
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
    let written = if args.json {
        match serde_json::to_string(&report) {
            Ok(text) => writeln!(out, "{text}"),
            Err(e) => {
                let _ = writeln!(err, "heart-fleet: {e}");
                return Exit::Error;
            }
        }
    } else {
        report.write_human(out)
    };
    if let Err(e) = written.and_then(|()| out.flush()) {
        return crate::io_failure(err, &e);
    }
    if report.safe { Exit::Success } else { Exit::Failure }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn probabilities_are_checked() {
        assert_eq!(probability("0.25"), Ok(0.25));
        assert!(probability("1.5").is_err());
        assert!(probability("NaN").is_err());
        assert!(probability("x").is_err());
    }

    #[test]
    fn simulate_defaults() {
        let cli = Cli::try_parse_from(["heart-fleet", "simulate"]).unwrap();
        let Command::Simulate(a) = cli.command else { panic!("not simulate") };
        assert_eq!((a.workers, a.runs, a.effects, a.seed, a.crash_rate), (4, 8, 2, 1, 0.1));
        assert!(a.max_retries.is_none() && a.receipts.receipts.is_none());
        assert!(Cli::try_parse_from(["heart-fleet", "simulate", "--workers", "0"]).is_err());
    }
}
