//! Calendar formatting of timestamps given to it (this crate reads no clock).

/// Formats Unix microseconds as `YYYYMMDDhhmmssffffff` (UTC): Salt's jid form, also used to
/// show times.
pub fn compact_utc(micros: u64) -> String {
    let secs = micros / 1_000_000;
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{year:04}{month:02}{day:02}{:02}{:02}{:02}{:06}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        micros % 1_000_000
    )
}

/// Reads a `YYYYMMDDhhmmssffffff` time (as [`compact_utc`] writes it) back into Unix
/// microseconds; `None` for anything else. The master resumes its jid sequence from it.
pub fn parse_compact_utc(text: &str) -> Option<u64> {
    if text.len() != 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |range: std::ops::Range<usize>| text[range].parse::<i64>().ok();
    let (year, month, day) = (field(0..4)?, field(4..6)?, field(6..8)?);
    let (hour, minute, second, micros) = (field(8..10)?, field(10..12)?, field(12..14)?, field(14..20)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(secs).ok()?.checked_mul(1_000_000)?.checked_add(micros as u64)
}

/// Reads a UTC date and time as people write it: `2026-11-26`, `2026-11-26 14:05`,
/// `2026-11-26T14:05:30` (a trailing `Z` allowed); Unix milliseconds, `None` for anything else.
pub fn parse_utc(text: &str) -> Option<u64> {
    let text = text.trim().trim_end_matches('Z');
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((date, time)) => (date, time),
        None => (text, "00:00:00"),
    };
    let date: Vec<&str> = date.split('-').collect();
    let time: Vec<&str> = time.split(':').collect();
    fn digits(part: &str, width: usize) -> Option<&str> {
        (part.len() == width && part.bytes().all(|b| b.is_ascii_digit())).then_some(part)
    }
    let [year, month, day] = date[..] else { return None };
    let (hour, minute, second) = match time[..] {
        [hour, minute] => (hour, minute, "00"),
        [hour, minute, second] => (hour, minute, second),
        _ => return None,
    };
    let compact = format!(
        "{}{}{}{}{}{}000000",
        digits(year, 4)?,
        digits(month, 2)?,
        digits(day, 2)?,
        digits(hour, 2)?,
        digits(minute, 2)?,
        digits(second, 2)?
    );
    parse_compact_utc(&compact).map(|micros| micros / 1000)
}

/// (year, month, day) to days since 1970-01-01 (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats Unix milliseconds as ISO 8601 / RFC 3339 UTC, `YYYY-MM-DDThh:mm:ssZ` (the form
/// Heat's API gives times in).
pub fn iso8601_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, (rem / 60) % 60, rem % 60)
}

/// `2026-11-26T15:28:42.123456Z`: [`iso8601_utc`] to the microsecond (log lines, where
/// events of one second must keep their order and spacing).
pub fn iso8601_utc_micros(micros: u64) -> String {
    let seconds = iso8601_utc(micros / 1000);
    format!("{}.{:06}Z", seconds.trim_end_matches('Z'), micros % 1_000_000)
}

/// Days since 1970-01-01 to a (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dates_and_times_as_people_write_them() {
        let at = |t| parse_utc(t);
        assert_eq!(at("1970-01-02"), Some(86_400_000));
        assert_eq!(at("2026-11-26T14:05:30Z"), Some(1_795_701_930_000));
        assert_eq!(at("2026-11-26 14:05"), Some(1_795_701_900_000));
        assert_eq!(iso8601_utc(at("2026-11-26T14:05:30").unwrap()), "2026-11-26T14:05:30Z");
        for bad in ["", "yesterday", "2026-13-01", "2026-11-26T25:00", "2026-1-26", "2026-11-26T14", "1h"] {
            assert_eq!(at(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_iso8601() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_utc(1_795_242_922_123), "2026-11-21T06:35:22Z");
        assert_eq!(iso8601_utc_micros(1_795_242_922_123_456), "2026-11-21T06:35:22.123456Z");
        assert_eq!(iso8601_utc_micros(5), "1970-01-01T00:00:00.000005Z");
    }

    #[test]
    fn formats_utc_with_microseconds() {
        assert_eq!(compact_utc(0), "19700101000000000000");
        // 2026-11-21 06:35:22.123456 UTC
        assert_eq!(compact_utc(1_795_242_922_123_456), "20261121063522123456");
        assert_eq!(compact_utc(951_782_400_000_001), "20000229000000000001");
    }

    #[test]
    fn compact_times_read_back() {
        for micros in [0, 1_795_242_922_123_456, 951_782_400_000_001, 4_102_444_799_999_999] {
            assert_eq!(parse_compact_utc(&compact_utc(micros)), Some(micros));
        }
        assert_eq!(parse_compact_utc("2026112106352212345"), None);
        assert_eq!(parse_compact_utc("20261321063522123456"), None);
        assert_eq!(parse_compact_utc("2026112106352212345x"), None);
    }
}
