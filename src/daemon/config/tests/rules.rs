//! Tests of the checks: single values, unknown keys, Redis modes and the rules between keys,
//! each problem named and all of them collected.

use super::{env_of, no_env, ok, one_problem, problems, problems_with};
use crate::daemon::config::{load_from_str, Overrides};

/// Files with one mistake each, and the words of the one problem each gives.
#[rustfmt::skip]
const ONE_PROBLEM: &[(&str, &[&str])] = &[
    // The name and the identity.
    ("", &["name: missing"]),
    ("identity: a", &["name: missing", "required", "[A-Za-z0-9._-]"]),
    ("name: ''", &["name: \"\" is not a valid name", "1-200"]),
    ("name: a/b", &["name: \"a/b\"", "[A-Za-z0-9._-]"]),
    ("name: x\nidentity: ''", &["identity: \"\"", "must not be empty"]),
    ("name: x\nidentity: \"a\\nb\"", &["identity:", "control characters"]),
    ("name: x\nidentity: ${POD_NAME}", &["identity: ${POD_NAME}: environment variable POD_NAME is not set"]),
    // The rules between keys, each named with its values.
    ("name: x\nelection: {lease_duration: 2s, renew_deadline: 3s, retry_period: 1s, jitter: 0}",
     &["election: lease_duration (2s) must be greater than renew_deadline (3s)"]),
    ("name: x\nelection: {renew_deadline: 2400ms}",
     &["election: renew_deadline (2s400ms) must be greater than retry_period * (1 + jitter) (2s * 1.2 = 2s400ms)"]),
    ("name: x\nredis: {command_timeout: 2s}",
     &["redis.command_timeout (2s) must be less than election.retry_period (2s)"]),
    ("name: x\nelection: {jitter: 1.5}", &["election.jitter: \"1.5\" is not a number between 0 and 1", "0 <= jitter <= 1"]),
    ("name: x\nelection: {jitter: abc}", &["election.jitter: \"abc\" is not a number between 0 and 1"]),
    ("name: x\nexec: {command: [sleep, '1'], grace_period: 5s}",
     &["exec.grace_period (5s) must be less than election.lease_duration - election.renew_deadline (15s - 10s = 5s)"]),
    ("name: x\nelection: {health_check: {http_get: 'http://127.0.0.1:8080/health', period: 1s, timeout: 1s}}",
     &["election.health_check: timeout (1s) must be less than period (1s)"]),
    ("name: x\nelection: {health_check: {command: ['true'], failures: 0}}", &["election.health_check.failures: \"0\"", ">= 1"]),
    // Each Redis mode needs its addresses, and a bad mode does not cascade.
    ("name: x\nredis: {mode: redlock, urls: [redis://a, redis://b]}",
     &["redis.urls: mode redlock needs an odd number >= 3 of urls (got 2)"]),
    ("name: x\nredis: {mode: redlock, urls: [redis://a, redis://b, redis://c, redis://d]}", &["redis.urls: mode redlock needs", "(got 4)"]),
    ("name: x\nredis: {mode: sentinel, master_name: m}", &["redis.sentinels: mode sentinel needs"]),
    ("name: x\nredis: {mode: sentinel, sentinels: [redis://s:26379]}", &["redis.master_name"]),
    ("name: x\nredis: {mode: cluster}", &["redis.urls: mode cluster needs"]),
    ("name: x\nredis: {mode: cluster, url: redis://a, urls: [redis://b]}", &["redis.url: only mode single"]),
    ("name: x\nredis: {urls: [redis://b]}", &["redis.urls: only modes redlock and cluster"]),
    ("name: x\nredis: {mode: master}", &["redis.mode: \"master\" is not allowed", "single, sentinel, redlock, cluster"]),
    ("name: x\nredis: {mode: redlok, urls: [redis://a, redis://b, redis://c]}", &["redis.mode: \"redlok\" is not allowed"]),
    ("name: x\nredis: {url: 'http://h:6379'}", &["redis.url: \"http://h:6379\" is not a Redis URL"]),
    ("name: x\nredis: {mode: cluster, urls: [redis://a, 'b:1']}", &["redis.urls[1]: \"b:1\" is not a Redis URL"]),
    ("name: x\nredis: {password_file: /nonexistent/pw}", &["redis.password_file: cannot read \"/nonexistent/pw\""]),
    ("name: x\nredis: {tls: {ca_file: /nonexistent/ca.pem}}", &["redis.tls.ca_file", "/nonexistent/ca.pem", "cannot read"]),
    // Values of the wrong type or form name the key, the value and what is allowed.
    ("name: x\nredis: [a]", &["redis: a list is not a mapping", "allowed keys: mode"]),
    ("name: x\nelection: {lease_duration: 15}", &["election.lease_duration: \"15\" is not a duration", "250ms"]),
    ("name: x\nelection: {retry_period: 0s}", &["election.retry_period: \"0s\"", "greater than 0"]),
    ("name: x\nelection: {release_on_shutdown: yes}", &["election.release_on_shutdown: \"yes\" is not a boolean"]),
    ("name: x\nexec: {command: 'sleep 1'}", &["exec.command: \"sleep 1\" is not a list of strings"]),
    ("name: x\nexec: {command: [a, [b]]}", &["exec.command[1]: a list is not a single value"]),
    ("name: x\nredis: {min_replicas_ack: -1}", &["redis.min_replicas_ack: \"-1\"", "whole number >= 0"]),
    ("name: x\npublish: {http_addr: 'localhost:80'}", &["publish.http_addr: \"localhost:80\" is not a listen address", "0.0.0.0:9090"]),
    ("name: x\nproxy: {idle_timeout: soon}", &["proxy.idle_timeout: \"soon\""]),
    ("- a\n- b", &["config file <string>: the top level is a list, but it must be a mapping"]),
    ("just text", &["config file <string>: the top level is \"just text\", but it must be a mapping"]),
    ("name: x\nname: y\n", &["config file <string>: invalid YAML", "duplicate"]),
    // Odd values; a number too large for any integer type is a bad value of its key.
    ("name: [a]", &["name: a list is not a single value (allowed: one value"]),
    ("name: x\nelection: {lease_duration: {a: 1}}", &["election.lease_duration: a mapping is not a single value (allowed: one value"]),
    ("name: x\nredis: {mode: cluster, urls: [!foo x]}", &["redis.urls[0]: a value tagged !foo is not a single value (allowed: one value"]),
    ("name: x\nredis: {url: !foo x}", &["redis.url: a value tagged !foo is not a single value (allowed: one value"]),
    ("name: x\nredis: {min_replicas_ack: 4294967296}",
     &["redis.min_replicas_ack: \"4294967296\" is not allowed (allowed: a whole number >= 0 and <= 4294967295)"]),
    // Shards: counted, and refused where not supported.
    ("name: x\nelection: {shards: 4097}", &["election.shards: \"4097\"", "from 1 to 4096"]),
    ("name: x\nelection: {shards: -1}", &["election.shards: \"-1\"", "from 1 to 4096"]),
    ("name: x\nelection: {max_shards_per_replica: many}", &["election.max_shards_per_replica: \"many\"", "whole number"]),
    ("name: x\nelection: {shards: 8}\nproxy: {listen: 127.0.0.1:7000}",
     &["proxy.listen", "election.shards (8)", "the proxy is not shard-aware"]),
    // Unknown keys suggest the nearest (more in `unknown_keys_suggest_the_nearest`).
    ("name: x\nelection: {health_check: {perod: 1s}}",
     &["election.health_check.perod: unknown key (did you mean election.health_check.period?)"]),
    ("name: x\nredis: {tls: {cafile: x}}", &["redis.tls.cafile: unknown key (did you mean redis.tls.ca_file?)"]),
    // "" is never a program, wherever the command runs.
    ("name: x\nhooks: {on_stepped_down: ['', a]}",
     &["hooks.on_stepped_down[0]: \"\" is not allowed (the first item is the program to run)"]),
    ("name: x\nexec: {command: ['']}", &["exec.command[0]: \"\" is not allowed"]),
    // An explicit null upstream next to `proxy.listen` is a missing value, not the default.
    ("name: x\nproxy:\n  listen: 127.0.0.1:7000\n  upstream: null\n", NULL_UPSTREAM),
    ("name: x\nproxy:\n  listen: 127.0.0.1:7000\n  upstream: ~\n", NULL_UPSTREAM),
    ("name: x\nproxy:\n  listen: 127.0.0.1:7000\n  upstream:\n", NULL_UPSTREAM),
    ("name: x\nproxy:\n  listen: 127.0.0.1:7000\n  upstream: ''\n", &["proxy.upstream: \"\" is not allowed while proxy.listen is set"]),
];

const NULL_UPSTREAM: &[&str] = &[
    "proxy.upstream: null is not allowed while proxy.listen is set",
    "127.0.0.1:8080",
];

#[test]
fn each_mistake_is_one_problem_naming_it() {
    for (yaml, fragments) in ONE_PROBLEM {
        one_problem(yaml, fragments);
    }
}

/// Files that are fine, and what they give.
#[test]
fn good_files_give_their_values() {
    let c = ok("name: x\nredis: {mode: redlock, urls: [redis://a, redis://b, redis://c]}");
    assert_eq!((c.redis.url.as_deref(), c.redis.urls.len()), (None, 3));
    // Left out, the upstream is the default; null without the proxy is no upstream.
    let c = ok("name: x\nproxy:\n  listen: 127.0.0.1:7000\n");
    assert_eq!(c.proxy.upstream.as_deref(), Some("127.0.0.1:8080"));
    assert_eq!(ok("name: x\nproxy: {upstream: null}").proxy.upstream, None);
    // Shards run on Redlock too.
    let e = ok("name: x\nelection: {shards: 64, max_shards_per_replica: 1}").election;
    assert_eq!((e.shards, e.max_shards_per_replica), (64, 1));
    let e = ok("name: x").election;
    assert_eq!((e.shards, e.max_shards_per_replica), (0, 0));
    let c = ok("name: x\nelection: {shards: 8}\nredis: {mode: redlock, urls: [redis://a, redis://b, redis://c]}");
    assert_eq!(c.election.shards, 8);
    // The proxy's idle timeout: an hour by default, zero for never, printed as written.
    use std::time::Duration;
    assert_eq!(ok("name: x").proxy.idle_timeout, Duration::from_secs(3600));
    let c = ok("name: x\nproxy: {idle_timeout: 90s}");
    assert_eq!(c.proxy.idle_timeout, Duration::from_secs(90));
    let printed = c.to_redacted_yaml();
    assert!(printed.contains("idle_timeout: 1m30s"), "{printed}");
    let zero = ok("name: x\nproxy: {idle_timeout: 0}").proxy.idle_timeout;
    assert_eq!(zero, Duration::ZERO);
}

/// `run -- COMMAND` replaces `exec.command`, and the grace rule applies only in exec mode.
#[test]
fn the_command_line_command_wins_and_brings_the_grace_rule() {
    let o = Overrides {
        exec_command: vec!["sleep".into(), "9".into()],
        ..Default::default()
    };
    let c = load_from_str("name: x\nexec: {command: [other]}", &o, &no_env).unwrap();
    assert_eq!(c.exec.command, ["sleep", "9"]);
    ok("name: x\nexec: {grace_period: 1m}");
    let found = problems_with("name: x\nexec: {grace_period: 1m}", &o, &no_env);
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("exec.grace_period (1m)"), "{found:?}");
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
    let want = [
        "election.lease_duraton: unknown key (did you mean election.lease_duration?)",
        "election.retry_perod: unknown key (did you mean election.retry_period?)",
        "lease_duration: unknown key (did you mean election.lease_duration?)",
        "logging.formt: unknown key (did you mean logging.format?)",
    ];
    assert_eq!(found.len(), 4, "{found:#?}");
    for w in want {
        assert!(found.contains(&w.to_string()), "{w:?} not in {found:#?}");
    }
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

/// A number too large for any integer type is a bad value of its key, not invalid YAML
/// that hides the rest.
#[test]
fn numbers_too_wide_for_any_integer_are_bad_values() {
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
