//! The `redis` section's mode and address keys (`mode`, `url`, `urls`, `sentinels`,
//! `master_name`): read beside the section's other keys, tied together by the mode's rules
//! (`rules::redis_mode`), then made into the [`RedisMode`] of the configuration.

use serde::Deserialize;

use super::defaults::REDIS_URL;
use super::read;
use super::yaml::Value;
use super::{ModeName, RedisMode};

/// The mode and the address keys as read, before the mode's rules tie them together.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct RedisAddrs {
    #[serde(deserialize_with = "read::choice")]
    pub(super) mode: ModeName,
    #[serde(deserialize_with = "read::redis_url")]
    pub(super) url: Option<String>,
    #[serde(deserialize_with = "read::redis_urls")]
    pub(super) urls: Vec<String>,
    #[serde(deserialize_with = "read::redis_urls")]
    pub(super) sentinels: Vec<String>,
    #[serde(deserialize_with = "read::some_text")]
    pub(super) master_name: Option<String>,
}

/// `redis.mode` from the section `redis`: the address keys read, checked against the
/// mode, made a mode.
pub(super) fn read_mode(redis: &Value) -> RedisMode {
    let url_given = redis.get("url").is_some_and(|u| !u.is_null());
    let addrs = read::part("redis", redis, |a: &RedisAddrs, problems| {
        let label = url_given.then(|| problems.label("redis.url"));
        super::rules::redis_mode(problems, a, label.as_deref());
    });
    addrs.into_mode()
}

impl RedisAddrs {
    /// The mode with its addresses; after [`super::rules::redis_mode`] found no problem,
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
