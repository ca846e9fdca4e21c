//! Rules that tie several keys together. Each broken rule is one problem naming the rule
//! and the actual values. A rule is skipped when one of its values was itself rejected,
//! so a typo gives one problem, not a cascade.

use std::time::Duration;

use super::duration::format_duration as fmt;
use super::problems::Problems;
use super::{values, Config, ElectionConfig, HealthCheckConfig, ModeName, RedisConfig, TlsConfig};
use crate::connector::ConnectError;

/// `min_replicas_ack` > 0 needs replicas: Redlock's nodes are independent masters.
pub(super) fn replicas_ack(r: &mut Problems, mode: ModeName, min_replicas_ack: u32) {
    let keys = ["redis.mode", "redis.min_replicas_ack"];
    if r.all_valid(&keys) && mode == ModeName::Redlock && min_replicas_ack > 0 {
        let why = ConnectError::ReplicasWithRedlock(min_replicas_ack);
        r.problem("redis.min_replicas_ack", why.to_string());
    }
}

/// Which of `url`, `urls`, `sentinels` and `master_name` each mode needs and allows.
pub(super) fn redis_mode(r: &mut Problems, c: &RedisConfig, url_label: Option<&str>) {
    if !r.all_valid(&["redis.mode"]) {
        return;
    }
    let mode = values::name_of(c.mode);
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
fn mode_needs(r: &mut Problems, c: &RedisConfig) {
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

/// What the Redis client refuses when it is made from this configuration (a TLS file that
/// is not PEM, ...), found in the same pass as the rest. Skipped when a `redis` value was
/// already rejected: the client would refuse that value again, or one left at its default.
pub(super) fn redis_client(r: &mut Problems, c: &Config) {
    if !r.section_valid("redis") {
        return;
    }
    if let Err(why) = c.backend() {
        r.problem("redis", why.to_string());
    }
}

/// A client certificate needs its key, and the other way round.
pub(super) fn tls(r: &mut Problems, t: &TlsConfig) {
    let keys = ["redis.tls.cert_file", "redis.tls.key_file"];
    if r.all_valid(&keys) && t.cert_file.is_some() != t.key_file.is_some() {
        let (given, missing) = if t.cert_file.is_some() {
            ("cert_file", "key_file")
        } else {
            ("key_file", "cert_file")
        };
        let msg = format!(
            "redis.tls: {given} is set without {missing} (a client certificate needs both, or neither)"
        );
        r.problem("redis.tls", msg);
    }
}

/// `lease_duration > renew_deadline > retry_period * (1 + jitter)`.
pub(super) fn election(r: &mut Problems, e: &ElectionConfig) {
    let (lease, renew, retry) = (e.lease_duration, e.renew_deadline, e.retry_period);
    let keys = ["election.lease_duration", "election.renew_deadline"];
    if r.all_valid(&keys) && lease <= renew {
        let msg = format!(
            "election: lease_duration ({}) must be greater than renew_deadline ({})",
            fmt(lease),
            fmt(renew)
        );
        r.problem("election", msg);
    }
    let keys = [
        "election.renew_deadline",
        "election.retry_period",
        "election.jitter",
    ];
    let slowest = Duration::try_from_secs_f64(retry.as_secs_f64() * (1.0 + e.jitter)).ok();
    if let (true, Some(slowest)) = (r.all_valid(&keys), slowest) {
        if renew <= slowest {
            let msg = format!(
                "election: renew_deadline ({}) must be greater than retry_period * (1 + jitter) ({} * {} = {})",
                fmt(renew),
                fmt(retry),
                1.0 + e.jitter,
                fmt(slowest)
            );
            r.problem("election", msg);
        }
    }
}

/// `timeout < period`: a check must end before the next one starts.
pub(super) fn health_check(r: &mut Problems, h: &HealthCheckConfig) {
    let keys = [
        "election.health_check.timeout",
        "election.health_check.period",
    ];
    if r.all_valid(&keys) && h.timeout >= h.period {
        let msg = format!(
            "election.health_check: timeout ({}) must be less than period ({})",
            fmt(h.timeout),
            fmt(h.period)
        );
        r.problem("election.health_check", msg);
    }
    if h.http_get.is_some() && !h.command.is_empty() {
        let msg = "election.health_check: set either http_get or command, not both".to_string();
        r.problem("election.health_check", msg);
    }
}

/// Rules between sections: `command_timeout < retry_period`, and in exec mode
/// `grace_period < lease_duration - renew_deadline`.
pub(super) fn across(r: &mut Problems, c: &Config) {
    let e = &c.election;
    let keys = ["redis.command_timeout", "election.retry_period"];
    if r.all_valid(&keys) && c.redis.command_timeout >= e.retry_period {
        let msg = format!(
            "redis.command_timeout ({}) must be less than election.retry_period ({})",
            fmt(c.redis.command_timeout),
            fmt(e.retry_period)
        );
        r.problem("redis.command_timeout", msg);
    }
    if !c.exec.command.is_empty() {
        exec_grace(r, c);
    }
    shards(r, c);
}

/// A sharded election (README, "Shards") has no one leader to proxy to.
fn shards(r: &mut Problems, c: &Config) {
    let n = c.election.shards;
    if n == 0 || !r.all_valid(&["election.shards"]) {
        return;
    }
    if c.proxy.listen.is_some() && r.all_valid(&["proxy.listen"]) {
        let msg = format!("proxy.listen: not allowed with election.shards ({n}): the proxy is not shard-aware (leave proxy.listen out, or set election.shards to 0)");
        r.problem("proxy.listen", msg);
    }
}

/// The child must be stopped before a lease that was not renewed can pass to another replica.
fn exec_grace(r: &mut Problems, c: &Config) {
    let e = &c.election;
    let keys = [
        "exec.grace_period",
        "election.lease_duration",
        "election.renew_deadline",
    ];
    let margin = e
        .lease_duration
        .checked_sub(e.renew_deadline)
        .filter(|m| !m.is_zero());
    if let (true, Some(margin)) = (r.all_valid(&keys), margin) {
        if c.exec.grace_period >= margin {
            let msg = format!(
                "exec.grace_period ({}) must be less than election.lease_duration - election.renew_deadline ({} - {} = {})",
                fmt(c.exec.grace_period),
                fmt(e.lease_duration),
                fmt(e.renew_deadline),
                fmt(margin)
            );
            r.problem("exec.grace_period", msg);
        }
    }
}
