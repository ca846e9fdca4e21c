//! Tests of the whole configuration layer: defaults, files, environment, flags and output.
//! The checks of single values and rules are in `tests/rules.rs`.

mod rules;

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::*;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Result<String, std::env::VarError> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned().ok_or(std::env::VarError::NotPresent)
}

fn no_env(_: &str) -> Result<String, std::env::VarError> {
    Err(std::env::VarError::NotPresent)
}

fn ok(yaml: &str) -> Config {
    load_from_str(yaml, &Overrides::default(), &no_env).unwrap_or_else(|e| panic!("{e}"))
}

fn problems(yaml: &str) -> Vec<String> {
    problems_with(yaml, &Overrides::default(), &no_env)
}

fn problems_with(yaml: &str, o: &Overrides, env: EnvLookup<'_>) -> Vec<String> {
    match load_from_str(yaml, o, env) {
        Ok(c) => panic!("expected problems, got {c:?}"),
        Err(e) => e.problems,
    }
}

/// Asserts that exactly one problem was found, that it starts with the first fragment and
/// that it contains every one.
fn one_problem(yaml: &str, fragments: &[&str]) {
    let found = problems(yaml);
    assert_eq!(found.len(), 1, "{yaml:?}: {found:#?}");
    assert!(found[0].starts_with(fragments[0]), "{found:?}");
    for f in fragments {
        assert!(found[0].contains(f), "{:?} lacks {f:?}", found[0]);
    }
}

/// The printed configuration less the password line (which the file cannot set).
fn without_password(printed: &str) -> String {
    let lines = printed.lines().filter(|l| !l.contains("password:"));
    lines.map(|l| format!("{l}\n")).collect()
}

fn temp_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(text.as_bytes()).expect("write temp file");
    f
}

/// A minimal file is the structs' defaults (their values are checked as printed, in
/// `redacted_yaml_has_every_key_and_loads_back`), with the host name as the identity and
/// mode single's default URL.
#[test]
fn defaults_from_a_minimal_file() {
    let c = ok("name: x");
    assert!(!c.identity.is_empty(), "identity defaults to the host name");
    let url = Some("redis://127.0.0.1:6379/0".to_string());
    let redis = RedisConfig {
        url,
        ..Default::default()
    };
    let sections = (c.election, c.publish, c.exec, c.logging, c.hooks, c.proxy);
    assert_eq!(c.redis, redis);
    assert_eq!(sections, Default::default());
}

#[test]
fn null_sections_mean_defaults() {
    let c = ok("name: x\nredis:\nelection: ~\npublish: null\nexec:\nlogging:\n");
    assert_eq!(c, ok("name: x"));
}

#[test]
fn a_full_file_is_read() {
    let c = ok(r#"
name: orders-scheduler
identity: pod-a
redis:
  mode: sentinel
  sentinels: [redis://s1:26379, redis://s2:26379]
  master_name: mymaster
  username: app
  key_prefix: "x:"
  connect_timeout: 2s
  command_timeout: 250ms
  min_replicas_ack: 1
election:
  lease_duration: 20s
  renew_deadline: 12s
  retry_period: 3s
  jitter: 0.5
  release_on_shutdown: false
  on_lost: exit
  health_check:
    command: [sh, -c, "true"]
    period: 5s
    timeout: 1s
    failures: 2
publish:
  http_addr: "[::]:9091"
  leader_file: ""
  ready_when: always
exec:
  command: [sleep, "100"]
  stop_signal: INT
  grace_period: 1500ms
  on_exit: exit
logging:
  format: JSON
  level: DEBUG
"#);
    assert_eq!(c.redis.mode, ModeName::Sentinel);
    assert_eq!(c.redis.url.as_deref(), None);
    assert_eq!(c.redis.sentinels.len(), 2);
    assert_eq!(c.redis.master_name.as_deref(), Some("mymaster"));
    assert_eq!(c.redis.min_replicas_ack, 1);
    assert_eq!(c.election.jitter, 0.5);
    assert_eq!(c.election.on_lost, OnLost::Exit);
    let h = c.election.health_check.expect("health check set");
    assert_eq!(
        (h.command.len(), h.period, h.failures),
        (3, Duration::from_secs(5), 2)
    );
    assert_eq!(c.publish.http_addr, Some("[::]:9091".parse().unwrap()));
    assert_eq!(c.publish.leader_file, None);
    assert_eq!(c.exec.stop_signal, Signal::SIGINT);
    assert_eq!(c.exec.grace_period, Duration::from_millis(1500));
    assert_eq!(c.logging.format, LogFormat::Json);
    assert_eq!(c.logging.level, "debug");
}

#[test]
fn env_vars_are_expanded_in_file_strings() {
    let env = env_of(&[
        ("POD_NAME", "pod-7"),
        ("LEASE", "30s"),
        ("NODES", "redis://a"),
    ]);
    let yaml = "name: x\nidentity: ${POD_NAME}\nelection: {lease_duration: '${LEASE}'}\nredis: {mode: cluster, urls: ['${NODES}']}\nkey_literal_check: 1\n";
    let found = problems_with(yaml, &Overrides::default(), &env);
    assert_eq!(found, vec!["key_literal_check: unknown key (allowed here: name, identity, redis, election, publish, exec, logging, hooks, proxy)"]);
    let yaml = "name: x\nidentity: ${POD_NAME}\nelection: {lease_duration: '${LEASE}'}\nredis: {key_prefix: '$${LEASE}'}\n";
    let c = load_from_str(yaml, &Overrides::default(), &env).unwrap();
    assert_eq!(c.identity, "pod-7");
    assert_eq!(c.election.lease_duration, Duration::from_secs(30));
    assert_eq!(c.redis.key_prefix, "${LEASE}");
}

#[test]
fn unset_env_var_names_variable_and_key() {
    let found = problems("name: x\nexec: {command: ['${A}', '${B}']}");
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("exec.command[0]: ${A}: environment variable A is not set"));
    assert!(found[1].starts_with("exec.command[1]: ${B}: environment variable B is not set"));
}

#[test]
fn values_that_are_not_utf8_are_named_once_as_such() {
    let env = |k: &str| match k {
        "LEADERD_NAME" | "LEADERD_REDIS_PASSWORD" | "POD" => {
            Err(std::env::VarError::NotUnicode("x\u{fffd}".into()))
        }
        _ => Err(std::env::VarError::NotPresent),
    };
    let found = problems_with("identity: ${POD}", &Overrides::default(), &env);
    let not_utf8 = "its value is not valid UTF-8 (allowed: UTF-8 text)";
    assert_eq!(
        found,
        [
            format!("environment variable LEADERD_NAME: {not_utf8}"),
            format!("identity: ${{POD}}: environment variable POD is set, but {not_utf8}"),
            format!("environment variable LEADERD_REDIS_PASSWORD: {not_utf8}"),
        ]
    );
}

#[test]
fn precedence_is_flag_then_env_then_file() {
    let yaml = "name: file\nidentity: file-id\nredis: {url: 'redis://file:1'}\npublish: {http_addr: '127.0.0.1:1', leader_file: /f}\nlogging: {format: text, level: error}\n";
    let env = env_of(&[
        ("LEADERD_NAME", "env"),
        ("LEADERD_IDENTITY", "env-id"),
        ("LEADERD_REDIS_URL", "redis://env:2"),
        ("LEADERD_HTTP_ADDR", "127.0.0.1:2"),
        ("LEADERD_LEADER_FILE", ""),
        ("LEADERD_LOG_FORMAT", "json"),
        ("LEADERD_LOG_LEVEL", "warn"),
    ]);
    let file = load_from_str(yaml, &Overrides::default(), &no_env).unwrap();
    assert_eq!(
        (file.name.as_str(), file.logging.level.as_str()),
        ("file", "error")
    );
    let from_env = load_from_str(yaml, &Overrides::default(), &env).unwrap();
    let want = "name: env\nidentity: env-id\nredis: {url: 'redis://env:2'}\npublish: {http_addr: '127.0.0.1:2', leader_file: ''}\nlogging: {format: json, level: warn}\n";
    assert_eq!(from_env, ok(want));
    let o = Overrides {
        name: Some("flag".into()),
        identity: Some("flag-id".into()),
        redis_url: Some("redis://flag:3".into()),
        http_addr: Some(String::new()),
        leader_file: Some("/flag".into()),
        log_format: Some("text".into()),
        log_level: Some("TRACE".into()),
        lease_duration: Some("30s".into()),
        renew_deadline: Some("20s".into()),
        retry_period: Some("5s".into()),
        ..Default::default()
    };
    let want = "name: flag\nidentity: flag-id\nredis: {url: 'redis://flag:3'}\npublish: {http_addr: '', leader_file: /flag}\nlogging: {format: text, level: trace}\nelection: {lease_duration: 30s, renew_deadline: 20s, retry_period: 5s}\n";
    assert_eq!(load_from_str(yaml, &o, &env).unwrap(), ok(want));
}

#[test]
fn problems_name_the_flag_or_variable_that_gave_the_value() {
    let o = Overrides {
        lease_duration: Some("soon".into()),
        ..Default::default()
    };
    let found = problems_with("name: x", &o, &no_env);
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("--lease-duration: \"soon\" is not a duration"),
        "{found:?}"
    );
    let env = env_of(&[
        ("LEADERD_HTTP_ADDR", "nowhere"),
        ("LEADERD_LOG_LEVEL", "loud"),
    ]);
    let found = problems_with("name: x", &Overrides::default(), &env);
    assert!(
        found[0].starts_with("LEADERD_HTTP_ADDR: \"nowhere\""),
        "{found:?}"
    );
    assert!(
        found[1].starts_with("LEADERD_LOG_LEVEL: \"loud\""),
        "{found:?}"
    );
    let o = Overrides {
        name: Some("a b".into()),
        ..Default::default()
    };
    assert!(problems_with("name: x", &o, &no_env)[0].starts_with("--name: \"a b\""));
}

#[test]
fn password_from_env_wins_over_file() {
    let secret = temp_file("s3cret\n");
    let path = secret.path().display().to_string();
    let yaml = format!("name: x\nredis: {{password_file: '{path}'}}");
    let c = load_from_str(&yaml, &Overrides::default(), &no_env).unwrap();
    assert_eq!(
        c.redis.password.as_ref().map(Secret::expose),
        Some("s3cret")
    );
    let env = env_of(&[("LEADERD_REDIS_PASSWORD", "from-env")]);
    let c = load_from_str(&yaml, &Overrides::default(), &env).unwrap();
    assert_eq!(
        c.redis.password.as_ref().map(Secret::expose),
        Some("from-env")
    );
    assert_eq!(c.redis.password_file.as_deref(), Some(secret.path()));
}

#[test]
fn an_empty_password_file_is_refused() {
    let empty = temp_file("\n");
    let yaml = format!(
        "name: x\nredis: {{password_file: '{}'}}",
        empty.path().display()
    );
    one_problem(&yaml, &["redis.password_file:", "is empty"]);
}

#[test]
fn secrets_are_redacted_everywhere() {
    let env = env_of(&[("LEADERD_REDIS_PASSWORD", "hunter2")]);
    let yaml = "name: x\nredis: {url: 'redis://u:pw1@h:6379/0'}\n";
    let c = load_from_str(yaml, &Overrides::default(), &env).unwrap();
    assert_eq!(c.redis.url.as_deref(), Some("redis://u:pw1@h:6379/0"));
    let out = c.to_redacted_yaml();
    assert!(!out.contains("hunter2") && !out.contains("pw1"), "{out}");
    assert!(out.contains("password: <redacted>"), "{out}");
    assert!(out.contains("url: redis://u:<redacted>@h:6379/0"), "{out}");
    let debug = format!("{c:?}");
    assert!(!debug.contains("hunter2") && debug.contains("<redacted>"));
    let bad =
        "name: x\nredis: {mode: cluster, url: 'redis://u:pw1@h:bad', urls: ['rediss://:pw2@h:x']}";
    let found = problems(bad).join("\n");
    assert!(!found.contains("pw1") && !found.contains("pw2"), "{found}");
    assert!(found.contains("redis://u:<redacted>@h:bad"), "{found}");
}

#[test]
fn redacted_yaml_has_every_key_and_loads_back() {
    let c = ok("name: x\nidentity: me\nexec: {command: [a, b]}\npublish: {http_addr: ''}");
    let out = c.to_redacted_yaml();
    let printed = "mode:|urls:|sentinels:|master_name:|username:|password:|password_file:|\
        key_prefix: 'leaderd:'|connect_timeout: 1s|command_timeout: 500ms|min_replicas_ack: 0|\
        lease_duration: 15s|renew_deadline: 10s|retry_period: 2s|jitter: 0.2|\
        release_on_shutdown: true|on_lost: contend|health_check: null|http_addr: ''|\
        leader_file: /var/run/leaderd/leader.json|ready_when: leader|priority: 0|advertise: null|\
        stop_signal: SIGTERM|grace_period: 3s|on_exit: release|format: text|level: info";
    for key in printed.split('|') {
        assert!(out.contains(key), "{key} missing in\n{out}");
    }
    assert_eq!(ok(&without_password(&out)), c);
}

#[test]
fn yaml_errors_are_one_line_naming_the_path() {
    let broken = temp_file("name: x\nelection:\n  lease_duration: [1s\n");
    let o = Overrides {
        config_path: Some(broken.path().into()),
        ..Default::default()
    };
    let err = load(&o, &no_env).unwrap_err().to_string();
    assert!(
        err.contains(&broken.path().display().to_string()) && err.contains("line "),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn config_path_comes_from_flag_then_env() {
    let a = temp_file("name: from-flag");
    let b = temp_file("name: from-env");
    let env = env_of(&[("LEADERD_CONFIG", &b.path().display().to_string())]);
    let o = Overrides {
        config_path: Some(a.path().into()),
        ..Default::default()
    };
    assert_eq!(load(&o, &env).unwrap().name, "from-flag");
    assert_eq!(load(&Overrides::default(), &env).unwrap().name, "from-env");
}

#[test]
fn tls_files_are_checked_shown_and_optional() {
    assert_eq!(ok("name: x").redis.tls, None);
    // The client reads them when it is made (in the same pass as the other checks).
    let (ca, cert, key) = (temp_file(CERT_PEM), temp_file(CERT_PEM), temp_file(KEY_PEM));
    let yaml = format!(
        "name: x\nredis:\n  url: rediss://h:6380\n  tls: {{ca_file: {}, cert_file: {}, key_file: {}}}\n",
        ca.path().display(),
        cert.path().display(),
        key.path().display()
    );
    let c = ok(&yaml);
    let tls = c.redis.tls.clone().expect("tls");
    assert_eq!(tls.ca_file.as_deref(), Some(ca.path()));
    assert_eq!(tls.key_file.as_deref(), Some(key.path()));
    let out = c.to_redacted_yaml();
    assert!(out.contains(&key.path().display().to_string()), "{out}");
    assert_eq!(ok(&without_password(&out)), c);

    let half = format!(
        "name: x\nredis: {{tls: {{cert_file: {}}}}}",
        cert.path().display()
    );
    one_problem(&half, &["redis.tls", "cert_file is set without key_file"]);
    let not_pem = temp_file("key");
    let yaml = yaml.replace(
        &key.path().display().to_string(),
        &not_pem.path().display().to_string(),
    );
    one_problem(
        &yaml,
        &[
            "redis.tls: cannot use the TLS files for redis.url",
            "private key",
        ],
    );
}

/// A self-signed certificate (P-256, valid until 2126) and its key, made for these tests.
const CERT_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBkjCCATmgAwIBAgIULKmUPOtHi7klVA6bjWg1rjYoUr8wCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTbGVhZGVyZC1jb25maWctdGVzdDAgFw0yNjEyMDIxNzEyMzNa
GA8yMTI2MTEwODE3MTIzM1owHjEcMBoGA1UEAwwTbGVhZGVyZC1jb25maWctdGVz
dDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABBhmuZ8QzVbA+R0UjNKpZ/DgQt/W
3yjQaspVDSHj3gmbFASJf59+WBut3vo/xEb/7iTAZMLGQlGSagU1B0YHwvmjUzBR
MB0GA1UdDgQWBBSYoho64ThZr+lpMneUdPe7yQI29DAfBgNVHSMEGDAWgBSYoho6
4ThZr+lpMneUdPe7yQI29DAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0cA
MEQCIBYMB5VHafDIjDQi3vSqhgKuV76EbiCTqiE3ayFDkEjGAiB80JOZhwMs0/js
0qp0cSbIS7BVgLaX7gW1ZvbWFXCw7g==
-----END CERTIFICATE-----
";
const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgc9HsbMRsCLA2wiyw
BDMEcI5Q7G/W3ogmeTm3QiblT0uhRANCAAQYZrmfEM1WwPkdFIzSqWfw4ELf1t8o
0GrKVQ0h494JmxQEiX+fflgbrd76P8RG/+4kwGTCxkJRkmoFNQdGB8L5
-----END PRIVATE KEY-----
";
