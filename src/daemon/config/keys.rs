//! The known keys of `config.yaml`, and the nearest-key suggestion for unknown ones.

use std::sync::OnceLock;

use super::yaml::{self, Value};
use super::{Config, HealthCheckConfig, TlsConfig};

/// Keys printed by `check-config` that the file cannot set.
const PRINTED_ONLY: &[&str] = &["redis.password"];

/// Every mapping of the file (by dotted path, "" for the top level) with the keys it allows,
/// and every dotted key, both in the order the config structs declare them.
struct Schema {
    sections: Vec<(String, Vec<String>)>,
    order: Vec<String>,
}

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut out = Schema {
            sections: Vec::new(),
            order: Vec::new(),
        };
        // Every section present, optional ones included: its printed keys are the file's.
        let mut shape = Config::default();
        shape.redis.tls = Some(TlsConfig::default());
        shape.election.health_check = Some(HealthCheckConfig::default());
        let shape = yaml::to_value(&shape).unwrap_or_default();
        walk("", &shape, &mut out);
        out
    })
}

fn walk(path: &str, value: &Value, out: &mut Schema) {
    let Value::Mapping(map) = value else { return };
    let at = out.sections.len();
    out.sections.push((path.to_string(), Vec::new()));
    for (key, child) in map {
        let Some(key) = key.as_str() else { continue };
        let full = join(path, key);
        if !PRINTED_ONLY.contains(&full.as_str()) {
            out.sections[at].1.push(key.to_string());
            out.order.push(full.clone());
            walk(&full, child, out);
        }
    }
}

/// The keys allowed in the mapping at `path` (empty for a path that is not a mapping).
pub(super) fn known_keys(path: &str) -> &'static [String] {
    schema()
        .sections
        .iter()
        .find(|(p, _)| p == path)
        .map_or(&[], |(_, keys)| keys)
}

/// True when the key at `path` holds a mapping of keys (a section).
pub(super) fn is_section(path: &str) -> bool {
    schema().sections.iter().any(|(p, _)| p == path)
}

/// Where `key` (or the nearest section holding it) comes in the order of the keys.
pub(super) fn position(key: &str) -> usize {
    let mut key = key.split('[').next().unwrap_or(key);
    loop {
        if let Some(i) = schema().order.iter().position(|k| k == key) {
            return i + 1;
        }
        match key.rsplit_once('.') {
            Some((parent, _)) => key = parent,
            None => return 0,
        }
    }
}

/// `path` and `key` joined with a dot (just `key` at the top level).
pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The problem line for an unknown `key` found in the mapping at `path` (one line, whatever
/// characters the key holds).
pub(super) fn unknown_key_message(path: &str, key: &str) -> String {
    let full = crate::daemon::escape::escape_text(&join(path, key));
    match suggest(path, key) {
        Some(near) => format!("{full}: unknown key (did you mean {near}?)"),
        None => format!(
            "{full}: unknown key (allowed here: {})",
            known_keys(path).join(", ")
        ),
    }
}

/// The known dotted key nearest to `key` written under `path`: a sibling within a small
/// edit distance first, else the same or a close name in another section (so a top-level
/// `lease_duration` suggests `election.lease_duration`), else a sibling that `key` begins
/// (`redis.password` suggests `redis.password_file`). The distance counts insertions,
/// deletions, substitutions and swaps of two neighbours (`fromat` is 1 from `format`).
fn suggest(path: &str, key: &str) -> Option<String> {
    let key = key.to_ascii_lowercase();
    let length = key.chars().count();
    let limit = (length / 4).clamp(1, 3);
    if length > MAX_COMPARED {
        return None;
    }
    let mut best: Option<(usize, bool, String)> = None;
    for (section, keys) in &schema().sections {
        for known in keys {
            let distance = strsim::osa_distance(&key, known);
            let elsewhere = section != path;
            let candidate = (distance, elsewhere, join(section, known));
            if distance <= limit
                && best
                    .as_ref()
                    .is_none_or(|b| (b.0, b.1) > (distance, elsewhere))
            {
                best = Some(candidate);
            }
        }
    }
    let longer = || {
        let known = known_keys(path);
        let found = known.iter().find(|k| length >= 4 && k.starts_with(&key))?;
        Some(join(path, found))
    };
    best.map(|(_, _, full)| full).or_else(longer)
}

/// Keys longer than this are not compared (no known key is within reach of them).
const MAX_COMPARED: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    /// A swap of two letters is one edit, and a sibling the key begins is named.
    #[test]
    fn suggests_for_swapped_letters_and_a_missing_ending() {
        assert_eq!(
            unknown_key_message("logging", "fromat"),
            "logging.fromat: unknown key (did you mean logging.format?)"
        );
        assert_eq!(
            suggest("election", "lease_durtaion").as_deref(),
            Some("election.lease_duration")
        );
        assert_eq!(
            suggest("redis", "password").as_deref(),
            Some("redis.password_file")
        );
        assert_eq!(suggest("redis", "pa"), None);
        assert_eq!(suggest("logging", &"x".repeat(100_000)), None);
    }

    /// (tests/rules.rs: `unknown_keys_suggest_the_nearest` reads whole files.)
    #[test]
    fn suggests_siblings_first_then_other_sections() {
        assert_eq!(suggest("redis", "Mode").as_deref(), Some("redis.mode"));
        // `command` exists under exec and health_check: the sibling wins.
        assert_eq!(suggest("exec", "comand").as_deref(), Some("exec.command"));
        assert_eq!(
            suggest("election.health_check", "comand").as_deref(),
            Some("election.health_check.command")
        );
        assert_eq!(suggest("", "elction").as_deref(), Some("election"));
    }

    #[test]
    fn an_unknown_key_with_control_characters_stays_one_line() {
        assert_eq!(
            unknown_key_message("redis", "url\nfake: line"),
            "redis.url\\u{a}fake: line: unknown key (allowed here: mode, url, urls, sentinels, \
             master_name, username, password_file, key_prefix, connect_timeout, \
             command_timeout, min_replicas_ack, tls)"
        );
    }

    /// The schema is the structs' printed keys, optional sections included (the top level
    /// and `redis`, less the password, are listed in whole by the unknown-key messages).
    #[test]
    fn the_schema_has_the_optional_sections() {
        let tls = ["ca_file", "cert_file", "key_file"];
        assert_eq!(known_keys("redis.tls"), tls);
        let check = ["http_get", "command", "period", "timeout", "failures"];
        assert_eq!(known_keys("election.health_check"), check);
        assert_eq!(known_keys("proxy")[4], "idle_timeout");
        assert!(known_keys("redis.url").is_empty());
    }
}
