//! `canary`: a lease-guarded no-op on the canary run, the reference's beat line.

use std::io::Write;
use std::time::{Duration, Instant};

use heart_fleet_core::session::NotRunReason;
use heart_fleet_core::{ErrorCode, HeartMetrics, LeaseOptions};
use serde::Serialize;
use serde_json::{Value, json};

use super::session::{Session, fail, heart_exit, json_line, write_lines};
use crate::Exit;
use crate::cli::{CanaryArgs, Global};
use crate::engine::LeaseWork;
use crate::identity::default_owner;

/// The deterministic kind and key of the canary's resource run.
pub const CANARY_KIND: &str = "zoe.heart.canary";
/// See [`CANARY_KIND`].
pub const CANARY_KEY: &str = "singleton";
/// The canary run's objective (the reference's text).
pub const CANARY_OBJECTIVE: &str =
    "Heart fleet canary: lease-guarded no-op proving the shared lease layer on the live table";

/// The counters of the reference's canary beat line, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BeatMetrics {
    /// `acquireWins`.
    pub acquire_wins: u64,
    /// `acquireCollisions`.
    pub acquire_collisions: u64,
    /// `renews`.
    pub renews: u64,
    /// `releases`.
    pub releases: u64,
    /// `fenceRejections`.
    pub fence_rejections: u64,
    /// `effectCommits`.
    pub effect_commits: u64,
    /// `effectDedupes`.
    pub effect_dedupes: u64,
}

impl From<HeartMetrics> for BeatMetrics {
    fn from(m: HeartMetrics) -> BeatMetrics {
        BeatMetrics {
            acquire_wins: m.acquire_wins,
            acquire_collisions: m.acquire_collisions,
            renews: m.renews,
            releases: m.releases,
            fence_rejections: m.fence_rejections,
            effect_commits: m.effect_commits,
            effect_dedupes: m.effect_dedupes,
        }
    }
}

/// The canary's beat line: `{"ran":…, "reason"?:…, "metrics":{…}}` (the reference's keys and order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Beat {
    /// Whether the no-op ran under the lease.
    pub ran: bool,
    /// Why not (`lease-held`, `lease-error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<NotRunReason>,
    /// This process's counters.
    pub metrics: BeatMetrics,
}

/// `canary`: find or create the canary run, run a lease-guarded no-op (held `--hold-ms`,
/// heartbeating), release the run back to `ready`, print the receipts and the beat line.
pub fn canary(global: &Global, args: &CanaryArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let mut s = match Session::open(global, &args.receipts, Some(heart_fleet_core::ops::DEFAULT_MAX_RETRIES), err) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let run = match s.fleet.ensure_resource_run(CANARY_KIND, CANARY_KEY, CANARY_OBJECTIVE, "heart-fleet:canary") {
        Ok((run, _created)) => run,
        Err(e) => return fail(err, heart_exit(&e), format!("canary: {e}")),
    };
    let opts = LeaseOptions {
        run_id: run.id,
        owner: args.owner.clone().unwrap_or_else(default_owner),
        ttl_seconds: args.ttl_seconds,
        renew_every_ms: None,
        release_to_ready: true,
    };
    let hold = Duration::from_millis(args.hold_ms);
    let mut work = |cx: &mut dyn LeaseWork| -> Result<Value, String> {
        let start = Instant::now();
        while let Some(left) = hold.checked_sub(start.elapsed()).filter(|d| !d.is_zero()) {
            std::thread::sleep(left.min(Duration::from_millis(50)));
            if let Some(cause) = cx.heartbeat() {
                return Err(format!("the lease was lost during the no-op ({})", cause.as_str()));
            }
        }
        Ok(json!("ok"))
    };
    let result = s.fleet.execute_with_lease(&opts, &mut work);
    let mut lines: Vec<String> = s.queue.drain().iter().map(|r| r.to_json_line()).collect();
    let (beat, problem) = match result {
        Err(e) => return fail(err, heart_exit(&e), format!("canary: {e}")),
        Ok(Err(message)) => (Beat { ran: true, reason: None, metrics: s.fleet.metrics().into() }, Some(message)),
        Ok(Ok(outcome)) => {
            let problem = match (&outcome.reason, outcome.code) {
                (Some(NotRunReason::LeaseHeld), Some(ErrorCode::Quarantined)) => {
                    Some("the canary run is quarantined: requeue it with `heart-fleet runs requeue`".to_owned())
                }
                (Some(NotRunReason::LeaseError), code) => {
                    Some(format!("the canary could not take its lease ({})", code.map_or("unknown", ErrorCode::as_str)))
                }
                _ if outcome.ran && !outcome.released => Some("the canary's release was refused".to_owned()),
                _ => outcome.lost.map(|c| format!("the lease was lost during the no-op ({})", c.as_str())),
            };
            (Beat { ran: outcome.ran, reason: outcome.reason, metrics: s.fleet.metrics().into() }, problem)
        }
    };
    lines.push(json_line(&beat));
    if let Err(exit) = write_lines(out, err, &lines).and_then(|()| s.finish(err)) {
        return exit;
    }
    match problem {
        Some(p) => fail(err, Exit::Failure, format!("canary: {p}")),
        None => Exit::Success,
    }
}
