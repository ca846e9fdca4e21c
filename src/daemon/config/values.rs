//! Converters from the text of one value to its typed form, and [`ValueError`], why one was
//! refused. Each error quotes the value and says what is allowed; the caller prefixes the
//! key or flag.

use std::fmt::Display;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::str::FromStr;

use nix::sys::signal::Signal;
use serde::de::{value::StrDeserializer, DeserializeOwned};
use serde::Serialize;

/// Why the text of one value was refused: what it is not and what is allowed (the text
/// after `key: ` in the one line a user reads).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ValueError(pub(super) String);

impl ValueError {
    /// `value` (quoted) is not of `kind`; `allowed` says why and what is.
    pub(super) fn not_a(value: &str, kind: &str, allowed: impl Display) -> ValueError {
        ValueError(format!("{value:?} is not {kind} ({allowed})"))
    }

    /// `value` (quoted) is not allowed; `allowed` says what is.
    pub(super) fn not_allowed(value: &str, allowed: impl Display) -> ValueError {
        ValueError(format!("{value:?} is not allowed ({allowed})"))
    }
}

const LOG_LEVELS: [&str; 5] = ["trace", "debug", "info", "warn", "error"];

/// A converter accepting one of the names of the enum `T` (as it is printed: lowercase),
/// case-insensitive.
pub(super) fn choice<T: DeserializeOwned>(s: &str) -> Result<T, ValueError> {
    let lower = s.trim().to_ascii_lowercase();
    T::deserialize(StrDeserializer::<Names>::new(&lower))
        .map_err(|e| ValueError::not_allowed(s, format!("allowed: {}", e.0.join(", "))))
}

/// The name of `value` as it is printed and written in the file (the inverse of [`choice`]).
pub(super) fn name_of<T: Serialize>(value: T) -> String {
    let shown = super::yaml::to_value(&value).ok();
    shown
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The names an enum allows, as serde reports them for an unknown one.
#[derive(Debug)]
struct Names(&'static [&'static str]);

impl serde::de::Error for Names {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Names(&[])
    }
    fn unknown_variant(_: &str, expected: &'static [&'static str]) -> Self {
        Names(expected)
    }
}

impl std::fmt::Display for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "allowed: {}", self.0.join(", "))
    }
}

impl std::error::Error for Names {}

/// The election name: 1-200 of `[A-Za-z0-9._-]` (it becomes part of Redis keys).
pub(super) fn name(s: &str) -> Result<String, ValueError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if (1..=200).contains(&s.len()) && s.chars().all(ok_char) {
        Ok(s.to_string())
    } else {
        Err(ValueError::not_a(
            s,
            "a valid name",
            "allowed: 1-200 characters of [A-Za-z0-9._-]",
        ))
    }
}

/// The longest identity, in bytes of UTF-8.
pub(super) const MAX_IDENTITY_BYTES: usize = 256;

/// This replica's identity: 1-256 bytes of UTF-8 text without control characters.
pub(super) fn identity(s: &str) -> Result<String, ValueError> {
    if s.len() > MAX_IDENTITY_BYTES {
        Err(ValueError(format!(
            "an identity of {} bytes is not allowed (allowed: 1-{MAX_IDENTITY_BYTES} bytes of UTF-8 text without control characters)",
            s.len()
        )))
    } else if s.is_empty() {
        Err(ValueError::not_allowed(
            s,
            "an identity must not be empty and must differ between replicas",
        ))
    } else if s.chars().any(char::is_control) {
        Err(ValueError::not_allowed(
            s,
            "an identity must not contain control characters",
        ))
    } else {
        Ok(s.to_string())
    }
}

/// What a Redis URL looks like, as problem lines show it (kept out of password scrubbing).
pub(super) const REDIS_URL_FORMS: &str =
    "redis://[user:password@]host[:port][/db], rediss://... for TLS, unix:///path";

/// A Redis address: `redis://[user[:password]@]host[:port][/db]`, `rediss://...` (TLS)
/// or `unix:///path/to/socket`.
pub(super) fn redis_url(s: &str) -> Result<String, ValueError> {
    let fail = |why: &str| Err(not_a_url(s, "a Redis URL", why, REDIS_URL_FORMS));
    if let Some(path) = s.strip_prefix("unix://") {
        if !path.starts_with('/') {
            return fail("needs an absolute socket path");
        }
    } else {
        let Some(rest) = s
            .strip_prefix("redis://")
            .or_else(|| s.strip_prefix("rediss://"))
        else {
            return fail("unknown scheme");
        };
        if let Err(why) = check_authority(rest) {
            return fail(why);
        }
    }
    match client_refusal(s) {
        None => Ok(s.to_string()),
        Some(why) => fail(&why),
    }
}

/// Why the Redis client itself refuses `s` (a database that is not a number, an unknown
/// `protocol`, a wildcard host, ...), as a lowercase phrase; None when it accepts it.
fn client_refusal(s: &str) -> Option<String> {
    use redis::IntoConnectionInfo;
    let err = s.into_connection_info().err()?;
    // Its text is "Description - Kind[: detail]": keep the description and the detail.
    let text = err
        .to_string()
        .replacen(&format!(" - {:?}", err.kind()), "", 1);
    let mut chars = text.chars();
    Some(chars.next().map_or(String::new(), |c| {
        c.to_lowercase().chain(chars).collect::<String>()
    }))
}

/// An HTTP URL for the health check: `http://host[:port][/path]`.
pub(super) fn http_url(s: &str) -> Result<String, ValueError> {
    let fail = |why: &str| {
        Err(not_a_url(
            s,
            "an HTTP URL",
            why,
            "http://host[:port][/path]",
        ))
    };
    let Some(rest) = s.strip_prefix("http://") else {
        return fail("it must start with http://");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        let why = "the URL carries user information (user:password@), which leaderd never sends; remove it (allowed: http://host[:port][/path])";
        return Err(ValueError(why.into()));
    }
    match check_authority(rest) {
        Ok(()) => Ok(s.to_string()),
        Err(why) => fail(why),
    }
}

/// `s` (its password scrubbed) is not a URL of `kind`: `why`, and the `allowed` forms.
fn not_a_url(s: &str, kind: &str, why: &str, allowed: &str) -> ValueError {
    let shown = super::scrub::scrub(s);
    ValueError::not_a(&shown, kind, format!("{why}; allowed: {allowed}"))
}

/// Checks the `[userinfo@]host[:port]` that follows `scheme://`.
fn check_authority(rest: &str) -> Result<(), &'static str> {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = split_host_port(host_port)?;
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("missing or invalid host");
    }
    match port {
        Some(p) if p.parse::<u16>().is_err() => Err("invalid port"),
        _ => Ok(()),
    }
}

/// Splits `host:port`, `[v6]:port`, `host` or `[v6]`.
fn split_host_port(s: &str) -> Result<(&str, Option<&str>), &'static str> {
    if let Some(v6) = s.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("unclosed [ in host")?;
        return match after {
            "" => Ok((host, None)),
            _ => after
                .strip_prefix(':')
                .map(|p| (host, Some(p)))
                .ok_or("invalid text after ]"),
        };
    }
    Ok(match s.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (s, None),
    })
}

/// The jitter fraction: `0 <= jitter <= 1`.
pub(super) fn jitter(s: &str) -> Result<f64, ValueError> {
    match s.trim().parse::<f64>() {
        Ok(j) if (0.0..=1.0).contains(&j) => Ok(j),
        _ => Err(ValueError::not_a(
            s,
            "a number between 0 and 1",
            "rule: 0 <= jitter <= 1",
        )),
    }
}

/// `election.priority`: an integer 0..=1000.
pub(super) fn priority(s: &str) -> Result<u32, ValueError> {
    let digits = s.trim().trim_start_matches(['-', '+']);
    match s.trim().parse::<i64>() {
        Ok(p) if (0..=1000).contains(&p) => Ok(p as u32),
        Ok(n) => Err(ValueError(format!(
            "{n} is out of range (allowed: 0..1000)"
        ))),
        Err(_) if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) => Err(
            ValueError(format!("{s:?} is out of range (allowed: 0..1000)")),
        ),
        Err(_) => Err(ValueError::not_a(s, "an integer", "allowed: 0..1000")),
    }
}

pub(super) fn boolean(s: &str) -> Result<bool, ValueError> {
    match s {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ValueError::not_a(s, "a boolean", "allowed: true, false")),
    }
}

/// A whole number in `range`; `allowed` says what is allowed when it is not one.
pub(super) fn whole_in(
    s: &str,
    range: RangeInclusive<u32>,
    allowed: &str,
) -> Result<u32, ValueError> {
    match s.trim().parse::<u32>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(ValueError::not_allowed(s, allowed)),
    }
}

/// A listen address, or "" for none (`allowed` names the use of "").
pub(super) fn addr_or_off(s: &str, allowed: &str) -> Result<Option<SocketAddr>, ValueError> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| ValueError::not_a(s, "a listen address", allowed))
}

/// A `host:port` to connect to (a name or an IP, and a port 1-65535); "" is None.
pub(super) fn host_port(s: &str) -> Result<Option<String>, ValueError> {
    if s.is_empty() {
        return Ok(None);
    }
    let ok = s.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && !host.contains(char::is_whitespace)
            && port.parse::<u16>().is_ok_and(|p| p > 0)
    });
    if ok {
        Ok(Some(s.to_string()))
    } else {
        Err(ValueError::not_a(
            s,
            "an address",
            "allowed: HOST:PORT such as 10.0.0.5:8080 or db-0.db:5432",
        ))
    }
}

/// A file path; the empty string turns the leader file off.
pub(super) fn leader_file(s: &str) -> Result<Option<PathBuf>, ValueError> {
    if s.chars().any(char::is_control) {
        return Err(ValueError::not_a(
            s,
            "a path",
            "control characters are not allowed",
        ));
    }
    Ok((!s.is_empty()).then(|| PathBuf::from(s)))
}

/// A signal: `SIGTERM`, `TERM`, `term` or its number `15`.
pub(super) fn signal(s: &str) -> Result<Signal, ValueError> {
    let upper = s.trim().to_ascii_uppercase();
    let parsed = match upper.parse::<i32>() {
        Ok(n) => Signal::try_from(n).ok(),
        Err(_) if upper.starts_with("SIG") => Signal::from_str(&upper).ok(),
        Err(_) => Signal::from_str(&format!("SIG{upper}")).ok(),
    };
    parsed.ok_or_else(|| {
        ValueError::not_a(
            s,
            "a signal",
            "allowed: a name such as SIGTERM, TERM, SIGINT, SIGQUIT, SIGHUP, or a number such as 15",
        )
    })
}

/// A log level, case-insensitive, stored lowercase.
pub(super) fn log_level(s: &str) -> Result<String, ValueError> {
    let lower = s.trim().to_ascii_lowercase();
    if LOG_LEVELS.contains(&lower.as_str()) {
        Ok(lower)
    } else {
        Err(ValueError::not_a(
            s,
            "a log level",
            format!("allowed: {}", LOG_LEVELS.join(", ")),
        ))
    }
}

/// A text that must not be empty.
pub(super) fn non_empty(s: &str) -> Result<String, ValueError> {
    if s.is_empty() {
        Err(ValueError::not_allowed(
            s,
            "write a value, or leave the key out",
        ))
    } else {
        Ok(s.to_string())
    }
}

/// A path that must not be empty.
pub(super) fn path(s: &str) -> Result<PathBuf, ValueError> {
    if s.is_empty() {
        Err(ValueError::not_a(
            s,
            "a path",
            "write the path of a file, or leave the key out",
        ))
    } else {
        Ok(PathBuf::from(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls() {
        for ok in [
            "redis://127.0.0.1:6379/0",
            "rediss://u:p@host:6380",
            "redis://host",
            "redis://[::1]:6379",
            "unix:///run/redis.sock",
        ] {
            assert_eq!(redis_url(ok), Ok(ok.to_string()), "{ok}");
        }
        for bad in [
            "http://h",
            "redis://",
            "redis://:6379",
            "redis://h:port",
            "unix://rel",
            "redis://[::1",
        ] {
            let err = redis_url(bad).expect_err(bad).to_string();
            assert!(err.contains("allowed: redis://"), "{err}");
        }
    }

    #[test]
    fn signals() {
        for s in ["SIGTERM", "TERM", "term", "15", "sigterm"] {
            assert_eq!(signal(s), Ok(Signal::SIGTERM), "{s}");
        }
        assert_eq!(signal("HUP"), Ok(Signal::SIGHUP));
        assert!(signal("SIGNOPE").is_err());
        assert!(signal("0").is_err());
        assert!(signal("999").is_err());
    }

    #[test]
    fn small_values() {
        assert_eq!(addr_or_off("", ""), Ok(None));
        assert!(addr_or_off("[::]:9090", "").unwrap().is_some());
        assert!(jitter("nan").is_err());
        assert!(jitter("-0.1").is_err());
        assert_eq!(jitter("1"), Ok(1.0));
        assert!(name(&"a".repeat(201)).is_err());
        use super::super::ModeName;
        assert_eq!(name_of(ModeName::Sentinel), "sentinel");
        assert_eq!(choice(" Single"), Ok(ModeName::Single));
    }
}
