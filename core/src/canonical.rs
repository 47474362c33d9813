//! Canonical JSON, digests and identifiers (DreamNet `sha256:dreamnet-sorted-json:v0`).
//!
//! This module reproduces, byte for byte, the reference `canonicalize` function and the
//! helpers built on it (reference semantics §3.1–§3.7):
//!
//! * [`canonicalize`] / [`canonicalize_into`]: serialize a [`serde_json::Value`] with no whitespace,
//!   object keys sorted by **UTF-16 code units** (JavaScript's default `sort()` order, see
//!   [`cmp_utf16`]), strings escaped like `JSON.stringify`, and every number written with the
//!   ECMAScript `Number::toString` rules on an IEEE-754 double ([`format_number`]).
//! * [`canonicalize_json`]: the same over JSON *text*, parsed with `JSON.parse` semantics by a small
//!   parser of our own, so that lone UTF-16 surrogate escapes (`"\ud800"`) survive and are re-emitted
//!   as lowercase `\udxxx` escapes, every number becomes a double (so `1e400` is `Infinity`, which is
//!   then rejected), and a duplicated key keeps its last value.
//! * [`sha256_hex`], [`canonical_digest`] (`"sha256:dreamnet-sorted-json:v0:" + hex`), [`digest_json`],
//!   [`receipt_digest`], [`payload_digest`], [`effect_key`] and [`deterministic_resource_id`].
//!
//! The digest functions stream the canonical bytes through a fixed stack buffer into SHA-256
//! instead of materializing the whole canonical string.
//!
//! Everything here is pure: no I/O, no clocks, no global state.

pub mod host;

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

/// Prefix of every canonical digest: `digest = DIGEST_PREFIX + sha256_hex(canonical)`.
pub const DIGEST_PREFIX: &str = "sha256:dreamnet-sorted-json:v0:";

/// Prefix of [`deterministic_resource_id`] results.
pub const RESOURCE_ID_PREFIX: &str = "heart:resource:";

/// Maximum nesting depth (arrays plus objects) accepted by [`canonicalize_json`] and
/// [`digest_json`]. Deeper input is reported as [`CanonicalError::InvalidJson`] instead of
/// risking a stack overflow.
pub const MAX_JSON_DEPTH: usize = 512;

/// Errors of this module. `Display` yields the reference implementation's exact messages.
#[derive(Debug, Clone, PartialEq)]
pub enum CanonicalError {
    /// A NaN or infinite number was to be serialized:
    /// `Canonical JSON Error: Non-finite number <NaN|Infinity|-Infinity> cannot be serialized.`
    NonFinite(f64),
    /// A value of an unsupported JavaScript type (the payload is its `typeof`, e.g. `undefined`,
    /// `bigint`, `function`, `symbol`): `Canonical JSON Error: Unsupported value type <type>`.
    /// JSON input and `serde_json` values never produce it; it exists for hosts that map
    /// foreign values onto this module.
    UnsupportedType(String),
    /// The JSON text given to [`canonicalize_json`] / [`digest_json`] is not valid JSON
    /// (the reference would get a `SyntaxError` from `JSON.parse`).
    InvalidJson {
        /// What is wrong.
        message: String,
        /// Byte offset into the input text where the problem was detected.
        offset: usize,
    },
    /// [`deterministic_resource_id`] got an empty `kind` or `key`:
    /// `deterministicResourceId: kind and key are required`.
    ResourceIdArgs,
}

impl fmt::Display for CanonicalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CanonicalError::NonFinite(x) => {
                let shown = if x.is_nan() {
                    "NaN"
                } else if *x > 0.0 {
                    "Infinity"
                } else {
                    "-Infinity"
                };
                write!(f, "Canonical JSON Error: Non-finite number {shown} cannot be serialized.")
            }
            CanonicalError::UnsupportedType(t) => {
                write!(f, "Canonical JSON Error: Unsupported value type {t}")
            }
            CanonicalError::InvalidJson { message, offset } => {
                write!(f, "Canonical JSON Error: invalid JSON at byte {offset}: {message}")
            }
            CanonicalError::ResourceIdArgs => f.write_str("deterministicResourceId: kind and key are required"),
        }
    }
}

impl std::error::Error for CanonicalError {}

// ---------------------------------------------------------------------------------------------
// Output sinks
// ---------------------------------------------------------------------------------------------

/// Destination of canonical text: a `String`, or a SHA-256 hasher behind a buffer.
trait Sink {
    /// Appends text.
    fn put(&mut self, s: &str);

    /// Appends bytes the caller guarantees to be ASCII.
    fn put_ascii(&mut self, bytes: &[u8]);
}

impl Sink for String {
    #[inline]
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }

    #[inline]
    fn put_ascii(&mut self, bytes: &[u8]) {
        if let Ok(s) = std::str::from_utf8(bytes) {
            self.push_str(s);
        }
    }
}

/// Size of the stack buffer between the serializer and the hasher.
const HASH_BUF: usize = 1024;
/// The buffer for receipt digests: a receipt's canonical form is about 100-200 bytes, and a
/// smaller buffer is cheaper to zero (longer fields still stream through it correctly).
const RECEIPT_BUF: usize = 256;

/// Streams canonical bytes into SHA-256 through a fixed buffer of `N` bytes, so the
/// compression function sees large contiguous runs instead of many tiny updates.
struct HashSink<const N: usize = HASH_BUF> {
    hasher: Sha256,
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> HashSink<N> {
    fn new() -> Self {
        HashSink { hasher: Sha256::new(), buf: [0; N], len: 0 }
    }

    /// Discards everything written so far.
    #[cfg(not(target_family = "wasm"))]
    fn reset(&mut self) {
        self.hasher = Sha256::new();
        self.len = 0;
    }

    #[inline]
    fn flush(&mut self) {
        if let Some(pending) = self.buf.get(..self.len) {
            self.hasher.update(pending);
        }
        self.len = 0;
    }

    #[inline(always)]
    fn put_bytes(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if let Some(dst) = self.buf.get_mut(self.len..end) {
            if bytes.len() <= 16 {
                copy_small(dst, bytes);
            } else {
                dst.copy_from_slice(bytes);
            }
            self.len = end;
        } else {
            self.put_bytes_slow(bytes);
        }
    }

    /// The buffer cannot take `bytes`: flush, then buffer them or hash them directly.
    #[cold]
    #[inline(never)]
    fn put_bytes_slow(&mut self, bytes: &[u8]) {
        self.flush();
        if bytes.len() >= N / 2 {
            self.hasher.update(bytes);
        } else if let Some(dst) = self.buf.get_mut(..bytes.len()) {
            dst.copy_from_slice(bytes);
            self.len = bytes.len();
        }
    }

    /// Finishes the hash and returns it as 64 lowercase hex characters.
    fn finish_hex(&mut self) -> String {
        self.flush();
        let digest = self.hasher.finalize_reset();
        let mut out = String::with_capacity(64);
        push_hex(&mut out, digest.as_slice());
        out
    }

    /// Finishes the hash and returns `DIGEST_PREFIX + hex`.
    fn finish_digest(&mut self) -> String {
        let mut out = String::with_capacity(DIGEST_PREFIX.len() + 64);
        self.finish_digest_into(&mut out);
        out
    }

    /// Finishes the hash and appends `DIGEST_PREFIX + hex` to `out`.
    fn finish_digest_into(&mut self, out: &mut String) {
        self.flush();
        let digest = self.hasher.finalize_reset();
        out.push_str(DIGEST_PREFIX);
        push_hex(out, digest.as_slice());
    }
}

/// Copies at most 16 bytes between equally long slices with a few fixed-size (possibly
/// overlapping) moves instead of a `memcpy` call; most canonical pieces are this short.
#[inline(always)]
fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n >= 8 {
        if let (Some(head), Some(tail)) = (src.first_chunk::<8>(), src.last_chunk::<8>()) {
            if let Some(d) = dst.first_chunk_mut::<8>() {
                *d = *head;
            }
            if let Some(d) = dst.last_chunk_mut::<8>() {
                *d = *tail;
            }
        }
    } else if n >= 4 {
        if let (Some(head), Some(tail)) = (src.first_chunk::<4>(), src.last_chunk::<4>()) {
            if let Some(d) = dst.first_chunk_mut::<4>() {
                *d = *head;
            }
            if let Some(d) = dst.last_chunk_mut::<4>() {
                *d = *tail;
            }
        }
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

impl<const N: usize> Sink for HashSink<N> {
    #[inline(always)]
    fn put(&mut self, s: &str) {
        self.put_bytes(s.as_bytes());
    }

    #[inline(always)]
    fn put_ascii(&mut self, bytes: &[u8]) {
        self.put_bytes(bytes);
    }
}

/// The two lowercase hex digits of every byte value.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0; 2]; 256];
    let mut i = 0;
    while i < 256 {
        pairs[i] = [DIGITS[i >> 4], DIGITS[i & 0x0f]];
        i += 1;
    }
    pairs
};

/// Appends the lowercase hex encoding of `bytes` to `out`, a digest's worth at a time (one
/// `push_str` instead of a `push` per character).
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    let mut hex = [0u8; 64];
    for chunk in bytes.chunks(32) {
        for (pair, &b) in hex.chunks_exact_mut(2).zip(chunk) {
            pair.copy_from_slice(&HEX_PAIRS[usize::from(b)]);
        }
        let written = hex.get(..2 * chunk.len()).unwrap_or_default();
        out.push_str(std::str::from_utf8(written).unwrap_or_default());
    }
}

// ---------------------------------------------------------------------------------------------
// Strings
// ---------------------------------------------------------------------------------------------

/// `JSON.stringify` escapes for U+0000..U+001F (lowercase hex, short forms where they exist).
const CONTROL_ESCAPES: [&str; 32] = [
    "\\u0000", "\\u0001", "\\u0002", "\\u0003", "\\u0004", "\\u0005", "\\u0006", "\\u0007", "\\b", "\\t", "\\n",
    "\\u000b", "\\f", "\\r", "\\u000e", "\\u000f", "\\u0010", "\\u0011", "\\u0012", "\\u0013", "\\u0014", "\\u0015",
    "\\u0016", "\\u0017", "\\u0018", "\\u0019", "\\u001a", "\\u001b", "\\u001c", "\\u001d", "\\u001e", "\\u001f",
];

/// `true` for the bytes `JSON.stringify` escapes: C0 controls, `"` and `\`.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = true;
        i += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Bytes of a `u64` all set to `b`.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// Index of the first byte at or after `from` that `JSON.stringify` escapes, if any.
///
/// Scans eight bytes at a time with per-lane flags that are exact for **every** byte of the
/// word, not only the lowest: each lane's arithmetic is done on its low seven bits, where
/// adding at most 0x7f cannot carry into the next lane, so no lane's flag depends on its
/// neighbour. That matters for the tail, which re-reads bytes before `from`; those may be
/// escapable (the escape just written), and the classic borrow-based zero-byte trick would let
/// them flag the byte after them.
#[inline]
fn find_escape(bytes: &[u8], from: usize) -> Option<usize> {
    let len = bytes.len();
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let found = escape_flags(chunk);
        if found != 0 {
            return Some(i + (found.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    if i >= len {
        return None;
    }
    if len >= 8 {
        // Re-read the last 8 bytes and mask off the `skip` low lanes that lie before `i`: they
        // were either checked already or precede `from`. The flags are exact per lane, so
        // those lanes cannot influence the others.
        let start = len - 8;
        let skip = i - start;
        let found = escape_flags(bytes.get(start..).unwrap_or_default()) & (u64::MAX << (8 * skip));
        return (found != 0).then(|| start + (found.trailing_zeros() / 8) as usize);
    }
    while let Some(&b) = bytes.get(i) {
        if NEEDS_ESCAPE[usize::from(b)] {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// High bit of each lane of `chunk` (8 bytes, little-endian) set iff that byte is a C0 control,
/// `"` or `\`; every lane is exact. Any other length gives 0.
#[inline(always)]
fn escape_flags(chunk: &[u8]) -> u64 {
    const LOW7: u64 = splat(0x7f);
    const HIGH: u64 = splat(0x80);
    /// Lanes of `x` that are zero: `(x & 0x7f) + 0x7f` sets the high bit iff the low seven bits
    /// are not all zero, and `| x` adds lanes whose own high bit is set.
    #[inline(always)]
    fn zero_lanes(x: u64) -> u64 {
        !(((x & LOW7) + LOW7) | x) & HIGH
    }
    let Ok(word) = <[u8; 8]>::try_from(chunk) else {
        return 0;
    };
    let w = u64::from_le_bytes(word);
    // `(b & 0x7f) + 0x60` reaches 0x80 iff `b & 0x7f >= 0x20`; `| w` excludes bytes >= 0x80.
    let control = !(((w & LOW7) + splat(0x60)) | w) & HIGH;
    control | zero_lanes(w ^ splat(b'"')) | zero_lanes(w ^ splat(b'\\'))
}

/// Writes the escaped body of `s` (no surrounding quotes).
#[inline(always)]
fn write_escaped_body<S: Sink>(s: &str, out: &mut S) {
    let bytes = s.as_bytes();
    let mut start = 0;
    while let Some(i) = find_escape(bytes, start) {
        let b = bytes.get(i).copied().unwrap_or(0);
        // `i` indexes an ASCII byte, so both slice ends are char boundaries.
        if start < i
            && let Some(run) = s.get(start..i)
        {
            out.put(run);
        }
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            _ => CONTROL_ESCAPES[usize::from(b & 0x1f)],
        };
        out.put(escape);
        start = i + 1;
    }
    if start == 0 {
        out.put(s);
    } else if let Some(rest) = s.get(start..)
        && !rest.is_empty()
    {
        out.put(rest);
    }
}

/// Writes `s` as a quoted JSON string with `JSON.stringify` escaping.
#[inline]
fn write_str<S: Sink>(s: &str, out: &mut S) {
    out.put("\"");
    write_escaped_body(s, out);
    out.put("\"");
}

/// Writes `"key":value`, preceded by `,` unless `first` (string values share a put with the `:`).
#[inline]
fn write_member<S: Sink, const SORT: bool>(
    key: &str,
    value: &Value,
    first: bool,
    out: &mut S,
) -> Result<(), Unordered> {
    out.put(if first { "\"" } else { ",\"" });
    write_escaped_body(key, out);
    if let Value::String(s) = value {
        out.put("\":\"");
        write_escaped_body(s, out);
        out.put("\"");
        Ok(())
    } else {
        out.put("\":");
        write_value::<S, SORT>(value, out)
    }
}

/// Writes a string given as UTF-16 code units that may contain lone surrogates, which are
/// escaped as lowercase `\udxxx` (well-formed `JSON.stringify`).
fn write_units<S: Sink>(units: &[u16], out: &mut S) {
    out.put("\"");
    let mut run = String::new();
    for decoded in char::decode_utf16(units.iter().copied()) {
        match decoded {
            Ok(c) => run.push(c),
            Err(lone) => {
                write_escaped_body(&run, out);
                run.clear();
                let unit = lone.unpaired_surrogate();
                let mut escape = String::with_capacity(6);
                escape.push_str("\\u");
                push_hex(&mut escape, &unit.to_be_bytes());
                out.put(&escape);
            }
        }
    }
    write_escaped_body(&run, out);
    out.put("\"");
}

/// Compares two strings the way JavaScript's default `Array.prototype.sort()` does: by UTF-16
/// code units.
///
/// This equals Rust's `str` order except that characters U+E000..U+FFFF sort **after** astral
/// characters (U+10000 and up, whose UTF-16 lead surrogates are 0xD800..0xDBFF). No decoding is
/// needed: at the first differing byte both strings are at the same position inside a character,
/// and only a differing *lead* byte can change the class.
#[inline]
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    // Fast path: the first bytes (character starts) differ and neither starts a character at or
    // above U+E000, so byte order is UTF-16 order.
    if let (Some(&x), Some(&y)) = (a.as_bytes().first(), b.as_bytes().first())
        && x != y
        && x < 0xEE
        && y < 0xEE
    {
        return x.cmp(&y);
    }
    cmp_utf16_slow(a.as_bytes(), b.as_bytes())
}

/// [`cmp_utf16`] on UTF-8 bytes: finds the first differing byte and ranks it.
fn cmp_utf16_slow(ab: &[u8], bb: &[u8]) -> Ordering {
    let common = ab.iter().zip(bb).take_while(|(x, y)| x == y).count();
    match (ab.get(common), bb.get(common)) {
        (Some(&x), Some(&y)) => {
            let (rx, ry) = (utf16_rank(x), utf16_rank(y));
            if rx == ry { x.cmp(&y) } else { rx.cmp(&ry) }
        }
        _ => ab.len().cmp(&bb.len()),
    }
}

/// Rank of a UTF-8 byte for [`cmp_utf16`]: characters below U+E000 (and continuation bytes) = 0,
/// astral characters (lead bytes 0xF0..) = 1, U+E000..U+FFFF (lead bytes 0xEE, 0xEF) = 2.
#[inline]
fn utf16_rank(b: u8) -> u8 {
    match b {
        0xF0..=0xFF => 1,
        0xEE | 0xEF => 2,
        _ => 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Numbers
// ---------------------------------------------------------------------------------------------

/// 2^53: every integer of at most this magnitude is an exact double and prints as plain digits.
const EXACT_INT_LIMIT: u64 = 1 << 53;

/// Formats a finite double with the ECMAScript `Number::toString` rules (shortest round-trip
/// digits; plain notation for 1e-7 < |n| < 1e21; otherwise `d[.ddd]e±x`; `-0` gives `"0"`).
///
/// Returns [`CanonicalError::NonFinite`] for NaN and ±Infinity, as the reference does.
pub fn format_number(n: f64) -> Result<String, CanonicalError> {
    if !n.is_finite() {
        return Err(CanonicalError::NonFinite(n));
    }
    let mut out = String::with_capacity(24);
    write_finite_f64(n, &mut out);
    Ok(out)
}

/// Writes a finite double in ECMAScript format.
#[inline]
fn write_finite_f64<S: Sink>(n: f64, out: &mut S) {
    let magnitude = n.abs();
    // Fast path: integral values up to 2^53 print as their exact digits (this also maps -0 to 0).
    if magnitude <= EXACT_INT_LIMIT as f64 && n.trunc() == n {
        // Exact: `magnitude` is an integer no larger than 2^53.
        let int = magnitude as u64;
        if n < 0.0 {
            out.put("-");
        }
        write_u64(int, out);
        return;
    }
    let mut buffer = ryu_js::Buffer::new();
    out.put(buffer.format_finite(n));
}

/// Writes the decimal digits of `n`.
#[inline]
fn write_u64<S: Sink>(mut n: u64, out: &mut S) {
    if n < 10 {
        // `n` is a single digit.
        out.put_ascii(&[b'0' + n as u8]);
        return;
    }
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    while n >= 10 && start >= 2 {
        // `n % 100` is below 100.
        let pair = (n % 100) as usize * 2;
        n /= 100;
        start -= 2;
        if let (Some(dst), Some(src)) = (digits.get_mut(start..start + 2), DIGIT_PAIRS.get(pair..pair + 2)) {
            dst.copy_from_slice(src);
        }
    }
    if n > 0 || start == digits.len() {
        start -= 1;
        if let Some(slot) = digits.get_mut(start) {
            // `n` is below 10 here.
            *slot = b'0' + n as u8;
        }
    }
    if let Some(text) = digits.get(start..) {
        out.put_ascii(text);
    }
}

/// `"00" "01" … "99"` concatenated.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes a `serde_json::Number` as the double JavaScript would hold.
#[inline]
fn write_json_number<S: Sink>(n: &Number, out: &mut S) {
    if let Some(u) = n.as_u64() {
        if u <= EXACT_INT_LIMIT {
            write_u64(u, out);
        } else {
            // Round to the nearest double first (u64 -> f64 is round-to-nearest-even).
            write_finite_f64(u as f64, out);
        }
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= EXACT_INT_LIMIT {
            if i < 0 {
                out.put("-");
            }
            write_u64(i.unsigned_abs(), out);
        } else {
            write_finite_f64(i as f64, out);
        }
    } else {
        let f = match n.as_f64() {
            Some(f) => f,
            // Only reachable with serde_json's `arbitrary_precision` feature.
            None => n.to_string().parse::<f64>().unwrap_or(f64::NAN),
        };
        if f.is_finite() {
            write_finite_f64(f, out);
        } else {
            // Unreachable without `arbitrary_precision`: serde_json numbers are finite.
            // `JSON.stringify` writes non-finite numbers as `null`.
            out.put("null");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// serde_json::Value serializer
// ---------------------------------------------------------------------------------------------

/// The optimistic pass met an object whose iteration order is not UTF-16 key order.
struct Unordered;

/// Serializes a `Value`.
///
/// With `SORT = false` (the optimistic pass) object members are written in the map's iteration
/// order while checking, key by key, that it is UTF-16 order; the first violation aborts with
/// [`Unordered`]. serde_json's default map iterates in byte order, which differs from UTF-16
/// order only when keys mix U+E000..U+FFFF with astral characters (with the `preserve_order`
/// feature it is insertion order), so the check almost never fails and costs one comparison
/// with the previous key, whose bytes are still in cache.
///
/// With `SORT = true` (the fallback) each object's members are sorted when needed; it never
/// fails.
fn write_value<S: Sink, const SORT: bool>(value: &Value, out: &mut S) -> Result<(), Unordered> {
    match value {
        Value::Null => out.put("null"),
        Value::Bool(true) => out.put("true"),
        Value::Bool(false) => out.put("false"),
        Value::Number(n) => write_json_number(n, out),
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.put("[");
            let mut first = true;
            for item in items {
                if !first {
                    out.put(",");
                }
                first = false;
                write_value::<S, SORT>(item, out)?;
            }
            out.put("]");
        }
        Value::Object(map) => {
            out.put("{");
            if SORT {
                write_members_sorted(map, out);
            } else {
                let mut previous: Option<&str> = None;
                for (key, value) in map {
                    if let Some(previous) = previous
                        && cmp_utf16(previous, key) != Ordering::Less
                    {
                        return Err(Unordered);
                    }
                    write_member::<S, false>(key, value, previous.is_none(), out)?;
                    previous = Some(key);
                }
            }
            out.put("}");
        }
    }
    Ok(())
}

/// Writes the members of `map` in UTF-16 key order (the fallback pass).
fn write_members_sorted<S: Sink>(map: &Map<String, Value>, out: &mut S) {
    let mut members: Vec<(&String, &Value)> = map.iter().collect();
    if !members.is_sorted_by(|a, b| cmp_utf16(a.0, b.0) == Ordering::Less) {
        members.sort_by(|a, b| cmp_utf16(a.0, b.0));
    }
    let mut first = true;
    for (key, value) in members {
        // The sorting pass cannot fail.
        let _ = write_member::<S, true>(key, value, first, out);
        first = false;
    }
}

/// Streams the canonical form of `value` into `sink`, restarting with the sorting pass if the
/// optimistic pass meets an out-of-order object.
#[cfg(not(target_family = "wasm"))]
fn hash_value(value: &Value, sink: &mut HashSink) {
    if write_value::<HashSink, false>(value, sink).is_err() {
        sink.reset();
        let _ = write_value::<HashSink, true>(value, sink);
    }
}

/// The canonical text of `value`, hashed. In WebAssembly, where the module's size is what
/// edge platforms limit, the value writer exists once (for `String`): streaming it into the
/// hasher as natively would compile a second copy of it (about 4 KB).
#[cfg(target_family = "wasm")]
fn hash_value(value: &Value, sink: &mut HashSink) {
    let mut text = String::new();
    canonicalize_into(value, &mut text);
    sink.put(&text);
}

/// Canonical JSON text of `value` (reference `canonicalize`).
///
/// Infallible: `serde_json` numbers are always finite, and JSON values have no `undefined`,
/// functions or symbols. (Rust callers model a JS `undefined` member by omitting the field.)
pub fn canonicalize(value: &Value) -> String {
    let mut out = String::new();
    canonicalize_into(value, &mut out);
    out
}

/// Appends the canonical JSON text of `value` to `out`.
pub fn canonicalize_into(value: &Value, out: &mut String) {
    let start = out.len();
    if write_value::<String, false>(value, out).is_err() {
        out.truncate(start);
        let _ = write_value::<String, true>(value, out);
    }
}

/// Lowercase hex SHA-256 of the canonical JSON of `value` (without the digest prefix).
pub fn canonical_sha256_hex(value: &Value) -> String {
    let mut sink = HashSink::<HASH_BUF>::new();
    hash_value(value, &mut sink);
    sink.finish_hex()
}

/// `DIGEST_PREFIX + sha256_hex(canonicalize(value))`, computed by streaming the canonical bytes
/// into the hasher (natively the canonical string is never built; see [`hash_value`]).
pub fn canonical_digest(value: &Value) -> String {
    let mut sink = HashSink::<HASH_BUF>::new();
    hash_value(value, &mut sink);
    sink.finish_digest()
}

/// The sendOnce `payload_digest`: identical to [`canonical_digest`].
pub fn payload_digest(payload: &Value) -> String {
    canonical_digest(payload)
}

/// Lowercase hex SHA-256 over the UTF-8 bytes of `s` (reference `sha256Hex`).
pub fn sha256_hex(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    let mut out = String::with_capacity(64);
    push_hex(&mut out, digest.as_slice());
    out
}

/// Receipt digest (§3.6) without building a `Value`:
/// `DIGEST_PREFIX + sha256_hex(canonicalize({event, runId, owner, leaseExpiresAt, effectKey}))`,
/// with `None` written as JSON `null`.
pub fn receipt_digest(
    event: &str,
    run_id: &str,
    owner: &str,
    lease_expires_at: Option<&str>,
    effect_key: Option<&str>,
) -> String {
    let mut out = String::with_capacity(DIGEST_PREFIX.len() + 64);
    receipt_digest_into(event, run_id, owner, lease_expires_at, effect_key, &mut out);
    out
}

/// [`receipt_digest`], appended to `out`.
pub(crate) fn receipt_digest_into(
    event: &str,
    run_id: &str,
    owner: &str,
    lease_expires_at: Option<&str>,
    effect_key: Option<&str>,
    out: &mut String,
) {
    fn write_opt(v: Option<&str>, out: &mut HashSink<RECEIPT_BUF>) {
        match v {
            Some(s) => write_str(s, out),
            None => out.put("null"),
        }
    }
    let mut sink = HashSink::<RECEIPT_BUF>::new();
    // Keys in UTF-16 order: effectKey < event < leaseExpiresAt < owner < runId.
    sink.put("{\"effectKey\":");
    write_opt(effect_key, &mut sink);
    sink.put(",\"event\":");
    write_str(event, &mut sink);
    sink.put(",\"leaseExpiresAt\":");
    write_opt(lease_expires_at, &mut sink);
    sink.put(",\"owner\":");
    write_str(owner, &mut sink);
    sink.put(",\"runId\":");
    write_str(run_id, &mut sink);
    sink.put("}");
    sink.finish_digest_into(out);
}

/// `"heart:resource:" + sha256_hex(canonicalize({kind, key}))`, i.e. the hash of
/// `{"key":"…","kind":"…"}`. Either argument empty gives [`CanonicalError::ResourceIdArgs`].
pub fn deterministic_resource_id(kind: &str, key: &str) -> Result<String, CanonicalError> {
    if kind.is_empty() || key.is_empty() {
        return Err(CanonicalError::ResourceIdArgs);
    }
    let mut sink = HashSink::<HASH_BUF>::new();
    sink.put("{\"key\":");
    write_str(key, &mut sink);
    sink.put(",\"kind\":");
    write_str(kind, &mut sink);
    sink.put("}");
    let hex = sink.finish_hex();
    let mut id = String::with_capacity(RESOURCE_ID_PREFIX.len() + hex.len());
    id.push_str(RESOURCE_ID_PREFIX);
    id.push_str(&hex);
    Ok(id)
}

/// `prefix + ":" + sha256_hex(canonicalize(identity))` (reference `effectKey`); independent of
/// the identity's key order.
pub fn effect_key(prefix: &str, identity: &Value) -> String {
    let hex = canonical_sha256_hex(identity);
    let mut key = String::with_capacity(prefix.len() + 1 + hex.len());
    key.push_str(prefix);
    key.push(':');
    key.push_str(&hex);
    key
}

// ---------------------------------------------------------------------------------------------
// JSON text (JSON.parse semantics)
// ---------------------------------------------------------------------------------------------

/// A JavaScript string as canonical JSON reads it: UTF-8 text (borrowed from the input when a
/// parsed string had no escapes), or UTF-16 code units when it contains a lone surrogate
/// that UTF-8 cannot hold (written back as a `\udxxx` escape, as `JSON.stringify` writes
/// it). The parser's strings and a host's own strings ([`host::HostValue`]) alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsText<'a> {
    /// Well-formed text.
    Text(Cow<'a, str>),
    /// UTF-16 code units with at least one lone surrogate.
    Units(Vec<u16>),
}

impl JsText<'static> {
    /// The string of these UTF-16 code units.
    pub fn from_units(units: Vec<u16>) -> JsText<'static> {
        match String::from_utf16(&units) {
            Ok(text) => JsText::Text(Cow::Owned(text)),
            Err(_) => JsText::Units(units),
        }
    }
}

impl JsText<'_> {
    fn to_units(&self) -> Cow<'_, [u16]> {
        match self {
            JsText::Text(s) => Cow::Owned(s.encode_utf16().collect()),
            JsText::Units(u) => Cow::Borrowed(u),
        }
    }

    /// JavaScript's default `sort()` order: by UTF-16 code units.
    fn cmp_utf16(&self, other: &JsText<'_>) -> Ordering {
        match (self, other) {
            (JsText::Text(a), JsText::Text(b)) => cmp_utf16(a, b),
            _ => self.to_units().cmp(&other.to_units()),
        }
    }

    fn write<S: Sink>(&self, out: &mut S) {
        match self {
            JsText::Text(s) => write_str(s, out),
            JsText::Units(u) => write_units(u, out),
        }
    }
}

/// A parsed JSON value; object members are sorted by key and deduplicated (last wins).
#[derive(Debug)]
enum JNode<'a> {
    Null,
    Bool(bool),
    Num(f64),
    Str(JsText<'a>),
    Arr(Vec<JNode<'a>>),
    Obj(Vec<(JsText<'a>, JNode<'a>)>),
}

fn write_node<S: Sink>(node: &JNode<'_>, out: &mut S) -> Result<(), CanonicalError> {
    match node {
        JNode::Null => out.put("null"),
        JNode::Bool(true) => out.put("true"),
        JNode::Bool(false) => out.put("false"),
        JNode::Num(n) => {
            if !n.is_finite() {
                return Err(CanonicalError::NonFinite(*n));
            }
            write_finite_f64(*n, out);
        }
        JNode::Str(s) => s.write(out),
        JNode::Arr(items) => {
            out.put("[");
            let mut first = true;
            for item in items {
                if !first {
                    out.put(",");
                }
                first = false;
                write_node(item, out)?;
            }
            out.put("]");
        }
        JNode::Obj(members) => {
            out.put("{");
            let mut first = true;
            for (key, value) in members {
                if !first {
                    out.put(",");
                }
                first = false;
                key.write(out);
                out.put(":");
                write_node(value, out)?;
            }
            out.put("}");
        }
    }
    Ok(())
}

/// Accumulates a string that needed unescaping; switches to UTF-16 units on a lone surrogate.
struct StrBuilder {
    text: String,
    units: Option<Vec<u16>>,
}

impl StrBuilder {
    fn push_str(&mut self, s: &str) {
        match &mut self.units {
            Some(units) => units.extend(s.encode_utf16()),
            None => self.text.push_str(s),
        }
    }

    fn push_char(&mut self, c: char) {
        match &mut self.units {
            Some(units) => {
                let mut pair = [0u16; 2];
                units.extend_from_slice(c.encode_utf16(&mut pair));
            }
            None => self.text.push(c),
        }
    }

    fn push_lone_surrogate(&mut self, unit: u16) {
        let units = self.units.get_or_insert_with(|| self.text.encode_utf16().collect());
        units.push(unit);
    }

    fn finish<'a>(self) -> JsText<'a> {
        match self.units {
            Some(units) => JsText::Units(units),
            None => JsText::Text(Cow::Owned(self.text)),
        }
    }
}

/// Recursive-descent parser with `JSON.parse` grammar (RFC 8259; whitespace = space, tab, LF, CR).
struct Parser<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Self {
        Parser { src, bytes: src.as_bytes(), pos: 0, depth: 0 }
    }

    fn error_at(&self, offset: usize, message: impl Into<String>) -> CanonicalError {
        CanonicalError::InvalidJson { message: message.into(), offset }
    }

    fn unexpected(&self) -> CanonicalError {
        match self.src.get(self.pos..).and_then(|rest| rest.chars().next()) {
            Some(c) => self.error_at(self.pos, format!("unexpected character {c:?}")),
            None => self.error_at(self.pos, "unexpected end of input"),
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn parse_document(mut self) -> Result<JNode<'a>, CanonicalError> {
        self.skip_ws();
        let node = self.parse_value()?;
        self.skip_ws();
        if self.pos != self.bytes.len() {
            return Err(self.unexpected());
        }
        Ok(node)
    }

    fn parse_value(&mut self) -> Result<JNode<'a>, CanonicalError> {
        match self.peek() {
            Some(b'{') => self.parse_object(),
            Some(b'[') => self.parse_array(),
            Some(b'"') => Ok(JNode::Str(self.parse_string()?)),
            Some(b'-' | b'0'..=b'9') => self.parse_number(),
            Some(b't') => self.parse_literal("true", JNode::Bool(true)),
            Some(b'f') => self.parse_literal("false", JNode::Bool(false)),
            Some(b'n') => self.parse_literal("null", JNode::Null),
            _ => Err(self.unexpected()),
        }
    }

    fn parse_literal(&mut self, word: &'static str, node: JNode<'a>) -> Result<JNode<'a>, CanonicalError> {
        if self.bytes.get(self.pos..).is_some_and(|rest| rest.starts_with(word.as_bytes())) {
            self.pos += word.len();
            Ok(node)
        } else {
            Err(self.error_at(self.pos, format!("invalid literal, expected {word}")))
        }
    }

    fn enter(&mut self) -> Result<(), CanonicalError> {
        self.depth += 1;
        if self.depth > MAX_JSON_DEPTH {
            return Err(self.error_at(self.pos, format!("nesting deeper than {MAX_JSON_DEPTH} levels")));
        }
        Ok(())
    }

    fn parse_array(&mut self) -> Result<JNode<'a>, CanonicalError> {
        self.enter()?;
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(JNode::Arr(items));
        }
        loop {
            self.skip_ws();
            items.push(self.parse_value()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.unexpected()),
            }
        }
        self.depth -= 1;
        Ok(JNode::Arr(items))
    }

    fn parse_object(&mut self) -> Result<JNode<'a>, CanonicalError> {
        self.enter()?;
        self.pos += 1; // '{'
        let mut members: Vec<(JsText<'a>, JNode<'a>)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(JNode::Obj(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.unexpected());
            }
            let key = self.parse_string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.unexpected());
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.parse_value()?;
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.unexpected()),
            }
        }
        self.depth -= 1;
        Ok(JNode::Obj(sort_members(members)))
    }

    /// Parses a string starting at its opening quote.
    fn parse_string(&mut self) -> Result<JsText<'a>, CanonicalError> {
        self.pos += 1; // opening '"'
        let start = self.pos;
        // Fast path: no escapes, borrow from the input.
        loop {
            match self.peek() {
                None => return Err(self.error_at(self.pos, "unterminated string")),
                Some(b'"') => {
                    let text = self.src.get(start..self.pos).unwrap_or_default();
                    self.pos += 1;
                    return Ok(JsText::Text(Cow::Borrowed(text)));
                }
                Some(b'\\') => break,
                Some(0x00..=0x1f) => {
                    return Err(self.error_at(self.pos, "control character in string"));
                }
                Some(_) => self.pos += 1,
            }
        }
        let mut builder =
            StrBuilder { text: String::from(self.src.get(start..self.pos).unwrap_or_default()), units: None };
        loop {
            match self.peek() {
                None => return Err(self.error_at(self.pos, "unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(builder.finish());
                }
                Some(b'\\') => self.parse_escape(&mut builder)?,
                Some(0x00..=0x1f) => {
                    return Err(self.error_at(self.pos, "control character in string"));
                }
                Some(_) => {
                    let run_start = self.pos;
                    while let Some(b) = self.peek() {
                        if b == b'"' || b == b'\\' || b < 0x20 {
                            break;
                        }
                        self.pos += 1;
                    }
                    // Stops at an ASCII byte or the end: a char boundary.
                    builder.push_str(self.src.get(run_start..self.pos).unwrap_or_default());
                }
            }
        }
    }

    /// Parses one escape sequence starting at its backslash.
    fn parse_escape(&mut self, builder: &mut StrBuilder) -> Result<(), CanonicalError> {
        let backslash = self.pos;
        self.pos += 1;
        let simple = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.pos += 1;
                let unit = self.parse_hex4()?;
                match unit {
                    0xD800..=0xDBFF => {
                        if let Some(trail) = self.peek_trail_surrogate() {
                            self.pos += 6;
                            let c = 0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(trail) - 0xDC00);
                            builder.push_char(char::from_u32(c).unwrap_or('\u{FFFD}'));
                        } else {
                            builder.push_lone_surrogate(unit);
                        }
                    }
                    0xDC00..=0xDFFF => builder.push_lone_surrogate(unit),
                    _ => builder.push_char(char::from_u32(u32::from(unit)).unwrap_or('\u{FFFD}')),
                }
                return Ok(());
            }
            _ => return Err(self.error_at(backslash, "invalid escape sequence")),
        };
        self.pos += 1;
        builder.push_char(simple);
        Ok(())
    }

    /// Reads 4 hex digits at the current position.
    fn parse_hex4(&mut self) -> Result<u16, CanonicalError> {
        let value = self.bytes.get(self.pos..self.pos + 4).and_then(hex4);
        match value {
            Some(v) => {
                self.pos += 4;
                Ok(v)
            }
            None => Err(self.error_at(self.pos, "invalid \\u escape")),
        }
    }

    /// If the input continues with `\uDC00`..`\uDFFF`, returns that unit (without consuming).
    fn peek_trail_surrogate(&self) -> Option<u16> {
        let next = self.bytes.get(self.pos..self.pos + 6)?;
        if next.get(..2) != Some(b"\\u".as_slice()) {
            return None;
        }
        let unit = hex4(next.get(2..)?)?;
        (0xDC00..=0xDFFF).contains(&unit).then_some(unit)
    }

    fn parse_number(&mut self) -> Result<JNode<'a>, CanonicalError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.skip_digits(),
            _ => return Err(self.error_at(self.pos, "invalid number: expected a digit")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error_at(self.pos, "invalid number: expected a fraction digit"));
            }
            self.skip_digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error_at(self.pos, "invalid number: expected an exponent digit"));
            }
            self.skip_digits();
        }
        let text = self.src.get(start..self.pos).unwrap_or_default();
        // Rust's float parser is correctly rounded (like JS), and overflows to ±inf like JS.
        text.parse::<f64>().map(JNode::Num).map_err(|_| self.error_at(start, "invalid number"))
    }

    #[inline]
    fn skip_digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }
}

/// Decodes 4 ASCII hex digits (either case).
fn hex4(digits: &[u8]) -> Option<u16> {
    let digits = digits.get(..4)?;
    let mut value: u16 = 0;
    for &d in digits {
        let nibble = char::from(d).to_digit(16)?;
        value = (value << 4) | nibble as u16;
    }
    Some(value)
}

/// Sorts object members by UTF-16 key order and keeps the **last** of duplicated keys
/// (`JSON.parse` overwrites earlier values).
fn sort_members<'a>(mut members: Vec<(JsText<'a>, JNode<'a>)>) -> Vec<(JsText<'a>, JNode<'a>)> {
    if members.windows(2).all(|w| matches!(w, [a, b] if a.0.cmp_utf16(&b.0) == Ordering::Less)) {
        return members;
    }
    // Stable: duplicates stay in input order, so the last one of each run wins.
    members.sort_by(|a, b| a.0.cmp_utf16(&b.0));
    let mut out: Vec<(JsText<'a>, JNode<'a>)> = Vec::with_capacity(members.len());
    for member in members {
        if let Some(last) = out.last_mut()
            && last.0.cmp_utf16(&member.0) == Ordering::Equal
        {
            *last = member;
            continue;
        }
        out.push(member);
    }
    out
}

/// Canonical JSON of JSON *text*, with `JSON.parse` semantics (lone surrogate escapes kept,
/// numbers as doubles, last duplicate key wins).
///
/// Errors: [`CanonicalError::InvalidJson`] for text `JSON.parse` would reject (or nesting deeper
/// than [`MAX_JSON_DEPTH`]); [`CanonicalError::NonFinite`] for a number that overflows a double
/// (e.g. `1e400`), reported for the first one in canonical order, as the reference would.
pub fn canonicalize_json(text: &str) -> Result<String, CanonicalError> {
    let node = Parser::new(text).parse_document()?;
    let mut out = String::with_capacity(text.len());
    write_node(&node, &mut out)?;
    Ok(out)
}

/// `DIGEST_PREFIX + sha256_hex(canonicalize_json(text)?)`, streaming into the hasher.
pub fn digest_json(text: &str) -> Result<String, CanonicalError> {
    let node = Parser::new(text).parse_document()?;
    let mut sink = HashSink::<HASH_BUF>::new();
    write_node(&node, &mut sink)?;
    Ok(sink.finish_digest())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fmt(n: f64) -> String {
        format_number(n).unwrap()
    }

    #[test]
    fn number_formatting_edge_cases() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (1.5, "1.5"),
            (-123.456, "-123.456"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.0 / 3.0, "0.3333333333333333"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (-1e21, "-1e+21"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (-1e-7, "-1e-7"),
            (1.5e-7, "1.5e-7"),
            (123e-20, "1.23e-18"),
            (1.5e300, "1.5e+300"),
            (5e-324, "5e-324"),
            (-5e-324, "-5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (9007199254740992.0, "9007199254740992"),
            (9007199254740994.0, "9007199254740994"),
            (18446744073709551615u64 as f64, "18446744073709552000"),
            (12345678901234567890u64 as f64, "12345678901234567000"),
            (-9223372036854775808i64 as f64, "-9223372036854776000"),
            (0.000123, "0.000123"),
            (100.0, "100"),
            (1e15 + 0.5, "1000000000000000.5"),
            (4.35, "4.35"),
            (2f64.powi(60), "1152921504606847000"),
        ];
        for &(n, expected) in cases {
            assert_eq!(fmt(n), expected, "formatting {n:e}");
        }
    }

    #[test]
    fn integer_digits() {
        let mut samples: Vec<u64> = (0..20_000).collect();
        for p in 0..20 {
            let t = 10u64.pow(p);
            samples.extend([t - 1, t, t + 1, t.saturating_mul(5)]);
        }
        samples.extend([u64::MAX, u64::MAX - 1, 1 << 53]);
        for n in samples {
            let mut out = String::new();
            write_u64(n, &mut out);
            assert_eq!(out, n.to_string());
        }
    }

    #[test]
    fn non_finite_numbers_are_errors_with_reference_messages() {
        let nan = format_number(f64::NAN).unwrap_err();
        assert_eq!(nan.to_string(), "Canonical JSON Error: Non-finite number NaN cannot be serialized.");
        assert_eq!(
            format_number(f64::INFINITY).unwrap_err().to_string(),
            "Canonical JSON Error: Non-finite number Infinity cannot be serialized."
        );
        assert_eq!(
            format_number(f64::NEG_INFINITY).unwrap_err().to_string(),
            "Canonical JSON Error: Non-finite number -Infinity cannot be serialized."
        );
    }

    #[test]
    fn serde_numbers_go_through_f64() {
        let v: Value = serde_json::from_str(
            "[18446744073709551615,12345678901234567890,-9223372036854775808,9007199254740993,\
             9007199254740992,-9007199254740992,-9007199254740993,0,-0,-0.0,1.0,1e21]",
        )
        .unwrap();
        assert_eq!(
            canonicalize(&v),
            "[18446744073709552000,12345678901234567000,-9223372036854776000,9007199254740992,\
             9007199254740992,-9007199254740992,-9007199254740992,0,0,0,1,1e+21]"
        );
    }

    #[test]
    fn utf16_order() {
        let mut keys =
            vec!["\u{ff5a}", "\u{1f600}", "\u{e000}", "\u{e9}", "a", "B", "_", "", "aa", "ab", "\u{10000}", "\u{d7ff}"];
        keys.sort_by(|a, b| cmp_utf16(a, b));
        assert_eq!(
            keys,
            vec!["", "B", "_", "a", "aa", "ab", "\u{e9}", "\u{d7ff}", "\u{10000}", "\u{1f600}", "\u{e000}", "\u{ff5a}"]
        );
        assert_eq!(cmp_utf16("x\u{ffff}", "x\u{10ffff}"), Ordering::Greater);
        assert_eq!(cmp_utf16("x\u{10ffff}", "x\u{10000}"), Ordering::Greater);
        assert_eq!(cmp_utf16("ab", "abc"), Ordering::Less);
        assert_eq!(cmp_utf16("abc", "abc"), Ordering::Equal);
        assert_eq!(cmp_utf16("\u{7ff}", "\u{800}"), Ordering::Less);
        // Exhaustive agreement with encode_utf16 on a spread of code points.
        let sample: Vec<String> = [
            0x0u32, 0x1f, 0x41, 0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xefff, 0xf000, 0xfffd, 0xffff, 0x10000,
            0x1f600, 0x10ffff,
        ]
        .iter()
        .filter_map(|&c| char::from_u32(c))
        .flat_map(|c| [c.to_string(), format!("{c}a"), format!("a{c}")])
        .collect();
        for a in &sample {
            for b in &sample {
                let expected = a.encode_utf16().cmp(b.encode_utf16());
                assert_eq!(cmp_utf16(a, b), expected, "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn map_with_astral_and_private_use_keys_is_resorted() {
        let v = json!({"\u{e000}": 1, "\u{1f600}": 2, "a": 3});
        let expected = "{\"a\":3,\"\u{1f600}\":2,\"\u{e000}\":1}";
        assert_eq!(canonicalize(&v), expected);
        // The violation is met after output was produced: every path restarts cleanly.
        let nested = json!({"a": [1, {"b": "x".repeat(5000)}], "m": v, "z": {"\u{ff5a}": [], "\u{10000}": {}}});
        let expected_nested = format!(
            "{{\"a\":[1,{{\"b\":\"{}\"}}],\"m\":{expected},\"z\":{{\"\u{10000}\":{{}},\"\u{ff5a}\":[]}}}}",
            "x".repeat(5000)
        );
        assert_eq!(canonicalize(&nested), expected_nested);
        let mut into = String::from("keep:");
        canonicalize_into(&nested, &mut into);
        assert_eq!(into, format!("keep:{expected_nested}"));
        assert_eq!(canonical_digest(&nested), format!("{DIGEST_PREFIX}{}", sha256_hex(&expected_nested)));
        assert_eq!(canonical_sha256_hex(&nested), sha256_hex(&expected_nested));
        assert_eq!(digest_json(&nested.to_string()).unwrap(), canonical_digest(&nested));
    }

    #[test]
    fn string_escaping() {
        let v = json!("\u{0}\u{1f}\u{8}\t\n\u{b}\u{c}\r\"\\/\u{7f}\u{80}\u{9f}\u{2028}\u{2029}é😀");
        assert_eq!(
            canonicalize(&v),
            "\"\\u0000\\u001f\\b\\t\\n\\u000b\\f\\r\\\"\\\\/\u{7f}\u{80}\u{9f}\u{2028}\u{2029}é😀\""
        );
    }

    #[test]
    fn find_escape_matches_naive_scan() {
        let specials = [0x00u8, 0x1f, 0x20, b'"', b'\\', 0x21, 0x5b, 0x5d, 0x7f, 0x80, 0xff, b'a'];
        for len in 0..20 {
            for pos in 0..len {
                for &special in &specials {
                    for &filler in &[b'a', 0x9f, 0x21, 0x7f, 0xe0] {
                        let mut bytes = vec![filler; len];
                        bytes[pos] = special;
                        for from in 0..=len {
                            let naive = (from..len).find(|&i| NEEDS_ESCAPE[usize::from(bytes[i])]);
                            assert_eq!(find_escape(&bytes, from), naive, "{bytes:?} from {from}");
                        }
                    }
                }
            }
        }
        // Several escapes in one word: the lowest one is found.
        let bytes = b"ab\"\x01\\cdefgh\n";
        assert_eq!(find_escape(bytes, 0), Some(2));
        assert_eq!(find_escape(bytes, 3), Some(3));
        assert_eq!(find_escape(bytes, 4), Some(4));
        assert_eq!(find_escape(bytes, 5), Some(11));
    }

    #[test]
    fn escape_flags_are_exact_in_every_lane() {
        // Every pair of byte values in every pair of neighbouring lanes: a lane's flag must not
        // depend on its neighbours (the defect was a borrow from an escapable low lane).
        for lane in 0..7 {
            for x in 0..=255u8 {
                for y in 0..=255u8 {
                    let mut word = [b'a'; 8];
                    word[lane] = x;
                    word[lane + 1] = y;
                    let flags = escape_flags(&word);
                    for (k, &b) in word.iter().enumerate() {
                        let flagged = flags & (0x80 << (8 * k)) != 0;
                        assert_eq!(flagged, NEEDS_ESCAPE[usize::from(b)], "{word:?} lane {k}");
                    }
                    assert_eq!(flags & !splat(0x80), 0, "{word:?}: only high bits");
                }
            }
        }
    }

    #[test]
    fn find_escape_with_escapes_before_from() {
        // Two escapable bytes, the scan starting anywhere, including just after the first one:
        // the position an escape writer resumes from.
        let specials = [b'\n', b'"', b'\\', 0x00, 0x1f, 0x20, b'#', 0xff];
        for len in 0..=24 {
            for a in 0..len {
                for b in a..len {
                    for &sa in &specials {
                        for &sb in &specials {
                            let mut bytes = vec![b'a'; len];
                            bytes[a] = sa;
                            bytes[b] = sb;
                            for from in 0..=len {
                                let naive = (from..len).find(|&i| NEEDS_ESCAPE[usize::from(bytes[i])]);
                                assert_eq!(find_escape(&bytes, from), naive, "{bytes:?} from {from}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn escape_then_printable_at_every_offset() {
        // The reported case and its family: an escape followed by any printable ASCII byte, the
        // pair at offsets 0..=16 with tails of 0..=9 bytes.
        assert_eq!(
            canonicalize_json(r#"{"chatId":1,"text":"hi\n there"}"#).unwrap(),
            r#"{"chatId":1,"text":"hi\n there"}"#
        );
        let escapes: Vec<char> = (0u8..0x20).chain([b'"', b'\\']).map(char::from).collect();
        for &e in &escapes {
            for follower in (0x20u8..0x7f).map(char::from) {
                for offset in 0..=16 {
                    for tail in 0..=9 {
                        let s = format!("{}{e}{follower}{}", "x".repeat(offset), "y".repeat(tail));
                        let mut expected = String::from("\"");
                        for c in s.chars() {
                            match c {
                                '"' => expected.push_str("\\\""),
                                '\\' => expected.push_str("\\\\"),
                                c if u32::from(c) < 0x20 => expected.push_str(CONTROL_ESCAPES[c as usize]),
                                c => expected.push(c),
                            }
                        }
                        expected.push('"');
                        assert_eq!(canonicalize(&Value::String(s.clone())), expected, "{s:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn json_text_lone_surrogates_and_duplicates() {
        assert_eq!(
            canonicalize_json(r#"{"b":"\uD800x\uDC00","a":1,"a":2,"\uDBFF":0}"#).unwrap(),
            r#"{"a":2,"b":"\ud800x\udc00","\udbff":0}"#
        );
        assert_eq!(canonicalize_json(r#""\ud83d\ude00\ud83d""#).unwrap(), "\"\u{1f600}\\ud83d\"");
        // A lone trail surrogate key sorts after astral keys (0xDC00 > 0xD83D).
        assert_eq!(
            canonicalize_json(r#"{"\udc00":1,"\ud83d\ude00":2,"\ue000":3}"#).unwrap(),
            "{\"\u{1f600}\":2,\"\\udc00\":1,\"\u{e000}\":3}"
        );
        assert_eq!(canonicalize_json(" [ 1 , -0 , 1E2 ] ").unwrap(), "[1,0,100]");
    }

    #[test]
    fn json_text_errors() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "+1",
            "NaN",
            "Infinity",
            "'a'",
            "\"\t\"",
            "\"\\x\"",
            "\"\\u12\"",
            "[1] x",
            "tru",
            "\u{feff}1",
            "{a:1}",
            "1e",
        ] {
            match canonicalize_json(bad) {
                Err(CanonicalError::InvalidJson { .. }) => {}
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
        let deep = "[".repeat(MAX_JSON_DEPTH + 1) + &"]".repeat(MAX_JSON_DEPTH + 1);
        assert!(matches!(canonicalize_json(&deep), Err(CanonicalError::InvalidJson { .. })));
        let ok = "[".repeat(MAX_JSON_DEPTH) + &"]".repeat(MAX_JSON_DEPTH);
        assert_eq!(canonicalize_json(&ok).unwrap(), ok);
        assert_eq!(
            canonicalize_json("{\"b\":1e400,\"a\":-1e400}").unwrap_err().to_string(),
            "Canonical JSON Error: Non-finite number -Infinity cannot be serialized."
        );
    }

    #[test]
    fn digests_agree_with_string_path() {
        let v = json!({"z": [1, 2.5, "x\u{1}"], "a": {"é": null, "b": true}});
        let canonical = canonicalize(&v);
        assert_eq!(canonical_digest(&v), format!("{DIGEST_PREFIX}{}", sha256_hex(&canonical)));
        assert_eq!(digest_json(&v.to_string()).unwrap(), canonical_digest(&v));
        // Large enough to exercise the hash buffer's flush and bypass paths.
        let big = json!({"s": "x".repeat(10_000), "t": "y".repeat(3000), "u": "z".repeat(100)});
        assert_eq!(canonical_digest(&big), format!("{DIGEST_PREFIX}{}", sha256_hex(&canonicalize(&big))));
        assert_eq!(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn resource_id_errors() {
        assert_eq!(
            deterministic_resource_id("", "").unwrap_err().to_string(),
            "deterministicResourceId: kind and key are required"
        );
    }
}
