//! Issue 15's attacks and faults, each reproduced against the real binary: a closed stderr,
//! a huge or forged holder planted in Redis, a YAML alias bomb, a non-UTF-8 environment,
//! passwords with awkward characters, and secrets in a child's environment.

mod support;

use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::{keys, run_cli, wait_until, DaemonOpts, RedisServer};

const STEP: Duration = Duration::from_millis(50);

/// `leaderd run` with `opts`' config, stderr a pipe whose read end the test holds.
fn spawn_piped(opts: &DaemonOpts, dir: &std::path::Path) -> (Child, u16) {
    let port = support::free_port();
    let config = dir.join(format!("{}.yaml", opts.identity));
    let file = dir.join(format!("{}.json", opts.identity));
    let mut yaml = support::daemon::render_config(opts, port, &file);
    yaml = yaml.replace("format: json", "format: text");
    std::fs::write(&config, yaml).unwrap();
    let child = Command::new(support::leaderd_bin())
        .arg("run")
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, port)
}

fn status_doc(port: u16) -> Option<serde_json::Value> {
    let addr = ([127, 0, 0, 1], port).into();
    match support::daemon::http_request(addr, "GET", "/leader", Duration::from_secs(1)) {
        (200, body) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

fn evalsha_calls(redis: &RedisServer) -> u64 {
    let stats = redis.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|v| v.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    wait_until(within, STEP, || child.try_wait().ok().flatten()).and_then(|s| s.code())
}

#[test]
fn a_closed_stderr_neither_crashes_nor_wedges_the_election() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let leader_opts = DaemonOpts::new("stderr", "pod-a", &redis.url());
    let (mut leader, leader_port) = spawn_piped(&leader_opts, dir.path());
    wait_until(Duration::from_secs(10), STEP, || {
        status_doc(leader_port).filter(|d| d["is_leader"] == true)
    })
    .expect("pod-a leads");
    let follower_opts = DaemonOpts::new("stderr", "pod-b", &redis.url());
    let (mut follower, follower_port) = spawn_piped(&follower_opts, dir.path());
    wait_until(Duration::from_secs(10), STEP, || status_doc(follower_port)).expect("pod-b runs");
    // Close both read ends: every later log line meets EPIPE.
    drop(leader.stderr.take());
    drop(follower.stderr.take());
    // Signals that log: a yield request on the follower (nothing to yield), then its renews
    // and polls go on; a spinning follower would run thousands of scripts a second.
    kill(Pid::from_raw(follower.id() as i32), Signal::SIGUSR1).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let before = evalsha_calls(&redis);
    std::thread::sleep(Duration::from_secs(2));
    let calls = evalsha_calls(&redis) - before;
    // Leader renews every 300 ms, follower polls every 300-360 ms: about 13 in 2 s.
    assert!(calls < 60, "{calls} scripts in 2 s: something spins");
    assert!(
        follower.try_wait().unwrap().is_none(),
        "the follower is alive"
    );
    let doc = status_doc(leader_port).expect("the leader answers");
    assert_eq!(doc["is_leader"], true, "still leading with a closed stderr");
    // SIGTERM with a closed stderr: acted on, lease released, exit 0.
    kill(Pid::from_raw(leader.id() as i32), Signal::SIGTERM).unwrap();
    let code = wait_exit(&mut leader, Duration::from_secs(5));
    assert_eq!(code, Some(0), "the leader exits 0");
    let holder = wait_until(Duration::from_secs(3), STEP, || {
        let h = redis.cmd(&["HGET", &keys("stderr").lock, "holder"]);
        (h != "pod-a").then_some(h)
    });
    assert!(holder.is_some(), "pod-a released the lease");
    kill(Pid::from_raw(follower.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(wait_exit(&mut follower, Duration::from_secs(5)), Some(0));
}

#[test]
fn a_huge_forged_holder_is_bounded_and_escaped() {
    let redis = RedisServer::start();
    let key = &keys("big").lock;
    // 50 MB of holder with a forged log line and an escape sequence at its start.
    let head = "evil\nINFO acquired fence=99 \u{1b}[2J";
    let holder = format!("{head}{}", "x".repeat(50 * 1024 * 1024));
    let mut conn = support::RespConn::connect(redis.addr(), Duration::from_secs(10)).unwrap();
    conn.call(&["SET", &keys("big").fence, "5"]).unwrap();
    conn.call(&["HSET", key, "holder", &holder, "token", "t", "fence", "5"])
        .unwrap();
    conn.call(&["PEXPIRE", key, "60000"]).unwrap();
    drop(holder);
    let dir = tempfile::tempdir().unwrap();
    let mut opts = DaemonOpts::new("big", "pod-b", &redis.url());
    // Copying 50 MB out of the hash inside the script takes Redis about 0.4 s.
    opts.command_timeout = "1500ms".into();
    opts.retry = "2s".into();
    opts.renew_deadline = "4s".into();
    opts.lease = "6s".into();
    let log_path = dir.path().join("log");
    let port = support::free_port();
    let config = dir.path().join("c.yaml");
    let yaml = support::daemon::render_config(&opts, port, &dir.path().join("l.json"))
        .replace("format: json", "format: text");
    std::fs::write(&config, yaml).unwrap();
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(support::leaderd_bin())
        .args(["run", "--config"])
        .arg(&config)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let doc = wait_until(Duration::from_secs(15), STEP, || {
        status_doc(port).filter(|d| !d["leader"].is_null())
    });
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
        let rss: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        peak = peak.max(rss);
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = run_cli(
        &["status", "--config", config.to_str().unwrap()],
        &[],
        Duration::from_secs(20),
    );
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    let _ = wait_exit(&mut child, Duration::from_secs(5));
    let _ = child.kill();
    let _ = child.wait();
    let logged = std::fs::read(&log_path).unwrap();
    let doc = doc.unwrap_or_else(|| {
        panic!(
            "the follower publishes the holder:\n{}",
            String::from_utf8_lossy(&logged[..logged.len().min(8000)])
        )
    });
    let leader = doc["leader"].as_str().unwrap();
    assert!(
        leader.len() <= 256,
        "the published holder is bounded: {} bytes",
        leader.len()
    );
    assert!(peak < 64 * 1024, "follower RSS {peak} KiB");
    for line in logged.split(|b| *b == b'\n') {
        assert!(line.len() < 4096, "a log line of {} bytes", line.len());
        assert!(!line.contains(&0x1b), "a raw ESC in the log");
        assert!(!line.starts_with(b"INFO acquired"), "a forged log line");
    }
    assert!(
        status.stdout.len() < 1024,
        "status printed {} bytes",
        status.stdout.len()
    );
    assert!(
        !status.stdout.contains('\u{1b}'),
        "raw ESC in status: {:?}",
        status.stdout
    );
    // The holder stays on the first line; every further line is a candidate (indented), so
    // the forged newline made no line of its own.
    let mut lines = status.stdout.lines();
    let first = lines.next().unwrap_or_default();
    assert!(first.contains("held by evil"), "{}", status.stdout);
    assert!(lines.all(|l| l.starts_with("  ")), "{}", status.stdout);
}

#[test]
fn a_yaml_alias_bomb_is_refused_in_one_line_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut bomb = String::from("name: x\nlol0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb += &format!("lol{i}: &a{i} [{refs}]\n");
    }
    let path = dir.path().join("bomb.yaml");
    std::fs::write(&path, &bomb).unwrap();
    let t0 = Instant::now();
    let out = run_cli(
        &["check-config", "--config", path.to_str().unwrap()],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("anchors and aliases"), "{}", out.stderr);
    let big = dir.path().join("big.yaml");
    let mut text = String::from("name: x\n");
    text += &format!("# {}\n", "p".repeat(2 * 1024 * 1024));
    std::fs::write(&big, text).unwrap();
    let out = run_cli(
        &["check-config", "--config", big.to_str().unwrap()],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("1 MiB"), "{}", out.stderr);
}

#[test]
fn an_environment_value_that_is_not_utf8_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "name: x\nidentity: me\n").unwrap();
    let out = Command::new(support::leaderd_bin())
        .args(["check-config", "--config"])
        .arg(&path)
        .env(
            "LEADERD_REDIS_PASSWORD",
            std::ffi::OsStr::from_bytes(b"pass\xff"),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("LEADERD_REDIS_PASSWORD"), "{stderr}");
    assert!(stderr.contains("not valid UTF-8"), "{stderr}");
}

#[test]
fn passwords_with_quotes_spaces_and_slashes_never_show() {
    let dir = tempfile::tempdir().unwrap();
    for password in ["p\"w 0rd", "a/b#c?d", "x'y@z"] {
        let path = dir.path().join("c.yaml");
        let url = format!("redis://:{password}@127.0.0.1:1/0");
        let yaml = format!(
            "name: x\nidentity: me\nredis:\n  url: {}\n",
            serde_json::to_string(&url).unwrap()
        );
        std::fs::write(&path, yaml).unwrap();
        let out = run_cli(
            &["check-config", "--config", path.to_str().unwrap()],
            &[],
            Duration::from_secs(10),
        );
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(!all.contains(password), "{password:?} shown:\n{all}");
        assert!(all.contains("<redacted>"), "{all}");
    }
    let path = dir.path().join("h.yaml");
    std::fs::write(
        &path,
        "name: x\nidentity: me\nelection:\n  health_check:\n    http_get: http://u:secret@127.0.0.1:1/h\n",
    )
    .unwrap();
    let out = run_cli(
        &["check-config", "--config", path.to_str().unwrap()],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("user information"), "{}", out.stderr);
    assert!(!out.stderr.contains("secret"), "{}", out.stderr);
}

#[test]
fn neither_the_child_nor_the_health_check_inherits_a_secret() {
    let redis = RedisServer::start_with_args(&["--requirepass", "s3cr3t-pw"]);
    let dir = tempfile::tempdir().unwrap();
    let child_env = dir.path().join("child.env");
    let check_env = dir.path().join("check.env");
    let url = format!("redis://:s3cr3t-pw@127.0.0.1:{}/0", redis.port());
    let mut opts = DaemonOpts::new("env", "pod-a", "");
    opts.env = vec![
        ("LEADERD_REDIS_URL".into(), url),
        ("OTHER_PLACE".into(), "has s3cr3t-pw in it".into()),
        ("HARMLESS".into(), "kept".into()),
    ];
    opts.extra_yaml = format!(
        "exec:\n  grace_period: 200ms\nelection:\n  health_check:\n    command: [sh, -c, \"env > {}\"]\n    period: 300ms\n    timeout: 200ms\n",
        check_env.display()
    );
    opts.exec = vec![
        "sh".into(),
        "-c".into(),
        format!("env > {}; sleep 30", child_env.display()),
    ];
    let d = support::Daemon::spawn(&opts);
    let written = wait_until(Duration::from_secs(15), STEP, || {
        let c = std::fs::read_to_string(&child_env).ok()?;
        let h = std::fs::read_to_string(&check_env).ok()?;
        (c.contains("LEADERD_FENCE") && h.contains("HARMLESS")).then_some((c, h))
    });
    let (child, check) = written.unwrap_or_else(|| panic!("no env written:\n{}", d.log()));
    for env in [&child, &check] {
        assert!(!env.contains("s3cr3t-pw"), "a secret leaked:\n{env}");
        assert!(env.contains("HARMLESS=kept"), "{env}");
    }
    drop(d);
}

#[test]
fn a_planted_temp_symlink_does_not_redirect_the_leader_file() {
    let redis = RedisServer::start();
    let d = support::Daemon::spawn(&DaemonOpts::new("link", "pod-a", &redis.url()));
    let victim = d.dir().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::os::unix::fs::symlink(&victim, d.dir().join("leader.json.tmp")).unwrap();
    let led = wait_until(Duration::from_secs(10), STEP, || {
        d.file_doc().filter(|doc| doc["is_leader"] == true)
    });
    assert!(led.is_some(), "{}", d.log());
    std::thread::sleep(Duration::from_secs(1)); // a few more rewrites at renewals
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.leader_file())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o644);
}

#[test]
fn a_password_file_others_can_read_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("pw");
    std::fs::write(&secret, "hunter2\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = dir.path().join("c.yaml");
    let yaml = format!(
        "name: x\nidentity: me\nredis:\n  password_file: {}\n",
        secret.display()
    );
    std::fs::write(&path, yaml).unwrap();
    let args = ["check-config", "--config", path.to_str().unwrap()];
    let out = run_cli(&args, &[], Duration::from_secs(10));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("redis.password_file")
            && out.stderr.contains("readable by group or others"),
        "{}",
        out.stderr
    );
    assert!(!out.stdout.contains("hunter2") && !out.stderr.contains("hunter2"));
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = run_cli(&args, &[], Duration::from_secs(10));
    assert!(!out.stderr.contains("readable"), "{}", out.stderr);
}

#[test]
fn identities_are_bounded_to_256_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    let check = |identity: &str| {
        let yaml = format!(
            "name: x\nidentity: {}\n",
            serde_json::to_string(identity).unwrap()
        );
        std::fs::write(&path, yaml).unwrap();
        run_cli(
            &["check-config", "--config", path.to_str().unwrap()],
            &[],
            Duration::from_secs(10),
        )
    };
    assert_eq!(
        check(&"é".repeat(128)).code,
        Some(0),
        "256 bytes are allowed"
    );
    let out = check(&"a".repeat(257));
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("1-256 bytes"), "{}", out.stderr);
    assert_eq!(check("a\u{1b}b").code, Some(2));
}
