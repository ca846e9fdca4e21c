//! The one place that names the YAML crate: the text of `config.yaml` made into a document
//! (the size cap, UTF-8, a byte order mark, anchors refused, integers wider than 64 bits,
//! and a top level that is a mapping), and a value made into YAML text.

use std::borrow::Cow;

use serde::Serialize;
pub(super) use serde_yaml::{Mapping, Value};

/// `value` as a YAML document.
pub(super) fn to_value(value: &impl Serialize) -> Result<Value, serde_yaml::Error> {
    serde_yaml::to_value(value)
}

/// `value` as YAML text.
pub(super) fn to_text(value: &impl Serialize) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(value)
}

use super::{aliases, ConfigError, MAX_CONFIG_BYTES};

/// The file's text, refused past [`MAX_CONFIG_BYTES`] or when it is not UTF-8.
pub(super) fn read_capped(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        let msg = format!("it is larger than {MAX_CONFIG_BYTES} bytes (1 MiB, the limit)");
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, msg));
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not valid UTF-8"))
}

/// The document of `text` (from `origin`, named in problems), null or a mapping.
///
/// # Errors
/// One problem naming `origin`: too large, anchors or aliases, invalid YAML, or a top level
/// that is not a mapping.
pub(super) fn parse(text: &str, origin: &str) -> Result<Value, ConfigError> {
    // Some editors start a UTF-8 file with a byte order mark; YAML does not need one.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::one(format!(
            "config file {origin}: it is larger than {MAX_CONFIG_BYTES} bytes (1 MiB, the limit)"
        )));
    }
    if let Some(line) = aliases::first_anchor_or_alias(text) {
        return Err(ConfigError::one(format!(
            "config file {origin}: line {line}: YAML anchors and aliases (&name, *name) are not allowed (write each value out)"
        )));
    }
    let doc = parse_yaml(text).map_err(|e| yaml_error(origin, &e))?;
    if !(doc.is_null() || doc.is_mapping()) {
        let what = describe(&doc);
        return Err(ConfigError::one(format!(
            "config file {origin}: the top level is {what}, but it must be a mapping of keys (name, identity, redis, ...)"
        )));
    }
    Ok(doc)
}

/// The document. serde_yaml's `Value` has no integer wider than 64 bits, so such a number
/// fails the whole parse: it is quoted and the text parsed again, so that its key's check
/// refuses it (naming the value and what is allowed) along with every other problem.
fn parse_yaml(text: &str) -> Result<Value, serde_yaml::Error> {
    const MAX_QUOTED: usize = 100;
    let mut text = Cow::Borrowed(text);
    for _ in 0..MAX_QUOTED {
        match serde_yaml::from_str(&text) {
            Err(e) => match quote_wide_integer(&text, &e) {
                Some(quoted) => text = quoted.into(),
                None => return Err(e),
            },
            ok => return ok,
        }
    }
    serde_yaml::from_str(&text)
}

/// `text` with the integer that `err` could not hold (`... as u128` or `as i128`) quoted.
fn quote_wide_integer(text: &str, err: &serde_yaml::Error) -> Option<String> {
    let what = err.to_string();
    if !(what.contains(" as u128,") || what.contains(" as i128,")) {
        return None;
    }
    let at = err.location()?.index();
    let rest = text.get(at..)?;
    let len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || "+-_".contains(c)))
        .unwrap_or(rest.len());
    let number = &rest[..len];
    if !number.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+') {
        return None;
    }
    Some(format!("{}\"{number}\"{}", &text[..at], &rest[len..]))
}

/// `config file PATH: invalid YAML at line L column C: WHAT` in one line.
fn yaml_error(origin: &str, e: &serde_yaml::Error) -> ConfigError {
    let what = e.to_string();
    let what = what.split(" at line ").next().unwrap_or(&what).to_string();
    let at = e
        .location()
        .map(|l| format!(" at line {} column {}", l.line(), l.column()))
        .unwrap_or_default();
    ConfigError::one(format!("config file {origin}: invalid YAML{at}: {what}"))
}

/// A short rendering of a YAML value for a problem line.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a mapping".to_string(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_integers_are_quoted_wherever_they_are() {
        let doc = parse(
            "a: 99999999999999999999\nb: \"é€\"\nc: [1, -99999999999999999999]\n",
            "t",
        )
        .unwrap();
        assert_eq!(doc["a"].as_str(), Some("99999999999999999999"));
        assert_eq!(doc["c"][1].as_str(), Some("-99999999999999999999"));
        assert_eq!(doc["c"][0].as_u64(), Some(1));
        let err = parse("a: [1", "t").unwrap_err().to_string();
        assert!(err.starts_with("config file t: invalid YAML"), "{err}");
    }
}
