//! The candidate registry read defensively (README "Candidates"): junk entries cost a
//! heartbeat under a millisecond of Redis time and are cleaned, never hide the leader or the
//! reader, never become a successor; the 1,001st candidate is refused with a WARN line; a
//! failed heartbeat is a `redis_error` (an out-of-memory one named) and counted; two
//! processes with one identity both warn and set `leaderd_identity_conflict`.

mod support;

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use support::logs::assert_identity_conflict;
use support::metrics::metric;
use support::{keys, seed_fence, wait_until, Daemon, DaemonOpts, RedisServer, RespConn};

const BOUND: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

fn opts(redis: &RedisServer, name: &str, identity: &str) -> DaemonOpts {
    let mut o = DaemonOpts::new(name, identity, &redis.url());
    o.lease = "3s".into();
    o.renew_deadline = "2s".into();
    o.retry = "1s".into();
    o
}

/// Redis server time in ms.
fn redis_ms(redis: &RedisServer) -> u64 {
    let t = redis.cmd(&["TIME"]);
    let mut it = t.lines().map(|x| x.parse::<u64>().unwrap());
    it.next().unwrap() * 1000 + it.next().unwrap() / 1000
}

/// An entry as leaderd writes it, seen at `seen`.
fn entry(priority: u32, seen: u64) -> String {
    format!(
        r#"{{"state":"follower","healthy":true,"contending":true,"priority":{priority},"address":null,"version":"0.1.0","started_at_ms":1,"seen_at_ms":{seen}}}"#
    )
}

/// Runs `cmd key` with the (member, value) pairs in batches.
fn batched(redis: &RedisServer, cmd: &str, key: &str, pairs: &[(String, String)]) {
    for chunk in pairs.chunks(500) {
        let mut args = vec![cmd.to_string(), key.to_string()];
        for (a, b) in chunk {
            args.push(a.clone());
            args.push(b.clone());
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = redis.cmd(&refs);
        assert!(!out.starts_with("error"), "{cmd}: {out}");
    }
}

/// 10,000 junk entries: future `seen_at_ms` with priority 1000 in the hash only and in the
/// index too, oversized values, and malformed ones indexed as long gone.
fn poison(redis: &RedisServer, name: &str) {
    let now = redis_ms(redis);
    let future = now + 3_600_000;
    let (mut hash, mut index) = (Vec::new(), Vec::new());
    for i in 0..10_000 {
        let id = format!("junk{i:05}");
        let value = match i % 4 {
            0 | 1 => entry(1000, future),
            2 => format!("{}{}", entry(1000, now), " ".repeat(4096)),
            _ => format!("{{\"seen_at_ms\":\"{i}\", not json"),
        };
        match i % 4 {
            1 => index.push((future.to_string(), id.clone())),
            3 => index.push(((now - 3_600_000).to_string(), id.clone())),
            _ => {}
        }
        hash.push((id, value));
    }
    batched(redis, "HSET", &keys(name).candidates, &hash);
    batched(redis, "ZADD", &keys(name).candidates_index, &index);
}

/// `usec_per_call` of EVALSHA since the last `CONFIG RESETSTAT`.
fn evalsha_usec(redis: &RedisServer) -> (u64, f64) {
    let stats = redis.cmd(&["INFO", "commandstats"]);
    let line = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or_default();
    let field = |k: &str| {
        line.split([':', ','])
            .find_map(|kv| kv.strip_prefix(k))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("calls=") as u64, field("usec_per_call="))
}

fn payload(reply: support::Reply) -> Option<String> {
    match reply {
        support::Reply::Array(items) if items.len() == 3 => match &items[2] {
            support::Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        },
        _ => None,
    }
}

#[test]
fn junk_costs_a_heartbeat_under_a_millisecond_is_cleaned_and_never_leads() {
    let redis = RedisServer::start();
    let name = "junk";
    poison(&redis, name);
    let a = Daemon::spawn(&opts(&redis, name, "a"));
    let b = Daemon::spawn(&opts(&redis, name, "b"));
    let (doc, ids) = wait_until(BOUND, POLL, || {
        b.listed()
            .filter(|(doc, ids)| doc["holder"].is_string() && ids.len() >= 2)
    })
    .expect("the leader and the follower listed");
    let shown = &ids[..ids.len().min(5)];
    assert_eq!(ids.len(), 2, "only the two replicas: {shown:?}...");
    let leader = doc["holder"].as_str().unwrap().to_string();
    assert_eq!(ids[0], leader, "{doc}");

    // Redis time per heartbeat (and per renew: EVALSHA counts both) over 6 s.
    let hash_before: u64 = redis
        .cmd(&["HLEN", &keys(name).candidates])
        .parse()
        .unwrap();
    let index_before: u64 = redis
        .cmd(&["ZCARD", &keys(name).candidates_index])
        .parse()
        .unwrap();
    redis.cmd(&["CONFIG", "RESETSTAT"]);
    std::thread::sleep(Duration::from_secs(6));
    let (calls, usec) = evalsha_usec(&redis);
    assert!(calls >= 10, "{calls} scripts in 6 s");
    assert!(
        usec < 1000.0,
        "{usec} usec per script call with 10,000 junk entries"
    );
    let hash_after: u64 = redis
        .cmd(&["HLEN", &keys(name).candidates])
        .parse()
        .unwrap();
    let index_after: u64 = redis
        .cmd(&["ZCARD", &keys(name).candidates_index])
        .parse()
        .unwrap();
    assert!(
        hash_after + 100 <= hash_before && index_after + 50 <= index_before,
        "junk cleaned over time: hash {hash_before} -> {hash_after}, index {index_before} -> {index_after}"
    );

    // A SIGTERM reserves the release for the real follower, not a junk identity.
    let (leader_d, follower) = if leader == "a" { (&a, "b") } else { (&b, "a") };
    let mut conn = RespConn::connect(redis.addr(), BOUND).unwrap();
    conn.call(&["SUBSCRIBE", &keys(name).released]).unwrap();
    leader_d.signal(Signal::SIGTERM);
    let released = (0..8)
        .filter_map(|_| conn.read_next().ok().and_then(payload))
        .map(|text| serde_json::from_str::<Value>(&text).unwrap_or_default())
        .find(|m| m["event"] == "released")
        .expect("a release is published");
    assert_eq!(released["reserved_for"], follower, "{released}");
}

#[test]
fn the_1001st_candidate_is_refused_with_a_warn_line_and_may_still_lead() {
    let redis = RedisServer::start();
    let name = "full";
    let now = redis_ms(&redis);
    let ids: Vec<String> = (0..1000).map(|i| format!("c{i:04}")).collect();
    let hash: Vec<(String, String)> = ids.iter().map(|id| (id.clone(), entry(0, now))).collect();
    let index: Vec<(String, String)> = ids.iter().map(|id| (now.to_string(), id.clone())).collect();
    batched(&redis, "HSET", &keys(name).candidates, &hash);
    batched(&redis, "ZADD", &keys(name).candidates_index, &index);
    let d = Daemon::spawn(&opts(&redis, name, "late"));
    let warned = wait_until(BOUND, POLL, || {
        d.events_named("registry_full").first().cloned()
    })
    .expect("a registry_full line");
    assert_eq!(warned["level"], "WARN", "{warned}");
    assert_eq!(
        redis.cmd(&["HEXISTS", &keys(name).candidates, "late"]),
        "0",
        "no entry written"
    );
    let leads = wait_until(BOUND, POLL, || {
        let doc = d.status_doc()?;
        (doc["leader"] == "late").then_some(())
    });
    assert!(leads.is_some(), "it still leads");
}

#[test]
fn a_heartbeat_refused_for_want_of_memory_is_a_redis_error_naming_it() {
    let redis = RedisServer::start_with_args(&["--maxmemory-policy", "noeviction"]);
    let name = "oom";
    let d = Daemon::spawn(&opts(&redis, name, "a"));
    wait_until(BOUND, POLL, || {
        (d.status_doc()?["leader"] == "a").then_some(())
    })
    .expect("a leads");
    // Full: 1 MB of data, then maxmemory half a megabyte below what is used.
    let filler = "x".repeat(10_000);
    for i in 0..100 {
        redis.cmd(&["SET", &format!("filler{i}"), &filler]);
    }
    let used: u64 = redis
        .cmd(&["INFO", "memory"])
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    redis.cmd(&["CONFIG", "SET", "maxmemory", &(used - 500_000).to_string()]);
    assert!(
        redis.cmd(&["SET", "probe", "x"]).contains("OOM"),
        "Redis refuses writes"
    );
    let line = wait_until(BOUND, POLL, || {
        d.events_named("redis_error")
            .into_iter()
            .find(|e| e.to_string().contains("out of memory"))
    })
    .expect("a redis_error line naming the out-of-memory error");
    assert_eq!(line["level"], "WARN", "{line}");
    let (_, text) = d.get("/metrics");
    let counted = metric(&text, "leaderd_redis_errors_total", &[("kind", "other")]);
    assert!(counted.is_some_and(|n| n >= 1.0), "{text}");
}

#[test]
fn two_processes_with_one_identity_both_warn_and_set_the_gauge() {
    let redis = RedisServer::start();
    let name = "twins";
    let ds = [
        Daemon::spawn(&opts(&redis, name, "twin")),
        Daemon::spawn(&opts(&redis, name, "twin")),
    ];
    for d in &ds {
        let text = wait_until(BOUND, POLL, || {
            let (code, text) = d.get("/metrics");
            (code == 200).then_some(text)
        })
        .expect("metrics served");
        let before = metric(&text, "leaderd_identity_conflict", &[]);
        assert!(before.is_some(), "the gauge exists from the start: {text}");
    }
    for d in &ds {
        assert_identity_conflict(d, BOUND);
    }
}

/// 1,500 live entries seen before the replicas' last heartbeats (a full read returns 1,000,
/// oldest first): `GET /candidates` and `status` on the follower still list the leader and
/// the follower itself.
#[test]
fn a_read_past_1000_candidates_lists_the_leader_and_the_reader() {
    let redis = RedisServer::start();
    let name = "crowded";
    seed_fence(&redis, name);
    // A heartbeat every 10 s, so the entries below stay live for 15 s.
    let slow = |identity: &str| {
        let mut o = DaemonOpts::new(name, identity, &redis.url());
        o.lease = "30s".into();
        o.renew_deadline = "20s".into();
        o.retry = "2s".into();
        o
    };
    let a = Daemon::spawn(&slow("a"));
    wait_until(BOUND, POLL, || {
        (a.status_doc()?["is_leader"] == true).then_some(())
    })
    .expect("a leads");
    let b = Daemon::spawn(&slow("b"));
    wait_until(BOUND, POLL, || {
        b.listed().filter(|(_, ids)| ids == &["a", "b"])
    })
    .expect("a and b listed");
    let seen = redis_ms(&redis) - 15_000;
    let ids: Vec<String> = (0..1500).map(|i| format!("c{i:04}")).collect();
    let hash: Vec<(String, String)> = ids.iter().map(|id| (id.clone(), entry(0, seen))).collect();
    let index: Vec<(String, String)> = ids
        .iter()
        .map(|id| (seen.to_string(), id.clone()))
        .collect();
    batched(&redis, "HSET", &keys(name).candidates, &hash);
    batched(&redis, "ZADD", &keys(name).candidates_index, &index);

    let (code, body) = b.get("/candidates");
    assert_eq!(code, 200, "{body}");
    let listed: Vec<Value> = serde_json::from_str(&body).expect("a JSON array");
    let shown: Vec<&str> = listed
        .iter()
        .filter_map(|c| c["identity"].as_str())
        .collect();
    assert!(shown.len() > 1000, "{} listed", shown.len());
    assert_eq!(shown[0], "a", "the leader first");
    assert!(shown.contains(&"b"), "GET /candidates on b lists b");
    let (_, ids) = b.listed().expect("status --json");
    assert!(
        ids.iter().any(|id| id == "b"),
        "status with b's config lists b"
    );
    assert!(
        redis_ms(&redis) < seen + 30_000,
        "read while the entries were live"
    );
}
