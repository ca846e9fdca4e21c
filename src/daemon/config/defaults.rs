//! The default of `redis.url`, and [`Config::shape`]: every section present, so that its
//! printed keys are the schema of the file (`keys.rs`). Every other default is written next
//! to its field in `config.rs`.

use super::{Config, HealthCheckConfig, TlsConfig};

/// `redis.url` in mode single.
pub(super) const REDIS_URL: &str = "redis://127.0.0.1:6379/0";

impl Config {
    /// Every section present, optional ones included: its printed keys are the keys the
    /// file allows.
    pub(super) fn shape() -> Config {
        let mut c = Config::default();
        c.redis.tls = Some(TlsConfig::default());
        c.election.health_check = Some(HealthCheckConfig::default());
        c
    }
}
