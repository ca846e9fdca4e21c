//! The quiet followers (issue 11): what a follower costs Redis per lease_duration under a live
//! leader (MONITOR, per client connection), and how soon followers show a new leader after
//! its `acquired_at` (the announcement, or their own read, whichever comes first).

use std::collections::HashSet;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;

use super::stats::{f, pcells, summarize, Table};
use super::timings::{DEFAULTS, FAST};
use crate::support::logs::acquired_at;
use crate::support::monitor::{clients, Monitor};
use crate::support::safety::{event_name, field_u64};

type Json = serde_json::Map<String, serde_json::Value>;

fn addrs(list: &str) -> HashSet<String> {
    clients(list)
        .into_iter()
        .filter_map(|c| c.get("addr").cloned())
        .collect()
}

pub fn run(secs: f64, runs: usize, tables: &mut Vec<Table>, out: &mut Json) {
    cost(secs, tables, out);
    announcement(runs, tables, out);
}

fn cost(secs: f64, tables: &mut Vec<Table>, out: &mut Json) {
    let followers = 4;
    let mut c = DEFAULTS.replicas("followers", "logging:\n  level: info\n");
    c.spawn();
    c.wait_settled(Duration::from_secs(30));
    let before = addrs(&c.redis.cmd(&["CLIENT", "LIST"]));
    for _ in 0..followers {
        c.spawn();
    }
    c.wait_settled(Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(5));
    eprintln!("  followers: leader + {followers} followers, {secs:.0} s of MONITOR");
    let monitor = Monitor::start(c.redis.addr());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let seen = monitor.seen();
    drop(monitor);
    // The followers' command connections: new since the leader alone, not subscribers.
    let conns: Vec<String> = clients(&c.redis.cmd(&["CLIENT", "LIST"]))
        .into_iter()
        .filter(|cl| cl.get("sub").is_some_and(|n| n == "0"))
        .filter(|cl| {
            cl.get("cmd")
                .is_some_and(|x| x != "monitor" && !x.starts_with("client"))
        })
        .filter_map(|cl| cl.get("addr").cloned())
        .filter(|a| !before.contains(a))
        .collect();
    let lease_s = DEFAULTS.lease_ms as f64 / 1000.0;
    let per_lease: Vec<f64> = conns
        .iter()
        .map(|a| seen.iter().filter(|s| &s.addr == a).count() as f64 / secs * lease_s)
        .collect();
    let pings: usize = seen.iter().filter(|s| s.cmd() == "PING").count();
    let s = summarize(&per_lease);
    let mut table = Table::new(
        "Follower cost under a live leader, default timings (15s/10s/2s)",
        &["", "requests per lease_duration (mean)", "max"],
    );
    table.row(vec![
        "before (part 1: an acquire every jittered retry_period)".into(),
        "7.5 nominal (6.8 measured: one every 2.2 s)".into(),
        "-".into(),
    ]);
    table.row(vec![
        format!("after: quiet followers ({} connections)", conns.len()),
        f(s.mean, 2),
        f(s.max, 2),
    ]);
    table.note(format!(
        "MONITOR for {secs:.0} s, each follower's command connection counted (a script call once, its inner commands not); {pings} PINGs on the subscriber connections in the window, not counted (docs/protocol.md#wake-ups)."
    ));
    out.insert(
        "follower_cost".into(),
        json!({"secs": secs, "per_lease": per_lease, "pings": pings}),
    );
    tables.push(table);
}

/// Unix ms of an RFC 3339 UTC timestamp as the logs write it (`2026-12-01T19:42:16.207589Z`).
fn log_ms(ts: &str) -> Option<f64> {
    let (date, time) = ts.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (h, min) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    let sec = t.next()?.parse::<f64>().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days as f64 * 24.0 + h) * 60.0 + min) * 60_000.0 + sec * 1000.0)
}

/// When `d` logged `leader_changed` naming the term `fence`.
fn shown_at(d: &crate::support::Daemon, fence: u64) -> Option<f64> {
    d.log_events()
        .iter()
        .filter(|e| event_name(e) == Some("leader_changed"))
        .find(|e| field_u64(e, "fence") == Some(fence))
        .and_then(|e| e.get("timestamp")?.as_str().and_then(log_ms))
}

fn announcement(runs: usize, tables: &mut Vec<Table>, out: &mut Json) {
    let mut c = FAST.replicas("announce", "");
    for _ in 0..3 {
        c.spawn();
    }
    let mut lateness = Vec::new();
    for run in 0..runs {
        let (leader, fence) = c.wait_settled(Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(300));
        c.daemons[leader].signal(Signal::SIGUSR1);
        let term = c.wait_new_term(fence, Duration::from_millis(5), Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(200));
        let acquired = acquired_at(&c.daemons[term.replica], term.fence).unwrap_or(0) as f64;
        for (i, d) in c.daemons.iter().enumerate() {
            if i == term.replica {
                continue;
            }
            if let Some(at) = shown_at(d, term.fence) {
                lateness.push(at - acquired);
            }
        }
        eprintln!("  announcement: run {run} done");
        // The one that yielded sits out a lease; the next run yields the new leader.
        std::thread::sleep(Duration::from_millis(FAST.lease_ms + 300));
    }
    let s = summarize(&lateness);
    let mut table = Table::new(
        "Announcement latency: a follower shows the new leader, after its acquired_at (3 replicas, SIGUSR1 handovers)",
        &["samples", "p50 (ms)", "p99 (ms)", "max (ms)"],
    );
    let mut row = vec![s.n.to_string()];
    row.extend(pcells(&s, 1));
    table.row(row);
    table.note("The follower's `leader_changed` log line (its timestamp) minus the new leader's `acquired_at_ms`: both clocks are this host's. Target: p99 <= 10 ms.");
    out.insert("announcement_ms".into(), json!(lateness));
    tables.push(table);
}
