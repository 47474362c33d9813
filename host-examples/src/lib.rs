//! # heart-fleet-host
//!
//! The `heart-fleet` command-line tool over [`heart_fleet_core`], as a library so that
//! every command can be tested without a process and new subcommands slot in beside the
//! existing ones. `src/main.rs` only parses the arguments and calls [`commands::run`].
//!
//! * [`cli`]: the argument grammar (clap): every command's options, nothing that runs.
//! * [`commands`]: one module per command and [`commands::run`], the dispatch; the commands
//!   on a store share [`commands::session`] (`--store URL`, default `sqlite:heart-fleet.db`,
//!   over the stores of `heart-fleet-stores`). `serve`, the operator console (live Prometheus
//!   metrics, a JSON API with operator actions behind a bearer token, a web dashboard), is
//!   [`commands::serve`].
//! * [`sim`]: the simulators, apart from the commands: the in-process fleet on the memory
//!   store and `simulate --processes`, real worker processes on one SQL store; [`chaos`]:
//!   `fleet-chaos`, a mixed fleet of Rust, component, Node and Python workers under faults.
//! * [`engine`]: the fleet operations the commands and simulators use, behind the
//!   [`engine::Engine`] trait: the native crate (`--engine native`, the default) or the
//!   WebAssembly component through wasmtime (`--engine component`).
//! * [`store_reading`]: the store's fleet-wide numbers (`metrics`, `/metrics`).
//! * [`receipts_file`]: receipts as JSON Lines: the appending, chaining
//!   [`receipts_file::JsonlFileSink`] behind every `--receipts FILE`; [`sinks`]: small
//!   [`heart_fleet_core::receipt::ReceiptSink`]s that commands combine.
//! * [`keys`]: fleet key files (`--signing-key`, `--key`, `--public-key`) and `keygen`.
//! * [`identity`]: the host name and default owner; [`rng`]: the deterministic generator the
//!   simulations draw from.
//!
//! Modules depend downwards only: `commands` on `cli`, `sim`, `chaos` and the rest;
//! `cli` on the value types it parses; `sim` and `chaos` on `engine`, `sinks`, `rng`; none of
//! them on `commands`.
//!
//! The core does no I/O; everything that touches files, standard streams, or randomness
//! lives here.

pub mod chaos;
pub mod cli;
pub mod commands;
pub mod engine;
pub mod identity;
pub mod keys;
pub mod receipts_file;
pub mod rng;
pub mod sim;
pub mod sinks;
pub mod store_reading;

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
