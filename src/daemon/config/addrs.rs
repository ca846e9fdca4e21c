//! The `redis` section's mode and address keys (`mode`, `url`, `urls`, `sentinels`,
//! `master_name`): read beside the section's other keys, checked by the mode's rules (which
//! keys each mode needs and allows), then made into the [`RedisMode`] of the configuration.

use serde::Deserialize;

use super::defaults::REDIS_URL;
use super::problems::Problems;
use super::yaml::Value;
use super::{leaf, read};
use super::{ModeName, RedisMode};

/// The mode and the address keys as read, before the mode's rules tie them together.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct RedisAddrs {
    #[serde(deserialize_with = "leaf::choice")]
    pub(super) mode: ModeName,
    #[serde(deserialize_with = "leaf::redis_url")]
    pub(super) url: Option<String>,
    #[serde(deserialize_with = "leaf::redis_urls")]
    pub(super) urls: Vec<String>,
    #[serde(deserialize_with = "leaf::redis_urls")]
    pub(super) sentinels: Vec<String>,
    #[serde(deserialize_with = "leaf::some_text")]
    pub(super) master_name: Option<String>,
}

/// `redis.mode` from the section `redis`: the address keys read, checked against the
/// mode, made a mode.
pub(super) fn read_mode(redis: &Value) -> RedisMode {
    let url_given = redis.get("url").is_some_and(|u| !u.is_null());
    let addrs = read::part("redis", redis, |a: &RedisAddrs, problems| {
        let label = url_given.then(|| problems.label("redis.url"));
        redis_mode(problems, a, label.as_deref());
    });
    addrs.into_mode()
}

impl RedisAddrs {
    /// The mode with its addresses; after [`redis_mode`] found no problem,
    /// nothing is left out.
    pub(super) fn into_mode(self) -> RedisMode {
        match self.mode {
            ModeName::Single => RedisMode::Single {
                url: self.url.unwrap_or_else(|| REDIS_URL.to_string()),
            },
            ModeName::Sentinel => RedisMode::Sentinel {
                sentinels: self.sentinels,
                master_name: self.master_name.unwrap_or_default(),
            },
            ModeName::Redlock => RedisMode::Redlock { urls: self.urls },
            ModeName::Cluster => RedisMode::Cluster { urls: self.urls },
        }
    }
}

/// Which of `url`, `urls`, `sentinels` and `master_name` each mode needs and allows.
pub(super) fn redis_mode(r: &mut Problems, c: &RedisAddrs, url_label: Option<&str>) {
    if !r.all_valid(&["redis.mode"]) {
        return;
    }
    let mode = super::values::name_of(c.mode);
    let single = c.mode == ModeName::Single;
    let sentinel = c.mode == ModeName::Sentinel;
    if let (false, Some(label)) = (single, url_label) {
        let msg = format!(
            "{label}: only mode single uses a single url; mode {mode} uses {}",
            uses(c.mode)
        );
        r.problem("redis.url", msg);
    }
    if !c.urls.is_empty() && matches!(c.mode, ModeName::Single | ModeName::Sentinel) {
        let msg = format!(
            "redis.urls: only modes redlock and cluster use urls; mode {mode} uses {}",
            uses(c.mode)
        );
        r.problem("redis.urls", msg);
    }
    if !sentinel && (!c.sentinels.is_empty() || c.master_name.is_some()) {
        let msg = format!(
            "redis.sentinels, redis.master_name: only mode sentinel uses them; mode {mode} uses {}",
            uses(c.mode)
        );
        r.problem("redis.sentinels", msg);
    }
    mode_needs(r, c);
}

/// What each mode reads its addresses from, for the messages above.
fn uses(mode: ModeName) -> &'static str {
    match mode {
        ModeName::Single => "redis.url",
        ModeName::Sentinel => "redis.sentinels and redis.master_name",
        ModeName::Redlock | ModeName::Cluster => "redis.urls",
    }
}

/// Every address the mode needs and lacks (a list whose items were rejected still counts).
fn mode_needs(r: &mut Problems, c: &RedisAddrs) {
    let n = c.urls.len();
    let mut missing = Vec::new();
    match c.mode {
        ModeName::Single => {}
        ModeName::Sentinel => {
            if c.sentinels.is_empty() {
                let why = "mode sentinel needs at least one sentinel URL";
                missing.push(("redis.sentinels", why.to_string()));
            }
            if c.master_name.is_none() {
                let why = "mode sentinel needs the name of the monitored master";
                missing.push(("redis.master_name", why.to_string()));
            }
        }
        ModeName::Redlock if n < 3 || n % 2 == 0 => {
            let why = format!("mode redlock needs an odd number >= 3 of urls (got {n})");
            missing.push(("redis.urls", why));
        }
        ModeName::Redlock => {}
        ModeName::Cluster if n == 0 => {
            let why = "mode cluster needs at least one seed node URL";
            missing.push(("redis.urls", why.to_string()));
        }
        ModeName::Cluster => {}
    }
    for (key, why) in missing {
        if r.all_valid(&[key]) {
            r.problem(key, format!("{key}: {why}"));
        }
    }
}
