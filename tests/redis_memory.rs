//! Redis that can evict or refuse writes: the `maxmemory-policy` report (WARN line, gauge,
//! `check-config --probe`) and a leader over a Redis that runs out of memory.

mod daemon_common;
mod support;

use std::time::{Duration, Instant};

use daemon_common::*;
use support::{wait_until, Daemon, DaemonOpts, RedisServer};

fn eviction_gauge(d: &Daemon) -> Option<f64> {
    let (code, text) = d.get("/metrics");
    (code == 200)
        .then(|| metric(&text, "leaderd_redis_eviction_risk", &[]))
        .flatten()
}

#[test]
fn an_evicting_policy_is_warned_metered_and_probed() {
    let lru =
        RedisServer::start_with_args(&["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"]);
    let safe = RedisServer::start();
    let risky = Daemon::spawn(&DaemonOpts::new("evict", "replica-a", &lru.url()));
    let fine = Daemon::spawn(&DaemonOpts::new("noevict", "replica-a", &safe.url()));

    let warned = wait_event(&risky, "redis_eviction_risk", 1, SLOW);
    assert_eq!(str_of(&warned, "policy"), "allkeys-lru", "{warned}");
    assert!(
        str_of(&warned, "can_lose").contains("fencing counter"),
        "{warned}"
    );
    let one = wait_until(SLOW, POLL, || eviction_gauge(&risky).filter(|v| *v == 1.0));
    assert_eq!(one, Some(1.0), "{}", risky.get("/metrics").1);

    wait_event(&fine, "acquired", 1, SLOW);
    assert_eq!(eviction_gauge(&fine), Some(0.0), "0 from the start");
    assert!(
        fine.events_named("redis_eviction_risk").is_empty(),
        "{}",
        fine.log()
    );

    let probe = risky.cli(&["check-config", "--probe"]);
    assert_eq!(probe.code, Some(0), "{probe:?}");
    assert!(probe.stderr.contains("allkeys-lru"), "{probe:?}");
    assert!(probe.stderr.contains("fencing counter"), "{probe:?}");
    let probe = fine.cli(&["check-config", "--probe"]);
    assert_eq!(probe.code, Some(0), "{probe:?}");
    assert!(probe.stderr.contains("noeviction"), "{probe:?}");
    let port = safe.port();
    drop(safe);
    let mut down = DaemonOpts::new("noevict", "replica-b", &format!("redis://127.0.0.1:{port}"));
    down.command_timeout = "200ms".into();
    let gone = Daemon::spawn(&down).cli(&["check-config", "--probe"]);
    assert_eq!(gone.code, Some(1), "{gone:?}");
    assert!(gone.stderr.contains("does not answer"), "{gone:?}");
    check_all_logs(&[risky]);
    check_all_logs(&[fine]);
}
