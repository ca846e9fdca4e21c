//! Durations as operators write them in `config.yaml` and on flags: `250ms`, `2s`, `1m30s`.

use std::time::Duration;

use super::values::ValueError;

/// What a duration may be, quoted in every error so the fix is obvious.
const ALLOWED: &str =
    "write a number and a unit (ns, us, ms, s, m, h), e.g. 250ms, 2s, 1.5s, 1m30s";

/// Units from the largest down, with their length in nanoseconds.
const UNITS: [(&str, u128); 6] = [
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// Parses a duration written as one or more `<number><unit>` parts, so that every duration
/// in the configuration is spelled the same way (`250ms`, `2s`, `1m30s`, `1.5s`, `1h`).
///
/// A bare `0` is accepted as zero; any other number needs a unit, so `15` is never
/// silently read as seconds or milliseconds.
///
/// # Errors
///
/// A [`ValueError`] (it quotes the input and says what is allowed) when the text is
/// empty, negative, lacks a unit, uses an unknown unit or is too large.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, ValueError> {
    let text = s.trim();
    let fail =
        |problem: String| ValueError(format!("{s:?} is not a duration ({problem}): {ALLOWED}"));
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(fail("empty".into()));
    }
    if text.starts_with('-') {
        return Err(fail("negative".into()));
    }
    let mut rest = text;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (nanos, tail) = parse_part(rest).map_err(fail)?;
        total = total
            .checked_add(nanos)
            .ok_or_else(|| fail("too large".into()))?;
        rest = tail;
    }
    let nanos = u64::try_from(total).map_err(|_| fail("too large".into()))?;
    Ok(Duration::from_nanos(nanos))
}

/// Parses one `<number><unit>` from the front of `s`; returns its nanoseconds and the rest.
fn parse_part(s: &str) -> Result<(u128, &str), String> {
    let num_len = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, tail) = s.split_at(num_len);
    let unit_len = tail
        .find(|c: char| c.is_ascii_digit() || c == '.')
        .unwrap_or(tail.len());
    let (unit, rest) = tail.split_at(unit_len);
    if number.is_empty() {
        return Err(format!("expected a number before {unit:?}"));
    }
    if unit.is_empty() {
        return Err(format!("missing unit after {number}"));
    }
    let scale = unit_nanos(unit).ok_or_else(|| format!("unknown unit {unit:?}"))?;
    Ok((scale_number(number, scale)?, rest))
}

/// The length of `unit` in nanoseconds, or None for an unknown unit.
fn unit_nanos(unit: &str) -> Option<u128> {
    let unit = if unit == "µs" { "us" } else { unit };
    UNITS.iter().find(|(u, _)| *u == unit).map(|(_, n)| *n)
}

/// `number` (digits with at most one `.`) times `scale` nanoseconds, truncated to whole ns.
fn scale_number(number: &str, scale: u128) -> Result<u128, String> {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(format!("{number:?} is not a number"));
    }
    let too_large = || "too large".to_string();
    let int_val: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_large())?
    };
    let mut nanos = int_val.checked_mul(scale).ok_or_else(too_large)?;
    let mut place = scale;
    for digit in frac.bytes().take(24) {
        place /= 10;
        nanos += u128::from(digit - b'0') * place;
    }
    Ok(nanos)
}

/// A duration that must be greater than zero.
pub(super) fn positive_duration(s: &str) -> Result<Duration, ValueError> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(ValueError::not_allowed(s, "must be greater than 0")),
        d => Ok(d),
    }
}

/// Formats a duration the way [`parse_duration`] reads it (`1m30s`, `250ms`, `1s500ms`,
/// `0s`), so that the effective configuration printed by `check-config` can be pasted back.
pub(crate) fn format_duration(d: Duration) -> String {
    let mut nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (unit, size) in UNITS {
        let count = nanos / size;
        if count > 0 {
            out.push_str(&format!("{count}{unit}"));
            nanos %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_duration("2s"), Ok(ms(2000)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration(".5s"), Ok(ms(500)));
        assert_eq!(parse_duration(" 0 "), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("10us"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
    }

    #[test]
    fn rejects_bad_input_saying_what_is_allowed() {
        for bad in [
            "",
            "abc",
            "15",
            "-1s",
            "1x",
            "s",
            "1.2.3s",
            "1 s",
            "99999999999999h",
            "1s-",
        ] {
            let err = parse_duration(bad).expect_err(bad).to_string();
            assert!(err.contains("is not a duration"), "{bad}: {err}");
            assert!(err.contains("250ms, 2s"), "{bad}: {err}");
            assert!(!err.contains('\n'));
        }
        assert!(parse_duration("15")
            .unwrap_err()
            .to_string()
            .contains("missing unit"));
        assert!(parse_duration("-1s")
            .unwrap_err()
            .to_string()
            .contains("negative"));
    }

    #[test]
    fn formats_as_the_inverse() {
        assert_eq!(format_duration(ms(90_000)), "1m30s");
        assert_eq!(format_duration(ms(250)), "250ms");
        assert_eq!(format_duration(ms(1500)), "1s500ms");
        assert_eq!(format_duration(ms(3_600_000)), "1h");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        for d in [
            ms(1),
            ms(15_000),
            Duration::from_nanos(1_234_567_891),
            ms(86_400_001),
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
