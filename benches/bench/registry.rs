//! The candidate registry's cost to Redis: N registered replicas heartbeating at the default
//! rate (lease 15 s, a heartbeat every 5 s), simulated with library heartbeats over one
//! multiplexed connection; and one heartbeat's Redis time with 10,000 junk entries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leaderd::handover::{Candidate, Heartbeat};
use leaderd::{Lease, LeaseClient, LeaseSpec};
use serde_json::json;

use super::stats::{command_calls, command_usec, f, redis_cpu_seconds, Table};
use crate::support::RedisServer;

type Json = serde_json::Map<String, serde_json::Value>;

const LEASE: Duration = Duration::from_secs(15);

fn entry(identity: &str) -> Candidate {
    let mut entry = Candidate::new(identity);
    entry.address = Some("10.0.0.1:8080".into());
    entry.started_at_ms = 1_764_600_000_000;
    entry
}

/// Redis CPU (s), `evalsha` calls and usec, read together.
fn counters(redis: &RedisServer) -> (f64, u64, u64) {
    // Joining replicas keep Redis busy: wait for the answer.
    let info = |what: &str| {
        redis
            .try_cmd(&["INFO", what], Duration::from_secs(60))
            .expect("INFO")
    };
    let cpu = redis_cpu_seconds(&info("cpu"));
    let stats = info("commandstats");
    let calls = command_calls(&stats).get("evalsha").copied().unwrap_or(0);
    let usec = command_usec(&stats).get("evalsha").copied().unwrap_or(0);
    (cpu, calls, usec)
}

/// `n` replicas of election `name` heartbeating every `LEASE / 3` (each at its own phase)
/// for `secs` once they have all joined: Redis CPU ms per second, heartbeats per second,
/// the heartbeat's usec per call, and the seconds it took to settle.
fn replicas(redis: &RedisServer, name: &str, n: usize, secs: f64) -> (f64, f64, f64, f64) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let base =
        LeaseClient::connect(&redis.url(), LeaseSpec::new(name, "r0", LEASE)).expect("client");
    let base = Arc::new(base);
    let every = LEASE / 3;
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let id = format!("r{i:04}");
            let lease = base.for_lease(LeaseSpec::new(name, &id, LEASE));
            let phase = every.mul_f64(i as f64 / n as f64);
            rt.spawn(async move {
                tokio::time::sleep(phase).await;
                let me = entry(&id);
                loop {
                    let next = tokio::time::Instant::now() + every;
                    let _ = lease.heartbeat(Heartbeat::Write(&me), LEASE).await;
                    tokio::time::sleep_until(next).await;
                }
            })
        })
        .collect();
    // Each join changes the registry, so until all have joined every heartbeat reads the
    // full list: wait until a heartbeat period sees every replica's (at most 2 minutes).
    let joined = Instant::now();
    std::thread::sleep(every);
    loop {
        let (_, c0, _) = counters(redis);
        std::thread::sleep(every);
        let (_, c1, _) = counters(redis);
        if c1 - c0 >= n as u64 * 9 / 10 || joined.elapsed() > Duration::from_secs(120) {
            break;
        }
    }
    let settled = joined.elapsed().as_secs_f64();
    let (cpu0, calls0, usec0) = counters(redis);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (cpu1, calls1, usec1) = counters(redis);
    let dt = t0.elapsed().as_secs_f64();
    for t in tasks {
        t.abort();
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    let calls = calls1.saturating_sub(calls0);
    let per_call = (usec1.saturating_sub(usec0)) as f64 / calls.max(1) as f64;
    (
        (cpu1 - cpu0) * 1000.0 / dt,
        calls as f64 / dt,
        per_call,
        settled,
    )
}

/// 10,000 junk entries written straight into the hash (future `seen_at_ms` with priority
/// 1000, oversized, malformed), then 3 replicas heartbeating: usec per heartbeat.
fn junk(redis: &RedisServer, secs: f64) -> f64 {
    let name = "registry-junk";
    let key = crate::support::keys(name).candidates;
    let future = "99999999999999";
    let big = "x".repeat(4096);
    let mut args: Vec<String> = vec!["HSET".into(), key.clone()];
    for i in 0..10_000 {
        args.push(format!("junk{i:05}"));
        args.push(match i % 3 {
            0 => format!(r#"{{"state":"leader","healthy":true,"contending":true,"priority":1000,"version":"x","started_at_ms":1,"seen_at_ms":{future}}}"#),
            1 => big.clone(),
            _ => format!("{{not json {i}"),
        });
        if args.len() > 2000 {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            redis.cmd(&refs);
            args.truncate(2);
        }
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    if refs.len() > 2 {
        redis.cmd(&refs);
    }
    replicas(redis, name, 3, secs).2
}

pub fn run(quick: bool, tables: &mut Vec<Table>, out: &mut Json) {
    let secs = if quick { 10.0 } else { 30.0 };
    let redis = RedisServer::start();
    let mut table = Table::new(
        "Candidate registry: Redis cost of N replicas heartbeating every 5 s (lease 15 s)",
        &[
            "replicas",
            "Redis CPU (ms per s)",
            "heartbeats per s",
            "usec per heartbeat",
            "settled after (s)",
        ],
    );
    let mut rows = Vec::new();
    for n in [10usize, 200, 1000] {
        eprintln!("  registry: {n} replicas, {secs:.0} s");
        let (cpu, rate, per_call, settled) = replicas(&redis, &format!("registry-{n}"), n, secs);
        table.row(vec![
            n.to_string(),
            f(cpu, 1),
            f(rate, 1),
            f(per_call, 1),
            f(settled, 0),
        ]);
        rows.push(json!({"replicas": n, "cpu_ms_per_s": cpu, "rate": rate, "usec": per_call, "settled_s": settled}));
    }
    eprintln!("  registry: 10,000 junk entries, 3 replicas");
    let junk_usec = junk(&redis, secs);
    table.row(vec![
        "3, with 10,000 junk entries".into(),
        "-".into(),
        "-".into(),
        f(junk_usec, 1),
        "-".into(),
    ]);
    table.note(format!(
        "{secs:.0} s per row once a heartbeat period saw 90 % of the replicas' heartbeats (settled after: from the first heartbeat; every join changes the registry, so joining replicas read the full list); Redis CPU is `INFO cpu` used_cpu_sys + used_cpu_user, usec per heartbeat `INFO commandstats` evalsha usec / calls (the heartbeat script with its calls). Replicas are library heartbeats (`Lease::heartbeat`) over one connection, each at its own phase."
    ));
    out.insert(
        "registry".into(),
        json!({"rows": rows, "junk_usec": junk_usec, "secs": secs}),
    );
    tables.push(table);
}
