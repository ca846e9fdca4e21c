//! Daemon tests whose bound is their point: a follower polling only every 2 s takes over
//! within 100 ms of a release (the release's pub/sub wake-up), and two exec-mode replicas
//! whose children ignore SIGTERM never run them at the same time (stop claiming, stop the
//! child, then release: any other order overlaps them by the grace period).

mod exec_common;
mod support;

use std::time::Duration;

use exec_common::*;
use nix::sys::signal::Signal;
use support::{Daemon, DaemonOpts, RedisServer};

/// Pretend the election exists, so that no first-start quarantine delays the first term.
fn seed(redis: &RedisServer, name: &str) {
    let key = format!("leaderd:{{{name}}}:fence");
    assert_eq!(redis.cmd(&["SET", &key, "1000"]), "OK");
}

#[test]
fn a_follower_polling_every_2s_takes_over_within_100ms_of_the_release() {
    let redis = RedisServer::start();
    seed(&redis, "wake");
    let timing = |identity: &str| {
        let mut o = DaemonOpts::new("wake", identity, &redis.url());
        o.lease = "6s".into();
        o.renew_deadline = "4s".into();
        o.retry = "2s".into();
        o
    };
    let mut a = Daemon::spawn(&timing("a"));
    let ds_a = std::slice::from_ref(&a);
    wait_leader(ds_a, &[0], SLOW);
    let b = Daemon::spawn(&timing("b"));
    // b follows a (it has polled once), then a releases on SIGTERM.
    support::wait_until(SLOW, POLL, || {
        b.status_doc()
            .filter(|d| d["state"] == "follower" && d["leader"] == "a")
    })
    .expect("b follows a");
    std::thread::sleep(Duration::from_millis(300));
    a.signal(Signal::SIGTERM);
    assert_eq!(a.wait_exit(SLOW), Some(0));
    let released = u64_of(&wait_event(&a, "stepped_down", 1, SLOW), "ended_at_ms");
    let acquired = u64_of(&wait_event(&b, "acquired", 1, SLOW), "acquired_at_ms");
    let took = acquired.saturating_sub(released);
    assert!(
        took < 100,
        "b took over {took}ms after a stepped down (polling alone takes 2-2.4s)"
    );
}

#[test]
fn exec_children_deaf_to_sigterm_never_overlap_across_handovers() {
    let redis = RedisServer::start();
    seed(&redis, "order");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("children");
    // The grace period (SIGTERM ignored: the child lives all of it) is long next to the
    // handover time, so releasing before the child is dead would overlap the children.
    let grace = "exec:\n  grace_period: 550ms\n";
    let mut a = Daemon::spawn(&opts("order", "a", &redis.url(), grace, writer(&out, true)));
    wait_leader(std::slice::from_ref(&a), &[0], SLOW);
    let mut b = Daemon::spawn(&opts("order", "b", &redis.url(), grace, writer(&out, true)));
    std::thread::sleep(Duration::from_millis(500));
    // a yields: b must start its child only after a's is dead.
    a.signal(Signal::SIGUSR1);
    wait_event(&b, "acquired", 1, SLOW);
    std::thread::sleep(Duration::from_millis(500));
    // b shuts down: a (its sit-out over) takes over only after b's child is dead.
    b.signal(Signal::SIGTERM);
    assert_eq!(b.wait_exit(SLOW), Some(0));
    wait_event(&a, "acquired", 2, SLOW);
    std::thread::sleep(Duration::from_millis(300));
    a.signal(Signal::SIGTERM);
    assert_eq!(a.wait_exit(SLOW), Some(0));
    let spans = check_children(&[&a, &b], &out);
    assert!(spans.len() >= 3, "three terms ran children: {spans:?}");
    let mut by_start: Vec<(u64, u64)> = spans.values().map(|&(f, l, _)| (f, l)).collect();
    by_start.sort();
    for pair in by_start.windows(2) {
        assert!(
            pair[0].1 < pair[1].0,
            "children overlap: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
}
