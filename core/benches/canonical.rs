//! Benchmarks of `heart_fleet_core::canonical`: canonical digests of a receipt-shaped object and
//! of ~1 KB / ~100 KB JSON documents, against plain SHA-256 over the same canonical bytes.
//!
//! Run: `cargo bench -p heart-fleet-core --bench canonical -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use heart_fleet_core::canonical::{canonical_digest, canonicalize, digest_json, receipt_digest, sha256_hex};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Small deterministic generator (64-bit LCG, high bits).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

const STATUSES: [&str; 5] = ["pending", "leased", "completed", "failed", "waiting_approval"];
const EVENTS: [&str; 5] = ["acquired", "renewed", "fence_verified", "released", "reclaimed"];
const NOTES: [&str; 4] = [
    "plain ascii note about the run",
    "line one\nline two with \"quotes\" and a \\ backslash",
    "caf\u{e9} \u{2014} d\u{e9}j\u{e0} vu \u{1f600} unicode note",
    "tab\tseparated\tvalues",
];

/// One record: nested objects and arrays, strings (some needing escapes or non-ASCII),
/// integers, floats, booleans and nulls.
fn record(i: u64, rng: &mut Lcg) -> Value {
    let r = rng.next();
    let history: Vec<Value> = (0..(r % 4 + 1))
        .map(|h| {
            json!({
                "event": EVENTS[((r >> 3) + h) as usize % EVENTS.len()],
                "at": format!("2026-07-30T00:{:02}:{:02}.000Z", (h * 7) % 60, (r + h) % 60),
                "attempt": h,
            })
        })
        .collect();
    json!({
        "id": i,
        "runId": format!("00000000-0000-4000-8000-{i:012}"),
        "owner": format!("worker-{}", r % 16),
        "status": STATUSES[(r % 5) as usize],
        "score": (r % 100_000) as f64 / 1000.0,
        "ratio": r as f64 / f64::from(u32::MAX),
        "retries": r % 5,
        "active": r.is_multiple_of(2),
        "note": if r.is_multiple_of(3) { Value::Null } else { json!(NOTES[(r % 4) as usize]) },
        "tags": ["heart", "fleet", format!("shard-{}", r % 8)],
        "lease": {
            "expiresAt": "2026-07-30T00:01:00.000Z",
            "fence": {"owner": format!("zoe:vps-{}:{}", r % 3, r % 10_000), "token": r},
        },
        "history": history,
    })
}

/// A document whose canonical form is at least `target` bytes.
fn document(target: usize) -> Value {
    let mut rng = Lcg(0x5eed);
    let mut records = Vec::new();
    loop {
        let doc = json!({
            "kind": "heart-fleet.bench",
            "version": 1,
            "records": records,
        });
        if canonicalize(&doc).len() >= target {
            return doc;
        }
        let next = record(records.len() as u64, &mut rng);
        records.push(next);
    }
}

fn bench_receipt(c: &mut Criterion) {
    let receipt = json!({
        "event": "acquired",
        "runId": "00000000-0000-4000-8000-000000000001",
        "owner": "worker-A",
        "leaseExpiresAt": "2026-07-30T00:01:00.000Z",
        "effectKey": null,
    });
    let canonical = canonicalize(&receipt);
    let mut group = c.benchmark_group("canonical/receipt");
    group.throughput(Throughput::Bytes(canonical.len() as u64));
    group.bench_function("canonical_digest", |b| b.iter(|| canonical_digest(black_box(&receipt))));
    group.bench_function("receipt_digest_direct", |b| {
        b.iter(|| {
            receipt_digest(
                black_box("acquired"),
                black_box("00000000-0000-4000-8000-000000000001"),
                black_box("worker-A"),
                black_box(Some("2026-07-30T00:01:00.000Z")),
                black_box(None),
            )
        })
    });
    group.bench_function("sha256_baseline", |b| b.iter(|| Sha256::digest(black_box(canonical.as_bytes()))));
    group.finish();
}

fn bench_documents(c: &mut Criterion) {
    for (label, target) in [("1KB", 1024), ("100KB", 100 * 1024)] {
        let doc = document(target);
        let canonical = canonicalize(&doc);
        let text = serde_json::to_string(&doc).unwrap_or_default();
        let mut group = c.benchmark_group(format!("canonical/{label}"));
        group.throughput(Throughput::Bytes(canonical.len() as u64));
        group.bench_function("sha256_baseline", |b| b.iter(|| Sha256::digest(black_box(canonical.as_bytes()))));
        group.bench_function("canonical_digest", |b| b.iter(|| canonical_digest(black_box(&doc))));
        group.bench_function("canonicalize", |b| b.iter(|| canonicalize(black_box(&doc))));
        group.bench_function("canonicalize_then_sha256_hex", |b| b.iter(|| sha256_hex(&canonicalize(black_box(&doc)))));
        group.bench_function("digest_json_from_text", |b| b.iter(|| digest_json(black_box(&text)).ok()));
        group.finish();
    }
}

criterion_group!(benches, bench_receipt, bench_documents);
criterion_main!(benches);
