//! `migrate`: create or upgrade the tables of `--store`.

use std::io::Write;

use heart_fleet_stores::redact;

use super::session::{fail, store_url, write_lines};
use crate::Exit;
use crate::cli::Global;

/// `migrate`: create or upgrade the tables of `--store` (the embedded default included).
pub fn migrate(global: &Global, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let url = store_url(global);
    let mut store = match heart_fleet_stores::connect(url) {
        Ok(s) => s,
        Err(e) => return fail(err, Exit::Error, e),
    };
    let statuses = match heart_fleet_stores::migrate(&mut store) {
        Ok(s) => s,
        Err(e) => return fail(err, Exit::Error, format!("migrate {}: {e}", redact(url))),
    };
    let mut lines: Vec<String> = statuses
        .iter()
        .map(|m| format!("{}: {}", m.name, if m.applied { "applied" } else { "already applied" }))
        .collect();
    let applied = statuses.iter().filter(|m| m.applied).count();
    lines.push(format!("{}: up to date ({applied} applied now)", redact(url)));
    match write_lines(out, err, &lines) {
        Ok(()) => Exit::Success,
        Err(exit) => exit,
    }
}
