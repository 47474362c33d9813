//! Exhaustive check of the five safety properties (docs/ARCHITECTURE.md, "The safety
//! properties and where they are checked") over every interleaving of whole operations in
//! small configurations, up to a bounded depth.
//!
//! Two workers share the runs of one `MemoryStore`. The actions are: acquire (ttl 10 s),
//! renew, verify, guard an effect (durable ledger), release (`completed`; `ready` for a
//! resource run), crash (the worker forgets its tokens; a worker that does not crash keeps
//! its token and keeps using it after it went stale), clock moves (+5 s, exactly onto the
//! next expiry, 1 ms before it) and the TTL sweep; the one-run configuration adds send once
//! (the send succeeds, fails before anything left, or fires and loses its acknowledgement)
//! and the reconciler with a truthful probe. The retry ceiling is 1, so quarantine is
//! reachable.
//!
//! The search is breadth-first. Every transition replays one operation on a clone of the
//! parent's store through a fresh `HeartFleet`, and carries the counters, receipt counts and
//! the receipt replay along the path. States are deduplicated by a canonical fingerprint of
//! the store rows, each worker's tokens, the intents and the effects that fired, with every
//! timestamp taken relative to the clock and every token epoch relative to its run's epoch
//! (the core only compares times with `now` and with each other, so shifted states behave
//! alike).
//!
//! Checked on every transition: the result against a simple model of the pre-state (who
//! may acquire, which tokens are live, which keys are claimed), a stale token changes
//! nothing and fires nothing (property 3), every receipt verifies, the counters equal the
//! receipt counts and the receipt replay matches the rows (property 5). Checked on every
//! new state: mutual exclusion (1), every held expired run is recovered by a takeover and
//! by the sweep on clones of the store, or quarantined at the ceiling (2), and at most one
//! fire per effect key (4).
//!
//! `HEART_EXHAUSTIVE_DEPTH` sets the depth of the one-run configuration (default 8); the
//! two-run configuration explores two levels less (default 6).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use heart_fleet_core::ops::{Fenced, ReleaseTo};
use heart_fleet_core::{
    FencingToken, HeartEvent, HeartFleet, HeartMetrics, IntentState, Ledger, MemoryStore, RunRow, RunStatus, Timestamp,
    verify_receipt,
};
use serde_json::json;

const WORKERS: [&str; 2] = ["a", "b"];
const TTL_S: i64 = 10;
const TICK_MS: i64 = 5_000;
const MAX_RETRIES: u32 = 1;
const GUARD_KEY: &str = "guard-key";
const SEND_KEY: &str = "send-key";
const DEFAULT_DEPTH: usize = 8;
/// How many levels less the two-run configuration explores.
const TWO_RUN_OFFSET: usize = 2;

#[derive(Debug, Clone, Copy)]
enum Action {
    Acquire(usize, usize),
    Renew(usize, usize),
    Verify(usize, usize),
    Guard(usize, usize),
    /// Send once; the send succeeds, fails before anything left, or fires and loses the
    /// acknowledgement.
    Send(usize, usize, SendOutcome),
    Release(usize, usize),
    Crash(usize),
    Tick,
    ToExpiry,
    BeforeExpiry,
    Reclaim,
    /// The reconciler with a truthful probe (from what really fired).
    Reconcile,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendOutcome {
    Ok,
    ErrBefore,
    AckLost,
}

struct Config {
    name: &'static str,
    /// One entry per run: whether it is a resource run.
    resource: Vec<bool>,
    send: bool,
    depth: usize,
}

impl Config {
    fn actions(&self) -> Vec<Action> {
        let mut all = Vec::new();
        for w in 0..WORKERS.len() {
            for r in 0..self.resource.len() {
                all.extend([Action::Acquire(w, r), Action::Renew(w, r), Action::Verify(w, r), Action::Guard(w, r)]);
                if self.send {
                    all.extend(
                        [SendOutcome::Ok, SendOutcome::ErrBefore, SendOutcome::AckLost].map(|o| Action::Send(w, r, o)),
                    );
                }
                all.push(Action::Release(w, r));
            }
            all.push(Action::Crash(w));
        }
        all.extend([Action::Tick, Action::ToExpiry, Action::BeforeExpiry, Action::Reclaim]);
        if self.send {
            all.push(Action::Reconcile);
        }
        all
    }
}

/// The replay of one run's receipts.
#[derive(Debug, Clone, PartialEq)]
enum Rep {
    Free,
    Held { owner: String, expiry: Option<String> },
    Quarantined,
}

#[derive(Clone)]
struct State {
    store: MemoryStore,
    run_ids: Vec<String>,
    /// `[worker][run]`: the token the worker has, live or stale.
    tokens: Vec<Vec<Option<FencingToken>>>,
    /// `(run, key)` → how many times the effect really fired.
    fired: BTreeMap<(String, String), u32>,
    metrics: HeartMetrics,
    counts: BTreeMap<&'static str, u64>,
    replay: Vec<Rep>,
    depth: usize,
}

#[derive(Debug, Default)]
struct Stats {
    states: u64,
    transitions: u64,
    per_depth: Vec<u64>,
    takeovers: u64,
    quarantines: u64,
    sweeps: u64,
    stale_rejections: u64,
    stale_effects: u64,
    fires: u64,
    dedupes: u64,
    exact_expiry_rejections: u64,
    what_ifs: u64,
    reopens: u64,
    redispatches: u64,
}

fn status_code(s: RunStatus) -> i64 {
    RunStatus::ALL.iter().position(|x| *x == s).map_or(-1, |i| i as i64)
}

fn owner_code(o: Option<&str>) -> i64 {
    o.map_or(-1, |o| WORKERS.iter().position(|w| *w == o).map_or(9, |i| i as i64))
}

fn intent_code(s: IntentState) -> i64 {
    match s {
        IntentState::Intent => 0,
        IntentState::Dispatched => 1,
        IntentState::Committed => 2,
        IntentState::Abandoned => 3,
    }
}

/// The canonical fingerprint: rows, tokens, intents and fires, with times relative to the
/// clock and token epochs relative to their run's epoch.
fn fingerprint(st: &State) -> Vec<i64> {
    let now = st.store.now().0;
    let rel = |t: Option<Timestamp>| t.map_or(i64::MIN, |t| t.0 - now);
    let mut fp = Vec::new();
    for id in &st.run_ids {
        let r = st.store.run(id).expect("run");
        fp.extend([status_code(r.status), owner_code(r.lease_owner.as_deref()), rel(r.lease_expires_at), r.retries]);
    }
    for row in &st.tokens {
        for (ri, t) in row.iter().enumerate() {
            match t {
                None => fp.push(-1),
                Some(t) => {
                    let epoch = st.store.run(&st.run_ids[ri]).expect("run").fencing_epoch;
                    fp.extend([1, t.lease_expires_at.0 - now, t.epoch.map_or(i64::MIN, |e| epoch - e)]);
                }
            }
        }
    }
    for i in st.store.intents() {
        let ri = st.run_ids.iter().position(|id| *id == i.run_id).map_or(-1, |x| x as i64);
        let epoch = st.store.run(&i.run_id).map_or(0, |r| r.fencing_epoch);
        fp.extend([
            -7,
            ri,
            i64::from(i.effect_key == SEND_KEY),
            intent_code(i.state),
            owner_code(i.fence_owner.as_deref()),
            rel(i.fence_expires_at),
            i.fence_epoch.map_or(i64::MIN, |e| epoch - e),
        ]);
    }
    for ((run, key), n) in &st.fired {
        let ri = st.run_ids.iter().position(|id| id == run).map_or(-1, |x| x as i64);
        fp.extend([-8, ri, i64::from(key == SEND_KEY), i64::from(*n)]);
    }
    fp
}

fn fleet(store: &MemoryStore) -> HeartFleet<MemoryStore> {
    HeartFleet::new(store.clone()).with_max_retries(Some(MAX_RETRIES))
}

fn at_ceiling(r: &RunRow) -> bool {
    r.retries + 1 > i64::from(MAX_RETRIES)
}

/// The earliest expiry (of a row or a token) strictly after the clock.
fn next_expiry(st: &State) -> Option<i64> {
    let now = st.store.now().0;
    let rows = st.store.runs().iter().filter_map(|r| r.lease_expires_at);
    let tokens = st.tokens.iter().flatten().flatten().map(|t| t.lease_expires_at);
    rows.chain(tokens).map(|t| t.0).filter(|t| *t > now).min()
}

fn row(st: &State, ri: usize) -> RunRow {
    st.store.run(&st.run_ids[ri]).expect("run").clone()
}

/// Whether an action applies: a fenced action needs a token, a crash something to forget,
/// a clock move to an expiry an expiry ahead.
fn applies(st: &State, action: Action) -> bool {
    match action {
        Action::Renew(w, ri)
        | Action::Verify(w, ri)
        | Action::Release(w, ri)
        | Action::Guard(w, ri)
        | Action::Send(w, ri, _) => st.tokens[w][ri].is_some(),
        Action::Crash(w) => st.tokens[w].iter().any(Option::is_some),
        Action::ToExpiry => next_expiry(st).is_some(),
        Action::BeforeExpiry => next_expiry(st).is_some_and(|e| e - 1 > st.store.now().0),
        Action::Reconcile => st.store.intents().any(|i| i.state == IntentState::Dispatched),
        Action::Acquire(..) | Action::Tick | Action::Reclaim => true,
    }
}

/// One transition. `Ok(None)` when the action does not apply (no token, no expiry ahead).
fn step(cfg: &Config, st: &State, action: Action, stats: &mut Stats) -> Result<Option<State>, String> {
    if !applies(st, action) {
        return Ok(None);
    }
    let now = st.store.now();
    let mut next = State {
        store: MemoryStore::default(),
        run_ids: st.run_ids.clone(),
        tokens: st.tokens.clone(),
        fired: st.fired.clone(),
        metrics: st.metrics,
        counts: st.counts.clone(),
        replay: st.replay.clone(),
        depth: st.depth + 1,
    };
    let mut f = fleet(&st.store);
    let token = |w: usize, ri: usize| st.tokens[w][ri].clone();
    // The token a fenced action uses, with its run and whether the store accepts it.
    let mut used: Option<(usize, bool)> = None;
    let mut fires: Vec<(String, String)> = Vec::new();
    let effect = |fires: &mut Vec<(String, String)>, run: &str, key: &str| fires.push((run.to_owned(), key.to_owned()));
    match action {
        Action::Acquire(w, ri) => {
            let before = row(st, ri);
            let expired = before.status.is_held() && before.lease_expired(now);
            let acquirable = before.status == RunStatus::Ready || (expired && !at_ceiling(&before));
            let a = f.acquire(&st.run_ids[ri], WORKERS[w], TTL_S).map_err(|e| e.to_string())?;
            let after = f.store().run(&st.run_ids[ri]).expect("run").clone();
            if a.acquired != acquirable {
                return Err(format!("acquire by {} on {before:?}: {a:?}", WORKERS[w]));
            }
            if acquirable {
                let fence = a.fence.clone().ok_or("no fence")?;
                let want_retries = before.retries + i64::from(before.status.is_held());
                let ok = after.lease_owner.as_deref() == Some(WORKERS[w])
                    && after.lease_expires_at == Some(Timestamp(now.0 + TTL_S * 1000))
                    && after.fencing_epoch == before.fencing_epoch + 1
                    && after.retries == want_retries
                    && fence.epoch == Some(after.fencing_epoch)
                    && after.holds(&fence, now);
                if !ok {
                    return Err(format!("acquire wrote {after:?} / {fence:?} from {before:?}"));
                }
                if before.status.is_held() {
                    stats.takeovers += 1;
                }
                next.tokens[w][ri] = Some(fence);
            } else if expired {
                // The dead holder's run is at the ceiling: quarantined in one write.
                if a.code != Some(heart_fleet_core::ErrorCode::Quarantined) || after.status != RunStatus::Quarantined {
                    return Err(format!("acquire at the ceiling: {a:?}, row {after:?}"));
                }
                stats.quarantines += 1;
            } else if after != before {
                return Err("a failed acquire changed the row".into());
            }
        }
        Action::Renew(w, ri) | Action::Verify(w, ri) | Action::Release(w, ri) => {
            let Some(t) = token(w, ri) else { return Ok(None) };
            let before = row(st, ri);
            let live = before.holds(&t, now);
            used = Some((ri, live));
            match action {
                Action::Renew(..) => match f.renew(&t, TTL_S).map_err(|e| e.to_string())? {
                    Fenced::Ok { value } => {
                        let after = row_of(&f, &st.run_ids[ri]);
                        if !live || value.lease_expires_at.0 != now.0 + TTL_S * 1000 || !after.holds(&value, now) {
                            return Err(format!("renew of {t:?} (live {live}) gave {value:?}"));
                        }
                        next.tokens[w][ri] = Some(value);
                    }
                    Fenced::Rejected { .. } if !live => {}
                    other => return Err(format!("renew of a live token refused: {other:?}")),
                },
                Action::Verify(..) => {
                    let ok = f.verify_fence(&t).map_err(|e| e.to_string())?;
                    if ok != live {
                        return Err(format!("verify of {t:?} said {ok}, live {live}"));
                    }
                }
                _ => {
                    let to = if cfg.resource[ri] { ReleaseTo::Ready } else { ReleaseTo::Completed };
                    match f.release(&t, to).map_err(|e| e.to_string())? {
                        Fenced::Ok { value } => {
                            let want = if cfg.resource[ri] { RunStatus::Ready } else { RunStatus::Completed };
                            if !live || value.status != want || value.lease_owner.is_some() {
                                return Err(format!("release of {t:?} (live {live}) gave {value:?}"));
                            }
                            if cfg.resource[ri] && value.retries != 0 {
                                return Err("a resource release kept its retries".into());
                            }
                            next.tokens[w][ri] = None;
                        }
                        Fenced::Rejected { .. } if !live => {}
                        other => return Err(format!("release of a live token refused: {other:?}")),
                    }
                }
            }
        }
        Action::Guard(w, ri) => {
            let Some(t) = token(w, ri) else { return Ok(None) };
            let live = row(st, ri).holds(&t, now);
            used = Some((ri, live));
            let claimed = st.store.intents().any(|i| i.run_id == t.run_id && i.effect_key == GUARD_KEY);
            let g = f
                .guard_irreversible(&t, Ledger::Durable, GUARD_KEY, |epoch| {
                    effect(&mut fires, &t.run_id, GUARD_KEY);
                    Ok(json!({ "epoch": epoch }))
                })
                .map_err(|e| e.to_string())?;
            let want = (live && !claimed, live && claimed);
            if (g.committed, g.reason.as_deref() == Some("already-committed")) != want {
                return Err(format!("guard with {t:?} (live {live}, claimed {claimed}): {g:?}"));
            }
            if live && claimed {
                stats.dedupes += 1;
            }
        }
        Action::Send(w, ri, outcome) => {
            let Some(t) = token(w, ri) else { return Ok(None) };
            let live = row(st, ri).holds(&t, now);
            used = Some((ri, live));
            let prior = st.store.intents().find(|i| i.run_id == t.run_id && i.effect_key == SEND_KEY).map(|i| i.state);
            // A new key, or one the reconciler reopened, may go out; anything else is a duplicate.
            let may_send = prior.is_none_or(|s| s == IntentState::Intent);
            if prior == Some(IntentState::Intent) && live {
                stats.redispatches += 1;
            }
            let s = f.send_once(&t, "telegram", SEND_KEY, &json!({ "text": "hi" }), |epoch| match outcome {
                SendOutcome::Ok => {
                    effect(&mut fires, &t.run_id, SEND_KEY);
                    Ok(json!({ "messageId": 1, "epoch": epoch }))
                }
                SendOutcome::ErrBefore => Err("connection refused".to_owned()),
                SendOutcome::AckLost => {
                    effect(&mut fires, &t.run_id, SEND_KEY);
                    Err("timeout after the message left".to_owned())
                }
            });
            let got = match &s {
                Ok(s) if s.sent && s.committed == Some(true) => "sent",
                Ok(s) => s.reason.as_deref().unwrap_or("?"),
                Err(e) if e.code == heart_fleet_core::ErrorCode::EffectFailed => "effect-failed",
                Err(_) => "error",
            };
            let want = match (live, may_send, outcome) {
                (false, _, _) => "fence-rejected",
                (true, false, _) => "deduped",
                (true, true, SendOutcome::Ok) => "sent",
                (true, true, _) => "effect-failed",
            };
            if got != want {
                return Err(format!("send with {t:?} (live {live}, prior {prior:?}, {outcome:?}): {s:?}"));
            }
            if want == "deduped" {
                stats.dedupes += 1;
            }
        }
        Action::Reconcile => {
            let stale: Vec<_> = st
                .store
                .intents()
                .filter(|i| i.state == IntentState::Dispatched && i.fence_expires_at.is_none_or(|e| e <= now))
                .cloned()
                .collect();
            let fired = &st.fired;
            let mut probe = |i: &heart_fleet_core::IntentRow| {
                Some(Ok(if fired.contains_key(&(i.run_id.clone(), i.effect_key.clone())) {
                    heart_fleet_core::ProbeVerdict::Sent(json!({ "probe": "found" }))
                } else {
                    heart_fleet_core::ProbeVerdict::NotSent
                }))
            };
            let r = f.reconcile_outbox(&mut probe, 5, 50).map_err(|e| e.to_string())?;
            for i in &stale {
                let after = f.store().intents().find(|x| x.run_id == i.run_id && x.effect_key == i.effect_key).cloned();
                let fired = st.fired.contains_key(&(i.run_id.clone(), i.effect_key.clone()));
                let want = if fired { IntentState::Committed } else { IntentState::Intent };
                if after.as_ref().map(|a| a.state) != Some(want) {
                    return Err(format!("reconcile of {i:?} (fired {fired}) left {after:?}"));
                }
                if !fired {
                    stats.reopens += 1;
                }
            }
            if r.scanned != stale.len() as u64 || !r.errors.is_empty() {
                return Err(format!("reconcile scanned {r:?}, expected {} stale intents", stale.len()));
            }
        }
        Action::Crash(w) => next.tokens[w].iter_mut().for_each(|t| *t = None),
        Action::Tick => f.store_mut().advance(TICK_MS),
        Action::ToExpiry | Action::BeforeExpiry => {
            let e = next_expiry(st).ok_or("no expiry ahead")?;
            let target = if matches!(action, Action::ToExpiry) { e } else { e - 1 };
            f.store_mut().set_now(Timestamp(target));
        }
        Action::Reclaim => {
            let expired: Vec<RunRow> =
                st.store.runs().iter().filter(|r| r.status.is_held() && r.lease_expired(now)).cloned().collect();
            let s = f.reclaim_expired(100).map_err(|e| e.to_string())?;
            for r in &expired {
                let after = row_of(&f, &r.id);
                let want = if at_ceiling(r) { RunStatus::Quarantined } else { RunStatus::Ready };
                let listed = if at_ceiling(r) { &s.quarantined_ids } else { &s.reclaimed_ids };
                if after.status != want || after.retries != r.retries + 1 || !listed.contains(&r.id) {
                    return Err(format!("sweep of {r:?} gave {after:?} / {s:?}"));
                }
                stats.sweeps += 1;
            }
            if expired.is_empty() && (s.reclaimed_count > 0 || !s.quarantined_ids.is_empty()) {
                return Err(format!("sweep recovered live leases: {s:?}"));
            }
        }
    }
    stats.transitions += 1;
    next.store = std::mem::take(f.store_mut());

    // Property 3: a token that is not live changes nothing and fires nothing.
    if let Some((ri, false)) = used {
        stats.stale_rejections += 1;
        if matches!(action, Action::Guard(..) | Action::Send(..)) {
            stats.stale_effects += 1;
        }
        if st.store.run(&st.run_ids[ri]).and_then(|r| r.lease_expires_at) == Some(now) {
            stats.exact_expiry_rejections += 1;
        }
        let same = st.store.runs() == next.store.runs()
            && st.store.intents().eq(next.store.intents())
            && st.store.dispatch_log() == next.store.dispatch_log();
        if !same || !fires.is_empty() {
            return Err(format!("{action:?} with a stale token changed the store or fired"));
        }
    }
    for key in fires {
        stats.fires += 1;
        *next.fired.entry(key).or_default() += 1;
    }

    // Property 5: receipts verify, counters equal receipt counts, the replay matches the rows.
    let m = f.metrics();
    macro_rules! add {
        ($($field:ident),*) => { $( next.metrics.$field += m.$field; )* };
    }
    add!(
        acquire_attempts,
        acquire_wins,
        acquire_collisions,
        renews,
        renew_failures,
        releases,
        release_failures,
        reclaims,
        quarantines,
        fence_verifications,
        fence_rejections,
        effect_commits,
        effect_dedupes
    );
    for r in f.receipts() {
        let value = serde_json::to_value(r).map_err(|e| e.to_string())?;
        verify_receipt(&value).map_err(|e| format!("receipt {r:?} does not verify: {e}"))?;
        if r.at != next.store.now().to_iso() {
            return Err(format!("receipt stamped {} at {}", r.at, next.store.now()));
        }
        *next.counts.entry(r.event.as_str()).or_default() += 1;
        let ri = st.run_ids.iter().position(|id| *id == r.run_id).ok_or("receipt for an unknown run")?;
        let cur = &mut next.replay[ri];
        let held_by = matches!(cur, Rep::Held { owner, .. } if *owner == r.owner);
        match r.event {
            HeartEvent::Acquired if *cur == Rep::Free => {
                *cur = Rep::Held { owner: r.owner.clone(), expiry: r.lease_expires_at.clone() }
            }
            HeartEvent::Renewed if held_by => {
                *cur = Rep::Held { owner: r.owner.clone(), expiry: r.lease_expires_at.clone() }
            }
            HeartEvent::Released | HeartEvent::Reclaimed | HeartEvent::ForceReleased if held_by => *cur = Rep::Free,
            HeartEvent::Quarantined if held_by => *cur = Rep::Quarantined,
            HeartEvent::Requeued if *cur == Rep::Quarantined => *cur = Rep::Free,
            HeartEvent::FenceVerified if matches!(cur, Rep::Held { owner, expiry } if *owner == r.owner && *expiry == r.lease_expires_at) =>
                {}
            HeartEvent::FenceRejected | HeartEvent::EffectCommitted | HeartEvent::EffectDeduped => {}
            _ => return Err(format!("receipt {:?} by {} does not follow the replay {cur:?}", r.event, r.owner)),
        }
    }
    let c = |e: HeartEvent| next.counts.get(e.as_str()).copied().unwrap_or(0);
    let m = &next.metrics;
    let pairs = [
        (m.acquire_wins, c(HeartEvent::Acquired)),
        (m.reclaims, c(HeartEvent::Reclaimed)),
        (m.releases, c(HeartEvent::Released)),
        (m.renews, c(HeartEvent::Renewed)),
        (m.fence_verifications, c(HeartEvent::FenceVerified)),
        (m.effect_commits, c(HeartEvent::EffectCommitted)),
        (m.effect_dedupes, c(HeartEvent::EffectDeduped)),
        (m.quarantines, c(HeartEvent::Quarantined)),
        (m.fence_rejections + m.renew_failures + m.release_failures, c(HeartEvent::FenceRejected)),
    ];
    if pairs.iter().any(|(a, b)| a != b) {
        return Err(format!("counters {m:?} do not match the receipt counts {:?}", next.counts));
    }
    for (ri, rep) in next.replay.iter().enumerate() {
        let r = row(&next, ri);
        let ok = match rep {
            Rep::Held { owner, expiry } => {
                r.status.is_held()
                    && r.lease_owner.as_ref() == Some(owner)
                    && r.lease_expires_at.map(|t| t.to_iso()) == *expiry
            }
            Rep::Quarantined => r.status == RunStatus::Quarantined,
            Rep::Free => !r.status.is_held() && r.status != RunStatus::Quarantined,
        };
        if !ok {
            return Err(format!("receipt replay {rep:?} does not match the row {r:?}"));
        }
    }
    Ok(Some(next))
}

fn row_of(f: &HeartFleet<MemoryStore>, id: &str) -> RunRow {
    f.store().run(id).expect("run").clone()
}

/// The state properties of a newly reached state.
fn check_state(st: &State, stats: &mut Stats) -> Result<(), String> {
    let now = st.store.now();
    // 1. Mutual exclusion: the tokens the store accepts belong to one owner per run.
    for (ri, id) in st.run_ids.iter().enumerate() {
        let r = row(st, ri);
        let live: Vec<&FencingToken> =
            st.tokens.iter().filter_map(|ts| ts[ri].as_ref()).filter(|t| r.holds(t, now)).collect();
        if live.len() > 1 {
            return Err(format!("run {id} accepts {live:?} at once"));
        }
        if live.iter().any(|t| t.epoch != Some(r.fencing_epoch)) {
            return Err(format!("a live token of {id} has a foreign epoch"));
        }
    }
    // 4. At most one fire per (run, key); committed intents fired, open ones did not.
    if let Some(((run, key), n)) = st.fired.iter().find(|(_, n)| **n > 1) {
        return Err(format!("effect {run}/{key} fired {n} times"));
    }
    for i in st.store.intents() {
        let fired = st.fired.get(&(i.run_id.clone(), i.effect_key.clone())).copied().unwrap_or(0);
        let ok = match (i.effect_key.as_str(), i.state) {
            (GUARD_KEY, IntentState::Intent) => fired <= 1,
            (SEND_KEY, IntentState::Committed) => fired == 1 && i.external_ref.is_some(),
            // Open (never dispatched, or reopened because it provably never went out).
            (SEND_KEY, IntentState::Intent) => fired == 0,
            (SEND_KEY, IntentState::Dispatched) => fired <= 1 && i.external_ref.is_none(),
            _ => false,
        };
        if !ok {
            return Err(format!("intent {i:?} with {fired} fires"));
        }
    }
    for ((run, key), _) in st.fired.iter() {
        if !st.store.intents().any(|i| i.run_id == *run && i.effect_key == *key) {
            return Err(format!("effect {run}/{key} fired without a durable record"));
        }
    }
    // 2. Killed-worker recovery: every held, expired run can be taken over (or is
    //    quarantined at the ceiling), and the sweep recovers it, on clones of the store.
    for (ri, id) in st.run_ids.iter().enumerate() {
        let r = row(st, ri);
        if !(r.status.is_held() && r.lease_expired(now)) {
            continue;
        }
        stats.what_ifs += 1;
        let prev = r.lease_owner.clone().unwrap_or_default();
        let mut f = fleet(&st.store);
        let a = f.acquire(id, "recoverer", TTL_S).map_err(|e| e.to_string())?;
        let after = row_of(&f, id);
        let events: Vec<(HeartEvent, &str)> = f.receipts().iter().map(|x| (x.event, x.owner.as_str())).collect();
        let ok = if at_ceiling(&r) {
            !a.acquired
                && after.status == RunStatus::Quarantined
                && events == [(HeartEvent::Quarantined, prev.as_str())]
                && f.metrics().quarantines == 1
        } else {
            a.acquired
                && events == [(HeartEvent::Reclaimed, prev.as_str()), (HeartEvent::Acquired, "recoverer")]
                && f.metrics().reclaims == 1
        };
        if !ok || after.retries != r.retries + 1 {
            return Err(format!("takeover of {r:?} gave {a:?}, {after:?}, {events:?}"));
        }
        if st.tokens.iter().flatten().flatten().any(|t| after.holds(t, now)) {
            return Err("a worker's token survived a takeover".into());
        }
        let mut f = fleet(&st.store);
        let s = f.reclaim_expired(100).map_err(|e| e.to_string())?;
        let after = row_of(&f, id);
        let want = if at_ceiling(&r) { RunStatus::Quarantined } else { RunStatus::Ready };
        if after.status != want || after.retries != r.retries + 1 || !s.errors.is_empty() {
            return Err(format!("the sweep left {r:?} as {after:?}"));
        }
    }
    Ok(())
}

fn initial(cfg: &Config) -> State {
    let t0 = Timestamp::parse_iso("2026-07-30T00:00:00.000Z").expect("t0");
    let mut store = MemoryStore::new(t0);
    let mut run_ids = Vec::new();
    for (i, resource) in cfg.resource.iter().enumerate() {
        if !resource {
            store.insert(RunRow::ready(format!("run-{i}"), format!("job:{i}"), t0)).expect("insert");
            run_ids.push(format!("run-{i}"));
        }
    }
    let mut f = HeartFleet::new(store);
    for (i, resource) in cfg.resource.iter().enumerate() {
        if *resource {
            let (row, created) =
                f.ensure_resource_run("mutex", &format!("res-{i}"), "resource", "exhaustive").expect("ensure");
            assert!(created);
            run_ids.insert(i, row.id);
        }
    }
    let store = std::mem::take(f.store_mut());
    State {
        store,
        tokens: vec![vec![None; cfg.resource.len()]; WORKERS.len()],
        fired: BTreeMap::new(),
        metrics: HeartMetrics::default(),
        counts: BTreeMap::new(),
        replay: vec![Rep::Free; cfg.resource.len()],
        run_ids,
        depth: 0,
    }
}

fn explore(cfg: &Config) -> Stats {
    let started = Instant::now();
    let actions = cfg.actions();
    let mut stats = Stats::default();
    let init = initial(cfg);
    check_state(&init, &mut stats).unwrap_or_else(|e| panic!("{}: initial state: {e}", cfg.name));
    let mut seen: HashSet<Vec<i64>> = HashSet::new();
    seen.insert(fingerprint(&init));
    stats.states = 1;
    stats.per_depth.push(1);
    let mut frontier = vec![(init, Vec::<Action>::new())];
    for _ in 0..cfg.depth {
        let mut next = Vec::new();
        for (st, path) in &frontier {
            for &a in &actions {
                let fail = |e: String| -> ! { panic!("{}: {e}\n  after {:?} then {a:?}", cfg.name, path) };
                let Some(ns) = step(cfg, st, a, &mut stats).unwrap_or_else(|e| fail(e)) else { continue };
                if seen.insert(fingerprint(&ns)) {
                    check_state(&ns, &mut stats).unwrap_or_else(|e| fail(e));
                    let mut p = path.clone();
                    p.push(a);
                    next.push((ns, p));
                }
            }
        }
        stats.states += next.len() as u64;
        stats.per_depth.push(next.len() as u64);
        frontier = next;
        if frontier.is_empty() {
            break;
        }
    }
    println!(
        "exhaustive {} (depth {}, {} actions): {} distinct states, {} transitions in {:.2?}\n  {stats:?}",
        cfg.name,
        cfg.depth,
        actions.len(),
        stats.states,
        stats.transitions,
        started.elapsed()
    );
    stats
}

fn depth() -> usize {
    std::env::var("HEART_EXHAUSTIVE_DEPTH").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_DEPTH)
}

#[test]
fn every_interleaving_of_two_workers_on_one_run() {
    let cfg = Config { name: "2 workers, 1 run", resource: vec![false], send: true, depth: depth() };
    let s = explore(&cfg);
    if cfg.depth >= DEFAULT_DEPTH {
        assert!(s.states >= 7_000, "only {} states", s.states);
        assert!(s.transitions >= 50_000, "only {} transitions", s.transitions);
        for (name, n) in [
            ("takeovers", s.takeovers),
            ("quarantines", s.quarantines),
            ("sweeps", s.sweeps),
            ("stale rejections", s.stale_rejections),
            ("stale effect attempts", s.stale_effects),
            ("stale rejections exactly at the expiry", s.exact_expiry_rejections),
            ("fires", s.fires),
            ("dedupes", s.dedupes),
            ("recovery what-ifs", s.what_ifs),
            ("reopened intents", s.reopens),
            ("re-dispatched intents", s.redispatches),
        ] {
            assert!(n > 0, "no {name} explored");
        }
    } else {
        assert!(s.states > cfg.depth as u64 && s.transitions >= s.states - 1);
    }
}

#[test]
fn every_interleaving_of_two_workers_on_a_run_and_a_resource_run() {
    let cfg = Config {
        name: "2 workers, 1 run + 1 resource run",
        resource: vec![false, true],
        send: false,
        depth: depth().saturating_sub(TWO_RUN_OFFSET).max(1),
    };
    let s = explore(&cfg);
    if cfg.depth + TWO_RUN_OFFSET >= DEFAULT_DEPTH {
        assert!(s.states >= 6_500, "only {} states", s.states);
        assert!(s.transitions >= 28_000, "only {} transitions", s.transitions);
        for (name, n) in [
            ("takeovers", s.takeovers),
            ("quarantines", s.quarantines),
            ("sweeps", s.sweeps),
            ("stale rejections", s.stale_rejections),
            ("stale effect attempts", s.stale_effects),
            ("fires", s.fires),
            ("dedupes", s.dedupes),
            ("recovery what-ifs", s.what_ifs),
        ] {
            assert!(n > 0, "no {name} explored");
        }
    } else {
        assert!(s.states > cfg.depth as u64 && s.transitions >= s.states - 1);
    }
}
