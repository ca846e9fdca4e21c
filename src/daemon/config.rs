//! The configuration layer: `config.yaml`, `LEADERD_*` variables and command-line flags
//! merged into one validated [`Config`], with every problem reported at once.
//!
//! Precedence is flag > environment > file > default. In the file, `${VAR}` in any string
//! value is replaced from the environment and `$${` stands for a literal `${`.
//!
//! Adding a key: its field, doc and default in the section's struct below (the allowed keys
//! of the file and the printed configuration follow from the struct; a duration or a path
//! names its printer with `serialize_with`), and its reader line in `sections.rs` or
//! `outputs.rs`; a key with a flag also gets its field in [`Overrides`].

mod addrs;
mod aliases;
mod defaults;
mod duration;
mod expand;
mod keys;
mod outputs;
mod programs;
mod redact;
mod refused;
mod rules;
mod scrub;
mod sections;
mod spec;
mod tree;
mod values;
mod yaml;
pub(crate) use duration::{format_duration, parse_duration};
pub(crate) use programs::group_writable_warnings;

#[cfg(test)]
mod tests;

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};

/// A config struct whose fields are written `pub field: Type = default,`: the struct, and
/// its `Default` from those values (a new key is one field, its doc and its default).
macro_rules! with_defaults {
    ($(#[$meta:meta])* pub struct $name:ident {
        $($(#[$fmeta:meta])* pub $field:ident: $ty:ty = $default:expr,)*
    }) => {
        $(#[$meta])* pub struct $name { $($(#[$fmeta])* pub $field: $ty,)* }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $default,)* }
            }
        }
    };
}

/// Everything `leaderd` needs to run one election, validated as a whole.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// The election name, shared by all replicas; part of every Redis key.
    pub name: String,
    /// This replica's identity, published as the holder; must differ between replicas.
    pub identity: String,
    /// Section `redis`: where the lease lives.
    pub redis: RedisConfig,
    /// Section `election`: lease timing and campaigning.
    pub election: ElectionConfig,
    /// Section `publish`: the HTTP server and the leader file.
    pub publish: PublishConfig,
    /// Section `exec`: the command run only while leading.
    pub exec: ExecConfig,
    /// Section `logging`.
    pub logging: LoggingConfig,
    /// Section `hooks`: commands run when leadership changes.
    pub hooks: HooksConfig,
    /// Section `proxy`: the leader-aware TCP proxy.
    pub proxy: ProxyConfig,
}

/// The value of `redis.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeName {
    /// `single`.
    Single,
    /// `sentinel`.
    Sentinel,
    /// `redlock`.
    Redlock,
    /// `cluster`.
    Cluster,
}

/// How the lease store is deployed, with the addresses that deployment uses (after
/// validation: a mode without its addresses, or with another mode's, cannot be built).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisMode {
    /// One server (`redis.url`, default `redis://127.0.0.1:6379/0`).
    Single {
        /// `redis.url`.
        url: String,
    },
    /// A master found through the Sentinels by its name.
    Sentinel {
        /// `redis.sentinels`.
        sentinels: Vec<String>,
        /// `redis.master_name`.
        master_name: String,
    },
    /// Independent servers (an odd number >= 3); a majority holds the lease.
    Redlock {
        /// `redis.urls`.
        urls: Vec<String>,
    },
    /// A Redis Cluster, reached through seed nodes.
    Cluster {
        /// `redis.urls`.
        urls: Vec<String>,
    },
}

impl RedisMode {
    /// The `redis.mode` this is.
    pub fn name(&self) -> ModeName {
        match self {
            RedisMode::Single { .. } => ModeName::Single,
            RedisMode::Sentinel { .. } => ModeName::Sentinel,
            RedisMode::Redlock { .. } => ModeName::Redlock,
            RedisMode::Cluster { .. } => ModeName::Cluster,
        }
    }

    /// `redis.url` (mode single).
    pub fn url(&self) -> Option<&str> {
        match self {
            RedisMode::Single { url } => Some(url),
            _ => None,
        }
    }

    /// `redis.urls` (modes redlock and cluster; empty otherwise).
    pub fn urls(&self) -> &[String] {
        match self {
            RedisMode::Redlock { urls } | RedisMode::Cluster { urls } => urls,
            _ => &[],
        }
    }

    /// `redis.sentinels` (mode sentinel; empty otherwise).
    pub fn sentinels(&self) -> &[String] {
        match self {
            RedisMode::Sentinel { sentinels, .. } => sentinels,
            _ => &[],
        }
    }

    /// `redis.master_name` (mode sentinel).
    pub fn master_name(&self) -> Option<&str> {
        match self {
            RedisMode::Sentinel { master_name, .. } => Some(master_name),
            _ => None,
        }
    }
}

/// A password: kept out of `Debug` output, logs and the printed configuration (the
/// library's type, handed to the connector as it is).
pub use crate::connector::Secret;

with_defaults! {
/// Where and how to reach Redis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RedisConfig {
    /// How Redis is deployed (default single), with its addresses.
    #[serde(flatten)]
    pub mode: RedisMode = RedisMode::Single { url: defaults::REDIS_URL.into() },
    /// The Redis ACL user.
    pub username: Option<String> = None,
    /// `LEADERD_REDIS_PASSWORD` if set and not empty, else the contents of `password_file`
    /// with the trailing newline removed.
    #[serde(serialize_with = "redact::secret")]
    pub password: Option<Secret> = None,
    /// A file holding the password (read only when `LEADERD_REDIS_PASSWORD` is not set).
    #[serde(serialize_with = "redact::path")]
    pub password_file: Option<PathBuf> = None,
    /// Prepended to every key (default `leaderd:`).
    pub key_prefix: String = "leaderd:".into(),
    /// Limit on establishing a connection (default 1s).
    #[serde(serialize_with = "redact::duration")]
    pub connect_timeout: Duration = Duration::from_secs(1),
    /// Limit on one command's round trip (default 500ms); less than `retry_period`.
    #[serde(serialize_with = "redact::duration")]
    pub command_timeout: Duration = Duration::from_millis(500),
    /// When > 0, an acquire or renew counts only after that many replicas acknowledged it.
    pub min_replicas_ack: u32 = 0,
    /// `redis.tls` (optional, beyond `rediss://` alone): the files for `rediss://`
    /// connections. None: the system's CA roots, no client certificate.
    pub tls: Option<TlsConfig> = None,
}
}

/// Files for TLS connections (`rediss://`). Paths only: the contents are read when the
/// client is made, and never printed.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct TlsConfig {
    /// PEM CA bundle to verify the servers with, instead of the system's roots.
    #[serde(serialize_with = "redact::path")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (with `key_file`), for servers that ask for one.
    #[serde(serialize_with = "redact::path")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    #[serde(serialize_with = "redact::path")]
    pub key_file: Option<PathBuf>,
}

/// What a replica does after losing a term for a reason other than shutdown or yield.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnLost {
    /// Campaign again after `retry_period`.
    Contend,
    /// Exit with code 1, for services that want a restart.
    Exit,
}

with_defaults! {
/// Timing of the lease and of campaigning.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ElectionConfig {
    /// TTL of the lease in Redis.
    #[serde(serialize_with = "redact::duration")]
    pub lease_duration: Duration = Duration::from_secs(15),
    /// A leader that has not renewed within this steps down.
    #[serde(serialize_with = "redact::duration")]
    pub renew_deadline: Duration = Duration::from_secs(10),
    /// Renew interval of the leader, poll interval of the others.
    #[serde(serialize_with = "redact::duration")]
    pub retry_period: Duration = Duration::from_secs(2),
    /// Followers wait `retry_period * (1 + U(0, jitter))`; `0 <= jitter <= 1`.
    pub jitter: f64 = 0.2,
    /// Release the lease on a clean shutdown (default true).
    pub release_on_shutdown: bool = true,
    /// What to do after losing a term (default contend).
    pub on_lost: OnLost = OnLost::Contend,
    /// Set only when `http_get` or a `command` is configured.
    pub health_check: Option<HealthCheckConfig> = None,
    /// Preference as a successor, 0..=1000 (higher first; default 0).
    pub priority: u32 = 0,
    /// Hand over to a healthier, higher-priority candidate (default false).
    pub preempt: bool = false,
}
}

with_defaults! {
/// Lead only while the local service is healthy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthCheckConfig {
    /// An `http://` URL, healthy when it answers 2xx.
    #[serde(serialize_with = "redact::url")]
    pub http_get: Option<String> = None,
    /// A command, healthy when it exits 0 (run directly, not through a shell).
    pub command: Vec<String> = Vec::new(),
    /// Time between checks (default 2s).
    #[serde(serialize_with = "redact::duration")]
    pub period: Duration = Duration::from_secs(2),
    /// Limit on one check (default 1s); less than `period`.
    #[serde(serialize_with = "redact::duration")]
    pub timeout: Duration = Duration::from_secs(1),
    /// Consecutive failures before yielding or not contending (>= 1).
    pub failures: u32 = 3,
}
}

/// When `/readyz` answers 200.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadyWhen {
    /// Only while leader with a valid lease.
    Leader,
    /// Once started.
    Always,
}

with_defaults! {
/// Where the status is published.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PublishConfig {
    /// None: no HTTP server (the empty string in the file, a flag or the environment).
    #[serde(serialize_with = "redact::addr_or_off")]
    pub http_addr: Option<SocketAddr> = Some(SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 9090))),
    /// None: no leader file (the empty string).
    #[serde(serialize_with = "redact::path_or_off")]
    pub leader_file: Option<PathBuf> = Some(PathBuf::from("/var/run/leaderd/leader.json")),
    /// When `/readyz` answers 200 (default leader).
    pub ready_when: ReadyWhen = ReadyWhen::Leader,
    /// Open HTTP connections (event streams included) past which a new one is closed at once
    /// (default 1024, 1-65535).
    pub max_connections: u32 = 1024,
    /// `host:port` where the other replicas reach this replica's service (None: unset).
    pub advertise: Option<String> = None,
}
}

with_defaults! {
/// Commands run (directly, one at a time) when leadership changes; empty: none.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HooksConfig {
    /// Run after this replica began a term.
    pub on_acquired: Vec<String> = Vec::new(),
    /// Run after this replica's term ended (its claim is over).
    pub on_stepped_down: Vec<String> = Vec::new(),
    /// Run when this replica sees another leader, or none.
    pub on_leader_changed: Vec<String> = Vec::new(),
    /// A hook still running then is SIGKILLed with its process group (default 10s).
    #[serde(serialize_with = "redact::duration")]
    pub timeout: Duration = Duration::from_secs(10),
}
}

/// What happens to the proxied connections of a deposed leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnChange {
    /// Close them when this replica learns of the change.
    Close,
    /// Leave them open.
    Keep,
}

with_defaults! {
/// The leader-aware proxy; `listen` None: no proxy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProxyConfig {
    /// Where to accept connections (the empty string: no proxy).
    #[serde(serialize_with = "redact::addr_or_off")]
    pub listen: Option<SocketAddr> = None,
    /// This replica's own service, `host:port` (default `127.0.0.1:8080`).
    #[serde(serialize_with = "redact::text_or_off")]
    pub upstream: Option<String> = Some("127.0.0.1:8080".into()),
    /// What happens to connections of a deposed leader (default close).
    pub on_change: OnChange = OnChange::Close,
    /// How long a new connection waits for a leader (default 2s).
    #[serde(serialize_with = "redact::duration")]
    pub connect_timeout: Duration = Duration::from_secs(2),
    /// A connection with no bytes either way for this long is closed (default 1h; zero:
    /// never).
    #[serde(serialize_with = "redact::duration")]
    pub idle_timeout: Duration = Duration::from_secs(3600),
    /// Connections past this many are closed at once and counted as refused (default 10000).
    pub max_connections: u32 = 10_000,
}
}

/// What happens when the child exits while this replica leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnExit {
    /// Release the lease and contend again after `retry_period`.
    Release,
    /// Release and exit with the child's code.
    Exit,
}

with_defaults! {
/// The command run only while leading; empty `command` means no exec mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecConfig {
    /// The program and its arguments, run directly (not through a shell).
    pub command: Vec<String> = Vec::new(),
    /// Sent to the child's process group on stepping down (default SIGTERM).
    #[serde(serialize_with = "redact::signal")]
    pub stop_signal: nix::sys::signal::Signal = nix::sys::signal::Signal::SIGTERM,
    /// Time between `stop_signal` and SIGKILL (default 3s); less than
    /// `lease_duration - renew_deadline` in exec mode.
    #[serde(serialize_with = "redact::duration")]
    pub grace_period: Duration = Duration::from_secs(3),
    /// What to do when the child exits while leading (default release).
    pub on_exit: OnExit = OnExit::Release,
}
}

/// The log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with an `event` field on leadership changes.
    Json,
}

with_defaults! {
/// How to log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoggingConfig {
    /// Text or JSON lines (default text).
    pub format: LogFormat = LogFormat::Text,
    /// One of trace, debug, info, warn, error (lowercase).
    pub level: String = "info".into(),
}
}

/// Values given on the command line (the flags every subcommand shares); None = not given.
/// They win over the environment and the file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Overrides {
    /// Configuration file [default: $LEADERD_CONFIG, else ./config.yaml]
    #[arg(long = "config", value_name = "PATH")]
    pub config_path: Option<PathBuf>,
    /// Election name.
    #[arg(long)]
    pub name: Option<String>,
    /// This replica's identity.
    #[arg(long)]
    pub identity: Option<String>,
    /// Redis URL (mode single). A password in it is visible to every user in `ps`: use
    /// LEADERD_REDIS_PASSWORD or redis.password_file instead.
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Lease TTL, e.g. 15s.
    #[arg(long, value_name = "DURATION")]
    pub lease_duration: Option<String>,
    /// Step down without a renew for this long, e.g. 10s.
    #[arg(long, value_name = "DURATION")]
    pub renew_deadline: Option<String>,
    /// Renew and poll interval, e.g. 2s.
    #[arg(long, value_name = "DURATION")]
    pub retry_period: Option<String>,
    /// HTTP address, e.g. 0.0.0.0:9090; empty for none.
    #[arg(long, value_name = "ADDR")]
    pub http_addr: Option<String>,
    /// Leader file path; empty for none.
    #[arg(long, value_name = "PATH")]
    pub leader_file: Option<String>,
    /// text or json.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// trace, debug, info, warn or error.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// From `-- COMMAND ARGS` (set by `run`); when non-empty it replaces `exec.command`.
    #[arg(skip)]
    pub exec_command: Vec<String>,
    /// Check that the hook and exec programs can be run on this host (`check-config` and
    /// `run`; `status` and `handover` may run on an operator's host that lacks them).
    #[arg(skip)]
    pub check_programs: bool,
}

/// Every problem found in a configuration, each one line naming the key or flag, the bad
/// value and what is allowed; `Display` prints them one per line.
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.join("\n"))]
pub struct ConfigError {
    /// One line per problem, in the order found.
    pub problems: Vec<String>,
}

impl ConfigError {
    fn one(problem: String) -> Self {
        ConfigError {
            problems: vec![problem.replace('\n', " ")],
        }
    }
}

/// Looks an environment variable up, as `std::env::var` does (a map in tests).
pub type EnvLookup<'e> = &'e dyn Fn(&str) -> Result<String, std::env::VarError>;

/// The problem line of an environment variable `name` whose value is not UTF-8.
fn not_utf8(name: &str) -> String {
    format!("environment variable {name}: its value is not valid UTF-8 (allowed: UTF-8 text)")
}

/// Loads and validates the configuration. The file is `overrides.config_path`, else
/// `$LEADERD_CONFIG`, else `./config.yaml`; `env` looks up environment variables
/// (`std::env::var` in production, a map in tests).
///
/// # Errors
///
/// A missing or unreadable file or invalid YAML gives one problem naming the path;
/// otherwise every unknown key, bad value and broken rule is listed.
pub fn load(overrides: &Overrides, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
    let from_env = || match env("LEADERD_CONFIG") {
        Ok(path) => Ok(Some(path).filter(|p| !p.is_empty()).map(PathBuf::from)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::one(not_utf8("LEADERD_CONFIG"))),
    };
    let path = match overrides.config_path.clone() {
        Some(path) => path,
        None => from_env()?.unwrap_or_else(|| PathBuf::from("./config.yaml")),
    };
    let shown = path.display().to_string();
    let text = yaml::read_capped(&path)
        .map_err(|e| ConfigError::one(format!("config file {shown}: cannot read it: {e}")))?;
    from_text(&text, &shown, overrides, env)
}

/// Like [`load`], but from YAML text instead of a file (`overrides.config_path` is ignored).
///
/// # Errors
///
/// As [`load`], without the file errors.
#[cfg_attr(not(test), allow(dead_code))]
pub fn load_from_str(
    yaml: &str,
    overrides: &Overrides,
    env: EnvLookup<'_>,
) -> Result<Config, ConfigError> {
    from_text(yaml, "<string>", overrides, env)
}

/// Checks an identity given outside the configuration (`handover --to`) by the rule of
/// `identity`.
///
/// # Errors
/// What is wrong with it and what is allowed, without the flag's name.
pub(crate) fn check_identity(identity: &str) -> Result<(), refused::ValueError> {
    values::identity(identity).map(drop)
}

/// The largest config file read (a leaderd config is a few kilobytes).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

fn from_text(
    text: &str,
    origin: &str,
    overrides: &Overrides,
    env: EnvLookup<'_>,
) -> Result<Config, ConfigError> {
    let doc = yaml::parse(text, origin)?;
    let mut reader = tree::Reader::new(env);
    let root = reader.root(&doc);
    let config = sections::build(&mut reader, &root, overrides);
    rules::across(&mut reader, &config);
    rules::redis_client(&mut reader, &config);
    let problems = reader.into_problems();
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError { problems })
    }
}
