//! Exec mode against signals aimed at leaderd's whole process group (`kill -9 -PGID`,
//! `timeout -s KILL`, Ctrl-\, Ctrl-C, a closing terminal's SIGHUP) and at the keeper alone: the child and everything in
//! its group die at once when leaderd or the keeper goes away; leaderd's clean shutdown
//! still stops the child within the grace period.

mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use support::election::lock_exists;
use support::exec::*;
use support::logs::wait_event;
use support::safety::field;
use support::{check_logs, now_ms, wait_until, Daemon, RedisServer, POLL, SLOW};

/// "At once": the child's last heartbeat comes at most this long after the kill.
const AT_ONCE_MS: u64 = 150;

/// A leader in a process group of its own whose child has written a few heartbeats;
/// returns it and its child's pid (the child's group).
fn leading_in_own_group(redis: &RedisServer, name: &str, out: &std::path::Path) -> (Daemon, u32) {
    let mut o = opts(name, "a", &redis.url(), GRACE_300, heartbeat(out));
    o.own_group = true;
    let d = Daemon::spawn(&o);
    let child = child_pid(&d, 1);
    wait_until(SLOW, POLL, || {
        (spans(out).values().next()?.2 >= 3).then_some(())
    })
    .expect("the child wrote no heartbeats");
    (d, child)
}

/// Waits until no process of `group` is left; panics naming the survivors.
fn assert_group_gone(group: u32, within: Duration, what: &str) {
    let gone = wait_until(within, Duration::from_millis(5), || {
        group_members(group).is_empty().then_some(())
    });
    assert!(
        gone.is_some(),
        "{what}: processes of the child's group {group} still run: {:?}",
        group_members(group)
    );
}

/// The last heartbeat came at once after `killed_ms`, and well before the validity.
fn assert_beats_stopped_at_once(d: &Daemon, out: &std::path::Path, killed_ms: u64) {
    std::thread::sleep(Duration::from_millis(300));
    let spans = check_children(&[d], out);
    let (_, last, _) = *spans.values().next().expect("heartbeats");
    let validity = check_logs(&[d.safety_log()]).unwrap()[0].last_valid_until_ms;
    assert!(
        last <= killed_ms + AT_ONCE_MS,
        "the child beat at {last}, {} ms after the kill",
        last.saturating_sub(killed_ms)
    );
    assert!(
        last + 1000 < validity,
        "last beat {last}, validity {validity}"
    );
}

#[test]
fn sigkill_to_leaderds_process_group_kills_the_childs_group_at_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("beats");
    let (mut d, child) = leading_in_own_group(&redis, "group-kill", &out);
    let _guard = GroupGuard(child);
    let killed_ms = now_ms();
    d.signal_group(Signal::SIGKILL); // as `kill -9 -PGID` or `timeout -s KILL` do
    assert_eq!(d.wait_exit(Duration::from_secs(3)), Some(137));
    assert_group_gone(child, Duration::from_millis(500), "SIGKILL");
    assert_beats_stopped_at_once(&d, &out, killed_ms);
}

/// SIGTERM, SIGINT (Ctrl-C), SIGHUP (a terminal that closes signals its foreground group)
/// and SIGQUIT (Ctrl-\), each sent 50 times to leaderd's group: one clean shutdown.
#[test]
fn terminating_signals_to_leaderds_process_group_are_a_clean_shutdown() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        let out = dir.path().join(sig.as_str());
        let name = format!("clean-{sig}");
        let (mut d, child) = leading_in_own_group(&redis, &name, &out);
        let _guard = GroupGuard(child);
        let sent = Instant::now();
        for _ in 0..50 {
            d.signal_group(sig);
        }
        assert_eq!(d.wait_exit(Duration::from_secs(3)), Some(0), "{sig}");
        assert!(sent.elapsed() < Duration::from_millis(300 + 1000), "{sig}");
        assert_group_gone(child, Duration::from_millis(500), sig.as_str());
        let ended = wait_event(&d, "child_ended", 1, SLOW);
        assert_eq!(
            field(&ended, "cause").and_then(Value::as_str),
            Some("stopped"),
            "{sig}: leaderd did not stop the child itself"
        );
        assert!(
            !lock_exists(&redis, &name),
            "{sig}: the lease was not released"
        );
        check_children(&[&d], &out);
    }
}

#[test]
fn sigkill_of_the_keeper_alone_kills_the_child_at_once_even_while_leaderd_is_paused() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("beats");
    let (d, child) = leading_in_own_group(&redis, "keeper-kill", &out);
    let _guard = GroupGuard(child);
    let keeper = keeper_of(&d);
    d.signal(Signal::SIGSTOP); // leaderd cannot kill anything now
    let killed_ms = now_ms();
    kill(Pid::from_raw(keeper as i32), Signal::SIGKILL).unwrap();
    let dead = wait_until(Duration::from_millis(500), Duration::from_millis(5), || {
        (!alive(child)).then_some(())
    });
    d.signal(Signal::SIGCONT);
    assert!(dead.is_some(), "the child outlived its keeper");
    // What the child started in its group goes when leaderd runs again.
    assert_group_gone(child, Duration::from_secs(3), "after SIGCONT");
    assert_beats_stopped_at_once(&d, &out, killed_ms);
    let down = wait_event(&d, "stepped_down", 1, SLOW);
    assert!(field(&down, "reason").is_some());
    wait_event(&d, "acquired", 2, SLOW); // and it contends again
}
