//! The history a `fleet-chaos` run leaves behind, and the checker of `heart-fleet
//! check-history`.
//!
//! The checker trusts neither the workers nor the library. Its evidence:
//!
//! * **Transitions**: every `UPDATE` of a run row, recorded by a trigger in the store itself
//!   (the row before and after, in commit order, at the store-clock time the writing statement
//!   stamped as `updated_at`). Receipts carry no epoch, and a killed worker can lose the
//!   receipt of its last write; the trigger misses nothing.
//! * **Receipts**: the `heart_receipts` rows of the run's runs.
//! * **Deliveries**: what the receiving side accepted, in the order it accepted them.
//! * **Intents** and the **final rows**, read after the final sweep and reconcile.
//!
//! What it checks (each a count in [`Verdict`]):
//!
//! * `exclusion_violations`: a new lease taken while the row still showed another live lease
//!   (held, expiry after the taking statement's clock), a lease renewed or released after it
//!   expired (both reject an expired token, so such a write is a zombie's), and a
//!   write whose clock is more than [`CLOCK_SLACK_MS`] behind an earlier write of the same run:
//!   the store's clock decides exclusion, and one that runs backwards (writers whose clocks
//!   disagree) cannot.
//! * `epoch_regressions`: an epoch that went down, or a new lease that did not raise it.
//! * `duplicate_effects`: deliveries of an effect key beyond its first.
//! * `stale_effects`: a delivery from an epoch older than one the receiver had already
//!   accepted for that run, or from an owner and epoch that never held the run.
//! * `lost_evidence`: a committed intent without evidence, or whose evidence names no delivery
//!   of its key and epoch; a delivered effect whose intent is not committed after the final
//!   reconcile.
//! * `receipt_mismatches`: a receipt that does not verify or whose columns disagree with it; an
//!   `acquired`, `renewed` or `released` receipt no transition backs; a final row that is not
//!   the last transition's row; a run held at the end whose last lease receipt names another
//!   lease (excused only when its owner was killed, since a kill can lose the receipt of the
//!   last write); a break in a run's receipt chain (a gap, a reorder, a duplicate, a fork, a
//!   broken link: every runtime's sink chains through the core's appender, so no fault may
//!   leave one).
//! * `unfinished_runs`: runs still held after the final sweep (every worker is gone by then).

use std::collections::{BTreeMap, BTreeSet};

use heart_fleet_core::chain::{LogEntry, LogExpectations, VerifyKeys, verify_log};
use heart_fleet_core::{Timestamp, verify_receipt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How far a run's writes may go back in store time on PostgreSQL: a statement reads the clock
/// before it waits for the row lock, so a write may commit after one that read the clock a
/// little later. SQLite's store clock (`heart_clock`) never goes back, so there it is 0.
pub const CLOCK_SLACK_MS: i64 = 1000;

/// The statuses that hold a lease.
const HELD: [&str; 2] = ["leased", "running"];

/// A run row's lease columns at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseState {
    /// `status`.
    pub status: String,
    /// `lease_owner`.
    pub owner: Option<String>,
    /// `lease_expires_at`.
    pub expires_at: Option<Timestamp>,
    /// `fencing_epoch`.
    pub epoch: i64,
}

impl LeaseState {
    /// In a status that holds a lease.
    pub fn held(&self) -> bool {
        HELD.contains(&self.status.as_str())
    }

    /// Held with an expiry after `at`.
    fn live_at(&self, at: Timestamp) -> bool {
        self.held() && self.expires_at.is_some_and(|e| e > at)
    }

    fn same_lease(&self, other: &LeaseState) -> bool {
        self.held() && other.held() && self.owner == other.owner && self.epoch == other.epoch
    }
}

/// One `UPDATE` of a run row. Ids follow commit order for each run (row locks order the writes
/// of a row; across runs they may interleave).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transition {
    /// Commit order.
    pub id: i64,
    /// The run.
    pub run_id: String,
    /// The store clock of the writing statement (the new row's `updated_at`).
    pub at: Timestamp,
    /// The row before.
    pub old: LeaseState,
    /// The row after.
    pub new: LeaseState,
}

/// One delivery the receiving side accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delivery {
    /// Acceptance order.
    pub id: i64,
    /// The run whose lease fired it.
    pub run_id: String,
    /// The effect key.
    pub effect_key: String,
    /// The firing token's owner.
    pub owner: String,
    /// The firing token's epoch.
    pub epoch: i64,
    /// When it was accepted, by the receiving side's clock (recorded, not checked).
    pub at: Timestamp,
}

/// An effect intent after the final reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intent {
    /// The run.
    pub run_id: String,
    /// The effect key.
    pub effect_key: String,
    /// `intent`, `dispatched`, `committed` or `abandoned`.
    pub state: String,
    /// The epoch recorded at dispatch.
    pub fence_epoch: Option<i64>,
    /// The commit evidence.
    pub external_ref: Option<Value>,
}

/// A `heart_receipts` row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptRow {
    /// Insertion order.
    pub id: i64,
    /// The receipt as stored.
    pub receipt: Value,
    /// The row's columns disagree with the receipt.
    #[serde(default)]
    pub columns_differ: bool,
}

/// Everything the checker reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    /// Every run-row update, in commit order.
    pub transitions: Vec<Transition>,
    /// The receipts of the history's runs, in insertion order.
    pub receipts: Vec<ReceiptRow>,
    /// The accepted deliveries, in acceptance order.
    pub deliveries: Vec<Delivery>,
    /// The intents after the final reconcile.
    pub intents: Vec<Intent>,
    /// The run rows after the final sweep (each run once).
    pub runs: Vec<FinalRun>,
    /// Lease owners the harness killed (SIGKILL): a kill may lose the receipt of their last write.
    #[serde(default)]
    pub killed_owners: Vec<String>,
    /// `postgres` or `sqlite` (how far the store's clock may go back; unknown: PostgreSQL's slack).
    #[serde(default)]
    pub store: Option<String>,
}

/// A run row after the final sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinalRun {
    /// The run.
    pub id: String,
    /// Its lease columns.
    #[serde(flatten)]
    pub state: LeaseState,
}

/// The counts of a check, and one line per finding.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Leases that overlapped in store time, and renewals after expiry.
    pub exclusion_violations: u64,
    /// Epochs that fell, or new leases that did not raise them.
    pub epoch_regressions: u64,
    /// Deliveries of a key beyond its first.
    pub duplicate_effects: u64,
    /// Deliveries from a superseded or unknown epoch.
    pub stale_effects: u64,
    /// Committed intents without their delivery, deliveries without their commit.
    pub lost_evidence: u64,
    /// Receipts that do not verify or that the history contradicts.
    pub receipt_mismatches: u64,
    /// Runs held after the final sweep.
    pub unfinished_runs: u64,
    /// What was found, one line each (the first [`MAX_FINDINGS`]).
    pub findings: Vec<String>,
}

/// The most findings a verdict spells out (the counts go on).
pub const MAX_FINDINGS: usize = 50;

impl Verdict {
    /// Every violation count is 0.
    pub fn pass(&self) -> bool {
        self.counts().iter().all(|(_, n)| *n == 0)
    }

    /// The violation counts by name, in report order.
    pub fn counts(&self) -> [(&'static str, u64); 7] {
        [
            ("exclusion_violations", self.exclusion_violations),
            ("epoch_regressions", self.epoch_regressions),
            ("duplicate_effects", self.duplicate_effects),
            ("stale_effects", self.stale_effects),
            ("lost_evidence", self.lost_evidence),
            ("receipt_mismatches", self.receipt_mismatches),
            ("unfinished_runs", self.unfinished_runs),
        ]
    }

    fn found(&mut self, text: String) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(text);
        }
    }
}

fn iso(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "null".into(), Timestamp::to_iso)
}

/// Checks a history.
pub fn check(h: &History) -> Verdict {
    let mut v = Verdict::default();
    check_transitions(h, &mut v);
    check_deliveries(h, &mut v);
    check_intents(h, &mut v);
    check_receipts(h, &mut v);
    for run in h.runs.iter().filter(|r| r.state.held()) {
        v.unfinished_runs += 1;
        let owner = run.state.owner.as_deref().unwrap_or("nobody");
        v.found(format!("run {} is still {} by {owner} after the final sweep", run.id, run.state.status));
    }
    v
}

/// The transitions in commit order (a hand-made history file may list them in any order).
fn in_order(h: &History) -> Vec<&Transition> {
    let mut ts: Vec<&Transition> = h.transitions.iter().collect();
    ts.sort_by_key(|t| t.id);
    ts
}

fn check_transitions(h: &History, v: &mut Verdict) {
    let slack = if h.store.as_deref() == Some("sqlite") { 0 } else { CLOCK_SLACK_MS };
    let mut latest: BTreeMap<&str, Timestamp> = BTreeMap::new();
    for t in in_order(h) {
        let (old, new) = (&t.old, &t.new);
        let last = latest.entry(&t.run_id).or_insert(t.at);
        if t.at.0 + slack < last.0 {
            v.exclusion_violations += 1;
            v.found(format!(
                "run {}: a write at {} after one at {}: the store's clock went back",
                t.run_id, t.at, last
            ));
        }
        *last = (*last).max(t.at);
        if new.epoch < old.epoch {
            v.epoch_regressions += 1;
            v.found(format!("run {}: epoch fell from {} to {} at {}", t.run_id, old.epoch, new.epoch, t.at));
        }
        if !new.held() {
            continue;
        }
        if new.same_lease(old) {
            if new.expires_at != old.expires_at && !old.live_at(t.at) {
                v.exclusion_violations += 1;
                v.found(format!(
                    "run {}: {} renewed epoch {} at {}, after it expired at {}",
                    t.run_id,
                    new.owner.as_deref().unwrap_or("?"),
                    new.epoch,
                    t.at,
                    iso(old.expires_at)
                ));
            }
            continue;
        }
        // A new lease.
        if new.epoch <= old.epoch {
            v.epoch_regressions += 1;
            v.found(format!("run {}: a new lease at {} kept epoch {} (was {})", t.run_id, t.at, new.epoch, old.epoch));
        }
        if old.live_at(t.at) {
            v.exclusion_violations += 1;
            v.found(format!(
                "run {}: {} took epoch {} at {} while {} held epoch {} until {}",
                t.run_id,
                new.owner.as_deref().unwrap_or("?"),
                new.epoch,
                t.at,
                old.owner.as_deref().unwrap_or("?"),
                old.epoch,
                iso(old.expires_at)
            ));
        }
    }
}

fn check_deliveries(h: &History, v: &mut Verdict) {
    let leases: BTreeSet<(&str, &str, i64)> = h
        .transitions
        .iter()
        .filter(|t| t.new.held())
        .filter_map(|t| Some((t.run_id.as_str(), t.new.owner.as_deref()?, t.new.epoch)))
        .collect();
    let mut newest: BTreeMap<&str, i64> = BTreeMap::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut deliveries: Vec<&Delivery> = h.deliveries.iter().collect();
    deliveries.sort_by_key(|d| d.id);
    for d in deliveries {
        if !seen.insert(&d.effect_key) {
            v.duplicate_effects += 1;
            v.found(format!("effect {} delivered again (delivery {}, epoch {})", d.effect_key, d.id, d.epoch));
        }
        let top = newest.entry(&d.run_id).or_insert(d.epoch);
        if d.epoch < *top {
            v.stale_effects += 1;
            v.found(format!(
                "delivery {} of {} from epoch {} after epoch {} was accepted on run {}",
                d.id, d.effect_key, d.epoch, top, d.run_id
            ));
        } else {
            *top = d.epoch;
            if !leases.contains(&(d.run_id.as_str(), d.owner.as_str(), d.epoch)) {
                v.stale_effects += 1;
                v.found(format!(
                    "delivery {} of {} by {} with epoch {}: no such lease on run {}",
                    d.id, d.effect_key, d.owner, d.epoch, d.run_id
                ));
            }
        }
    }
}

fn check_intents(h: &History, v: &mut Verdict) {
    let by_id: BTreeMap<i64, &Delivery> = h.deliveries.iter().map(|d| (d.id, d)).collect();
    let committed: BTreeSet<&str> =
        h.intents.iter().filter(|i| i.state == "committed").map(|i| i.effect_key.as_str()).collect();
    for i in h.intents.iter().filter(|i| i.state == "committed") {
        let delivery = i.external_ref.as_ref().and_then(|r| r.get("delivery")).and_then(Value::as_i64);
        let backed = delivery
            .and_then(|id| by_id.get(&id))
            .is_some_and(|d| d.effect_key == i.effect_key && Some(d.epoch) == i.fence_epoch);
        if !backed {
            v.lost_evidence += 1;
            let evidence = i.external_ref.as_ref().map_or_else(|| "none".into(), Value::to_string);
            v.found(format!("intent {} is committed with evidence {evidence}: no delivery of it", i.effect_key));
        }
    }
    let delivered: BTreeSet<&str> = h.deliveries.iter().map(|d| d.effect_key.as_str()).collect();
    for key in delivered.difference(&committed) {
        v.lost_evidence += 1;
        v.found(format!("effect {key} was delivered but its intent is not committed"));
    }
}

fn text<'a>(r: &'a Value, k: &str) -> Option<&'a str> {
    r.get(k).and_then(Value::as_str)
}

fn receipt_expiry(r: &Value) -> Option<Timestamp> {
    text(r, "leaseExpiresAt").and_then(|t| Timestamp::parse_iso(t).ok())
}

fn check_receipts(h: &History, v: &mut Verdict) {
    let killed: BTreeSet<&str> = h.killed_owners.iter().map(String::as_str).collect();
    // The lease each receipt claims, and whether a transition backs it.
    let mut granted: BTreeSet<(&str, &str, Timestamp)> = BTreeSet::new();
    let mut ended: BTreeSet<(&str, &str)> = BTreeSet::new();
    // Each end of a lease by its time: was the lease still live then?
    let mut ended_at: BTreeMap<(&str, &str, Timestamp), bool> = BTreeMap::new();
    for t in &h.transitions {
        if let (true, Some(owner), Some(exp)) = (t.new.held(), t.new.owner.as_deref(), t.new.expires_at) {
            granted.insert((t.run_id.as_str(), owner, exp));
        }
        if let (true, false, Some(owner)) = (t.old.held(), t.new.held(), t.old.owner.as_deref()) {
            ended.insert((t.run_id.as_str(), owner));
            ended_at.insert((t.run_id.as_str(), owner, t.at), t.old.live_at(t.at));
        }
    }
    // The chains, as `verify-receipts --table` checks them (the digests are checked below).
    let entries: Vec<LogEntry> = h
        .receipts
        .iter()
        .map(|row| LogEntry { position: u64::try_from(row.id).unwrap_or(0), value: row.receipt.clone() })
        .collect();
    match verify_log(&entries, &VerifyKeys::none(), &LogExpectations::default()) {
        Ok(report) => {
            for f in report.findings.iter().filter(|f| !f.code.is_about_the_receipt()) {
                v.receipt_mismatches += 1;
                v.found(format!("receipt {}: {}: {}", f.position.unwrap_or(0), f.code, f.message));
            }
        }
        Err(e) => {
            v.receipt_mismatches += 1;
            v.found(format!("the receipts are not a log: {e}"));
        }
    }
    let mut last_grant: BTreeMap<&str, (&str, Option<Timestamp>)> = BTreeMap::new();
    for row in &h.receipts {
        let r = &row.receipt;
        if row.columns_differ || verify_receipt(r).is_err() {
            v.receipt_mismatches += 1;
            v.found(format!("receipt {} does not verify (or its columns differ from it)", row.id));
            continue;
        }
        let (Some(event), Some(run), Some(owner)) = (text(r, "event"), text(r, "runId"), text(r, "owner")) else {
            continue;
        };
        let backed = match event {
            "acquired" | "renewed" => {
                last_grant.insert(run, (owner, receipt_expiry(r)));
                receipt_expiry(r).is_some_and(|exp| granted.contains(&(run, owner, exp)))
            }
            "released" => {
                // A release is stamped with its statement's clock, like the write it made.
                let at = text(r, "at").and_then(|t| Timestamp::parse_iso(t).ok());
                if let Some(false) = at.and_then(|at| ended_at.get(&(run, owner, at))) {
                    v.exclusion_violations += 1;
                    v.found(format!("receipt {}: {owner} released run {run} after its lease expired", row.id));
                }
                ended.contains(&(run, owner))
            }
            _ => true,
        };
        if !backed {
            v.receipt_mismatches += 1;
            v.found(format!("receipt {} ({event} of run {run} by {owner}): no such write in the history", row.id));
        }
    }
    let mut last: BTreeMap<&str, &LeaseState> = BTreeMap::new();
    for t in in_order(h) {
        last.insert(&t.run_id, &t.new);
    }
    for run in &h.runs {
        if let Some(state) = last.get(run.id.as_str()).filter(|s| **s != &run.state) {
            v.receipt_mismatches += 1;
            v.found(format!("run {}: the final row is not the last write of the history ({state:?})", run.id));
        }
        if !run.state.held() {
            continue;
        }
        let owner = run.state.owner.as_deref().unwrap_or("");
        let matches = last_grant.get(run.id.as_str()) == Some(&(owner, run.state.expires_at));
        if !matches && !killed.contains(owner) {
            v.receipt_mismatches += 1;
            v.found(format!("run {} is held by {owner}, and no receipt says so", run.id));
        }
    }
}

#[cfg(test)]
mod tests {
    use heart_fleet_core::{HeartEvent, HeartReceipt};
    use serde_json::json;

    use super::*;

    fn ts(ms: i64) -> Timestamp {
        Timestamp(1_800_000_000_000 + ms)
    }

    fn state(status: &str, owner: Option<&str>, exp: Option<i64>, epoch: i64) -> LeaseState {
        LeaseState { status: status.into(), owner: owner.map(Into::into), expires_at: exp.map(ts), epoch }
    }

    fn ready(epoch: i64) -> LeaseState {
        state("ready", None, None, epoch)
    }

    fn leased(owner: &str, exp: i64, epoch: i64) -> LeaseState {
        state("leased", Some(owner), Some(exp), epoch)
    }

    fn receipt(id: i64, event: HeartEvent, owner: &str, exp: Option<i64>, at: i64) -> ReceiptRow {
        let r = HeartReceipt::new(event, "r1", owner, exp.map(ts), None, ts(at));
        ReceiptRow { id, receipt: serde_json::to_value(&r).unwrap(), columns_differ: false }
    }

    /// A clean history: a acquires (epoch 1), renews, delivers, releases; b acquires (epoch 2),
    /// delivers, and its expired lease is swept.
    fn clean() -> History {
        let mut h = History::default();
        let tr = |id, at, old, new| Transition { id, run_id: "r1".into(), at: ts(at), old, new };
        h.transitions = vec![
            tr(1, 0, ready(0), leased("a", 1000, 1)),
            tr(2, 500, leased("a", 1000, 1), leased("a", 1500, 1)),
            tr(3, 700, leased("a", 1500, 1), ready(1)),
            tr(4, 800, ready(1), leased("b", 1800, 2)),
            tr(5, 2000, leased("b", 1800, 2), ready(2)),
        ];
        h.receipts = vec![
            receipt(1, HeartEvent::Acquired, "a", Some(1000), 0),
            receipt(2, HeartEvent::Renewed, "a", Some(1500), 500),
            receipt(3, HeartEvent::Released, "a", None, 700),
            receipt(4, HeartEvent::Acquired, "b", Some(1800), 800),
            receipt(5, HeartEvent::Reclaimed, "b", Some(1800), 2000),
        ];
        let delivery = |id, key: &str, owner: &str, epoch, at| Delivery {
            id,
            run_id: "r1".into(),
            effect_key: key.into(),
            owner: owner.into(),
            epoch,
            at: ts(at),
        };
        h.deliveries = vec![delivery(1, "k1", "a", 1, 600), delivery(2, "k2", "b", 2, 900)];
        let intent = |key: &str, epoch, delivery| Intent {
            run_id: "r1".into(),
            effect_key: key.into(),
            state: "committed".into(),
            fence_epoch: Some(epoch),
            external_ref: Some(json!({ "delivery": delivery, "epoch": epoch })),
        };
        h.intents = vec![intent("k1", 1, 1), intent("k2", 2, 2)];
        h.runs = vec![FinalRun { id: "r1".into(), state: ready(2) }];
        h
    }

    fn only(v: &Verdict, name: &str, n: u64) {
        for (k, count) in v.counts() {
            assert_eq!(count, if k == name { n } else { 0 }, "{k} in {v:?}");
        }
        assert!(!v.pass());
        assert!(!v.findings.is_empty());
    }

    #[test]
    fn a_clean_history_passes() {
        let v = check(&clean());
        assert!(v.pass(), "{v:?}");
        assert!(v.findings.is_empty());
    }

    #[test]
    fn an_overlapping_lease_is_an_exclusion_violation() {
        let mut h = clean();
        // b takes the run at 800 while a's lease (renewed to 1500) is still live.
        h.transitions[2] = Transition {
            id: 3,
            run_id: "r1".into(),
            at: ts(800),
            old: leased("a", 1500, 1),
            new: leased("b", 1800, 2),
        };
        h.transitions.remove(3);
        h.receipts.remove(2);
        only(&check(&h), "exclusion_violations", 1);
    }

    #[test]
    fn a_renewal_after_the_expiry_is_an_exclusion_violation() {
        let mut h = clean();
        h.transitions[1].at = ts(1200);
        only(&check(&h), "exclusion_violations", 1);
    }

    #[test]
    fn a_release_after_the_expiry_is_an_exclusion_violation() {
        let mut h = clean();
        // a's lease (renewed to 1500) released at 1600, and its receipt says so.
        h.transitions[2].at = ts(1600);
        h.receipts[2] = receipt(3, HeartEvent::Released, "a", None, 1600);
        h.transitions[3].at = ts(1700);
        h.deliveries[1].at = ts(1750);
        only(&check(&h), "exclusion_violations", 1);
        // The same end of the lease, by the sweep (no release receipt): no violation.
        h.receipts.remove(2);
        assert!(check(&h).pass(), "{:?}", check(&h));
    }

    #[test]
    fn a_store_clock_that_goes_back_is_an_exclusion_violation() {
        let mut h = clean();
        // b's acquire stamped an hour before a's release: two writers with two clocks.
        h.transitions[3].at = ts(800 - 3_600_000);
        only(&check(&h), "exclusion_violations", 1);
        // Within the slack, a write may follow one that read the clock a little later; on
        // SQLite, whose store clock never goes back, by no slack at all.
        let mut h = clean();
        h.transitions[3].at = ts(700 - CLOCK_SLACK_MS);
        assert!(check(&h).pass(), "{:?}", check(&h));
        h.store = Some("sqlite".into());
        only(&check(&h), "exclusion_violations", 1);
        // Listed out of order, a history is checked in commit order.
        let mut h = clean();
        h.transitions.reverse();
        assert!(check(&h).pass(), "{:?}", check(&h));
    }

    #[test]
    fn a_falling_or_unraised_epoch_is_a_regression() {
        let mut h = clean();
        h.transitions[3].new.epoch = 1;
        h.transitions[4].old.epoch = 1;
        h.deliveries[1].epoch = 1;
        h.intents[1].fence_epoch = Some(1);
        h.intents[1].external_ref = Some(json!({ "delivery": 2, "epoch": 1 }));
        // b's epoch-1 delivery now also follows a's at the same epoch: not stale, a's epoch is 1 too,
        // but (r1, b, 1) is a lease of the history, so only the regression counts.
        only(&check(&h), "epoch_regressions", 1);
        let mut h = clean();
        h.transitions[4].new.epoch = 0;
        h.runs[0].state.epoch = 0;
        only(&check(&h), "epoch_regressions", 1);
    }

    #[test]
    fn a_second_delivery_of_a_key_is_a_duplicate() {
        let mut h = clean();
        h.deliveries.push(Delivery { id: 3, effect_key: "k2".into(), ..h.deliveries[1].clone() });
        only(&check(&h), "duplicate_effects", 1);
    }

    #[test]
    fn a_delivery_from_a_superseded_or_unknown_epoch_is_stale() {
        let mut h = clean();
        h.deliveries.push(Delivery {
            id: 3,
            effect_key: "k3".into(),
            owner: "a".into(),
            epoch: 1,
            ..h.deliveries[1].clone()
        });
        h.intents.push(Intent {
            effect_key: "k3".into(),
            fence_epoch: Some(1),
            external_ref: Some(json!({ "delivery": 3 })),
            ..h.intents[0].clone()
        });
        only(&check(&h), "stale_effects", 1);
        let mut h = clean();
        h.deliveries[1].owner = "mallory".into();
        only(&check(&h), "stale_effects", 1);
    }

    #[test]
    fn a_commit_without_its_delivery_and_a_delivery_without_its_commit_are_lost_evidence() {
        let mut h = clean();
        h.intents[0].external_ref = None;
        only(&check(&h), "lost_evidence", 1);
        let mut h = clean();
        h.intents[0].external_ref = Some(json!({ "delivery": 2 }));
        only(&check(&h), "lost_evidence", 1);
        let mut h = clean();
        h.intents[1].state = "dispatched".into();
        only(&check(&h), "lost_evidence", 1);
    }

    #[test]
    fn receipts_that_do_not_verify_or_that_no_write_backs_are_mismatches() {
        let mut h = clean();
        h.receipts[1].receipt["owner"] = json!("b");
        only(&check(&h), "receipt_mismatches", 1);
        let mut h = clean();
        h.receipts[1].columns_differ = true;
        only(&check(&h), "receipt_mismatches", 1);
        let mut h = clean();
        h.receipts.push(receipt(6, HeartEvent::Renewed, "b", Some(9000), 2100));
        only(&check(&h), "receipt_mismatches", 1);
        let mut h = clean();
        h.runs[0].state.epoch = 7;
        only(&check(&h), "receipt_mismatches", 1);
    }

    #[test]
    fn a_break_in_a_runs_receipt_chain_is_a_mismatch() {
        // The clean history's receipts chained, as every runtime's sink writes them.
        let chained = || {
            let mut h = clean();
            let mut heads = heart_fleet_core::chain::ChainHeads::new();
            let signer = heart_fleet_core::chain::Signer::unsigned();
            for row in &mut h.receipts {
                let r: HeartReceipt = serde_json::from_value(row.receipt.clone()).unwrap();
                row.receipt = heart_fleet_core::chain::chained_json(&r, &heads.append(&signer, &r));
            }
            h
        };
        let v = check(&chained());
        assert!(v.pass(), "{v:?}");
        // A receipt whose write happened but whose row is gone from the middle of the chain:
        // its write is still backed by the transitions, only the chain shows it.
        let mut h = chained();
        h.receipts.remove(1);
        only(&check(&h), "receipt_mismatches", 1);
        // Two receipts claiming one position.
        let mut h = chained();
        let mut copy = h.receipts[2].clone();
        copy.id = 6;
        h.receipts.push(copy);
        only(&check(&h), "receipt_mismatches", 1);
    }

    #[test]
    fn a_run_held_at_the_end_is_unfinished_and_needs_its_receipt_unless_its_owner_was_killed() {
        let mut h = clean();
        h.transitions.pop();
        h.receipts.pop();
        h.runs[0].state = leased("b", 1800, 2);
        only(&check(&h), "unfinished_runs", 1);
        // The receipt of b's acquire lost: excused only when b was killed.
        h.receipts.pop();
        let v = check(&h);
        assert_eq!((v.unfinished_runs, v.receipt_mismatches), (1, 1), "{v:?}");
        h.killed_owners = vec!["b".into()];
        only(&check(&h), "unfinished_runs", 1);
    }

    #[test]
    fn the_history_file_round_trips_and_refuses_unknown_fields() {
        let h = clean();
        let text = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<History>(&text).unwrap(), h);
        let mut v: Value = serde_json::from_str(&text).unwrap();
        v["transitions"][0]["extra"] = json!(1);
        assert!(serde_json::from_value::<History>(v).is_err());
    }
}
