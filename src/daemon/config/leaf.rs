//! The leaf readers the config structs name with `deserialize_with`: each reads one value
//! of the document as text (numbers and booleans as written) and converts it with its
//! converter from `values.rs`; a refused value is recorded (`read::refuse`) and read as a
//! default, so that reading goes on.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;

use super::duration::{self as d, parse_duration};
use super::read::refuse;
use super::values::{self as v, ValueError};
use super::yaml::{describe, Value};

/// The text of a scalar (numbers and booleans as written).
fn text(value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(format!(
            "{} is not a single value (allowed: one value, such as a string, a number or true/false)",
            describe(other)
        )),
    }
}

/// One value converted by `convert`; `fallback()` when it is refused.
fn leaf<'de, D: Deserializer<'de>, T>(
    d: D,
    convert: impl FnOnce(&str) -> Result<T, ValueError>,
    fallback: impl FnOnce() -> T,
) -> Result<T, D::Error> {
    let value = Value::deserialize(d)?;
    let why = match text(&value).map(|t| convert(&t)) {
        Ok(Ok(read)) => return Ok(read),
        Ok(Err(why)) => why.to_string(),
        Err(why) => why,
    };
    refuse("", false, why).map(|()| fallback())
}

/// The leaf readers of one value each, by the converter in `values.rs` they use.
macro_rules! leaves {
    ($($name:ident -> $ty:ty = $convert:expr;)*) => {$(
        pub(super) fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
            leaf(d, $convert, Default::default)
        }
    )*};
}

leaves! {
    name -> String = v::name;
    identity -> String = v::identity;
    text_value -> String = |s: &str| Ok(s.to_string());
    some_text -> Option<String> = |s: &str| v::non_empty(s).map(Some);
    path -> Option<PathBuf> = |s: &str| v::path(s).map(Some);
    duration -> Duration = parse_duration;
    positive_duration -> Duration = d::positive_duration;
    whole -> u32 = |s: &str| v::whole_in(s, 0..=u32::MAX, WHOLE);
    at_least_one -> u32 = |s: &str| v::whole_in(s, 1..=u32::MAX, AT_LEAST_ONE);
    jitter -> f64 = v::jitter;
    boolean -> bool = v::boolean;
    priority -> u32 = v::priority;
    shards -> u32 = |s: &str| v::whole_in(s, 0..=4096, "allowed: 0 (one lease) or a whole number of shards from 1 to 4096");
    connections -> u32 = |s: &str| v::whole_in(s, 1..=65535, "allowed: a whole number from 1 to 65535");
    http_url -> Option<String> = |s: &str| v::http_url(s).map(Some);
    http_addr -> Option<SocketAddr> = |s: &str| v::addr_or_off(s, "allowed: IP:PORT such as 0.0.0.0:9090, 127.0.0.1:0, [::]:9090, or \"\" for no HTTP server");
    listen_addr -> Option<SocketAddr> = |s: &str| v::addr_or_off(s, "allowed: IP:PORT such as 0.0.0.0:7000, or \"\" for no proxy");
    leader_file -> Option<PathBuf> = v::leader_file;
    host_port -> Option<String> = v::host_port;
    log_level -> String = v::log_level;
    redis_url -> Option<String> = |s: &str| v::redis_url(s).map(Some);
}

const WHOLE: &str = "allowed: a whole number >= 0 and <= 4294967295";
const AT_LEAST_ONE: &str = "allowed: a whole number >= 1 and <= 4294967295";

/// One of the names of the enum `T`, case-insensitive.
pub(super) fn choice<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    leaf(d, v::choice, T::default)
}

/// A signal by name or number.
pub(super) fn signal<'de, D: Deserializer<'de>>(d: D) -> Result<Signal, D::Error> {
    leaf(d, v::signal, || Signal::SIGTERM)
}

/// A list of strings; empty when it or one of its items is refused.
pub(super) fn list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let value = Value::deserialize(d)?;
    let Value::Sequence(items) = &value else {
        let why = format!(
            "{} is not a list of strings (write [\"a\", \"b\"])",
            describe(&value)
        );
        return refuse("", false, why).map(|()| Vec::new());
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match text(item) {
            Ok(t) => out.push(t),
            Err(why) => refuse(&format!("[{i}]"), false, why)?,
        }
    }
    Ok(if out.len() == items.len() {
        out
    } else {
        Vec::new()
    })
}

/// A list of Redis URLs, each one checked (a refused one is a problem of its item).
pub(super) fn redis_urls<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let urls = list(d)?;
    for (i, url) in urls.iter().enumerate() {
        if let Err(why) = v::redis_url(url) {
            refuse(&format!("[{i}]"), true, why.to_string())?;
        }
    }
    Ok(urls)
}
