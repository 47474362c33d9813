//! The receipt chain as an auditor meets it, through the `heart-fleet` binary: receipts files
//! written chained and signed (`--signing-key`, `keygen`), `verify-receipts` naming every kind
//! of tampering (a deleted, reordered, duplicated, cut-off, edited or forged receipt), and the
//! bad input that stops it (exit 2, one line naming the line or the file, never a key).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};

use common::{fails, hf, json_lines, ok, temp_dir, text};
use heart_fleet_core::chain::link_digest;
use heart_fleet_core::receipt::receipt_digest;
use serde_json::Value;

struct Keys {
    hmac: PathBuf,
    ed: PathBuf,
    public: PathBuf,
}

/// An HMAC key and an Ed25519 pair in `dir`, made by `keygen`.
fn keygen(dir: &Path) -> Keys {
    let keys = Keys { hmac: dir.join("fleet.key"), ed: dir.join("fleet-ed.key"), public: dir.join("fleet-ed.key.pub") };
    let out = ok(&hf(dir, &["keygen", "--kind", "hmac", "--out", "fleet.key"]));
    assert_eq!(out, "wrote heart-fleet-hmac-sha256-key to fleet.key (mode 0600)\n");
    let out = ok(&hf(dir, &["keygen", "--kind", "ed25519", "--out", "fleet-ed.key"]));
    assert!(out.ends_with("to fleet-ed.key.pub (give it to verifiers)\n"), "{out}");
    keys
}

/// The hex of every key file in `dir`, which no output may contain.
fn key_hex(keys: &Keys) -> Vec<String> {
    [&keys.hmac, &keys.ed, &keys.public]
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap().trim().split_once(':').unwrap().1.to_owned())
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `verify-receipts FILE ARGS --json`: the exit status and the report.
fn verify_json(dir: &Path, file: &Path, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["verify-receipts", s(file), "--json"];
    all.extend_from_slice(args);
    let out = hf(dir, &all);
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    (out.status.code().unwrap(), serde_json::from_str(&text(&out.stdout)).unwrap())
}

/// The (line, code) of every finding.
fn findings(report: &Value) -> Vec<(Option<u64>, String)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["position"].as_u64(), f["code"].as_str().unwrap().to_owned()))
        .collect()
}

fn write_lines(path: &Path, lines: &[Value]) {
    let body: String = lines.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(path, body).unwrap();
}

/// A receipts file of a crashing in-process fleet, signed with both keys.
fn signed_log(dir: &Path, keys: &Keys) -> (PathBuf, Vec<Value>) {
    let file = dir.join("r.jsonl");
    let args = ["simulate", "--seed", "5", "--crash-rate", "0.3", "--quiet", "--receipts", "r.jsonl"];
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--signing-key", s(&keys.hmac), "--signing-key", s(&keys.ed)]);
    ok(&hf(dir, &all));
    let lines = json_lines(&std::fs::read_to_string(&file).unwrap());
    assert!(lines.len() > 20, "{}", lines.len());
    (file, lines)
}

/// The index of a run's receipts in the log: the run with the most.
fn longest_run(lines: &[Value]) -> (String, Vec<usize>) {
    let mut by_run: std::collections::BTreeMap<String, Vec<usize>> = Default::default();
    for (i, l) in lines.iter().enumerate() {
        by_run.entry(l["runId"].as_str().unwrap().to_owned()).or_default().push(i);
    }
    let (run, idx) = by_run.into_iter().max_by_key(|(_, v)| v.len()).unwrap();
    assert!(idx.len() >= 4, "{run}: {idx:?}");
    (run, idx)
}

#[test]
fn a_signed_log_verifies_and_names_every_kind_of_tampering() {
    let dir = temp_dir("heart-chain");
    let keys = keygen(&dir);
    let (file, lines) = signed_log(&dir, &keys);
    let n = lines.len() as u64;
    for l in &lines {
        assert!(
            l["hmac"].as_str().unwrap().starts_with("hmac-sha256:")
                && l["sig"].as_str().unwrap().starts_with("ed25519:")
        );
    }

    // Intact: every receipt verified, chained and, with the keys, signed.
    let (code, r) = verify_json(&dir, &file, &["--key", s(&keys.hmac), "--public-key", s(&keys.public)]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        (r["receipts"].as_u64(), r["ok"].as_u64(), r["chained"].as_u64(), r["signed"].as_u64()),
        (Some(n), Some(n), Some(n), Some(n))
    );
    let human = ok(&hf(&dir, &["verify-receipts", "r.jsonl"]));
    let runs = r["runs"].as_object().unwrap().len();
    assert_eq!(
        human,
        format!(
            "{n} receipts, {n} ok, 0 tampered, 0 malformed; {runs} runs, {n} chained, 0 unchained, 0 signed, 0 chain findings\n"
        )
    );

    let (run, idx) = longest_run(&lines);
    let copy = dir.join("t.jsonl");
    let line_of = |i: usize| Some(i as u64 + 1);

    // A deleted receipt: a gap at the one after it.
    let mut t = lines.clone();
    t.remove(idx[1]);
    write_lines(&copy, &t);
    let (code, r) = verify_json(&dir, &copy, &[]);
    assert_eq!((code, findings(&r)), (1, vec![(line_of(idx[2] - 1), "chain-gap".to_owned())]), "{r}");

    // Two receipts of the run swapped.
    let mut t = lines.clone();
    t.swap(idx[1], idx[2]);
    write_lines(&copy, &t);
    let (code, r) = verify_json(&dir, &copy, &[]);
    assert_eq!(code, 1);
    assert!(findings(&r).iter().any(|(_, c)| c == "chain-reorder"), "{r}");

    // A receipt copied in again.
    let mut t = lines.clone();
    t.push(lines[idx[1]].clone());
    write_lines(&copy, &t);
    let (code, r) = verify_json(&dir, &copy, &[]);
    assert_eq!((code, findings(&r)), (1, vec![(Some(n + 1), "chain-duplicate".to_owned())]), "{r}");

    // The run's last receipt cut off: only a verifier who knows the final seq sees it.
    let last = *idx.last().unwrap();
    let final_seq = lines[last]["seq"].as_u64().unwrap();
    let mut t = lines.clone();
    t.remove(last);
    write_lines(&copy, &t);
    let (code, _) = verify_json(&dir, &copy, &[]);
    assert_eq!(code, 0, "without --final-seq a cut tail is invisible (the README's threat model says so)");
    let arg = format!("{run}={final_seq}");
    let (code, r) = verify_json(&dir, &copy, &["--final-seq", &arg]);
    assert_eq!((code, findings(&r)), (1, vec![(None, "chain-truncated".to_owned())]), "{r}");
    let out = hf(&dir, &["verify-receipts", "t.jsonl", "--final-seq", &arg]);
    assert!(text(&out.stdout).starts_with(&format!("run {run}: chain-truncated: ")), "{}", text(&out.stdout));

    // An edited owner: the reference digest catches it.
    let mut t = lines.clone();
    t[idx[1]]["owner"] = "mallory".into();
    write_lines(&copy, &t);
    let (code, r) = verify_json(&dir, &copy, &[]);
    assert_eq!(code, 1);
    assert_eq!(findings(&r)[0], (line_of(idx[1]), "receipt-tampered".to_owned()), "{r}");

    // A forgery by someone without the key: the owner changed, digest and link recomputed for
    // the same place, the original signatures kept. Without a key only the next receipt's prev
    // shows it; with a key, the signature does.
    let mut t = lines.clone();
    let f = &mut t[idx[1]];
    f["owner"] = "mallory".into();
    let digest = receipt_digest(
        f["event"].as_str().unwrap(),
        &run,
        "mallory",
        f["leaseExpiresAt"].as_str(),
        f["effectKey"].as_str(),
    );
    f["digest"] = digest.into();
    let prev = f["prev"].as_str().map(str::to_owned);
    let link = link_digest(
        f["digest"].as_str().unwrap(),
        &run,
        f["at"].as_str().unwrap(),
        f["seq"].as_u64().unwrap(),
        prev.as_deref(),
    );
    f["link"] = link.into();
    write_lines(&copy, &t);
    let (code, r) = verify_json(&dir, &copy, &[]);
    assert_eq!((code, findings(&r)), (1, vec![(line_of(idx[2]), "chain-broken".to_owned())]), "{r}");
    let (code, r) = verify_json(&dir, &copy, &["--key", s(&keys.hmac)]);
    assert_eq!(code, 1);
    assert_eq!(findings(&r)[0], (line_of(idx[1]), "signature-invalid".to_owned()), "{r}");
    let (code, r) = verify_json(&dir, &copy, &["--public-key", s(&keys.public)]);
    assert_eq!(code, 1);
    assert_eq!(findings(&r)[0], (line_of(idx[1]), "signature-invalid".to_owned()), "{r}");

    // The whole log re-chained without signatures (what a forger without the key can do):
    // clean without a key, every receipt missing its signature with one.
    let mut t = lines.clone();
    for l in &mut t {
        let o = l.as_object_mut().unwrap();
        o.remove("hmac");
        o.remove("sig");
    }
    write_lines(&copy, &t);
    assert_eq!(verify_json(&dir, &copy, &[]).0, 0);
    let (code, r) = verify_json(&dir, &copy, &["--key", s(&keys.hmac)]);
    assert_eq!(code, 1);
    assert_eq!(findings(&r).len() as u64, n);
    assert!(findings(&r).iter().all(|(_, c)| c == "signature-missing"), "{r}");

    // Another fleet's key: nothing verifies as signed by it.
    let other = temp_dir("heart-chain-other");
    let other_keys = keygen(&other);
    let (code, r) = verify_json(&dir, &file, &["--key", s(&other_keys.hmac), "--public-key", s(&other_keys.public)]);
    assert_eq!((code, r["signed"].as_u64()), (1, Some(0)));
    assert_eq!(findings(&r).len() as u64, 2 * n);
    assert!(findings(&r).iter().all(|(_, c)| c == "signature-invalid"), "{r}");

    // A receipt of the TypeScript package (no chain fields) appended: unchained, counted; a
    // failure only with --require-chain.
    let mut t = lines.clone();
    let mut reference = lines[0].clone();
    for k in ["seq", "prev", "link", "hmac", "sig"] {
        reference.as_object_mut().unwrap().remove(k);
    }
    t.push(reference);
    write_lines(&copy, &t);
    let (code, r) = verify_json(&dir, &copy, &[]);
    assert_eq!((code, r["unchained"].as_u64()), (0, Some(1)));
    let (code, r) = verify_json(&dir, &copy, &["--require-chain"]);
    assert_eq!((code, findings(&r)), (1, vec![(Some(n + 1), "receipt-unchained".to_owned())]));

    // No output names a key.
    let secrets = key_hex(&keys);
    for args in
        [vec!["verify-receipts", "t.jsonl", "--key", s(&keys.hmac)], vec!["verify-receipts", "r.jsonl", "--json"]]
    {
        let out = hf(&dir, &args);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(secrets.iter().all(|k| !all.contains(k.as_str())));
    }
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&other).unwrap();
}

#[test]
fn bad_input_exits_2_naming_the_line_or_the_file_and_never_the_key() {
    let dir = temp_dir("heart-chain");
    let keys = keygen(&dir);
    let secrets = key_hex(&keys);
    let (file, lines) = signed_log(&dir, &keys);
    let no_key = |out: &std::process::Output| {
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(secrets.iter().all(|k| !all.contains(k.as_str())), "{all}");
    };
    let check = |args: &[&str], starts: &str| {
        let out = hf(&dir, args);
        no_key(&out);
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
        let e = fails(&out, 2);
        assert!(e.starts_with(starts), "{e}");
    };
    std::fs::write(dir.join("empty.key"), "").unwrap();
    let r = "r.jsonl";
    check(
        &["verify-receipts", r, "--key", "missing.key"],
        "heart-fleet: verify-receipts: key file missing.key: cannot read it",
    );
    check(&["verify-receipts", r, "--key", "empty.key"], "heart-fleet: verify-receipts: key file empty.key is empty");
    check(
        &["verify-receipts", r, "--key", "fleet-ed.key.pub"],
        "heart-fleet: verify-receipts: --key fleet-ed.key.pub: an HMAC key is needed",
    );
    check(
        &["verify-receipts", r, "--public-key", "fleet.key"],
        "heart-fleet: verify-receipts: --public-key fleet.key: an Ed25519 public key is needed",
    );
    check(
        &["verify-receipts", r, "--final-seq", "a=1", "--final-seq", "a=2"],
        "heart-fleet: verify-receipts: --final-seq: the final seq of run \"a\" is given twice",
    );
    // A log of one run that holds another's receipt.
    check(
        &["verify-receipts", r, "--run", "no-such-run"],
        "heart-fleet: verify-receipts r.jsonl: invalid-input: line 1: a receipt of run ",
    );
    // A receipt of a schema version this verifier does not know.
    let mut t = lines.clone();
    t[2]["schemaVersion"] = "zao.heart.receipt.v2".into();
    write_lines(&dir.join("v2.jsonl"), &t);
    check(
        &["verify-receipts", "v2.jsonl"],
        "heart-fleet: verify-receipts v2.jsonl: invalid-input: line 3: a receipt of unknown schema version",
    );

    // Signing keys that cannot sign, from a file or the environment: nothing is written.
    let before = std::fs::read(&file).unwrap();
    check(
        &["simulate", "--quiet", "--receipts", r, "--signing-key", "fleet-ed.key.pub"],
        "heart-fleet: --signing-key fleet-ed.key.pub: an Ed25519 public key cannot sign",
    );
    check(
        &["simulate", "--quiet", "--receipts", r, "--signing-key", "empty.key"],
        "heart-fleet: key file empty.key is empty",
    );
    let out = common::cmd(&dir, &["canary", "--receipts", r])
        .env("HEART_FLEET_SIGNING_KEY", "heart-fleet-hmac-sha256-key:00")
        .output()
        .unwrap();
    no_key(&out);
    let e = fails(&out, 2);
    assert!(e.starts_with("heart-fleet: $HEART_FLEET_SIGNING_KEY: an HMAC key needs at least 32 bytes"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), before, "nothing written");
    assert!(!dir.join("heart-fleet.db").exists(), "the store was not even opened");

    // A key from the environment signs like one from a file.
    let text_key = std::fs::read_to_string(&keys.hmac).unwrap();
    let out = common::cmd(&dir, &["canary", "--receipts", "canary.jsonl"])
        .env("HEART_FLEET_SIGNING_KEY", text_key.trim())
        .output()
        .unwrap();
    ok(&out);
    no_key(&out);
    let (code, r) = verify_json(&dir, &dir.join("canary.jsonl"), &["--key", s(&keys.hmac)]);
    assert_eq!(code, 0, "{r}");
    assert!(r["receipts"].as_u64().unwrap() >= 2 && r["signed"] == r["receipts"], "{r}");

    // keygen never overwrites a key.
    let key_before = std::fs::read(&keys.hmac).unwrap();
    check(
        &["keygen", "--kind", "hmac", "--out", "fleet.key"],
        "heart-fleet: keygen: fleet.key exists; keygen never overwrites a key file",
    );
    check(
        &["keygen", "--kind", "hmac", "--out", "new.key", "--public-out", "new.pub"],
        "heart-fleet: keygen: --public-out is for ed25519 keys",
    );
    assert_eq!(std::fs::read(&keys.hmac).unwrap(), key_before);
    assert!(!dir.join("new.key").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
