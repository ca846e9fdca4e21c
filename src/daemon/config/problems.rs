//! The problems found in one configuration, each one line naming the key (or the flag or
//! variable that gave its value), the value and what is allowed; listed in the order of the
//! keys, whichever pass found them.

use std::collections::{HashMap, HashSet};

use super::keys::{join, position, unknown_key_message};
use super::scrub::scrub;
use super::values::REDIS_URL_FORMS;

/// Collects the problems of one configuration, and which keys were refused.
#[derive(Debug, Default)]
pub(super) struct Problems {
    found: Vec<(String, String)>,
    rejected: HashSet<String>,
    /// The flag or `LEADERD_*` variable that gave a key its value.
    labels: HashMap<String, String>,
}

impl Problems {
    /// Records a problem with the value of config key `key`; the message is scrubbed of
    /// any password written in a URL (but not the hint of what a Redis URL looks like).
    pub(super) fn problem(&mut self, key: &str, message: String) {
        self.rejected.insert(key.to_string());
        let pieces: Vec<String> = message.split(REDIS_URL_FORMS).map(scrub).collect();
        self.found
            .push((key.to_string(), pieces.join(REDIS_URL_FORMS)));
    }

    /// Records `key`, which the mapping at `section` does not allow.
    pub(super) fn unknown(&mut self, section: &str, key: &str) {
        let message = unknown_key_message(section, key);
        self.found.push((join(section, key), message));
    }

    /// Remembers that `key` got its value from the flag or variable `label`.
    pub(super) fn given(&mut self, key: &str, label: &str) {
        self.labels.insert(key.to_string(), label.to_string());
    }

    /// True when `key`'s value came from a flag or a variable.
    pub(super) fn is_given(&self, key: &str) -> bool {
        self.labels.contains_key(key)
    }

    /// What the user wrote `key`'s value as: the flag, the variable or the dotted key.
    pub(super) fn label(&self, key: &str) -> String {
        self.labels.get(key).map_or(key, String::as_str).to_string()
    }

    /// True when none of `keys` had a value that was rejected (so rules on them make sense).
    pub(super) fn all_valid(&self, keys: &[&str]) -> bool {
        keys.iter().all(|k| !self.rejected.contains(*k))
    }

    /// True when no value in `section` (the section itself included) was rejected.
    pub(super) fn section_valid(&self, section: &str) -> bool {
        let inside = |key: &str| {
            key.strip_prefix(section)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        };
        !self.rejected.iter().any(|key| inside(key))
    }

    /// Every problem, in the order of the keys (in the order found for one key).
    pub(super) fn into_lines(self) -> Vec<String> {
        let mut found = self.found;
        found.sort_by_cached_key(|(key, _)| position(key));
        found.into_iter().map(|(_, line)| line).collect()
    }
}
