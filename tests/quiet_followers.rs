//! Quiet followers (docs/protocol.md#wake-ups) against real
//! redis-server and leaderd processes: what a follower costs Redis under a live leader
//! (counted per follower with MONITOR, each follower its own ACL user), a follower whose
//! subscription silently dies (the test proxy blackholes only its subscriber connection),
//! the best successor winning after a crash (or, paused, left its half retry), and a reserved
//! release contended only by its successor.
//!
//! Timings are the defaults (15 s / 10 s / 2 s, heartbeat every lease / 3) scaled by 1/5.

mod support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::monitor::{clients, Monitor, Seen};
use support::safety::{event_name, field_u64};
use support::{keys, seed_fence, wait_leader, wait_until, Daemon, DaemonOpts, Proxy, RedisServer};

const LEASE: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(400);
const BOUND: Duration = Duration::from_secs(20);
const STEP: Duration = Duration::from_millis(25);
const PASSWORD: &str = "quiet-pw";

fn opts(name: &str, identity: &str, url: &str, extra: &str) -> DaemonOpts {
    let mut o = DaemonOpts::new(name, identity, url);
    o.lease = "3s".into();
    o.renew_deadline = "2s".into();
    o.retry = "400ms".into();
    o.command_timeout = "200ms".into();
    o.extra_yaml = extra.to_string();
    o
}

/// Options for a replica that logs in as its own ACL user (named as its identity), so that
/// MONITOR's clients can be told apart with `CLIENT LIST`.
fn user_opts(redis: &RedisServer, name: &str, identity: &str, priority: u32) -> DaemonOpts {
    let acl = [
        "ACL",
        "SETUSER",
        identity,
        "on",
        &format!(">{PASSWORD}"),
        "~*",
        "&*",
        "+@all",
    ];
    assert_eq!(redis.cmd(&acl), "OK");
    let mut o = opts(
        name,
        identity,
        &redis.url(),
        &format!("redis:\n  username: {identity}\nelection:\n  priority: {priority}\n"),
    );
    o.env = vec![("LEADERD_REDIS_PASSWORD".into(), PASSWORD.into())];
    o
}

fn doc_of(d: &Daemon) -> Option<Value> {
    d.status_doc()
}

/// Waits until `d` is a follower that names `leader`.
fn wait_follower_of(d: &Daemon, leader: &str) {
    let ok = wait_until(BOUND, STEP, || {
        doc_of(d).filter(|doc| doc["state"] == "follower" && doc["leader"] == leader)
    });
    assert!(ok.is_some(), "{} never followed {leader}", d.identity());
}

/// The identity of whichever of `daemons` leads, within the bound.
/// The identity of the one replica of `daemons` but `not` that leads, once one does.
fn leader_but(daemons: &[&Daemon], not: Option<&str>) -> String {
    let among: Vec<usize> = (0..daemons.len())
        .filter(|&i| Some(daemons[i].identity()) != not)
        .collect();
    daemons[wait_leader(daemons, &among, BOUND)]
        .identity()
        .to_string()
}

/// A leader `lead` (priority 0) of `name`, then followers with these priorities.
fn spawn_with_priorities(
    redis: &RedisServer,
    name: &str,
    lead: &str,
    followers: &[(&str, u32)],
) -> Vec<Daemon> {
    seed_fence(redis, name);
    let with_priority = |id: &str, p: u32| {
        opts(
            name,
            id,
            &redis.url(),
            &format!("election:\n  priority: {p}\n"),
        )
    };
    let mut daemons = vec![Daemon::spawn(&with_priority(lead, 0))];
    leader_but(&[&daemons[0]], None);
    for (id, p) in followers {
        daemons.push(Daemon::spawn(&with_priority(id, *p)));
    }
    daemons
}

/// Once a leader other than `best` leads and every other replica follows it, and their
/// heartbeats have read the candidates as they are, SIGKILLs it: its identity and index.
fn crash_the_leader(daemons: &mut [Daemon], best: &str, run: usize) -> (String, usize) {
    let refs: Vec<&Daemon> = daemons.iter().collect();
    let leader = leader_but(&refs, None);
    assert_ne!(leader, best, "run {run}: set up with another leader");
    for d in daemons.iter().filter(|d| d.identity() != leader) {
        wait_follower_of(d, &leader);
    }
    std::thread::sleep(LEASE / 3 + Duration::from_millis(300));
    let idx = daemons.iter().position(|d| d.identity() == leader).unwrap();
    daemons[idx].kill();
    (leader, idx)
}

/// The client addresses of each ACL user: (command connections, subscriber connections).
fn connections_by_user(redis: &RedisServer) -> HashMap<String, (HashSet<String>, HashSet<String>)> {
    let mut out: HashMap<String, (HashSet<String>, HashSet<String>)> = HashMap::new();
    for c in clients(&redis.cmd(&["CLIENT", "LIST"])) {
        let (Some(user), Some(addr)) = (c.get("user"), c.get("addr")) else {
            continue;
        };
        let subscriber = c.get("sub").is_some_and(|n| n != "0");
        let entry = out.entry(user.clone()).or_default();
        if subscriber {
            entry.1.insert(addr.clone());
        } else {
            entry.0.insert(addr.clone());
        }
    }
    out
}

fn commands_from<'a>(seen: &'a [Seen], addrs: &'a HashSet<String>) -> Vec<&'a Seen> {
    seen.iter().filter(|s| addrs.contains(&s.addr)).collect()
}

/// (a) At the defaults' ratios, a follower under a live leader sends Redis at most 4
/// commands or script calls per lease_duration (its 3 heartbeats), PINGs on its subscriber
/// connection not counted.
#[test]
fn a_follower_under_a_live_leader_costs_at_most_four_requests_per_lease() {
    let redis = RedisServer::start();
    let name = "quiet-budget";
    seed_fence(&redis, name);
    let leader = Daemon::spawn(&user_opts(&redis, name, "qa-lead", 0));
    leader_but(&[&leader], None);
    let from_start = Monitor::start(redis.addr());
    let followers: Vec<Daemon> = ["qb-one", "qc-two"]
        .iter()
        .map(|id| Daemon::spawn(&user_opts(&redis, name, id, 0)))
        .collect();
    for f in &followers {
        wait_follower_of(f, "qa-lead");
    }
    std::thread::sleep(Duration::from_millis(1500)); // the start's reads are done
    let before = connections_by_user(&redis);
    let monitor = Monitor::start(redis.addr());
    let window = LEASE * 2;
    std::thread::sleep(window);
    let seen = monitor.seen();
    drop(monitor);
    let everything = from_start.seen();
    drop(from_start);
    let after = connections_by_user(&redis);
    for f in &followers {
        let id = f.identity();
        let (cmds, subs) = after.get(id).cloned().unwrap_or_default();
        assert_eq!(
            before.get(id).map(|c| &c.0),
            Some(&cmds),
            "{id} reconnected"
        );
        assert_eq!(subs.len(), 1, "{id} has one subscriber connection");
        let sent = commands_from(&seen, &cmds);
        let first = sent.first().map_or(f64::MAX, |s| s.ts);
        let startup: Vec<String> = commands_from(&everything, &cmds)
            .iter()
            .filter(|s| s.ts < first)
            .map(|s| s.cmd())
            .collect();
        eprintln!("{id}: at the start: {startup:?}");
        // From its first command on, over 2 lease durations: the same budget plus the read
        // at the start (connecting's AUTH and INFO aside).
        let all = commands_from(&everything, &cmds);
        let t0 = all.first().map_or(0.0, |s| s.ts);
        let early: Vec<String> = all
            .iter()
            .filter(|s| s.ts < t0 + window.as_secs_f64())
            .map(|s| s.cmd())
            .filter(|c| !["AUTH", "INFO", "HELLO", "CLIENT"].contains(&c.as_str()))
            .collect();
        assert!(
            early.len() <= 4 * 2 + 1,
            "{id}: {} requests in its first 2 lease durations: {early:?}",
            early.len()
        );
        let pings = commands_from(&seen, &subs)
            .iter()
            .filter(|s| s.cmd() == "PING")
            .count();
        let names: Vec<String> = sent.iter().map(|s| s.cmd()).collect();
        eprintln!(
            "{id}: {} requests in {window:?}: {names:?}; {pings} PINGs",
            sent.len()
        );
        assert!(
            sent.len() <= 4 * 2,
            "{id} sent {} requests in 2 lease durations: {names:?}",
            sent.len()
        );
        // Its heartbeats (one every lease / 3) are seen: the count is of the right client.
        assert!(sent.len() >= 4, "{id}: only {names:?}");
        assert!(names.iter().all(|n| n == "EVALSHA"), "{names:?}");
        // The subscription is checked every retry_period (not counted above), not more often.
        let expected = (window.as_millis() / RETRY.as_millis()) as usize;
        assert!(pings + 3 >= expected, "{id}: {pings} PINGs in {window:?}");
        assert!(pings <= expected + 1, "{id}: {pings} PINGs in {window:?}");
    }
}

/// (b) A follower whose subscriber connection silently stops forwarding (blackholed by
/// the proxy; its command connection is untouched) notices within 1.5 retry_period (a PING
/// every retry_period, given half of it), reads at once, and so takes a lease released right
/// after the cut within that.
#[test]
fn a_follower_whose_subscription_silently_died_still_takes_a_release_within_a_retry() {
    let redis = RedisServer::start();
    let name = "quiet-deaf";
    seed_fence(&redis, name);
    let proxy = Proxy::start(redis.addr());
    let a = Daemon::spawn(&opts(name, "deaf-a", &redis.url(), ""));
    leader_but(&[&a], None);
    let b = Daemon::spawn(&opts(name, "deaf-b", &proxy.url(), ""));
    wait_follower_of(&b, "deaf-a");
    proxy.blackhole_sending(Some("SUBSCRIBE"));
    assert_eq!(
        proxy.holed_connections(),
        1,
        "only the subscriber connection"
    );
    // Released at once: the follower does not know yet that its subscription is dead.
    a.signal(Signal::SIGTERM);
    let acquired = wait_until(BOUND, STEP, || b.events_named("acquired").first().cloned())
        .expect("b took over");
    let lost = wait_until(BOUND, STEP, || {
        (!b.events_named("release_watch_lost").is_empty()).then_some(())
    });
    assert!(lost.is_some(), "the unanswered PING was noticed");
    let released = a
        .events_named("stepped_down")
        .first()
        .and_then(|e| field_u64(e, "ended_at_ms"))
        .expect("a stepped down");
    let took = field_u64(&acquired, "acquired_at_ms").expect("acquired_at_ms") - released;
    // A PING every retry_period, each given retry_period / 2: the dead subscription is
    // noticed within 1.5 retry_period, then the lease is read at once. A deaf follower that
    // did not notice would wait for the expiry it last read (seconds).
    let bound = RETRY * 3 / 2 + Duration::from_millis(300);
    assert!(
        Duration::from_millis(took) <= bound,
        "took {took} ms after the release (bound {bound:?})"
    );
}

/// (c) After the leader is SIGKILLed, the follower with the highest priority (10, against 5
/// and 0) wins: the others wait retry_period / 2 longer after the expiry. Every run.
#[test]
fn after_a_crash_the_best_successor_wins_every_time() {
    let redis = RedisServer::start();
    let mut daemons = spawn_with_priorities(
        &redis,
        "quiet-priority",
        "prio-lead",
        &[("prio-ten", 10), ("prio-five", 5), ("prio-zero", 0)],
    );
    let runs = 3;
    for run in 0..runs {
        let (leader, idx) = crash_the_leader(&mut daemons, "prio-ten", run);
        let alive: Vec<&Daemon> = daemons.iter().filter(|d| d.identity() != leader).collect();
        let winner = leader_but(&alive, Some(leader.as_str()));
        assert_eq!(winner, "prio-ten", "run {run}: the best successor wins");
        daemons[idx].restart();
        if run + 1 == runs {
            break;
        }
        // Move leadership off prio-ten (it sits out a lease) for the next run.
        let ten = daemons.iter().find(|d| d.identity() == "prio-ten").unwrap();
        ten.signal(Signal::SIGUSR1);
        let refs: Vec<&Daemon> = daemons.iter().collect();
        leader_but(&refs, Some("prio-ten"));
        std::thread::sleep(LEASE + RETRY);
    }
}

/// (e) After a crash while the best successor is paused (its candidate entry still fresh),
/// the others wait retry_period / 2 past the expiry for it, also when their own heartbeat
/// reads the lease vacant in that half retry (three followers: one of them usually does).
#[test]
fn with_the_best_successor_paused_the_others_leave_it_half_a_retry() {
    let redis = RedisServer::start();
    let name = "quiet-hold-off";
    let followers = [
        ("hold-ten", 10),
        ("hold-z1", 0),
        ("hold-z2", 0),
        ("hold-z3", 0),
    ];
    let mut daemons = spawn_with_priorities(&redis, name, "hold-lead", &followers);
    let lock = keys(name).lock;
    for run in 0..3 {
        let (leader, idx) = crash_the_leader(&mut daemons, "hold-ten", run);
        let file = std::fs::read_to_string(daemons[idx].leader_file()).expect("leader file");
        let doc: Value = serde_json::from_str(&file).expect("leader file is JSON");
        let valid_until = doc["lease_valid_until_ms"].as_u64().expect("its validity");
        // Paused shortly before the expiry: its last heartbeat is at most lease / 3 old.
        let near = wait_until(BOUND, Duration::from_millis(10), || {
            let left: i64 = redis.cmd(&["PTTL", &lock]).parse().ok()?;
            (left < 500).then_some(())
        });
        assert!(near.is_some(), "run {run}: the lease runs out");
        let ten = daemons.iter().find(|d| d.identity() == "hold-ten").unwrap();
        ten.signal(Signal::SIGSTOP);
        let others: Vec<&Daemon> = daemons
            .iter()
            .filter(|d| ![leader.as_str(), "hold-ten"].contains(&d.identity()))
            .collect();
        let winner = leader_but(&others, Some(leader.as_str()));
        ten.signal(Signal::SIGCONT);
        let won = others.iter().find(|d| d.identity() == winner).unwrap();
        let acquired = won.events_named("acquired");
        let at = acquired
            .last()
            .and_then(|e| field_u64(e, "acquired_at_ms"))
            .expect("acquired_at_ms");
        // The expiry is at least `drift` (32 ms) after the validity.
        let half = RETRY.as_millis() as u64 / 2;
        assert!(
            at >= valid_until + half,
            "run {run}: {winner} took the lease {} ms after {leader}'s validity (< {half})",
            at as i64 - valid_until as i64
        );
        daemons[idx].restart();
    }
}

/// (d) A release reserved for one follower: inside the window only it sends an acquire;
/// the others wait for its `acquired` announcement. The leader here is the test itself
/// (the scripts run by EVAL), so that the follower side is what is measured.
#[test]
fn a_reserved_release_is_contended_only_by_its_successor() {
    let redis = RedisServer::start();
    let name = "quiet-reserved";
    seed_fence(&redis, name);
    let k = keys(name);
    let acquire = include_str!("../lua/acquire.lua");
    let release = include_str!("../lua/release.lua");
    let acquire_sha = redis.cmd(&["SCRIPT", "LOAD", acquire]);
    let now_ms = support::unix_ms(std::time::SystemTime::now()).to_string();
    let granted = redis.cmd(&[
        "EVAL",
        acquire,
        "3",
        &k.lock,
        &k.fence,
        &k.released,
        "test-leader",
        "test-token",
        "20000",
        &now_ms,
        "",
        "1",
    ]);
    assert_eq!(
        granted.lines().next(),
        Some("1"),
        "the test leads: {granted}"
    );
    let followers: Vec<Daemon> = [("rs-five", 5), ("rs-ten", 10), ("rs-zero", 0)]
        .iter()
        .map(|(id, p)| Daemon::spawn(&user_opts(&redis, name, id, *p)))
        .collect();
    for f in &followers {
        wait_follower_of(f, "test-leader");
    }
    std::thread::sleep(LEASE / 3 + Duration::from_millis(300));
    let conns = connections_by_user(&redis);
    let monitor = Monitor::start(redis.addr());
    std::thread::sleep(Duration::from_millis(200));
    let window_ms = RETRY.as_millis().min(1000).to_string();
    let released = redis.cmd(&[
        "EVAL",
        release,
        "4",
        &k.lock,
        &k.released,
        &k.fence,
        &k.successor_channel("rs-ten"),
        "test-token",
        "test-leader",
        "rs-ten",
        &window_ms,
    ]);
    assert_eq!(released, "1");
    let t0 = Instant::now();
    let ten = &followers[1];
    wait_follower_of(&followers[0], "rs-ten");
    assert!(
        t0.elapsed() < RETRY,
        "the successor took the reservation inside the window"
    );
    assert_eq!(doc_of(ten).unwrap()["is_leader"], true);
    std::thread::sleep(RETRY + Duration::from_millis(200));
    let seen = monitor.seen();
    drop(monitor);
    let at = seen
        .iter()
        .find(|s| s.cmd() == "EVAL" && s.args.get(1).is_some_and(|a| a.contains("release.lua")))
        .map(|s| s.ts)
        .expect("the release in MONITOR");
    let window = RETRY.as_secs_f64();
    let acquires_in_window = |id: &str| {
        let cmds = &conns[id].0;
        commands_from(&seen, cmds)
            .iter()
            .filter(|s| s.cmd() == "EVALSHA" && s.args.get(1) == Some(&acquire_sha))
            .filter(|s| s.ts >= at && s.ts < at + window)
            .count()
    };
    assert_eq!(
        acquires_in_window("rs-ten"),
        1,
        "the successor acquired at once"
    );
    assert_eq!(acquires_in_window("rs-five"), 0, "rs-five waited");
    assert_eq!(acquires_in_window("rs-zero"), 0, "rs-zero waited");
    for f in [&followers[0], &followers[2]] {
        let log = f.log_events();
        assert!(
            !log.iter().any(|e| event_name(e) == Some("acquired")),
            "{} never led",
            f.identity()
        );
    }
}
