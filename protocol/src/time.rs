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

/// Formats Unix milliseconds as ISO 8601 / RFC 3339 UTC, `YYYY-MM-DDThh:mm:ssZ` (the form
/// Heat's API gives times in).
pub fn iso8601_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, (rem / 60) % 60, rem % 60)
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
    fn formats_iso8601() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_utc(1_795_242_922_123), "2026-11-21T06:35:22Z");
    }

    #[test]
    fn formats_utc_with_microseconds() {
        assert_eq!(compact_utc(0), "19700101000000000000");
        // 2026-11-21 06:35:22.123456 UTC
        assert_eq!(compact_utc(1_795_242_922_123_456), "20261121063522123456");
        assert_eq!(compact_utc(951_782_400_000_001), "20000229000000000001");
    }
}
