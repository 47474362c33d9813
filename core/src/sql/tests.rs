use super::*;
use crate::model::FencingToken;
use crate::request::{held, holds_token};

fn t(iso: &str) -> Timestamp {
    Timestamp::parse_iso(iso).unwrap()
}

const RUN: &str = "0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab";

fn token() -> FencingToken {
    FencingToken {
        run_id: RUN.to_owned(),
        owner: "worker-A".to_owned(),
        lease_expires_at: t("2026-07-30T00:01:00.000Z"),
        epoch: Some(3),
    }
}

/// The acquire write of `ops::acquire` (ceiling 5).
fn acquire() -> StoreRequest {
    let was_ready = Cond::Eq(RunCol::Status, Val::status(RunStatus::Ready));
    let ceiling = Cond::Not(Box::new(Cond::AtMost(RunCol::Retries, 4)));
    StoreRequest::UpdateRun {
        run_id: RUN.to_owned(),
        when: Cond::Or(vec![
            was_ready.clone(),
            Cond::And(vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt), Cond::Not(Box::new(ceiling))]),
        ]),
        set: vec![
            (RunCol::LeaseOwner, Expr::Val(Val::Text("worker-A".to_owned()))),
            (RunCol::LeaseExpiresAt, Expr::NowPlus(60_000)),
            (RunCol::Status, Expr::Val(Val::status(RunStatus::Leased))),
            (RunCol::UpdatedAt, Expr::Now),
            (RunCol::FencingEpoch, Expr::Add(RunCol::FencingEpoch, 1)),
            (
                RunCol::Retries,
                Expr::Case(
                    Box::new(was_ready),
                    Box::new(Expr::Add(RunCol::Retries, 0)),
                    Box::new(Expr::Add(RunCol::Retries, 1)),
                ),
            ),
        ],
        want_before: true,
        want_after: true,
    }
}

fn renew() -> StoreRequest {
    StoreRequest::UpdateRun {
        run_id: RUN.to_owned(),
        when: holds_token(&token()),
        set: vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(60_000)), (RunCol::UpdatedAt, Expr::Now)],
        want_before: false,
        want_after: true,
    }
}

fn mark_dispatched() -> StoreRequest {
    let tok = token();
    StoreRequest::UpdateIntent {
        run_id: RUN.to_owned(),
        effect_key: "telegram:abc".to_owned(),
        when: Cond::And(vec![
            Cond::Eq(IntentCol::State, Val::Text("intent".to_owned())),
            Cond::RunHeldBy { owner: tok.owner.clone(), lease_expires_at: tok.lease_expires_at, epoch: tok.epoch },
        ]),
        set: vec![
            (IntentCol::State, Expr::Val(Val::Text("dispatched".to_owned()))),
            (IntentCol::FenceOwner, Expr::Val(Val::Text(tok.owner.clone()))),
            (IntentCol::FenceExpiresAt, Expr::Val(Val::Time(tok.lease_expires_at))),
            (IntentCol::FenceEpoch, Expr::Val(Val::Int(3))),
        ],
        log: Some(DispatchLogEntry {
            run_id: RUN.to_owned(),
            effect_key: "telegram:abc".to_owned(),
            attempt: 0,
            outcome: "reconciled".to_owned(),
            at: None,
            detail: Some(serde_json::json!({"reopened": true})),
        }),
    }
}

/// One request of every kind (and both shapes of the ones with options).
fn samples() -> Vec<StoreRequest> {
    vec![
        StoreRequest::Now,
        StoreRequest::ReadRun { run_id: RUN.to_owned() },
        acquire(),
        renew(),
        StoreRequest::ScanRuns {
            when: Cond::And(vec![held(), Cond::OwnerInstanceDead { ttl_ms: 90_000 }]),
            order: RunOrder::ExpiresAt,
            limit: 100,
        },
        StoreRequest::ScanRuns { when: Cond::True, order: RunOrder::UpdatedAtDesc, limit: 10 },
        StoreRequest::EnsureRun(NewRun {
            idempotency_key: "heart:resource:abc".to_owned(),
            objective: "mutex".to_owned(),
            created_by: "heart-fleet".to_owned(),
        }),
        StoreRequest::ClaimIntent(NewIntent {
            run_id: RUN.to_owned(),
            effect_key: "telegram:abc".to_owned(),
            channel: "telegram".to_owned(),
            payload_digest: "sha256:x".to_owned(),
        }),
        mark_dispatched(),
        StoreRequest::UpdateIntent {
            run_id: RUN.to_owned(),
            effect_key: "k".to_owned(),
            when: Cond::True,
            set: vec![(IntentCol::Attempts, Expr::Add(IntentCol::Attempts, 1))],
            log: None,
        },
        StoreRequest::ScanIntents {
            when: Cond::And(vec![
                Cond::Eq(IntentCol::State, Val::Text("dispatched".to_owned())),
                Cond::Not(Box::new(Cond::LiveAt(IntentCol::FenceExpiresAt))),
            ]),
            limit: 50,
        },
        StoreRequest::ReadLog { run_id: RUN.to_owned(), effect_key: "k".to_owned() },
        StoreRequest::UpsertInstance {
            instance_id: "w-1".to_owned(),
            hostname: Some("host".to_owned()),
            pid: None,
            metadata: Some(serde_json::json!({"v": 1})),
        },
        StoreRequest::UpdateInstances {
            when: Cond::OlderThan(InstanceCol::LastHeartbeat, 90_000),
            set: vec![(InstanceCol::Status, Expr::Val(Val::Text("dead".to_owned())))],
        },
        StoreRequest::ScanInstances {
            when: Cond::Not(Box::new(Cond::Eq(InstanceCol::Status, Val::Text("dead".to_owned())))),
        },
    ]
}

/// Placeholder numbers used in `sql`.
fn placeholders(sql: &str, sigil: char) -> Vec<usize> {
    let mut out = Vec::new();
    let b = sql.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == sigil as u8 {
            let start = i + 1;
            let mut end = start;
            while end < b.len() && b[end].is_ascii_digit() {
                end += 1;
            }
            if end > start {
                out.push(sql[start..end].parse().unwrap());
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn every_statement_numbers_its_parameters_densely() {
    for req in samples() {
        for dialect in [Dialect::Postgres, Dialect::Sqlite] {
            let stmts = render(&req, dialect).unwrap();
            assert_eq!(stmts.len(), statement_count(&req, dialect), "{req:?}");
            if dialect == Dialect::Postgres {
                assert_eq!(stmts.len(), 1);
                assert!(stmts[0].sql.starts_with(PG_CLOCK), "{}", stmts[0].sql);
                assert!(!stmts[0].params.contains(&SqlParam::Now));
                assert_eq!(stmts[0].sql.matches("clock_timestamp()").count(), 1);
            } else {
                assert_eq!(stmts[0].sql, SQLITE_CLOCK);
                assert!(!stmts.iter().any(|s| s.sql.contains("'now'") && s.sql != SQLITE_CLOCK));
            }
            let sigil = if dialect == Dialect::Postgres { '$' } else { '?' };
            for s in &stmts {
                let used: std::collections::BTreeSet<usize> = placeholders(&s.sql, sigil).into_iter().collect();
                let want: std::collections::BTreeSet<usize> = (1..=s.params.len()).collect();
                assert_eq!(used, want, "{dialect:?} {}", s.sql);
                assert!(s.params.iter().filter(|p| **p == SqlParam::Now).count() <= 1);
            }
        }
    }
}

#[test]
fn renew_renders_one_guarded_update_in_postgres() {
    let s = &render(&renew(), Dialect::Postgres).unwrap()[0];
    assert_eq!(
        s.sql,
        "WITH clk AS MATERIALIZED (SELECT date_trunc('milliseconds', clock_timestamp()) AS now), \
         upd AS (UPDATE agent_runs SET lease_expires_at = (clk.now + $2::bigint * interval '1 millisecond'), \
         updated_at = clk.now FROM clk WHERE agent_runs.id = $1::text::uuid AND \
         (agent_runs.status IN ('leased', 'running') AND agent_runs.lease_owner = $3::text \
         AND date_trunc('milliseconds', agent_runs.lease_expires_at) = $4::text::timestamptz \
         AND (agent_runs.lease_expires_at IS NOT NULL AND agent_runs.lease_expires_at > clk.now) \
         AND agent_runs.fencing_epoch = $5::bigint) RETURNING agent_runs.*) \
         SELECT to_char(clk.now AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS now, \
         upd.id::text AS id, upd.task_id AS task_id, upd.assignment_id::text AS assignment_id, \
         upd.objective AS objective, to_json(upd.required_capabilities)::text AS required_capabilities, \
         upd.status AS status, upd.assigned_agent AS assigned_agent, upd.lease_owner AS lease_owner, \
         to_char(upd.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS lease_expires_at, \
         upd.retries AS retries, upd.budget::text AS budget, upd.approval_state AS approval_state, \
         upd.visibility AS visibility, upd.idempotency_key AS idempotency_key, upd.created_by AS created_by, \
         to_char(upd.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS created_at, \
         to_char(upd.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS updated_at, \
         upd.fencing_epoch AS fencing_epoch FROM clk LEFT JOIN upd ON TRUE"
    );
    assert_eq!(
        s.params,
        vec![
            SqlParam::Text(RUN.to_owned()),
            SqlParam::Int(60_000),
            SqlParam::Text("worker-A".to_owned()),
            SqlParam::Text("2026-07-30T00:01:00.000Z".to_owned()),
            SqlParam::Int(3),
        ]
    );
}

#[test]
fn renew_renders_clock_and_update_in_sqlite() {
    let stmts = render(&renew(), Dialect::Sqlite).unwrap();
    assert_eq!(stmts.len(), 2);
    let s = &stmts[1];
    assert_eq!(
        s.sql,
        format!(
            "UPDATE agent_runs SET lease_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', ?2, ?3), updated_at = ?2 \
             WHERE agent_runs.id = ?1 AND (agent_runs.status IN ('leased', 'running') \
             AND agent_runs.lease_owner = ?4 AND agent_runs.lease_expires_at = ?5 \
             AND (agent_runs.lease_expires_at IS NOT NULL AND agent_runs.lease_expires_at > ?2) \
             AND agent_runs.fencing_epoch = ?6) RETURNING {}",
            select_list(Dialect::Sqlite, &RUN_COLUMNS, "", "")
        )
    );
    assert_eq!(
        s.params,
        vec![
            SqlParam::Text(RUN.to_owned()),
            SqlParam::Now,
            SqlParam::Text("+60.000 seconds".to_owned()),
            SqlParam::Text("worker-A".to_owned()),
            SqlParam::Text("2026-07-30T00:01:00.000Z".to_owned()),
            SqlParam::Int(3),
        ]
    );
}

#[test]
fn acquire_locks_the_row_before_and_reports_it() {
    let s = &render(&acquire(), Dialect::Postgres).unwrap()[0];
    assert!(s.sql.contains(
        "prev AS MATERIALIZED (SELECT agent_runs.* FROM agent_runs WHERE agent_runs.id = $1::text::uuid FOR UPDATE)"
    ));
    assert!(s.sql.contains("UPDATE agent_runs SET lease_owner = $2::text, "));
    assert!(s.sql.contains("FROM clk, prev WHERE agent_runs.id = prev.id AND ("));
    assert!(s.sql.contains(
        "retries = CASE WHEN agent_runs.status = 'ready' THEN (agent_runs.retries + $5::bigint) \
         ELSE (agent_runs.retries + $6::bigint) END"
    ));
    assert!(s.sql.contains("NOT COALESCE(NOT COALESCE(agent_runs.retries <= $"));
    assert!(s.sql.contains("prev.id::text AS b_id"));
    assert!(s.sql.contains("FROM clk LEFT JOIN prev ON TRUE LEFT JOIN upd ON TRUE"));
    let lite = render(&acquire(), Dialect::Sqlite).unwrap();
    assert_eq!(lite.len(), 3);
    assert!(lite[1].sql.starts_with("SELECT id, task_id,"));
    assert_eq!(lite[1].params, vec![SqlParam::Text(RUN.to_owned())]);
    assert!(lite[2].sql.starts_with("UPDATE agent_runs SET lease_owner = ?2, "));
}

#[test]
fn intents_check_the_run_and_log_only_on_a_hit() {
    let s = &render(&mark_dispatched(), Dialect::Postgres).unwrap()[0];
    assert!(s.sql.contains(
        "EXISTS (SELECT 1 FROM agent_runs hr WHERE hr.id = effect_intents.run_id AND hr.status IN ('leased', 'running') \
         AND hr.lease_owner = $"
    ));
    assert!(s.sql.contains("AND hr.lease_expires_at > clk.now AND hr.fencing_epoch = $"));
    assert!(s.sql.contains("FROM clk WHERE EXISTS (SELECT 1 FROM upd))"));
    let lite = render(&mark_dispatched(), Dialect::Sqlite).unwrap();
    assert_eq!(lite.len(), 3);
    assert!(lite[1].sql.starts_with("INSERT INTO outbox_dispatch_log"));
    assert!(lite[1].sql.contains("FROM effect_intents WHERE effect_intents.run_id = ?"));
    assert!(lite[2].sql.starts_with("UPDATE effect_intents SET state = 'dispatched', fence_owner = ?"));
    let claim = render(&samples()[7], Dialect::Postgres).unwrap();
    assert!(claim[0].sql.contains("ON CONFLICT (run_id, effect_key) DO NOTHING"));
    assert!(claim[0].sql.contains("jsonb_build_object('channel', $3::text)"));
}

#[test]
fn plain_labels_are_literals_and_everything_else_a_parameter() {
    let mut b = Builder::new(Dialect::Postgres);
    assert_eq!(cond(&mut b, &held()).unwrap(), "agent_runs.status IN ('leased', 'running')");
    let odd = Cond::Eq(RunCol::Status, Val::Text("it's".into()));
    assert_eq!(cond(&mut b, &odd).unwrap(), "agent_runs.status = $1::text");
    let owner = Cond::Eq(RunCol::LeaseOwner, Val::Text("leased".into()));
    assert_eq!(cond(&mut b, &owner).unwrap(), "agent_runs.lease_owner = $2::text");
    let state = Cond::Eq(IntentCol::State, Val::Text("dispatched".into()));
    assert_eq!(cond(&mut b, &state).unwrap(), "effect_intents.state = 'dispatched'");
    assert_eq!(b.params, vec![SqlParam::Text("it's".into()), SqlParam::Text("leased".into())]);
    for (text, ok) in
        [("ready", true), ("waiting_approval", true), ("", false), ("Ready", false), ("a'b", false), ("a b", false)]
    {
        assert_eq!(is_label(text), ok, "{text:?}");
    }
}

#[test]
fn conditions_are_two_valued_and_type_safe() {
    let mut b = Builder::new(Dialect::Postgres);
    let not_in = Cond::Not(Box::new(Cond::In(RunCol::LeaseOwner, vec![Val::Text("a".into()), Val::Null, Val::Int(1)])));
    assert_eq!(cond(&mut b, &not_in).unwrap(), "NOT COALESCE(agent_runs.lease_owner IN ($1::text), FALSE)");
    assert_eq!(cond(&mut b, &Cond::Eq(RunCol::Retries, Val::Text("1".into()))).unwrap(), "FALSE");
    assert_eq!(cond(&mut b, &Cond::Eq(RunCol::Id, Val::Text("not-a-uuid".into()))).unwrap(), "FALSE");
    assert_eq!(cond(&mut b, &Cond::Eq(RunCol::LeaseOwner, Val::Null)).unwrap(), "agent_runs.lease_owner IS NULL");
    assert_eq!(cond(&mut b, &Cond::ExpiredAt(RunCol::Status)).unwrap(), "TRUE");
    assert_eq!(cond(&mut b, &Cond::<RunCol>::Or(vec![])).unwrap(), "FALSE");
    assert_eq!(cond(&mut b, &Cond::<RunCol>::And(vec![])).unwrap(), "TRUE");
    assert_eq!(cond(&mut b, &Cond::<IntentCol>::OwnerInstanceDead { ttl_ms: 1 }).unwrap(), "FALSE");
    assert_eq!(
        cond(&mut b, &Cond::StartsWith(RunCol::IdempotencyKey, "heart:resource:".into())).unwrap(),
        "starts_with(agent_runs.idempotency_key, $2::text)"
    );
    assert_eq!(
        cond(&mut b, &Cond::OlderThan(InstanceCol::LastHeartbeat, 90_000)).unwrap(),
        "agent_instances.last_heartbeat < (clk.now + $3::bigint * interval '1 millisecond')"
    );
    assert_eq!(b.params[2], SqlParam::Int(-90_000));
    let mut l = Builder::new(Dialect::Sqlite);
    assert_eq!(
        cond(&mut l, &Cond::StartsWith(RunCol::IdempotencyKey, "p".into())).unwrap(),
        "substr(agent_runs.idempotency_key, 1, length(?1)) = ?1"
    );
    assert_eq!(cond(&mut l, &Cond::Not(Box::new(Cond::True::<RunCol>))).unwrap(), "NOT COALESCE(1, 0)");
}

#[test]
fn malformed_writes_are_refused() {
    let bad = |set: Vec<Assign<RunCol>>| StoreRequest::UpdateRun {
        run_id: RUN.into(),
        when: Cond::True,
        set,
        want_before: false,
        want_after: true,
    };
    for set in [
        vec![(RunCol::Id, Expr::Val(Val::Text(RUN.into())))],
        vec![(RunCol::IdempotencyKey, Expr::Val(Val::Text("k".into())))],
        vec![(RunCol::Retries, Expr::Now)],
        vec![(RunCol::Retries, Expr::Val(Val::Text("1".into())))],
        vec![(RunCol::UpdatedAt, Expr::Add(RunCol::Retries, 1))],
        vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(MAX_SHIFT_MS + 1))],
    ] {
        for d in [Dialect::Postgres, Dialect::Sqlite] {
            let err = render(&bad(set.clone()), d).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidInput, "{set:?}");
        }
    }
    let claim = StoreRequest::ClaimIntent(NewIntent {
        run_id: "run-1".into(),
        effect_key: "k".into(),
        channel: "internal".into(),
        payload_digest: String::new(),
    });
    assert_eq!(render(&claim, Dialect::Postgres).unwrap_err().code, ErrorCode::InvalidInput);
    assert_eq!(render(&claim, Dialect::Sqlite).unwrap().len(), 4);
}

#[test]
fn assignments_keep_the_last_of_a_column_and_never_render_empty() {
    let mut b = Builder::new(Dialect::Postgres);
    let set = vec![(RunCol::Retries, Expr::Val(Val::Int(1))), (RunCol::Retries, Expr::Val(Val::Int(2)))];
    assert_eq!(set_list(&mut b, &set).unwrap(), "retries = $1::bigint");
    assert_eq!(b.params, vec![SqlParam::Int(2)]);
    assert_eq!(set_list::<RunCol>(&mut b, &[]).unwrap(), "status = agent_runs.status");
    let mut l = Builder::new(Dialect::Sqlite);
    let set = vec![(RunCol::LeaseOwner, Expr::Val(Val::Null))];
    assert_eq!(set_list(&mut l, &set).unwrap(), "lease_owner = NULL");
    let mut p = Builder::new(Dialect::Postgres);
    assert_eq!(set_list(&mut p, &set).unwrap(), "lease_owner = NULL::text");
}

#[test]
fn non_uuid_run_ids_match_nothing_in_postgres() {
    let s = &render(&StoreRequest::ReadRun { run_id: "run-1".into() }, Dialect::Postgres).unwrap()[0];
    assert!(s.sql.ends_with("FROM clk LEFT JOIN agent_runs ON FALSE"));
    assert!(s.params.is_empty());
    let upd = StoreRequest::UpdateIntent {
        run_id: "run-1".into(),
        effect_key: "k".into(),
        when: Cond::True,
        set: vec![],
        log: None,
    };
    let s = &render(&upd, Dialect::Postgres).unwrap()[0];
    assert!(s.sql.ends_with("LEFT JOIN effect_intents ON FALSE"));
    for ok in [
        RUN,
        "0B3F5C1E9D2A4C1B8E7F1234567890AB",
        "{0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab}",
        "0b3f-5c1e-9d2a-4c1b-8e7f-1234-5678-90ab",
        "0b3f5c1e-9d2a-4c1b-8e7f-12345678-90ab",
    ] {
        assert!(pg_uuid_ok(ok), "{ok}");
    }
    for bad in [
        "",
        "run-1",
        "0b3f5c1e-9d2a-4c1b-8e7f-1234567890a",
        "0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab-",
        "0b3f5c1-e9d2a-4c1b-8e7f-1234567890ab",
        "{0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab",
        "0b3f5c1e-9d2a-4c1b-8e7f-1234567890abc",
        "-0b3f5c1e9d2a4c1b8e7f1234567890ab",
        " 0b3f5c1e9d2a4c1b8e7f1234567890ab",
    ] {
        assert!(!pg_uuid_ok(bad), "{bad}");
    }
}

#[test]
fn sqlite_shifts_are_exact_modifiers() {
    assert_eq!(sqlite_shift_modifier(60_000), "+60.000 seconds");
    assert_eq!(sqlite_shift_modifier(-90_001), "-90.001 seconds");
    assert_eq!(sqlite_shift_modifier(5), "+0.005 seconds");
    assert_eq!(sqlite_shift_modifier(i64::MIN), "-9223372036854775.808 seconds");
}

fn text(v: &str) -> SqlValue {
    SqlValue::Text(v.to_owned())
}

fn run_row(prefix: &str, status: &str, epoch: i64) -> SqlRow {
    let c = |n: &str, v: SqlValue| (format!("{prefix}{n}"), v);
    vec![
        c("id", text(RUN)),
        c("task_id", SqlValue::Null),
        c("assignment_id", text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
        c("objective", text("run")),
        c("required_capabilities", text("[\"x\"]")),
        c("status", text(status)),
        c("assigned_agent", SqlValue::Null),
        c("lease_owner", text("worker-A")),
        c("lease_expires_at", text("2026-07-30T00:01:00.000Z")),
        c("retries", SqlValue::Int(0)),
        c("budget", text("{\"max\":1}")),
        c("approval_state", text("auto")),
        c("visibility", text("team")),
        c("idempotency_key", text("job:1")),
        c("created_by", text("me")),
        c("created_at", text("2026-07-30 00:00:00.123456+00")),
        c("updated_at", text("2026-07-30T00:00:00.000Z")),
        c("fencing_epoch", text(&epoch.to_string())),
    ]
}

fn nulls(prefix: &str) -> SqlRow {
    RUN_COLUMNS.iter().map(|(n, _)| (format!("{prefix}{n}"), SqlValue::Null)).collect()
}

#[test]
fn decodes_a_postgres_write_hit_and_miss() {
    let now = ("now".to_owned(), text("2026-07-30T00:00:01.000Z"));
    let mut hit = vec![now.clone()];
    hit.extend(run_row("b_", "ready", 2));
    hit.extend(run_row("", "leased", 3));
    let answer = decode(&acquire(), Dialect::Postgres, vec![vec![hit]]).unwrap();
    assert_eq!(answer.now, t("2026-07-30T00:00:01.000Z"));
    let StoreReply::RunWrite { before: Some(before), after: Some(after) } = answer.reply else { panic!() };
    assert_eq!((before.status, before.fencing_epoch), (RunStatus::Ready, 2));
    assert_eq!((after.status, after.fencing_epoch), (RunStatus::Leased, 3));
    assert_eq!(after.created_at, t("2026-07-30T00:00:00.123Z"));
    assert_eq!(after.required_capabilities, vec!["x".to_owned()]);
    assert_eq!(after.budget, Some(serde_json::json!({"max": 1})));
    let mut miss = vec![now];
    miss.extend(nulls("b_"));
    miss.extend(nulls(""));
    let answer = decode(&acquire(), Dialect::Postgres, vec![vec![miss]]).unwrap();
    assert_eq!(answer.reply, StoreReply::RunWrite { before: None, after: None });
}

#[test]
fn a_postgres_acquire_selects_only_the_assigned_columns_of_the_row_before() {
    let s = render(&acquire(), Dialect::Postgres).unwrap().remove(0);
    let before: Vec<&str> = s.sql.split(" AS b_").skip(1).map(|rest| rest.split([',', ' ']).next().unwrap()).collect();
    let StoreRequest::UpdateRun { set, .. } = acquire() else { panic!() };
    let mut expected = vec!["id"];
    expected.extend(RUN_COLUMNS.iter().map(|(n, _)| *n).filter(|n| set.iter().any(|(c, _)| c.name() == *n)));
    assert_eq!(before, expected);
    // The decoder takes the rest from the row after: only the assigned columns differ.
    let mut hit = vec![("now".to_owned(), text("2026-07-30T00:00:01.000Z"))];
    let assigned: Vec<(String, SqlValue)> =
        run_row("b_", "ready", 2).into_iter().filter(|(n, _)| before.contains(&&n[2..])).collect();
    hit.extend(assigned);
    hit.extend(run_row("", "leased", 3));
    let answer = decode(&acquire(), Dialect::Postgres, vec![vec![hit]]).unwrap();
    let StoreReply::RunWrite { before: Some(b), after: Some(a) } = answer.reply else { panic!() };
    assert_eq!((b.status, b.fencing_epoch, a.status, a.fencing_epoch), (RunStatus::Ready, 2, RunStatus::Leased, 3));
    assert_eq!((b.created_at, &b.budget, &b.objective), (a.created_at, &a.budget, &a.objective));
}

#[test]
fn decodes_sqlite_row_sets() {
    let clock: Vec<Vec<SqlRow>> = vec![vec![vec![("now".to_owned(), text("2026-07-30T00:00:01.000Z"))]]];
    let mut sets = clock.clone();
    sets.push(vec![run_row("", "ready", 2)]);
    sets.push(vec![]);
    let answer = decode(&acquire(), Dialect::Sqlite, sets).unwrap();
    assert_eq!(answer.reply, StoreReply::RunWrite { before: None, after: None });
    let intent: SqlRow = INTENT_COLUMNS
        .iter()
        .map(|(n, _)| {
            let v = match *n {
                "run_id" => text(RUN),
                "effect_key" => text("telegram:abc"),
                "state" => text("intent"),
                "channel" => text("telegram"),
                "payload_digest" => text("sha256:x"),
                "attempts" => SqlValue::Int(0),
                "created_at" => text("2026-07-30T00:00:01.000Z"),
                _ => SqlValue::Null,
            };
            ((*n).to_owned(), v)
        })
        .collect();
    let claim = &samples()[7];
    let mut sets = clock.clone();
    sets.extend([vec![], vec![vec![("run_id".to_owned(), text(RUN))]], vec![intent.clone()]]);
    let answer = decode(claim, Dialect::Sqlite, sets).unwrap();
    let StoreReply::Claim { intent: row, claimed: true } = answer.reply else { panic!() };
    assert_eq!(row.state, IntentState::Intent);
    let mut sets = clock;
    sets.extend([vec![], vec![], vec![intent]]);
    assert!(matches!(decode(claim, Dialect::Sqlite, sets).unwrap().reply, StoreReply::Claim { claimed: false, .. }));
}

#[test]
fn malformed_rows_are_protocol_errors() {
    let now = ("now".to_owned(), text("2026-07-30T00:00:01.000Z"));
    let read = StoreRequest::ReadRun { run_id: RUN.into() };
    let cases: Vec<Vec<Vec<SqlRow>>> = vec![
        vec![],
        vec![vec![]],
        vec![vec![vec![now.clone()]]],
        vec![vec![{
            let mut r = vec![now.clone()];
            r.extend(run_row("", "sleeping", 0));
            r
        }]],
        vec![vec![{
            let mut r = vec![("now".to_owned(), text("yesterday"))];
            r.extend(run_row("", "ready", 0));
            r
        }]],
        vec![vec![
            {
                let mut r = vec![now.clone()];
                r.extend(run_row("", "ready", 0));
                r
            };
            2
        ]],
        vec![vec![{
            let mut r = vec![now.clone()];
            let mut run = run_row("", "ready", 0);
            run[9].1 = text("many");
            r.extend(run);
            r
        }]],
    ];
    for rows in cases {
        let err = decode(&read, Dialect::Postgres, rows.clone()).unwrap_err();
        assert_eq!(err.code, ErrorCode::StoreProtocol, "{rows:?}");
    }
}

#[test]
fn receipts_insert_their_fields() {
    let receipt = serde_json::json!({
        "schemaVersion": "zao.heart.receipt.v1", "event": "acquired", "runId": "r", "owner": "o",
        "leaseExpiresAt": "2026-07-30T00:01:00.000Z", "effectKey": null, "at": "2026-07-30T00:00:00.000Z",
        "digest": "sha256:dreamnet-sorted-json:v0:00"
    });
    let s = receipt_insert(Dialect::Postgres, &receipt).unwrap();
    assert!(s.sql.contains(
        "VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, NULL::text, $6::text, $7::text, $8::text::jsonb)"
    ));
    assert_eq!(s.params.len(), 8);
    assert!(receipt_insert(Dialect::Sqlite, &serde_json::json!({"event": 1})).is_err());
}

#[test]
fn migrations_are_listed_in_order() {
    let pg = migrations(Dialect::Postgres);
    assert_eq!(
        pg.iter().map(|m| m.0).collect::<Vec<_>>(),
        ["0001_reference_schema", "0002_heart_fleet", "0003_receipt_chain", "0004_console_indexes"]
    );
    assert!(pg[1].1.contains("heart_fencing_epoch_monotonic"));
    let lite = migrations(Dialect::Sqlite);
    assert!(lite[0].1.contains("CREATE TRIGGER IF NOT EXISTS heart_fencing_epoch_monotonic"));
}

#[test]
fn statements_and_values_serialize_for_bindings() {
    let s = Statement { sql: "x".into(), params: vec![SqlParam::Int(1), SqlParam::Text("a".into()), SqlParam::Now] };
    assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"sql":"x","params":[{"int":1},{"text":"a"},"now"]}"#);
    let v: Vec<SqlValue> = serde_json::from_str(r#"[null, 1, 1.5, "t", true]"#).unwrap();
    assert_eq!(v, vec![SqlValue::Null, SqlValue::Int(1), SqlValue::Real(1.5), text("t"), SqlValue::Bool(true)]);
}
