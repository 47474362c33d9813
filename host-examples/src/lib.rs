//! # heart-fleet-host
//!
//! The `heart-fleet` command-line tool over [`heart_fleet_core`], as a library so that
//! every command can be tested without a process and new subcommands slot in beside the
//! existing ones. `src/main.rs` only parses the arguments and calls [`cli::run`].
//!
//! * [`cli`]: the argument grammar (clap) and the dispatch to the commands, with the exit
//!   status convention of [`Exit`].
//! * [`canonical_cmd`]: `canonicalize` and `digest`, JSON documents one per line.
//! * [`receipts_file`]: receipts as JSON Lines: the appending, chaining
//!   [`receipts_file::JsonlFileSink`] behind every `--receipts FILE`.
//! * [`verify_cmd`]: `verify-receipts`, a file or the store's table, through the core's chain
//!   verifier.
//! * [`keys`]: fleet key files (`--signing-key`, `--key`, `--public-key`) and `keygen`.
//! * [`sinks`]: small [`heart_fleet_core::receipt::ReceiptSink`]s that commands combine.
//! * [`simulate`]: an in-process fleet on the core's memory store with crashes, pauses, a
//!   sweeper and a reconciler, checked by bookkeeping of its own.
//! * [`procsim`]: `simulate --processes N`: real worker processes on one shared SQL store,
//!   some killed with SIGKILL, checked by journals, receipts and a receiving system's table.
//! * [`commands`]: the commands on a store (`migrate`, `canary`, `reclaim`, `runs`,
//!   `instances`, `metrics`), over the stores of
//!   `heart-fleet-stores` (`--store URL`, default `sqlite:heart-fleet.db`).
//! * [`engine`]: the fleet operations those commands use, behind the [`engine::Engine`]
//!   trait: the native crate (`--engine native`, the default) or the WebAssembly component
//!   through wasmtime (`--engine component`).
//! * [`serve`]: `serve`, the operator console: live Prometheus metrics, a JSON API with
//!   operator actions behind a bearer token, and a web dashboard, over HTTP.
//! * [`rng`]: the deterministic generator the simulation draws from.
//!
//! The core does no I/O; everything that touches files, standard streams, or randomness
//! lives here.

pub mod canonical_cmd;
pub mod chaos;
pub mod cli;
pub mod commands;
pub mod engine;
pub mod keys;
pub mod procsim;
pub mod receipts_file;
pub mod rng;
pub mod serve;
pub mod simulate;
pub mod sinks;
pub mod verify_cmd;

use std::io::{self, Write};
use std::process::ExitCode;

/// The exit statuses of every command.
///
/// `0` success; `1` the command ran and found a problem in its input (an invalid JSON
/// line, a tampered receipt, a non-zero safety count, a run that is not found or not in the
/// status an operator action needs, a canary that could not run); `2` the command could not
/// run (a file that cannot be read or written, a store that is unknown, unreachable or not
/// migrated, a store failure mid-operation, a missing component or a trap inside it, wrong
/// arguments — clap also exits with 2); `3` a `simulate --processes` that reached its
/// `--max-seconds` bound before the fleet finished, with no safety count non-zero but those
/// an unfinished run explains (it proved nothing either way: "did not finish").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything checked out.
    Success,
    /// The input (or the simulated fleet) failed a check.
    Failure,
    /// The command could not do its job.
    Error,
    /// The simulation ran out of time before it could be judged (`did-not-finish`).
    Unfinished,
}

impl Exit {
    /// The numeric status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Error => 2,
            Exit::Unfinished => 3,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// Reports an I/O error of a command on `err` (one line, `heart-fleet: ...`) and returns
/// [`Exit::Error`]. A closed output pipe (`heart-fleet ... | head`) is not reported.
pub fn io_failure(err: &mut dyn Write, e: &io::Error) -> Exit {
    if e.kind() != io::ErrorKind::BrokenPipe {
        let _ = writeln!(err, "heart-fleet: {e}");
    }
    Exit::Error
}
