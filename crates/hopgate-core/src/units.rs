//! Human units in config files: durations (`250ms`, `2s`, `1h`) and sizes
//! (`64KiB`, `10MiB`, `512`). Parsing is strict: a missing or unknown unit is
//! an error that says what was expected, never a silent default. Also the
//! value of a hex digit (session ids, percent escapes in paths).

use std::time::Duration;

/// Parses a duration such as `250ms`, `2s`, `1.5s`, `5m`, `1h`, `100us`.
/// A bare number is rejected: a duration always needs its unit.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("duration {text:?} needs a unit (ms, s, m, h), like \"2s\""))?;
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "duration {text:?} must start with a number, like \"250ms\""
        ));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| format!("duration {text:?} has an invalid number {num:?}"))?;
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        other => {
            return Err(format!(
                "duration {text:?} has unknown unit {other:?} (use ns, us, ms, s, m, h or d)"
            ))
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || secs > 10.0 * 365.0 * 86400.0 {
        return Err(format!("duration {text:?} is too large"));
    }
    Ok(Duration::from_nanos((secs * 1e9).round() as u64))
}

/// Parses a size such as `64KiB`, `10MiB`, `1GiB`, `16KB` (decimal) or a bare
/// byte count `512`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "size {text:?} must start with a number, like \"64KiB\""
        ));
    }
    let value: u64 = num
        .parse()
        .map_err(|_| format!("size {text:?} has an invalid number {num:?}"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "size {text:?} has unknown unit {other:?} (use B, KiB, MiB, GiB, KB, MB or GB)"
            ))
        }
    };
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// Formats a duration the way config files write them (`250ms`, `2s`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if d.as_nanos().is_multiple_of(1_000_000_000) {
        format!("{}s", d.as_secs())
    } else if d.as_nanos().is_multiple_of(1_000_000) {
        format!("{ms}ms")
    } else {
        format!("{}us", d.as_micros())
    }
}

/// The value of one hex digit, either case.
pub(crate) fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert!(parse_duration("2").unwrap_err().contains("needs a unit"));
        assert!(parse_duration("2 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_duration("ms")
            .unwrap_err()
            .contains("must start with a number"));
        assert!(parse_duration("1.2.3s")
            .unwrap_err()
            .contains("invalid number"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999h")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("10MiB").unwrap(), 10 << 20);
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("16KB").unwrap(), 16_000);
        assert!(parse_size("KiB").unwrap_err().contains("must start"));
        assert!(parse_size("12 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("99999999999999999999GiB").is_err());
    }

    #[test]
    fn format_round_trips() {
        for s in ["250ms", "2s", "100us"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }
}
