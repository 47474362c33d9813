//! Operator read-outs: what a console or a metrics scrape reads from the tables, as single
//! read-only statements of either dialect.
//!
//! Unlike the requests of [`render`](super::render), these never write: in SQLite they read
//! the store clock (`heart_clock`) without advancing it and take no write lock, so a console
//! refreshing every few seconds never queues behind the workers. Each is served by an index
//! of the migrations (noted per function), so a scrape stays cheap on a large table.
//!
//! The lease gauges apply the one expiry rule of [`Cond::ExpiredAt`](crate::request::Cond):
//! a held run (`leased` or `running`) whose `lease_expires_at` is null or `<= now` is expired.

use super::*;

/// The store's `now` for a read, as an expression: PostgreSQL's clock; in SQLite the later of
/// the store clock and this process's clock (as the clock read of a request would take, but
/// without writing it back).
fn read_clock(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "date_trunc('milliseconds', clock_timestamp())",
        Dialect::Sqlite => {
            "max(coalesce((SELECT now FROM heart_clock WHERE id = 1), ''), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"
        }
    }
}

/// Runs in id order, after `after` (exclusive; the last id of the previous page), at most
/// `limit`, with one of `statuses` (any status when empty). Id order is stable while rows
/// change, so a cursor never skips or repeats a run. Served by the primary key (and
/// `idx_agent_runs_status` for a filter). Decode with [`decode_runs`].
///
/// `invalid-input` when `after` cannot be a run id of the store (not a UUID, PostgreSQL).
pub fn run_page(
    dialect: Dialect,
    statuses: &[RunStatus],
    after: Option<&str>,
    limit: u32,
) -> Result<Statement, HeartError> {
    let mut b = Builder::new(dialect);
    let mut conds = Vec::new();
    if !statuses.is_empty() {
        let list = statuses.iter().map(|s| format!("'{}'", s.as_str())).collect::<Vec<_>>().join(", ");
        conds.push(format!("status IN ({list})"));
    }
    if let Some(after) = after {
        let Some(id) = b.uuid(after) else {
            return Err(invalid(format!("cursor {after:?} is not a run id")));
        };
        conds.push(format!("id > {id}"));
    }
    let when = if conds.is_empty() { b.truth(true).to_owned() } else { conds.join(" AND ") };
    let limit = b.int(i64::from(limit));
    let runs = select_list(dialect, &RUN_COLUMNS, "", "");
    Ok(b.finish(format!("SELECT {runs} FROM agent_runs WHERE {when} ORDER BY id LIMIT {limit}")))
}

/// One run by id, read-only; `None` when `run_id` cannot be a run id of the store (no run
/// has it). Decode with [`decode_runs`].
pub fn run_by_id(dialect: Dialect, run_id: &str) -> Option<Statement> {
    let mut b = Builder::new(dialect);
    let id = b.uuid(run_id)?;
    let runs = select_list(dialect, &RUN_COLUMNS, "", "");
    Some(b.finish(format!("SELECT {runs} FROM agent_runs WHERE id = {id}")))
}

/// The runs of the rows of [`run_page`] or [`run_by_id`].
pub fn decode_runs(rows: &[SqlRow]) -> Result<Vec<RunRow>, HeartError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.extend(decode::Cells::new(row, "").run()?);
    }
    Ok(out)
}

/// `status` and `n` (the count) per status present in `table` (`agent_runs` or
/// `agent_instances`), by an index-only count (`idx_agent_runs_status`,
/// `agent_instances_status_heartbeat_idx`).
pub fn status_counts(table: StatusTable) -> Statement {
    let table = match table {
        StatusTable::Runs => "agent_runs",
        StatusTable::Instances => "agent_instances",
    };
    Statement {
        sql: format!("SELECT status, count(*) AS n FROM {table} GROUP BY status ORDER BY status"),
        params: vec![],
    }
}

/// `event` and `n` (the count) per event in `heart_receipts`, by an index-only count
/// (`idx_heart_receipts_event_at`).
pub fn receipt_counts() -> Statement {
    Statement {
        sql: "SELECT event, count(*) AS n FROM heart_receipts GROUP BY event ORDER BY event".into(),
        params: vec![],
    }
}

/// The tables [`status_counts`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusTable {
    /// `agent_runs`.
    Runs,
    /// `agent_instances`.
    Instances,
}

/// One row: `live` (held runs whose lease has not expired), `expired` (held runs whose lease
/// has: the sweep's work) and `oldest_expired_ms` (how long ago the longest-expired lease
/// ended, null when none has), at the store's clock. Served by the partial index
/// `idx_agent_runs_lease_sweep`. Decode with [`decode_lease_gauges`].
pub fn lease_gauges(dialect: Dialect) -> Statement {
    let now = read_clock(dialect);
    let held = "r.status IN ('leased', 'running')";
    let sql = match dialect {
        Dialect::Postgres => format!(
            "WITH clk AS MATERIALIZED (SELECT {now} AS now) \
             SELECT count(*) FILTER (WHERE r.lease_expires_at > clk.now) AS live, \
             count(*) FILTER (WHERE r.lease_expires_at IS NULL OR r.lease_expires_at <= clk.now) AS expired, \
             (EXTRACT(EPOCH FROM clk.now - min(r.lease_expires_at) FILTER (WHERE r.lease_expires_at <= clk.now)) \
             * 1000)::bigint AS oldest_expired_ms \
             FROM clk LEFT JOIN agent_runs r ON {held} GROUP BY clk.now"
        ),
        Dialect::Sqlite => format!(
            "WITH clk AS (SELECT {now} AS now) \
             SELECT count(CASE WHEN r.lease_expires_at > clk.now THEN 1 END) AS live, \
             count(CASE WHEN r.id IS NOT NULL AND (r.lease_expires_at IS NULL OR r.lease_expires_at <= clk.now) \
             THEN 1 END) AS expired, \
             CAST(round((julianday(clk.now) - julianday(min(CASE WHEN r.lease_expires_at <= clk.now \
             THEN r.lease_expires_at END))) * 86400000) AS INTEGER) AS oldest_expired_ms \
             FROM clk LEFT JOIN agent_runs r ON {held} GROUP BY clk.now"
        ),
    };
    Statement { sql, params: vec![] }
}

/// What [`lease_gauges`] reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseGauges {
    /// Held runs whose lease is live.
    pub live: u64,
    /// Held runs whose lease has expired (null or `<= now`).
    pub expired: u64,
    /// Milliseconds since the longest-expired lease ended, when one has.
    pub oldest_expired_ms: Option<u64>,
}

/// The row of [`lease_gauges`].
pub fn decode_lease_gauges(rows: &[SqlRow]) -> Result<LeaseGauges, HeartError> {
    let row = decode::exactly_one(rows, "lease gauges")?;
    let cells = decode::Cells::new(row, "");
    let count = |name: &str| -> Result<u64, HeartError> {
        u64::try_from(cells.int(name)?).map_err(|_| protocol(format!("lease gauges: a negative {name}")))
    };
    Ok(LeaseGauges {
        live: count("live")?,
        expired: count("expired")?,
        // A lease that "expired" in the future is clock noise between rows: not an age.
        oldest_expired_ms: cells.opt_int("oldest_expired_ms")?.map(|ms| u64::try_from(ms).unwrap_or(0)),
    })
}

/// The receipt events the activity chart counts: acquisitions, recoveries (the TTL and
/// liveness sweeps' reclaims) and quarantines.
pub const ACTIVITY_EVENTS: [&str; 3] = ["acquired", "reclaimed", "quarantined"];

/// `event`, `minute` (`YYYY-MM-DDTHH:MM`) and `n` for the receipts of [`ACTIVITY_EVENTS`]
/// stamped at or after `since`, by minute: a range scan per event of
/// `idx_heart_receipts_event_at` (migration 0004).
pub fn activity(dialect: Dialect, since: Timestamp) -> Statement {
    let mut b = Builder::new(dialect);
    let since = b.text(&since.to_iso());
    let events = ACTIVITY_EVENTS.iter().map(|e| format!("'{e}'")).collect::<Vec<_>>().join(", ");
    b.finish(format!(
        "SELECT event, substr(at, 1, 16) AS minute, count(*) AS n FROM heart_receipts \
         WHERE event IN ({events}) AND at >= {since} GROUP BY event, substr(at, 1, 16) ORDER BY minute, event"
    ))
}

/// One row, `now`: the store's clock as ISO text (what [`lease_gauges`] compares with), so
/// a console can show the time left on a lease and the age of a heartbeat as the store sees
/// them.
pub fn store_now(dialect: Dialect) -> Statement {
    let now = read_clock(dialect);
    let sql = match dialect {
        Dialect::Postgres => format!("SELECT {} AS now", pg_iso(now)),
        Dialect::Sqlite => format!("SELECT {now} AS now"),
    };
    Statement { sql, params: vec![] }
}

/// The `now` of [`store_now`].
pub fn decode_store_now(rows: &[SqlRow]) -> Result<Timestamp, HeartError> {
    decode::Cells::new(decode::exactly_one(rows, "store clock")?, "").time("now")
}

/// Every instance, by id (the console's list; there are as many as worker processes).
/// Decode with [`decode_instances`].
pub fn instances(dialect: Dialect) -> Statement {
    let cols = select_list(dialect, &INSTANCE_COLUMNS, "", "");
    Statement { sql: format!("SELECT {cols} FROM agent_instances ORDER BY instance_id LIMIT 10000"), params: vec![] }
}

/// The instances of the rows of [`instances`].
pub fn decode_instances(rows: &[SqlRow]) -> Result<Vec<InstanceRow>, HeartError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.extend(decode::Cells::new(row, "").instance()?);
    }
    Ok(out)
}
