//! Golden-vector conformance of `heart_fleet_core::canonical` against the reference
//! (`core/tests/vectors/golden-vectors.json`, sections `canonicalize`, `canonicalize_errors`,
//! `receipt_digests`, `deterministic_resource_ids`, `deterministic_resource_id_errors`,
//! `effect_keys`). Every vector is checked or explicitly listed as skipped with a reason, and the
//! number of checks is asserted so that no test can pass vacuously.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use heart_fleet_core::canonical::{
    CanonicalError, DIGEST_PREFIX, canonical_digest, canonical_sha256_hex, canonicalize, canonicalize_into,
    canonicalize_json, cmp_utf16, deterministic_resource_id, digest_json, effect_key, format_number, payload_digest,
    receipt_digest, sha256_hex,
};
use serde_json::{Value, json};

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/golden-vectors.json");
    let text = std::fs::read_to_string(path).expect("read golden-vectors.json");
    serde_json::from_str(&text).expect("parse golden-vectors.json")
}

fn section(name: &str) -> Vec<Value> {
    vectors()[name].as_array().unwrap_or_else(|| panic!("section {name} is not an array")).clone()
}

fn s<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or_else(|| panic!("field {field} is not a string in {v}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// JS-only vectors (`input_json: null`): the value cannot be written as JSON text.
const JS_ONLY: &[(&str, &str)] = &[
    (
        "undefined-in-object-omitted-in-array-null",
        "undefined members/elements; Rust models them as omitted fields / null",
    ),
    ("function-and-symbol-members-omitted", "function and symbol values do not exist in JSON"),
    ("toJSON-ignored-date-is-empty-object", "Date objects and toJSON methods do not exist in JSON"),
    ("sparse-array-hole-BUG", "array holes do not exist in JSON; the canonical output is not even valid JSON"),
];

/// Vectors whose `input_json` serde_json cannot represent (lone surrogate escapes); they are
/// still checked through `canonicalize_json` / `digest_json`.
const NOT_SERDE_VALUE: &[&str] = &["string-lone-surrogate-js-only"];

#[test]
fn canonicalize_vectors() {
    let vectors = section("canonicalize");
    assert_eq!(vectors.len(), 25);

    let mut names = BTreeSet::new();
    let mut skipped_js_only = BTreeSet::new();
    let mut not_serde = BTreeSet::new();
    let mut checked_text = 0;
    let mut checked_value = 0;
    let mut checked_utf8_hex = 0;
    let mut fixed_points = 0;

    for v in &vectors {
        let name = s(v, "name");
        assert!(names.insert(name.to_string()), "duplicate vector name {name}");
        let canonical = s(v, "canonical");
        let sha = s(v, "sha256");
        let digest = s(v, "digest");

        // Hash relations hold for every vector, JS-only ones included.
        assert_eq!(sha256_hex(canonical), sha, "{name}: sha256 of canonical");
        assert_eq!(digest, format!("{DIGEST_PREFIX}{sha}"), "{name}: digest");
        if let Some(expected_hex) = v.get("canonical_utf8_hex").and_then(Value::as_str) {
            assert_eq!(hex(canonical.as_bytes()), expected_hex, "{name}: utf8 hex");
            checked_utf8_hex += 1;
        }

        // Canonical output is a fixed point of canonicalize_json whenever it is valid JSON.
        if let Ok(again) = canonicalize_json(canonical) {
            assert_eq!(again, canonical, "{name}: canonical is a fixed point");
            fixed_points += 1;
        }

        let Some(input_json) = v["input_json"].as_str() else {
            assert!(v["input_json"].is_null(), "{name}: input_json must be string|null");
            skipped_js_only.insert(name.to_string());
            continue;
        };

        // JSON text path (JSON.parse semantics).
        assert_eq!(canonicalize_json(input_json).as_deref(), Ok(canonical), "{name}: canonicalize_json");
        assert_eq!(digest_json(input_json).as_deref(), Ok(digest), "{name}: digest_json");
        checked_text += 1;

        // serde_json::Value path.
        match serde_json::from_str::<Value>(input_json) {
            Ok(value) => {
                assert_eq!(canonicalize(&value), canonical, "{name}: canonicalize");
                let mut appended = String::from("prefix|");
                canonicalize_into(&value, &mut appended);
                assert_eq!(appended, format!("prefix|{canonical}"), "{name}: into");
                assert_eq!(canonical_digest(&value), digest, "{name}: canonical_digest");
                assert_eq!(payload_digest(&value), digest, "{name}: payload_digest");
                assert_eq!(canonical_sha256_hex(&value), sha, "{name}: sha256 hex");
                checked_value += 1;
            }
            Err(_) => {
                not_serde.insert(name.to_string());
            }
        }
    }

    let expected_js_only: BTreeSet<String> = JS_ONLY.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(skipped_js_only, expected_js_only, "JS-only vectors skipped (reasons: {JS_ONLY:?})");
    assert_eq!(not_serde, set(NOT_SERDE_VALUE));
    assert_eq!(checked_text, 21, "vectors checked via JSON text");
    assert_eq!(checked_value, 20, "vectors checked via serde_json::Value");
    assert_eq!(checked_utf8_hex, 4, "canonical_utf8_hex fields checked");
    // All but the sparse-array bug (whose canonical form `[1,,3]` is not JSON).
    assert_eq!(fixed_points, 24, "fixed-point checks");
    assert_eq!(
        canonicalize_json("[1,,3]"),
        Err(CanonicalError::InvalidJson { message: "unexpected character ','".into(), offset: 3 })
    );
}

/// Rust analogues of the JS-only vectors: absent members are omitted, absent elements are null.
#[test]
fn js_only_vectors_rust_analogues() {
    let vectors = section("canonicalize");
    let by_name = |name: &str| {
        vectors.iter().find(|v| s(v, "name") == name).unwrap_or_else(|| panic!("missing vector {name}")).clone()
    };
    let analogues = [
        ("undefined-in-object-omitted-in-array-null", json!({"keep": 1, "arr": [null, 1, null]})),
        ("function-and-symbol-members-omitted", json!({"keep": "k"})),
        ("toJSON-ignored-date-is-empty-object", json!({"d": {}, "t": {"v": 1}})),
    ];
    for (name, value) in &analogues {
        let v = by_name(name);
        assert_eq!(canonicalize(value), s(&v, "canonical"), "{name}");
        assert_eq!(canonical_digest(value), s(&v, "digest"), "{name}");
    }
    assert_eq!(analogues.len(), JS_ONLY.len() - 1);
}

#[test]
fn canonicalize_error_vectors() {
    let vectors = section("canonicalize_errors");
    assert_eq!(vectors.len(), 9);
    let mut via_input = BTreeSet::new();
    let mut display_only = BTreeSet::new();
    for v in &vectors {
        let name = s(v, "name");
        let message = s(v, "message");
        assert_eq!(v["threw"], Value::Bool(true), "{name}");
        match name {
            "NaN" => {
                assert_eq!(format_number(f64::NAN).unwrap_err().to_string(), message);
                via_input.insert(name);
            }
            "Infinity" => {
                assert_eq!(format_number(f64::INFINITY).unwrap_err().to_string(), message);
                // JSON.parse("1e400") is Infinity.
                assert_eq!(canonicalize_json("1e400").unwrap_err().to_string(), message);
                assert_eq!(digest_json("1e400").unwrap_err().to_string(), message);
                via_input.insert(name);
            }
            "-Infinity" => {
                assert_eq!(format_number(f64::NEG_INFINITY).unwrap_err().to_string(), message);
                assert_eq!(canonicalize_json("-1e400").unwrap_err().to_string(), message);
                via_input.insert(name);
            }
            "nested-NaN" => {
                // NaN has no JSON spelling; the same nesting with an overflowing number must
                // fail the same way (with Infinity), and the NaN message must match exactly.
                assert_eq!(
                    canonicalize_json(r#"{"a":[1,{"b":1e999}]}"#).unwrap_err().to_string(),
                    "Canonical JSON Error: Non-finite number Infinity cannot be serialized."
                );
                assert_eq!(CanonicalError::NonFinite(f64::NAN).to_string(), message);
                via_input.insert(name);
            }
            "top-level-undefined"
            | "bigint"
            | "function-inside-array"
            | "symbol-inside-array"
            | "top-level-function" => {
                // Unreachable from JSON / serde_json; only the message format is checked.
                let kind = message
                    .strip_prefix("Canonical JSON Error: Unsupported value type ")
                    .unwrap_or_else(|| panic!("{name}: unexpected message {message}"));
                assert_eq!(CanonicalError::UnsupportedType(kind.to_string()).to_string(), message);
                display_only.insert(name);
            }
            other => panic!("unexpected canonicalize_errors vector {other}"),
        }
    }
    assert_eq!(via_input, ["NaN", "Infinity", "-Infinity", "nested-NaN"].into());
    assert_eq!(
        display_only,
        ["top-level-undefined", "bigint", "function-inside-array", "symbol-inside-array", "top-level-function"].into()
    );
}

#[test]
fn receipt_digest_vectors() {
    let vectors = section("receipt_digests");
    assert_eq!(vectors.len(), 13);
    let mut checked = 0;
    for v in &vectors {
        let input = &v["input"];
        let receipt = &v["receipt"];
        let expected_canonical = s(v, "digest_input_canonical");
        let expected_digest = s(receipt, "digest");

        let digest_input = json!({
            "event": input["event"],
            "runId": input["runId"],
            "owner": input["owner"],
            "leaseExpiresAt": input["leaseExpiresAt"],
            "effectKey": input["effectKey"],
        });
        assert_eq!(canonicalize(&digest_input), expected_canonical);
        assert_eq!(format!("{DIGEST_PREFIX}{}", sha256_hex(&canonicalize(&digest_input))), expected_digest);
        assert_eq!(canonical_digest(&digest_input), expected_digest);
        assert_eq!(
            receipt_digest(
                s(input, "event"),
                s(input, "runId"),
                s(input, "owner"),
                input["leaseExpiresAt"].as_str(),
                input["effectKey"].as_str(),
            ),
            expected_digest
        );

        // The receipt echoes the input; `at` and `schemaVersion` are outside the digest.
        for field in ["event", "runId", "owner", "leaseExpiresAt", "effectKey", "at"] {
            assert_eq!(receipt[field], input[field], "receipt field {field}");
        }
        assert_eq!(s(receipt, "schemaVersion"), "zao.heart.receipt.v1");
        let keys: Vec<&str> = receipt.as_object().unwrap().keys().map(String::as_str).collect();
        let mut expected_keys =
            vec!["schemaVersion", "event", "runId", "owner", "leaseExpiresAt", "effectKey", "at", "digest"];
        let mut sorted_keys = keys.clone();
        sorted_keys.sort_by(|a, b| cmp_utf16(a, b));
        expected_keys.sort_by(|a, b| cmp_utf16(a, b));
        assert_eq!(sorted_keys, expected_keys);
        checked += 1;
    }
    assert_eq!(checked, 13);
}

#[test]
fn deterministic_resource_id_vectors() {
    let vectors = section("deterministic_resource_ids");
    assert_eq!(vectors.len(), 6);
    let mut checked = 0;
    for v in &vectors {
        let (kind, key) = (s(v, "kind"), s(v, "key"));
        let canonical = s(v, "canonical");
        assert_eq!(canonicalize(&json!({"kind": kind, "key": key})), canonical);
        let id = format!("heart:resource:{}", sha256_hex(canonical));
        assert_eq!(id, s(v, "id"));
        assert_eq!(deterministic_resource_id(kind, key).as_deref(), Ok(s(v, "id")));
        checked += 1;
    }
    assert_eq!(checked, 6);

    let errors = section("deterministic_resource_id_errors");
    assert_eq!(errors.len(), 2);
    let mut checked_errors = 0;
    for v in &errors {
        assert_eq!(v["threw"], Value::Bool(true));
        let err = deterministic_resource_id(s(v, "kind"), s(v, "key")).unwrap_err();
        assert_eq!(err, CanonicalError::ResourceIdArgs);
        assert_eq!(err.to_string(), s(v, "message"));
        checked_errors += 1;
    }
    assert_eq!(checked_errors, 2);
}

#[test]
fn effect_key_vectors() {
    let vectors = section("effect_keys");
    assert_eq!(vectors.len(), 6);
    let mut checked = 0;
    for v in &vectors {
        let identity = &v["identity"];
        let canonical = s(v, "canonical");
        assert_eq!(canonicalize(identity), canonical);
        assert_eq!(canonicalize_json(&identity.to_string()).as_deref(), Ok(canonical));
        assert_eq!(effect_key(s(v, "prefix"), identity), s(v, "effect_key"));
        assert_eq!(format!("{}:{}", s(v, "prefix"), sha256_hex(canonical)), s(v, "effect_key"));
        assert_eq!(payload_digest(identity), s(v, "payload_digest_if_payload_equals_identity"));
        checked += 1;
    }
    assert_eq!(checked, 6);
}

/// Decimal inputs that Node's `JSON.parse` + canonicalize turns into these exact outputs
/// (cross-checked with node 20). `canonicalize_json` uses a correctly rounded parser.
const FLOAT_PARSE_CASES: &[(&str, &str)] = &[
    ("5e-32", "5e-32"),
    ("0.009741809506430577", "0.009741809506430577"),
    ("3.8421969165348995e-10", "3.8421969165348995e-10"),
    ("3.8444834308813163e-10", "3.8444834308813163e-10"),
    ("129615069024.91315", "129615069024.91315"),
    ("-1.721425116791515e-17", "-1.721425116791515e-17"),
];

#[test]
fn json_text_numbers_are_correctly_rounded() {
    for (input, expected) in FLOAT_PARSE_CASES {
        assert_eq!(canonicalize_json(input).as_deref(), Ok(*expected), "{input}");
    }
}

/// serde_json's default float parser is not correctly rounded (it can be off by one ULP, e.g.
/// `5e-32` -> `4.999999999999999e-32`), so `canonicalize(&serde_json::from_str(..))` can differ
/// from the reference unless serde_json's `float_roundtrip` feature is enabled.
#[test]
fn serde_value_numbers_are_correctly_rounded() {
    for (input, expected) in FLOAT_PARSE_CASES {
        let value: Value = serde_json::from_str(input).unwrap();
        assert_eq!(canonicalize(&value), *expected, "{input}");
    }
}
