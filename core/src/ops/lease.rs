//! The lease operations (acquire, renew, release, verify) as plain state machines.
//!
//! Each operation is a value holding its inputs and its step; the store's answer to its
//! request advances it, and it writes its next request into a slot its driver keeps. There
//! is no future, box or lock, so a host-driven [`Machine`] over one costs its requests and
//! nothing more. [`run`] drives one directly (for [`crate::driver::drive`], and for the
//! fleet's own verify and release, which lend it the caller's token): its counters and
//! receipts go straight to the fleet's recorder, its request is a refitted spare
//! ([`Spares`]), and a store that writes runs in place ([`LeaseStore::write_run_in_place`])
//! lends it the rows, which are copied once, only when the result returns one.
//!
//! [`LeaseStore::write_run_in_place`]: crate::LeaseStore::write_run_in_place

use std::borrow::Cow;

use super::{
    AcquireResult, Fenced, FleetConfig, LostCause, RESOURCE_PREFIX, ReleaseTo, at_ceiling, record_recovery,
    recovery_set, require, validate_token, validate_ttl,
};
use crate::driver::{LeaseStore, Recorder};
use crate::error::{ErrorCode, HeartError, StoreError};
use crate::machine::{Answer, Emit, Machine, mismatch, mismatch_kind};
use crate::metrics::Counter;
use crate::model::{FencingToken, RunRow, RunStatus};
use crate::receipt::HeartEvent;
use crate::request::{Cond, Expr, RunCol, RunWriteRef, StoreAnswer, StoreReply, StoreRequest, Val, held, holds_token};
use crate::time::Timestamp;

/// The step name of verify's conditional write (also the first step of guard and send-once).
pub(crate) const VERIFY_STEP: &str = "verify: conditional write";

/// One of the lease operations; `'t` is the token's lifetime when it is lent.
pub(crate) enum LeaseOp<'t> {
    /// `acquire`.
    Acquire(Acquire),
    /// `renew`.
    Renew(Renew),
    /// `release`.
    Release(Release<'t>),
    /// `verifyFence`.
    Verify(Verify<'t>),
}

/// An operation's typed step: takes the answer to its request and returns `None` when it wrote
/// its next request into the slot, else its result (a function per operation, so a machine
/// holds its result type without a box).
pub(crate) type Advance<T> =
    fn(&mut LeaseOp<'_>, Reply<'_>, &mut dyn Emit, &mut StoreRequest) -> Result<Option<T>, HeartError>;

/// A step given another operation than its own: a bug in this crate.
fn wrong_op() -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, "lease operation stepped as another operation")
}

/// Runs a lease operation to its end against `store`: its counters and receipts go straight
/// to `recorder`, its request is the spare of the last operation of its kind (refitted), and
/// a store that writes in place lends it the rows.
pub(crate) fn run<T, S: LeaseStore + ?Sized>(
    op: &mut LeaseOp<'_>,
    step: Advance<T>,
    store: &mut S,
    recorder: &mut Recorder,
) -> Result<T, HeartError> {
    let mut request = recorder.spares.slot(op).take().unwrap_or_else(|| Box::new(StoreRequest::Now));
    op.start(recorder, &mut request);
    let result = loop {
        let answered = match store.write_run_in_place(&request) {
            Some(lent) => step(op, Reply::Lent(lent), recorder, &mut request),
            None => {
                let taken = std::mem::replace(&mut *request, StoreRequest::Now);
                let mut answer = Answer::Store(store.execute(taken));
                step(op, Reply::Owned(&mut answer), recorder, &mut request)
            }
        };
        if let Some(done) = answered.transpose() {
            break done;
        }
    };
    // Whatever the slot holds now, its box (and a lent request's buffers) serve the next
    // operation of this kind.
    *recorder.spares.slot(op) = Some(request);
    result
}

/// A store's answer as a lease operation takes it (borrowed: the rows are large, and an
/// operation keeps at most the row after a write).
pub(crate) enum Reply<'a> {
    /// From a host, or a store that takes requests; the operation may take its rows.
    Owned(&'a mut Answer),
    /// From a store that wrote the run in place.
    Lent(Result<RunWriteRef<'a>, StoreError>),
}

/// A conditional run write's outcome, its rows borrowed (a row is large: moving one is a
/// copy of a few hundred bytes).
pub(crate) struct Written<'a> {
    pub(crate) now: Timestamp,
    pub(crate) before: Option<&'a RunRow>,
    pub(crate) after: After<'a>,
}

/// The row after a write, `None` on a miss.
pub(crate) enum After<'a> {
    /// Lent by the store.
    Lent(Option<&'a RunRow>),
    /// In the host's answer, from which a result that keeps it takes it.
    InAnswer(&'a mut Option<RunRow>),
    /// Only whether the write hit: the answer to a request that did not `want_after`.
    Hit(bool),
}

impl After<'_> {
    /// The row (none in an answer that says only whether the write hit).
    pub(crate) fn row(&self) -> Option<&RunRow> {
        match self {
            After::Lent(row) => *row,
            After::InAnswer(row) => row.as_ref(),
            After::Hit(_) => None,
        }
    }

    /// Whether the write hit, from the row or from an answer that carries none.
    pub(crate) fn hit(&self) -> bool {
        match self {
            After::Hit(hit) => *hit,
            other => other.row().is_some(),
        }
    }

    /// The row, owned: copied from the store, or taken from the answer.
    fn take(self) -> Option<RunRow> {
        match self {
            After::Lent(row) => row.cloned(),
            After::InAnswer(row) => row.take(),
            After::Hit(_) => None,
        }
    }
}

impl<'a> Reply<'a> {
    /// The answer to a conditional run write at `step`: a store failure is `store-unavailable`
    /// naming the step, any other reply a protocol error.
    pub(crate) fn written(self, step: &str) -> Result<Written<'a>, HeartError> {
        match self {
            Reply::Lent(Ok(w)) => Ok(Written { now: w.now, before: w.before, after: After::Lent(w.after) }),
            Reply::Owned(Answer::Store(Ok(StoreAnswer { now, reply: StoreReply::RunWrite { before, after } }))) => {
                Ok(Written { now: *now, before: before.as_ref(), after: After::InAnswer(after) })
            }
            Reply::Lent(Err(e)) => Err(HeartError::store(step, &e)),
            Reply::Owned(Answer::Store(Err(e))) => Err(HeartError::store(step, e)),
            Reply::Owned(other) => Err(mismatch(step, other)),
        }
    }

    /// The answer to a conditional run write that did not `want_after` at `step`: whether it
    /// hit, said by a `run_hit` reply or by a store that answered the rows anyway. (An
    /// operation that wants the row takes [`Reply::written`], which refuses `run_hit`: a
    /// write that hit must not pass for a miss.)
    pub(crate) fn written_or_hit(self, step: &str) -> Result<Written<'a>, HeartError> {
        match self {
            Reply::Owned(Answer::Store(Ok(StoreAnswer { now, reply: StoreReply::RunHit { hit } }))) => {
                Ok(Written { now: *now, before: None, after: After::Hit(*hit) })
            }
            other => other.written(step),
        }
    }

    /// The answer to a read of one run at `step`.
    fn read(self, step: &str) -> Result<(Timestamp, Option<RunRow>), HeartError> {
        match self {
            Reply::Owned(Answer::Store(Ok(StoreAnswer { now, reply: StoreReply::Run { run } }))) => {
                Ok((*now, run.take()))
            }
            Reply::Lent(Err(e)) => Err(HeartError::store(step, &e)),
            Reply::Owned(Answer::Store(Err(e))) => Err(HeartError::store(step, e)),
            Reply::Owned(other) => Err(mismatch(step, other)),
            Reply::Lent(Ok(_)) => Err(mismatch_kind(step, "a store reply of kind run_write")),
        }
    }
}

/// The request slots of finished lease operations, one per kind, that the next operation of
/// that kind refits instead of building its request anew: a refit rewrites only what differs
/// between two such operations (the run, owner, expiry, epoch, ttl, retry ceiling, next status), so a steady
/// cycle of operations builds no request and allocates nothing for one. Boxed, so handing a
/// slot to an operation and back moves a pointer, not the request.
#[derive(Debug, Default)]
pub(crate) struct Spares {
    acquire: Option<Box<StoreRequest>>,
    renew: Option<Box<StoreRequest>>,
    release: Option<Box<StoreRequest>>,
    verify: Option<Box<StoreRequest>>,
}

impl Spares {
    /// How many kinds hold a spare.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        [&self.acquire, &self.renew, &self.release, &self.verify].iter().filter(|s| s.is_some()).count()
    }

    /// The spare for operations of `op`'s kind.
    pub(crate) fn slot(&mut self, op: &LeaseOp<'_>) -> &mut Option<Box<StoreRequest>> {
        match op {
            LeaseOp::Acquire(_) => &mut self.acquire,
            LeaseOp::Renew(_) => &mut self.renew,
            LeaseOp::Release(_) => &mut self.release,
            LeaseOp::Verify(_) => &mut self.verify,
        }
    }
}

impl LeaseOp<'_> {
    /// Emits what the operation does before its first request and writes that request into
    /// `request`, refitting what the slot holds (a request of a finished operation of the same
    /// kind) when it can.
    pub(crate) fn start(&mut self, out: &mut dyn Emit, request: &mut StoreRequest) {
        if let LeaseOp::Acquire(_) = self {
            out.bump(Counter::AcquireAttempts);
        }
        let refitted = match self {
            LeaseOp::Acquire(op) => op.refit(request),
            LeaseOp::Renew(op) => op.refit(request),
            LeaseOp::Release(op) => op.refit(request),
            LeaseOp::Verify(op) => op.refit(request),
        };
        if !refitted {
            *request = match self {
                LeaseOp::Acquire(op) => acquire_request(op.cfg, &op.run_id, &op.owner, op.ttl_ms),
                LeaseOp::Renew(op) => renew_request(&op.token, op.ttl_ms),
                LeaseOp::Release(op) => release_request(&op.token, op.to),
                LeaseOp::Verify(op) => verify_request(&op.token),
            };
        }
    }
}

/// `acquire(runId, owner, ttlSeconds)`. Common path: one conditional write ("update where
/// acquirable at `now`", returning the row before and after); only a miss is followed by
/// a read that explains it.
pub fn acquire(cfg: FleetConfig, run_id: &str, owner: &str, ttl_seconds: i64) -> Machine<AcquireResult> {
    let valid = require("runId", run_id).and(require("owner", owner)).and(validate_ttl(ttl_seconds));
    let Ok(ttl_ms) = valid else {
        // Bad input keeps the reference's result shape (no error).
        return Machine::done(Ok(AcquireResult::failed(None, super::INVALID_ACQUIRE_REASON, ErrorCode::InvalidInput)));
    };
    let op = Acquire { cfg, run_id: run_id.to_owned(), owner: owner.to_owned(), ttl_ms, step: AcquireStep::Write };
    Machine::lease(LeaseOp::Acquire(op), acquire_step)
}

fn acquire_step(
    op: &mut LeaseOp<'_>,
    reply: Reply<'_>,
    out: &mut dyn Emit,
    next: &mut StoreRequest,
) -> Result<Option<AcquireResult>, HeartError> {
    match op {
        LeaseOp::Acquire(op) => op.answer(reply, out, next),
        _ => Err(wrong_op()),
    }
}

/// `acquire`'s state.
pub(crate) struct Acquire {
    cfg: FleetConfig,
    run_id: String,
    owner: String,
    ttl_ms: i64,
    step: AcquireStep,
}

enum AcquireStep {
    /// The conditional write.
    Write,
    /// The read after a miss.
    Read,
    /// fix 3: quarantining the dead holder's run (as read) at the ceiling. Boxed: this rare
    /// step would otherwise double the size of every acquire.
    Quarantine(Box<RunRow>),
}

fn acquire_request(cfg: FleetConfig, run_id: &str, owner: &str, ttl_ms: i64) -> StoreRequest {
    let mut takeover = vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt)];
    if let Some(c) = at_ceiling(cfg) {
        takeover.push(Cond::Not(Box::new(c)));
    }
    let acquirable = Cond::Or(vec![Cond::Eq(RunCol::Status, Val::status(RunStatus::Ready)), Cond::And(takeover)]);
    let was_ready = Cond::Eq(RunCol::Status, Val::status(RunStatus::Ready));
    let set = vec![
        (RunCol::LeaseOwner, Expr::Val(Val::Text(owner.to_owned()))),
        (RunCol::LeaseExpiresAt, Expr::NowPlus(ttl_ms)),
        (RunCol::Status, Expr::Val(Val::status(RunStatus::Leased))),
        (RunCol::UpdatedAt, Expr::Now),
        (RunCol::FencingEpoch, Expr::Add(RunCol::FencingEpoch, 1)),
        // fix 3: a takeover of a dead holder's lease counts as a recovery.
        (
            RunCol::Retries,
            Expr::Case(
                Box::new(was_ready),
                Box::new(Expr::Add(RunCol::Retries, 0)),
                Box::new(Expr::Add(RunCol::Retries, 1)),
            ),
        ),
    ];
    StoreRequest::UpdateRun { run_id: run_id.to_owned(), when: acquirable, set, want_before: true, want_after: true }
}

impl Acquire {
    /// Rewrites a request [`acquire_request`] built for another acquire into this one's.
    fn refit(&self, req: &mut StoreRequest) -> bool {
        let StoreRequest::UpdateRun { run_id, when: Cond::Or(any), set, want_before: true, want_after: true } = req
        else {
            return false;
        };
        let [_, Cond::And(takeover)] = any.as_mut_slice() else {
            return false;
        };
        let ceiling = match (takeover.as_mut_slice(), self.cfg.max_retries) {
            ([_, _], None) => None,
            ([_, _, Cond::Not(not)], Some(max)) => Some((not, max)),
            _ => return false,
        };
        if let Some((not, max)) = ceiling {
            let Cond::Not(at_most) = &mut **not else {
                return false;
            };
            let Cond::AtMost(RunCol::Retries, below) = &mut **at_most else {
                return false;
            };
            *below = i64::from(max) - 1;
        }
        let [(RunCol::LeaseOwner, Expr::Val(Val::Text(owner))), (RunCol::LeaseExpiresAt, Expr::NowPlus(ttl_ms)), ..] =
            set.as_mut_slice()
        else {
            return false;
        };
        self.owner.clone_into(owner);
        *ttl_ms = self.ttl_ms;
        self.run_id.clone_into(run_id);
        true
    }

    fn answer(
        &mut self,
        reply: Reply<'_>,
        out: &mut dyn Emit,
        next: &mut StoreRequest,
    ) -> Result<Option<AcquireResult>, HeartError> {
        match std::mem::replace(&mut self.step, AcquireStep::Write) {
            AcquireStep::Write => self.written(reply.written("acquire: conditional write")?, out, next),
            AcquireStep::Read => self.explain(reply.read("acquire: read after a miss")?, out, next),
            AcquireStep::Quarantine(row) => {
                let written = reply.written("acquire: quarantine at the ceiling")?;
                let after = written.after.row();
                if after.map(|after| record_recovery(out, row.lease_owner.as_deref(), after, written.now)).is_some() {
                    return Ok(Some(AcquireResult::failed(
                        written.after.take(),
                        "Quarantined: the run reached its retry ceiling",
                        ErrorCode::Quarantined,
                    )));
                }
                out.bump(Counter::AcquireCollisions);
                Ok(Some(AcquireResult::failed(
                    Some(*row),
                    "Collision: another owner won the lease",
                    ErrorCode::Collision,
                )))
            }
        }
    }

    fn written(
        &mut self,
        written: Written<'_>,
        out: &mut dyn Emit,
        next: &mut StoreRequest,
    ) -> Result<Option<AcquireResult>, HeartError> {
        let Written { now, before, after } = written;
        let Some((expiry, epoch)) = after.row().map(|row| (row.lease_expires_at, row.fencing_epoch)) else {
            *next = StoreRequest::ReadRun { run_id: self.run_id.clone() };
            self.step = AcquireStep::Read;
            return Ok(None);
        };
        if let Some(prev) = before.filter(|b| b.status.is_held()) {
            out.bump(Counter::Reclaims);
            let prev_owner = prev.lease_owner.as_deref().unwrap_or("unknown");
            out.receipt(HeartEvent::Reclaimed, &self.run_id, prev_owner, None, None, now);
        }
        out.bump(Counter::AcquireWins);
        let Some(expiry) = expiry else {
            return Err(HeartError::new(
                ErrorCode::StoreProtocol,
                "acquire: the store returned a lease without an expiry",
            ));
        };
        out.receipt(HeartEvent::Acquired, &self.run_id, &self.owner, Some(expiry), None, now);
        // The operation ends here: its id and owner move into the token.
        let fence = FencingToken {
            run_id: std::mem::take(&mut self.run_id),
            owner: std::mem::take(&mut self.owner),
            lease_expires_at: expiry,
            epoch: Some(epoch),
        };
        Ok(Some(AcquireResult { acquired: true, run: after.take(), fence: Some(fence), reason: None, code: None }))
    }

    fn explain(
        &mut self,
        (now, row): (Timestamp, Option<RunRow>),
        out: &mut dyn Emit,
        next: &mut StoreRequest,
    ) -> Result<Option<AcquireResult>, HeartError> {
        let Some(row) = row else {
            return Ok(Some(AcquireResult::failed(None, "Run not found", ErrorCode::RunNotFound)));
        };
        let ceiling = self.cfg.max_retries.is_some_and(|max| row.retries + 1 > i64::from(max));
        if row.status.is_held() && row.lease_expired(now) && ceiling {
            // fix 3: the dead holder's run is at the ceiling: quarantine it in one write.
            let when = Cond::And(vec![
                held(),
                Cond::Eq(RunCol::Status, Val::status(row.status)),
                Cond::Eq(RunCol::LeaseOwner, Val::opt_text(row.lease_owner.as_deref())),
                Cond::Eq(RunCol::LeaseExpiresAt, Val::opt_time(row.lease_expires_at)),
                Cond::ExpiredAt(RunCol::LeaseExpiresAt),
            ]);
            *next = StoreRequest::UpdateRun {
                run_id: self.run_id.clone(),
                when,
                set: recovery_set(self.cfg),
                want_before: false,
                want_after: true,
            };
            self.step = AcquireStep::Quarantine(Box::new(row));
            return Ok(None);
        }
        out.bump(Counter::AcquireCollisions);
        if !row.can_acquire(now) {
            let code = if row.status == RunStatus::Quarantined { ErrorCode::Quarantined } else { ErrorCode::LeaseHeld };
            let reason = format!("Cannot acquire: status '{}', lease not expired", row.status);
            return Ok(Some(AcquireResult::failed(Some(row), reason, code)));
        }
        Ok(Some(AcquireResult::failed(Some(row), "Collision: another owner won the lease", ErrorCode::Collision)))
    }
}

/// `renew(fence, ttlSeconds)`: one conditional write (fix 2: an expired token is refused).
pub fn renew(token: &FencingToken, ttl_seconds: i64) -> Machine<Fenced<FencingToken>> {
    let ttl_ms = match validate_token(token).and(validate_ttl(ttl_seconds)) {
        Ok(ms) => ms,
        Err(e) => return Machine::done(Err(e)),
    };
    let op = Renew { token: token.clone(), ttl_ms, refused: false };
    Machine::lease(LeaseOp::Renew(op), renew_step)
}

fn renew_step(
    op: &mut LeaseOp<'_>,
    reply: Reply<'_>,
    out: &mut dyn Emit,
    next: &mut StoreRequest,
) -> Result<Option<Fenced<FencingToken>>, HeartError> {
    match op {
        LeaseOp::Renew(op) => op.answer(reply, out, next),
        _ => Err(wrong_op()),
    }
}

/// `renew`'s state.
pub(crate) struct Renew {
    token: FencingToken,
    ttl_ms: i64,
    /// The write missed; the read that explains it is pending.
    refused: bool,
}

pub(crate) fn renew_request(token: &FencingToken, ttl_ms: i64) -> StoreRequest {
    StoreRequest::UpdateRun {
        run_id: token.run_id.clone(),
        when: holds_token(token),
        set: vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(ttl_ms)), (RunCol::UpdatedAt, Expr::Now)],
        want_before: false,
        want_after: true,
    }
}

impl Renew {
    /// Rewrites a request [`renew_request`] built for another renew into this one's.
    fn refit(&self, req: &mut StoreRequest) -> bool {
        let StoreRequest::UpdateRun { run_id, when, set, want_before: false, want_after: true } = req else {
            return false;
        };
        let [(RunCol::LeaseExpiresAt, Expr::NowPlus(ttl_ms)), (RunCol::UpdatedAt, Expr::Now)] = set.as_mut_slice()
        else {
            return false;
        };
        if !refit_holds_token(when, &self.token) {
            return false;
        }
        *ttl_ms = self.ttl_ms;
        self.token.run_id.clone_into(run_id);
        true
    }

    fn answer(
        &mut self,
        reply: Reply<'_>,
        out: &mut dyn Emit,
        next: &mut StoreRequest,
    ) -> Result<Option<Fenced<FencingToken>>, HeartError> {
        let token = &mut self.token;
        if self.refused {
            let (now, row) = reply.read("renew: read after a refusal")?;
            return Ok(Some(Fenced::Rejected { cause: LostCause::explain(row.as_ref(), token, now) }));
        }
        let written = reply.written("renew: conditional write")?;
        match written.after.row().and_then(|a| a.lease_expires_at) {
            Some(expiry) => {
                out.bump(Counter::Renews);
                out.receipt(HeartEvent::Renewed, &token.run_id, &token.owner, Some(expiry), None, written.now);
                // The operation ends here: the token moves into the result.
                let value = FencingToken {
                    run_id: std::mem::take(&mut token.run_id),
                    owner: std::mem::take(&mut token.owner),
                    lease_expires_at: expiry,
                    epoch: token.epoch,
                };
                Ok(Some(Fenced::Ok { value }))
            }
            None => {
                out.bump(Counter::RenewFailures);
                let expiry = Some(token.lease_expires_at);
                out.receipt(HeartEvent::FenceRejected, &token.run_id, &token.owner, expiry, None, written.now);
                *next = StoreRequest::ReadRun { run_id: token.run_id.clone() };
                self.refused = true;
                Ok(None)
            }
        }
    }
}

/// `release(fence, nextStatus)`: one conditional write (fix 2: an expired token is refused).
/// `ReleaseTo::Ready` is for resource runs only (fix 8) and also resets `retries`.
pub fn release(token: &FencingToken, to: ReleaseTo) -> Machine<Fenced<RunRow>> {
    if let Err(e) = validate_token(token) {
        return Machine::done(Err(e));
    }
    let op = Release { token: Cow::Owned(token.clone()), to, refused_at: None };
    Machine::lease(LeaseOp::Release(op), release_step)
}

/// [`release`] run by the fleet on the caller's token.
pub(crate) fn release_on<S: LeaseStore + ?Sized>(
    token: &FencingToken,
    to: ReleaseTo,
    store: &mut S,
    recorder: &mut Recorder,
) -> Result<Fenced<RunRow>, HeartError> {
    validate_token(token)?;
    let mut op = LeaseOp::Release(Release { token: Cow::Borrowed(token), to, refused_at: None });
    run(&mut op, release_step, store, recorder)
}

fn release_step(
    op: &mut LeaseOp<'_>,
    reply: Reply<'_>,
    out: &mut dyn Emit,
    next: &mut StoreRequest,
) -> Result<Option<Fenced<RunRow>>, HeartError> {
    match op {
        LeaseOp::Release(op) => op.answer(reply, out, next),
        _ => Err(wrong_op()),
    }
}

/// `release`'s state.
pub(crate) struct Release<'t> {
    token: Cow<'t, FencingToken>,
    to: ReleaseTo,
    /// The store clock of a write that missed; the read that explains it is pending.
    refused_at: Option<Timestamp>,
}

pub(crate) fn release_request(token: &FencingToken, to: ReleaseTo) -> StoreRequest {
    let mut when = holds_token(token);
    let mut set = vec![
        (RunCol::LeaseOwner, Expr::Val(Val::Null)),
        (RunCol::LeaseExpiresAt, Expr::Val(Val::Null)),
        (RunCol::Status, Expr::Val(Val::status(to.status()))),
        (RunCol::UpdatedAt, Expr::Now),
    ];
    if to == ReleaseTo::Ready {
        when = Cond::And(vec![when, Cond::StartsWith(RunCol::IdempotencyKey, RESOURCE_PREFIX.to_owned())]);
        set.push((RunCol::Retries, Expr::Val(Val::Int(0))));
    }
    StoreRequest::UpdateRun { run_id: token.run_id.clone(), when, set, want_before: false, want_after: true }
}

impl Release<'_> {
    /// Rewrites a request [`release_request`] built for another release into this one's.
    fn refit(&self, req: &mut StoreRequest) -> bool {
        let StoreRequest::UpdateRun { run_id, when, set, want_before: false, want_after: true } = req else {
            return false;
        };
        let ready = self.to == ReleaseTo::Ready;
        let token_cond = match (when, ready) {
            (Cond::And(parts), true) => match parts.as_mut_slice() {
                [token_cond, Cond::StartsWith(RunCol::IdempotencyKey, _)] => token_cond,
                _ => return false,
            },
            (token_cond, false) => token_cond,
            _ => return false,
        };
        if !refit_holds_token(token_cond, &self.token) {
            return false;
        }
        let [_, _, (RunCol::Status, Expr::Val(Val::Text(status))), (RunCol::UpdatedAt, Expr::Now), retries @ ..] =
            set.as_mut_slice()
        else {
            return false;
        };
        if retries.len() != usize::from(ready) {
            return false;
        }
        self.to.status().as_str().clone_into(status);
        self.token.run_id.clone_into(run_id);
        true
    }

    fn answer(
        &mut self,
        reply: Reply<'_>,
        out: &mut dyn Emit,
        next: &mut StoreRequest,
    ) -> Result<Option<Fenced<RunRow>>, HeartError> {
        let token = &self.token;
        if let Some(now) = self.refused_at {
            let (now2, row) = reply.read("release: read after a refusal")?;
            if self.to == ReleaseTo::Ready
                && let Some(r) = row.as_ref().filter(|r| !r.idempotency_key.starts_with(RESOURCE_PREFIX))
            {
                return Err(HeartError::invalid(format!(
                    "release to ready is only for resource runs ({RESOURCE_PREFIX}… keys); run {} has key {:?}",
                    r.id, r.idempotency_key
                )));
            }
            out.bump(Counter::ReleaseFailures);
            let expiry = Some(token.lease_expires_at);
            out.receipt(HeartEvent::FenceRejected, &token.run_id, &token.owner, expiry, None, now);
            return Ok(Some(Fenced::Rejected { cause: LostCause::explain(row.as_ref(), token, now2) }));
        }
        let written = reply.written("release: conditional write")?;
        if let Some(row) = written.after.take() {
            out.bump(Counter::Releases);
            out.receipt(HeartEvent::Released, &token.run_id, &token.owner, None, None, written.now);
            return Ok(Some(Fenced::Ok { value: row }));
        }
        *next = StoreRequest::ReadRun { run_id: token.run_id.clone() };
        self.refused_at = Some(written.now);
        Ok(None)
    }
}

/// `verifyFence(fence)`.
pub fn verify_fence(token: &FencingToken) -> Machine<bool> {
    if let Err(e) = validate_token(token) {
        return Machine::done(Err(e));
    }
    Machine::lease(LeaseOp::Verify(Verify { token: Cow::Owned(token.clone()) }), verify_step)
}

/// [`verify_fence`] run by the fleet on the caller's token.
pub(crate) fn verify_fence_on<S: LeaseStore + ?Sized>(
    token: &FencingToken,
    store: &mut S,
    recorder: &mut Recorder,
) -> Result<bool, HeartError> {
    validate_token(token)?;
    run(&mut LeaseOp::Verify(Verify { token: Cow::Borrowed(token) }), verify_step, store, recorder)
}

fn verify_step(
    op: &mut LeaseOp<'_>,
    reply: Reply<'_>,
    out: &mut dyn Emit,
    _: &mut StoreRequest,
) -> Result<Option<bool>, HeartError> {
    match op {
        LeaseOp::Verify(op) => op.answer(reply, out).map(Some),
        _ => Err(wrong_op()),
    }
}

/// `verifyFence`'s state.
pub(crate) struct Verify<'t> {
    token: Cow<'t, FencingToken>,
}

/// fix 2: one conditional write that writes nothing when it rejects. The answer needs no
/// row: only whether the write hit.
pub(crate) fn verify_request(token: &FencingToken) -> StoreRequest {
    StoreRequest::UpdateRun {
        run_id: token.run_id.clone(),
        when: holds_token(token),
        set: vec![(RunCol::UpdatedAt, Expr::Now)],
        want_before: false,
        want_after: false,
    }
}

/// Counts and records a verification: `fence_verified` when the token is live, else
/// `fence_rejected`.
pub(crate) fn record_verification(out: &mut (impl Emit + ?Sized), token: &FencingToken, live: bool, now: Timestamp) {
    let (counter, event) = if live {
        (Counter::FenceVerifications, HeartEvent::FenceVerified)
    } else {
        (Counter::FenceRejections, HeartEvent::FenceRejected)
    };
    out.bump(counter);
    out.receipt(event, &token.run_id, &token.owner, Some(token.lease_expires_at), None, now);
}

impl Verify<'_> {
    /// Rewrites a request [`verify_request`] built for another verify into this one's.
    fn refit(&self, req: &mut StoreRequest) -> bool {
        let StoreRequest::UpdateRun { run_id, when, set, want_before: false, want_after: false } = req else {
            return false;
        };
        if !matches!(set.as_slice(), [(RunCol::UpdatedAt, Expr::Now)]) || !refit_holds_token(when, &self.token) {
            return false;
        }
        self.token.run_id.clone_into(run_id);
        true
    }

    fn answer(&mut self, reply: Reply<'_>, out: &mut dyn Emit) -> Result<bool, HeartError> {
        let written = reply.written_or_hit(VERIFY_STEP)?;
        let live = written.after.hit();
        record_verification(out, &self.token, live, written.now);
        Ok(live)
    }
}

/// Rewrites a [`holds_token`] condition built for another token into `token`'s; `false` when
/// `cond` has another shape (or the other token's epoch was present where this one's is not).
fn refit_holds_token(cond: &mut Cond<RunCol>, token: &FencingToken) -> bool {
    let Cond::And(all) = cond else {
        return false;
    };
    let [
        _,
        Cond::Eq(RunCol::LeaseOwner, Val::Text(owner)),
        Cond::Eq(RunCol::LeaseExpiresAt, Val::Time(expiry)),
        Cond::LiveAt(RunCol::LeaseExpiresAt),
        epoch @ ..,
    ] = all.as_mut_slice()
    else {
        return false;
    };
    match (epoch, token.epoch) {
        ([], None) => {}
        ([Cond::Eq(RunCol::FencingEpoch, Val::Int(old))], Some(new)) => *old = new,
        _ => return false,
    }
    token.owner.clone_into(owner);
    *expiry = token.lease_expires_at;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Vec<FencingToken> {
        let mut tokens = Vec::new();
        for (run_id, owner) in [("r", "w"), ("a-longer-run-id", "another owner")] {
            for epoch in [None, Some(0), Some(7)] {
                for expiry in [0, 1_785_369_660_000] {
                    let lease_expires_at = Timestamp(expiry);
                    tokens.push(FencingToken { run_id: run_id.into(), owner: owner.into(), lease_expires_at, epoch });
                }
            }
        }
        tokens
    }

    /// Operations of every kind and shape, with different inputs.
    fn ops() -> Vec<LeaseOp<'static>> {
        let mut ops = Vec::new();
        for max_retries in [None, Some(0), Some(5)] {
            for (run_id, owner) in [("r", "w"), ("run-2", "owner-2")] {
                for ttl_ms in [1_000, 60_000] {
                    ops.push(LeaseOp::Acquire(Acquire {
                        cfg: FleetConfig { max_retries },
                        run_id: run_id.into(),
                        owner: owner.into(),
                        ttl_ms,
                        step: AcquireStep::Write,
                    }));
                }
            }
        }
        for token in tokens() {
            for ttl_ms in [1_000, 60_000] {
                ops.push(LeaseOp::Renew(Renew { token: token.clone(), ttl_ms, refused: false }));
            }
            for to in [ReleaseTo::Completed, ReleaseTo::Failed, ReleaseTo::Cancelled, ReleaseTo::Ready] {
                ops.push(LeaseOp::Release(Release { token: Cow::Owned(token.clone()), to, refused_at: None }));
            }
            ops.push(LeaseOp::Verify(Verify { token: Cow::Owned(token) }));
        }
        ops
    }

    fn first_request(op: &mut LeaseOp<'_>, slot: StoreRequest) -> StoreRequest {
        let mut request = slot;
        op.start(&mut Vec::new(), &mut request);
        request
    }

    /// Whether `b` refits a request built for `a` (rather than building its own): same kind,
    /// and the same structure (a ceiling or not, an epoch or not, ready or not).
    fn same_shape(a: &LeaseOp<'_>, b: &LeaseOp<'_>) -> bool {
        match (a, b) {
            (LeaseOp::Acquire(a), LeaseOp::Acquire(b)) => a.cfg.max_retries.is_some() == b.cfg.max_retries.is_some(),
            (LeaseOp::Renew(a), LeaseOp::Renew(b)) => a.token.epoch.is_some() == b.token.epoch.is_some(),
            (LeaseOp::Release(a), LeaseOp::Release(b)) => {
                a.token.epoch.is_some() == b.token.epoch.is_some()
                    && (a.to == ReleaseTo::Ready) == (b.to == ReleaseTo::Ready)
            }
            (LeaseOp::Verify(a), LeaseOp::Verify(b)) => a.token.epoch.is_some() == b.token.epoch.is_some(),
            _ => false,
        }
    }

    fn refits(op: &LeaseOp<'_>, request: &mut StoreRequest) -> bool {
        match op {
            LeaseOp::Acquire(op) => op.refit(request),
            LeaseOp::Renew(op) => op.refit(request),
            LeaseOp::Release(op) => op.refit(request),
            LeaseOp::Verify(op) => op.refit(request),
        }
    }

    #[test]
    fn a_refitted_request_is_the_request_built_anew() {
        for mut a in ops() {
            let spare = first_request(&mut a, StoreRequest::Now);
            for mut b in ops() {
                let fresh = first_request(&mut b, StoreRequest::Now);
                assert_eq!(first_request(&mut b, spare.clone()), fresh, "{spare:?}");
                assert_eq!(refits(&b, &mut spare.clone()), same_shape(&a, &b), "{spare:?} for {fresh:?}");
            }
        }
    }
}
