//! The single transitions of an effect intent, as the reference's `DurableEffectLedger`
//! methods make them (`markDispatched`, `markCommitted`, `reopen`, `noteUnresolved`,
//! `abandon`): each is one conditional `update_intent` request with its dispatch-log entry.
//!
//! [`reconcile_outbox`](super::reconcile_outbox) writes its commits, reopenings and
//! abandonments through the same builders, and the bindings build a hand-driven transition
//! with [`Transition::request`], so what a transition sets and logs is written once.

use serde_json::{Value, json};

use crate::model::IntentState;
use crate::request::{Assign, Cond, Expr, IntentCol, StoreRequest, Val};
use crate::time::Timestamp;

/// How many UTF-16 code units of an error or reason an intent keeps (`last_error`).
pub const LAST_ERROR_UNITS: usize = 500;
/// How many UTF-16 code units of an abandon reason its dispatch-log entry keeps.
pub const LOG_REASON_UNITS: usize = 120;

/// One transition of an intent.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// `intent` → `dispatched`, the fence recorded (the reference's unfenced form: `sendOnce`
    /// conditions its dispatch on the run's lease as well).
    MarkDispatched {
        /// Who dispatched.
        fence_owner: String,
        /// Until when that holder's lease ran.
        fence_expires_at: Timestamp,
    },
    /// `dispatched` → `committed` with the evidence, logged `sent`.
    MarkCommitted {
        /// What the send answered.
        external_ref: Value,
    },
    /// `dispatched` → `intent` (proved not sent), the fence cleared, logged `reconciled`.
    Reopen {
        /// Why (kept to [`LAST_ERROR_UNITS`]).
        last_error: String,
    },
    /// One undecided reconcile pass on a dispatched intent: `attempts` = current + 1.
    NoteUnresolved {
        /// The attempts counted so far.
        current_attempts: i64,
    },
    /// `intent` or `dispatched` → `abandoned` (terminal, never resent), logged `abandoned`.
    Abandon {
        /// Why (kept to [`LAST_ERROR_UNITS`]; the log entry to [`LOG_REASON_UNITS`]).
        reason: String,
    },
}

/// How deep the evidence of a send may nest to be stored everywhere: it travels inside store
/// requests and answers (a few levels of their own) that every store, in every runtime,
/// parses with a recursion limit of 128 levels. Deeper evidence is [`unstorable_evidence`].
pub const MAX_EVIDENCE_DEPTH: usize = 100;
/// How many UTF-16 code units of the reason an [`unstorable_evidence`] keeps.
pub const UNSTORABLE_REASON_UNITS: usize = 200;

/// What a send records as its evidence when the send's result cannot be stored as JSON (a
/// NaN, a bigint, a circular object, nesting deeper than [`MAX_EVIDENCE_DEPTH`], a
/// conversion that threw): `{"unstorable": {"type": kind, "reason": …}}`, never the value
/// itself; the reason is its first line (up to a `\n` or `\r`), at most
/// [`UNSTORABLE_REASON_UNITS`] code units. The send happened, so the intent is committed
/// with this instead of being reported as bad input.
pub fn unstorable_evidence(kind: &str, reason: &str) -> Value {
    let first = reason.split(['\n', '\r']).next().unwrap_or_default();
    json!({"unstorable": {"type": kind, "reason": truncate_utf16(first, UNSTORABLE_REASON_UNITS)}})
}

/// A dispatch-log entry of a transition: attempt, outcome, detail.
pub type LogEntry = (i64, &'static str, Option<Value>);

fn text(s: &str) -> Expr<IntentCol> {
    Expr::Val(Val::Text(s.to_owned()))
}

fn state(s: IntentState) -> Val {
    Val::Text(s.as_str().to_owned())
}

/// The condition `state = s`.
pub(crate) fn state_is(s: IntentState) -> Cond<IntentCol> {
    Cond::Eq(IntentCol::State, state(s))
}

impl Transition {
    /// The transition's condition, assignments and dispatch-log entry.
    pub fn parts(&self) -> (Cond<IntentCol>, Vec<Assign<IntentCol>>, Option<LogEntry>) {
        match self {
            Transition::MarkDispatched { fence_owner, fence_expires_at } => (
                state_is(IntentState::Intent),
                vec![
                    (IntentCol::State, Expr::Val(state(IntentState::Dispatched))),
                    (IntentCol::FenceOwner, text(fence_owner)),
                    (IntentCol::FenceExpiresAt, Expr::Val(Val::Time(*fence_expires_at))),
                ],
                None,
            ),
            Transition::MarkCommitted { external_ref } => (
                state_is(IntentState::Dispatched),
                commit_set(external_ref),
                Some((1, "sent", Some(external_ref.clone()))),
            ),
            Transition::Reopen { last_error } => (
                state_is(IntentState::Dispatched),
                vec![
                    (IntentCol::State, Expr::Val(state(IntentState::Intent))),
                    (IntentCol::FenceOwner, Expr::Val(Val::Null)),
                    (IntentCol::FenceExpiresAt, Expr::Val(Val::Null)),
                    (IntentCol::FenceEpoch, Expr::Val(Val::Null)),
                    (IntentCol::LastError, text(&truncate_utf16(last_error, LAST_ERROR_UNITS))),
                ],
                Some((0, "reconciled", Some(json!({"reopened": true})))),
            ),
            Transition::NoteUnresolved { current_attempts } => (
                state_is(IntentState::Dispatched),
                vec![(IntentCol::Attempts, Expr::Val(Val::Int(current_attempts.saturating_add(1))))],
                None,
            ),
            Transition::Abandon { reason } => (
                Cond::In(IntentCol::State, vec![state(IntentState::Intent), state(IntentState::Dispatched)]),
                vec![
                    (IntentCol::State, Expr::Val(state(IntentState::Abandoned))),
                    (IntentCol::LastError, text(&truncate_utf16(reason, LAST_ERROR_UNITS))),
                ],
                Some((0, "abandoned", Some(json!({"reason": truncate_utf16(reason, LOG_REASON_UNITS)})))),
            ),
        }
    }

    /// The transition of the intent `(run_id, effect_key)` as one store request.
    pub fn request(&self, run_id: &str, effect_key: &str) -> StoreRequest {
        let (when, set, log) = self.parts();
        update_request(run_id, effect_key, when, set, log)
    }
}

/// One conditional write of the intent `(run_id, effect_key)` with its dispatch-log entry
/// (the store stamps its time).
pub(crate) fn update_request(
    run_id: &str,
    effect_key: &str,
    when: Cond<IntentCol>,
    set: Vec<Assign<IntentCol>>,
    log: Option<LogEntry>,
) -> StoreRequest {
    StoreRequest::UpdateIntent {
        run_id: run_id.to_owned(),
        effect_key: effect_key.to_owned(),
        when,
        set,
        log: log.map(|(attempt, outcome, detail)| crate::model::DispatchLogEntry {
            run_id: run_id.to_owned(),
            effect_key: effect_key.to_owned(),
            attempt,
            outcome: outcome.to_owned(),
            at: None,
            detail,
        }),
    }
}

/// The dispatched intents whose fence expired (`<= now`): what the reconciler scans, and
/// the reference's `findStaleDispatched`.
pub(crate) fn stale_dispatched() -> Cond<IntentCol> {
    Cond::And(vec![state_is(IntentState::Dispatched), Cond::ExpiredAt(IntentCol::FenceExpiresAt)])
}

/// The assignments of a commit: `committed`, the evidence, `committed_at = now`.
pub(crate) fn commit_set(evidence: &Value) -> Vec<Assign<IntentCol>> {
    vec![
        (IntentCol::State, Expr::Val(state(IntentState::Committed))),
        (IntentCol::ExternalRef, Expr::Val(Val::Json(evidence.clone()))),
        (IntentCol::CommittedAt, Expr::Now),
    ]
}

/// At most `units` UTF-16 code units of `s` (the reference's `slice`), never half a
/// surrogate pair.
pub fn truncate_utf16(s: &str, units: usize) -> String {
    let mut used = 0;
    let mut out = String::new();
    for c in s.chars() {
        used += c.len_utf16();
        if used > units {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reopen_clears_the_fence_and_keeps_500_units_of_the_error() {
        let long = "é".repeat(600);
        let (when, set, log) = Transition::Reopen { last_error: long }.parts();
        assert_eq!(when, state_is(IntentState::Dispatched));
        assert_eq!(set.len(), 5);
        assert_eq!(set[4], (IntentCol::LastError, text(&"é".repeat(500))));
        assert_eq!(log, Some((0, "reconciled", Some(json!({"reopened": true})))));
    }

    #[test]
    fn abandon_is_from_intent_or_dispatched_and_logs_120_units() {
        let reason = "x".repeat(300);
        let (when, set, log) = Transition::Abandon { reason }.parts();
        assert_eq!(when, Cond::In(IntentCol::State, vec![state(IntentState::Intent), state(IntentState::Dispatched)]));
        assert_eq!(set[1], (IntentCol::LastError, text(&"x".repeat(300))));
        assert_eq!(log, Some((0, "abandoned", Some(json!({"reason": "x".repeat(120)})))));
    }

    #[test]
    fn a_request_names_its_intent_in_the_update_and_the_log() {
        let req = Transition::MarkCommitted { external_ref: json!({"id": 7}) }.request("r", "k");
        match req {
            StoreRequest::UpdateIntent { run_id, effect_key, log: Some(entry), set, .. } => {
                assert_eq!((run_id.as_str(), effect_key.as_str()), ("r", "k"));
                assert_eq!((entry.run_id.as_str(), entry.effect_key.as_str(), entry.attempt), ("r", "k", 1));
                assert_eq!(entry.outcome, "sent");
                assert_eq!(set, commit_set(&json!({"id": 7})));
            }
            other => panic!("not an update: {other:?}"),
        }
    }

    #[test]
    fn unstorable_evidence_keeps_the_first_line_of_its_reason_cut_to_200_units() {
        let e = unstorable_evidence("object", &format!("{}\r\nsecond line", "😀".repeat(150)));
        assert_eq!(e["unstorable"]["type"], "object");
        assert_eq!(e["unstorable"]["reason"], "😀".repeat(100));
        assert_eq!(unstorable_evidence("number NaN", "")["unstorable"]["reason"], "");
    }

    #[test]
    fn truncation_never_splits_a_surrogate_pair() {
        assert_eq!(truncate_utf16("ab😀c", 3), "ab");
        assert_eq!(truncate_utf16("ab😀c", 4), "ab😀");
        assert_eq!(truncate_utf16("abc", 10), "abc");
    }
}
