//! The component's per-operation cost against the native crate, on the core's memory store.
//!
//! * `cycle/acquire_verify_release/{native,component}`: one acquire → verify → release cycle
//!   (three store requests, three receipts) on a resource run that the release returns to
//!   `ready`, so the same row is reused; receipts go to a sink that discards them.
//!   [`HeartFleet`] against [`ComponentFleet`], both over [`MemoryStore`].
//! * `digest/receipt/{native,component}`: the canonical digest
//!   (`sha256:dreamnet-sorted-json:v0:…`) of a receipt-sized JSON document given as text:
//!   [`canonical::digest_json`] against [`ComponentFleet::digest`].
//! * `boundary/…`: where the component's overhead goes. `export_call/{native,component}`:
//!   `sha256_hex` of a 5-byte string, so the component side is almost only the fixed cost
//!   of one [`ComponentFleet`] call (setting fuel, parking the call's hooks, the export call).
//!   `store_call/{native,component}`: the memory store answering `now` against
//!   [`ComponentFleet::now`], one export call making one store request (`lease-store.execute`)
//!   whose answer carries only the clock: the fixed cost of one operation's two crossings.
//!   `store_json_per_cycle`: what one cycle's store requests and answers cost as JSON (each
//!   request encoded and decoded, each answer encoded and decoded), measured natively on the
//!   requests and answers one cycle really makes: the price of the JSON `lease-store` the
//!   typed interface replaced, kept for comparison.
//!
//! Every figure is this thread's CPU time per iteration (`CLOCK_THREAD_CPUTIME_ID`, through
//! criterion's `iter_custom`), not wall time: the machines this runs on share two cores with
//! builds, and wall time would count the moments another process had the core.
//!
//! The component is compiled once, before anything is timed. It must have been built
//! (`cargo run -p xtask -- component`, or `$HEART_FLEET_COMPONENT`); `scripts/test-all.sh`
//! builds it before `cargo test --all-targets`, which runs each benchmark once.
//!
//! Run: `cargo bench -p heart-fleet-wasmtime-host --bench component_vs_native -- --warm-up-time 1 --measurement-time 3`

// A benchmark whose setup fails (no component, a refused cycle) must stop loudly.
#![allow(clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::Duration;

use criterion::{Bencher, Criterion, Throughput, criterion_group, criterion_main};
use heart_fleet_core::canonical;
use heart_fleet_core::ops::{Fenced, ReleaseTo};
use heart_fleet_core::request::{StoreAnswer, StoreRequest};
use heart_fleet_core::{HeartFleet, HeartReceipt, LeaseStore, MemoryStore, RunRow, StoreError, Timestamp};
use heart_fleet_wasmtime_host::{ComponentFleet, FleetComponent};

/// 2026-07-30T00:00:00.000Z, the golden vectors' clock.
const T0: Timestamp = Timestamp(1_785_369_600_000);

/// A receipt's digested fields, as a receipt would carry them.
const RECEIPT: &str = r#"{"event":"acquired","runId":"00000000-0000-4000-8000-000000000001","owner":"worker-A","leaseExpiresAt":"2026-07-30T00:01:00.000Z","effectKey":null}"#;

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0))
}

/// Times `f` in this thread's CPU time.
fn cpu_iter<R>(b: &mut Bencher<'_>, mut f: impl FnMut() -> R) {
    b.iter_custom(|iters| {
        let start = thread_cpu();
        for _ in 0..iters {
            black_box(f());
        }
        thread_cpu().saturating_sub(start)
    });
}

/// The component, compiled once per process.
fn component() -> &'static FleetComponent {
    static COMPONENT: OnceLock<FleetComponent> = OnceLock::new();
    COMPONENT.get_or_init(|| match FleetComponent::locate() {
        Ok(c) => c,
        Err(e) => panic!(
            "this benchmark runs the heart:fleet component: {e}\n\
             build it first with `cargo run -p xtask -- component` (scripts/test-all.sh does)"
        ),
    })
}

/// A store with one resource run, `bench-run`.
fn store() -> MemoryStore {
    let mut store = MemoryStore::new(T0);
    store.insert(RunRow::ready("bench-run", "heart:resource:bench", T0)).expect("insert the resource run");
    store
}

fn discard(_: &HeartReceipt) {}

fn native_fleet<S: LeaseStore>(store: S) -> HeartFleet<S> {
    HeartFleet::new(store).with_max_retries(None).with_sink(Box::new(discard))
}

fn component_fleet() -> ComponentFleet<MemoryStore> {
    ComponentFleet::new(component(), store())
        .expect("instantiate the component")
        .with_max_retries(None)
        .with_sink(Box::new(discard))
}

/// One acquire → verify → release cycle through either engine.
macro_rules! cycle {
    ($heart:expr) => {{
        let acq = $heart.acquire(black_box("bench-run"), "worker-A", 60).expect("acquire");
        let fence = acq.fence.expect("acquired");
        let live = $heart.verify_fence(&fence).expect("verify");
        let released = $heart.release(&fence, ReleaseTo::Ready).expect("release");
        assert!(live && matches!(released, Fenced::Ok { .. }), "the cycle was refused");
    }};
}

fn bench_cycle(c: &mut Criterion) {
    let mut group = c.benchmark_group("cycle/acquire_verify_release");
    group.throughput(Throughput::Elements(1));
    let mut native = native_fleet(store());
    group.bench_function("native", |b| cpu_iter(b, || cycle!(native)));
    let mut wasm = component_fleet();
    group.bench_function("component", |b| cpu_iter(b, || cycle!(wasm)));
    group.finish();
    assert_eq!(native.metrics().acquire_wins, native.metrics().releases);
    assert_eq!(wasm.metrics().acquire_wins, wasm.metrics().releases);
    assert_eq!(wasm.discarded_instances(), 0, "no trap");
}

fn bench_digest(c: &mut Criterion) {
    let mut group = c.benchmark_group("digest/receipt");
    group.throughput(Throughput::Bytes(RECEIPT.len() as u64));
    let expected = canonical::digest_json(RECEIPT).expect("digest");
    group.bench_function("native", |b| cpu_iter(b, || canonical::digest_json(black_box(RECEIPT)).expect("digest")));
    let mut wasm = component_fleet();
    assert_eq!(wasm.digest(RECEIPT).expect("digest"), expected, "the same digest");
    group.bench_function("component", |b| cpu_iter(b, || wasm.digest(black_box(RECEIPT)).expect("digest")));
    group.finish();
}

/// A memory store that records every request and answer.
struct Recording(MemoryStore, Rc<RefCell<Vec<(StoreRequest, StoreAnswer)>>>);

impl LeaseStore for Recording {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let answer = self.0.execute(req.clone())?;
        self.1.borrow_mut().push((req, answer.clone()));
        Ok(answer)
    }
}

fn bench_boundary(c: &mut Criterion) {
    let mut group = c.benchmark_group("boundary");
    group.bench_function("export_call/native", |b| cpu_iter(b, || canonical::sha256_hex(black_box("heart"))));
    let mut wasm = component_fleet();
    group
        .bench_function("export_call/component", |b| cpu_iter(b, || wasm.sha256_hex(black_box("heart")).expect("sha")));
    // One export call that makes one store request whose answer is only the clock: the fixed
    // cost of an operation's crossings (the cycle makes three of each).
    let mut memory = store();
    group.bench_function("store_call/native", |b| {
        cpu_iter(b, || memory.execute(black_box(StoreRequest::Now)).expect("now"))
    });
    group.bench_function("store_call/component", |b| cpu_iter(b, || wasm.now().expect("now")));

    // The store requests and answers of one cycle, as the component's boundary carries them.
    let log = Rc::new(RefCell::new(Vec::new()));
    let mut recorded = native_fleet(Recording(store(), log.clone()));
    cycle!(recorded);
    let exchanges = log.borrow().clone();
    let bytes: usize = exchanges
        .iter()
        .map(|(q, a)| serde_json::to_string(q).expect("encode").len() + serde_json::to_string(a).expect("encode").len())
        .sum();
    eprintln!("one cycle: {} store requests, {bytes} bytes of JSON across the boundary", exchanges.len());
    group.throughput(Throughput::Elements(1));
    group.bench_function("store_json_per_cycle", |b| {
        cpu_iter(b, || {
            for (q, a) in &exchanges {
                let q: StoreRequest =
                    serde_json::from_str(&serde_json::to_string(black_box(q)).expect("encode")).expect("decode");
                let a: StoreAnswer =
                    serde_json::from_str(&serde_json::to_string(black_box(a)).expect("encode")).expect("decode");
                black_box((q, a));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench_cycle, bench_digest, bench_boundary);
criterion_main!(benches);
