//! The default of every key, in one place: the readers fall back to these, and the printed
//! shape of [`Config::shape`] is the schema of the file (`keys.rs`).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{Config, ElectionConfig, ExecConfig, HealthCheckConfig, HooksConfig};
use super::{LogFormat, LoggingConfig, OnChange, OnExit, OnLost, ProxyConfig};
use super::{PublishConfig, ReadyWhen, RedisConfig, RedisMode, TlsConfig};

/// `redis.url` in mode single.
pub(super) const REDIS_URL: &str = "redis://127.0.0.1:6379/0";

const SECS: fn(u64) -> Duration = Duration::from_secs;

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            mode: RedisMode::Single {
                url: REDIS_URL.into(),
            },
            username: None,
            password: None,
            password_file: None,
            key_prefix: "leaderd:".into(),
            connect_timeout: SECS(1),
            command_timeout: Duration::from_millis(500),
            min_replicas_ack: 0,
            tls: None,
        }
    }
}

impl Default for ElectionConfig {
    fn default() -> Self {
        ElectionConfig {
            lease_duration: SECS(15),
            renew_deadline: SECS(10),
            retry_period: SECS(2),
            jitter: 0.2,
            release_on_shutdown: true,
            on_lost: OnLost::Contend,
            health_check: None,
            priority: 0,
            preempt: false,
        }
    }
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        HealthCheckConfig {
            http_get: None,
            command: Vec::new(),
            period: SECS(2),
            timeout: SECS(1),
            failures: 3,
        }
    }
}

impl Default for PublishConfig {
    fn default() -> Self {
        PublishConfig {
            http_addr: Some(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 9090))),
            leader_file: Some(PathBuf::from("/var/run/leaderd/leader.json")),
            ready_when: ReadyWhen::Leader,
            max_connections: 1024,
            advertise: None,
        }
    }
}

impl Default for ExecConfig {
    fn default() -> Self {
        ExecConfig {
            command: Vec::new(),
            stop_signal: Signal::SIGTERM,
            grace_period: SECS(3),
            on_exit: OnExit::Release,
        }
    }
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

impl Default for HooksConfig {
    fn default() -> Self {
        HooksConfig {
            on_acquired: Vec::new(),
            on_stepped_down: Vec::new(),
            on_leader_changed: Vec::new(),
            timeout: SECS(10),
        }
    }
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: None,
            upstream: Some("127.0.0.1:8080".into()),
            on_change: OnChange::Close,
            connect_timeout: SECS(2),
            idle_timeout: SECS(3600),
            max_connections: 10_000,
        }
    }
}

impl Config {
    /// Every section present, optional ones included: its printed keys are the keys the
    /// file allows.
    pub(super) fn shape() -> Config {
        let mut c = Config {
            name: String::new(),
            identity: String::new(),
            redis: RedisConfig::default(),
            election: ElectionConfig::default(),
            publish: PublishConfig::default(),
            exec: ExecConfig::default(),
            logging: LoggingConfig::default(),
            hooks: HooksConfig::default(),
            proxy: ProxyConfig::default(),
        };
        c.redis.tls = Some(TlsConfig::default());
        c.election.health_check = Some(HealthCheckConfig::default());
        c
    }
}
