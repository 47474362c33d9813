//! Benchmarks of the lease layer on the memory store, through [`HeartFleet`] (the sync
//! driver, the machines, the request evaluator, and the receipts with their SHA-256 digests):
//!
//! * `lease_cycle/acquire_verify_release/{runs}`: one acquire → verify → release cycle (three
//!   receipts) on a resource run that the release returns to `ready`, so the same row is
//!   reused and nothing grows; in a store of 1 run and of 10 000 runs. Receipts go to a sink
//!   that discards them (the default in-memory receipt list would grow without bound, and
//!   the fleet offers no way to clear it).
//! * `lease_cycle/bridge_json`: the same cycle through the JSON bridge the bindings drive
//!   (`bridge::BridgeFleet::begin`: arguments and results as JSON text, receipts handed over
//!   with each step), without any binding: what the JSON protocol itself costs.
//! * `lease_cycle/bridge_json_host_store`: the JSON bridge with every store request handed
//!   out as JSON and answered by the bridge's memory store as JSON text (the path of a JS
//!   store object, without JavaScript).
//! * `lease_cycle/bridge_reference_store`: the JSON bridge over a store with the TypeScript
//!   package's `LeaseStore` methods (`BridgeFleet::begin_on_reference`): every request
//!   becomes the calls `now`, `getRun`, `conditionalUpdate` (verify: `now`, then
//!   `conditionalUpdate` with its conditions given), answered by a map of JSON rows
//!   as a JS store would answer them (the row as JSON text, a shallow merge on a write), the
//!   path of a user's four-method store without JavaScript; the lease cycle's results come
//!   back in the compact form.
//! * `lease_cycle/bridge_compact`: the same cycle through the bridge's compact answers
//!   (`BridgeFleet::acquire_compact` and its siblings: typed arguments, results and receipts
//!   as separated values), the bindings' memory-store fast path.
//! * `lease_cycle/bridge_typed`: the same cycle through the bridge's typed outcomes
//!   (`BridgeFleet::acquire_typed` and its siblings: the core's values and the receipts for
//!   the host's sink), what the Python binding's records are built from.
//! * `lease_cycle/floor`: what any implementation of that cycle must do at least, measured
//!   in the same group: three SHA-256 digests of the cycle's three receipts' canonical bytes
//!   (98-126 bytes) and three lookups of the run by id in a `HashMap` (std's SipHash, as
//!   the memory store's index), each updating the row's status, expiry and epoch.
//! * `reclaim_expired/{n}`: one sweep over `n` expired leases (a scan plus one conditional
//!   write, one receipt and one counter per run), on a fresh copy of a prepared store per
//!   iteration (`iter_batched`; the copy is not timed).
//! * `guard_irreversible/{committed,deduped}`: verify the fence, record the key in a
//!   [`MemoryEffectLedger`], run a no-op effect (two receipts); `committed` uses a fresh
//!   ledger per iteration (`iter_batched`), `deduped` a ledger that already has the key.
//!
//! Run: `cargo bench -p heart-fleet-core --bench lease_cycle -- --warm-up-time 1 --measurement-time 3`
// A benchmark whose setup fails must stop loudly.
#![allow(clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use heart_fleet_core::bridge::{Begun, BridgeFleet, BridgeMemoryStore, COMPACT_SEPARATOR};
use heart_fleet_core::ops::ReleaseTo;
use heart_fleet_core::{
    FencingToken, HeartFleet, HeartReceipt, Ledger, MemoryEffectLedger, MemoryStore, RunRow, RunStatus, Timestamp,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// 2026-07-30T00:00:00.000Z, the golden vectors' clock.
const T0: Timestamp = Timestamp(1_785_369_600_000);

/// A fleet whose receipts are discarded, with no retry ceiling.
fn fleet(store: MemoryStore) -> HeartFleet<MemoryStore> {
    HeartFleet::new(store).with_max_retries(None).with_sink(Box::new(|_: &HeartReceipt| {}))
}

/// A store with one resource run (`bench-run`) plus `filler` ready runs.
fn store_with_resource_run(filler: usize) -> MemoryStore {
    let mut store = MemoryStore::new(T0);
    store.insert(RunRow::ready("bench-run", "heart:resource:bench", T0)).expect("insert the resource run");
    for i in 0..filler {
        store.insert(RunRow::ready(format!("filler-{i}"), format!("filler:{i}"), T0)).expect("insert a filler run");
    }
    store
}

/// A bridge memory store with the resource run `bench-run`.
fn bridge_store() -> BridgeMemoryStore {
    let store = BridgeMemoryStore::new(T0.0);
    store
        .insert(&serde_json::to_string(&RunRow::ready("bench-run", "heart:resource:bench", T0)).expect("a row"))
        .expect("insert the resource run");
    store
}

/// One acquire → verify → release cycle through the JSON bridge, `step` running one
/// operation (by name, with its JSON arguments) to its final step's text.
fn json_cycle(step: &impl Fn(&str, &str) -> String) -> (String, String) {
    let a = step("acquire", r#"{"runId":"bench-run","owner":"worker-A","ttlSeconds":60}"#);
    let at = a.find(r#""fence":"#).expect("acquired") + 8;
    let fence = &a[at..at + a[at..].find('}').expect("a token") + 1];
    let v = step("verifyFence", &format!(r#"{{"fence":{fence}}}"#));
    let r = step("release", &format!(r#"{{"fence":{fence},"nextStatus":"ready"}}"#));
    (v, r)
}

/// The same cycle with compact answers (`step` as in [`json_cycle`]).
fn compact_cycle(step: &impl Fn(&str, &str) -> String) -> (String, String) {
    let a = step("acquire", r#"{"runId":"bench-run","owner":"worker-A","ttlSeconds":60}"#);
    assert!(a.starts_with('A'), "acquired: {a}");
    // The token's four values follow the tag and the row's 18.
    let v: Vec<&str> = a.split(COMPACT_SEPARATOR).skip(19).take(4).collect();
    let fence = format!(r#"{{"runId":"{}","owner":"{}","leaseExpiresAt":"{}","epoch":{}}}"#, v[0], v[1], v[2], v[3]);
    let live = step("verifyFence", &format!(r#"{{"fence":{fence}}}"#));
    let r = step("release", &format!(r#"{{"fence":{fence},"nextStatus":"ready"}}"#));
    assert!(r.starts_with('R'), "released: {r}");
    (live, r)
}

fn bench_cycle(c: &mut Criterion) {
    let mut group = c.benchmark_group("lease_cycle");
    group.throughput(Throughput::Elements(1));
    for runs in [1usize, 10_000] {
        let mut heart = fleet(store_with_resource_run(runs - 1));
        group.bench_function(BenchmarkId::new("acquire_verify_release", runs), |b| {
            b.iter(|| {
                let acq = heart.acquire(black_box("bench-run"), "worker-A", 60).expect("acquire");
                let fence = acq.fence.expect("acquired");
                let live = heart.verify_fence(&fence).expect("verify");
                let released = heart.release(&fence, ReleaseTo::Ready).expect("release");
                black_box((live, released))
            })
        });
        assert_eq!(heart.metrics().acquire_wins, heart.metrics().releases, "every cycle released");
    }
    // The same cycle through the JSON bridge the bindings drive (arguments and results as
    // JSON text, receipts handed over with each step), on the memory store answered in place.
    {
        let store = bridge_store();
        let mut bridge = BridgeFleet::new(None, true);
        bridge.attach_memory_store(&store);
        let step = |kind: &str, args: &str| match bridge.begin(kind, args) {
            Begun::Done(text) => text,
            Begun::Pending(_) => panic!("the memory store answers in place"),
        };
        group.bench_function("bridge_json", |b| b.iter(|| black_box(json_cycle(&step))));
    }
    // The same cycle with every store request handed to the host as JSON and answered by
    // the bridge's memory store as JSON text: a JS store object's path, without JavaScript.
    {
        let store = bridge_store();
        let bridge = BridgeFleet::new(None, true);
        let step = |kind: &str, args: &str| -> String {
            match bridge.begin(kind, args) {
                Begun::Done(text) => text,
                Begun::Pending(mut op) => loop {
                    let answer = store.execute_json(op.request()).expect("the memory store answers");
                    let text = op.resume_store(&answer);
                    if op.is_done() {
                        break text;
                    }
                },
            }
        };
        group.bench_function("bridge_json_host_store", |b| b.iter(|| black_box(json_cycle(&step))));
    }
    // The same cycle over a store with the LeaseStore methods: the calls answered by a map of
    // JSON rows, as a JS store answers them.
    {
        let bridge = BridgeFleet::new(None, true);
        let row = serde_json::to_value(RunRow::ready("bench-run", "heart:resource:bench", T0)).expect("a row");
        let rows = std::cell::RefCell::new(HashMap::from([("bench-run".to_owned(), row)]));
        let sep = COMPACT_SEPARATOR;
        let answer_call = |op: &mut heart_fleet_core::bridge::BridgeOp, call: &str| -> String {
            let mut parts = call.split(sep);
            match parts.next().map(|t| t.to_ascii_lowercase()).as_deref() {
                Some("g") => {
                    let id = parts.next().expect("a run id");
                    let text = rows.borrow().get(id).map_or_else(|| "null".to_owned(), Value::to_string);
                    op.resume_read(T0.0, &text)
                }
                Some("t") => op.resume_clock(T0.0),
                // A write with its conditions given (`w`) or conditioned on the row as read
                // (`u`): the conditions hold in this single-writer bench, the patch merges.
                Some("u" | "w") => {
                    let id = parts.next().expect("a run id");
                    let patch: serde_json::Map<String, Value> =
                        serde_json::from_str(parts.next().expect("a patch")).expect("patch JSON");
                    let mut all = rows.borrow_mut();
                    let row = all.get_mut(id).expect("the run");
                    for (k, v) in patch {
                        row[k] = v;
                    }
                    op.resume_written(&row.to_string())
                }
                other => panic!("unexpected call {other:?}"),
            }
        };
        let step = |kind: &str, args: &str| -> String {
            match bridge.begin_on_reference(kind, args, 5) {
                Begun::Done(text) => text,
                Begun::Pending(mut op) => {
                    let mut text = op.need().to_owned();
                    while !op.is_done() {
                        text = answer_call(&mut op, &text);
                    }
                    text
                }
            }
        };
        group.bench_function("bridge_reference_store", |b| b.iter(|| black_box(compact_cycle(&step))));
    }
    // The same cycle through the bridge's compact answers (typed arguments; results and
    // receipts as separated values), the bindings' memory-store fast path.
    {
        let store = bridge_store();
        let mut bridge = BridgeFleet::new(None, true);
        bridge.attach_memory_store(&store);
        group.bench_function("bridge_compact", |b| {
            b.iter(|| {
                let a = bridge.acquire_compact(black_box("bench-run"), "worker-A", 60).expect("a memory store");
                // The token's four values follow the row's 18.
                let v: Vec<&str> = a.split(COMPACT_SEPARATOR).skip(19).take(4).collect();
                let fence = FencingToken {
                    run_id: v[0].to_owned(),
                    owner: v[1].to_owned(),
                    lease_expires_at: Timestamp::parse_iso(v[2]).expect("an expiry"),
                    epoch: v[3].parse().ok(),
                };
                let live = bridge.verify_fence_compact(&fence).expect("a memory store");
                let released = bridge.release_compact(&fence, "ready").expect("a memory store");
                assert!(released.starts_with('R'), "released");
                black_box((live, released))
            })
        });
        group.bench_function("bridge_typed", |b| {
            b.iter(|| {
                let (acquired, receipts) =
                    bridge.acquire_typed(black_box("bench-run"), "worker-A", 60).expect("a memory store");
                let fence = acquired.expect("acquired").fence.expect("a token");
                let (live, more) = bridge.verify_fence_typed(&fence).expect("a memory store");
                let (released, last) = bridge.release_typed(&fence, "ready").expect("a memory store");
                assert!(matches!(released, Ok(heart_fleet_core::ops::Fenced::Ok { .. })), "released");
                black_box((live, receipts, more, last))
            })
        });
    }
    // The canonical bytes the cycle's receipts digest (acquired, fence_verified, released).
    let receipts: [&[u8]; 3] = [
        br#"{"effectKey":null,"event":"acquired","leaseExpiresAt":"2026-07-30T00:01:00.000Z","owner":"worker-A","runId":"bench-run"}"#,
        br#"{"effectKey":null,"event":"fence_verified","leaseExpiresAt":"2026-07-30T00:01:00.000Z","owner":"worker-A","runId":"bench-run"}"#,
        br#"{"effectKey":null,"event":"released","leaseExpiresAt":null,"owner":"worker-A","runId":"bench-run"}"#,
    ];
    // (status, expiry, epoch) of one run, keyed by id.
    let mut runs: HashMap<String, (u8, i64, i64)> = HashMap::from([("bench-run".to_owned(), (0, 0, 0))]);
    group.bench_function("floor", |b| {
        b.iter(|| {
            let mut digests = [[0u8; 32]; 3];
            for (digest, bytes) in digests.iter_mut().zip(receipts) {
                if let Some(row) = runs.get_mut(black_box("bench-run")) {
                    row.0 ^= 1;
                    row.1 += 60_000;
                    row.2 += 1;
                }
                digest.copy_from_slice(&Sha256::digest(black_box(bytes)));
            }
            black_box(digests)
        })
    });
    group.finish();
}

/// A store with `n` leased runs whose leases expired a second ago.
fn store_with_expired_leases(n: usize) -> MemoryStore {
    let mut store = MemoryStore::new(T0);
    for i in 0..n {
        let mut row = RunRow::ready(format!("run-{i:06}"), format!("expired:{i}"), T0);
        row.status = RunStatus::Leased;
        row.lease_owner = Some(format!("worker-{}", i % 16));
        row.lease_expires_at = Some(Timestamp(T0.0 + 1_000 + (i % 1000) as i64));
        row.fencing_epoch = 1;
        store.insert(row).expect("insert an expired run");
    }
    store.set_now(Timestamp(T0.0 + 5_000));
    store
}

fn bench_reclaim(c: &mut Criterion) {
    let mut group = c.benchmark_group("reclaim_expired");
    for n in [100usize, 1_000, 10_000] {
        let template = store_with_expired_leases(n);
        if n >= 10_000 {
            group.sample_size(20);
        }
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_batched(
                || fleet(template.clone()),
                |mut heart| {
                    let summary = heart.reclaim_expired(n as u32).expect("reclaim");
                    assert_eq!(summary.reclaimed_count, n as u64);
                    heart
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

fn bench_guard(c: &mut Criterion) {
    let mut group = c.benchmark_group("guard_irreversible");
    group.throughput(Throughput::Elements(1));
    let mut heart = fleet(store_with_resource_run(0));
    // A year-long lease on a clock that does not move: the fence stays live throughout.
    let fence: FencingToken =
        heart.acquire("bench-run", "worker-A", 31_536_000).expect("acquire").fence.expect("acquired");
    group.bench_function("committed", |b| {
        b.iter_batched(
            MemoryEffectLedger::default,
            |mut ledger| {
                let r = heart
                    .guard_irreversible(&fence, Ledger::Memory(&mut ledger), "effect:bench", |_| Ok(Value::Null))
                    .expect("guard");
                assert!(r.committed);
                ledger
            },
            BatchSize::SmallInput,
        )
    });
    let mut ledger = MemoryEffectLedger::default();
    ledger.record_once("bench-run", "effect:bench");
    group.bench_function("deduped", |b| {
        b.iter(|| {
            let r = heart
                .guard_irreversible(&fence, Ledger::Memory(&mut ledger), black_box("effect:bench"), |_| Ok(Value::Null))
                .expect("guard");
            black_box(r)
        })
    });
    group.finish();
}

criterion_group!(benches, bench_cycle, bench_reclaim, bench_guard);
criterion_main!(benches);
