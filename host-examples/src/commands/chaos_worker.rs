//! `chaos-worker`: one Rust worker of `fleet-chaos` (started by it, configured by its environment).

use std::io::Write;

use super::session::fail;
use crate::Exit;
use crate::chaos;
use crate::cli::Global;

/// Runs the worker until the harness stops it.
pub fn run(g: &Global, err: &mut dyn Write) -> Exit {
    let engine = match g.prepare_engine() {
        Ok(e) => e,
        Err(e) => return fail(err, Exit::Error, e),
    };
    match chaos::worker::WorkerEnv::from_env().and_then(|env| chaos::worker::run(&engine, &env)) {
        Ok(()) => Exit::Success,
        Err(e) => fail(err, Exit::Error, format!("chaos-worker: {e}")),
    }
}
