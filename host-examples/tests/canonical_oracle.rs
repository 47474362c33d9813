//! Canonical JSON against a JavaScript oracle: the reference algorithm, run by Node
//! (`tests/canonical-oracle/oracle.mjs`), on random documents from a seed drawn per run, and
//! on the escape-follower regression vectors (`core/tests/vectors/escape-followers.json`).
//!
//! Every canonicalizing entry point on the Rust side is compared: the core over JSON text
//! (`canonicalize_json`, the streamed `digest_json`), the core over `serde_json::Value`
//! (`canonicalize`, `canonical_digest`, `effect_key`), `receipt_digest`,
//! `deterministic_resource_id`, the CLI's `canonicalize` and `digest` verbs, and, on a share of
//! the documents, the component through wasmtime.
//!
//! `HEART_ORACLE_SEED=S` replays a run (the seed is printed, and named in every failure);
//! `HEART_ORACLE_COUNT=N` changes the number of documents (50,000 by default). Needs `node`
//! (the README's test command installs it) and the component (`cargo run -p xtask -- component`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use heart_fleet_core::MemoryStore;
use heart_fleet_core::Timestamp;
use heart_fleet_core::canonical::{
    DIGEST_PREFIX, canonical_digest, canonicalize, canonicalize_json, deterministic_resource_id, digest_json,
    effect_key, receipt_digest,
};
use heart_fleet_wasmtime_host::{ComponentFleet, FleetComponent};
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One document and what the oracle says of it.
struct Record {
    text: String,
    canonical: String,
    digest: String,
    a: String,
    b: String,
    receipt_digest: String,
    resource_id: Option<String>,
}

fn seed() -> u32 {
    match std::env::var("HEART_ORACLE_SEED") {
        Ok(s) if !s.is_empty() => s.parse().expect("HEART_ORACLE_SEED is a 32-bit unsigned integer"),
        _ => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
            (now.as_nanos() as u32) ^ std::process::id().rotate_left(16)
        }
    }
}

fn count() -> usize {
    std::env::var("HEART_ORACLE_COUNT").ok().and_then(|s| s.parse().ok()).unwrap_or(50_000)
}

fn node(args: &[&str]) -> Vec<u8> {
    let out =
        Command::new("node").current_dir(repo()).args(args).stderr(Stdio::inherit()).output().unwrap_or_else(|e| {
            panic!("cannot run node ({e}): the oracle needs Node (bash scripts/test-all.sh installs it)")
        });
    assert!(out.status.success(), "node {args:?} failed: {:?}", out.status);
    out.stdout
}

fn oracle(seed: u32, count: usize) -> Vec<Record> {
    let out = node(&["tests/canonical-oracle/oracle.mjs", "--seed", &seed.to_string(), "--count", &count.to_string()]);
    let text = String::from_utf8(out).expect("the oracle writes UTF-8");
    let lines: Vec<&str> = text.split('\n').collect();
    let mut records = Vec::with_capacity(count);
    for chunk in lines.chunks_exact(4) {
        let extra: (String, String, String, Option<String>) = serde_json::from_str(chunk[3]).expect("record line 4");
        records.push(Record {
            text: chunk[0].to_owned(),
            canonical: chunk[1].to_owned(),
            digest: chunk[2].to_owned(),
            a: extra.0,
            b: extra.1,
            receipt_digest: extra.2,
            resource_id: extra.3,
        });
    }
    assert_eq!(records.len(), count, "the oracle wrote {} records, not {count}", records.len());
    records
}

/// Collects mismatches and fails with the first few, naming the seed.
struct Mismatches {
    /// The run's seed, for random documents; `None` for the fixed vectors.
    seed: Option<u32>,
    found: Vec<String>,
    total: usize,
}

impl Mismatches {
    fn new(seed: Option<u32>) -> Self {
        Mismatches { seed, found: Vec::new(), total: 0 }
    }

    fn check(&mut self, what: &str, index: usize, text: &str, got: &str, expected: &str) {
        if got != expected {
            self.total += 1;
            if self.found.len() < 5 {
                self.found.push(format!(
                    "{what}, document {index}:\n  input    {text}\n  got      {got}\n  expected {expected}"
                ));
            }
        }
    }

    fn finish(self, what: &str) {
        let replay = match self.seed {
            Some(seed) => format!(
                ", seed {seed} (replay: HEART_ORACLE_SEED={seed} cargo test -p heart-fleet-host --test canonical_oracle)"
            ),
            None => String::new(),
        };
        assert!(
            self.total == 0,
            "{what}: {} mismatch(es) with the JavaScript oracle{replay}:\n{}",
            self.total,
            self.found.join("\n")
        );
    }
}

fn hex_of(digest: &str) -> &str {
    digest.strip_prefix(DIGEST_PREFIX).expect("an oracle digest has the prefix")
}

/// Pipes every document through `heart-fleet VERB` and returns its output lines.
fn cli(verb: &str, records: &[Record]) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_heart-fleet"))
        .arg(verb)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input: String = records.iter().flat_map(|r| [r.text.as_str(), "\n"]).collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "heart-fleet {verb}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
}

fn component_fleet() -> ComponentFleet<MemoryStore> {
    let component =
        FleetComponent::locate().unwrap_or_else(|e| panic!("{e}\n(build it first: cargo run -p xtask -- component)"));
    let store = MemoryStore::new(Timestamp::parse_iso("2026-07-30T00:00:00.000Z").unwrap());
    ComponentFleet::new(&component, store).unwrap()
}

#[test]
fn random_documents_agree_with_the_javascript_oracle_at_every_entry_point() {
    let seed = seed();
    let count = count();
    println!("canonical oracle: {count} documents, seed {seed} (HEART_ORACLE_SEED={seed} replays this run)");
    let records = oracle(seed, count);

    // The core, over JSON text and over serde_json values.
    let mut core = Mismatches::new(Some(seed));
    let mut as_values = 0usize;
    for (i, r) in records.iter().enumerate() {
        let text = &r.text;
        core.check(
            "canonicalize_json",
            i,
            text,
            &canonicalize_json(text).unwrap_or_else(|e| e.to_string()),
            &r.canonical,
        );
        core.check("digest_json", i, text, &digest_json(text).unwrap_or_else(|e| e.to_string()), &r.digest);
        // serde_json holds no lone surrogate and nests at most 128 deep: those documents
        // stay on the text path above.
        if let Ok(value) = serde_json::from_str::<Value>(text) {
            as_values += 1;
            core.check("canonicalize (Value)", i, text, &canonicalize(&value), &r.canonical);
            core.check("canonical_digest (Value)", i, text, &canonical_digest(&value), &r.digest);
            let key = format!("telegram:{}", hex_of(&r.digest));
            core.check("effect_key", i, text, &effect_key("telegram", &value), &key);
        }
        let receipt = receipt_digest(&r.a, &r.b, &format!("{}{}", r.a, r.b), Some(&r.a), Some(&r.b));
        core.check("receipt_digest", i, &format!("{:?} {:?}", r.a, r.b), &receipt, &r.receipt_digest);
        let id = deterministic_resource_id(&r.a, &r.b).ok().unwrap_or_default();
        core.check("deterministic_resource_id", i, &r.a, &id, r.resource_id.as_deref().unwrap_or_default());
    }
    core.finish("the core");
    assert!(as_values * 2 >= count, "only {as_values} of {count} documents reached the Value path");
    println!("  core: {count} over text, {as_values} also as serde_json values: all equal");

    // The CLI verbs, one process each for every document.
    let mut cli_m = Mismatches::new(Some(seed));
    for (verb, expected) in [("canonicalize", 0), ("digest", 1)] {
        let lines = cli(verb, &records);
        assert_eq!(lines.len(), records.len(), "heart-fleet {verb}: one output line per document");
        for (i, (line, r)) in lines.iter().zip(&records).enumerate() {
            let want = if expected == 0 { &r.canonical } else { &r.digest };
            cli_m.check(verb, i, &r.text, line, want);
        }
    }
    cli_m.finish("the CLI");
    println!("  CLI canonicalize and digest: all equal");

    // The component, on every tenth document.
    let mut fleet = component_fleet();
    let mut comp = Mismatches::new(Some(seed));
    let mut through_component = 0usize;
    for (i, r) in records.iter().enumerate().step_by(10) {
        through_component += 1;
        let text = &r.text;
        comp.check("canonicalize", i, text, &fleet.canonicalize(text).unwrap_or_else(|e| e.to_string()), &r.canonical);
        comp.check("digest", i, text, &fleet.digest(text).unwrap_or_else(|e| e.to_string()), &r.digest);
        if let Ok(value) = serde_json::from_str::<Value>(text) {
            let key = format!("telegram:{}", hex_of(&r.digest));
            comp.check(
                "effect-key",
                i,
                text,
                &fleet.effect_key("telegram", &value).unwrap_or_else(|e| e.to_string()),
                &key,
            );
        }
        if let Some(expected) = &r.resource_id {
            let got = fleet.deterministic_resource_id(&r.a, &r.b).unwrap_or_else(|e| e.to_string());
            comp.check("deterministic-resource-id", i, &r.a, &got, expected);
        }
    }
    comp.finish("the component");
    println!("  component: {through_component} documents: all equal");
}

/// The documents of `core/tests/vectors/escape-followers.json`, as its `about` describes.
fn escape_follower_cases() -> Vec<(String, String)> {
    let path: &Path = &repo().join("core/tests/vectors/escape-followers.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (before, after) = (file["before"].as_str().unwrap(), file["after"].as_str().unwrap());
    let tails = file["tails"].as_u64().unwrap() as usize;
    let cases = file["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 34 * 17, "34 escaped characters × 17 offsets");
    cases
        .iter()
        .map(|case| {
            let escape = case["escape"].as_str().unwrap();
            let offset = case["offset"].as_u64().unwrap() as usize;
            let strings: Vec<Value> = (0x20u8..0x7f)
                .flat_map(|f| {
                    (0..tails).map(move |tail| {
                        Value::String(format!(
                            "{}{escape}{}{}",
                            before.repeat(offset),
                            char::from(f),
                            after.repeat(tail)
                        ))
                    })
                })
                .collect();
            (Value::Array(strings).to_string(), case["digest"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn every_escape_followed_by_every_printable_character_matches_the_vectors() {
    let cases = escape_follower_cases();
    let records: Vec<Record> = cases
        .iter()
        .map(|(text, digest)| Record {
            text: text.clone(),
            canonical: String::new(),
            digest: digest.clone(),
            a: String::new(),
            b: String::new(),
            receipt_digest: String::new(),
            resource_id: None,
        })
        .collect();
    let mut m = Mismatches::new(None);
    let mut fleet = component_fleet();
    for (i, r) in records.iter().enumerate() {
        let value: Value = serde_json::from_str(&r.text).unwrap();
        m.check("digest_json", i, &r.text, &digest_json(&r.text).unwrap(), &r.digest);
        m.check("canonical_digest (Value)", i, &r.text, &canonical_digest(&value), &r.digest);
        let key = format!("p:{}", hex_of(&r.digest));
        m.check("effect_key", i, &r.text, &effect_key("p", &value), &key);
        m.check("component digest", i, &r.text, &fleet.digest(&r.text).unwrap(), &r.digest);
    }
    for (i, (line, r)) in cli("digest", &records).iter().zip(&records).enumerate() {
        m.check("heart-fleet digest", i, &r.text, line, &r.digest);
    }
    m.finish("escape-follower vectors");
}
