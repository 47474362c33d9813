//! Millisecond timestamps in the store's clock, printed exactly like JavaScript's
//! `Date.prototype.toISOString()` (`YYYY-MM-DDTHH:mm:ss.sssZ`).
//!
//! Tokens compare expiries for equality, so every timestamp the core handles is a whole
//! number of milliseconds since the Unix epoch. Parsing accepts the forms databases hand
//! back (`+00:00` offsets, microseconds, a space instead of `T`) and truncates to milliseconds.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Milliseconds since 1970-01-01T00:00:00.000Z, as the store's clock reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

/// The earliest instant `toISOString` prints with a four-digit year (0000-01-01).
const MIN_MS: i64 = -62_167_219_200_000;
/// The last instant with a four-digit year (9999-12-31T23:59:59.999Z).
const MAX_MS: i64 = 253_402_300_799_999;
/// Milliseconds in a day.
const DAY_MS: u64 = 86_400_000;
/// Length of the `toISOString()` form.
const ISO_LEN: usize = 24;
/// `"00"` to `"99"`.
const DIGIT_PAIRS: [[u8; 2]; 100] = {
    let mut pairs = [[0; 2]; 100];
    let mut i = 0;
    while i < 100 {
        pairs[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    pairs
};

/// A timestamp string that is not an ISO-8601 instant the core understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimestampError(pub String);

impl fmt::Display for TimestampError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid timestamp: {}", self.0)
    }
}

impl std::error::Error for TimestampError {}

impl Timestamp {
    /// The Unix epoch, the memory store's default clock (as in the reference).
    pub const EPOCH: Timestamp = Timestamp(0);

    /// Milliseconds since the Unix epoch.
    pub fn millis(self) -> i64 {
        self.0
    }

    /// `ms` milliseconds since the epoch, or `None` outside years 0000-9999 (the instants
    /// `toISOString` prints with four digits; a store never answers others).
    pub fn from_millis(ms: i64) -> Option<Timestamp> {
        (MIN_MS..=MAX_MS).contains(&ms).then_some(Timestamp(ms))
    }

    /// This instant plus `ms` milliseconds, or `None` past year 9999.
    pub fn plus_millis(self, ms: i64) -> Option<Timestamp> {
        self.0.checked_add(ms).and_then(Timestamp::from_millis)
    }

    /// `toISOString()` form. Instants outside years 0000-9999 are clamped; the core never
    /// creates them (ttl is at most one year and parsing rejects them).
    pub fn to_iso(self) -> String {
        let mut out = String::with_capacity(ISO_LEN);
        self.write_iso(&mut out);
        out
    }

    /// Appends the [`Timestamp::to_iso`] form to `out` (receipts rebuilt in place reuse their
    /// strings this way).
    pub(crate) fn write_iso(self, out: &mut String) {
        let b = self.iso_bytes();
        out.push_str(std::str::from_utf8(&b).unwrap_or_default());
    }

    /// The 24 ASCII bytes of the `toISOString()` form (hand-rolled in unsigned 32-bit
    /// arithmetic, two digits per table lookup: this runs for every receipt and every SQL
    /// parameter).
    fn iso_bytes(self) -> [u8; ISO_LEN] {
        // Milliseconds since 0000-01-01 (not negative after the clamp) split into days and
        // the time of day; years stay in 0000-9999, so every field fits its digits.
        let since_year_0 = self.0.clamp(MIN_MS, MAX_MS).abs_diff(MIN_MS);
        let days = since_year_0 / DAY_MS;
        let in_day = (since_year_0 % DAY_MS) as u32;
        let (y, m, d) = civil_from_days(days as u32);
        let (h, rest) = (in_day / 3_600_000, in_day % 3_600_000);
        let (mi, rest) = (rest / 60_000, rest % 60_000);
        let (s, milli) = (rest / 1000, rest % 1000);
        let pair = |v: u32| DIGIT_PAIRS[(v % 100) as usize];
        let ([y0, y1], [y2, y3], [m0, m1], [d0, d1]) = (pair(y / 100), pair(y), pair(m), pair(d));
        let ([h0, h1], [i0, i1], [s0, s1], [f1, f2]) = (pair(h), pair(mi), pair(s), pair(milli));
        let f0 = b'0' + (milli / 100) as u8;
        [y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1, b'T', h0, h1, b':', i0, i1, b':', s0, s1, b'.', f0, f1, f2, b'Z']
    }

    /// Parses an ISO-8601 instant with a `Z` or `±HH:MM` offset, truncating below milliseconds.
    pub fn parse_iso(text: &str) -> Result<Timestamp, TimestampError> {
        parse(text).ok_or_else(|| TimestampError(text.to_owned()))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(std::str::from_utf8(&self.iso_bytes()).unwrap_or_default())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(std::str::from_utf8(&self.iso_bytes()).unwrap_or_default())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A visitor, not a String: the text is parsed where it lies, without a copy.
        struct Iso;
        impl serde::de::Visitor<'_> for Iso {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an ISO-8601 instant")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Timestamp, E> {
                Timestamp::parse_iso(v).map_err(E::custom)
            }
        }
        d.deserialize_str(Iso)
    }
}

fn parse(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter().try_fold(0i64, |acc, c| c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0')))
    };
    let sep = |at: usize, c: u8| b.get(at) == Some(&c);
    if !(sep(4, b'-') && sep(7, b'-') && (sep(10, b'T') || sep(10, b' ')) && sep(13, b':')) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute) = (num(11, 2)?, num(14, 2)?);
    let mut at = 16;
    let mut second = 0;
    let mut milli = 0;
    if sep(at, b':') {
        second = num(at + 1, 2)?;
        at += 3;
        if sep(at, b'.') {
            at += 1;
            let start = at;
            while b.get(at).is_some_and(u8::is_ascii_digit) {
                at += 1;
            }
            let digits = &text[start..at];
            if digits.is_empty() {
                return None;
            }
            // Truncate (not round) to milliseconds, as the stores write them.
            let padded: String = digits.chars().chain("00".chars()).take(3).collect();
            milli = padded.parse::<i64>().ok()?;
        }
    }
    let offset_min = match b.get(at) {
        Some(b'Z') if at + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) => {
            let oh = num(at + 1, 2)?;
            let om = match b.get(at + 3) {
                Some(b':') if at + 6 == b.len() => num(at + 4, 2)?,
                None => 0,
                Some(_) if at + 5 == b.len() => num(at + 3, 2)?,
                _ => return None,
            };
            let total = oh * 60 + om;
            if *sign == b'+' { total } else { -total }
        }
        _ => return None,
    };
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let ms = days * 86_400_000 + hour * 3_600_000 + minute * 60_000 + second * 1000 + milli - offset_min * 60_000;
    Timestamp::from_millis(ms)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's days_from_civil (a public domain algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The Gregorian (year, month, day) of a day counted from 0000-01-01, for years 0000-9999:
/// Neri and Schneider's algorithm ("Euclidean affine functions and their application to
/// calendar algorithms", 2022), all unsigned 32-bit arithmetic without divisions by
/// anything but constants.
fn civil_from_days(days_since_year_0: u32) -> (u32, u32, u32) {
    // The computational calendar starts on 0000-03-01; days are shifted by 82 cycles of 400
    // years so that every intermediate stays positive.
    const CYCLES: u32 = 82;
    const SHIFT: u32 = 146_097 * CYCLES - 60;
    let n = days_since_year_0 + SHIFT;
    let n1 = 4 * n + 3;
    let century = n1 / 146_097;
    let n_c = n1 % 146_097 / 4;
    let p2 = 2_939_745 * u64::from(4 * n_c + 3);
    let year_of_century = (p2 >> 32) as u32;
    let day_of_year = (p2 as u32) / 2_939_745 / 4;
    let n3 = 2141 * day_of_year + 197_913;
    let (month, day) = (n3 / 65_536, n3 % 65_536 / 2141 + 1);
    // January and February belong to the next Gregorian year.
    let jan_feb = day_of_year >= 306;
    let year = 100 * century + year_of_century + u32::from(jan_feb) - 400 * CYCLES;
    (year, if jan_feb { month - 12 } else { month }, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_to_iso_string() {
        assert_eq!(Timestamp(0).to_iso(), "1970-01-01T00:00:00.000Z");
        let t = Timestamp::parse_iso("2026-07-30T00:01:00.000Z").unwrap();
        assert_eq!(t.0, 1_785_369_660_000);
        assert_eq!(t.to_iso(), "2026-07-30T00:01:00.000Z");
        assert_eq!(Timestamp(-1).to_iso(), "1969-12-31T23:59:59.999Z");
        assert_eq!(Timestamp(951_782_400_000).to_iso(), "2000-02-29T00:00:00.000Z");
        assert_eq!(Timestamp(MIN_MS).to_iso(), "0000-01-01T00:00:00.000Z");
        assert_eq!(Timestamp(MIN_MS - 1).to_iso(), "0000-01-01T00:00:00.000Z");
        assert_eq!(Timestamp(MIN_MS + 59 * 86_400_000 + 1).to_iso(), "0000-02-29T00:00:00.001Z");
        assert_eq!(Timestamp(MAX_MS).to_iso(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp(i64::MAX).to_iso(), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_database_forms_and_truncates() {
        let want = Timestamp::parse_iso("2026-07-30T00:01:00.123Z").unwrap();
        for form in [
            "2026-07-30T00:01:00.123456+00:00",
            "2026-07-30 00:01:00.1239+00",
            "2026-07-30T02:01:00.123+02:00",
            "2026-07-29T23:31:00.123-0030",
        ] {
            assert_eq!(Timestamp::parse_iso(form).unwrap(), want, "{form}");
        }
        assert_eq!(Timestamp::parse_iso("2026-07-30T00:01:00Z").unwrap().to_iso(), "2026-07-30T00:01:00.000Z");
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-07-30T00:01:00.Z",
            "2026-07-30T00:01:00",
            "x026-07-30T00:01:00Z",
            "2026-07-30T24:00:00Z",
        ] {
            assert!(Timestamp::parse_iso(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn civil_from_days_inverts_days_from_civil_for_every_day() {
        let first = days_from_civil(0, 1, 1);
        for days in 0..=(days_from_civil(9999, 12, 31) - first) {
            let (y, m, d) = civil_from_days(days as u32);
            let (y, m, d) = (i64::from(y), i64::from(m), i64::from(d));
            assert!((1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m), "{days}: {y}-{m}-{d}");
            assert_eq!(days_from_civil(y, m, d) - first, days, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn round_trips_many_instants() {
        let mut t = MIN_MS;
        while t < MAX_MS {
            let ts = Timestamp(t);
            assert_eq!(Timestamp::parse_iso(&ts.to_iso()).unwrap(), ts);
            t += 7_777_777_777_777 / 13;
        }
    }
}
