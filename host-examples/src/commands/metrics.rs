//! `metrics`: the store's Prometheus families, printed once.

use std::io::Write;

use super::session::{fail, open_store};
use crate::Exit;
use crate::cli::Global;
use crate::store_reading::StoreReading;

/// `metrics`: Prometheus text derived from the store, the store families of `serve`'s
/// `/metrics` ([`StoreReading`]). The 13
/// `heart_fleet_*_total` counters of the core live in each process's fleet and die with
/// it; a separate command cannot read another process's, so this one reads the store.
pub fn metrics(global: &Global, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let mut store = match open_store(global, err) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let text = match StoreReading::read(&mut store) {
        Ok(reading) => {
            let mut text = String::new();
            reading.render(&mut text);
            text
        }
        Err(e) => return fail(err, Exit::Error, format!("metrics: {e}")),
    };
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Exit::Success,
        Err(e) => crate::io_failure(err, &e),
    }
}
