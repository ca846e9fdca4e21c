//! The configuration layer: `config.yaml`, `LEADERD_*` variables and command-line flags
//! merged into one validated [`Config`], with every problem reported at once.
//!
//! Precedence is flag > environment > file > default. In the file, `${VAR}` in any string
//! value is replaced from the environment and `$${` stands for a literal `${`.
//!
//! Reading is serde's: the structs below derive `Deserialize` (`read.rs` walks the document
//! and records each refused value instead of stopping), then one pass (`check.rs`) applies
//! what no single value can say and the rules between keys.
//!
//! Adding a key: its field, doc and default in the section's struct below, with the reader
//! of its value (`deserialize_with`, from `leaf.rs`) and, for a duration or a secret, its
//! printer (`serialize_with`, from `redact.rs`); the allowed keys of the file and the printed
//! configuration follow from the struct. A key with a flag also gets its field in [`Overrides`] and its
//! line in [`Overrides::layered`].

mod aliases;
mod check;
mod duration;
mod expand;
mod keys;
mod layer;
mod leaf;
mod problems;
mod programs;
mod read;
mod redact;
mod rules;
mod scrub;
mod spec;
mod values;
mod yaml;
pub(crate) use duration::{format_duration, parse_duration};
pub(crate) use programs::group_writable_warnings;

#[cfg(test)]
mod tests;

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};

/// The config structs, their fields written `pub field: Type = default,`: each struct, read
/// and printed by serde (a key left out is its default), and its `Default` from those values
/// (a new key is one field, its doc and its default).
macro_rules! with_defaults {
    ($($(#[$meta:meta])* pub struct $name:ident {
        $($(#[$fmeta:meta])* pub $field:ident: $ty:ty = $default:expr,)*
    })*) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(default)]
        pub(crate) struct $name { $($(#[$fmeta])* pub(crate) $field: $ty,)* }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $default,)* }
            }
        }
    )*};
}

with_defaults! {
/// Everything `leaderd` needs to run one election, validated as a whole.
pub struct Config {
    /// The election name, shared by all replicas; part of every Redis key.
    #[serde(deserialize_with = "leaf::name")]
    pub name: String = String::new(),
    /// This replica's identity, published as the holder; must differ between replicas.
    #[serde(deserialize_with = "leaf::identity")]
    pub identity: String = String::new(),
    /// Section `redis`: where the lease lives.
    pub redis: RedisConfig = RedisConfig::default(),
    /// Section `election`: lease timing and campaigning.
    pub election: ElectionConfig = ElectionConfig::default(),
    /// Section `publish`: the HTTP server and the leader file.
    pub publish: PublishConfig = PublishConfig::default(),
    /// Section `exec`: the command run only while leading.
    pub exec: ExecConfig = ExecConfig::default(),
    /// Section `logging`.
    pub logging: LoggingConfig = LoggingConfig::default(),
    /// Section `hooks`: commands run when leadership changes.
    pub hooks: HooksConfig = HooksConfig::default(),
    /// Section `proxy`: the leader-aware TCP proxy.
    pub proxy: ProxyConfig = ProxyConfig::default(),
}

/// Where and how to reach Redis.
pub struct RedisConfig {
    /// How Redis is deployed (default single); each mode reads its own address keys below.
    #[serde(deserialize_with = "leaf::choice")]
    pub mode: ModeName = ModeName::Single,
    /// Mode single: the server (after the check, `redis://127.0.0.1:6379/0` when not given).
    #[serde(serialize_with = "redact::url", deserialize_with = "leaf::redis_url")]
    pub url: Option<String> = None,
    /// Modes redlock (an odd number >= 3 of independent servers) and cluster (seed nodes).
    #[serde(serialize_with = "redact::urls", deserialize_with = "leaf::redis_urls")]
    pub urls: Vec<String> = Vec::new(),
    /// Mode sentinel: the Sentinels' URLs.
    #[serde(serialize_with = "redact::urls", deserialize_with = "leaf::redis_urls")]
    pub sentinels: Vec<String> = Vec::new(),
    /// Mode sentinel: the name of the monitored master.
    #[serde(deserialize_with = "leaf::some_text")]
    pub master_name: Option<String> = None,
    /// The Redis ACL user.
    #[serde(deserialize_with = "leaf::some_text")]
    pub username: Option<String> = None,
    /// `LEADERD_REDIS_PASSWORD` if set and not empty, else the contents of `password_file`
    /// with the trailing newline removed.
    #[serde(serialize_with = "redact::secret", skip_deserializing)]
    pub password: Option<Secret> = None,
    /// A file holding the password (read only when `LEADERD_REDIS_PASSWORD` is not set).
    #[serde(deserialize_with = "leaf::path")]
    pub password_file: Option<PathBuf> = None,
    /// Prepended to every key (default `leaderd:`).
    #[serde(deserialize_with = "leaf::text_value")]
    pub key_prefix: String = "leaderd:".into(),
    /// Limit on establishing a connection (default 1s).
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::positive_duration")]
    pub connect_timeout: Duration = Duration::from_secs(1),
    /// Limit on one command's round trip (default 500ms); less than `retry_period`.
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::positive_duration")]
    pub command_timeout: Duration = Duration::from_millis(500),
    /// When > 0, an acquire or renew counts only after that many replicas acknowledged it.
    #[serde(deserialize_with = "leaf::whole")]
    pub min_replicas_ack: u32 = 0,
    /// `redis.tls` (optional, beyond `rediss://` alone): the files for `rediss://`
    /// connections. None: the system's CA roots, no client certificate.
    pub tls: Option<TlsConfig> = None,
}

/// Files for TLS connections (`rediss://`). Paths only: the contents are read when the
/// client is made, and never printed.
pub struct TlsConfig {
    /// PEM CA bundle to verify the servers with, instead of the system's roots.
    #[serde(deserialize_with = "leaf::path")]
    pub ca_file: Option<PathBuf> = None,
    /// PEM client certificate (with `key_file`), for servers that ask for one.
    #[serde(deserialize_with = "leaf::path")]
    pub cert_file: Option<PathBuf> = None,
    /// PEM private key of `cert_file`.
    #[serde(deserialize_with = "leaf::path")]
    pub key_file: Option<PathBuf> = None,
}

/// Timing of the lease and of campaigning.
pub struct ElectionConfig {
    /// TTL of the lease in Redis.
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::positive_duration")]
    pub lease_duration: Duration = Duration::from_secs(15),
    /// A leader that has not renewed within this steps down.
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::positive_duration")]
    pub renew_deadline: Duration = Duration::from_secs(10),
    /// Renew interval of the leader, poll interval of the others.
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::positive_duration")]
    pub retry_period: Duration = Duration::from_secs(2),
    /// Followers wait `retry_period * (1 + U(0, jitter))`; `0 <= jitter <= 1`.
    #[serde(deserialize_with = "leaf::jitter")]
    pub jitter: f64 = 0.2,
    /// Release the lease on a clean shutdown (default true).
    #[serde(deserialize_with = "leaf::boolean")]
    pub release_on_shutdown: bool = true,
    /// What to do after losing a term (default contend).
    #[serde(deserialize_with = "leaf::choice")]
    pub on_lost: OnLost = OnLost::Contend,
    /// Set only when `http_get` or a `command` is configured.
    pub health_check: Option<HealthCheckConfig> = None,
    /// Preference as a successor, 0..=1000 (higher first; default 0).
    #[serde(deserialize_with = "leaf::priority")]
    pub priority: u32 = 0,
    /// Hand over to a healthier, higher-priority candidate (default false).
    #[serde(deserialize_with = "leaf::boolean")]
    pub preempt: bool = false,
    /// 0: one lease; 1..=4096: that many shards, each a lease (README, "Shards").
    #[serde(deserialize_with = "leaf::shards")]
    pub shards: u32 = 0,
    /// The most shards one replica owns (0: no bound but balance).
    #[serde(deserialize_with = "leaf::whole")]
    pub max_shards_per_replica: u32 = 0,
}

/// Lead only while the local service is healthy.
pub struct HealthCheckConfig {
    /// An `http://` URL, healthy when it answers 2xx.
    #[serde(serialize_with = "redact::url", deserialize_with = "leaf::http_url")]
    pub http_get: Option<String> = None,
    /// A command, healthy when it exits 0 (run directly, not through a shell).
    #[serde(deserialize_with = "leaf::list")]
    pub command: Vec<String> = Vec::new(),
    /// Time between checks (default 2s).
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::positive_duration")]
    pub period: Duration = Duration::from_secs(2),
    /// Limit on one check (default 1s); less than `period`.
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::positive_duration")]
    pub timeout: Duration = Duration::from_secs(1),
    /// Consecutive failures before yielding or not contending (>= 1).
    #[serde(deserialize_with = "leaf::at_least_one")]
    pub failures: u32 = 3,
}

/// Where the status is published.
pub struct PublishConfig {
    /// None: no HTTP server (the empty string in the file, a flag or the environment).
    #[serde(serialize_with = "redact::or_off", deserialize_with = "leaf::http_addr")]
    pub http_addr: Option<SocketAddr> = Some(SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 9090))),
    /// None: no leader file (the empty string).
    #[serde(serialize_with = "redact::or_off", deserialize_with = "leaf::leader_file")]
    pub leader_file: Option<PathBuf> = Some(PathBuf::from("/var/run/leaderd/leader.json")),
    /// When `/readyz` answers 200 (default leader).
    #[serde(deserialize_with = "leaf::choice")]
    pub ready_when: ReadyWhen = ReadyWhen::Leader,
    /// Open HTTP connections (event streams included) past which a new one is closed at once
    /// (default 1024, 1-65535).
    #[serde(deserialize_with = "leaf::connections")]
    pub max_connections: u32 = 1024,
    /// `host:port` where the other replicas reach this replica's service (None: unset).
    #[serde(deserialize_with = "leaf::host_port")]
    pub advertise: Option<String> = None,
}

/// Commands run (directly, one at a time) when leadership changes; empty: none.
pub struct HooksConfig {
    /// Run after this replica began a term.
    #[serde(deserialize_with = "leaf::list")]
    pub on_acquired: Vec<String> = Vec::new(),
    /// Run after this replica's term ended (its claim is over).
    #[serde(deserialize_with = "leaf::list")]
    pub on_stepped_down: Vec<String> = Vec::new(),
    /// Run when this replica sees another leader, or none.
    #[serde(deserialize_with = "leaf::list")]
    pub on_leader_changed: Vec<String> = Vec::new(),
    /// A hook still running then is SIGKILLed with its process group (default 10s).
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::positive_duration")]
    pub timeout: Duration = Duration::from_secs(10),
}

/// The leader-aware proxy; `listen` None: no proxy.
pub struct ProxyConfig {
    /// Where to accept connections (the empty string: no proxy).
    #[serde(serialize_with = "redact::or_off", deserialize_with = "leaf::listen_addr")]
    pub listen: Option<SocketAddr> = None,
    /// This replica's own service, `host:port` (default `127.0.0.1:8080`).
    #[serde(serialize_with = "redact::or_off", deserialize_with = "leaf::host_port")]
    pub upstream: Option<String> = Some("127.0.0.1:8080".into()),
    /// What happens to connections of a deposed leader (default close).
    #[serde(deserialize_with = "leaf::choice")]
    pub on_change: OnChange = OnChange::Close,
    /// How long a new connection waits for a leader (default 2s).
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::positive_duration")]
    pub connect_timeout: Duration = Duration::from_secs(2),
    /// A connection with no bytes either way for this long is closed (default 1h; zero:
    /// never).
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::duration")]
    pub idle_timeout: Duration = Duration::from_secs(3600),
    /// Connections past this many are closed at once and counted as refused (default 10000).
    #[serde(deserialize_with = "leaf::at_least_one")]
    pub max_connections: u32 = 10_000,
}

/// The command run only while leading; empty `command` means no exec mode.
pub struct ExecConfig {
    /// The program and its arguments, run directly (not through a shell).
    #[serde(deserialize_with = "leaf::list")]
    pub command: Vec<String> = Vec::new(),
    /// Sent to the child's process group on stepping down (default SIGTERM).
    #[serde(serialize_with = "redact::signal", deserialize_with = "leaf::signal")]
    pub stop_signal: nix::sys::signal::Signal = nix::sys::signal::Signal::SIGTERM,
    /// Time between `stop_signal` and SIGKILL (default 3s); less than
    /// `lease_duration - renew_deadline` in exec mode.
    #[serde(serialize_with = "redact::duration", deserialize_with = "leaf::duration")]
    pub grace_period: Duration = Duration::from_secs(3),
    /// What to do when the child exits while leading (default release).
    #[serde(deserialize_with = "leaf::choice")]
    pub on_exit: OnExit = OnExit::Release,
}

/// How to log.
pub struct LoggingConfig {
    /// Text or JSON lines (default text).
    #[serde(deserialize_with = "leaf::choice")]
    pub format: LogFormat = LogFormat::Text,
    /// One of trace, debug, info, warn, error (lowercase).
    #[serde(deserialize_with = "leaf::log_level")]
    pub level: String = "info".into(),
}
}

/// The value of `redis.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ModeName {
    /// One server (`redis.url`).
    #[default]
    Single,
    /// A master found through the Sentinels (`redis.sentinels`, `redis.master_name`).
    Sentinel,
    /// Independent servers (an odd number >= 3 of `redis.urls`); a majority holds the lease.
    Redlock,
    /// A Redis Cluster, reached through seed nodes (`redis.urls`).
    Cluster,
}

/// A password: kept out of `Debug` output, logs and the printed configuration (the
/// library's type, handed to the connector as it is).
pub(crate) use crate::connector::Secret;

/// What a replica does after losing a term for a reason other than shutdown or yield.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnLost {
    /// Campaign again after `retry_period`.
    #[default]
    Contend,
    /// Exit with code 1, for services that want a restart.
    Exit,
}

/// When `/readyz` answers 200.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ReadyWhen {
    /// Only while leader with a valid lease.
    #[default]
    Leader,
    /// Once started.
    Always,
}

/// What happens to the proxied connections of a deposed leader.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnChange {
    /// Close them when this replica learns of the change.
    #[default]
    Close,
    /// Leave them open.
    Keep,
}

/// What happens when the child exits while this replica leads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnExit {
    /// Release the lease and contend again after `retry_period`.
    #[default]
    Release,
    /// Release and exit with the child's code.
    Exit,
}

/// The log line format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, with an `event` field on leadership changes.
    Json,
}

/// Values given on the command line (the flags every subcommand shares); None = not given.
/// They win over the environment and the file.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct Overrides {
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

/// A key a flag sets: the dotted key, the flag, its `LEADERD_*` variable, the value given.
type Layered<'o> = (
    &'static str,
    &'static str,
    Option<&'static str>,
    &'o Option<String>,
);

impl Overrides {
    /// The keys that flags (and variables) set, over the file's values.
    #[rustfmt::skip]
    fn layered(&self) -> [Layered<'_>; 10] {
        [
            ("name", "--name", Some("LEADERD_NAME"), &self.name),
            ("identity", "--identity", Some("LEADERD_IDENTITY"), &self.identity),
            ("redis.url", "--redis-url", Some("LEADERD_REDIS_URL"), &self.redis_url),
            ("election.lease_duration", "--lease-duration", None, &self.lease_duration),
            ("election.renew_deadline", "--renew-deadline", None, &self.renew_deadline),
            ("election.retry_period", "--retry-period", None, &self.retry_period),
            ("publish.http_addr", "--http-addr", Some("LEADERD_HTTP_ADDR"), &self.http_addr),
            ("publish.leader_file", "--leader-file", Some("LEADERD_LEADER_FILE"), &self.leader_file),
            ("logging.format", "--log-format", Some("LEADERD_LOG_FORMAT"), &self.log_format),
            ("logging.level", "--log-level", Some("LEADERD_LOG_LEVEL"), &self.log_level),
        ]
    }
}

/// Every problem found in a configuration, each one line naming the key or flag, the bad
/// value and what is allowed; `Display` prints them one per line.
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.join("\n"))]
pub(crate) struct ConfigError {
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
pub(crate) type EnvLookup<'e> = &'e dyn Fn(&str) -> Result<String, std::env::VarError>;

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
pub(crate) fn load(overrides: &Overrides, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
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
pub(crate) fn load_from_str(
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
pub(crate) fn check_identity(identity: &str) -> Result<(), values::ValueError> {
    values::identity(identity).map(drop)
}

/// The largest config file read (a leaderd config is a few kilobytes).
pub(crate) const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

fn from_text(
    text: &str,
    origin: &str,
    overrides: &Overrides,
    env: EnvLookup<'_>,
) -> Result<Config, ConfigError> {
    let mut doc = yaml::parse(text, origin)?;
    let mut problems = problems::Problems::default();
    layer::layer(&mut doc, overrides, env, &mut problems);
    let (mut config, mut problems) = read::document(&doc, problems);
    check::all(&mut config, &doc, overrides, env, &mut problems);
    let problems = problems.into_lines();
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError { problems })
    }
}
