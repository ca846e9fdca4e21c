//! Issue 3, bad inputs and `status`: every configuration rule broken gives exit 2 and one line
//! naming the key (for `check-config` and `run`), `status` exit codes and `--json` shape, and
//! a taken HTTP address. Runs the real binary.

mod support;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use support::{keys, now_ms, run_cli, CliOutput, Daemon, DaemonOpts, RedisServer};

const CLI_TIMEOUT: Duration = Duration::from_secs(10);

/// A valid config: nothing published, Redis on a port where nobody listens (never 6379).
fn base_config() -> String {
    let nowhere = format!("redis://127.0.0.1:{}/0", support::free_port());
    config_for(&nowhere)
}

/// A valid config for the Redis at `url`, with nothing published.
fn config_for(url: &str) -> String {
    format!(
        "name: cfg\n\
         identity: replica-a\n\
         redis:\n  url: {url}\n  command_timeout: 200ms\n\
         election:\n  lease_duration: 2s\n  renew_deadline: 1400ms\n  retry_period: 300ms\n  jitter: 0.2\n\
         publish:\n  http_addr: \"\"\n  leader_file: \"\"\n"
    )
}

fn write(dir: &Path, text: &str) -> String {
    let path = dir.join("config.yaml");
    std::fs::write(&path, text).expect("write config");
    path.to_str().expect("utf-8 path").to_string()
}

fn cli(args: &[&str]) -> CliOutput {
    run_cli(args, &[], CLI_TIMEOUT)
}

/// Exit 2 and exactly one line on stderr that contains every one of `needles`; no panic,
/// no backtrace, nothing on stdout.
fn assert_one_line_error(out: &CliOutput, needles: &[&str], what: &str) {
    assert_eq!(out.code, Some(2), "{what}: exit code: {out:?}");
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "{what}: not one line: {out:?}");
    for needle in needles {
        assert!(
            lines[0].contains(needle),
            "{what}: {needle:?} not in {:?}",
            lines[0]
        );
    }
    let lower = out.stderr.to_lowercase();
    assert!(
        !lower.contains("panicked") && !lower.contains("backtrace"),
        "{what}: {out:?}"
    );
    assert!(
        out.stdout.trim().is_empty(),
        "{what}: printed a config anyway: {out:?}"
    );
}

/// Each case: (what, config text, words the one-line message must contain).
fn broken_configs() -> Vec<(&'static str, String, Vec<&'static str>)> {
    let base = base_config();
    let with = |from: &str, to: &str| {
        assert!(base.contains(from), "{from} not in the base config");
        base.replacen(from, to, 1)
    };
    vec![
        (
            "lease_duration > renew_deadline",
            with("lease_duration: 2s", "lease_duration: 1400ms"),
            vec!["lease_duration", "renew_deadline"],
        ),
        (
            "renew_deadline > retry_period * (1 + jitter)",
            with("retry_period: 300ms", "retry_period: 1200ms"),
            vec!["renew_deadline", "retry_period", "jitter"],
        ),
        (
            "command_timeout < retry_period",
            with("command_timeout: 200ms", "command_timeout: 300ms"),
            vec!["redis.command_timeout", "retry_period"],
        ),
        (
            "jitter above 1",
            with("jitter: 0.2", "jitter: 1.5"),
            vec!["election.jitter", "1.5"],
        ),
        (
            "jitter below 0",
            with("jitter: 0.2", "jitter: -0.1"),
            vec!["election.jitter"],
        ),
        (
            "exec.grace_period < lease_duration - renew_deadline",
            format!("{base}exec:\n  command: [sleep, \"10\"]\n  grace_period: 1s\n"),
            vec!["exec.grace_period", "lease_duration", "renew_deadline"],
        ),
        (
            "redlock needs an odd number >= 3 of urls",
            with(
                &base
                    .lines()
                    .find(|l| l.contains("url: redis://"))
                    .map(|l| format!("{l}\n"))
                    .unwrap(),
                "  mode: redlock\n  urls: [\"redis://127.0.0.1:1\", \"redis://127.0.0.1:2\"]\n",
            ),
            vec!["redis.urls", "3"],
        ),
        (
            "name characters",
            with("name: cfg", "name: \"bad name!\""),
            vec!["name", "bad name!"],
        ),
        (
            "a duration without a unit",
            with("lease_duration: 2s", "lease_duration: 2 seconds"),
            vec!["election.lease_duration", "2 seconds"],
        ),
        (
            "an unknown key, with the nearest known key suggested",
            with("lease_duration: 2s", "lease_duraton: 2s"),
            vec!["election.lease_duraton", "election.lease_duration"],
        ),
        (
            "an unset ${VAR}",
            with(
                "identity: replica-a",
                "identity: ${LEADERD_TEST_UNSET_VAR_3F9}",
            ),
            vec!["LEADERD_TEST_UNSET_VAR_3F9", "identity"],
        ),
        (
            "a bad HTTP address",
            with("http_addr: \"\"", "http_addr: \"not-an-address\""),
            vec!["publish.http_addr", "not-an-address"],
        ),
    ]
}

#[test]
fn every_broken_rule_is_exit_2_and_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    // The base itself is fine (check-config prints it; exit 0).
    let path = write(dir.path(), &base_config());
    let ok = cli(&["check-config", "--config", &path]);
    assert_eq!(ok.code, Some(0), "{ok:?}");
    assert!(ok.stdout.contains("lease_duration"), "{ok:?}");

    for (what, text, needles) in broken_configs() {
        let path = write(dir.path(), &text);
        for command in ["check-config", "run", "status"] {
            let out = cli(&[command, "--config", &path]);
            assert_one_line_error(&out, &needles, &format!("{command}: {what}"));
        }
    }
}

#[test]
fn missing_file_bad_usage_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yaml");
    let missing = missing.to_str().unwrap();
    let cannot_read = format!("config file {missing}: cannot read it");
    for command in ["check-config", "run", "status"] {
        let out = cli(&[command, "--config", missing]);
        assert_one_line_error(&out, &[&cannot_read], &format!("{command}: missing file"));
    }
    // $LEADERD_CONFIG is used when --config is not given.
    let out = run_cli(
        &["check-config"],
        &[("LEADERD_CONFIG", missing)],
        CLI_TIMEOUT,
    );
    assert_one_line_error(&out, &[missing], "LEADERD_CONFIG: missing file");

    // Bad usage: exit 2.
    assert_eq!(cli(&["run", "--no-such-flag"]).code, Some(2));
    assert_eq!(cli(&[]).code, Some(2));
    assert_eq!(cli(&["frobnicate"]).code, Some(2));
    let version = cli(&["--version"]);
    assert_eq!(version.code, Some(0), "{version:?}");
    assert!(
        version.stdout.contains(env!("CARGO_PKG_VERSION")),
        "{version:?}"
    );

    // A flag that breaks a rule is reported by the flag's key; flags beat the file.
    let path = write(dir.path(), &base_config());
    let out = cli(&["check-config", "--config", &path, "--lease-duration", "1s"]);
    assert_one_line_error(&out, &["lease_duration"], "flag breaking a rule");
    let out = cli(&[
        "check-config",
        "--config",
        &path,
        "--lease-duration",
        "soon",
    ]);
    assert_one_line_error(&out, &["lease-duration", "soon"], "bad flag value");
    let env = [("LEADERD_IDENTITY", "from-env")];
    let out = run_cli(&["check-config", "--config", &path], &env, CLI_TIMEOUT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("from-env"), "{out:?}");
    let args = ["check-config", "--config", &path, "--identity", "from-flag"];
    let out = run_cli(&args, &env, CLI_TIMEOUT);
    assert!(
        out.stdout.contains("from-flag") && !out.stdout.contains("from-env"),
        "{out:?}"
    );
}

fn status(path: &str) -> (Option<i32>, Value, CliOutput) {
    let out = cli(&["status", "--config", path, "--json"]);
    let doc = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    (out.code, doc, out)
}

fn assert_status_shape(doc: &Value) {
    let keys: BTreeSet<&str> = doc
        .as_object()
        .unwrap_or_else(|| panic!("not a JSON object: {doc}"))
        .keys()
        .map(String::as_str)
        .collect();
    let want: BTreeSet<&str> = [
        "name",
        "state",
        "holder",
        "fence",
        "remaining_ms",
        "candidates",
    ]
    .into();
    assert_eq!(keys, want, "{doc}");
}

#[test]
fn status_exit_codes_and_json_shape() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let unreachable = base_config();
    let path_down = write(dir.path(), &unreachable);
    let (code, _, out) = status(&path_down);
    assert_eq!(code, Some(1), "unreachable Redis: {out:?}");
    let port = unreachable
        .split("127.0.0.1:")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let server = format!("cannot connect to 127.0.0.1:{port}: ");
    assert!(out.stderr.contains(&server), "names the server: {out:?}");
    let text = cli(&["status", "--config", &path_down]);
    assert_eq!(text.code, Some(1), "{text:?}");

    let dir2 = tempfile::tempdir().unwrap();
    let up = config_for(&redis.url());
    let path = write(dir2.path(), &up);
    let key = &keys("cfg").lock;

    // Vacant: exit 3.
    let (code, doc, out) = status(&path);
    assert_eq!(code, Some(3), "vacant: {out:?}");
    assert_status_shape(&doc);
    assert_eq!(doc["state"], "vacant");
    assert_eq!(doc["name"], "cfg");
    assert_eq!(doc["holder"], Value::Null);
    assert_eq!(doc["fence"], Value::Null);
    assert_eq!(doc["remaining_ms"], Value::Null);
    assert_eq!(cli(&["status", "--config", &path]).code, Some(3));

    // Quarantined (the placeholder of docs/protocol.md#quarantine): exit 3.
    redis.cmd(&[
        "HSET",
        key,
        "holder",
        "",
        "token",
        "",
        "fence",
        "1000",
        "acquired_at_ms",
        "1",
    ]);
    redis.cmd(&["PEXPIRE", key, "60000"]);
    let (code, doc, out) = status(&path);
    assert_eq!(code, Some(3), "quarantined: {out:?}");
    assert_status_shape(&doc);
    assert_eq!(doc["state"], "quarantined");
    assert_eq!(doc["holder"], Value::Null);
    let text = cli(&["status", "--config", &path]);
    assert_eq!(text.code, Some(3));
    assert!(text.stdout.contains("quarantined"), "{text:?}");

    // Held: exit 0 with holder, fence and time left.
    redis.cmd(&[
        "HSET", key, "holder", "pod-x", "token", "t", "fence", "1001",
    ]);
    redis.cmd(&["PEXPIRE", key, "60000"]);
    let (code, doc, out) = status(&path);
    assert_eq!(code, Some(0), "held: {out:?}");
    assert_status_shape(&doc);
    assert_eq!(doc["state"], "held");
    assert_eq!(doc["holder"], "pod-x");
    assert_eq!(doc["fence"], 1001);
    let left = doc["remaining_ms"].as_u64().expect("remaining_ms");
    assert!(left > 50_000 && left <= 60_000, "{doc}");
    let text = cli(&["status", "--config", &path]);
    assert_eq!(text.code, Some(0));
    assert_eq!(text.stdout.trim().lines().count(), 1, "{text:?}");
    assert!(
        text.stdout.contains("pod-x") && text.stdout.contains("1001"),
        "{text:?}"
    );
}

#[test]
fn http_address_in_use_is_exit_1_naming_it() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let nowhere = format!("redis://127.0.0.1:{}/0", support::free_port());
    let mut opts = DaemonOpts::new("inuse", "replica-a", &nowhere);
    opts.extra_yaml = format!("publish:\n  http_addr: \"{addr}\"\n");
    let mut d = Daemon::spawn(&opts);
    let code = d.wait_exit(Duration::from_secs(5));
    assert_eq!(code, Some(1), "{}", d.log());
    let log = d.log();
    let line = log
        .lines()
        .find(|l| l.contains("publish.http_addr") && l.contains(&addr))
        .unwrap_or_else(|| panic!("no line naming publish.http_addr {addr}:\n{log}"));
    assert!(!log.contains("panicked"), "{log}");
    println!("{line}");
    // With `--log-format json` (the test config's), every line is one JSON object.
    for l in log.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            serde_json::from_str::<serde_json::Value>(l).is_ok(),
            "not JSON: {l}"
        );
    }
    let naming = log.lines().filter(|l| l.contains(&addr)).count();
    assert_eq!(naming, 1, "one line names it:\n{log}");

    // The same through the flag.
    let mut opts = DaemonOpts::new("inuse", "replica-a", &nowhere);
    opts.extra_args = vec!["--http-addr".into(), addr.clone()];
    let mut d = Daemon::spawn(&opts);
    assert_eq!(d.wait_exit(Duration::from_secs(5)), Some(1), "{}", d.log());
    assert!(d.log().contains(&addr), "{}", d.log());
    drop(taken);
    let _ = now_ms();
}

/// The uid (and gid) of `nobody`, which cannot execute a root-owned mode-0700 script.
const NOBODY: u32 = 65534;

/// Runs leaderd with `args` as uid and gid [`NOBODY`]: the exit code (None if it ran past
/// `timeout` and was killed) and stderr. None when leaderd cannot be started as that user
/// (a skip: under CI a failure).
fn run_as_nobody(args: &[&str], timeout: Duration) -> Option<(Option<i32>, String)> {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    let err = std::fs::File::create(&err_path).unwrap();
    let spawned = Command::new(support::leaderd_bin())
        .args(args)
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(err))
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            support::tools::skip(&format!("leaderd cannot be started as uid {NOBODY}: {e}"));
            return None;
        }
    };
    let deadline = std::time::Instant::now() + timeout;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Some((code, std::fs::read_to_string(&err_path).unwrap_or_default()))
}

/// A hook that exists and has an x bit, but only for its owner (root), cannot be
/// run by leaderd running as another user: check-config and run refuse it as that user.
#[test]
fn a_hook_that_this_user_may_not_execute_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    if !support::tools::root_or_skip(&format!(
        "owning the script and running leaderd as uid {NOBODY} need root"
    )) {
        return;
    }
    let open = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(dir.path(), open).unwrap();
    let script = dir.path().join("root-only.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
    let hook = format!(
        "hooks:\n  on_acquired: [{:?}]\n",
        script.display().to_string()
    );
    let path = write(dir.path(), &format!("{}{hook}", base_config()));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();

    // As root the script may run.
    let ok = cli(&["check-config", "--config", &path]);
    assert_eq!(ok.code, Some(0), "{ok:?}");
    for command in ["check-config", "run"] {
        let args = [command, "--config", &path];
        let Some((code, stderr)) = run_as_nobody(&args, Duration::from_secs(5)) else {
            return;
        };
        let what = format!("{command} as uid {NOBODY}");
        assert_eq!(code, Some(2), "{what}: {stderr}");
        let line = stderr.trim();
        assert_eq!(line.lines().count(), 1, "{what}: {stderr}");
        assert!(
            line.contains("hooks.on_acquired[0]") && line.contains("not executable"),
            "{what}: {line}"
        );
    }
}

/// An exec program that cannot be found or run is refused like a hook's, naming
/// `exec.command` and the value, whether it comes from the file or from `run -- COMMAND`.
#[test]
fn an_exec_program_that_cannot_run_is_refused_naming_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("not-executable.sh");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let plain = plain.display().to_string();
    let cases = [
        ("/nonexistent/cmd", "cannot be found"),
        ("no-such-program-xyz", "cannot be found on PATH"),
        (plain.as_str(), "not executable"),
    ];
    for (program, why) in cases {
        let exec = format!("exec:\n  command: [{program:?}, \"x\"]\n  grace_period: 100ms\n");
        let path = write(dir.path(), &format!("{}{exec}", base_config()));
        for command in ["check-config", "run"] {
            let out = cli(&[command, "--config", &path]);
            let what = format!("{command} with exec.command [{program}]");
            assert_one_line_error(&out, &["exec.command[0]", program, why], &what);
        }
        let exec = "exec:\n  grace_period: 100ms\n";
        let path = write(dir.path(), &format!("{}{exec}", base_config()));
        let out = cli(&["run", "--config", &path, "--", program, "x"]);
        let what = format!("run -- {program}");
        assert_one_line_error(&out, &["exec.command[0]", "--", program, why], &what);
    }
}

/// check-config and run list every problem at once, including those the Redis
/// client would find (a URL it cannot parse, `min_replicas_ack` with Redlock).
#[test]
fn problems_the_redis_client_finds_come_with_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let base = base_config();
    let url_line = base.lines().find(|l| l.contains("url: redis://")).unwrap();
    let cases = [
        (
            "  mode: redlock\n  urls: [redis://127.0.0.1:1, redis://127.0.0.1:2, redis://127.0.0.1:3]\n  min_replicas_ack: 1",
            vec!["redis.min_replicas_ack: 1", "election.jitter"],
        ),
        (
            "  url: redis://127.0.0.1:1/notanumber",
            vec!["redis.url: \"redis://127.0.0.1:1/notanumber\"", "election.jitter"],
        ),
        (
            "  mode: sentinel",
            vec!["redis.sentinels", "redis.master_name", "election.jitter"],
        ),
    ];
    for (redis, lines) in cases {
        let text = base
            .replacen(url_line, redis, 1)
            .replacen("jitter: 0.2", "jitter: 2", 1);
        let path = write(dir.path(), &text);
        for command in ["check-config", "run"] {
            let out = cli(&[command, "--config", &path]);
            assert_eq!(out.code, Some(2), "{command}: {out:?}");
            let got: Vec<&str> = out.stderr.lines().collect();
            assert_eq!(got.len(), lines.len(), "{command}: {out:?}");
            for want in &lines {
                assert!(
                    got.iter().any(|l| l.contains(want)),
                    "{command}: {want:?} not in {out:?}"
                );
            }
        }
    }
}

/// A `${VAR}` whose value is not UTF-8 is reported once, as such (not as unset),
/// naming the variable and the key.
#[test]
fn a_variable_that_is_not_utf8_is_named_as_such() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let text = base_config().replacen("identity: replica-a", "identity: ${LEADERD_TEST_POD}", 1);
    let path = write(dir.path(), &text);
    let out = std::process::Command::new(support::leaderd_bin())
        .args(["check-config", "--config", &path])
        .env("LEADERD_TEST_POD", std::ffi::OsStr::from_bytes(b"pod\xff"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("identity: ${LEADERD_TEST_POD}: environment variable LEADERD_TEST_POD")
            && stderr.contains("not valid UTF-8")
            && !stderr.contains("not set"),
        "{stderr}"
    );
}

/// A config file that starts with a UTF-8 byte order mark (as some editors
/// write them) is read like one without.
#[test]
fn a_byte_order_mark_at_the_start_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &format!("\u{feff}{}", base_config()));
    let out = cli(&["check-config", "--config", &path]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("name: cfg"), "{out:?}");
}

/// Bad usage is one line naming the flag or command (with the command's usage when clap
/// gives it), and exit 2.
#[test]
fn bad_usage_is_one_line_and_exit_2() {
    let cases: [(&[&str], &str); 4] = [
        (&["run", "--bogus"], "'--bogus'"),
        (&["frob"], "'frob'"),
        (&["status", "--json", "--timeout", "3s"], "'--timeout'"),
        (&["handover", "--to"], "'--to <IDENTITY>'"),
    ];
    for (args, named) in cases {
        let out = support::run_cli(args, &[], Duration::from_secs(5));
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line: {out:?}");
        assert!(lines[0].starts_with("leaderd: "), "{out:?}");
        assert!(lines[0].contains(named), "{args:?}: {out:?}");
    }
    let out = support::run_cli(&["run", "--bogus"], &[], Duration::from_secs(5));
    assert!(out.stderr.contains("usage: leaderd run"), "{out:?}");
    let out = support::run_cli(&["--version"], &[], Duration::from_secs(5));
    assert_eq!(out.code, Some(0), "{out:?}");
}
