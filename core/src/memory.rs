//! The deterministic memory store: an injectable clock, an injectable id source, and
//! injectable failures, evaluating every request with the core's own evaluator.

use std::collections::{BTreeMap, HashMap};

use crate::driver::LeaseStore;
use crate::error::StoreError;
use crate::model::{DispatchLogEntry, InstanceRow, IntentRow, IntentState, RunRow};
use crate::request::{
    Assign, Cond, Expr, Lookup, Record, RunCol, RunOrder, RunWriteRef, StoreAnswer, StoreReply, StoreRequest, Val,
    apply_update,
};
use crate::time::Timestamp;

/// Runs, intents, the dispatch log and instances in memory. Single-threaded by design:
/// each request applies atomically because nothing else runs during it.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    now: Timestamp,
    runs: Vec<RunRow>,
    index: HashMap<String, usize>,
    keys_seen: std::collections::HashSet<String>,
    intents: BTreeMap<(String, String), IntentRow>,
    log: Vec<DispatchLogEntry>,
    instances: BTreeMap<String, InstanceRow>,
    next_id: u64,
    failures: Vec<(String, u32, u32)>,
    requests: u64,
    /// Buffers a run write reuses, so writing in place allocates nothing: the values of its
    /// computed assignments and the row before it.
    assigned: Vec<Val>,
    before: Option<RunRow>,
}

struct Tables<'a> {
    runs: &'a [RunRow],
    index: &'a HashMap<String, usize>,
    instances: &'a BTreeMap<String, InstanceRow>,
}

impl Lookup for Tables<'_> {
    fn run(&self, run_id: &str) -> Option<&RunRow> {
        self.index.get(run_id).and_then(|i| self.runs.get(*i))
    }
    fn instance(&self, instance_id: &str) -> Option<&InstanceRow> {
        self.instances.get(instance_id)
    }
}

/// `run` after the conditional write `when` / `set` at `now`, as this store writes a run,
/// decided on that row alone (no other table: a condition on another table's rows does not
/// hold); `None` when the condition does not hold. For stores that decide a write outside
/// the database and write it back with a compare-and-set (`bridge::reference`).
pub(crate) fn written_run(
    run: &RunRow,
    when: &Cond<RunCol>,
    set: &[Assign<RunCol>],
    now: Timestamp,
) -> Result<Option<RunRow>, String> {
    let (index, instances) = (HashMap::new(), BTreeMap::new());
    let tables = Tables { runs: &[], index: &index, instances: &instances };
    if !when.eval(run, now, &tables) {
        return Ok(None);
    }
    let mut after = run.clone();
    // Every assignment is evaluated against the row before the write.
    for (c, e) in set {
        let value = match e {
            Expr::Val(literal) => literal.clone(),
            _ => {
                let mut value = Val::Null;
                e.eval_into(run, now, &tables, &mut value)?;
                value
            }
        };
        run.check(*c, &value)?;
        after.set(*c, value)?;
    }
    Ok(Some(after))
}

impl MemoryStore {
    /// A store whose clock starts at `now` (the reference defaults to the Unix epoch).
    pub fn new(now: Timestamp) -> MemoryStore {
        MemoryStore { now, ..MemoryStore::default() }
    }

    /// The clock.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Sets the clock.
    pub fn set_now(&mut self, now: Timestamp) {
        self.now = now;
    }

    /// Moves the clock by `ms` (may be negative: clock jumps are a test input).
    pub fn advance(&mut self, ms: i64) {
        self.now = Timestamp(self.now.0.saturating_add(ms));
    }

    /// Inserts a run as the reference's `insert` does: the idempotency key must be new
    /// (keys are never forgotten) and both timestamps are set to the clock.
    pub fn insert(&mut self, mut run: RunRow) -> Result<(), StoreError> {
        if !self.keys_seen.insert(run.idempotency_key.clone()) {
            return Err(StoreError(format!("Idempotency key collision: {}", run.idempotency_key)));
        }
        if self.index.contains_key(&run.id) {
            return Err(StoreError(format!("duplicate run id: {}", run.id)));
        }
        run.created_at = self.now;
        run.updated_at = self.now;
        self.index.insert(run.id.clone(), self.runs.len());
        self.runs.push(run);
        Ok(())
    }

    /// Inserts a run exactly as given, timestamps included (the store suite seeds this way).
    pub fn insert_exact(&mut self, run: RunRow) -> Result<(), StoreError> {
        let (created, updated) = (run.created_at, run.updated_at);
        let id = run.id.clone();
        self.insert(run)?;
        if let Some(row) = self.index.get(&id).and_then(|i| self.runs.get_mut(*i)) {
            row.created_at = created;
            row.updated_at = updated;
        }
        Ok(())
    }

    /// Inserts an instance row as given (tests seed liveness this way).
    pub fn insert_instance(&mut self, row: InstanceRow) {
        self.instances.insert(row.instance_id.clone(), row);
    }

    /// Inserts an intent row as given (tests seed crash states this way).
    pub fn insert_intent(&mut self, row: IntentRow) {
        self.intents.insert((row.run_id.clone(), row.effect_key.clone()), row);
    }

    /// A run.
    pub fn run(&self, run_id: &str) -> Option<&RunRow> {
        self.index.get(run_id).and_then(|i| self.runs.get(*i))
    }

    /// Every run, in insertion order.
    pub fn runs(&self) -> &[RunRow] {
        &self.runs
    }

    /// Every intent, by key.
    pub fn intents(&self) -> impl Iterator<Item = &IntentRow> {
        self.intents.values()
    }

    /// The dispatch log.
    pub fn dispatch_log(&self) -> &[DispatchLogEntry] {
        &self.log
    }

    /// Every instance, by id.
    pub fn instances(&self) -> impl Iterator<Item = &InstanceRow> {
        self.instances.values()
    }

    /// Makes the next `times` requests whose op name (`update_run`, `claim_intent`, …, or
    /// `*` for any) matches fail with a store error, changing nothing.
    pub fn fail_next(&mut self, op: &str, times: u32) {
        self.fail_after(op, 0, times);
    }

    /// Like [`MemoryStore::fail_next`], but lets `skip` matching requests through first
    /// (to fail the second write of a multi-write operation).
    pub fn fail_after(&mut self, op: &str, skip: u32, times: u32) {
        self.failures.push((op.to_owned(), skip, times));
    }

    /// How many requests the store has answered (or failed).
    pub fn request_count(&self) -> u64 {
        self.requests
    }

    fn fresh_uuid(&mut self) -> String {
        self.next_id += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.next_id)
    }

    fn injected_failure(&mut self, op: &str) -> bool {
        for (name, skip, left) in &mut self.failures {
            if *left > 0 && (name == op || name == "*") {
                if *skip > 0 {
                    *skip -= 1;
                    return false;
                }
                *left -= 1;
                return true;
            }
        }
        false
    }

    fn tables(&self) -> Tables<'_> {
        Tables { runs: &self.runs, index: &self.index, instances: &self.instances }
    }

    /// One conditional run write: the index of the row written, or `None` on a miss. With
    /// `want_before`, a hit leaves a copy of the row before the write in `self.before`.
    /// Everything is evaluated and checked before anything is written, so an error changes
    /// nothing.
    fn write_run(
        &mut self,
        run_id: &str,
        when: &Cond<RunCol>,
        set: &[Assign<RunCol>],
        want_before: bool,
    ) -> Result<Option<usize>, String> {
        let now = self.now;
        let Some(&i) = self.index.get(run_id) else {
            return Ok(None);
        };
        let tables = Tables { runs: &self.runs, index: &self.index, instances: &self.instances };
        let Some(current) = self.runs.get(i) else {
            return Err("run index out of sync".to_owned());
        };
        if !when.eval(current, now, &tables) {
            return Ok(None);
        }
        // Assignments are evaluated against the row before the write; a literal is applied
        // from the request as it is, the others' values are kept here in order.
        self.assigned.clear();
        for (_, e) in set.iter().filter(|(_, e)| !matches!(e, Expr::Val(_))) {
            self.assigned.push(Val::Null);
            if let Some(value) = self.assigned.last_mut() {
                e.eval_into(current, now, &tables, value)?;
            }
        }
        let mut computed = self.assigned.iter();
        for (c, e) in set {
            let value = match e {
                Expr::Val(literal) => Some(literal),
                _ => computed.next(),
            };
            current.check(*c, value.ok_or(EVALUATED)?)?;
        }
        if want_before {
            match &mut self.before {
                Some(copy) => copy.clone_from(current),
                None => self.before = Some(current.clone()),
            }
        }
        let Some(slot) = self.runs.get_mut(i) else {
            return Err("run index out of sync".to_owned());
        };
        let mut computed = self.assigned.drain(..);
        for (c, e) in set {
            match e {
                Expr::Val(literal) => slot.set_from(*c, literal)?,
                _ => slot.set(*c, computed.next().ok_or(EVALUATED)?)?,
            }
        }
        Ok(Some(i))
    }

    /// Counts a request and reports an injected failure for it.
    fn admit(&mut self, req: &StoreRequest) -> Result<(), StoreError> {
        self.requests += 1;
        if self.injected_failure(op_name(req)) {
            return Err(StoreError(format!("injected failure on {}", op_name(req))));
        }
        Ok(())
    }

    /// The reply to an `update_run`: whether it hit when the request wants neither row, else
    /// the rows it asked for.
    fn update_run_reply(
        &mut self,
        run_id: &str,
        when: &Cond<RunCol>,
        set: &[Assign<RunCol>],
        want_before: bool,
        want_after: bool,
    ) -> Result<StoreReply, String> {
        if !want_before && !want_after {
            return Ok(StoreReply::RunHit { hit: self.write_run(run_id, when, set, false)?.is_some() });
        }
        Ok(match self.write_run(run_id, when, set, want_before)? {
            Some(i) => StoreReply::RunWrite {
                before: if want_before { self.before.take() } else { None },
                after: self.runs.get(i).cloned(),
            },
            None => StoreReply::RunWrite { before: None, after: None },
        })
    }

    /// [`LeaseStore::execute`] of a borrowed request: a run write (the lease cycle's every
    /// request) is answered without copying the request; any other is copied and executed.
    pub fn execute_borrowed(&mut self, req: &StoreRequest) -> Result<StoreAnswer, StoreError> {
        let StoreRequest::UpdateRun { run_id, when, set, want_before, want_after } = req else {
            return self.execute(req.clone());
        };
        self.admit(req)?;
        let now = self.now;
        let reply = self.update_run_reply(run_id, when, set, *want_before, *want_after).map_err(store_error)?;
        Ok(StoreAnswer { now, reply })
    }

    fn answer(&mut self, req: StoreRequest) -> Result<StoreReply, String> {
        let now = self.now;
        Ok(match req {
            StoreRequest::Now => StoreReply::Now,
            StoreRequest::ReadRun { run_id } => StoreReply::Run { run: self.run(&run_id).cloned() },
            StoreRequest::UpdateRun { run_id, when, set, want_before, want_after } => {
                self.update_run_reply(&run_id, &when, &set, want_before, want_after)?
            }
            StoreRequest::ScanRuns { when, order, limit } => {
                let t = self.tables();
                let mut runs: Vec<RunRow> = self.runs.iter().filter(|r| when.eval(*r, now, &t)).cloned().collect();
                match order {
                    RunOrder::ExpiresAt => {
                        runs.sort_by(|a, b| (a.lease_expires_at, &a.id).cmp(&(b.lease_expires_at, &b.id)))
                    }
                    RunOrder::UpdatedAtDesc => {
                        runs.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)))
                    }
                }
                runs.truncate(limit as usize);
                StoreReply::Runs { runs }
            }
            StoreRequest::EnsureRun(new) => {
                if let Some(run) = self.runs.iter().find(|r| r.idempotency_key == new.idempotency_key) {
                    return Ok(StoreReply::Ensured { run: run.clone(), created: false });
                }
                let id = self.fresh_uuid();
                let mut run = RunRow::ready(id, new.idempotency_key, now);
                run.assignment_id = self.fresh_uuid();
                run.objective = new.objective;
                run.created_by = new.created_by;
                self.insert(run.clone()).map_err(|e| e.0)?;
                StoreReply::Ensured { run, created: true }
            }
            StoreRequest::ClaimIntent(new) => {
                let key = (new.run_id.clone(), new.effect_key.clone());
                let (claimed, outcome, detail) = match self.intents.get(&key) {
                    Some(_) => (false, "deduped", None),
                    None => (true, "claimed", Some(serde_json::json!({ "channel": new.channel }))),
                };
                if claimed {
                    let row = IntentRow {
                        run_id: new.run_id.clone(),
                        effect_key: new.effect_key.clone(),
                        state: IntentState::Intent,
                        channel: new.channel,
                        payload_digest: new.payload_digest,
                        fence_owner: None,
                        fence_expires_at: None,
                        fence_epoch: None,
                        external_ref: None,
                        attempts: 0,
                        last_error: None,
                        created_at: now,
                        committed_at: None,
                    };
                    self.intents.insert(key.clone(), row);
                }
                self.log.push(DispatchLogEntry {
                    run_id: key.0.clone(),
                    effect_key: key.1.clone(),
                    attempt: 0,
                    outcome: outcome.into(),
                    at: Some(now),
                    detail,
                });
                let intent = self.intents.get(&key).cloned().ok_or("intent vanished")?;
                StoreReply::Claim { intent, claimed }
            }
            StoreRequest::UpdateIntent { run_id, effect_key, when, set, log } => {
                let key = (run_id, effect_key);
                let Some(row) = self.intents.get(&key) else {
                    return Ok(StoreReply::Intent { intent: None });
                };
                let next = apply_update(row, &when, &set, now, &self.tables())?;
                if let Some(row) = &next {
                    self.intents.insert(key, row.clone());
                    if let Some(mut entry) = log {
                        entry.at = Some(now);
                        self.log.push(entry);
                    }
                }
                StoreReply::Intent { intent: next }
            }
            StoreRequest::ScanIntents { when, limit } => {
                let t = self.tables();
                let mut intents: Vec<IntentRow> =
                    self.intents.values().filter(|r| when.eval(*r, now, &t)).cloned().collect();
                intents.sort_by(|a, b| {
                    (a.fence_expires_at, &a.run_id, &a.effect_key).cmp(&(b.fence_expires_at, &b.run_id, &b.effect_key))
                });
                intents.truncate(limit as usize);
                StoreReply::Intents { intents }
            }
            StoreRequest::ReadLog { run_id, effect_key } => StoreReply::Log {
                entries: self
                    .log
                    .iter()
                    .filter(|e| e.run_id == run_id && e.effect_key == effect_key)
                    .cloned()
                    .collect(),
            },
            StoreRequest::UpsertInstance { instance_id, hostname, pid, metadata } => {
                let row = InstanceRow { hostname, pid, metadata, ..InstanceRow::registered(instance_id.clone(), now) };
                self.instances.insert(instance_id, row.clone());
                StoreReply::Instances { instances: vec![row] }
            }
            StoreRequest::UpdateInstances { when, set } => {
                let t = self.tables();
                let mut written = Vec::new();
                for row in self.instances.values() {
                    if let Some(next) = apply_update(row, &when, &set, now, &t)? {
                        written.push(next);
                    }
                }
                for row in &written {
                    self.instances.insert(row.instance_id.clone(), row.clone());
                }
                StoreReply::Instances { instances: written }
            }
            StoreRequest::ScanInstances { when } => {
                let t = self.tables();
                StoreReply::Instances {
                    instances: self.instances.values().filter(|r| when.eval(*r, now, &t)).cloned().collect(),
                }
            }
        })
    }
}

/// The op name of a request, as used by [`MemoryStore::fail_next`] and in scenarios.
pub fn op_name(req: &StoreRequest) -> &'static str {
    match req {
        StoreRequest::Now => "now",
        StoreRequest::ReadRun { .. } => "read_run",
        StoreRequest::UpdateRun { .. } => "update_run",
        StoreRequest::ScanRuns { .. } => "scan_runs",
        StoreRequest::EnsureRun(_) => "ensure_run",
        StoreRequest::ClaimIntent(_) => "claim_intent",
        StoreRequest::UpdateIntent { .. } => "update_intent",
        StoreRequest::ScanIntents { .. } => "scan_intents",
        StoreRequest::ReadLog { .. } => "read_log",
        StoreRequest::UpsertInstance { .. } => "upsert_instance",
        StoreRequest::UpdateInstances { .. } => "update_instances",
        StoreRequest::ScanInstances { .. } => "scan_instances",
    }
}

impl LeaseStore for MemoryStore {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        self.admit(&req)?;
        let now = self.now;
        // `answer` evaluates everything before it mutates, so an error changes nothing.
        let reply = self.answer(req).map_err(store_error)?;
        Ok(StoreAnswer { now, reply })
    }

    fn write_run_in_place(&mut self, req: &StoreRequest) -> Option<Result<RunWriteRef<'_>, StoreError>> {
        // The rows are lent, not copied: a request that does not want the row after the
        // write costs nothing more for having it.
        let StoreRequest::UpdateRun { run_id, when, set, want_before, .. } = req else {
            return None;
        };
        let now = self.now;
        let written =
            self.admit(req).and_then(|()| self.write_run(run_id, when, set, *want_before).map_err(store_error));
        Some(written.map(|hit| match hit {
            Some(i) => RunWriteRef {
                now,
                before: if *want_before { self.before.as_ref() } else { None },
                after: self.runs.get(i),
            },
            None => RunWriteRef { now, before: None, after: None },
        }))
    }
}

/// `write_run` evaluates every computed assignment before it reads their values.
const EVALUATED: &str = "assignment read before it was evaluated";

fn store_error(e: String) -> StoreError {
    StoreError(format!("memory store: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RunStatus;
    use crate::request::{Expr, held};

    fn seeded() -> MemoryStore {
        let t0 = Timestamp(1_785_369_600_000);
        let mut store = MemoryStore::new(t0);
        store.insert(RunRow::ready("r1", "heart:resource:1", t0)).unwrap();
        let mut leased = RunRow::ready("r2", "job:2", t0);
        leased.status = RunStatus::Leased;
        leased.lease_owner = Some("w".into());
        leased.lease_expires_at = Some(Timestamp(t0.0 + 5_000));
        leased.fencing_epoch = 4;
        store.insert(leased).unwrap();
        store
    }

    /// Run writes of every kind of assignment, good and bad, on a ready run, a held one and
    /// a missing one, with and without the row before.
    fn requests() -> Vec<StoreRequest> {
        let text = |s: &str| Expr::Val(Val::Text(s.into()));
        let sets: Vec<Vec<Assign<RunCol>>> = vec![
            vec![(RunCol::UpdatedAt, Expr::Now)],
            vec![
                (RunCol::LeaseOwner, text("v")),
                (RunCol::LeaseExpiresAt, Expr::NowPlus(60_000)),
                (RunCol::Status, text("leased")),
                (RunCol::FencingEpoch, Expr::Add(RunCol::FencingEpoch, 1)),
                (
                    RunCol::Retries,
                    Expr::Case(
                        Box::new(Cond::Eq(RunCol::Status, Val::Text("ready".into()))),
                        Box::new(Expr::Add(RunCol::Retries, 0)),
                        Box::new(Expr::Add(RunCol::Retries, 1)),
                    ),
                ),
            ],
            vec![(RunCol::Status, text("ready")), (RunCol::LeaseOwner, Expr::Val(Val::Null))],
            vec![(RunCol::Status, Expr::Val(Val::Int(3)))],
            vec![(RunCol::Status, text("bogus"))],
            vec![(RunCol::Id, text("x"))],
            vec![(RunCol::Retries, Expr::Add(RunCol::Status, 1))],
            vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(i64::MAX))],
            vec![(RunCol::UpdatedAt, Expr::Val(Val::Null))],
            vec![(RunCol::Status, text("failed")), (RunCol::Retries, text("no"))],
            vec![],
        ];
        let mut requests = Vec::new();
        for run_id in ["r1", "r2", "missing"] {
            for when in [Cond::True, held()] {
                for set in &sets {
                    for want_before in [false, true] {
                        requests.push(StoreRequest::UpdateRun {
                            run_id: run_id.into(),
                            when: when.clone(),
                            set: set.clone(),
                            want_before,
                            want_after: true,
                        });
                    }
                }
            }
        }
        requests
    }

    fn lent_as_owned(lent: Result<RunWriteRef<'_>, StoreError>) -> Result<StoreAnswer, StoreError> {
        lent.map(|w| StoreAnswer {
            now: w.now,
            reply: StoreReply::RunWrite { before: w.before.cloned(), after: w.after.cloned() },
        })
    }

    #[test]
    fn a_borrowed_request_is_answered_as_execute_answers_it() {
        let others = [StoreRequest::ReadRun { run_id: "r1".into() }, StoreRequest::Now];
        for fail in [None, Some("update_run"), Some("*")] {
            for req in requests().into_iter().chain(others.clone()) {
                let (mut owned, mut borrowed) = (seeded(), seeded());
                if let Some(op) = fail {
                    owned.fail_next(op, 1);
                    borrowed.fail_next(op, 1);
                }
                assert_eq!(borrowed.execute_borrowed(&req), owned.execute(req.clone()), "{req:?}");
                assert_eq!(borrowed.runs(), owned.runs());
                assert_eq!(borrowed.request_count(), owned.request_count());
            }
        }
    }

    #[test]
    fn a_run_written_in_place_is_answered_as_execute_answers_it() {
        for fail in [None, Some("update_run"), Some("*")] {
            for req in requests() {
                let (mut owned, mut lent) = (seeded(), seeded());
                if let Some(op) = fail {
                    owned.fail_next(op, 1);
                    lent.fail_next(op, 1);
                }
                let want = owned.execute(req.clone());
                assert_eq!(lent.write_run_in_place(&req).map(lent_as_owned), Some(want), "{req:?}");
                assert_eq!(lent.runs(), owned.runs());
                assert_eq!(lent.request_count(), owned.request_count());
            }
        }
        // One store through every request in turn: the buffers it reuses carry nothing over.
        let (mut owned, mut lent) = (seeded(), seeded());
        for req in requests().into_iter().cycle().take(400) {
            let want = owned.execute(req.clone());
            assert_eq!(lent.write_run_in_place(&req).map(lent_as_owned), Some(want), "{req:?}");
            assert_eq!(lent.runs(), owned.runs());
            owned.advance(7);
            lent.advance(7);
        }
        assert!(lent.write_run_in_place(&StoreRequest::ReadRun { run_id: "r1".into() }).is_none());
    }
}
