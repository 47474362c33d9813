//! The canonical writer against a deliberately simple one.
//!
//! `simple_canonical` below is the reference algorithm written the obvious way: no fast paths,
//! no word-at-a-time scanning, no integer shortcut, no optimistic sort check, no streaming
//! into the hasher. Numbers follow the ECMAScript `Number::toString` rules spelled out over the
//! shortest round-trip digits that Rust's `{:e}` formatting gives. proptest generates random
//! `serde_json::Value`s whose strings are dense in escapes, astral and high-BMP characters, and
//! every fast entry point of `heart_fleet_core::canonical` must agree with it byte for byte.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use heart_fleet_core::canonical::{
    DIGEST_PREFIX, canonical_digest, canonical_sha256_hex, canonicalize, canonicalize_into, canonicalize_json,
    digest_json, effect_key, sha256_hex,
};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// ECMAScript `Number::toString` for a finite double (semantics: the shortest digits that
/// round-trip; among those, the closest to the exact value; on a tie, the even one).
///
/// The length comes from Rust's shortest `{:e}` formatting, the digits from the exact decimal
/// expansion (`{:.780e}` is exact: a double has at most 767 significant digits), rounded here
/// with the ECMAScript rule. Rust's own shortest digits break ties differently (half up).
fn simple_number(x: f64) -> String {
    if x == 0.0 {
        return "0".to_owned();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    let mantissa_digits = |sci: &str| -> (String, i32) {
        let (m, e) = sci.split_once('e').unwrap();
        (m.chars().filter(char::is_ascii_digit).collect(), e.parse().unwrap())
    };
    let (shortest, _) = mantissa_digits(&format!("{:e}", x.abs()));
    let k = shortest.len();
    let (exact, exact_exp) = mantissa_digits(&format!("{:.780e}", x.abs()));
    // The two k-digit candidates around x: truncated, and truncated plus one unit.
    let truncated: u64 = exact[..k].parse().unwrap();
    let rest = exact[k..].trim_end_matches('0');
    let value_of = |digits: u64, exp: i32| -> f64 { format!("{digits}e{}", exp - (k as i32 - 1)).parse().unwrap() };
    let down_ok = value_of(truncated, exact_exp) == x.abs();
    let up_ok = value_of(truncated + 1, exact_exp) == x.abs();
    let up = match (down_ok, up_ok) {
        (true, false) => false,
        (false, true) => true,
        (true, true) => match rest.cmp("5") {
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => truncated % 2 == 1,
        },
        (false, false) => panic!("no {k}-digit candidate round-trips for {x:e}"),
    };
    let mut digits = if up { (truncated + 1).to_string() } else { truncated.to_string() };
    let mut exp10 = exact_exp;
    if digits.len() > k {
        // 99…9 + 1: one more digit, one more power of ten.
        exp10 += 1;
        digits.truncate(k);
    }
    let digits = digits.trim_end_matches('0').to_owned();
    let digits = if digits.is_empty() { "0".to_owned() } else { digits };
    let k = digits.len() as i32;
    // x = 0.d1…dk × 10^n
    let n = exp10 + 1;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let e = if e >= 0 { format!("+{e}") } else { format!("-{}", -e) };
        if k == 1 { format!("{digits}e{e}") } else { format!("{}.{}e{e}", &digits[..1], &digits[1..]) }
    };
    format!("{sign}{body}")
}

fn simple_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn simple_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        // Every number is a double first (u64/i64 beyond 2^53 round to nearest).
        Value::Number(n) => {
            let x = if let Some(u) = n.as_u64() {
                u as f64
            } else if let Some(i) = n.as_i64() {
                i as f64
            } else {
                n.as_f64().unwrap()
            };
            out.push_str(&simple_number(x));
        }
        Value::String(s) => simple_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                simple_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by_key(|k| k.encode_utf16().collect::<Vec<u16>>());
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                simple_string(k, out);
                out.push(':');
                simple_canonical(&map[k.as_str()], out);
            }
            out.push('}');
        }
    }
}

fn simple(v: &Value) -> String {
    let mut out = String::new();
    simple_canonical(v, &mut out);
    out
}

/// Characters from every class the writer treats differently.
fn any_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap()),
        2 => prop::sample::select(vec!['"', '\\', '/', '\u{7f}', '\u{2028}', '\u{2029}', '\u{feff}']),
        6 => (0x20u32..0x7f).prop_map(|c| char::from_u32(c).unwrap()),
        1 => (0x80u32..0x800).prop_map(|c| char::from_u32(c).unwrap()),
        1 => (0xe000u32..0x10000).prop_map(|c| char::from_u32(c).unwrap()),
        1 => (0x10000u32..0x110000).prop_map(|c| char::from_u32(c).unwrap()),
    ]
}

fn any_string() -> impl Strategy<Value = String> {
    prop::collection::vec(any_char(), 0..65).prop_map(|cs| cs.into_iter().collect())
}

fn any_number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<u64>().prop_map(Number::from),
        any::<i64>().prop_map(Number::from),
        (0u64..10_000).prop_map(Number::from),
        // Any finite double, from its bits: the whole exponent range, subnormals, -0.
        any::<u64>().prop_filter_map("finite", |bits| Number::from_f64(f64::from_bits(bits))),
        (-1e6f64..1e6).prop_filter_map("finite", Number::from_f64),
    ]
}

fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any_number().prop_map(Value::Number),
        any_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((any_string(), inner), 0..8)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_entry_point_equals_the_simple_writer(value in any_value()) {
        let expected = simple(&value);
        prop_assert_eq!(&canonicalize(&value), &expected);
        let mut into = String::from("prefix");
        canonicalize_into(&value, &mut into);
        prop_assert_eq!(into.strip_prefix("prefix"), Some(expected.as_str()));
        let digest = format!("{DIGEST_PREFIX}{}", sha256_hex(&expected));
        prop_assert_eq!(&canonical_digest(&value), &digest);
        prop_assert_eq!(canonical_sha256_hex(&value), sha256_hex(&expected));
        prop_assert_eq!(effect_key("k", &value), format!("k:{}", sha256_hex(&expected)));
        // The JSON-text path (its own parser) from serde_json's spelling of the value.
        let text = serde_json::to_string(&value).unwrap();
        prop_assert_eq!(canonicalize_json(&text).unwrap(), expected);
        prop_assert_eq!(digest_json(&text).unwrap(), digest);
    }

    #[test]
    fn strings_alone_equal_the_simple_writer(s in any_string()) {
        let value = Value::String(s);
        prop_assert_eq!(canonicalize(&value), simple(&value));
    }
}

#[test]
fn the_simple_number_rules_match_the_reference_examples() {
    for (x, expected) in [
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (1e-6, "0.000001"),
        (123e-20, "1.23e-18"),
        (-123.456, "-123.456"),
        (5e-324, "5e-324"),
        (f64::MAX, "1.7976931348623157e+308"),
        (2f64.powi(60), "1152921504606847000"),
        (-0.0, "0"),
        // A tie at the shortest length: the exact value is …082.625, and JavaScript picks the
        // even digit.
        (242233743513082.62, "242233743513082.62"),
    ] {
        assert_eq!(simple_number(x), expected, "{x:e}");
    }
}
