//! Tests of the checks: single values, unknown keys, Redis modes and the rules between keys,
//! each problem named and all of them collected.

use super::{env_of, no_env, ok, one_problem, problems, problems_with};
use crate::daemon::config::Overrides;

#[test]
fn name_is_required_and_checked() {
    one_problem(
        "identity: a",
        &["name: missing", "required", "[A-Za-z0-9._-]"],
    );
    one_problem("name: ''", &["name: \"\" is not a valid name", "1-200"]);
    one_problem("name: a/b", &["name: \"a/b\"", "[A-Za-z0-9._-]"]);
    one_problem(
        "name: x\nidentity: ''",
        &["identity: \"\"", "must not be empty"],
    );
    one_problem(
        "name: x\nidentity: \"a\\nb\"",
        &["identity:", "control characters"],
    );
}

#[test]
fn each_rule_is_named_with_its_values() {
    one_problem(
        "name: x\nelection: {lease_duration: 2s, renew_deadline: 3s, retry_period: 1s, jitter: 0}",
        &["election: lease_duration (2s) must be greater than renew_deadline (3s)"],
    );
    one_problem(
        "name: x\nelection: {renew_deadline: 2400ms}",
        &["election: renew_deadline (2s400ms) must be greater than retry_period * (1 + jitter) (2s * 1.2 = 2s400ms)"],
    );
    one_problem(
        "name: x\nredis: {command_timeout: 2s}",
        &["redis.command_timeout (2s) must be less than election.retry_period (2s)"],
    );
    one_problem(
        "name: x\nelection: {jitter: 1.5}",
        &[
            "election.jitter: \"1.5\" is not a number between 0 and 1",
            "0 <= jitter <= 1",
        ],
    );
    one_problem(
        "name: x\nelection: {jitter: abc}",
        &["election.jitter: \"abc\" is not a number between 0 and 1"],
    );
    one_problem(
        "name: x\nexec: {command: [sleep, '1'], grace_period: 5s}",
        &["exec.grace_period (5s) must be less than election.lease_duration - election.renew_deadline (15s - 10s = 5s)"],
    );
    one_problem(
        "name: x\nredis: {mode: redlock, urls: [redis://a, redis://b]}",
        &["redis.urls: mode redlock needs an odd number >= 3 of urls (got 2)"],
    );
    one_problem(
        "name: x\nelection: {health_check: {http_get: 'http://127.0.0.1:8080/health', period: 1s, timeout: 1s}}",
        &["election.health_check: timeout (1s) must be less than period (1s)"],
    );
    one_problem(
        "name: x\nelection: {health_check: {command: ['true'], failures: 0}}",
        &["election.health_check.failures: \"0\"", ">= 1"],
    );
}

#[test]
fn grace_rule_applies_only_in_exec_mode() {
    ok("name: x\nexec: {grace_period: 1m}");
    let o = Overrides {
        exec_command: vec!["sleep".into(), "9".into()],
        ..Default::default()
    };
    let found = problems_with("name: x\nexec: {grace_period: 1m}", &o, &no_env);
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("exec.grace_period (1m)"), "{found:?}");
}

#[test]
fn redis_modes_need_their_addresses() {
    one_problem(
        "name: x\nredis: {mode: sentinel, master_name: m}",
        &["redis.sentinels: mode sentinel needs"],
    );
    one_problem(
        "name: x\nredis: {mode: sentinel, sentinels: [redis://s:26379]}",
        &["redis.master_name"],
    );
    one_problem(
        "name: x\nredis: {mode: cluster}",
        &["redis.urls: mode cluster needs"],
    );
    one_problem(
        "name: x\nredis: {mode: redlock, urls: [redis://a, redis://b, redis://c, redis://d]}",
        &["(got 4)"],
    );
    one_problem(
        "name: x\nredis: {mode: cluster, url: redis://a, urls: [redis://b]}",
        &["redis.url: only mode single"],
    );
    one_problem(
        "name: x\nredis: {urls: [redis://b]}",
        &["redis.urls: only modes redlock and cluster"],
    );
    one_problem(
        "name: x\nredis: {mode: master}",
        &[
            "redis.mode: \"master\" is not allowed",
            "single, sentinel, redlock, cluster",
        ],
    );
    one_problem(
        "name: x\nredis: {url: 'http://h:6379'}",
        &["redis.url: \"http://h:6379\" is not a Redis URL"],
    );
    one_problem(
        "name: x\nredis: {mode: cluster, urls: [redis://a, 'b:1']}",
        &["redis.urls[1]: \"b:1\" is not a Redis URL"],
    );
    let c = ok("name: x\nredis: {mode: redlock, urls: [redis://a, redis://b, redis://c]}");
    assert_eq!((c.redis.url.as_deref(), c.redis.urls.len()), (None, 3));
}

#[test]
fn a_bad_mode_does_not_cascade() {
    one_problem(
        "name: x\nredis: {mode: redlok, urls: [redis://a, redis://b, redis://c]}",
        &["redis.mode: \"redlok\" is not allowed"],
    );
}

#[test]
fn all_problems_are_collected_at_once() {
    let found = problems(
        "name: 'bad name'\nredis: {mode: nope, connect_timeout: 0s, bogus: 1}\n\
         election: {lease_duration: fast, jitter: 2, lease_duraton: 1s}\n\
         publish: {http_addr: 'nowhere', ready_when: sometimes}\n\
         exec: {stop_signal: SIGNOPE, on_exit: maybe}\nlogging: {format: xml, level: loud}\nextra: 1\n",
    );
    let expect = [
        "name:",
        "redis.mode:",
        "redis.connect_timeout:",
        "redis.bogus: unknown key",
        "election.lease_duration:",
        "election.jitter:",
        "election.lease_duraton: unknown key",
        "publish.http_addr:",
        "publish.ready_when:",
        "exec.stop_signal:",
        "exec.on_exit:",
        "logging.format:",
        "logging.level:",
        "extra: unknown key",
    ];
    for e in expect {
        assert!(
            found.iter().any(|p| p.starts_with(e)),
            "missing {e:?} in {found:#?}"
        );
    }
    assert_eq!(found.len(), expect.len(), "{found:#?}");
    assert!(found.iter().all(|p| !p.contains('\n')));
}

#[test]
fn unknown_keys_suggest_the_nearest() {
    let found = problems("name: x\nelection:\n  lease_duraton: 15s\n  retry_perod: 2s\nlease_duration: 3s\nlogging: {formt: text}\n");
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found.contains(
        &"election.lease_duraton: unknown key (did you mean election.lease_duration?)".to_string()
    ));
    assert!(found.contains(
        &"election.retry_perod: unknown key (did you mean election.retry_period?)".to_string()
    ));
    assert!(found.contains(
        &"lease_duration: unknown key (did you mean election.lease_duration?)".to_string()
    ));
    assert!(
        found.contains(&"logging.formt: unknown key (did you mean logging.format?)".to_string())
    );
    one_problem(
        "name: x\nelection: {health_check: {perod: 1s}}",
        &["election.health_check.perod: unknown key (did you mean election.health_check.period?)"],
    );
}

#[test]
fn type_errors_name_key_value_and_what_is_allowed() {
    one_problem(
        "name: x\nredis: [a]",
        &["redis: a list is not a mapping", "allowed keys: mode"],
    );
    one_problem(
        "name: x\nelection: {lease_duration: 15}",
        &["election.lease_duration: \"15\" is not a duration", "250ms"],
    );
    one_problem(
        "name: x\nelection: {retry_period: 0s}",
        &["election.retry_period: \"0s\"", "greater than 0"],
    );
    one_problem(
        "name: x\nelection: {release_on_shutdown: yes}",
        &["release_on_shutdown: \"yes\" is not a boolean"],
    );
    one_problem(
        "name: x\nexec: {command: 'sleep 1'}",
        &["exec.command: \"sleep 1\" is not a list of strings"],
    );
    one_problem(
        "name: x\nexec: {command: [a, [b]]}",
        &["exec.command[1]: a list is not a single value"],
    );
    one_problem(
        "name: x\nredis: {min_replicas_ack: -1}",
        &["redis.min_replicas_ack: \"-1\"", "whole number >= 0"],
    );
    one_problem(
        "name: x\npublish: {http_addr: 'localhost:80'}",
        &[
            "publish.http_addr: \"localhost:80\" is not a listen address",
            "0.0.0.0:9090",
        ],
    );
    one_problem(
        "- a\n- b",
        &["config file <string>: the top level is a list, but it must be a mapping"],
    );
    one_problem(
        "just text",
        &["the top level is \"just text\", but it must be a mapping"],
    );
}

#[test]
fn programs_are_checked_on_this_host_only_when_asked() {
    let yaml = "name: x\nhooks: {on_acquired: [no-such-program-xyz]}\n\
                exec: {command: [/nonexistent/cmd, a], grace_period: 1s}";
    ok(yaml);
    let o = Overrides {
        check_programs: true,
        ..Default::default()
    };
    let found = problems_with(yaml, &o, &env_of(&[("PATH", "/bin:/usr/bin")]));
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("exec.command[0]: \"/nonexistent/cmd\" cannot be found"));
    assert!(found[1].starts_with(
        "hooks.on_acquired[0]: \"no-such-program-xyz\" cannot be found on PATH (/bin:/usr/bin)"
    ));
    let o = Overrides {
        exec_command: vec!["no-such-program-xyz".into()],
        check_programs: true,
        ..Default::default()
    };
    let found = problems_with("name: x\nexec: {grace_period: 1s}", &o, &no_env);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("exec.command[0] (run -- COMMAND): \"no-such-program-xyz\""),
        "{found:?}"
    );
    // "" is never a program, wherever the command runs.
    one_problem(
        "name: x\nhooks: {on_stepped_down: ['', a]}",
        &["hooks.on_stepped_down[0]: \"\" is not allowed (the first item is the program to run)"],
    );
    one_problem(
        "name: x\nexec: {command: ['']}",
        &["exec.command[0]: \"\" is not allowed"],
    );
}

/// What the Redis client would refuse is found with the rest, not after it.
#[test]
fn independent_problems_are_found_in_one_pass() {
    let found = problems(
        "name: x\nredis: {mode: redlock, urls: [redis://a:1, redis://b:1, redis://c:1], min_replicas_ack: 1}\n\
         election: {jitter: 2}",
    );
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("redis.min_replicas_ack: 1 is not supported with mode redlock"));
    assert!(found[0].contains("allowed: 0"), "{found:?}");
    assert!(found[1].starts_with("election.jitter: \"2\""), "{found:?}");

    for (url, why) in [
        ("redis://h:1/notanumber", "invalid database number"),
        (
            "redis://h:1/99999999999999999999",
            "invalid database number",
        ),
        (
            "redis://h:1/0?protocol=xyz",
            "invalid protocol version: xyz",
        ),
        ("rediss://h:1/#x", "only #insecure"),
    ] {
        let found = problems(&format!(
            "name: x\nredis: {{url: '{url}'}}\nelection: {{jitter: 2}}"
        ));
        assert_eq!(found.len(), 2, "{url}: {found:#?}");
        let line = &found[0];
        let start = format!("redis.url: \"{url}\" is not a Redis URL ({why}");
        assert!(line.starts_with(&start), "{line}");
        assert!(line.contains("allowed: redis://"), "{line}");
        assert!(found[1].starts_with("election.jitter:"), "{found:?}");
    }

    let found = problems("name: x\nredis: {mode: redlock, urls: [redis://a:1, 'http://b']}");
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("redis.urls[1]: \"http://b\" is not a Redis URL"));
    assert!(found[1].contains("mode redlock needs an odd number >= 3 of urls (got 2)"));
    // The sentinels' URLs and the password in one are checked the same way, never shown.
    let found = problems(
        "name: x\nredis: {mode: sentinel, master_name: m, sentinels: ['redis://:s3cret@s:26379/x']}",
    );
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].starts_with("redis.sentinels[0]: \"redis://:<redacted>@s:26379/x\""));
    assert!(!found[0].contains("s3cret"), "{found:?}");
}

/// An explicit null upstream next to `proxy.listen` is a missing value, not a
/// request for the default.
#[test]
fn a_null_upstream_with_the_proxy_on_is_refused() {
    let listen = "name: x\nproxy:\n  listen: 127.0.0.1:7000\n";
    for upstream in ["  upstream: null\n", "  upstream: ~\n", "  upstream:\n"] {
        one_problem(
            &format!("{listen}{upstream}"),
            &[
                "proxy.upstream: null is not allowed while proxy.listen is set",
                "127.0.0.1:8080",
            ],
        );
    }
    one_problem(
        &format!("{listen}  upstream: ''\n"),
        &["proxy.upstream: \"\" is not allowed while proxy.listen is set"],
    );
    // Left out, it is the default; null without the proxy is no upstream.
    let c = ok(listen);
    assert_eq!(c.proxy.upstream.as_deref(), Some("127.0.0.1:8080"));
    assert_eq!(ok("name: x\nproxy: {upstream: null}").proxy.upstream, None);
}

#[test]
fn the_proxy_idle_timeout_defaults_to_an_hour_and_zero_means_never() {
    use std::time::Duration;
    assert_eq!(ok("name: x").proxy.idle_timeout, Duration::from_secs(3600));
    let c = ok("name: x\nproxy: {idle_timeout: 90s}");
    assert_eq!(c.proxy.idle_timeout, Duration::from_secs(90));
    assert!(
        c.to_redacted_yaml().contains("idle_timeout: 1m30s"),
        "{}",
        c.to_redacted_yaml()
    );
    assert_eq!(
        ok("name: x\nproxy: {idle_timeout: 0}").proxy.idle_timeout,
        Duration::ZERO
    );
    one_problem(
        "name: x\nproxy: {idle_timeout: soon}",
        &["proxy.idle_timeout: \"soon\""],
    );
}

/// The password scrubber leaves the hint of what a Redis URL looks like alone,
/// and still hides a password in the value.
#[test]
fn the_redis_url_hint_is_shown_as_written() {
    let hint =
        "allowed: redis://[user:password@]host[:port][/db], rediss://... for TLS, unix:///path)";
    for (url, shown) in [
        ("http://x", "\"http://x\""),
        ("redis://:s3cret@h:port", "\"redis://:<redacted>@h:port\""),
        ("redis://u:s3cret@h:1/x", "\"redis://u:<redacted>@h:1/x\""),
    ] {
        let found = problems(&format!("name: x\nredis: {{url: '{url}'}}"));
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].starts_with(&format!("redis.url: {shown}")),
            "{found:?}"
        );
        assert!(found[0].ends_with(hint), "{found:?}");
        assert!(!found[0].contains("s3cret"), "{found:?}");
    }
}

/// Every problem line names the value and what is allowed; a number too large for
/// any integer type is a bad value of its key, not invalid YAML that hides the rest.
#[test]
fn odd_values_name_the_value_and_what_is_allowed() {
    for (yaml, line) in [
        ("name: [a]", "name: a list is not a single value (allowed: one value"),
        (
            "name: x\nelection: {lease_duration: {a: 1}}",
            "election.lease_duration: a mapping is not a single value (allowed: one value",
        ),
        (
            "name: x\nredis: {mode: cluster, urls: [!foo x]}",
            "redis.urls[0]: a value tagged !foo is not a single value (allowed: one value",
        ),
        (
            "name: x\nredis: {url: !foo x}",
            "redis.url: a value tagged !foo is not a single value (allowed: one value",
        ),
        (
            "name: x\nredis: {min_replicas_ack: 4294967296}",
            "redis.min_replicas_ack: \"4294967296\" is not allowed (allowed: a whole number >= 0 and <= 4294967295)",
        ),
    ] {
        one_problem(yaml, &[line]);
    }
    let found = problems(
        "name: x\npublish: {max_connections: 99999999999999999999999}\n\
         election:\n  priority: -99999999999999999999\n  jitter: 2\n\
         hooks: {timeout: 99999999999999999999999999}\n",
    );
    let want = [
        "election.jitter: \"2\"",
        "election.priority: \"-99999999999999999999\" is out of range (allowed: 0..1000)",
        "publish.max_connections: \"99999999999999999999999\" is not allowed (allowed: a whole number from 1 to 65535)",
        "hooks.timeout: \"99999999999999999999999999\" is not a duration",
    ];
    assert_eq!(found.len(), want.len(), "{found:#?}");
    for w in want {
        assert!(
            found.iter().any(|p| p.starts_with(w)),
            "{w:?} not in {found:#?}"
        );
    }
}

#[test]
fn shards_are_counted_and_refused_where_not_supported() {
    let c = ok("name: x\nelection: {shards: 64, max_shards_per_replica: 1}");
    assert_eq!(
        (c.election.shards, c.election.max_shards_per_replica),
        (64, 1)
    );
    let c = ok("name: x");
    assert_eq!(
        (c.election.shards, c.election.max_shards_per_replica),
        (0, 0)
    );
    one_problem(
        "name: x\nelection: {shards: 4097}",
        &["election.shards: \"4097\"", "from 1 to 4096"],
    );
    one_problem(
        "name: x\nelection: {shards: -1}",
        &["election.shards: \"-1\"", "from 1 to 4096"],
    );
    one_problem(
        "name: x\nelection: {max_shards_per_replica: many}",
        &["election.max_shards_per_replica: \"many\"", "whole number"],
    );
    one_problem(
        "name: x\nelection: {shards: 8}\nproxy: {listen: 127.0.0.1:7000}",
        &[
            "proxy.listen",
            "election.shards (8)",
            "the proxy is not shard-aware",
        ],
    );
    // Shards run on Redlock too; without shards, the same proxy is fine.
    let c = ok("name: x\nelection: {shards: 8}\nredis: {mode: redlock, urls: [redis://a, redis://b, redis://c]}");
    assert_eq!(c.election.shards, 8);
    ok("name: x\nredis: {mode: redlock, urls: [redis://a, redis://b, redis://c]}");
}
