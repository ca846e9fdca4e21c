//! Candidates (docs/operating.md#candidates): every replica registers, refreshes and
//! removes its entry; `status` (text and `--json`), `GET /candidates` and the
//! `leaderd_candidates` gauge list them; a SIGKILLed replica is gone within `lease_duration`,
//! a clean shutdown removes its entry; `election.priority` out of range is one clear line.

mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::metrics::metric;
use support::{seed_fence, wait_until, Daemon, DaemonOpts, RedisServer};

const BOUND: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(50);

fn opts(redis: &RedisServer, name: &str, identity: &str, priority: u32, port: u16) -> DaemonOpts {
    let mut o = DaemonOpts::new(name, identity, &redis.url());
    o.lease = "3s".into();
    o.renew_deadline = "2s".into();
    o.retry = "500ms".into();
    o.extra_yaml = format!(
        "election:\n  priority: {priority}\npublish:\n  advertise: \"10.0.0.{port}:8080\"\n"
    );
    o
}

#[test]
fn replicas_register_are_listed_and_leave() {
    let redis = RedisServer::start();
    let name = "cand";
    seed_fence(&redis, name);
    let mut ds: Vec<Daemon> = [("a", 10, 1), ("b", 30, 2), ("c", 20, 3)]
        .iter()
        .map(|&(id, p, port)| Daemon::spawn(&opts(&redis, name, id, p, port)))
        .collect();
    let (doc, ids) = wait_until(BOUND, POLL, || {
        ds[0]
            .listed()
            .filter(|(doc, ids)| ids.len() == 3 && doc["holder"].is_string())
    })
    .expect("three candidates listed");
    // The leader first, then priority (highest first), then identity.
    let leader = doc["holder"].as_str().unwrap().to_string();
    assert_eq!(ids[0], leader, "{doc}");
    let rest: Vec<&String> = ids[1..].iter().collect();
    let order: Vec<&str> = ["b", "c", "a"]
        .into_iter()
        .filter(|i| *i != leader)
        .collect();
    assert_eq!(rest, order, "{doc}");
    let first = &doc["candidates"][0];
    let keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for k in [
        "identity",
        "state",
        "healthy",
        "priority",
        "address",
        "version",
        "started_at_ms",
        "seen_ms_ago",
    ] {
        assert!(keys.contains(&k), "{k} missing: {first}");
    }
    assert_eq!(first["state"], "leader", "{doc}");
    // The field order of docs/operating.md#candidates, as printed.
    let out = ds[0].cli(&["status", "--json"]).stdout;
    let list = &out[out.find("\"candidates\"").expect("candidates")..];
    let pos = |k: &str| list.find(&format!("\"{k}\":")).unwrap_or(usize::MAX);
    let fields = [
        "identity",
        "state",
        "healthy",
        "priority",
        "address",
        "version",
        "started_at_ms",
        "seen_ms_ago",
    ];
    assert!(fields.windows(2).all(|w| pos(w[0]) < pos(w[1])), "{out}");

    // Text: the first line unchanged, then one line per candidate.
    let text = ds[1].cli(&["status"]);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", text.stdout);
    assert!(
        lines[0].starts_with(&format!("{name}: held by {leader}")),
        "{}",
        text.stdout
    );
    assert!(
        lines[1].contains(&leader) && lines[1].contains("seen"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("10.0.0.2:8080"), "{}", text.stdout);

    // GET /candidates on every replica; the gauge counts them.
    for d in &ds {
        let (code, body) = d.get("/candidates");
        assert_eq!(code, 200, "{body}");
        let arr: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(arr.as_array().unwrap().len(), 3, "{body}");
    }
    let counted = wait_until(BOUND, POLL, || {
        let (_, text) = ds[2].get("/metrics");
        (metric(&text, "leaderd_candidates", &[("healthy", "true")]) == Some(3.0)).then_some(())
    });
    assert!(
        counted.is_some(),
        "leaderd_candidates{{healthy=\"true\"}} 3"
    );

    // SIGKILL a follower: gone within lease_duration (3 s).
    let victim = ds.iter().position(|d| d.identity() != leader).unwrap();
    let victim_id = ds[victim].identity().to_string();
    ds[victim].kill();
    let killed = Instant::now();
    let gone = wait_until(BOUND, POLL, || {
        ds[(victim + 1) % 3]
            .listed()
            .filter(|(_, ids)| !ids.contains(&victim_id))
            .map(|_| killed.elapsed())
    })
    .expect("the killed replica disappears");
    assert!(
        gone <= Duration::from_millis(3000 + 500),
        "gone after {gone:?}"
    );

    // A clean shutdown removes the entry at once.
    let last = ds
        .iter()
        .position(|d| d.identity() != leader && d.identity() != victim_id)
        .unwrap();
    let last_id = ds[last].identity().to_string();
    ds[last].signal(Signal::SIGTERM);
    assert_eq!(ds[last].wait_exit(BOUND), Some(0));
    let key = support::keys(name).candidates;
    assert_eq!(
        redis.cmd(&["HEXISTS", &key, &last_id]),
        "0",
        "entry left behind"
    );
}

#[test]
fn a_priority_out_of_range_is_one_clear_line() {
    let redis = RedisServer::start();
    let mut o = DaemonOpts::new("cand-bad", "a", &redis.url());
    o.extra_yaml = "election:\n  priority: 1001\n".into();
    let d = Daemon::spawn(&o);
    let out = d.cli(&["check-config"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr
            .contains("election.priority: 1001 is out of range (allowed: 0..1000)"),
        "{out:?}"
    );
}
