//! Keeping secrets out of output: passwords in URLs, and the effective configuration as
//! `check-config` prints it.

use serde_yaml::{Mapping, Value};

use super::duration::format_duration;
use super::scrub::{scrub, REDACTED};
use super::values::{name_of, LOG_FORMATS, MODES, ON_CHANGE, ON_EXIT, ON_LOST, READY_WHEN};
use super::{Config, ElectionConfig, ExecConfig, HealthCheckConfig, LoggingConfig};
use super::{HooksConfig, ProxyConfig, PublishConfig, RedisConfig, TlsConfig};

impl Config {
    /// The effective configuration as YAML, for `check-config`: every key present
    /// (defaults included), durations written as in the file, the password and any
    /// password inside a URL shown as `<redacted>`.
    pub fn to_redacted_yaml(&self) -> String {
        let doc = map(vec![
            ("name", text(&self.name)),
            ("identity", text(&self.identity)),
            ("redis", redis(&self.redis)),
            ("election", election(&self.election)),
            ("publish", publish(&self.publish)),
            ("exec", exec(&self.exec)),
            ("logging", logging(&self.logging)),
            ("hooks", hooks(&self.hooks)),
            ("proxy", proxy(&self.proxy)),
        ]);
        serde_yaml::to_string(&doc)
            .unwrap_or_else(|e| format!("# the configuration cannot be shown: {e}\n"))
    }
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in pairs {
        m.insert(Value::String(k.to_string()), v);
    }
    Value::Mapping(m)
}

fn text(s: &str) -> Value {
    Value::String(s.to_string())
}

fn url(s: &str) -> Value {
    Value::String(scrub(s))
}

fn opt<T>(value: Option<T>, f: impl FnOnce(T) -> Value) -> Value {
    value.map_or(Value::Null, f)
}

fn list(items: &[String], f: fn(&str) -> Value) -> Value {
    Value::Sequence(items.iter().map(|s| f(s)).collect())
}

fn dur(d: std::time::Duration) -> Value {
    Value::String(format_duration(d))
}

fn redis(r: &RedisConfig) -> Value {
    map(vec![
        ("mode", text(name_of(MODES, r.mode.name()))),
        ("url", opt(r.mode.url(), url)),
        ("urls", list(r.mode.urls(), url)),
        ("sentinels", list(r.mode.sentinels(), url)),
        ("master_name", opt(r.mode.master_name(), text)),
        ("username", opt(r.username.as_deref(), text)),
        ("password", opt(r.password.as_ref(), |_| text(REDACTED))),
        (
            "password_file",
            opt(r.password_file.as_ref(), |p| text(&p.to_string_lossy())),
        ),
        ("key_prefix", text(&r.key_prefix)),
        ("connect_timeout", dur(r.connect_timeout)),
        ("command_timeout", dur(r.command_timeout)),
        ("min_replicas_ack", Value::from(r.min_replicas_ack)),
        ("tls", opt(r.tls.as_ref(), tls)),
    ])
}

fn tls(t: &TlsConfig) -> Value {
    let path = |p: &std::path::PathBuf| text(&p.to_string_lossy());
    map(vec![
        ("ca_file", opt(t.ca_file.as_ref(), path)),
        ("cert_file", opt(t.cert_file.as_ref(), path)),
        ("key_file", opt(t.key_file.as_ref(), path)),
    ])
}

fn election(e: &ElectionConfig) -> Value {
    map(vec![
        ("lease_duration", dur(e.lease_duration)),
        ("renew_deadline", dur(e.renew_deadline)),
        ("retry_period", dur(e.retry_period)),
        ("jitter", Value::from(e.jitter)),
        ("release_on_shutdown", Value::Bool(e.release_on_shutdown)),
        ("on_lost", text(name_of(ON_LOST, e.on_lost))),
        ("health_check", opt(e.health_check.as_ref(), health_check)),
        ("priority", Value::from(e.priority)),
        ("preempt", Value::Bool(e.preempt)),
    ])
}

fn health_check(h: &HealthCheckConfig) -> Value {
    map(vec![
        ("http_get", opt(h.http_get.as_deref(), url)),
        ("command", list(&h.command, text)),
        ("period", dur(h.period)),
        ("timeout", dur(h.timeout)),
        ("failures", Value::from(h.failures)),
    ])
}

fn publish(p: &PublishConfig) -> Value {
    let addr = p.http_addr.map_or_else(String::new, |a| a.to_string());
    let file = p
        .leader_file
        .as_ref()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    map(vec![
        ("http_addr", text(&addr)),
        ("leader_file", text(&file)),
        ("ready_when", text(name_of(READY_WHEN, p.ready_when))),
        ("max_connections", Value::from(p.max_connections)),
        ("advertise", opt(p.advertise.as_deref(), text)),
    ])
}

fn exec(x: &ExecConfig) -> Value {
    map(vec![
        ("command", list(&x.command, text)),
        ("stop_signal", text(x.stop_signal.as_str())),
        ("grace_period", dur(x.grace_period)),
        ("on_exit", text(name_of(ON_EXIT, x.on_exit))),
    ])
}

fn logging(l: &LoggingConfig) -> Value {
    map(vec![
        ("format", text(name_of(LOG_FORMATS, l.format))),
        ("level", text(&l.level)),
    ])
}

fn hooks(h: &HooksConfig) -> Value {
    map(vec![
        ("on_acquired", list(&h.on_acquired, text)),
        ("on_stepped_down", list(&h.on_stepped_down, text)),
        ("on_leader_changed", list(&h.on_leader_changed, text)),
        ("timeout", dur(h.timeout)),
    ])
}

fn proxy(p: &ProxyConfig) -> Value {
    let listen = p.listen.map_or_else(String::new, |a| a.to_string());
    map(vec![
        ("listen", text(&listen)),
        ("upstream", text(p.upstream.as_deref().unwrap_or(""))),
        ("on_change", text(name_of(ON_CHANGE, p.on_change))),
        ("connect_timeout", dur(p.connect_timeout)),
        ("idle_timeout", dur(p.idle_timeout)),
        ("max_connections", Value::from(p.max_connections)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubs_passwords_in_urls() {
        assert_eq!(
            scrub("redis://u:p4ss@h:6379/0"),
            "redis://u:<redacted>@h:6379/0"
        );
        assert_eq!(scrub("redis://:p4ss@h"), "redis://:<redacted>@h");
        assert_eq!(
            scrub("x \"rediss://a:b@h\" and redis://c:d@e/1"),
            "x \"rediss://a:<redacted>@h\" and redis://c:<redacted>@e/1"
        );
        assert_eq!(scrub("redis://user@h:1"), "redis://user@h:1");
        assert_eq!(scrub("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(scrub("no url here"), "no url here");
        assert_eq!(scrub("redis://u:p@ss@h"), "redis://u:<redacted>@h");
        for secret in ["p\"w 0rd", "a/b", "a#b", "a?b", "a'b", "x@y/z"] {
            let shown = scrub(&format!(
                "\"redis://:{secret}@host:1/0\" is not a Redis URL"
            ));
            assert!(!shown.contains(secret), "{shown}");
            assert!(shown.contains("<redacted>@host:1/0"), "{shown}");
        }
    }
}
