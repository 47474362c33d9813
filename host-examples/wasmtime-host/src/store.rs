//! The host half of the typed `lease-store`: the component's WIT `store-request` checked
//! into the core's [`StoreRequest`] (run on any [`heart_fleet_core::LeaseStore`]), and the
//! core's [`StoreAnswer`] as the WIT `store-answer`.
//!
//! A request is input from a guest and checked like any input: a node index outside its
//! list or not after its parent (the only way a list could form a cycle), a node referred to
//! twice, a tree nested deeper than [`MAX_DEPTH`], a column of another table, a timestamp
//! outside years 0000-9999 or a `json` value that is not JSON is a `protocol` error, and the
//! store is not called.

use heart_fleet_core::model::DispatchLogEntry;
use heart_fleet_core::request::{
    Assign, Cond, Expr, InstanceCol, IntentCol, NewIntent, NewRun, RunCol, RunOrder, StoreReply, Val,
};
use heart_fleet_core::{StoreAnswer, StoreRequest, Timestamp};
use serde_json::Value;

use crate::bindings::heart::fleet::lease_store as ls;
use crate::convert::{instance_out as instance, intent_out as intent, run_out as run};

/// The deepest condition or expression tree a request may hold (the core's are a few
/// levels deep); deeper ones are refused before any recursion could exhaust the stack.
pub const MAX_DEPTH: usize = 32;

type Checked<T> = Result<T, String>;

// ------------------------------------------------------------------------------------------
// Requests
// ------------------------------------------------------------------------------------------

/// A table's columns, from the WIT `column`.
trait Column: Sized {
    /// The table, for messages.
    const TABLE: &'static str;
    fn from_wit(c: &ls::Column) -> Option<Self>;
}

impl Column for RunCol {
    const TABLE: &'static str = "agent_runs";
    fn from_wit(c: &ls::Column) -> Option<Self> {
        use ls::RunColumn as W;
        let ls::Column::Run(c) = c else { return None };
        Some(match c {
            W::Id => RunCol::Id,
            W::Status => RunCol::Status,
            W::LeaseOwner => RunCol::LeaseOwner,
            W::LeaseExpiresAt => RunCol::LeaseExpiresAt,
            W::Retries => RunCol::Retries,
            W::FencingEpoch => RunCol::FencingEpoch,
            W::UpdatedAt => RunCol::UpdatedAt,
            W::IdempotencyKey => RunCol::IdempotencyKey,
        })
    }
}

impl Column for IntentCol {
    const TABLE: &'static str = "effect_intents";
    fn from_wit(c: &ls::Column) -> Option<Self> {
        use ls::IntentColumn as W;
        let ls::Column::Intent(c) = c else { return None };
        Some(match c {
            W::State => IntentCol::State,
            W::Channel => IntentCol::Channel,
            W::PayloadDigest => IntentCol::PayloadDigest,
            W::FenceOwner => IntentCol::FenceOwner,
            W::FenceExpiresAt => IntentCol::FenceExpiresAt,
            W::FenceEpoch => IntentCol::FenceEpoch,
            W::ExternalRef => IntentCol::ExternalRef,
            W::Attempts => IntentCol::Attempts,
            W::LastError => IntentCol::LastError,
            W::CommittedAt => IntentCol::CommittedAt,
        })
    }
}

impl Column for InstanceCol {
    const TABLE: &'static str = "heart_instances";
    fn from_wit(c: &ls::Column) -> Option<Self> {
        use ls::InstanceColumn as W;
        let ls::Column::Instance(c) = c else { return None };
        Some(match c {
            W::InstanceId => InstanceCol::InstanceId,
            W::Status => InstanceCol::Status,
            W::LastHeartbeat => InstanceCol::LastHeartbeat,
        })
    }
}

fn column<C: Column>(c: &ls::Column) -> Checked<C> {
    C::from_wit(c).ok_or_else(|| format!("{c:?} is not a column of {}", C::TABLE))
}

fn time(what: &str, ms: i64) -> Checked<Timestamp> {
    Timestamp::from_millis(ms).ok_or_else(|| format!("{what} is {ms} ms, outside years 0000-9999"))
}

fn json(what: &str, text: &str) -> Checked<Value> {
    serde_json::from_str(text).map_err(|e| format!("{what} is not JSON: {e}"))
}

fn opt_json(what: &str, text: Option<String>) -> Checked<Option<Value>> {
    text.map(|t| json(what, &t)).transpose()
}

fn value(v: &ls::Value) -> Checked<Val> {
    Ok(match v {
        ls::Value::Null => Val::Null,
        ls::Value::Text(t) => Val::Text(t.clone()),
        ls::Value::Int(i) => Val::Int(*i),
        ls::Value::Time(ms) => Val::Time(time("a time value", *ms)?),
        ls::Value::Json(t) => Val::Json(json("a json value", t)?),
    })
}

/// Walks one node list: each node is read once, children only after their parent.
struct Tree<'a, N> {
    nodes: &'a [N],
    read: Vec<bool>,
    what: &'static str,
}

impl<'a, N> Tree<'a, N> {
    fn new(what: &'static str, nodes: &'a [N]) -> Checked<Tree<'a, N>> {
        if nodes.is_empty() {
            return Err(format!("an empty {what} (the root is node 0)"));
        }
        Ok(Tree { nodes, read: vec![false; nodes.len()], what })
    }

    /// Node `index`, the child of node `parent` (`None`: the root), at `depth`.
    fn node(&mut self, index: u32, parent: Option<usize>, depth: usize) -> Checked<(usize, &'a N)> {
        let what = self.what;
        let len = self.nodes.len();
        let i = usize::try_from(index).unwrap_or(usize::MAX);
        if i >= len {
            return Err(format!("{what} node {index} is outside its list of {len}"));
        }
        if let Some(p) = parent
            && i <= p
        {
            return Err(format!("{what} node {p} refers to node {i}, which is not after it"));
        }
        if depth > MAX_DEPTH {
            return Err(format!("a {what} nested deeper than {MAX_DEPTH}"));
        }
        if std::mem::replace(&mut self.read[i], true) {
            return Err(format!("{what} node {i} is referred to twice"));
        }
        Ok((i, &self.nodes[i]))
    }
}

fn condition<C: Column>(nodes: &[ls::Condition]) -> Checked<Cond<C>> {
    let mut tree = Tree::new("condition", nodes)?;
    condition_at(&mut tree, 0, None, 0)
}

fn condition_at<C: Column>(
    tree: &mut Tree<'_, ls::Condition>,
    index: u32,
    parent: Option<usize>,
    depth: usize,
) -> Checked<Cond<C>> {
    use ls::Condition as N;
    let (at, node) = tree.node(index, parent, depth)?;
    let children = |ix: &[u32], tree: &mut Tree<'_, ls::Condition>| -> Checked<Vec<Cond<C>>> {
        ix.iter().map(|&i| condition_at(tree, i, Some(at), depth + 1)).collect()
    };
    Ok(match node {
        N::Always => Cond::True,
        N::Eq(cv) => Cond::Eq(column(&cv.column)?, value(&cv.value)?),
        N::InList(cv) => Cond::In(column(&cv.column)?, cv.values.iter().map(value).collect::<Checked<_>>()?),
        N::AtMost(ci) => Cond::AtMost(column(&ci.column)?, ci.n),
        N::ExpiredAt(c) => Cond::ExpiredAt(column(c)?),
        N::LiveAt(c) => Cond::LiveAt(column(c)?),
        N::OlderThan(ci) => Cond::OlderThan(column(&ci.column)?, ci.n),
        N::StartsWith(cp) => Cond::StartsWith(column(&cp.column)?, cp.prefix.clone()),
        N::All(ix) => Cond::And(children(ix, tree)?),
        N::Any(ix) => Cond::Or(children(ix, tree)?),
        N::Not(i) => Cond::Not(Box::new(condition_at(tree, *i, Some(at), depth + 1)?)),
        N::RunHeldBy(h) => Cond::RunHeldBy {
            owner: h.owner.clone(),
            lease_expires_at: time("a held-by expiry", h.lease_expires_at)?,
            epoch: h.epoch,
        },
        N::OwnerInstanceDead(ttl_ms) => Cond::OwnerInstanceDead { ttl_ms: *ttl_ms },
    })
}

fn expression_at<C: Column>(
    tree: &mut Tree<'_, ls::Expression>,
    index: u32,
    parent: Option<usize>,
    depth: usize,
) -> Checked<Expr<C>> {
    use ls::Expression as N;
    let (at, node) = tree.node(index, parent, depth)?;
    Ok(match node {
        N::Value(v) => Expr::Val(value(v)?),
        N::Now => Expr::Now,
        N::NowPlus(ms) => Expr::NowPlus(*ms),
        N::Add(ci) => Expr::Add(column(&ci.column)?, ci.n),
        N::Choose(c) => Expr::Case(
            Box::new(condition(&c.when)?),
            Box::new(expression_at(tree, c.then, Some(at), depth + 1)?),
            Box::new(expression_at(tree, c.otherwise, Some(at), depth + 1)?),
        ),
    })
}

fn assignments<C: Column>(set: &[ls::Assignment]) -> Checked<Vec<Assign<C>>> {
    set.iter()
        .map(|a| {
            let mut tree = Tree::new("expression", &a.expression)?;
            Ok((column(&a.column)?, expression_at(&mut tree, 0, None, 0)?))
        })
        .collect()
}

fn log_entry(e: ls::DispatchLogEntry) -> Checked<DispatchLogEntry> {
    Ok(DispatchLogEntry {
        at: e.at.map(|ms| time("a log entry's at", ms)).transpose()?,
        detail: opt_json("a log entry's detail", e.detail)?,
        run_id: e.run_id,
        effect_key: e.effect_key,
        attempt: e.attempt,
        outcome: e.outcome,
    })
}

/// The component's request as the core's, checked.
pub fn request(req: ls::StoreRequest) -> Checked<StoreRequest> {
    use ls::StoreRequest as R;
    Ok(match req {
        R::Now => StoreRequest::Now,
        R::ReadRun(run_id) => StoreRequest::ReadRun { run_id },
        R::UpdateRun(u) => StoreRequest::UpdateRun {
            when: condition(&u.when)?,
            set: assignments(&u.set)?,
            run_id: u.run_id,
            want_before: u.want_before,
            want_after: u.want_after,
        },
        R::ScanRuns(s) => StoreRequest::ScanRuns {
            when: condition(&s.when)?,
            order: match s.order {
                ls::RunOrder::ExpiresAt => RunOrder::ExpiresAt,
                ls::RunOrder::UpdatedAtDesc => RunOrder::UpdatedAtDesc,
            },
            limit: s.limit,
        },
        R::EnsureRun(n) => StoreRequest::EnsureRun(NewRun {
            idempotency_key: n.idempotency_key,
            objective: n.objective,
            created_by: n.created_by,
        }),
        R::ClaimIntent(n) => StoreRequest::ClaimIntent(NewIntent {
            run_id: n.run_id,
            effect_key: n.effect_key,
            channel: n.channel,
            payload_digest: n.payload_digest,
        }),
        R::UpdateIntent(u) => StoreRequest::UpdateIntent {
            when: condition(&u.when)?,
            set: assignments(&u.set)?,
            log: u.log.map(log_entry).transpose()?,
            run_id: u.run_id,
            effect_key: u.effect_key,
        },
        R::ScanIntents(s) => StoreRequest::ScanIntents { when: condition(&s.when)?, limit: s.limit },
        R::ReadLog(e) => StoreRequest::ReadLog { run_id: e.run_id, effect_key: e.effect_key },
        R::UpsertInstance(u) => StoreRequest::UpsertInstance {
            metadata: opt_json("an instance's metadata", u.metadata)?,
            instance_id: u.instance_id,
            hostname: u.hostname,
            pid: u.pid,
        },
        R::UpdateInstances(u) => StoreRequest::UpdateInstances { when: condition(&u.when)?, set: assignments(&u.set)? },
        R::ScanInstances(when) => StoreRequest::ScanInstances { when: condition(&when)? },
    })
}

// ------------------------------------------------------------------------------------------
// Answers
// ------------------------------------------------------------------------------------------

fn entry(e: DispatchLogEntry) -> ls::DispatchLogEntry {
    ls::DispatchLogEntry {
        run_id: e.run_id,
        effect_key: e.effect_key,
        attempt: e.attempt,
        outcome: e.outcome,
        at: e.at.map(|t| t.0),
        detail: e.detail.map(|d| d.to_string()),
    }
}

/// The core's answer as the WIT answer.
pub fn answer(a: StoreAnswer) -> ls::StoreAnswer {
    use ls::StoreReply as R;
    let reply = match a.reply {
        StoreReply::Now => R::Now,
        StoreReply::Run { run: row } => R::Run(row.map(run)),
        StoreReply::RunWrite { before, after } => {
            R::RunWrite(ls::RunWrite { before: before.map(run), after: after.map(run) })
        }
        StoreReply::RunHit { hit } => R::RunHit(hit),
        StoreReply::Runs { runs } => R::Runs(runs.into_iter().map(run).collect()),
        StoreReply::Ensured { run: row, created } => R::Ensured(ls::Ensured { run: run(row), created }),
        StoreReply::Claim { intent: row, claimed } => R::Claim(ls::Claim { intent: intent(row), claimed }),
        StoreReply::Intent { intent: row } => R::Intent(row.map(intent)),
        StoreReply::Intents { intents } => R::Intents(intents.into_iter().map(intent).collect()),
        StoreReply::Log { entries } => R::Log(entries.into_iter().map(entry).collect()),
        StoreReply::Instances { instances } => R::Instances(instances.into_iter().map(instance).collect()),
    };
    ls::StoreAnswer { now: a.now.0, reply }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use ls::{Column, Condition as N, RunColumn};

    fn run_col(c: RunColumn) -> Column {
        Column::Run(c)
    }

    fn update(when: Vec<N>, set: Vec<ls::Assignment>) -> ls::StoreRequest {
        ls::StoreRequest::UpdateRun(ls::UpdateRun {
            run_id: "R1".into(),
            when,
            set,
            want_before: false,
            want_after: true,
        })
    }

    fn refused(req: ls::StoreRequest) -> String {
        match request(req) {
            Ok(r) => panic!("accepted: {r:?}"),
            Err(m) => m,
        }
    }

    #[test]
    fn a_tree_comes_back_as_the_core_condition() {
        let when = vec![
            N::All(vec![1, 2]),
            N::Eq(ls::ColumnValue { column: run_col(RunColumn::Status), value: ls::Value::Text("ready".into()) }),
            N::Not(3),
            N::LiveAt(run_col(RunColumn::LeaseExpiresAt)),
        ];
        let set = vec![ls::Assignment {
            column: run_col(RunColumn::LeaseExpiresAt),
            expression: vec![
                ls::Expression::Choose(ls::Choice { when: vec![N::Always], then: 1, otherwise: 2 }),
                ls::Expression::NowPlus(60_000),
                ls::Expression::Value(ls::Value::Null),
            ],
        }];
        let got = request(update(when, set)).unwrap();
        let want = StoreRequest::UpdateRun {
            run_id: "R1".into(),
            when: Cond::And(vec![
                Cond::Eq(RunCol::Status, Val::Text("ready".into())),
                Cond::Not(Box::new(Cond::LiveAt(RunCol::LeaseExpiresAt))),
            ]),
            set: vec![(
                RunCol::LeaseExpiresAt,
                Expr::Case(Box::new(Cond::True), Box::new(Expr::NowPlus(60_000)), Box::new(Expr::Val(Val::Null))),
            )],
            want_before: false,
            want_after: true,
        };
        assert_eq!(got, want);
    }

    #[test]
    fn a_write_that_wants_only_whether_it_hit_is_answered_run_hit() {
        let mut u = update(vec![N::Always], vec![]);
        if let ls::StoreRequest::UpdateRun(r) = &mut u {
            r.want_after = false;
        }
        let got = request(u).unwrap();
        assert!(matches!(got, StoreRequest::UpdateRun { want_after: false, .. }), "{got:?}");
        for hit in [true, false] {
            let a = answer(StoreAnswer { now: heart_fleet_core::Timestamp(0), reply: StoreReply::RunHit { hit } });
            assert!(matches!(a.reply, ls::StoreReply::RunHit(h) if h == hit));
        }
    }

    #[test]
    fn an_index_outside_the_list_is_refused() {
        let m = refused(update(vec![N::Not(7)], vec![]));
        assert!(m.contains("node 7 is outside its list of 1"), "{m}");
        let m = refused(update(vec![N::All(vec![1, u32::MAX])], vec![]));
        assert!(m.contains("outside its list"), "{m}");
    }

    #[test]
    fn a_cycle_is_refused() {
        // A node that is its own child, and a child that points back at its parent.
        let m = refused(update(vec![N::Not(0)], vec![]));
        assert!(m.contains("node 0 refers to node 0, which is not after it"), "{m}");
        let m = refused(update(vec![N::Not(1), N::Not(0)], vec![]));
        assert!(m.contains("node 1 refers to node 0"), "{m}");
        let expression = vec![
            ls::Expression::Choose(ls::Choice { when: vec![N::Always], then: 1, otherwise: 0 }),
            ls::Expression::Now,
        ];
        let set = vec![ls::Assignment { column: run_col(RunColumn::UpdatedAt), expression }];
        let m = refused(update(vec![N::Always], set));
        assert!(m.contains("expression node 0 refers to node 0"), "{m}");
    }

    #[test]
    fn a_node_shared_by_two_parents_is_refused() {
        let m = refused(update(vec![N::All(vec![1, 1]), N::Always], vec![]));
        assert!(m.contains("node 1 is referred to twice"), "{m}");
    }

    #[test]
    fn a_tree_deeper_than_the_bound_is_refused_without_recursing_further() {
        let mut when: Vec<N> = (1..=40).map(N::Not).collect();
        when.push(N::Always);
        let m = refused(update(when, vec![]));
        assert!(m.contains(&format!("nested deeper than {MAX_DEPTH}")), "{m}");
    }

    #[test]
    fn an_empty_tree_a_foreign_column_and_bad_values_are_refused() {
        assert!(refused(update(vec![], vec![])).contains("an empty condition"));
        let foreign = N::ExpiredAt(Column::Intent(ls::IntentColumn::FenceExpiresAt));
        assert!(refused(update(vec![foreign], vec![])).contains("is not a column of agent_runs"));
        let late = N::Eq(ls::ColumnValue { column: run_col(RunColumn::UpdatedAt), value: ls::Value::Time(i64::MAX) });
        assert!(refused(update(vec![late], vec![])).contains("outside years 0000-9999"));
        let json = N::Eq(ls::ColumnValue { column: run_col(RunColumn::Id), value: ls::Value::Json("{".into()) });
        assert!(refused(update(vec![json], vec![])).contains("is not JSON"));
        let empty_expression = ls::Assignment { column: run_col(RunColumn::Retries), expression: vec![] };
        assert!(refused(update(vec![N::Always], vec![empty_expression])).contains("an empty expression"));
    }
}
