//! Reading each section of the file, with flags and `LEADERD_*` variables layered on top,
//! into the typed configuration (the defaults are written next to the fields in `config.rs`).

use std::path::Path;
use std::time::Duration;

use super::addrs::RedisAddrs;
use super::tree::{Node, Reader};
use super::values::{self as v, choice};
use super::TlsConfig;
use super::{Config, ElectionConfig, ExecConfig, HealthCheckConfig, LoggingConfig};
use super::{ModeName, Overrides, PublishConfig};
use super::{RedisConfig, Secret};

const PASSWORD_VAR: &str = "LEADERD_REDIS_PASSWORD";

/// Reads the whole configuration; problems go to `r`, rejected values get defaults.
pub(super) fn build(r: &mut Reader<'_>, root: &Node<'_>, o: &Overrides) -> Config {
    Config {
        name: name(r, root, o),
        identity: identity(r, root, o),
        redis: redis(r, root, o),
        election: election(r, root, o),
        publish: publish(r, root, o),
        exec: exec(r, root, o),
        logging: logging(r, root, o),
        hooks: super::outputs::hooks(r, root, o.check_programs),
        proxy: super::outputs::proxy(r, root),
    }
}

fn name(r: &mut Reader<'_>, root: &Node<'_>, o: &Overrides) -> String {
    let input = r.layered(root, "name", Some("LEADERD_NAME"), ("--name", &o.name));
    let given = input.is_some();
    let name = r.get(input, v::name);
    if !given {
        let msg = "name: missing; it is required (allowed: 1-200 characters of [A-Za-z0-9._-]; \
                   set it in the file, with --name or with LEADERD_NAME)";
        r.problem("name", msg.to_string());
    }
    name.unwrap_or_default()
}

fn identity(r: &mut Reader<'_>, root: &Node<'_>, o: &Overrides) -> String {
    let input = r.layered(
        root,
        "identity",
        Some("LEADERD_IDENTITY"),
        ("--identity", &o.identity),
    );
    if input.is_some() {
        return r.get(input, v::identity).unwrap_or_default();
    }
    let host = nix::unistd::gethostname()
        .map_err(|e| e.to_string())
        .and_then(|h| {
            h.into_string()
                .map_err(|_| "it is not valid UTF-8".to_string())
        })
        .and_then(|h| v::identity(&h).map_err(|e| e.to_string()));
    host.unwrap_or_else(|why| {
        let msg = format!("identity: not set, and the host name cannot be used ({why}); set identity, --identity or LEADERD_IDENTITY");
        r.problem("identity", msg);
        String::new()
    })
}

fn redis(r: &mut Reader<'_>, root: &Node<'_>, o: &Overrides) -> RedisConfig {
    let n = r.section(root, "redis");
    let d = RedisConfig::default();
    let mode = r.get(r.file(&n, "mode"), choice);
    let url_input = r.layered(
        &n,
        "url",
        Some("LEADERD_REDIS_URL"),
        ("--redis-url", &o.redis_url),
    );
    let url_label = url_input.as_ref().map(|i| i.label().to_string());
    let addrs = RedisAddrs {
        mode: mode.unwrap_or(ModeName::Single),
        url: r.get(url_input, v::redis_url),
        urls: url_list(r, &n, "urls"),
        sentinels: url_list(r, &n, "sentinels"),
        master_name: r.get(r.file(&n, "master_name"), non_empty),
    };
    super::rules::redis_mode(r, &addrs, url_label.as_deref());
    let password_file = r.get(r.file(&n, "password_file"), v::path);
    let min_replicas_ack = r
        .get(r.file(&n, "min_replicas_ack"), v::count(0))
        .unwrap_or(0);
    super::rules::replicas_ack(r, addrs.mode, min_replicas_ack);
    RedisConfig {
        mode: addrs.into_mode(),
        username: r.get(r.file(&n, "username"), non_empty),
        password: password(r, password_file.as_deref()),
        password_file,
        key_prefix: r.or(&n, "key_prefix", |s| Ok(s.to_string()), d.key_prefix),
        connect_timeout: r.or(
            &n,
            "connect_timeout",
            v::positive_duration,
            d.connect_timeout,
        ),
        command_timeout: r.or(
            &n,
            "command_timeout",
            v::positive_duration,
            d.command_timeout,
        ),
        min_replicas_ack,
        tls: tls(r, &n),
    }
}

/// `redis.tls`, or None when none of its files is set. Each file must be readable.
fn tls(r: &mut Reader<'_>, parent: &Node<'_>) -> Option<TlsConfig> {
    let n = r.section(parent, "tls");
    let mut file = |leaf: &str| {
        let path = r.get(r.file(&n, leaf), v::path)?;
        let key = n.key(leaf);
        match std::fs::File::open(&path) {
            Ok(_) => Some(path),
            Err(e) => {
                r.problem(&key, format!("{key}: cannot read {path:?}: {e}"));
                None
            }
        }
    };
    let cfg = TlsConfig {
        ca_file: file("ca_file"),
        cert_file: file("cert_file"),
        key_file: file("key_file"),
    };
    super::rules::tls(r, &cfg);
    (cfg != TlsConfig::default()).then_some(cfg)
}

/// A list of Redis URLs, each one checked.
fn url_list(r: &mut Reader<'_>, n: &Node<'_>, leaf: &str) -> Vec<String> {
    let key = n.key(leaf);
    let urls = r.list(r.file(n, leaf)).unwrap_or_default();
    for (i, url) in urls.iter().enumerate() {
        if let Err(why) = v::redis_url(url) {
            let item = format!("{key}[{i}]");
            r.problem(&item, format!("{item}: {why}"));
        }
    }
    urls
}

fn non_empty(s: &str) -> Result<String, super::refused::ValueError> {
    if s.is_empty() {
        Err(super::refused::ValueError::not_allowed(
            s,
            "write a value, or leave the key out",
        ))
    } else {
        Ok(s.to_string())
    }
}

/// `LEADERD_REDIS_PASSWORD` when set and not empty, else the contents of the password file.
fn password(r: &mut Reader<'_>, file: Option<&Path>) -> Option<Secret> {
    match r.env_var(PASSWORD_VAR) {
        Ok(p) if !p.is_empty() => return Some(Secret::new(p)),
        Err(std::env::VarError::NotUnicode(_)) => {
            r.problem("redis.password", super::not_utf8(PASSWORD_VAR));
            return None;
        }
        _ => {}
    }
    let path = file?;
    let key = "redis.password_file";
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim_end_matches(['\r', '\n']).is_empty() => {
            r.problem(
                key,
                format!(
                    "{key}: {path:?} is empty (write the password into it, or leave the key out)"
                ),
            );
            None
        }
        Ok(text) => Some(Secret::new(text.trim_end_matches(['\r', '\n']))),
        Err(e) => {
            r.problem(key, format!("{key}: cannot read {path:?}: {e}"));
            None
        }
    }
}

/// A duration > 0 that a flag may also set.
fn flagged(
    r: &mut Reader<'_>,
    n: &Node<'_>,
    leaf: &str,
    flag: (&str, &Option<String>),
    default: Duration,
) -> Duration {
    r.get(r.layered(n, leaf, None, flag), v::positive_duration)
        .unwrap_or(default)
}

fn election(r: &mut Reader<'_>, root: &Node<'_>, o: &Overrides) -> ElectionConfig {
    let n = r.section(root, "election");
    let d = ElectionConfig::default();
    let cfg = ElectionConfig {
        lease_duration: flagged(
            r,
            &n,
            "lease_duration",
            ("--lease-duration", &o.lease_duration),
            d.lease_duration,
        ),
        renew_deadline: flagged(
            r,
            &n,
            "renew_deadline",
            ("--renew-deadline", &o.renew_deadline),
            d.renew_deadline,
        ),
        retry_period: flagged(
            r,
            &n,
            "retry_period",
            ("--retry-period", &o.retry_period),
            d.retry_period,
        ),
        jitter: r.or(&n, "jitter", v::jitter, d.jitter),
        release_on_shutdown: r.or(&n, "release_on_shutdown", v::boolean, d.release_on_shutdown),
        on_lost: r.or(&n, "on_lost", choice, d.on_lost),
        health_check: health_check(r, &n, o.check_programs),
        priority: r.or(&n, "priority", v::priority, d.priority),
        preempt: r.or(&n, "preempt", v::boolean, d.preempt),
    };
    super::rules::election(r, &cfg);
    cfg
}

/// The health check, or None when neither `http_get` nor a `command` is set.
/// `on_this_host`: also refuse a command whose program any user may change (a program that
/// cannot be found is a failing check, not a mistake in the file).
fn health_check(
    r: &mut Reader<'_>,
    parent: &Node<'_>,
    on_this_host: bool,
) -> Option<HealthCheckConfig> {
    let n = r.section(parent, "health_check");
    let d = HealthCheckConfig::default();
    let cfg = HealthCheckConfig {
        http_get: r.get(r.file(&n, "http_get"), v::http_url),
        command: r.list(r.file(&n, "command")).unwrap_or_default(),
        period: r.or(&n, "period", v::positive_duration, d.period),
        timeout: r.or(&n, "timeout", v::positive_duration, d.timeout),
        failures: r.or(&n, "failures", v::count(1), d.failures),
    };
    super::rules::health_check(r, &cfg);
    let program = cfg
        .command
        .first()
        .filter(|p| on_this_host && !p.is_empty());
    let path_var = r.env("PATH").unwrap_or_default();
    if let Some(path) = program.and_then(|p| super::programs::find_program(p, &path_var).ok()) {
        let key = "election.health_check.command";
        super::outputs::refuse_writable(r, key, &format!("{key}[0]"), &path);
    }
    (cfg.http_get.is_some() || !cfg.command.is_empty()).then_some(cfg)
}

fn publish(r: &mut Reader<'_>, root: &Node<'_>, o: &Overrides) -> PublishConfig {
    let n = r.section(root, "publish");
    let addr = r.layered(
        &n,
        "http_addr",
        Some("LEADERD_HTTP_ADDR"),
        ("--http-addr", &o.http_addr),
    );
    let file = r.layered(
        &n,
        "leader_file",
        Some("LEADERD_LEADER_FILE"),
        ("--leader-file", &o.leader_file),
    );
    let d = PublishConfig::default();
    PublishConfig {
        http_addr: r.get(addr, v::http_addr).unwrap_or(d.http_addr),
        leader_file: r.get(file, v::leader_file).unwrap_or(d.leader_file),
        ready_when: r.or(&n, "ready_when", choice, d.ready_when),
        max_connections: r.or(&n, "max_connections", v::connections, d.max_connections),
        advertise: r.get(r.file(&n, "advertise"), v::host_port).flatten(),
    }
}

fn exec(r: &mut Reader<'_>, root: &Node<'_>, o: &Overrides) -> ExecConfig {
    let n = r.section(root, "exec");
    let d = ExecConfig::default();
    let from_file = r.list(r.file(&n, "command")).unwrap_or_default();
    let (command, label) = if o.exec_command.is_empty() {
        (from_file, "exec.command[0]")
    } else {
        (o.exec_command.clone(), "exec.command[0] (run -- COMMAND)")
    };
    super::outputs::check_program(r, "exec.command", label, &command, o.check_programs);
    ExecConfig {
        command,
        stop_signal: r.or(&n, "stop_signal", v::signal, d.stop_signal),
        grace_period: r.or(&n, "grace_period", v::duration, d.grace_period),
        on_exit: r.or(&n, "on_exit", choice, d.on_exit),
    }
}

fn logging(r: &mut Reader<'_>, root: &Node<'_>, o: &Overrides) -> LoggingConfig {
    let n = r.section(root, "logging");
    let d = LoggingConfig::default();
    let format = r.layered(
        &n,
        "format",
        Some("LEADERD_LOG_FORMAT"),
        ("--log-format", &o.log_format),
    );
    let level = r.layered(
        &n,
        "level",
        Some("LEADERD_LOG_LEVEL"),
        ("--log-level", &o.log_level),
    );
    LoggingConfig {
        format: r.get(format, choice).unwrap_or(d.format),
        level: r.get(level, v::log_level).unwrap_or(d.level),
    }
}
