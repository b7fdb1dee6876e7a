//! UTC timestamps: typed as [`jiff::Timestamp`], written as RFC 3339 strings
//! with millisecond precision (`YYYY-MM-DDTHH:MM:SS.mmmZ`, `docs/FORMAT.md`
//! §1 `ts`).
//!
//! Timestamps are informational: ordering in a session is by `seq`, never by
//! time. A record's `ts` is kept as the string the writer wrote (a reader does
//! not validate it); [`parse`] gives the typed instant where there is one.
//!
//! `TsText`, the append path's writer, formats the date once per day and
//! thread.

use jiff::fmt::temporal::{DateTimeParser, DateTimePrinter};
use jiff::{RoundMode, Timestamp, TimestampRound, Unit};

/// Prints the on-disk form: three fractional digits, always, and `Z`.
const PRINTER: DateTimePrinter = DateTimePrinter::new().precision(Some(3));
const PARSER: DateTimeParser = DateTimeParser::new();

/// The current time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn now_rfc3339() -> String {
    TsText::now().as_str().to_owned()
}

/// One `ts` in its on-disk form, held without a heap allocation (the
/// append path takes one per record).
#[derive(Clone)]
pub(crate) enum TsText {
    /// The 24-byte form of the years 1970 to 9999.
    Inline([u8; 24]),
    /// Any other instant (no clock gives one), formatted the general way.
    Other(String),
}

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;
/// Days from the epoch to 10000-01-01, where the year stops having 4 digits.
const DAYS_TO_10000: i64 = 2_932_897;
/// The days the cached form covers: from 1970-01-01 to 9999-12-29 (the
/// last two days of 9999 are partly beyond what [`Timestamp`] holds, and
/// [`format_millis`] clamps them).
const CACHED_DAYS: std::ops::Range<i64> = 0..DAYS_TO_10000 - 2;

impl TsText {
    /// Now, truncated to the millisecond.
    pub(crate) fn now() -> TsText {
        TsText::of_millis(now_millis_i64())
    }

    /// `ms` since the epoch, as [`format_millis`] writes it. The date part
    /// is formatted once per day and thread (calendar arithmetic is most of
    /// the cost of formatting a time); the time of day is plain division.
    fn of_millis(ms: i64) -> TsText {
        use std::cell::Cell;
        thread_local! {
            static DAY: Cell<Option<(i64, [u8; 11])>> = const { Cell::new(None) };
        }
        let day = ms.div_euclid(DAY_MS);
        if !CACHED_DAYS.contains(&day) {
            return TsText::Other(format_millis(ms));
        }
        let mut bytes = [0u8; 24];
        let date = DAY.with(|c| match c.get() {
            Some((d, date)) if d == day => date,
            _ => {
                let mut date = [0u8; 11];
                date.copy_from_slice(&format_millis(day * DAY_MS).as_bytes()[..11]);
                c.set(Some((day, date)));
                date
            }
        });
        bytes[..11].copy_from_slice(&date);
        let t = ms.rem_euclid(DAY_MS);
        let (h, m, s, milli) = (t / 3_600_000, t / 60_000 % 60, t / 1000 % 60, t % 1000);
        let two = |v: i64| [b'0' + (v / 10) as u8, b'0' + (v % 10) as u8];
        bytes[11..13].copy_from_slice(&two(h));
        bytes[13] = b':';
        bytes[14..16].copy_from_slice(&two(m));
        bytes[16] = b':';
        bytes[17..19].copy_from_slice(&two(s));
        bytes[19] = b'.';
        bytes[20] = b'0' + (milli / 100) as u8;
        bytes[21..23].copy_from_slice(&two(milli % 100));
        bytes[23] = b'Z';
        TsText::Inline(bytes)
    }

    /// The on-disk form.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            // Only ASCII digits and separators are written into `bytes`.
            TsText::Inline(bytes) => std::str::from_utf8(bytes).unwrap_or(""),
            TsText::Other(s) => s,
        }
    }
}

fn now_millis_i64() -> i64 {
    Timestamp::now().as_millisecond()
}

/// Milliseconds since the Unix epoch, now (0 before the epoch).
pub fn now_millis() -> u64 {
    u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0)
}

/// Formats an instant as written on disk: `YYYY-MM-DDTHH:MM:SS.mmmZ`, in UTC,
/// with the sub-millisecond part truncated (never rounded up).
pub fn format(ts: Timestamp) -> String {
    PRINTER.timestamp_to_string(&truncate_to_millis(ts))
}

/// Formats milliseconds since the Unix epoch as written on disk,
/// `YYYY-MM-DDTHH:MM:SS.mmmZ`. An instant outside [`Timestamp`]'s range
/// (about the years -9999 to 9999), which no clock gives but a session id
/// can claim, is clamped to the range's bound.
pub fn format_millis(ms: i64) -> String {
    let ts = Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    });
    format(ts)
}

/// Parses an RFC 3339 timestamp (the form [`format`] writes, and any other
/// with or without fractional seconds, with `Z` or a numeric offset).
/// `None` when `s` is not one.
pub fn parse(s: &str) -> Option<Timestamp> {
    PARSER.parse_timestamp(s).ok()
}

/// Parses an RFC 3339 timestamp (the on-disk form, or any other with or
/// without fractional seconds, with `Z` or a numeric offset) to milliseconds
/// since the Unix epoch, the sub-millisecond part truncated. `None` when `s`
/// is not one.
pub fn parse_millis(s: &str) -> Option<i64> {
    parse(s).map(|t| t.as_millisecond())
}

/// The millisecond the instant falls in (rounded towards the past, so the
/// digits written are the instant's own, before the epoch too).
fn truncate_to_millis(ts: Timestamp) -> Timestamp {
    ts.round(
        TimestampRound::new()
            .smallest(Unit::Millisecond)
            .mode(RoundMode::Floor),
    )
    .unwrap_or(ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants_in_the_on_disk_form() {
        assert_eq!(format_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_millis(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(format_millis(1_795_999_942_001), "2026-11-30T00:52:22.001Z");
        assert_eq!(format_millis(1_795_999_942_100), "2026-11-30T00:52:22.100Z");
        assert_eq!(format_millis(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn sub_millisecond_digits_are_truncated_not_rounded() {
        let ts = Timestamp::new(1_795_999_942, 1_999_999).unwrap();
        assert_eq!(format(ts), "2026-11-30T00:52:22.001Z");
        let just_before_epoch = Timestamp::new(0, -1).unwrap();
        assert_eq!(format(just_before_epoch), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_millis(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn now_has_the_on_disk_form() {
        let s = now_rfc3339();
        assert_eq!(s.len(), 24, "{s}");
        assert!(s.ends_with('Z') && s.as_bytes()[19] == b'.', "{s}");
        assert_eq!(parse(&s).map(format), Some(s));
    }

    #[test]
    fn out_of_range_millis_are_clamped_rather_than_lost() {
        // The largest session id claims 2^48 - 1 ms: year 10889.
        assert_eq!(
            format_millis((1 << 48) - 1),
            format(Timestamp::MAX),
            "clamped to the last representable instant"
        );
        assert_eq!(format_millis(i64::MIN), format(Timestamp::MIN));
    }

    #[test]
    fn the_cached_date_form_is_the_general_form() {
        let mut ms = -2 * DAY_MS;
        let mut step = 1_i64;
        // Day boundaries, leap days, every field's carry, from before the
        // epoch to past year 9999.
        while ms < (DAYS_TO_10000 + 2) * DAY_MS {
            assert_eq!(TsText::of_millis(ms).as_str(), format_millis(ms), "{ms}");
            assert_eq!(TsText::of_millis(ms - 1).as_str(), format_millis(ms - 1));
            ms += step;
            step = step * 7 + 13;
            if step > 40 * DAY_MS {
                step = 1 + step % 997;
            }
        }
        for day in [
            0,
            59,
            60,
            365,
            11_016,
            20_422,
            DAYS_TO_10000 - 3,
            DAYS_TO_10000 - 1,
        ] {
            for t in [0, 1, 999, 1000, 59_999, 3_599_999, DAY_MS - 1] {
                let ms = day * DAY_MS + t;
                assert_eq!(TsText::of_millis(ms).as_str(), format_millis(ms), "{ms}");
            }
        }
    }

    #[test]
    fn parse_inverts_format() {
        for ms in [
            0,
            1,
            999,
            951_782_400_123,
            1_795_999_942_001,
            4_102_444_800_000,
        ] {
            assert_eq!(parse_millis(&format_millis(ms)), Some(ms));
        }
        assert_eq!(
            parse_millis("2026-11-30T00:52:22Z"),
            Some(1_795_999_942_000)
        );
        assert_eq!(
            parse_millis("2026-11-30T01:52:22.5+01:00"),
            Some(1_795_999_942_500)
        );
        assert_eq!(parse_millis("not a time"), None);
        assert_eq!(parse_millis("2026-13-30T00:52:22Z"), None);
        assert_eq!(parse_millis("2026-11-30T00:52:22"), None, "no offset");
    }
}
