//! The known keys of `config.yaml`, and the nearest-key suggestion for unknown ones.

/// Every mapping of the file (by dotted path, "" for the top level) and the keys it allows.
const SCHEMA: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "name", "identity", "redis", "election", "publish", "exec", "logging", "hooks", "proxy",
        ],
    ),
    (
        "redis",
        &[
            "mode",
            "url",
            "urls",
            "sentinels",
            "master_name",
            "username",
            "password_file",
            "key_prefix",
            "connect_timeout",
            "command_timeout",
            "min_replicas_ack",
            "tls",
        ],
    ),
    ("redis.tls", &["ca_file", "cert_file", "key_file"]),
    (
        "election",
        &[
            "lease_duration",
            "renew_deadline",
            "retry_period",
            "jitter",
            "release_on_shutdown",
            "on_lost",
            "health_check",
            "priority",
            "preempt",
        ],
    ),
    (
        "election.health_check",
        &["http_get", "command", "period", "timeout", "failures"],
    ),
    (
        "publish",
        &[
            "http_addr",
            "leader_file",
            "ready_when",
            "max_connections",
            "advertise",
        ],
    ),
    (
        "exec",
        &["command", "stop_signal", "grace_period", "on_exit"],
    ),
    ("logging", &["format", "level"]),
    (
        "hooks",
        &[
            "on_acquired",
            "on_stepped_down",
            "on_leader_changed",
            "timeout",
        ],
    ),
    (
        "proxy",
        &[
            "listen",
            "upstream",
            "on_change",
            "connect_timeout",
            "max_connections",
        ],
    ),
];

/// The keys allowed in the mapping at `path` (empty for a path that is not a mapping).
pub(super) fn known_keys(path: &str) -> &'static [&'static str] {
    SCHEMA
        .iter()
        .find(|(p, _)| *p == path)
        .map_or(&[], |(_, keys)| keys)
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
    let full = crate::logging::escape_text(&join(path, key));
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
/// `lease_duration` suggests `election.lease_duration`).
fn suggest(path: &str, key: &str) -> Option<String> {
    let key = key.to_ascii_lowercase();
    let limit = (key.chars().count() / 4).clamp(1, 3);
    let mut best: Option<(usize, bool, String)> = None;
    for (section, keys) in SCHEMA {
        for known in *keys {
            let distance = levenshtein(&key, known);
            let elsewhere = *section != path;
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
    best.map(|(_, _, full)| full)
}

/// The edit distance (insertions, deletions, substitutions) between `a` and `b`.
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            let cost = usize::from(ca != *cb);
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + cost);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance() {
        assert_eq!(levenshtein("", ""), 0);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("lease_duraton", "lease_duration"), 1);
        assert_eq!(levenshtein("abc", ""), 3);
    }

    #[test]
    fn suggests_siblings_first_then_other_sections() {
        assert_eq!(
            unknown_key_message("election", "lease_duraton"),
            "election.lease_duraton: unknown key (did you mean election.lease_duration?)"
        );
        assert_eq!(
            suggest("", "lease_duration").as_deref(),
            Some("election.lease_duration")
        );
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

    #[test]
    fn lists_the_allowed_keys_when_nothing_is_close() {
        let msg = unknown_key_message("logging", "zzzzzzzz");
        assert_eq!(
            msg,
            "logging.zzzzzzzz: unknown key (allowed here: format, level)"
        );
    }
}
