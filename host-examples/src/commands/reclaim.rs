//! `reclaim`: the TTL sweep, then the liveness sweep.

use std::io::Write;

use serde_json::json;

use super::session::{Session, fail, heart_exit, json_line, write_lines};
use crate::Exit;
use crate::cli::{Global, ReclaimArgs};

/// `reclaim`: the TTL sweep, then the liveness sweep; a summary as JSON or for people.
pub fn reclaim(global: &Global, args: &ReclaimArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let mut s = match Session::open(global, &args.receipts, args.max_retries.or(Some(5)), err) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let ttl = match s.fleet.reclaim_expired(args.limit) {
        Ok(t) => t,
        Err(e) => {
            let _ = s.finish(err);
            return fail(err, heart_exit(&e), format!("reclaim (TTL sweep): {e}"));
        }
    };
    let live = match s.fleet.reclaim_dead_instance_runs(args.liveness_ttl_ms, args.limit) {
        Ok(l) => l,
        Err(e) => {
            let _ = s.finish(err);
            let ids = if ttl.reclaimed_ids.is_empty() { "nothing".to_owned() } else { ttl.reclaimed_ids.join(", ") };
            let done = format!("the TTL sweep had reclaimed {ids}");
            return fail(err, heart_exit(&e), format!("reclaim (liveness sweep; {done}): {e}"));
        }
    };
    let lines = if args.json {
        vec![json_line(&json!({ "ttlSweep": ttl, "liveness": live }))]
    } else {
        let mut l = vec![format!(
            "ttl sweep: {} reclaimed, {} quarantined, {} changed under the sweep",
            ttl.reclaimed_count,
            ttl.quarantined_ids.len(),
            ttl.errors.len()
        )];
        l.extend(ttl.reclaimed_ids.iter().map(|id| format!("  reclaimed {id}")));
        l.extend(ttl.quarantined_ids.iter().map(|id| format!("  quarantined {id}")));
        l.push(format!(
            "liveness: {} instances declared dead, {} reclaimed, {} quarantined, {} changed under the pass",
            live.dead_instance_ids.len(),
            live.reclaimed_count,
            live.quarantined_ids.len(),
            live.errors.len()
        ));
        l.extend(live.dead_instance_ids.iter().map(|id| format!("  dead {id}")));
        l.extend(live.reclaimed_ids.iter().map(|id| format!("  reclaimed {id}")));
        l.extend(live.quarantined_ids.iter().map(|id| format!("  quarantined {id}")));
        l
    };
    match write_lines(out, err, &lines).and_then(|()| s.finish(err)) {
        Ok(()) => Exit::Success,
        Err(exit) => exit,
    }
}
