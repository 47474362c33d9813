//! `check-history`: the fleet-chaos checker over a history file or a store.

use std::io::Write;

use super::session::fail;
use crate::Exit;
use crate::chaos::{self, history};
use crate::cli::{CheckHistoryArgs, Global};

fn read_history_arg(g: &Global, args: &CheckHistoryArgs) -> Result<history::History, String> {
    match (&args.history, &g.store) {
        (Some(path), None) => {
            let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            serde_json::from_slice(&bytes).map_err(|e| format!("{}: not a history: {e}", path.display()))
        }
        (None, Some(url)) => {
            let mut store = heart_fleet_stores::open(url).map_err(|e| e.to_string())?;
            chaos::read_history(&mut store)
        }
        (Some(_), Some(_)) => Err("check-history takes --history FILE or --store URL, not both".into()),
        (None, None) => Err("check-history needs --history FILE or --store URL".into()),
    }
}

/// Checks the history and prints the counts, the findings and the verdict.
pub fn run(g: &Global, args: &CheckHistoryArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let history = match read_history_arg(g, args) {
        Ok(h) => h,
        Err(e) => return fail(err, Exit::Error, format!("check-history: {e}")),
    };
    let v = history::check(&history);
    let verdict = if v.pass() { "pass" } else { "fail" };
    let written = if args.json {
        let mut value = serde_json::to_value(&v).unwrap_or_default();
        value["verdict"] = serde_json::json!(verdict);
        writeln!(out, "{value}")
    } else {
        let mut text = String::new();
        for (name, n) in v.counts() {
            text.push_str(&format!("{name} {n}\n"));
        }
        for f in &v.findings {
            text.push_str(&format!("finding: {f}\n"));
        }
        writeln!(out, "{text}verdict: {verdict}")
    };
    if let Err(e) = written.and_then(|()| out.flush()) {
        return crate::io_failure(err, &e);
    }
    if v.pass() { Exit::Success } else { Exit::Failure }
}
