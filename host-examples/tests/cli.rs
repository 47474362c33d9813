//! End-to-end tests of the `heart-fleet` binary: exit statuses, output formats, the golden
//! canonicalization vectors, receipts files, and the simulation's safety report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

mod common;

use common::SAFETY_COUNTS;
use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_heart-fleet"))
}

fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start heart-fleet");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../core/tests/vectors/golden-vectors.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A fresh path in the temp directory, unique to this process and test.
fn temp_file(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("heart-fleet-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The golden `canonicalize` vectors that have JSON input: (input line, canonical, digest).
fn golden_canonical() -> Vec<(String, String, String)> {
    let v = vectors();
    let cases: Vec<_> = v["canonicalize"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| {
            let input = c["input_json"].as_str()?;
            assert!(!input.contains('\n'), "vector {} spans lines", c["name"]);
            Some((input.to_owned(), c["canonical"].as_str()?.to_owned(), c["digest"].as_str()?.to_owned()))
        })
        .collect();
    assert!(cases.len() >= 15, "only {} vectors with JSON input", cases.len());
    cases
}

#[test]
fn canonicalize_matches_the_golden_vectors() {
    let cases = golden_canonical();
    // Blank lines between documents are skipped.
    let input: String = cases.iter().map(|(i, _, _)| format!("{i}\n\n")).collect();
    let out = run(&["canonicalize"], &input);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let got = text(&out.stdout);
    let want: Vec<&str> = cases.iter().map(|(_, c, _)| c.as_str()).collect();
    assert_eq!(got.lines().collect::<Vec<_>>(), want);
    assert!(out.stderr.is_empty());
}

#[test]
fn digest_matches_the_golden_vectors() {
    let cases = golden_canonical();
    let input: String = cases.iter().map(|(i, _, _)| format!("{i}\r\n")).collect();
    let out = run(&["digest"], &input);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let want: Vec<&str> = cases.iter().map(|(_, _, d)| d.as_str()).collect();
    assert_eq!(text(&out.stdout).lines().collect::<Vec<_>>(), want);
}

#[test]
fn a_bad_line_is_named_and_stops_the_command_with_exit_1() {
    let out = run(&["canonicalize"], "{\"b\":1,\"a\":2}\n\n{\"n\":1e400}\n[]\n");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "{\"a\":2,\"b\":1}\n");
    assert_eq!(
        text(&out.stderr),
        "heart-fleet: canonicalize: stdin line 3: Canonical JSON Error: Non-finite number Infinity cannot be serialized.\n"
    );

    let out = run(&["digest"], "1\n{\"a\":\n2\n");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout).lines().count(), 1);
    let err = text(&out.stderr);
    assert!(err.starts_with("heart-fleet: digest: stdin line 2: Canonical JSON Error: invalid JSON"), "{err}");
    assert_eq!(err.lines().count(), 1);
    let out = run(&["digest"], "\u{0}\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("heart-fleet: digest: stdin line 1: "), "{}", text(&out.stderr));
}

#[test]
fn unreadable_stdin_is_one_prefixed_line_and_exit_2() {
    // A directory as standard input: opening it works, reading it fails (EISDIR).
    for verb in ["canonicalize", "digest"] {
        let dir = std::fs::File::open(std::env::temp_dir()).unwrap();
        let out = bin().arg(verb).stdin(Stdio::from(dir)).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{verb}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("heart-fleet: {verb}: cannot read stdin: ")), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn empty_input_is_fine() {
    let out = run(&["digest"], "");
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

/// The reference implementation's receipts from the golden vectors, as JSON Lines.
fn reference_receipts() -> Vec<String> {
    let v = vectors();
    let lines: Vec<String> = v["receipt_digests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| serde_json::to_string(&c["receipt"]).unwrap())
        .collect();
    assert!(lines.len() >= 10);
    lines
}

/// The runs the receipts among `lines` belong to.
fn runs_of<S: AsRef<str>>(lines: &[S]) -> usize {
    let runs: std::collections::BTreeSet<String> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l.as_ref()).ok())
        .filter_map(|v| v["runId"].as_str().map(str::to_owned))
        .collect();
    runs.len()
}

#[test]
fn verify_receipts_accepts_the_reference_receipts() {
    let lines = reference_receipts();
    let path = temp_file("good.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n\n").unwrap();
    let out = run(&["verify-receipts", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    // Receipts of the TypeScript package carry no chain: they verify by digest, counted unchained.
    assert_eq!(
        text(&out.stdout),
        format!(
            "{n} receipts, {n} ok, 0 tampered, 0 malformed; {r} runs, 0 chained, {n} unchained, 0 signed, 0 chain findings\n",
            n = lines.len(),
            r = runs_of(&lines)
        )
    );
    assert!(out.stderr.is_empty());
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn verify_receipts_names_a_tampered_line_and_exits_1() {
    let mut lines = reference_receipts();
    let mut r: Value = serde_json::from_str(&lines[4]).unwrap();
    r["owner"] = Value::String("mallory".into());
    lines[4] = serde_json::to_string(&r).unwrap();
    lines.push("{\"not\":\"a receipt\"}".into());
    let path = temp_file("tampered.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let out = run(&["verify-receipts", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let report: Vec<&str> = stdout.lines().collect();
    assert_eq!(report.len(), 3, "{stdout}");
    assert!(report[0].starts_with("line 5: receipt-tampered: digest sha256:dreamnet-sorted-json:v0:"), "{}", report[0]);
    let n = lines.len();
    assert!(report[1].starts_with(&format!("line {n}: invalid-input: ")), "{}", report[1]);
    let intact: Vec<&String> = lines.iter().enumerate().filter(|(i, _)| *i != 4).map(|(_, l)| l).collect();
    assert_eq!(
        report[2],
        format!(
            "{n} receipts, {ok} ok, 1 tampered, 1 malformed; {r} runs, 0 chained, {ok} unchained, 0 signed, 0 chain findings",
            ok = n - 2,
            r = runs_of(&intact)
        )
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn verify_receipts_on_a_missing_file_exits_2_with_one_line() {
    let path = temp_file("missing.jsonl");
    let out = run(&["verify-receipts", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("heart-fleet: cannot read "), "{err}");
}

fn simulate_json(extra: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec!["simulate", "--json"];
    args.extend_from_slice(extra);
    let out = run(&args, "");
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    (out.status.code(), serde_json::from_str(&stdout).unwrap())
}

#[test]
fn simulate_is_safe_across_seeds_and_crash_rates() {
    let mut crashes_at_high_rate = 0;
    let mut mid_send = 0;
    for seed in ["1", "2", "3", "42"] {
        for rate in ["0", "0.1", "0.5"] {
            let (code, r) = simulate_json(&["--seed", seed, "--crash-rate", rate, "--runs", "12", "--effects", "3"]);
            assert_eq!(code, Some(0), "seed {seed} rate {rate}: {r}");
            for k in SAFETY_COUNTS {
                assert_eq!(r[k], 0, "{k} for seed {seed} rate {rate}: {r}");
            }
            assert_eq!(r["safe"], true);
            assert_eq!(r["quiescent"], true);
            assert_eq!(r["effects_fired"], 36);
            assert!(r["steps"].as_u64().unwrap() > 0);
            assert_eq!(r["metrics"]["releases"], 12, "{r}");
            if rate == "0" {
                assert_eq!(r["crashes"], 0);
            }
            if rate == "0.5" {
                crashes_at_high_rate += r["crashes"].as_u64().unwrap();
                mid_send += r["crashes_mid_send"].as_u64().unwrap();
            }
        }
    }
    assert!(crashes_at_high_rate > 0, "the high crash rate crashed nobody: the test would be vacuous");
    assert!(mid_send > 0, "no crash hit a send in flight");
}

#[test]
fn simulate_with_a_retry_ceiling_requeues_and_stays_safe() {
    let (code, r) = simulate_json(&["--seed", "9", "--crash-rate", "0.4", "--max-retries", "1", "--runs", "10"]);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["safe"], true);
    assert!(r["metrics"]["quarantines"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["requeued"], r["metrics"]["quarantines"]);
}

#[test]
fn simulate_exits_1_when_the_store_is_broken() {
    let (code, r) = simulate_json(&["--inject-fault", "no-fencing", "--pause-rate", "0.2", "--seed", "1"]);
    assert_eq!(code, Some(1), "{r}");
    assert_eq!(r["safe"], false);
    assert!(r["exclusion_violations"].as_u64().unwrap() > 0);
    let (code, r) = simulate_json(&["--inject-fault", "no-ledger", "--crash-rate", "0.3", "--seed", "2"]);
    assert_eq!(code, Some(1), "{r}");
    assert!(r["duplicate_effects"].as_u64().unwrap() > 0, "{r}");
}

#[test]
fn simulate_reports_every_recovery_its_receipts_show() {
    // A takeover of an expired lease in acquire is a recovery, with its `reclaimed` receipt,
    // as much as the sweeper's: the report counts both.
    let mut takeovers = 0;
    for seed in 1..=6 {
        let path = temp_file(&format!("recoveries-{seed}.jsonl"));
        let p = path.to_str().unwrap();
        let s = seed.to_string();
        let (code, r) = simulate_json(&["--seed", &s, "--crash-rate", "0.3", "--pause-rate", "0.1", "--receipts", p]);
        assert_eq!(code, Some(0), "{r}");
        let receipts: Vec<Value> =
            std::fs::read_to_string(&path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let reclaimed = receipts.iter().filter(|x| x["event"] == "reclaimed").count() as u64;
        let (sweeper, acquire) = (r["reclaimed"].as_u64().unwrap(), r["takeovers"].as_u64().unwrap());
        assert_eq!(sweeper + acquire, reclaimed, "seed {seed}: {r}");
        assert_eq!(r["metrics"]["reclaims"].as_u64(), Some(reclaimed), "seed {seed}: {r}");
        takeovers += acquire;
        std::fs::remove_file(&path).unwrap();
    }
    assert!(takeovers > 0, "no takeover happened: the test would be vacuous");
    let human = text(&run(&["simulate", "--seed", "3", "--crash-rate", "0.3", "--quiet"], "").stdout);
    assert!(human.contains(" recovered (") && human.contains(" taken over by acquire)"), "{human}");
}

#[test]
fn simulate_refuses_the_flags_of_the_other_mode() {
    // The multi-process simulation has no use for the in-process fleet's knobs, and the
    // in-process one none for the wall clock's: each is refused, one line, exit 2, before
    // anything runs.
    for (args, flag) in [
        (&["--processes", "2", "--workers", "3"][..], "--workers"),
        (&["--processes", "2", "--crash-rate", "0.2"], "--crash-rate"),
        (&["--processes", "2", "--pause-rate", "0.1"], "--pause-rate"),
        (&["--processes", "2", "--steps", "50"], "--steps"),
        (&["--processes", "2", "--sweep-every", "2"], "--sweep-every"),
        (&["--max-seconds", "5"], "--max-seconds"),
        (&["--work-ms", "10"], "--work-ms"),
    ] {
        let mut full = vec!["simulate"];
        full.extend_from_slice(args);
        let out = run(&full, "");
        assert_eq!(out.status.code(), Some(2), "{full:?}: {}", text(&out.stdout));
        assert!(out.stdout.is_empty(), "{full:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{full:?}: {err}");
        assert!(err.starts_with("heart-fleet: simulate: ") && err.contains(flag), "{full:?}: {err}");
        assert!(err.contains("--processes"), "{full:?}: {err}");
    }
}

#[test]
fn simulate_help_tells_the_truth_about_its_store() {
    let help = text(&run(&["simulate", "--help"], "").stdout);
    // The option's own paragraph: its line and the description under it.
    let store: String = help
        .lines()
        .skip_while(|l| l.trim() != "--store <URL>")
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(store.contains("--store <URL>"), "{help}");
    assert!(store.contains("never uses it") && store.contains("temporary SQLite file"), "{store}");
}

#[test]
fn a_seed_reproduces_the_whole_trace() {
    let a = run(&["simulate", "--seed", "11", "--crash-rate", "0.3"], "");
    let b = run(&["simulate", "--seed", "11", "--crash-rate", "0.3"], "");
    assert_eq!(a.status.code(), Some(0));
    assert_eq!(a.stdout, b.stdout);
    let human = text(&a.stdout);
    assert!(human.contains("\"schemaVersion\":\"zao.heart.receipt.v1\""), "receipts are printed as they go");
    assert!(human.contains("result: SAFE"));
    assert!(human.contains("  stale_commits          0"));
    let c = run(&["simulate", "--seed", "12", "--crash-rate", "0.3"], "");
    assert_ne!(a.stdout, c.stdout);
}

#[test]
fn simulate_receipts_file_verifies_clean_and_appends() {
    let path = temp_file("sim.jsonl");
    let p = path.to_str().unwrap();
    let (code, r1) = simulate_json(&["--seed", "5", "--crash-rate", "0.3", "--receipts", p]);
    assert_eq!(code, Some(0));
    let n1 = r1["receipts"].as_u64().unwrap();
    assert!(n1 > 0);
    let out = run(&["verify-receipts", p], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let file: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(
        text(&out.stdout),
        format!(
            "{n1} receipts, {n1} ok, 0 tampered, 0 malformed; {} runs, {n1} chained, 0 unchained, 0 signed, 0 chain findings\n",
            runs_of(&file)
        )
    );

    // A second run appends; the quiet human report goes with it.
    let out = run(&["simulate", "--seed", "6", "--quiet", "--receipts", p], "");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("== heart-fleet simulate report =="));
    let total = std::fs::read_to_string(&path).unwrap().lines().count() as u64;
    assert!(total > n1);
    let out = run(&["verify-receipts", p], "");
    assert_eq!(out.status.code(), Some(0), "the chains go on across the two commands: {}", text(&out.stdout));
    let file: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(
        text(&out.stdout),
        format!(
            "{total} receipts, {total} ok, 0 tampered, 0 malformed; {} runs, {total} chained, 0 unchained, 0 signed, 0 chain findings\n",
            runs_of(&file)
        )
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn simulate_reports_an_unwritable_receipts_file() {
    let dir = temp_file("a-directory");
    std::fs::create_dir_all(&dir).unwrap();
    let out = run(&["simulate", "--json", "--receipts", dir.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).starts_with("heart-fleet: cannot open "));
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn wrong_arguments_fail_with_an_error_line() {
    for args in [
        &["simulate", "--crash-rate", "2"][..],
        &["simulate", "--workers", "0"],
        &["simulate", "--ttl", "1"],
        &["simulate", "--bogus"],
        &["verify-receipts"],
        &["no-such-command"],
        &[],
    ] {
        let out = run(args, "");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.starts_with("error: ") || err.contains("Usage:"), "{args:?}: {err}");
    }
}

/// `check-history` over a history.json: a clean one passes (exit 0), one whose second lease
/// was taken while the first was live fails (exit 1) naming it, and a file that is not a
/// history, or two sources at once, cannot be checked (exit 2).
#[test]
fn check_history_judges_a_history_file() {
    use heart_fleet_core::{HeartEvent, HeartReceipt, Timestamp};
    use heart_fleet_host::chaos::history::{FinalRun, History, LeaseState, ReceiptRow, Transition};

    let t0 = 1_800_000_000_000;
    let leased = |owner: &str, exp: i64, epoch| LeaseState {
        status: "leased".into(),
        owner: Some(owner.into()),
        expires_at: Some(Timestamp(t0 + exp)),
        epoch,
    };
    let ready = LeaseState { status: "ready".into(), owner: None, expires_at: None, epoch: 0 };
    let receipt = |id, owner: &str, exp: i64, at: i64| ReceiptRow {
        id,
        receipt: serde_json::to_value(HeartReceipt::new(
            HeartEvent::Acquired,
            "r1",
            owner,
            Some(Timestamp(t0 + exp)),
            None,
            Timestamp(t0 + at),
        ))
        .unwrap(),
        columns_differ: false,
    };
    let clean = History {
        transitions: vec![Transition {
            id: 1,
            run_id: "r1".into(),
            at: Timestamp(t0),
            old: ready,
            new: leased("a", 2000, 1),
        }],
        receipts: vec![receipt(1, "a", 2000, 0)],
        runs: vec![FinalRun { id: "r1".into(), state: leased("a", 2000, 1) }],
        killed_owners: vec![],
        ..History::default()
    };
    let mut overlap = clean.clone();
    overlap.transitions.push(Transition {
        id: 2,
        run_id: "r1".into(),
        at: Timestamp(t0 + 1000),
        old: leased("a", 2000, 1),
        new: leased("b", 3000, 2),
    });
    overlap.receipts.push(receipt(2, "b", 3000, 1000));
    overlap.runs[0].state = leased("b", 3000, 2);

    let file = |name: &str, h: &History| {
        let path = temp_file(name);
        std::fs::write(&path, serde_json::to_vec(h).unwrap()).unwrap();
        path
    };
    let clean_path = file("clean-history.json", &clean);
    let out = run(&["check-history", "--history", clean_path.to_str().unwrap(), "--json"], "");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The run is still held at the end: that alone is an unfinished run.
    assert_eq!(v["unfinished_runs"], 1, "{v}");
    assert_eq!(out.status.code(), Some(1));
    let mut released = clean.clone();
    released.runs[0].state = LeaseState { status: "ready".into(), owner: None, expires_at: None, epoch: 1 };
    released.transitions.push(Transition {
        id: 2,
        run_id: "r1".into(),
        at: Timestamp(t0 + 500),
        old: leased("a", 2000, 1),
        new: released.runs[0].state.clone(),
    });
    let released_path = file("released-history.json", &released);
    let out = run(&["check-history", "--history", released_path.to_str().unwrap(), "--json"], "");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((out.status.code(), v["verdict"].as_str()), (Some(0), Some("pass")), "{v}");

    let overlap_path = file("overlap-history.json", &overlap);
    let out = run(&["check-history", "--history", overlap_path.to_str().unwrap()], "");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("exclusion_violations 1"), "{stdout}");
    assert!(stdout.contains("took epoch 2") && stdout.ends_with("verdict: fail\n"), "{stdout}");

    let bad = temp_file("not-a-history.json");
    std::fs::write(&bad, "{\"transitions\": 3}").unwrap();
    let out = run(&["check-history", "--history", bad.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a history"), "{}", text(&out.stderr));
    let out = run(&["check-history", "--history", bad.to_str().unwrap(), "--store", "sqlite::memory:"], "");
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["check-history"], "");
    assert_eq!(out.status.code(), Some(2));
    for p in [clean_path, released_path, overlap_path, bad] {
        let _ = std::fs::remove_file(p);
    }
}
