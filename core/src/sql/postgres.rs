//! PostgreSQL: exactly one statement per request, the clock in a materialized CTE.

use super::*;

pub(super) fn pg_now_col() -> String {
    pg_iso("clk.now") + " AS now"
}

/// [`select_list`] of run columns for a driver that returns them as `columns` says.
fn run_select(columns: PgColumns, wanted: &[(&str, Kind)], rel: &str, prefix: &str) -> String {
    write_select_list(Dialect::Postgres, columns, wanted, rel, prefix)
}

/// The select list of a written run (`upd`), the same in every run write: rendered once for
/// each kind of driver.
fn updated_run_columns(columns: PgColumns) -> &'static str {
    use std::sync::OnceLock;
    static TEXT: OnceLock<String> = OnceLock::new();
    static NATIVE: OnceLock<String> = OnceLock::new();
    match columns {
        PgColumns::Text => TEXT.get_or_init(|| run_select(columns, &RUN_COLUMNS, "upd", "")),
        PgColumns::Native => NATIVE.get_or_init(|| run_select(columns, &RUN_COLUMNS, "upd", "")),
    }
}

pub(super) fn render_pg(req: &StoreRequest, columns: PgColumns) -> Result<Statement, HeartError> {
    let d = Dialect::Postgres;
    let mut b = Builder::new(d);
    let now = if columns == PgColumns::Native { "clk.now AS now".to_owned() } else { pg_now_col() };
    let runs = |rel: &str, prefix: &str| select_list(d, &RUN_COLUMNS, rel, prefix);
    let intents = |rel: &str| select_list(d, &INTENT_COLUMNS, rel, "");
    let instances = |rel: &str| select_list(d, &INSTANCE_COLUMNS, rel, "");
    let sql = match req {
        StoreRequest::Now => format!("{PG_CLOCK} SELECT {now} FROM clk"),
        StoreRequest::ReadRun { run_id } => {
            let on = b.uuid_eq("agent_runs.id", run_id);
            format!("{PG_CLOCK} SELECT {now}, {} FROM clk LEFT JOIN agent_runs ON {on}", runs("agent_runs", ""))
        }
        StoreRequest::UpdateRun { run_id, when, set, want_before: false, want_after } => {
            let id = b.uuid_eq("agent_runs.id", run_id);
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            // Without `want_after`, only whether the write hit: the id, no row to format here
            // or decode there.
            let id_only;
            let (returning, selected) = if *want_after {
                ("agent_runs.*", updated_run_columns(columns))
            } else {
                id_only = run_select(columns, &RUN_COLUMNS[..1], "upd", "");
                ("agent_runs.id", id_only.as_str())
            };
            [
                PG_CLOCK,
                ", upd AS (UPDATE agent_runs SET ",
                &set,
                " FROM clk WHERE ",
                &id,
                " AND ",
                &when,
                " RETURNING ",
                returning,
                ") SELECT ",
                &now,
                ", ",
                selected,
                " FROM clk LEFT JOIN upd ON TRUE",
            ]
            .concat()
        }
        // Wanting the row before the write, the row after it comes too (`want_after` aside).
        StoreRequest::UpdateRun { run_id, when, set, want_before: true, .. } => {
            // The row before the write, consistent with what the UPDATE saw, under READ
            // COMMITTED: `prev` locks the row (FOR UPDATE) and returns its newest committed
            // version, waiting for any concurrent writer first. The UPDATE joins `prev`, so it
            // cannot write before `prev` has locked the row; if its own snapshot holds an older
            // version, PostgreSQL re-checks the WHERE clause and recomputes the SET list on the
            // newest version (EvalPlanQual), which is the one `prev` returned, and which nobody
            // can change while we hold the lock. So the condition and the assignments see
            // exactly the row reported as `before`.
            //
            // Of that row only the id and the columns the write assigns are selected: every
            // other column is the same before and after the write, and `decode_pg` takes it
            // from the row after (fewer columns to format here and to decode there).
            let wanted: Vec<(&str, Kind)> = RUN_COLUMNS
                .iter()
                .filter(|(name, _)| *name == "id" || set.iter().any(|(c, _)| c.name() == *name))
                .copied()
                .collect();
            let before = run_select(columns, &wanted, "prev", "b_");
            let id = b.uuid_eq("agent_runs.id", run_id);
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            [
                PG_CLOCK,
                ", prev AS MATERIALIZED (SELECT agent_runs.* FROM agent_runs WHERE ",
                &id,
                " FOR UPDATE), upd AS (UPDATE agent_runs SET ",
                &set,
                " FROM clk, prev WHERE agent_runs.id = prev.id AND ",
                &when,
                " RETURNING agent_runs.*) SELECT ",
                &now,
                ", ",
                &before,
                ", ",
                updated_run_columns(columns),
                " FROM clk LEFT JOIN prev ON TRUE LEFT JOIN upd ON TRUE",
            ]
            .concat()
        }
        StoreRequest::ScanRuns { when, order: RunOrder::ExpiresAt, limit }
            if expired_rest(when, RunCol::LeaseExpiresAt).is_some() =>
        {
            let rest = expired_rest(when, RunCol::LeaseExpiresAt).unwrap_or_default();
            let order = |rel: &str| format!("{rel}.lease_expires_at NULLS FIRST, {rel}.id");
            let s = pg_expired_scan(&mut b, &rest, "agent_runs", "lease_expires_at", &order, *limit)?;
            format!(
                "{PG_CLOCK}, {s} SELECT {now}, {} FROM clk LEFT JOIN s ON TRUE ORDER BY {}",
                runs("s", ""),
                order("s")
            )
        }
        StoreRequest::ScanRuns { when, order, limit } => {
            let when = cond(&mut b, when)?;
            let limit = b.int(i64::from(*limit));
            let order = |rel: &str| match order {
                RunOrder::ExpiresAt => format!("{rel}.lease_expires_at NULLS FIRST, {rel}.id"),
                RunOrder::UpdatedAtDesc => format!("{rel}.updated_at DESC, {rel}.id"),
            };
            format!(
                "{PG_CLOCK}, s AS (SELECT agent_runs.* FROM agent_runs, clk WHERE {when} ORDER BY {} LIMIT {limit}) \
                 SELECT {now}, {} FROM clk LEFT JOIN s ON TRUE ORDER BY {}",
                order("agent_runs"),
                runs("s", ""),
                order("s")
            )
        }
        StoreRequest::EnsureRun(new) => pg_ensure_run(&mut b, new),
        StoreRequest::ClaimIntent(new) => pg_claim_intent(&mut b, new)?,
        StoreRequest::UpdateIntent { run_id, effect_key, when, set, log } => {
            let Some(rid) = b.uuid(run_id) else {
                // No intent can have this run id: a write that misses.
                return Ok(b.finish(format!(
                    "{PG_CLOCK} SELECT {now}, {} FROM clk LEFT JOIN effect_intents ON FALSE",
                    intents("effect_intents")
                )));
            };
            let key = b.text(effect_key);
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            let log = match log {
                None => String::new(),
                Some(entry) => {
                    let lrid = b.uuid(&entry.run_id).ok_or_else(|| invalid("log entry run_id is not a UUID"))?;
                    let lkey = b.text(&entry.effect_key);
                    let attempt = b.int(entry.attempt);
                    let outcome = b.text(&entry.outcome);
                    let detail = entry.detail.as_ref().map_or_else(|| "NULL::jsonb".to_owned(), |v| b.json(v));
                    format!(
                        ", logged AS (INSERT INTO outbox_dispatch_log (run_id, effect_key, attempt, outcome, at, detail) \
                         SELECT {lrid}, {lkey}, {attempt}, {outcome}, clk.now, {detail} FROM clk \
                         WHERE EXISTS (SELECT 1 FROM upd))"
                    )
                }
            };
            format!(
                "{PG_CLOCK}, upd AS (UPDATE effect_intents SET {set} FROM clk WHERE effect_intents.run_id = {rid} \
                 AND effect_intents.effect_key = {key} AND {when} RETURNING effect_intents.*){log} \
                 SELECT {now}, {} FROM clk LEFT JOIN upd ON TRUE",
                intents("upd")
            )
        }
        StoreRequest::ScanIntents { when, limit } if expired_rest(when, IntentCol::FenceExpiresAt).is_some() => {
            let rest = expired_rest(when, IntentCol::FenceExpiresAt).unwrap_or_default();
            let s = pg_expired_scan(&mut b, &rest, "effect_intents", "fence_expires_at", &intent_order, *limit)?;
            format!(
                "{PG_CLOCK}, {s} SELECT {now}, {} FROM clk LEFT JOIN s ON TRUE ORDER BY {}",
                intents("s"),
                intent_order("s")
            )
        }
        StoreRequest::ScanIntents { when, limit } => {
            let when = cond(&mut b, when)?;
            let limit = b.int(i64::from(*limit));
            let order = intent_order;
            format!(
                "{PG_CLOCK}, s AS (SELECT effect_intents.* FROM effect_intents, clk WHERE {when} ORDER BY {} LIMIT {limit}) \
                 SELECT {now}, {} FROM clk LEFT JOIN s ON TRUE ORDER BY {}",
                order("effect_intents"),
                intents("s"),
                order("s")
            )
        }
        StoreRequest::ReadLog { run_id, effect_key } => {
            let id = b.uuid_eq("outbox_dispatch_log.run_id", run_id);
            let key = b.text(effect_key);
            format!(
                "{PG_CLOCK} SELECT {now}, {} FROM clk LEFT JOIN outbox_dispatch_log ON {id} \
                 AND outbox_dispatch_log.effect_key = {key} \
                 ORDER BY outbox_dispatch_log.at, outbox_dispatch_log.seq",
                select_list(d, &LOG_COLUMNS, "outbox_dispatch_log", "")
            )
        }
        StoreRequest::UpsertInstance { instance_id, hostname, pid, metadata } => {
            let id = b.text(instance_id);
            let host = hostname.as_deref().map_or_else(|| "NULL::text".to_owned(), |h| b.text(h));
            let pid = pid.map_or_else(|| "NULL::bigint".to_owned(), |p| b.int(p));
            let meta = metadata.as_ref().map_or_else(|| "NULL::jsonb".to_owned(), |m| b.json(m));
            format!(
                "{PG_CLOCK}, ups AS (INSERT INTO agent_instances \
                 (instance_id, hostname, pid, status, started_at, last_heartbeat, metadata) \
                 SELECT {id}, {host}, {pid}, 'alive', clk.now, clk.now, {meta} FROM clk \
                 ON CONFLICT (instance_id) DO UPDATE SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, \
                 status = 'alive', started_at = EXCLUDED.started_at, last_heartbeat = EXCLUDED.last_heartbeat, \
                 metadata = EXCLUDED.metadata RETURNING agent_instances.*) \
                 SELECT {now}, {} FROM clk LEFT JOIN ups ON TRUE",
                instances("ups")
            )
        }
        StoreRequest::UpdateInstances { when, set } => {
            let set = set_list(&mut b, set)?;
            let when = cond(&mut b, when)?;
            format!(
                "{PG_CLOCK}, upd AS (UPDATE agent_instances SET {set} FROM clk WHERE {when} RETURNING agent_instances.*) \
                 SELECT {now}, {} FROM clk LEFT JOIN upd ON TRUE ORDER BY upd.instance_id COLLATE \"C\"",
                instances("upd")
            )
        }
        StoreRequest::ScanInstances { when } => {
            let when = cond(&mut b, when)?;
            format!(
                "{PG_CLOCK}, s AS (SELECT agent_instances.* FROM agent_instances, clk WHERE {when}) \
                 SELECT {now}, {} FROM clk LEFT JOIN s ON TRUE ORDER BY s.instance_id COLLATE \"C\"",
                instances("s")
            )
        }
    };
    Ok(b.finish(sql))
}

/// The order of an intent scan over relation `rel` (fence expiry, nulls first; then key).
pub(super) fn intent_order(rel: &str) -> String {
    format!("{rel}.fence_expires_at NULLS FIRST, {rel}.run_id, {rel}.effect_key COLLATE \"C\"")
}

/// For a scan ordered by `col` (nulls first) whose condition is `ExpiredAt(col)` or a
/// conjunction containing it: the other conjuncts (empty: none).
pub(super) fn expired_rest<C: Column>(when: &Cond<C>, col: C) -> Option<Vec<&Cond<C>>> {
    let is_expired = |c: &Cond<C>| matches!(c, Cond::ExpiredAt(x) if *x == col);
    match when {
        Cond::ExpiredAt(_) if is_expired(when) => Some(Vec::new()),
        Cond::And(cs) if cs.iter().any(is_expired) => Some(cs.iter().filter(|c| !is_expired(c)).collect()),
        _ => None,
    }
}

/// The CTE `s AS (...)` of an expiry-ordered scan whose condition is `rest AND
/// ExpiredAt(table.col)` (see [`expired_rest`]), for PostgreSQL.
///
/// `col IS NULL OR col <= now` cannot bound an index scan: the planner applies it as a
/// filter, so a scan that finds fewer than `limit` rows walks every live entry of the index
/// (every live lease, for the sweep). It is rendered as the two ranges of the index order
/// instead, each scanned on its own and limited, then merged in the same order:
/// `(... AND col IS NULL ORDER BY .. LIMIT n) UNION ALL (... AND col <= (SELECT now FROM clk)
/// ORDER BY .. LIMIT n)`, ordered and limited again. The ranges are disjoint and both keep the
/// scan's order, so the result is the same rows in the same order (null expiries first, then
/// ascending expiry, then the tie-breakers). The clock is a scalar subquery in the bound, so the
/// planner can use it as an index condition (`Index Cond: col <= $0`).
pub(super) fn pg_expired_scan<C: Column>(
    b: &mut Builder,
    rest: &[&Cond<C>],
    table: &str,
    col: &str,
    order: &dyn Fn(&str) -> String,
    limit: u32,
) -> Result<String, HeartError> {
    let mut parts = vec![];
    for c in rest {
        parts.push(cond(b, c)?);
    }
    let limit = b.int(i64::from(limit));
    let part = |bound: &str| {
        let when = parts.iter().map(String::as_str).chain([bound]).collect::<Vec<_>>().join(" AND ");
        format!("(SELECT {table}.* FROM {table}, clk WHERE {when} ORDER BY {} LIMIT {limit})", order(table))
    };
    let nulls = part(&format!("{table}.{col} IS NULL"));
    let expired = part(&format!("{table}.{col} <= (SELECT c.now FROM clk c)"));
    Ok(format!("s AS (SELECT u.* FROM ({nulls} UNION ALL {expired}) u ORDER BY {} LIMIT {limit})", order("u")))
}

/// Find-or-create, race-safe in one statement, with documented behaviour only:
/// `found` reads the key in the statement's snapshot (the common case: no write at all);
/// `ins` inserts when it was not found; if a concurrent transaction inserted the key after
/// our snapshot, `ins` waits for it and does nothing, and `raced` then fetches (and locks)
/// the committed row with a no-op `ON CONFLICT DO UPDATE`, which sees the newest version.
/// `created` is true only for the row `ins` inserted. The no-op update changes no column,
/// so the epoch trigger leaves it alone.
pub(super) fn pg_ensure_run(b: &mut Builder, new: &NewRun) -> String {
    let key = b.text(&new.idempotency_key);
    let objective = b.text(&new.objective);
    let created_by = b.text(&new.created_by);
    let insert = format!(
        "INSERT INTO agent_runs (id, assignment_id, objective, status, retries, approval_state, visibility, \
         idempotency_key, created_by, created_at, updated_at) \
         SELECT gen_random_uuid(), gen_random_uuid(), {objective}, 'ready', 0, 'auto', 'team', {key}, {created_by}, \
         clk.now, clk.now FROM clk"
    );
    format!(
        "{PG_CLOCK}, found AS (SELECT agent_runs.* FROM agent_runs WHERE agent_runs.idempotency_key = {key}), \
         ins AS ({insert} WHERE NOT EXISTS (SELECT 1 FROM found) \
         ON CONFLICT (idempotency_key) DO NOTHING RETURNING agent_runs.*), \
         raced AS ({insert} WHERE NOT EXISTS (SELECT 1 FROM found) AND NOT EXISTS (SELECT 1 FROM ins) \
         ON CONFLICT (idempotency_key) DO UPDATE SET updated_at = agent_runs.updated_at RETURNING agent_runs.*), \
         cur AS (SELECT found.*, FALSE AS created FROM found UNION ALL SELECT ins.*, TRUE FROM ins \
         UNION ALL SELECT raced.*, FALSE FROM raced) \
         SELECT {}, cur.created, {} FROM clk LEFT JOIN cur ON TRUE",
        pg_now_col(),
        select_list(Dialect::Postgres, &RUN_COLUMNS, "cur", "")
    )
}

/// Claim-once in one statement, with the same `found` / `ins` / `raced` pattern as
/// [`pg_ensure_run`], and the dispatch-log entry in the same statement: `claimed` with
/// `{"channel": …}` when `ins` inserted the intent, else `deduped` with no detail.
pub(super) fn pg_claim_intent(b: &mut Builder, new: &NewIntent) -> Result<String, HeartError> {
    let rid = b
        .uuid(&new.run_id)
        .ok_or_else(|| invalid(format!("run_id {:?} is not a UUID (effect_intents.run_id is uuid)", new.run_id)))?;
    let key = b.text(&new.effect_key);
    let channel = b.text(&new.channel);
    let digest = b.text(&new.payload_digest);
    let insert = format!(
        "INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, attempts, created_at) \
         SELECT {rid}, {key}, 'intent', {channel}, {digest}, 0, clk.now FROM clk"
    );
    Ok(format!(
        "{PG_CLOCK}, found AS (SELECT effect_intents.* FROM effect_intents \
         WHERE effect_intents.run_id = {rid} AND effect_intents.effect_key = {key}), \
         ins AS ({insert} WHERE NOT EXISTS (SELECT 1 FROM found) \
         ON CONFLICT (run_id, effect_key) DO NOTHING RETURNING effect_intents.*), \
         raced AS ({insert} WHERE NOT EXISTS (SELECT 1 FROM found) AND NOT EXISTS (SELECT 1 FROM ins) \
         ON CONFLICT (run_id, effect_key) DO UPDATE SET attempts = effect_intents.attempts RETURNING effect_intents.*), \
         logged AS (INSERT INTO outbox_dispatch_log (run_id, effect_key, attempt, outcome, at, detail) \
         SELECT {rid}, {key}, 0, CASE WHEN EXISTS (SELECT 1 FROM ins) THEN 'claimed' ELSE 'deduped' END, clk.now, \
         CASE WHEN EXISTS (SELECT 1 FROM ins) THEN jsonb_build_object('channel', {channel}) END FROM clk), \
         cur AS (SELECT found.*, FALSE AS claimed FROM found UNION ALL SELECT ins.*, TRUE FROM ins \
         UNION ALL SELECT raced.*, FALSE FROM raced) \
         SELECT {}, cur.claimed, {} FROM clk LEFT JOIN cur ON TRUE",
        pg_now_col(),
        select_list(Dialect::Postgres, &INTENT_COLUMNS, "cur", "")
    ))
}
