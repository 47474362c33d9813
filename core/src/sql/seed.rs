//! Statements that write rows as given (seeding stores, fixtures) and receipts.

use super::*;

pub(super) fn text_param(s: &str) -> SqlParam {
    SqlParam::Text(s.to_owned())
}

pub(super) fn time_param(t: Option<Timestamp>) -> Option<SqlParam> {
    t.map(|t| SqlParam::Text(t.to_iso()))
}

pub(super) fn json_param(v: Option<&Value>) -> Option<SqlParam> {
    v.map(|v| SqlParam::Text(v.to_string()))
}

pub(super) const PG_TIME: &str = "::text::timestamptz";

/// The insert of one run exactly as given: every column, timestamps and epoch included
/// (in PostgreSQL `id` and `assignment_id` must be UUID text). Fixtures are seeded this
/// way, and hosts use it to create rows the lease operations do not create.
pub fn seed_run(dialect: Dialect, r: &RunRow) -> Statement {
    let mut b = Builder::new(dialect);
    let caps = SqlParam::Text(Value::from(r.required_capabilities.clone()).to_string());
    let values = [
        b.cast(text_param(&r.id), "::text::uuid"),
        b.opt(r.task_id.as_deref().map(text_param), "::text"),
        b.cast(text_param(&r.assignment_id), "::text::uuid"),
        b.text(&r.objective),
        if b.pg() {
            format!("ARRAY(SELECT json_array_elements_text({}))", b.cast(caps, "::text::json"))
        } else {
            b.push(caps)
        },
        b.text(r.status.as_str()),
        b.opt(r.assigned_agent.as_deref().map(text_param), "::text"),
        b.opt(r.lease_owner.as_deref().map(text_param), "::text"),
        b.opt(time_param(r.lease_expires_at), PG_TIME),
        b.int(r.retries),
        b.opt(json_param(r.budget.as_ref()), "::text::jsonb"),
        b.text(&r.approval_state),
        b.text(&r.visibility),
        b.text(&r.idempotency_key),
        b.text(&r.created_by),
        b.time(r.created_at),
        b.time(r.updated_at),
        b.int(r.fencing_epoch),
    ];
    b.finish(format!(
        "INSERT INTO agent_runs (id, task_id, assignment_id, objective, required_capabilities, status, \
         assigned_agent, lease_owner, lease_expires_at, retries, budget, approval_state, visibility, \
         idempotency_key, created_by, created_at, updated_at, fencing_epoch) VALUES ({})",
        values.join(", ")
    ))
}

/// The insert of one instance exactly as given.
pub fn seed_instance(dialect: Dialect, i: &InstanceRow) -> Statement {
    let mut b = Builder::new(dialect);
    let values = [
        b.text(&i.instance_id),
        b.opt(i.hostname.as_deref().map(text_param), "::text"),
        b.opt(i.pid.map(SqlParam::Int), "::bigint"),
        b.text(i.status.as_str()),
        b.time(i.started_at),
        b.time(i.last_heartbeat),
        b.opt(json_param(i.metadata.as_ref()), "::text::jsonb"),
    ];
    b.finish(format!(
        "INSERT INTO agent_instances (instance_id, hostname, pid, status, started_at, last_heartbeat, metadata) \
         VALUES ({})",
        values.join(", ")
    ))
}

/// The insert of one effect intent exactly as given (in PostgreSQL `run_id` must be UUID
/// text).
pub fn seed_intent(dialect: Dialect, i: &IntentRow) -> Statement {
    let mut b = Builder::new(dialect);
    let values = [
        b.cast(text_param(&i.run_id), "::text::uuid"),
        b.text(&i.effect_key),
        b.text(i.state.as_str()),
        b.text(&i.channel),
        b.text(&i.payload_digest),
        b.opt(i.fence_owner.as_deref().map(text_param), "::text"),
        b.opt(time_param(i.fence_expires_at), PG_TIME),
        b.opt(i.fence_epoch.map(SqlParam::Int), "::bigint"),
        b.opt(json_param(i.external_ref.as_ref()), "::text::jsonb"),
        b.int(i.attempts),
        b.opt(i.last_error.as_deref().map(text_param), "::text"),
        b.time(i.created_at),
        b.opt(time_param(i.committed_at), PG_TIME),
    ];
    b.finish(format!(
        "INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, fence_owner, \
         fence_expires_at, fence_epoch, external_ref, attempts, last_error, created_at, committed_at) VALUES ({})",
        values.join(", ")
    ))
}

/// Renders the insert of one receipt into `heart_receipts` (the table sink). `receipt` is
/// the receipt's JSON object (`schemaVersion`, `event`, `runId`, `owner`, `leaseExpiresAt`,
/// `effectKey`, `at`, `digest`); it is stored as is in the `receipt` column too. A chained
/// receipt (one with `seq`, see [`crate::chain`]) is inserted only at a free position of its
/// run's chain: the statement returns its `id`, or no row when the position is taken.
pub fn receipt_insert(dialect: Dialect, receipt: &Value) -> Result<Statement, HeartError> {
    let obj = receipt.as_object().ok_or_else(|| invalid("a receipt must be a JSON object"))?;
    let field = |name: &str, nullable: bool| -> Result<Option<String>, HeartError> {
        match obj.get(name) {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Null) | None if nullable => Ok(None),
            _ => Err(invalid(format!("receipt field {name} must be a string"))),
        }
    };
    let mut b = Builder::new(dialect);
    let mut values = Vec::new();
    for (name, nullable) in [
        ("schemaVersion", false),
        ("event", false),
        ("runId", false),
        ("owner", false),
        ("leaseExpiresAt", true),
        ("effectKey", true),
        ("at", false),
        ("digest", false),
    ] {
        values.push(match field(name, nullable)? {
            Some(s) => b.text(&s),
            None if b.pg() => "NULL::text".to_owned(),
            None => "NULL".to_owned(),
        });
    }
    values.push(b.json(receipt));
    let columns = "schema_version, event, run_id, owner, lease_expires_at, effect_key, at, digest, receipt";
    let Some(seq) = obj.get("seq") else {
        return Ok(b.finish(format!("INSERT INTO heart_receipts ({columns}) VALUES ({})", values.join(", "))));
    };
    // A chained receipt takes its position only if no receipt of the run holds it yet; two
    // inserts that race past this check meet at the unique index of migration 0003, where the
    // second does nothing (instead of failing). No row comes back when the position is taken,
    // and the sink chains again after the new head.
    let seq = seq
        .as_u64()
        .and_then(|s| i64::try_from(s).ok())
        .ok_or_else(|| invalid("receipt field seq must be an integer from 1"))?;
    let run = field("runId", false)?.unwrap_or_default();
    let run = b.text(&run);
    let seq = b.int(seq);
    Ok(b.finish(format!(
        "INSERT INTO heart_receipts ({columns}) SELECT {} WHERE NOT EXISTS \
         (SELECT 1 FROM heart_receipts WHERE run_id = {run} AND {} = {seq}) ON CONFLICT DO NOTHING RETURNING id",
        values.join(", "),
        chain_seq(dialect)
    )))
}

/// The receipt's `seq`, as the chain index of migration 0003 spells it.
fn chain_seq(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "((receipt->>'seq')::bigint)",
        Dialect::Sqlite => "json_extract(receipt, '$.seq')",
    }
}

/// The head of a run's receipt chain in `heart_receipts`: one row (`seq` integer, `link` text)
/// or none when the run has no chained receipt yet.
pub fn receipt_chain_head(dialect: Dialect, run_id: &str) -> Statement {
    let mut b = Builder::new(dialect);
    let run = b.text(run_id);
    let seq = chain_seq(dialect);
    let link = match dialect {
        Dialect::Postgres => "receipt->>'link'",
        Dialect::Sqlite => "json_extract(receipt, '$.link')",
    };
    b.finish(format!(
        "SELECT {seq} AS seq, {link} AS link FROM heart_receipts WHERE run_id = {run} AND {seq} IS NOT NULL \
         ORDER BY {seq} DESC LIMIT 1"
    ))
}
