//! The `redis` section's mode and address keys as read, before the mode's rules
//! (`rules::redis_mode`) tie them together; shared by the section reader and the rules.

use super::defaults::REDIS_URL;
use super::{ModeName, RedisMode};

/// The mode and the address keys as read, before the mode's rules tie them together.
pub(super) struct RedisAddrs {
    pub(super) mode: ModeName,
    pub(super) url: Option<String>,
    pub(super) urls: Vec<String>,
    pub(super) sentinels: Vec<String>,
    pub(super) master_name: Option<String>,
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
