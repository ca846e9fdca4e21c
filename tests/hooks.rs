//! Hooks with the real daemon, real redis-server and real hook processes: each event once
//! and in order with its environment; a 60 s hook never delays the election; a hung hook is
//! SIGKILLed with its group; every run logs `hook_finished` with a code; the queue bound;
//! queued hooks on shutdown; bad commands.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::safety::{event_name, field, field_u64};
use support::{keys, now_ms, run_cli, wait_until, Daemon, DaemonOpts, RedisServer};

const STEP: Duration = Duration::from_millis(20);

fn recorder(out: &Path, extra: &str) -> String {
    let script = format!(
        "{extra}echo \"$LEADERD_EVENT|$LEADERD_FENCE|$LEADERD_LEADER|${{LEADERD_REASON-unset}}|${{LEADERD_LEASE_VALID_UNTIL_MS-unset}}|$LEADERD_NAME|$LEADERD_IDENTITY\" >> {}",
        out.display()
    )
    .replace("${", "$${"); // a literal `${` in config.yaml
    serde_json::to_string(&["sh", "-c", &script]).unwrap()
}

fn hooks_yaml(acquired: &str, stepped: &str, changed: &str, timeout: &str) -> String {
    format!(
        "hooks:\n  on_acquired: {acquired}\n  on_stepped_down: {stepped}\n  on_leader_changed: {changed}\n  timeout: {timeout}\n"
    )
}

fn wait_event(d: &Daemon, name: &str, count: usize, timeout: Duration) -> Vec<Value> {
    wait_until(timeout, STEP, || {
        let evs = d.events_named(name);
        (evs.len() >= count).then_some(evs)
    })
    .unwrap_or_else(|| panic!("{}: fewer than {count} {name} in {timeout:?}", d.identity()))
}

fn lines(path: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

fn metric(d: &Daemon, series: &str) -> Option<f64> {
    let (_, body) = d.get("/metrics");
    body.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn each_event_runs_once_in_order_with_its_environment() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events");
    let rec = recorder(&out, "");
    let mut a = DaemonOpts::new("hooks-order", "a", &redis.url());
    a.extra_yaml = hooks_yaml(&rec, &rec, &rec, "5s");
    let a = Daemon::spawn(&a);
    let acquired = wait_event(&a, "acquired", 1, Duration::from_secs(10));
    let b = Daemon::spawn(&DaemonOpts::new("hooks-order", "b", &redis.url()));
    std::thread::sleep(Duration::from_millis(500));
    a.signal(Signal::SIGUSR1);
    let stepped = wait_event(&a, "stepped_down", 1, Duration::from_secs(5));
    let b_acq = wait_event(&b, "acquired", 1, Duration::from_secs(10));
    wait_until(Duration::from_secs(10), STEP, || {
        lines(&out)
            .iter()
            .any(|l| l[0] == "leader_changed" && l[2] == "b")
            .then_some(())
    })
    .expect("a runs on_leader_changed for b");

    // The first observation (a fresh Redis: quarantined, nobody leads) comes first.
    let got = lines(&out);
    let start = got.iter().position(|l| l[0] == "acquired").unwrap();
    assert!(
        got[..start]
            .iter()
            .all(|l| l[0] == "leader_changed" && l[2].is_empty()),
        "{got:?}"
    );
    let got = got[start..].to_vec();
    let fence = field_u64(&acquired[0], "fence").unwrap().to_string();
    let valid = field_u64(&acquired[0], "lease_valid_until_ms")
        .unwrap()
        .to_string();
    assert_eq!(
        got[0],
        ["acquired", &fence, "a", "unset", &valid, "hooks-order", "a"],
        "{got:?}"
    );
    assert_eq!(
        got[1],
        [
            "stepped_down",
            &fence,
            "",
            "yield",
            "unset",
            "hooks-order",
            "a"
        ],
        "{got:?}"
    );
    let b_fence = field_u64(&b_acq[0], "fence").unwrap().to_string();
    let rest = &got[2..];
    assert!(
        rest.iter()
            .all(|l| l[0] == "leader_changed" && l[3] == "unset" && l[4] == "unset"),
        "{got:?}"
    );
    let last = rest.last().unwrap();
    assert_eq!(
        (last[1].as_str(), last[2].as_str()),
        (b_fence.as_str(), "b"),
        "{got:?}"
    );
    // Each leader_changed is one logged leader_changed (after the step-down), run once.
    let logged = a.events_named("leader_changed").len();
    let after_step = logged - count_before(&a, "leader_changed", &stepped[0]);
    assert_eq!(rest.len(), after_step, "{got:?}");
    // on_stepped_down ran after `stepped_down` was logged: its hook_finished comes later.
    let events = a.log_events();
    let pos = |pred: &dyn Fn(&Value) -> bool| events.iter().position(pred).unwrap();
    let step_at = pos(&|e| event_name(e) == Some("stepped_down"));
    let acq_at = pos(&|e| event_name(e) == Some("acquired"));
    let finished = |hook: &str| {
        events
            .iter()
            .position(|e| {
                event_name(e) == Some("hook_finished")
                    && field(e, "hook").and_then(Value::as_str) == Some(hook)
            })
            .unwrap_or_else(|| panic!("no hook_finished for {hook}"))
    };
    assert!(finished("on_acquired") > acq_at);
    assert!(finished("on_stepped_down") > step_at);
    let first = &events[finished("on_acquired")];
    assert_eq!(field_u64(first, "code"), Some(0));
    assert!(field_u64(first, "elapsed_ms").is_some());
    assert_eq!(
        metric(
            &a,
            "leaderd_hook_runs_total{hook=\"on_acquired\",name=\"hooks-order\",result=\"ok\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &a,
            "leaderd_hook_runs_total{hook=\"on_stepped_down\",name=\"hooks-order\",result=\"ok\"}"
        ),
        Some(1.0)
    );
}

/// How many `name` events come before `marker` in the log.
fn count_before(d: &Daemon, name: &str, marker: &Value) -> usize {
    d.log_events()
        .iter()
        .take_while(|e| *e != marker)
        .filter(|e| event_name(e) == Some(name))
        .count()
}

#[test]
fn a_sixty_second_hook_delays_no_renewal_step_down_or_handover() {
    let redis = RedisServer::start();
    let sleep = r#"["sh", "-c", "sleep 60"]"#;
    let mut a = DaemonOpts::new("hooks-slow", "a", &redis.url());
    a.extra_yaml = hooks_yaml(sleep, sleep, sleep, "2m");
    let a = Daemon::spawn(&a);
    let acquired = wait_event(&a, "acquired", 1, Duration::from_secs(10));
    let b = Daemon::spawn(&DaemonOpts::new("hooks-slow", "b", &redis.url()));
    // Renewals go on every retry_period (300ms) while on_acquired sleeps.
    std::thread::sleep(Duration::from_millis(2000));
    let renewed = a.events_named("renewed");
    assert!(renewed.len() >= 4, "only {} renewals in 2 s", renewed.len());
    let valid: Vec<u64> = std::iter::once(&acquired[0])
        .chain(&renewed)
        .filter_map(|e| field_u64(e, "lease_valid_until_ms"))
        .collect();
    for pair in valid.windows(2) {
        assert!(
            pair[1] - pair[0] < 1400,
            "a renew gap of {} ms",
            pair[1] - pair[0]
        );
    }
    let sent = now_ms();
    a.signal(Signal::SIGUSR1);
    let stepped = wait_event(&a, "stepped_down", 1, Duration::from_secs(5));
    let ended = field_u64(&stepped[0], "ended_at_ms").unwrap();
    assert!(
        ended.saturating_sub(sent) < 1000,
        "step-down took {} ms",
        ended - sent
    );
    let b_acq = wait_event(&b, "acquired", 1, Duration::from_secs(5));
    let handover = field_u64(&b_acq[0], "acquired_at_ms").unwrap();
    assert!(
        handover.saturating_sub(sent) < 2000,
        "handover took {} ms",
        handover - sent
    );
    assert!(
        a.events_named("hook_finished").is_empty(),
        "the 60 s hook is still running"
    );
}

#[test]
fn a_hung_hook_is_killed_with_its_group_at_the_timeout() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild");
    let script = format!("sleep 300 & echo $! > {}; sleep 300", pidfile.display());
    let cmd = serde_json::to_string(&["sh", "-c", &script]).unwrap();
    let mut o = DaemonOpts::new("hooks-hung", "a", &redis.url());
    o.extra_yaml = hooks_yaml(&cmd, "[]", "[]", "700ms");
    let d = Daemon::spawn(&o);
    // Timed from outside: from the hook's grandchild being started to its being killed.
    let fast = Duration::from_millis(5);
    let pid: i32 = wait_until(Duration::from_secs(10), fast, || {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    })
    .expect("the hook starts");
    let started = Instant::now();
    let gone = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next();
        stat.is_empty() || state == Some("Z")
    };
    wait_until(Duration::from_secs(5), fast, || gone(pid).then_some(()))
        .unwrap_or_else(|| panic!("the hook's grandchild {pid} outlived the timeout"));
    let ran = started.elapsed();
    println!("the hung hook was killed {ran:?} after it started");
    // The 700 ms timeout, counted from the hook's start (a few ms before its grandchild's);
    // 150 ms of slack for a debug build on a loaded 2-core machine.
    assert!(
        (Duration::from_millis(650)..Duration::from_millis(850)).contains(&ran),
        "the hung hook was killed {ran:?} after it started (timeout 700 ms)"
    );
    let failed = wait_event(&d, "hook_failed", 1, Duration::from_secs(10));
    assert_eq!(
        field(&failed[0], "reason").and_then(Value::as_str),
        Some("timeout")
    );
    let finished = wait_event(&d, "hook_finished", 1, Duration::from_secs(5));
    assert_eq!(
        field_u64(&finished[0], "code"),
        Some(128 + 9),
        "{}",
        finished[0]
    );
    assert!(field_u64(&finished[0], "elapsed_ms").is_some());
    assert_eq!(
        metric(
            &d,
            "leaderd_hook_runs_total{hook=\"on_acquired\",name=\"hooks-hung\",result=\"timeout\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn every_run_logs_one_hook_finished_with_a_code_even_when_the_hook_cannot_start() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Found and executable (the configuration accepts it), yet exec fails: ENOENT.
    let script = dir.path().join("bad-interpreter");
    std::fs::write(&script, "#!/nonexistent/interpreter\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bad = serde_json::to_string(&[script.display().to_string()]).unwrap();
    let fail = r#"["sh", "-c", "exit 3"]"#;
    let mut o = DaemonOpts::new("hooks-codes", "a", &redis.url());
    o.extra_yaml = hooks_yaml(&bad, fail, "[]", "5s");
    let d = Daemon::spawn(&o);
    wait_event(&d, "acquired", 1, Duration::from_secs(10));
    d.signal(Signal::SIGUSR1);
    let finished = wait_event(&d, "hook_finished", 2, Duration::from_secs(10));
    let of = |hook: &str| -> Vec<&Value> {
        finished
            .iter()
            .filter(|e| field(e, "hook").and_then(Value::as_str) == Some(hook))
            .collect()
    };
    let (start, exit) = (of("on_acquired"), of("on_stepped_down"));
    assert_eq!((start.len(), exit.len()), (1, 1), "{finished:?}");
    assert_eq!(field_u64(start[0], "code"), Some(127), "{}", start[0]);
    assert_eq!(field_u64(exit[0], "code"), Some(3), "{}", exit[0]);
    assert!(finished
        .iter()
        .all(|e| field_u64(e, "elapsed_ms").is_some()));
    let failed = d.events_named("hook_failed");
    let reasons: Vec<_> = failed
        .iter()
        .map(|e| field(e, "reason").and_then(Value::as_str).unwrap_or(""))
        .collect();
    assert_eq!(reasons, ["start", "exit"], "{failed:?}");
    assert!(failed
        .iter()
        .all(|e| field(e, "level").and_then(Value::as_str) == Some("WARN")));
}

#[test]
fn a_full_queue_drops_the_oldest_waiting_and_counts_them() {
    let redis = RedisServer::start();
    let sleep = r#"["sh", "-c", "sleep 60"]"#;
    let mut o = DaemonOpts::new("hooks-queue", "f", &redis.url());
    o.retry = "40ms".into();
    o.command_timeout = "30ms".into();
    o.extra_yaml = hooks_yaml("[]", "[]", sleep, "90s");
    // Never contends: the lease is always held by someone the test writes.
    let key = &keys("hooks-queue").lock;
    redis.cmd(&["HSET", key, "holder", "x0", "fence", "1"]);
    redis.cmd(&["PEXPIRE", key, "60000"]);
    let d = Daemon::spawn(&o);
    wait_event(&d, "leader_changed", 1, Duration::from_secs(10));
    let changes = 110;
    for i in 1..=changes {
        let holder = format!("x{i}");
        redis.cmd(&[
            "HSET",
            key,
            "holder",
            &holder,
            "fence",
            &(i + 1).to_string(),
        ]);
        // A new term is announced (a quiet follower does not poll a held lease).
        let acquired = format!(
            r#"{{"event":"acquired","holder":"{holder}","fence":{}}}"#,
            i + 1
        );
        redis.cmd(&["PUBLISH", &keys("hooks-queue").released, &acquired]);
        wait_until(Duration::from_secs(5), Duration::from_millis(5), || {
            d.events_named("leader_changed")
                .iter()
                .any(|e| field(e, "leader").and_then(Value::as_str) == Some(holder.as_str()))
                .then_some(())
        })
        .unwrap_or_else(|| panic!("leader {holder} not observed"));
    }
    let logged = d.events_named("leader_changed").len();
    assert!(logged > changes, "{logged}");
    // One runs (60 s), 100 wait, the rest were dropped.
    let dropped = metric(&d, "leaderd_hook_runs_total{hook=\"on_leader_changed\",name=\"hooks-queue\",result=\"dropped\"}");
    assert_eq!(dropped, Some((logged - 1 - 100) as f64));
}

#[test]
fn queued_hooks_run_on_shutdown_within_the_grace_period_then_are_dropped() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events");
    let slow = recorder(&out, "sleep 0.5; ");
    let mut o = DaemonOpts::new("hooks-shutdown", "a", &redis.url());
    o.extra_yaml = hooks_yaml(&slow, &slow, "[]", "10s") + "exec:\n  grace_period: 1500ms\n";
    let mut d = Daemon::spawn(&o);
    wait_event(&d, "acquired", 1, Duration::from_secs(10));
    d.signal(Signal::SIGTERM);
    let sent = Instant::now();
    assert_eq!(d.wait_exit(Duration::from_secs(5)), Some(0));
    assert!(
        sent.elapsed() < Duration::from_millis(2500 + 1000),
        "{:?}",
        sent.elapsed()
    );
    let got: Vec<String> = lines(&out).into_iter().map(|l| l[0].clone()).collect();
    assert_eq!(got, ["acquired", "stepped_down"]);

    // Hooks that cannot finish within the grace period are killed or dropped.
    let long = recorder(&out, "sleep 5; ");
    let mut o = DaemonOpts::new("hooks-shutdown-2", "a", &redis.url());
    o.extra_yaml = hooks_yaml(&long, &long, "[]", "10s") + "exec:\n  grace_period: 1s\n";
    let mut d = Daemon::spawn(&o);
    wait_event(&d, "acquired", 1, Duration::from_secs(10));
    d.signal(Signal::SIGTERM);
    let sent = Instant::now();
    assert_eq!(d.wait_exit(Duration::from_secs(5)), Some(0));
    assert!(
        sent.elapsed() < Duration::from_millis(2000 + 1000),
        "{:?}",
        sent.elapsed()
    );
    let dropped = d.events_named("hook_dropped");
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(
        field(&dropped[0], "hook").and_then(Value::as_str),
        Some("on_stepped_down")
    );
}

#[test]
fn check_config_rejects_a_hook_that_cannot_run_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("not-executable.sh");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    for (key, program) in [
        ("hooks.on_acquired", "no-such-hook-program".to_string()),
        ("hooks.on_stepped_down", plain.display().to_string()),
        ("hooks.on_leader_changed", "/nonexistent/hook".to_string()),
    ] {
        let leaf = key.rsplit('.').next().unwrap();
        let cfg = dir.path().join("config.yaml");
        std::fs::write(
            &cfg,
            format!("name: e\nidentity: a\nhooks:\n  {leaf}: [{program:?}, \"x\"]\n"),
        )
        .unwrap();
        for cmd in ["check-config", "run"] {
            let out = run_cli(
                &[cmd, "--config", cfg.to_str().unwrap()],
                &[],
                Duration::from_secs(10),
            );
            assert_eq!(out.code, Some(2), "{cmd} {key}: {out:?}");
            assert!(out.stderr.contains(key), "{cmd}: {}", out.stderr);
        }
    }
}
