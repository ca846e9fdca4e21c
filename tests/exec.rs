//! Exec mode with real processes: a child that writes `<unix_ms> <fence>` lines every few ms
//! must never run beside another term's child, nor after its own term's validity, whatever
//! happens to leaderd (SIGKILL, SIGSTOP, SIGTERM), to Redis or to the link; children die
//! with their whole process group; `on_exit` both ways; a child that cannot start is a WARN
//! line of leaderd.

mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::election::lock_exists;
use support::exec::*;
use support::logs::{u64_of, wait_event};
use support::safety::{event_name, field};
use support::{check_logs, wait_leader, wait_until, Daemon, Proxy, RedisServer, POLL, SLOW};

#[test]
fn children_never_overlap_across_kills_pauses_restarts_and_cuts() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lines");
    let proxies: Vec<Proxy> = (0..3).map(|_| Proxy::start(redis.addr())).collect();
    let mut ds: Vec<Daemon> = ["a", "b", "c"]
        .iter()
        .zip(&proxies)
        .map(|(id, p)| Daemon::spawn(&opts("chaos", id, &p.url(), GRACE_300, writer(&out, false))))
        .collect();
    let all = [0, 1, 2];
    let others = |i: usize| all.iter().copied().filter(|&j| j != i).collect::<Vec<_>>();
    // Before the next fault: the leader's child has run (a few lines) and every replica
    // names the leader's term.
    let settle = |ds: &[Daemon]| {
        wait_until(SLOW, POLL, || {
            let docs: Vec<Value> = ds.iter().map(Daemon::status_doc).collect::<Option<_>>()?;
            let leader = docs.iter().find(|d| d["is_leader"] == true)?;
            let fence = leader["fence"].as_u64()?;
            let ran = spans(&out).get(&fence).is_some_and(|s| s.2 >= 10);
            let named = docs.iter().all(|d| d["fence"].as_u64() == Some(fence));
            (ran && named).then_some(())
        })
        .expect("the election settles: one leader whose child runs, named by every replica");
    };

    // SIGKILL of the leader: its child dies with it, the lease passes at its expiry.
    let l = wait_leader(&ds, &all, SLOW);
    settle(&ds);
    ds[l].kill();
    let next = wait_leader(&ds, &others(l), SLOW);
    ds[l].restart();
    settle(&ds);

    // SIGSTOP of the leader for two lease durations, then SIGCONT.
    let l = next;
    ds[l].signal(Signal::SIGSTOP);
    let next = wait_leader(&ds, &others(l), SLOW);
    std::thread::sleep(Duration::from_millis(2500));
    ds[l].signal(Signal::SIGCONT);
    assert_eq!(wait_leader(&ds, &all, SLOW), next);
    settle(&ds);

    // SIGTERM of the leader: child stopped, lease released, exit 0.
    let l = next;
    ds[l].signal(Signal::SIGTERM);
    assert_eq!(ds[l].wait_exit(Duration::from_secs(5)), Some(0));
    let next = wait_leader(&ds, &others(l), SLOW);
    ds[l].restart();
    settle(&ds);

    // Redis loses its data: the leader's renew fails, the new lease waits out a quarantine.
    let l = next;
    redis.restart_empty();
    let _ = wait_event(
        &ds[l],
        "stepped_down",
        ds[l].events_named("stepped_down").len() + 1,
        SLOW,
    );
    let next = wait_leader(&ds, &all, SLOW);
    settle(&ds);

    // The leader's link to Redis is cut for a while.
    let l = next;
    proxies[l].cut();
    let _ = wait_leader(&ds, &others(l), SLOW);
    proxies[l].restore();
    settle(&ds);
    let _ = wait_leader(&ds, &all, SLOW);
    settle(&ds);
    for d in &ds {
        d.signal(Signal::SIGTERM);
    }
    for d in &mut ds {
        assert_eq!(d.wait_exit(Duration::from_secs(5)), Some(0), "{}", d.log());
    }

    let refs: Vec<&Daemon> = ds.iter().collect();
    let spans = check_children(&refs, &out);
    assert!(spans.len() >= 6, "too few terms ran a child: {spans:?}");
    assert!(
        spans.values().all(|s| s.2 >= 3),
        "a child barely ran: {spans:?}"
    );
}

#[test]
fn sigstop_of_leaderd_alone_kills_its_child_before_the_validity() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lines");
    let ds: Vec<Daemon> = ["a", "b"]
        .iter()
        .map(|id| {
            Daemon::spawn(&opts(
                "pause",
                id,
                &redis.url(),
                GRACE_300,
                writer(&out, false),
            ))
        })
        .collect();
    let l = wait_leader(&ds, &[0, 1], SLOW);
    let other = 1 - l;
    let child = child_pid(&ds[l], 1);
    std::thread::sleep(Duration::from_millis(500));
    ds[l].signal(Signal::SIGSTOP); // leaderd alone: not its keeper, not the child
    let paused_at = Instant::now();
    let fence = u64_of(&ds[l].events_named("acquired")[0], "fence");
    wait_until(Duration::from_secs(4), POLL, || {
        (!alive(child)).then_some(())
    })
    .expect("the child outlived the paused leaderd's term");
    let next = wait_leader(&ds, &[other], SLOW);
    assert_eq!(next, other);
    let remaining = Duration::from_secs(4).saturating_sub(paused_at.elapsed());
    std::thread::sleep(remaining);
    ds[l].signal(Signal::SIGCONT);
    let down = wait_event(&ds[l], "stepped_down", 1, SLOW);
    assert_eq!(u64_of(&down, "fence"), fence);
    let ended = wait_event(&ds[l], "child_ended", 1, SLOW);
    assert_eq!(
        field(&ended, "cause").and_then(Value::as_str),
        Some("expired")
    );
    std::thread::sleep(Duration::from_millis(500));

    let spans = check_children(&[&ds[0], &ds[1]], &out);
    let validity = check_logs(&[ds[l].safety_log()]).unwrap()[0].last_valid_until_ms;
    let theirs: Vec<_> = spans.iter().filter(|(f, _)| **f != fence).collect();
    assert!(
        !theirs.is_empty(),
        "the other replica's child never ran: {spans:?}"
    );
    for (f, (first, _, _)) in theirs {
        assert!(
            *first > validity,
            "fence {f} started at {first}, before {validity}"
        );
    }
}

/// The keeper's watch wakes for its SIGKILL ahead of ordinary threads (`SCHED_FIFO`) where
/// this host allows real-time threads at all (`chrt -f 1` works); the child never inherits
/// that policy.
#[test]
fn the_keepers_watch_is_real_time_where_allowed_and_the_child_is_not() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lines");
    let d = Daemon::spawn(&opts(
        "rt",
        "a",
        &redis.url(),
        GRACE_300,
        writer(&out, false),
    ));
    let child = child_pid(&d, 1);
    let keeper = keeper_of(&d);
    let allowed = std::process::Command::new("chrt")
        .args(["-f", "1", "true"])
        .status()
        .is_ok_and(|s| s.success());
    // Field 41 of /proc/<pid>/stat: 0 is SCHED_OTHER, 1 SCHED_FIFO.
    let expected = if allowed { 1 } else { 0 };
    let watch = wait_until(SLOW, POLL, || policy_of(keeper).filter(|&p| p == expected));
    assert_eq!(
        watch,
        Some(expected),
        "the keeper's watch thread (real-time allowed: {allowed})"
    );
    assert_eq!(policy_of(child), Some(0), "the child's policy");
}

fn policy_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split(' ').nth(38)?.parse().ok()
}

#[test]
fn a_child_deaf_to_sigterm_is_killed_in_time() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.addr());
    let dir = tempfile::tempdir().unwrap();
    // Stop on SIGTERM of leaderd: SIGKILL after the grace period; then release, exit 0.
    let out1 = dir.path().join("term");
    let mut d = Daemon::spawn(&opts(
        "deaf1",
        "a",
        &redis.url(),
        GRACE_300,
        writer(&out1, true),
    ));
    let child = child_pid(&d, 1);
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    d.signal(Signal::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_millis(300 + 1000)), Some(0));
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "the grace period was skipped"
    );
    assert!(!alive(child));
    assert!(!lock_exists(&redis, "deaf1"), "the lease was not released");
    let down = wait_event(&d, "stepped_down", 1, SLOW);
    let ended = u64_of(&down, "ended_at_ms");
    let (_, last, _) = *spans(&out1).values().next().unwrap();
    assert!(
        last + 5 >= ended + 250,
        "SIGTERM was not ignored? last {last}, ended {ended}"
    );
    assert!(
        last <= ended + 300 + 150,
        "SIGKILL too late: last {last}, ended {ended}"
    );
    check_children(&[&d], &out1);

    // Link cut: step-down at the renew deadline; with a grace period reaching past the
    // validity, the keeper's SIGKILL comes before the validity instead.
    let out2 = dir.path().join("cut");
    let grace = "exec:\n  grace_period: 590ms\n";
    let d2 = Daemon::spawn(&opts(
        "deaf2",
        "a",
        &proxy.url(),
        grace,
        writer(&out2, true),
    ));
    let child = child_pid(&d2, 1);
    std::thread::sleep(Duration::from_millis(500));
    proxy.cut();
    let down = wait_event(&d2, "stepped_down", 1, SLOW);
    assert_eq!(
        field(&down, "reason").and_then(Value::as_str),
        Some("deadline")
    );
    wait_until(Duration::from_secs(3), POLL, || {
        (!alive(child)).then_some(())
    })
    .expect("child still alive");
    let ended = u64_of(&down, "ended_at_ms");
    let spans = check_children(&[&d2], &out2);
    let (_, last, _) = *spans.values().next().unwrap();
    assert!(
        last >= ended + 100,
        "SIGTERM was not ignored? last {last}, ended {ended}"
    );
}

#[test]
fn a_shell_wrapper_leaves_no_orphan_and_sigkill_kills_at_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild");
    let script = format!("sleep 1000 & echo $! > {}; wait", pidfile.display());
    let exec = vec!["sh".into(), "-c".into(), script];
    let mut d = Daemon::spawn(&opts("orphans", "a", &redis.url(), GRACE_300, exec));
    let read_pid = || {
        wait_until(SLOW, POLL, || {
            let text = std::fs::read_to_string(&pidfile).ok()?;
            text.trim().parse::<u32>().ok()
        })
        .expect("no grandchild pid")
    };

    // Yield: the group gets SIGTERM; the grandchild goes with the shell.
    let (shell, grandchild) = (child_pid(&d, 1), read_pid());
    assert!(alive(shell) && alive(grandchild));
    std::fs::remove_file(&pidfile).unwrap();
    d.signal(Signal::SIGUSR1);
    wait_until(Duration::from_secs(2), POLL, || {
        (!alive(shell) && !alive(grandchild)).then_some(())
    })
    .expect("the wrapper or its grandchild survived the step-down");

    // The next term (after sitting out one lease duration): SIGKILL of leaderd.
    let (shell, grandchild) = (child_pid(&d, 2), read_pid());
    let keeper = descendants(d.pid())[0];
    let t0 = Instant::now();
    d.kill();
    wait_until(Duration::from_secs(2), Duration::from_millis(5), || {
        (!alive(shell) && !alive(grandchild) && !alive(keeper)).then_some(())
    })
    .expect("leaderd's SIGKILL left its child, grandchild or keeper running");
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn on_exit_release_contends_again_and_on_exit_exit_passes_the_code() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("env");
    let sh = |script: String| vec!["sh".to_string(), "-c".to_string(), script];
    let release = sh(format!(
        "echo \"$LEADERD_NAME $LEADERD_IDENTITY $LEADERD_FENCE $LEADERD_LEADER_FILE\" >> {}; sleep 0.3; exit 3",
        env_file.display()
    ));
    let on_exit = |how| format!("exec:\n  grace_period: 300ms\n  on_exit: {how}\n");
    let r = Daemon::spawn(&opts(
        "rel",
        "a",
        &redis.url(),
        &on_exit("release"),
        release,
    ));
    let mut code7 = Daemon::spawn(&opts(
        "x7",
        "a",
        &redis.url(),
        &on_exit("exit"),
        sh("sleep 0.3; exit 7".into()),
    ));
    let mut sig = Daemon::spawn(&opts(
        "x9",
        "a",
        &redis.url(),
        &on_exit("exit"),
        sh("sleep 0.3; kill -9 $$".into()),
    ));

    assert_eq!(code7.wait_exit(SLOW), Some(7), "{}", code7.log());
    assert_eq!(sig.wait_exit(SLOW), Some(137), "{}", sig.log());
    let exited = &sig.events_named("exited")[0];
    assert_eq!(field(exited, "code").and_then(Value::as_i64), Some(137));
    for (d, name) in [(&code7, "x7"), (&sig, "x9")] {
        let down = &d.events_named("stepped_down")[0];
        assert_eq!(
            field(down, "reason").and_then(Value::as_str),
            Some("child_exit")
        );
        assert!(!lock_exists(&redis, name), "{name}: not released");
        assert_eq!(d.events_named("released").len(), 1);
    }

    // release: the term ends, the lease is released, and the replica leads again.
    let second = wait_event(&r, "acquired", 2, SLOW);
    let first = &r.events_named("acquired")[0];
    let down = &r.events_named("stepped_down")[0];
    assert_eq!(
        field(down, "reason").and_then(Value::as_str),
        Some("child_exit")
    );
    assert!(u64_of(&second, "fence") > u64_of(first, "fence"));
    let ended = wait_event(&r, "child_ended", 1, SLOW);
    assert_eq!(u64_of(&ended, "code"), 3);
    assert!(!r.events_named("released").is_empty());
    let env = std::fs::read_to_string(&env_file).unwrap();
    let line = env.lines().next().unwrap();
    let expect = format!(
        "rel a {} {}",
        u64_of(first, "fence"),
        r.leader_file().display()
    );
    assert_eq!(line, expect);
    let logs: Vec<(String, Vec<Value>)> = vec![r.safety_log()];
    check_logs(&logs).unwrap();
    assert!(r
        .events_named("stepped_down")
        .iter()
        .all(|e| event_name(e).is_some()));
}

#[test]
fn a_child_that_cannot_start_is_a_warn_line_naming_the_command_and_the_error() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Found and executable, so no configuration check can reject it; exec fails (ENOENT).
    let script = dir.path().join("bad-interpreter");
    std::fs::write(&script, "#!/nonexistent/interpreter\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = script.display().to_string();
    let exec = vec![program.clone(), "an-arg".into()];
    let d = Daemon::spawn(&opts("nostart", "a", &redis.url(), GRACE_300, exec));
    let ended = wait_event(&d, "child_ended", 1, SLOW);
    let text = |key| field(&ended, key).and_then(Value::as_str).unwrap_or("");
    assert_eq!(text("level"), "WARN", "{ended}");
    assert_eq!(text("cause"), "spawn_failed", "{ended}");
    assert_eq!(u64_of(&ended, "code"), 127);
    assert!(text("command").contains(&program), "{ended}");
    assert!(text("error").contains("No such file"), "{ended}");
    let log = d.log();
    let plain: Vec<&str> = log.lines().filter(|l| !l.starts_with('{')).collect();
    assert!(plain.is_empty(), "lines that are not JSON: {plain:?}");
}
