//! The simulators: fleets run on purpose against faults, judged by bookkeeping of their own
//! rather than by the library's answers. They stand apart from the commands (the `simulate`
//! and `worker` commands only configure and print them).
//!
//! * [`in_process`]: `simulate`, a fleet on the core's memory store, step by step on a
//!   virtual clock, with crashes, pauses, a sweeper and a reconciler.
//! * [`processes`]: `simulate --processes N`, real worker processes on one SQL store, some
//!   killed with SIGKILL, checked by journals, receipts and a receiving system's table.
//!
//! What both share is here: the broken stores that show a report is not vacuous
//! ([`Fault`], [`FaultyStore`]), the seven safety counts ([`SafetyCounts`]) and the
//! [`Verdict`]. (`fleet-chaos`, the mixed-runtime harness, is [`crate::chaos`].)

pub mod in_process;
pub mod processes;

use heart_fleet_core::request::{StoreAnswer, StoreReply, StoreRequest};
use heart_fleet_core::{Counter, HeartMetrics, IntentState, LeaseStore, StoreError};
use serde::Serialize;

/// The seven safety counts of a simulation report, each zero in a safe run. Flattened into
/// the reports, so the JSON keeps them as top-level keys in this order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SafetyCounts {
    /// Overlapping leases on a run, and effects fired inside another holder's lease.
    pub exclusion_violations: u64,
    /// Effects that fired more than once (each extra fire counts).
    pub duplicate_effects: u64,
    /// Effects fired by a worker whose token was not the run's live lease at that moment.
    pub stale_commits: u64,
    /// Runs not completed at the end.
    pub unfinished_runs: u64,
    /// Effects that never fired.
    pub missing_effects: u64,
    /// Renews or releases accepted after the lease had ended.
    pub zombie_writes: u64,
    /// Receipts that do not verify, and effects without exactly one `effect_committed` receipt.
    pub receipt_mismatches: u64,
}

impl SafetyCounts {
    /// The counts by name, in report order.
    pub fn named(&self) -> [(&'static str, u64); 7] {
        [
            ("exclusion_violations", self.exclusion_violations),
            ("duplicate_effects", self.duplicate_effects),
            ("stale_commits", self.stale_commits),
            ("unfinished_runs", self.unfinished_runs),
            ("missing_effects", self.missing_effects),
            ("zombie_writes", self.zombie_writes),
            ("receipt_mismatches", self.receipt_mismatches),
        ]
    }

    /// Whether every count is zero.
    pub fn all_zero(&self) -> bool {
        self.named().iter().all(|(_, n)| *n == 0)
    }

    /// The `safety:` block of a report for people: one count per line.
    pub fn write_human(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(out, "safety:")?;
        for (name, n) in self.named() {
            writeln!(out, "  {name:<22} {n}")?;
        }
        Ok(())
    }
}

/// What a simulation proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every safety count is 0 (exit 0).
    Safe,
    /// A safety count is not 0 (exit 1).
    Unsafe,
    /// `simulate --processes` reached its `--max-seconds` bound first; no safety count is
    /// non-zero but those its unfinished runs explain (exit 3): it proved nothing either way.
    DidNotFinish,
}

impl Verdict {
    /// The exit status of the verdict.
    pub fn exit(self) -> crate::Exit {
        match self {
            Verdict::Safe => crate::Exit::Success,
            Verdict::Unsafe => crate::Exit::Failure,
            Verdict::DidNotFinish => crate::Exit::Unfinished,
        }
    }
}

/// `name=value` for the 13 counters, in the reference's order.
pub fn metrics_text(m: &HeartMetrics) -> String {
    Counter::ALL.iter().map(|c| format!("{}={}", c.name(), m.get(*c))).collect::<Vec<_>>().join(" ")
}

/// A deliberately broken store (`--inject-fault`), to show that the safety report is
/// not vacuous: with one of these the report must come out unsafe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// A correct store.
    #[default]
    None,
    /// Every run write applies whatever its condition: no fencing at all.
    NoFencing,
    /// Every intent claim succeeds and every intent write applies: no durable effect ledger.
    NoLedger,
}

impl Fault {
    /// The command-line name.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::NoFencing => "no-fencing",
            Fault::NoLedger => "no-ledger",
        }
    }

    /// The request as the broken store sees it.
    pub fn corrupt(self, req: StoreRequest) -> StoreRequest {
        use heart_fleet_core::request::Cond;
        match (self, req) {
            (Fault::NoFencing, StoreRequest::UpdateRun { run_id, set, want_before, want_after, .. }) => {
                StoreRequest::UpdateRun { run_id, when: Cond::True, set, want_before, want_after }
            }
            (Fault::NoLedger, StoreRequest::UpdateIntent { run_id, effect_key, set, log, .. }) => {
                StoreRequest::UpdateIntent { run_id, effect_key, when: Cond::True, set, log }
            }
            (_, req) => req,
        }
    }
}

impl Fault {
    /// The answer as the broken store gives it: without a ledger, every claim wins.
    pub fn corrupt_answer(self, answer: &mut StoreAnswer) {
        if let (Fault::NoLedger, StoreReply::Claim { claimed, intent }) = (self, &mut answer.reply) {
            *claimed = true;
            intent.state = IntentState::Intent;
        }
    }
}

/// Any store broken on purpose by a [`Fault`] (the same faults as the in-process memory
/// store's): `simulate --processes --inject-fault` runs every worker and the sweeper over one.
#[derive(Debug, Clone)]
pub struct FaultyStore<S> {
    /// The real store.
    pub inner: S,
    /// What is broken (`Fault::None`: nothing).
    pub fault: Fault,
}

impl<S: LeaseStore> LeaseStore for FaultyStore<S> {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let mut answer = self.inner.execute(self.fault.corrupt(req))?;
        self.fault.corrupt_answer(&mut answer);
        Ok(answer)
    }

    fn settle(&mut self) -> Result<(), StoreError> {
        self.inner.settle()
    }

    fn abandon(&mut self) {
        self.inner.abandon();
    }
}
