//! The `heart-fleet` binary: parses the arguments and hands them to
//! [`heart_fleet_host::commands::run`] with the process's standard streams.

use std::process::ExitCode;

use clap::Parser;
use heart_fleet_host::cli::Cli;
use heart_fleet_host::commands::run;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    run(cli, &mut input, &mut out, &mut err).into()
}
