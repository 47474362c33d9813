//! SQLite: the statements after the clock read, run in one `BEGIN IMMEDIATE` transaction.

use super::*;

/// The SQLite statements after the clock read.
pub(super) fn render_sqlite(req: &StoreRequest) -> Result<Vec<Statement>, HeartError> {
    let d = Dialect::Sqlite;
    let runs = select_list(d, &RUN_COLUMNS, "", "");
    let intents = select_list(d, &INTENT_COLUMNS, "", "");
    let instances = select_list(d, &INSTANCE_COLUMNS, "", "");
    let one = |b: Builder, sql: String| -> Result<Vec<Statement>, HeartError> { Ok(vec![b.finish(sql)]) };
    let mut b = Builder::new(d);
    match req {
        StoreRequest::Now => Ok(Vec::new()),
        StoreRequest::ReadRun { run_id } => {
            let id = b.text(run_id);
            one(b, format!("SELECT {runs} FROM agent_runs WHERE id = {id}"))
        }
        StoreRequest::UpdateRun { run_id, when, set, want_before, want_after } => {
            let mut out = Vec::new();
            if *want_before {
                let mut pb = Builder::new(d);
                let id = pb.text(run_id);
                out.push(pb.finish(format!("SELECT {runs} FROM agent_runs WHERE id = {id}")));
            }
            let id = b.text(run_id);
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            // Only whether the write hit, unless the row after it is wanted (or the row before).
            let returning = if *want_after || *want_before { runs.as_str() } else { "id" };
            out.push(b.finish(format!(
                "UPDATE agent_runs SET {set} WHERE agent_runs.id = {id} AND {when} RETURNING {returning}"
            )));
            Ok(out)
        }
        StoreRequest::ScanRuns { when, order, limit } => {
            let when = cond(&mut b, when)?;
            let limit = b.int(i64::from(*limit));
            let order = match order {
                RunOrder::ExpiresAt => "lease_expires_at, id",
                RunOrder::UpdatedAtDesc => "updated_at DESC, id",
            };
            one(b, format!("SELECT {runs} FROM agent_runs WHERE {when} ORDER BY {order} LIMIT {limit}"))
        }
        StoreRequest::EnsureRun(new) => {
            let key = b.text(&new.idempotency_key);
            let objective = b.text(&new.objective);
            let created_by = b.text(&new.created_by);
            let now = b.now();
            let insert = b.finish(format!(
                "INSERT INTO agent_runs (id, assignment_id, objective, required_capabilities, status, retries, \
                 approval_state, visibility, idempotency_key, created_by, created_at, updated_at, fencing_epoch) \
                 VALUES ({SQLITE_UUID}, {SQLITE_UUID}, {objective}, '[]', 'ready', 0, 'auto', 'team', {key}, {created_by}, \
                 {now}, {now}, 0) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id"
            ));
            let mut sb = Builder::new(d);
            let key = sb.text(&new.idempotency_key);
            let select = sb.finish(format!("SELECT {runs} FROM agent_runs WHERE idempotency_key = {key}"));
            Ok(vec![insert, select])
        }
        StoreRequest::ClaimIntent(new) => {
            // 1. the log entry, decided on the state before the insert (the write lock is
            //    held, so the insert below sees the same state);
            let rid = b.text(&new.run_id);
            let key = b.text(&new.effect_key);
            let detail = b.text(&serde_json::json!({ "channel": new.channel }).to_string());
            let now = b.now();
            let exists = format!("EXISTS (SELECT 1 FROM effect_intents WHERE run_id = {rid} AND effect_key = {key})");
            let log = b.finish(format!(
                "INSERT INTO outbox_dispatch_log (id, run_id, effect_key, attempt, outcome, at, detail) \
                 SELECT {SQLITE_UUID}, {rid}, {key}, 0, CASE WHEN {exists} THEN 'deduped' ELSE 'claimed' END, {now}, \
                 CASE WHEN {exists} THEN NULL ELSE {detail} END"
            ));
            // 2. the claim (returns a row only when it inserted);
            let mut ib = Builder::new(d);
            let rid = ib.text(&new.run_id);
            let key = ib.text(&new.effect_key);
            let channel = ib.text(&new.channel);
            let digest = ib.text(&new.payload_digest);
            let now = ib.now();
            let insert = ib.finish(format!(
                "INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, attempts, created_at) \
                 VALUES ({rid}, {key}, 'intent', {channel}, {digest}, 0, {now}) \
                 ON CONFLICT (run_id, effect_key) DO NOTHING RETURNING run_id"
            ));
            // 3. the intent as it now is.
            let mut sb = Builder::new(d);
            let rid = sb.text(&new.run_id);
            let key = sb.text(&new.effect_key);
            let select =
                sb.finish(format!("SELECT {intents} FROM effect_intents WHERE run_id = {rid} AND effect_key = {key}"));
            Ok(vec![log, insert, select])
        }
        StoreRequest::UpdateIntent { run_id, effect_key, when, set, log } => {
            let mut out = Vec::new();
            if let Some(entry) = log {
                // The log entry first, under the same condition on the same (locked) state
                // the UPDATE below evaluates: it is appended exactly when the UPDATE hits.
                let mut lb = Builder::new(d);
                let lrid = lb.text(&entry.run_id);
                let lkey = lb.text(&entry.effect_key);
                let attempt = lb.int(entry.attempt);
                let outcome = lb.text(&entry.outcome);
                let detail = entry.detail.as_ref().map_or_else(|| "NULL".to_owned(), |v| lb.json(v));
                let now = lb.now();
                let rid = lb.text(run_id);
                let key = lb.text(effect_key);
                let when = cond(&mut lb, when)?;
                out.push(lb.finish(format!(
                    "INSERT INTO outbox_dispatch_log (id, run_id, effect_key, attempt, outcome, at, detail) \
                     SELECT {SQLITE_UUID}, {lrid}, {lkey}, {attempt}, {outcome}, {now}, {detail} FROM effect_intents \
                     WHERE effect_intents.run_id = {rid} AND effect_intents.effect_key = {key} AND {when}"
                )));
            }
            let rid = b.text(run_id);
            let key = b.text(effect_key);
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            out.push(b.finish(format!(
                "UPDATE effect_intents SET {set} WHERE effect_intents.run_id = {rid} \
                 AND effect_intents.effect_key = {key} AND {when} RETURNING {intents}"
            )));
            Ok(out)
        }
        StoreRequest::ScanIntents { when, limit } => {
            let when = cond(&mut b, when)?;
            let limit = b.int(i64::from(*limit));
            one(
                b,
                format!(
                    "SELECT {intents} FROM effect_intents WHERE {when} \
                     ORDER BY fence_expires_at, run_id, effect_key LIMIT {limit}"
                ),
            )
        }
        StoreRequest::ReadLog { run_id, effect_key } => {
            let rid = b.text(run_id);
            let key = b.text(effect_key);
            one(
                b,
                format!(
                    "SELECT {} FROM outbox_dispatch_log WHERE run_id = {rid} AND effect_key = {key} ORDER BY at, rowid",
                    select_list(d, &LOG_COLUMNS, "", "")
                ),
            )
        }
        StoreRequest::UpsertInstance { instance_id, hostname, pid, metadata } => {
            let id = b.text(instance_id);
            let host = hostname.as_deref().map_or_else(|| "NULL".to_owned(), |h| b.text(h));
            let pid = pid.map_or_else(|| "NULL".to_owned(), |p| b.int(p));
            let meta = metadata.as_ref().map_or_else(|| "NULL".to_owned(), |m| b.json(m));
            let now = b.now();
            one(
                b,
                format!(
                    "INSERT INTO agent_instances (instance_id, hostname, pid, status, started_at, last_heartbeat, metadata) \
                     VALUES ({id}, {host}, {pid}, 'alive', {now}, {now}, {meta}) \
                     ON CONFLICT (instance_id) DO UPDATE SET hostname = excluded.hostname, pid = excluded.pid, \
                     status = 'alive', started_at = excluded.started_at, last_heartbeat = excluded.last_heartbeat, \
                     metadata = excluded.metadata RETURNING {instances}"
                ),
            )
        }
        StoreRequest::UpdateInstances { when, set } => {
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            one(b, format!("UPDATE agent_instances SET {set} WHERE {when} RETURNING {instances}"))
        }
        StoreRequest::ScanInstances { when } => {
            let when = cond(&mut b, when)?;
            one(b, format!("SELECT {instances} FROM agent_instances WHERE {when} ORDER BY instance_id"))
        }
    }
}
