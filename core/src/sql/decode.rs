//! Decoding the rows a database hands back into a [`StoreAnswer`].

use super::*;

// ------------------------------------------------------------------------------------------
// Decoding
// ------------------------------------------------------------------------------------------

/// How many statements [`render`] returns for `req` (and so how many row sets [`decode`]
/// expects).
pub fn statement_count(req: &StoreRequest, dialect: Dialect) -> usize {
    match dialect {
        Dialect::Postgres => 1,
        Dialect::Sqlite => {
            1 + match req {
                StoreRequest::Now => 0,
                StoreRequest::UpdateRun { want_before: true, .. } => 2,
                StoreRequest::UpdateIntent { log: Some(_), .. } => 2,
                StoreRequest::EnsureRun(_) => 2,
                StoreRequest::ClaimIntent(_) => 3,
                _ => 1,
            }
        }
    }
}

/// Whether column `column` is `prefix` + `name`. Lengths first: most columns a lookup passes
/// differ in length, and comparing those costs no call into `memcmp` (which showed as 11 % of a
/// PostgreSQL client's CPU when every column passed was compared).
fn named(column: &str, prefix: &str, name: &str) -> bool {
    column.len() == prefix.len() + name.len() && column.starts_with(prefix) && column.ends_with(name)
}

/// A view of one row, reading columns named `prefix` + name.
pub(super) struct Cells<'a> {
    row: &'a SqlRow,
    prefix: &'a str,
    /// Where the next lookup starts: just after the last column found. Fields are read in
    /// the order the statements select them, so each lookup is usually one comparison
    /// instead of a scan of the row (a before-and-after row has 36 columns).
    next: std::cell::Cell<usize>,
}

impl<'a> Cells<'a> {
    pub(super) fn new(row: &'a SqlRow, prefix: &'a str) -> Cells<'a> {
        Cells { row, prefix, next: std::cell::Cell::new(0) }
    }

    fn get(&self, name: &str) -> Result<&'a SqlValue, HeartError> {
        let start = self.next.get().min(self.row.len());
        let (tail, head) = (&self.row[start..], &self.row[..start]);
        let found = tail
            .iter()
            .enumerate()
            .map(|(i, c)| (start + i, c))
            .chain(head.iter().enumerate())
            .find(|(_, (n, _))| named(n, self.prefix, name));
        match found {
            Some((i, (_, v))) => {
                self.next.set(i + 1);
                Ok(v)
            }
            None => Err(protocol(format!("missing column {}{name}", self.prefix))),
        }
    }

    fn is_null(&self, name: &str) -> Result<bool, HeartError> {
        Ok(matches!(self.get(name)?, SqlValue::Null))
    }

    /// The text of a column, borrowed (`None` for NULL): what the typed readers parse.
    fn opt_str(&self, name: &str) -> Result<Option<&'a str>, HeartError> {
        match self.get(name)? {
            SqlValue::Null => Ok(None),
            SqlValue::Text(s) => Ok(Some(s.as_str())),
            other => Err(protocol(format!("column {name}: expected text, got {other:?}"))),
        }
    }

    fn str(&self, name: &str) -> Result<&'a str, HeartError> {
        self.opt_str(name)?.ok_or_else(|| protocol(format!("column {name} is null")))
    }

    pub(super) fn opt_text(&self, name: &str) -> Result<Option<String>, HeartError> {
        Ok(self.opt_str(name)?.map(str::to_owned))
    }

    pub(super) fn text(&self, name: &str) -> Result<String, HeartError> {
        self.str(name).map(str::to_owned)
    }

    pub(super) fn opt_int(&self, name: &str) -> Result<Option<i64>, HeartError> {
        match self.get(name)? {
            SqlValue::Null => Ok(None),
            SqlValue::Int(i) => Ok(Some(*i)),
            // 2^63 as f64: every integral f64 below it in magnitude fits an i64.
            SqlValue::Real(f) if f.fract() == 0.0 && f.abs() < 9_223_372_036_854_775_808.0 => Ok(Some(*f as i64)),
            SqlValue::Text(s) => {
                s.trim().parse().map(Some).map_err(|_| protocol(format!("column {name}: {s:?} is not an integer")))
            }
            other => Err(protocol(format!("column {name}: expected an integer, got {other:?}"))),
        }
    }

    pub(super) fn int(&self, name: &str) -> Result<i64, HeartError> {
        self.opt_int(name)?.ok_or_else(|| protocol(format!("column {name} is null")))
    }

    fn opt_time(&self, name: &str) -> Result<Option<Timestamp>, HeartError> {
        self.opt_str(name)?
            .map(|s| Timestamp::parse_iso(s).map_err(|e| protocol(format!("column {name}: {e}"))))
            .transpose()
    }

    pub(super) fn time(&self, name: &str) -> Result<Timestamp, HeartError> {
        self.opt_time(name)?.ok_or_else(|| protocol(format!("column {name} is null")))
    }

    fn opt_json(&self, name: &str) -> Result<Option<Value>, HeartError> {
        self.opt_str(name)?
            .map(|s| serde_json::from_str(s).map_err(|e| protocol(format!("column {name}: bad JSON: {e}"))))
            .transpose()
    }

    fn strings(&self, name: &str) -> Result<Vec<String>, HeartError> {
        serde_json::from_str(self.str(name)?)
            .map_err(|e| protocol(format!("column {name}: expected a JSON array of text: {e}")))
    }

    fn run_status(&self, name: &str) -> Result<RunStatus, HeartError> {
        let status = self.str(name)?;
        RunStatus::parse(status).map_err(|_| protocol(format!("unknown run status {status:?}")))
    }

    fn boolean(&self, name: &str) -> Result<bool, HeartError> {
        match self.get(name)? {
            SqlValue::Bool(b) => Ok(*b),
            SqlValue::Int(0) => Ok(false),
            SqlValue::Int(1) => Ok(true),
            SqlValue::Text(s) if matches!(s.as_str(), "t" | "true" | "1") => Ok(true),
            SqlValue::Text(s) if matches!(s.as_str(), "f" | "false" | "0") => Ok(false),
            other => Err(protocol(format!("column {name}: expected a boolean, got {other:?}"))),
        }
    }

    /// The row before a write: `after` with the columns the write assigned as these cells
    /// hold them (the PostgreSQL statement selects only those; every other column is the same
    /// before and after the write).
    fn before(&self, after: &RunRow, set: &[Assign<RunCol>]) -> Result<RunRow, HeartError> {
        if self.is_null("id")? {
            return Err(protocol("update_run: a hit without the row before it"));
        }
        let mut before = after.clone();
        for (col, _) in set {
            let name = col.name();
            match col {
                RunCol::Status => before.status = self.run_status(name)?,
                RunCol::LeaseOwner => before.lease_owner = self.opt_text(name)?,
                RunCol::LeaseExpiresAt => before.lease_expires_at = self.opt_time(name)?,
                RunCol::Retries => before.retries = self.int(name)?,
                RunCol::FencingEpoch => before.fencing_epoch = self.int(name)?,
                RunCol::UpdatedAt => before.updated_at = self.time(name)?,
                // Immutable: a write never assigns them, and the store refuses one that does.
                RunCol::Id | RunCol::IdempotencyKey => {}
            }
        }
        Ok(before)
    }

    /// A run, or `None` when the row is the null side of an outer join.
    pub(super) fn run(&self) -> Result<Option<RunRow>, HeartError> {
        // Read in the statements' select order (RUN_COLUMNS), so each lookup is one comparison.
        let Some(id) = self.opt_text("id")? else {
            return Ok(None);
        };
        Ok(Some(RunRow {
            id,
            task_id: self.opt_text("task_id")?,
            assignment_id: self.text("assignment_id")?,
            objective: self.text("objective")?,
            required_capabilities: self.strings("required_capabilities")?,
            status: self.run_status("status")?,
            assigned_agent: self.opt_text("assigned_agent")?,
            lease_owner: self.opt_text("lease_owner")?,
            lease_expires_at: self.opt_time("lease_expires_at")?,
            retries: self.int("retries")?,
            budget: self.opt_json("budget")?,
            approval_state: self.text("approval_state")?,
            visibility: self.text("visibility")?,
            idempotency_key: self.text("idempotency_key")?,
            created_by: self.text("created_by")?,
            created_at: self.time("created_at")?,
            updated_at: self.time("updated_at")?,
            fencing_epoch: self.int("fencing_epoch")?,
        }))
    }

    fn intent(&self) -> Result<Option<IntentRow>, HeartError> {
        if self.is_null("run_id")? {
            return Ok(None);
        }
        let state = self.text("state")?;
        let state = [IntentState::Intent, IntentState::Dispatched, IntentState::Committed, IntentState::Abandoned]
            .into_iter()
            .find(|s| s.as_str() == state)
            .ok_or_else(|| protocol(format!("unknown intent state {state:?}")))?;
        Ok(Some(IntentRow {
            run_id: self.text("run_id")?,
            effect_key: self.text("effect_key")?,
            state,
            channel: self.text("channel")?,
            payload_digest: self.text("payload_digest")?,
            fence_owner: self.opt_text("fence_owner")?,
            fence_expires_at: self.opt_time("fence_expires_at")?,
            fence_epoch: self.opt_int("fence_epoch")?,
            external_ref: self.opt_json("external_ref")?,
            attempts: self.int("attempts")?,
            last_error: self.opt_text("last_error")?,
            created_at: self.time("created_at")?,
            committed_at: self.opt_time("committed_at")?,
        }))
    }

    pub(super) fn instance(&self) -> Result<Option<InstanceRow>, HeartError> {
        if self.is_null("instance_id")? {
            return Ok(None);
        }
        let status = self.text("status")?;
        let status = [InstanceStatus::Alive, InstanceStatus::Draining, InstanceStatus::Dead]
            .into_iter()
            .find(|s| s.as_str() == status)
            .ok_or_else(|| protocol(format!("unknown instance status {status:?}")))?;
        Ok(Some(InstanceRow {
            instance_id: self.text("instance_id")?,
            hostname: self.opt_text("hostname")?,
            pid: self.opt_int("pid")?,
            status,
            started_at: self.time("started_at")?,
            last_heartbeat: self.time("last_heartbeat")?,
            metadata: self.opt_json("metadata")?,
        }))
    }

    fn log_entry(&self) -> Result<Option<DispatchLogEntry>, HeartError> {
        if self.is_null("run_id")? {
            return Ok(None);
        }
        Ok(Some(DispatchLogEntry {
            run_id: self.text("run_id")?,
            effect_key: self.text("effect_key")?,
            attempt: self.int("attempt")?,
            outcome: self.text("outcome")?,
            at: Some(self.time("at")?),
            detail: self.opt_json("detail")?,
        }))
    }
}

pub(super) fn at_most_one<'a>(rows: &'a [SqlRow], what: &str) -> Result<Option<&'a SqlRow>, HeartError> {
    match rows {
        [] => Ok(None),
        [row] => Ok(Some(row)),
        _ => Err(protocol(format!("{what}: expected at most one row, got {}", rows.len()))),
    }
}

pub(super) fn exactly_one<'a>(rows: &'a [SqlRow], what: &str) -> Result<&'a SqlRow, HeartError> {
    at_most_one(rows, what)?.ok_or_else(|| protocol(format!("{what}: expected one row, got none")))
}

pub(super) fn all<'a, T>(
    rows: &'a [SqlRow],
    f: impl Fn(&Cells<'a>) -> Result<Option<T>, HeartError>,
) -> Result<Vec<T>, HeartError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        if let Some(x) = f(&Cells::new(row, ""))? {
            out.push(x);
        }
    }
    Ok(out)
}

pub(super) fn sorted_instances(mut instances: Vec<InstanceRow>) -> StoreReply {
    instances.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    StoreReply::Instances { instances }
}

/// Decodes the rows of the statements [`render`] returned for `req` (one row set per
/// statement, in order) into the store's answer. Malformed rows (a missing column, a value
/// of the wrong type, an unknown status, an unexpected number of rows) are `store-protocol`
/// errors.
pub fn decode(req: &StoreRequest, dialect: Dialect, results: Vec<Vec<SqlRow>>) -> Result<StoreAnswer, HeartError> {
    let expected = statement_count(req, dialect);
    if results.len() != expected {
        return Err(protocol(format!("expected {expected} row sets, got {}", results.len())));
    }
    let clock = results.first().and_then(|rows| rows.first()).ok_or_else(|| protocol("no row carries `now`"))?;
    let now = Cells::new(clock, "").time("now")?;
    let reply = match dialect {
        Dialect::Postgres => decode_pg(req, results.first().map_or(&[][..], Vec::as_slice))?,
        Dialect::Sqlite => decode_sqlite(req, &results)?,
    };
    Ok(StoreAnswer { now, reply })
}

pub(super) fn decode_pg(req: &StoreRequest, rows: &[SqlRow]) -> Result<StoreReply, HeartError> {
    let single = |what: &str| exactly_one(rows, what).map(|r| Cells::new(r, ""));
    Ok(match req {
        StoreRequest::Now => {
            single("now")?;
            StoreReply::Now
        }
        StoreRequest::ReadRun { .. } => StoreReply::Run { run: single("read_run")?.run()? },
        StoreRequest::UpdateRun { want_before: false, want_after: false, .. } => {
            StoreReply::RunHit { hit: !Cells::new(exactly_one(rows, "update_run")?, "").is_null("id")? }
        }
        StoreRequest::UpdateRun { want_before, set, .. } => {
            let row = exactly_one(rows, "update_run")?;
            let after = Cells::new(row, "").run()?;
            let before = match &after {
                Some(after) if *want_before => Some(Cells::new(row, "b_").before(after, set)?),
                _ => None,
            };
            StoreReply::RunWrite { before, after }
        }
        StoreRequest::ScanRuns { .. } => StoreReply::Runs { runs: all(rows, Cells::run)? },
        StoreRequest::EnsureRun(_) => {
            let cells = single("ensure_run")?;
            let run = cells.run()?.ok_or_else(|| protocol("ensure_run: no row"))?;
            StoreReply::Ensured { run, created: cells.boolean("created")? }
        }
        StoreRequest::ClaimIntent(_) => {
            let cells = single("claim_intent")?;
            let intent = cells.intent()?.ok_or_else(|| protocol("claim_intent: no row"))?;
            StoreReply::Claim { intent, claimed: cells.boolean("claimed")? }
        }
        StoreRequest::UpdateIntent { .. } => StoreReply::Intent { intent: single("update_intent")?.intent()? },
        StoreRequest::ScanIntents { .. } => StoreReply::Intents { intents: all(rows, Cells::intent)? },
        StoreRequest::ReadLog { .. } => StoreReply::Log { entries: all(rows, Cells::log_entry)? },
        StoreRequest::UpsertInstance { .. } => {
            let row = single("upsert_instance")?.instance()?.ok_or_else(|| protocol("upsert_instance: no row"))?;
            StoreReply::Instances { instances: vec![row] }
        }
        StoreRequest::UpdateInstances { .. } | StoreRequest::ScanInstances { .. } => {
            sorted_instances(all(rows, Cells::instance)?)
        }
    })
}

pub(super) fn decode_sqlite(req: &StoreRequest, results: &[Vec<SqlRow>]) -> Result<StoreReply, HeartError> {
    let set = |i: usize| results.get(i).map_or(&[][..], Vec::as_slice);
    let one_of = |i: usize, what: &str| -> Result<Option<Cells<'_>>, HeartError> {
        Ok(at_most_one(set(i), what)?.map(|r| Cells::new(r, "")))
    };
    Ok(match req {
        StoreRequest::Now => StoreReply::Now,
        StoreRequest::ReadRun { .. } => {
            StoreReply::Run { run: one_of(1, "read_run")?.map(|c| c.run()).transpose()?.flatten() }
        }
        StoreRequest::UpdateRun { want_before: false, want_after: false, .. } => {
            StoreReply::RunHit { hit: one_of(1, "update_run")?.is_some() }
        }
        StoreRequest::UpdateRun { want_before, .. } => {
            let (before_at, after_at) = if *want_before { (Some(1), 2) } else { (None, 1) };
            let after = one_of(after_at, "update_run")?.map(|c| c.run()).transpose()?.flatten();
            let before = match (before_at, &after) {
                (Some(i), Some(_)) => {
                    let before = one_of(i, "update_run (before)")?.map(|c| c.run()).transpose()?.flatten();
                    if before.is_none() {
                        return Err(protocol("update_run: a hit without the row before it"));
                    }
                    before
                }
                _ => None,
            };
            StoreReply::RunWrite { before, after }
        }
        StoreRequest::ScanRuns { .. } => StoreReply::Runs { runs: all(set(1), Cells::run)? },
        StoreRequest::EnsureRun(_) => {
            let created = at_most_one(set(1), "ensure_run (insert)")?.is_some();
            let run = Cells::new(exactly_one(set(2), "ensure_run")?, "").run()?;
            StoreReply::Ensured { run: run.ok_or_else(|| protocol("ensure_run: no row"))?, created }
        }
        StoreRequest::ClaimIntent(_) => {
            let claimed = at_most_one(set(2), "claim_intent (insert)")?.is_some();
            let intent = Cells::new(exactly_one(set(3), "claim_intent")?, "").intent()?;
            StoreReply::Claim { intent: intent.ok_or_else(|| protocol("claim_intent: no row"))?, claimed }
        }
        StoreRequest::UpdateIntent { log, .. } => {
            let at = if log.is_some() { 2 } else { 1 };
            StoreReply::Intent { intent: one_of(at, "update_intent")?.map(|c| c.intent()).transpose()?.flatten() }
        }
        StoreRequest::ScanIntents { .. } => StoreReply::Intents { intents: all(set(1), Cells::intent)? },
        StoreRequest::ReadLog { .. } => StoreReply::Log { entries: all(set(1), Cells::log_entry)? },
        StoreRequest::UpsertInstance { .. } => {
            let row = Cells::new(exactly_one(set(1), "upsert_instance")?, "").instance()?;
            StoreReply::Instances { instances: vec![row.ok_or_else(|| protocol("upsert_instance: no row"))?] }
        }
        StoreRequest::UpdateInstances { .. } | StoreRequest::ScanInstances { .. } => {
            sorted_instances(all(set(1), Cells::instance)?)
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn row(names: &[&str]) -> SqlRow {
        names.iter().enumerate().map(|(i, n)| ((*n).to_owned(), SqlValue::Int(i as i64))).collect()
    }

    #[test]
    fn lookups_find_columns_in_any_order_and_name_a_missing_one() {
        let r = row(&["before_id", "before_retries", "after_id", "after_retries"]);
        let after = Cells::new(&r, "after_");
        // In order, out of order, and the same column twice: each finds its own cell.
        assert_eq!(after.int("id").unwrap(), 2);
        assert_eq!(after.int("retries").unwrap(), 3);
        assert_eq!(after.int("id").unwrap(), 2);
        assert_eq!(after.int("retries").unwrap(), 3);
        let before = Cells::new(&r, "before_");
        assert_eq!(before.int("retries").unwrap(), 1);
        assert_eq!(before.int("id").unwrap(), 0);
        let e = after.int("epoch").unwrap_err();
        assert!(e.message.contains("missing column after_epoch"), "{}", e.message);
        assert!(Cells::new(&Vec::new(), "").int("id").is_err());
    }
}
