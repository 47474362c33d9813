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

    /// This instant plus `ms` milliseconds, or `None` past year 9999.
    pub fn plus_millis(self, ms: i64) -> Option<Timestamp> {
        let t = self.0.checked_add(ms)?;
        (MIN_MS..=MAX_MS).contains(&t).then_some(Timestamp(t))
    }

    /// `toISOString()` form. Instants outside years 0000-9999 are clamped; the core never
    /// creates them (ttl is at most one year and parsing rejects them).
    pub fn to_iso(self) -> String {
        let ms = self.0.clamp(MIN_MS, MAX_MS);
        let days = ms.div_euclid(86_400_000);
        let in_day = ms.rem_euclid(86_400_000);
        let (y, m, d) = civil_from_days(days);
        let (h, rest) = (in_day / 3_600_000, in_day % 3_600_000);
        let (mi, rest) = (rest / 60_000, rest % 60_000);
        let (s, milli) = (rest / 1000, rest % 1000);
        // Hand-rolled: this runs for every receipt and every SQL parameter.
        let mut b = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut v: i64| {
            for i in (at..at + width).rev() {
                if let Some(slot) = b.get_mut(i) {
                    *slot = b'0' + (v % 10) as u8;
                }
                v /= 10;
            }
        };
        put(0, 4, y);
        put(5, 2, m);
        put(8, 2, d);
        put(11, 2, h);
        put(14, 2, mi);
        put(17, 2, s);
        put(20, 3, milli);
        b.iter().map(|&c| char::from(c)).collect()
    }

    /// Parses an ISO-8601 instant with a `Z` or `±HH:MM` offset, truncating below milliseconds.
    pub fn parse_iso(text: &str) -> Result<Timestamp, TimestampError> {
        parse(text).ok_or_else(|| TimestampError(text.to_owned()))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_iso())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_iso())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Timestamp::parse_iso(&text).map_err(serde::de::Error::custom)
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
    (MIN_MS..=MAX_MS).contains(&ms).then_some(Timestamp(ms))
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

// Howard Hinnant's days_from_civil / civil_from_days (public domain algorithms).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, m, d)
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
    fn round_trips_many_instants() {
        let mut t = MIN_MS;
        while t < MAX_MS {
            let ts = Timestamp(t);
            assert_eq!(Timestamp::parse_iso(&ts.to_iso()).unwrap(), ts);
            t += 7_777_777_777_777 / 13;
        }
    }
}
