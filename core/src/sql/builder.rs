//! The statement builder: column kinds and lists, parameters, conditions and assignments,
//! shared by both dialects.

use super::*;

// ------------------------------------------------------------------------------------------
// Columns
// ------------------------------------------------------------------------------------------

/// The SQL type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    /// Text from a closed set (a status, a state, a channel). Values that are plain
    /// lowercase words are written as SQL literals instead of parameters, so the planners can
    /// match the partial indexes (`WHERE status IN ('leased', 'running')`,
    /// `WHERE state = 'dispatched'`) whatever plan a driver's statement cache picks.
    Label,
    /// `uuid` in PostgreSQL, text in SQLite; compared with text values.
    Uuid,
    Int,
    Time,
    Json,
    /// `text[]` in PostgreSQL, JSON text in SQLite (output only).
    TextArray,
}

impl Kind {
    pub(super) fn pg_type(self) -> &'static str {
        match self {
            Kind::Text | Kind::Label => "text",
            Kind::Uuid => "uuid",
            Kind::Int => "bigint",
            Kind::Time => "timestamptz",
            Kind::Json => "jsonb",
            Kind::TextArray => "text[]",
        }
    }

    /// Whether a (non-null) value can be compared with or assigned to a column of this kind.
    pub(super) fn accepts(self, v: &Val) -> bool {
        matches!(
            (self, v),
            (Kind::Text | Kind::Label | Kind::Uuid, Val::Text(_))
                | (Kind::Int, Val::Int(_))
                | (Kind::Time, Val::Time(_))
                | (Kind::Json, Val::Json(_))
        )
    }
}

/// A column type of the request language, with what rendering needs to know about it.
pub(super) trait Column: Copy + PartialEq {
    /// The table.
    const TABLE: &'static str;
    /// A column a write with no assignments sets to itself.
    const NOOP: &'static str;
    fn name(self) -> &'static str;
    fn kind(self) -> Kind;
    fn immutable(self) -> bool;
    /// The column naming the run this row belongs to ([`Cond::RunHeldBy`]) and its kind.
    fn run_ref() -> (&'static str, Kind);
    /// The column naming the lease owner ([`Cond::OwnerInstanceDead`]), if the table has one.
    fn owner_ref() -> Option<&'static str>;
}

impl Column for RunCol {
    const TABLE: &'static str = "agent_runs";
    const NOOP: &'static str = "status";
    fn name(self) -> &'static str {
        RunCol::name(self)
    }
    fn kind(self) -> Kind {
        match self {
            RunCol::Id => Kind::Uuid,
            RunCol::Status => Kind::Label,
            RunCol::LeaseOwner | RunCol::IdempotencyKey => Kind::Text,
            RunCol::LeaseExpiresAt | RunCol::UpdatedAt => Kind::Time,
            RunCol::Retries | RunCol::FencingEpoch => Kind::Int,
        }
    }
    fn immutable(self) -> bool {
        matches!(self, RunCol::Id | RunCol::IdempotencyKey)
    }
    fn run_ref() -> (&'static str, Kind) {
        ("id", Kind::Uuid)
    }
    fn owner_ref() -> Option<&'static str> {
        Some("lease_owner")
    }
}

impl Column for IntentCol {
    const TABLE: &'static str = "effect_intents";
    const NOOP: &'static str = "state";
    fn name(self) -> &'static str {
        IntentCol::name(self)
    }
    fn kind(self) -> Kind {
        match self {
            IntentCol::State | IntentCol::Channel => Kind::Label,
            IntentCol::PayloadDigest | IntentCol::FenceOwner | IntentCol::LastError => Kind::Text,
            IntentCol::FenceExpiresAt | IntentCol::CommittedAt => Kind::Time,
            IntentCol::FenceEpoch | IntentCol::Attempts => Kind::Int,
            IntentCol::ExternalRef => Kind::Json,
        }
    }
    fn immutable(self) -> bool {
        false
    }
    fn run_ref() -> (&'static str, Kind) {
        ("run_id", Kind::Uuid)
    }
    fn owner_ref() -> Option<&'static str> {
        None
    }
}

impl Column for InstanceCol {
    const TABLE: &'static str = "agent_instances";
    const NOOP: &'static str = "status";
    fn name(self) -> &'static str {
        InstanceCol::name(self)
    }
    fn kind(self) -> Kind {
        match self {
            InstanceCol::InstanceId => Kind::Text,
            InstanceCol::Status => Kind::Label,
            InstanceCol::LastHeartbeat => Kind::Time,
        }
    }
    fn immutable(self) -> bool {
        matches!(self, InstanceCol::InstanceId)
    }
    fn run_ref() -> (&'static str, Kind) {
        ("instance_id", Kind::Text)
    }
    fn owner_ref() -> Option<&'static str> {
        None
    }
}

/// The output columns of each table, in the model's field order.
pub(super) const RUN_COLUMNS: [(&str, Kind); 18] = [
    ("id", Kind::Uuid),
    ("task_id", Kind::Text),
    ("assignment_id", Kind::Uuid),
    ("objective", Kind::Text),
    ("required_capabilities", Kind::TextArray),
    ("status", Kind::Text),
    ("assigned_agent", Kind::Text),
    ("lease_owner", Kind::Text),
    ("lease_expires_at", Kind::Time),
    ("retries", Kind::Int),
    ("budget", Kind::Json),
    ("approval_state", Kind::Text),
    ("visibility", Kind::Text),
    ("idempotency_key", Kind::Text),
    ("created_by", Kind::Text),
    ("created_at", Kind::Time),
    ("updated_at", Kind::Time),
    ("fencing_epoch", Kind::Int),
];

pub(super) const INTENT_COLUMNS: [(&str, Kind); 13] = [
    ("run_id", Kind::Uuid),
    ("effect_key", Kind::Text),
    ("state", Kind::Text),
    ("channel", Kind::Text),
    ("payload_digest", Kind::Text),
    ("fence_owner", Kind::Text),
    ("fence_expires_at", Kind::Time),
    ("fence_epoch", Kind::Int),
    ("external_ref", Kind::Json),
    ("attempts", Kind::Int),
    ("last_error", Kind::Text),
    ("created_at", Kind::Time),
    ("committed_at", Kind::Time),
];

pub(super) const INSTANCE_COLUMNS: [(&str, Kind); 7] = [
    ("instance_id", Kind::Text),
    ("hostname", Kind::Text),
    ("pid", Kind::Int),
    ("status", Kind::Text),
    ("started_at", Kind::Time),
    ("last_heartbeat", Kind::Time),
    ("metadata", Kind::Json),
];

pub(super) const LOG_COLUMNS: [(&str, Kind); 6] = [
    ("run_id", Kind::Uuid),
    ("effect_key", Kind::Text),
    ("attempt", Kind::Int),
    ("outcome", Kind::Text),
    ("at", Kind::Time),
    ("detail", Kind::Json),
];

/// PostgreSQL: `timestamptz` as `toISOString()` text.
pub(super) fn pg_iso(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len() + PG_ISO_OPEN.len() + PG_ISO_CLOSE.len());
    push_pg_iso(&mut out, expr, "");
    out
}

const PG_ISO_OPEN: &str = "to_char(";
const PG_ISO_CLOSE: &str = " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";

/// [`pg_iso`] of `rel.name` (or `name` when `rel` is empty), appended to `out`.
fn push_pg_iso(out: &mut String, rel: &str, name: &str) {
    out.push_str(PG_ISO_OPEN);
    push_column(out, rel, name);
    out.push_str(PG_ISO_CLOSE);
}

/// `rel.name`, or `name` when `rel` is empty (`rel` alone when `name` is).
fn push_column(out: &mut String, rel: &str, name: &str) {
    out.push_str(rel);
    if !rel.is_empty() && !name.is_empty() {
        out.push('.');
    }
    out.push_str(name);
}

/// The select list of a table's columns read from relation `rel`, each named `prefix` + column.
pub(super) fn select_list(dialect: Dialect, columns: &[(&str, Kind)], rel: &str, prefix: &str) -> String {
    write_select_list(dialect, PgColumns::Text, columns, rel, prefix)
}

/// [`select_list`] for a PostgreSQL driver that returns columns as `form` says
/// ([`PgColumns::Native`]: each column as it is, a text array still as JSON text).
///
/// Written into one string, piece by piece: an operation's statement renders a select list for
/// every request (18 columns for a run), and formatting each column into a string of its own
/// was the largest part of rendering a statement.
pub(super) fn write_select_list(
    dialect: Dialect,
    form: PgColumns,
    columns: &[(&str, Kind)],
    rel: &str,
    prefix: &str,
) -> String {
    let mut out = String::with_capacity(columns.len() * 64);
    for (i, (name, kind)) in columns.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let bare = match (dialect, form, kind) {
            (Dialect::Sqlite, ..)
            | (Dialect::Postgres, _, Kind::Text | Kind::Label | Kind::Int)
            | (Dialect::Postgres, PgColumns::Native, Kind::Uuid | Kind::Json | Kind::Time) => {
                push_column(&mut out, rel, name);
                rel.is_empty()
            }
            (Dialect::Postgres, PgColumns::Text, Kind::Uuid | Kind::Json) => {
                push_column(&mut out, rel, name);
                out.push_str("::text");
                false
            }
            (Dialect::Postgres, PgColumns::Text, Kind::Time) => {
                push_pg_iso(&mut out, rel, name);
                false
            }
            (Dialect::Postgres, _, Kind::TextArray) => {
                out.push_str("to_json(");
                push_column(&mut out, rel, name);
                out.push_str(")::text");
                false
            }
        };
        if !(bare && prefix.is_empty()) {
            out.push_str(" AS ");
            out.push_str(prefix);
            out.push_str(name);
        }
    }
    out
}

/// Whether PostgreSQL's `uuid` input accepts `s` (its `string_to_uuid`: optional braces, 32
/// hex digits, an optional `-` after any group of four but the last).
pub(super) fn pg_uuid_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let braces = b.first() == Some(&b'{');
    let mut i = usize::from(braces);
    for k in 0..16 {
        let hex = |at: usize| b.get(at).is_some_and(u8::is_ascii_hexdigit);
        if !(hex(i) && hex(i + 1)) {
            return false;
        }
        i += 2;
        if b.get(i) == Some(&b'-') && k % 2 == 1 && k < 15 {
            i += 1;
        }
    }
    if braces {
        if b.get(i) != Some(&b'}') {
            return false;
        }
        i += 1;
    }
    i == b.len()
}

/// Whether a text value of a [`Kind::Label`] column may be written as a SQL literal: a
/// plain lowercase word, which cannot contain a quote.
pub(super) fn is_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && s.bytes().all(|c| c.is_ascii_lowercase() || c == b'_')
}

/// `±S.mmm seconds`, a SQLite date modifier that shifts by `ms` milliseconds exactly.
pub(super) fn sqlite_shift_modifier(ms: i64) -> String {
    let sign = if ms < 0 { '-' } else { '+' };
    let abs = ms.unsigned_abs();
    format!("{sign}{}.{:03} seconds", abs / 1000, abs % 1000)
}

/// The SQLite expression generating a random (version 4) UUID in canonical text form.
pub(super) const SQLITE_UUID: &str = "(lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' || \
    substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (random() & 3), 1) || \
    substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6))))";

// ------------------------------------------------------------------------------------------
// Statement builder
// ------------------------------------------------------------------------------------------

/// `n` in decimal, appended to `out` (a placeholder's number: no formatter needed).
fn push_decimal(out: &mut String, n: usize) {
    if n >= 10 {
        push_decimal(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// Builds one statement: allocates placeholders and knows how to spell values and the clock.
pub(super) struct Builder {
    dialect: Dialect,
    pub(super) params: Vec<SqlParam>,
    now: Option<String>,
}

impl Builder {
    pub(super) fn new(dialect: Dialect) -> Builder {
        Builder { dialect, params: Vec::new(), now: None }
    }

    pub(super) fn pg(&self) -> bool {
        self.dialect == Dialect::Postgres
    }

    pub(super) fn push(&mut self, p: SqlParam) -> String {
        self.params.push(p);
        let n = self.params.len();
        let mut ph = String::with_capacity(24);
        ph.push(match self.dialect {
            Dialect::Postgres => '$',
            Dialect::Sqlite => '?',
        });
        push_decimal(&mut ph, n);
        ph
    }

    pub(super) fn cast(&mut self, p: SqlParam, pg_cast: &str) -> String {
        let ph = self.push(p);
        if self.pg() { ph + pg_cast } else { ph }
    }

    pub(super) fn truth(&self, b: bool) -> &'static str {
        match (self.pg(), b) {
            (true, true) => "TRUE",
            (true, false) => "FALSE",
            (false, true) => "1",
            (false, false) => "0",
        }
    }

    /// The store's `now`: `clk.now` in PostgreSQL, a [`SqlParam::Now`] placeholder in SQLite.
    pub(super) fn now(&mut self) -> String {
        if self.pg() {
            return "clk.now".to_owned();
        }
        if let Some(ph) = &self.now {
            return ph.clone();
        }
        let ph = self.push(SqlParam::Now);
        self.now = Some(ph.clone());
        ph
    }

    /// `now + ms` (whole milliseconds).
    pub(super) fn now_plus(&mut self, ms: i64) -> Result<String, HeartError> {
        if !(-MAX_SHIFT_MS..=MAX_SHIFT_MS).contains(&ms) {
            return Err(invalid(format!("a clock shift of {ms} ms is out of range")));
        }
        let now = self.now();
        Ok(if self.pg() {
            let n = self.cast(SqlParam::Int(ms), "::bigint");
            ["(", &now, " + ", &n, " * interval '1 millisecond')"].concat()
        } else {
            let m = self.push(SqlParam::Text(sqlite_shift_modifier(ms)));
            format!("strftime('%Y-%m-%dT%H:%M:%fZ', {now}, {m})")
        })
    }

    /// A parameter, or a (typed, in PostgreSQL) `NULL` when there is none.
    pub(super) fn opt(&mut self, p: Option<SqlParam>, pg_cast: &str) -> String {
        match p {
            Some(p) => self.cast(p, pg_cast),
            None if self.pg() => ["NULL", pg_cast].concat(),
            None => "NULL".to_owned(),
        }
    }

    pub(super) fn text(&mut self, s: &str) -> String {
        self.cast(SqlParam::Text(s.to_owned()), "::text")
    }

    pub(super) fn int(&mut self, i: i64) -> String {
        self.cast(SqlParam::Int(i), "::bigint")
    }

    pub(super) fn time(&mut self, t: Timestamp) -> String {
        self.cast(SqlParam::Text(t.to_iso()), "::text::timestamptz")
    }

    pub(super) fn json(&mut self, v: &Value) -> String {
        self.cast(SqlParam::Text(v.to_string()), "::text::jsonb")
    }

    /// A UUID value: `None` in PostgreSQL when the text is not a UUID (no row can match).
    pub(super) fn uuid(&mut self, s: &str) -> Option<String> {
        if self.pg() && !pg_uuid_ok(s) {
            return None;
        }
        Some(self.cast(SqlParam::Text(s.to_owned()), "::text::uuid"))
    }

    /// `col = <uuid>`, or false when the text is not a UUID (PostgreSQL).
    pub(super) fn uuid_eq(&mut self, col: &str, s: &str) -> String {
        match self.uuid(s) {
            Some(v) => [col, " = ", &v].concat(),
            None => self.truth(false).to_owned(),
        }
    }

    /// A non-null literal for a column of `kind` (the caller checked `kind.accepts(v)`).
    pub(super) fn value(&mut self, kind: Kind, v: &Val) -> Option<String> {
        Some(match v {
            Val::Null => return None,
            Val::Text(s) if kind == Kind::Uuid => return self.uuid(s),
            Val::Text(s) if kind == Kind::Label && is_label(s) => ["'", s, "'"].concat(),
            Val::Text(s) => self.text(s),
            Val::Int(i) => self.int(*i),
            Val::Time(t) => self.time(*t),
            Val::Json(j) => self.json(j),
        })
    }

    /// The left operand of an equality test (`Eq`, `In`) on `col`, appended to `out`.
    /// PostgreSQL timestamps hold microseconds, and a row written by another tool may carry
    /// sub-millisecond digits, while the core sees (and compares) every timestamp in whole
    /// milliseconds: the column is truncated to milliseconds first, so a value read back from
    /// the row equals it. These tests pick one row by key, so no index on the timestamp is
    /// lost.
    fn push_eq_operand<C: Column>(&self, col: C, out: &mut String) {
        if self.pg() && col.kind() == Kind::Time {
            out.push_str("date_trunc('milliseconds', ");
            push_qualified(out, col);
            out.push(')');
        } else {
            push_qualified(out, col);
        }
    }

    pub(super) fn finish(self, sql: String) -> Statement {
        Statement { sql, params: self.params }
    }
}

// ------------------------------------------------------------------------------------------
// Conditions and assignments
// ------------------------------------------------------------------------------------------

pub(super) fn qualified<C: Column>(c: C) -> String {
    [C::TABLE, ".", c.name()].concat()
}

/// [`qualified`], appended to `out`.
fn push_qualified<C: Column>(out: &mut String, c: C) {
    out.push_str(C::TABLE);
    out.push('.');
    out.push_str(c.name());
}

/// Renders a condition as a boolean SQL expression over the row of `C::TABLE`. It may be
/// NULL only where the evaluator says false; [`Cond::Not`] coalesces its operand.
pub(super) fn cond<C: Column>(b: &mut Builder, c: &Cond<C>) -> Result<String, HeartError> {
    let mut out = String::with_capacity(256);
    cond_into(b, c, &mut out)?;
    Ok(out)
}

/// [`cond`], appended to `out`. The conditions of a lease operation's write (an `AND`/`OR`
/// tree of equalities, the held statuses, the expiry) are written in place, piece by piece:
/// rendering each node into a string of its own made allocation and formatting the largest
/// part of a PostgreSQL client's time. Other conditions go through [`cond_node`].
fn cond_into<C: Column>(b: &mut Builder, c: &Cond<C>, out: &mut String) -> Result<(), HeartError> {
    match c {
        Cond::And(cs) | Cond::Or(cs) if !cs.is_empty() => {
            let op = if matches!(c, Cond::And(_)) { " AND " } else { " OR " };
            out.push('(');
            for (i, c) in cs.iter().enumerate() {
                if i > 0 {
                    out.push_str(op);
                }
                cond_into(b, c, out)?;
            }
            out.push(')');
        }
        Cond::Not(inner) => {
            out.push_str("NOT COALESCE(");
            cond_into(b, inner, out)?;
            out.push_str(", ");
            out.push_str(b.truth(false));
            out.push(')');
        }
        // `=` is null-safe here: the value is not null, so `col = v` is NULL only when the
        // column is, where the evaluator says false, and a NULL condition acts as false
        // everywhere it is used (WHERE, CASE WHEN, AND/OR, and NOT, which coalesces). Unlike
        // IS NOT DISTINCT FROM, `=` can use an index.
        Cond::Eq(col, v) if !matches!(v, Val::Null) && col.kind().accepts(v) => match b.value(col.kind(), v) {
            Some(lit) => {
                b.push_eq_operand(*col, out);
                out.push_str(" = ");
                out.push_str(&lit);
            }
            None => out.push_str(b.truth(false)),
        },
        Cond::In(col, vs) => {
            let mut first = true;
            let mark = out.len();
            for v in vs.iter().filter(|v| col.kind().accepts(v)) {
                if let Some(lit) = b.value(col.kind(), v) {
                    if first {
                        b.push_eq_operand(*col, out);
                        out.push_str(" IN (");
                        first = false;
                    } else {
                        out.push_str(", ");
                    }
                    out.push_str(&lit);
                }
            }
            if first {
                out.truncate(mark);
                out.push_str(b.truth(false));
            } else {
                out.push(')');
            }
        }
        Cond::ExpiredAt(col) if col.kind() == Kind::Time => {
            let now = b.now();
            out.push('(');
            push_qualified(out, *col);
            out.push_str(" IS NULL OR ");
            push_qualified(out, *col);
            out.push_str(" <= ");
            out.push_str(&now);
            out.push(')');
        }
        _ => out.push_str(&cond_node(b, c)?),
    }
    Ok(())
}

/// One condition rendered into a string of its own (the nodes [`cond_into`] does not write
/// in place).
fn cond_node<C: Column>(b: &mut Builder, c: &Cond<C>) -> Result<String, HeartError> {
    Ok(match c {
        Cond::True => b.truth(true).to_owned(),
        Cond::Eq(col, Val::Null) => qualified(*col) + " IS NULL",
        // A value the column cannot hold matches nothing (`cond_into` writes the others).
        Cond::Eq(..) => b.truth(false).to_owned(),
        Cond::AtMost(col, n) => {
            if col.kind() != Kind::Int {
                return Ok(b.truth(false).to_owned());
            }
            let lit = b.int(*n);
            [&qualified(*col), " <= ", &lit].concat()
        }
        Cond::ExpiredAt(col) => {
            if col.kind() != Kind::Time {
                return Ok(b.truth(true).to_owned());
            }
            let q = qualified(*col);
            let now = b.now();
            ["(", &q, " IS NULL OR ", &q, " <= ", &now, ")"].concat()
        }
        Cond::LiveAt(col) => {
            if col.kind() != Kind::Time {
                return Ok(b.truth(false).to_owned());
            }
            let q = qualified(*col);
            let now = b.now();
            ["(", &q, " IS NOT NULL AND ", &q, " > ", &now, ")"].concat()
        }
        Cond::OlderThan(col, ms) => {
            if col.kind() != Kind::Time {
                return Ok(b.truth(false).to_owned());
            }
            // now - col > ms  <=>  col < now - ms
            let shift = ms.checked_neg().ok_or_else(|| invalid("older-than offset out of range"))?;
            let bound = b.now_plus(shift)?;
            [&qualified(*col), " < ", &bound].concat()
        }
        Cond::StartsWith(col, prefix) => match col.kind() {
            Kind::Text | Kind::Label | Kind::Uuid => {
                let q = qualified(*col);
                if b.pg() {
                    let p = b.text(prefix);
                    let cast = if col.kind() == Kind::Uuid { "::text" } else { "" };
                    ["starts_with(", &q, cast, ", ", &p, ")"].concat()
                } else {
                    let p = b.text(prefix);
                    format!("substr({q}, 1, length({p})) = {p}")
                }
            }
            _ => b.truth(false).to_owned(),
        },
        Cond::And(cs) if cs.is_empty() => b.truth(true).to_owned(),
        Cond::Or(cs) if cs.is_empty() => b.truth(false).to_owned(),
        // Written in place by `cond_into`, which never hands them here.
        Cond::In(..) | Cond::And(_) | Cond::Or(_) | Cond::Not(_) => cond(b, c)?,
        Cond::RunHeldBy { owner, lease_expires_at, epoch } => {
            let (col, kind) = C::run_ref();
            let join = if b.pg() && kind != Kind::Uuid {
                format!("hr.id::text = {}.{col}", C::TABLE)
            } else {
                format!("hr.id = {}.{col}", C::TABLE)
            };
            let owner = b.text(owner);
            let expiry = b.time(*lease_expires_at);
            let held_expiry =
                if b.pg() { "date_trunc('milliseconds', hr.lease_expires_at)" } else { "hr.lease_expires_at" };
            let now = b.now();
            let epoch = match epoch {
                Some(e) => format!(" AND hr.fencing_epoch = {}", b.int(*e)),
                None => String::new(),
            };
            format!(
                "EXISTS (SELECT 1 FROM agent_runs hr WHERE {join} AND hr.status IN ('leased', 'running') \
                 AND hr.lease_owner = {owner} AND {held_expiry} = {expiry} AND hr.lease_expires_at > {now}{epoch})"
            )
        }
        Cond::OwnerInstanceDead { ttl_ms } => match C::owner_ref() {
            None => b.truth(false).to_owned(),
            Some(owner) => {
                let shift = ttl_ms.checked_neg().ok_or_else(|| invalid("liveness ttl out of range"))?;
                let bound = b.now_plus(shift)?;
                format!(
                    "EXISTS (SELECT 1 FROM agent_instances di WHERE di.instance_id = {}.{owner} \
                     AND (di.status = 'dead' OR di.last_heartbeat < {bound}))",
                    C::TABLE
                )
            }
        },
    })
}

/// Renders an assigned value for a column of kind `target`, evaluated on the row before the
/// write (SQL `UPDATE` semantics).
pub(super) fn expr<C: Column>(b: &mut Builder, e: &Expr<C>, target: Kind, what: &str) -> Result<String, HeartError> {
    Ok(match e {
        Expr::Val(Val::Null) if b.pg() => ["NULL::", target.pg_type()].concat(),
        Expr::Val(Val::Null) => "NULL".to_owned(),
        Expr::Val(v) => {
            if !target.accepts(v) {
                return Err(invalid(format!("{what}: cannot assign {v:?}")));
            }
            b.value(target, v).ok_or_else(|| invalid(format!("{what}: {v:?} is not a UUID")))?
        }
        Expr::Now | Expr::NowPlus(_) if target != Kind::Time => {
            return Err(invalid(format!("{what}: a timestamp assigned to a non-timestamp column")));
        }
        Expr::Now => b.now(),
        Expr::NowPlus(ms) => b.now_plus(*ms)?,
        Expr::Add(col, n) => {
            if target != Kind::Int || col.kind() != Kind::Int {
                return Err(invalid(format!("{what}: arithmetic on a non-integer column")));
            }
            let n = b.int(*n);
            ["(", &qualified(*col), " + ", &n, ")"].concat()
        }
        Expr::Case(c, then, otherwise) => {
            let c = cond(b, c)?;
            let then = expr(b, then, target, what)?;
            let otherwise = expr(b, otherwise, target, what)?;
            ["CASE WHEN ", &c, " THEN ", &then, " ELSE ", &otherwise, " END"].concat()
        }
    })
}

/// The `SET` list. A column assigned twice keeps its last assignment (as the evaluator
/// applies them in order); no assignment at all is a no-op write of one column.
pub(super) fn set_list<C: Column>(b: &mut Builder, set: &[Assign<C>]) -> Result<String, HeartError> {
    let mut out = String::new();
    for (i, (col, e)) in set.iter().enumerate() {
        if set[i + 1..].iter().any(|(later, _)| later == col) {
            continue;
        }
        if col.immutable() {
            return Err(invalid(format!("{}.{} is immutable", C::TABLE, col.name())));
        }
        let value = expr(b, e, col.kind(), col.name())?;
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(col.name());
        out.push_str(" = ");
        out.push_str(&value);
    }
    if out.is_empty() {
        out = [C::NOOP, " = ", C::TABLE, ".", C::NOOP].concat();
    }
    Ok(out)
}
