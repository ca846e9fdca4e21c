//! Redis that can evict or refuse writes: the `maxmemory-policy` report (WARN line, gauge,
//! `check-config --probe`), a leader over a Redis that runs out of memory, and what a Redis
//! outage leaves on stderr.

mod support;

use std::time::Duration;

use support::logs::*;
use support::metrics::metric;
use support::replicas::*;
use support::{wait_until, Daemon, DaemonOpts, RedisServer, POLL, SLOW};

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
    // What the server is, as its own INFO says (README, "Servers").
    let info = safe.cmd(&["INFO", "server"]);
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    let name = field("server_name").unwrap_or_else(|| "redis".into());
    let version = field(&format!("{name}_version")).expect("the server's version in INFO");
    let shown = format!("leaderd: probe: server {name} {version} (native: ");
    assert!(probe.stderr.contains(&shown), "{shown} in {probe:?}");
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

/// `noeviction` and a Redis filled to `maxmemory` while a leader holds: the renew (`HGET`,
/// `PEXPIRE`) is not refused, so the leader keeps its term; an acquire (`INCR`, `HSET`) is:
/// a replica that starts then logs that Redis is out of memory, never leads, nothing
/// panics, and once the filler keys are deleted (the fence key kept) it leads.
#[test]
fn a_full_redis_refuses_acquires_and_leadership_comes_back_when_memory_is_freed() {
    let redis =
        RedisServer::start_with_args(&["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]);
    let mut d = Daemon::spawn(&DaemonOpts::new("oom", "replica-a", &redis.url()));
    let first = wait_event(&d, "acquired", 1, SLOW);
    let value = "x".repeat(64 * 1024);
    let mut filled = 0;
    for i in 0..2000 {
        let reply = redis.cmd(&["SET", &format!("filler:{i}"), &value]);
        if reply.contains("OOM") {
            break;
        }
        filled += 1;
    }
    assert!(filled < 2000, "Redis never refused a write");
    // Well above maxmemory, not just at it (a refused SET frees its buffer again).
    assert_eq!(redis.cmd(&["CONFIG", "SET", "maxmemory", "3mb"]), "OK");
    std::thread::sleep(LEASE);
    assert!(
        stepped_down(&d).is_empty(),
        "renewals go on in a full Redis:\n{}",
        d.log()
    );

    // The leader's heartbeats (which write) met the full Redis: said once at the most.
    let oom_count = |d: &Daemon| {
        warn_lines(d)
            .into_iter()
            .filter(|e| e.to_string().contains("out of memory"))
            .count()
    };
    let oom_before = oom_count(&d);
    assert!(oom_before <= 1, "at most once per 30 s:\n{}", d.log());
    d.kill();
    let terms_before = acquired(&d).len(); // the log goes on across the restart
    std::thread::sleep(LEASE + Duration::from_millis(300));
    d.restart();
    let line = wait_until(SLOW, POLL, || {
        warn_lines(&d)
            .into_iter()
            .find(|e| e.to_string().contains("out of memory"))
    })
    .unwrap_or_else(|| panic!("no error saying out of memory:\n{}", d.log()));
    println!("{line}");
    std::thread::sleep(LEASE);
    assert_eq!(acquired(&d).len(), terms_before, "{}", d.log());
    assert!(!d.log().contains("panicked"), "{}", d.log());
    let oom_lines = oom_count(&d) - oom_before;
    assert_eq!(oom_lines, 1, "at most once per 30 s:\n{}", d.log());

    for i in 0..filled {
        redis.cmd(&["DEL", &format!("filler:{i}")]);
    }
    let again = wait_event(&d, "acquired", terms_before + 1, SLOW);
    assert!(u64_of(&again, "fence") > u64_of(&first, "fence"));
    assert!(d.is_running());
}

/// A Redis killed and restarted under a leader: stderr holds only leaderd's own lines
/// (each with an `event`, or leaderd's debug lines), none of the redis crate's warnings.
#[test]
fn a_redis_outage_logs_only_leaderds_lines() {
    let mut redis = RedisServer::start();
    let d = Daemon::spawn(&DaemonOpts::new("quiet", "replica-a", &redis.url()));
    wait_event(&d, "acquired", 1, SLOW);
    redis.stop();
    wait_event(&d, "redis_error", 1, SLOW);
    std::thread::sleep(Duration::from_secs(1));
    redis.start_again();
    wait_event(&d, "redis_recovered", 1, SLOW);
    let log = d.log();
    let foreign: Vec<&str> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
            let level = v["level"].as_str().unwrap_or("?");
            v.get("event").is_none() && matches!(level, "WARN" | "ERROR" | "?")
        })
        .collect();
    assert!(
        foreign.is_empty(),
        "lines not from leaderd:\n{}",
        foreign.join("\n")
    );
    assert!(warn_lines(&d).len() <= 4, "flooding:\n{log}");
}
