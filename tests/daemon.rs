//! Issue 3: three real `leaderd` processes over a real redis-server, observed only from the
//! outside (HTTP, the leader files, the JSON logs, exit codes). Every test ends with the
//! shared safety checker over all replicas' logs.
//!
//! Timings (the support defaults; the SIGKILL test: leaderd's defaults): lease 2s,
//! renew_deadline 1400ms, retry 300ms, command_timeout 200ms. A bound that is a test's point is close to its target, with the
//! slack a debug build on a loaded 2-core machine needs stated beside it; waits for
//! something to happen are generous.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use support::election::watch_release;
use support::logs::*;
use support::metrics::parse_metrics;
use support::replicas::*;
use support::{now_ms, wait_until, DOC_KEYS, POLL, SLOW};

const EXIT_WAIT: Duration = Duration::from_secs(5);
/// SIGTERM of the leader to the successor's `acquired_at`: the target is 10 ms (BENCHMARKS.md,
/// graceful handover); 90 ms more for a debug build on a loaded 2-core machine.
const HANDOVER_BOUND_MS: i64 = 100;
/// A dead leader's lease taken after its expiry in Redis: the target is 20 ms (BENCHMARKS.md,
/// crash failover); 130 ms more for a debug build on a loaded 2-core machine.
const EXPIRY_BOUND_MS: i64 = 150;

fn keys_of(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

fn assert_doc_shape(doc: &Value) {
    let want: BTreeSet<String> = DOC_KEYS.iter().map(|s| s.to_string()).collect();
    assert_eq!(keys_of(doc), want, "status document shape: {doc}");
}

fn status_json(c: &Replicas, via: usize) -> (Option<i32>, Value) {
    let out = c.daemons[via].cli(&["status", "--json"]);
    let doc: Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("status --json printed no JSON ({e}): {out:?}"));
    (out.code, doc)
}

/// Every series of docs/outputs.md#metrics, labelled with the election name, with its label values.
fn assert_documented_metrics(text: &str, name: &str) {
    let series = parse_metrics(text);
    let has = |metric: &str, labels: &[(&str, &str)]| {
        series.iter().any(|(n, l, _)| {
            n == metric
                && l.get("name").map(String::as_str) == Some(name)
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
    };
    for metric in [
        "leaderd_is_leader",
        "leaderd_leader_transitions_total",
        "leaderd_renew_duration_seconds_bucket",
        "leaderd_renew_duration_seconds_sum",
        "leaderd_renew_duration_seconds_count",
        "leaderd_lease_remaining_seconds",
        "leaderd_fence",
        "leaderd_build_info",
        "leader_election_master_status",
    ] {
        assert!(
            has(metric, &[]),
            "no {metric}{{name=\"{name}\"}} in\n{text}"
        );
    }
    for result in ["acquired", "held", "error"] {
        let labels = [("result", result)];
        assert!(
            has("leaderd_acquire_attempts_total", &labels),
            "{result}\n{text}"
        );
    }
    for result in ["ok", "lost", "error"] {
        let labels = [("result", result)];
        assert!(has("leaderd_renewals_total", &labels), "{result}\n{text}");
    }
    for reason in ["lost", "deadline", "shutdown", "yield", "child_exit"] {
        let labels = [("reason", reason)];
        assert!(has("leaderd_step_downs_total", &labels), "{reason}\n{text}");
    }
    for kind in ["timeout", "connection", "auth", "script", "other"] {
        let labels = [("kind", kind)];
        assert!(has("leaderd_redis_errors_total", &labels), "{kind}\n{text}");
    }
    let info = series
        .iter()
        .find(|(n, _, _)| n == "leaderd_build_info")
        .expect("build info");
    assert!(info.1.contains_key("version"), "{info:?}");
    assert_eq!(info.2, 1.0);
    assert!(
        series.iter().any(|(n, _, _)| n.starts_with("process_")),
        "no process_* metrics in\n{text}"
    );
    for (n, l, _) in &series {
        assert_eq!(
            l.get("name").map(String::as_str),
            Some(name),
            "{n} without the name label"
        );
    }
}

/// The `data:` payloads of the `status` events in an SSE body.
fn sse_documents(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter(|block| block.lines().any(|l| l.trim() == "event: status"))
        .filter_map(|block| {
            let data: String = block
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            serde_json::from_str(&data).ok()
        })
        .collect()
}

#[test]
fn one_leader_after_quarantine_and_every_replica_agrees() {
    let c = Replicas::start("agree", 3, false, "");
    let name = c.name.clone();
    let all = c.all();

    // A brand-new election waits one lease_duration: every replica follows nobody.
    let quarantined = wait_until(Duration::from_secs(5), POLL, || {
        let docs: Vec<Value> = all
            .iter()
            .map(|&i| c.daemons[i].status_doc())
            .collect::<Option<_>>()?;
        docs.iter()
            .all(|d| d["state"] == "follower")
            .then_some(docs)
    })
    .expect("every replica follows within 5s of starting");
    // The placeholder (empty holder) and when the server set it, unless already gone.
    let placeholder = c
        .redis
        .cmd(&["HMGET", &c.keys().lock, "holder", "acquired_at_ms"]);
    let quarantine_set_ms: Option<u64> = match placeholder.split_once('\n') {
        Some(("", at)) => Some(at.parse().expect("the placeholder's acquired_at_ms")),
        _ => None,
    };
    let (code, st) = status_json(&c, 0);
    for doc in &quarantined {
        assert_doc_shape(doc);
        assert_eq!(doc["is_leader"], false, "{doc}");
        assert_eq!(
            doc["leader"],
            Value::Null,
            "quarantine has no leader: {doc}"
        );
        assert_eq!(doc["fence"], Value::Null, "quarantine has no fence: {doc}");
    }
    // Whichever the status saw, it must say it consistently; the quarantine itself is
    // shown deterministically by `status_shows_a_quarantine_and_a_reservation`.
    if st["state"] == "quarantined" {
        assert_eq!(code, Some(3), "status exits 3 while quarantined: {st}");
        assert_eq!(st["holder"], Value::Null, "{st}");
        let remaining = st["remaining_ms"].as_u64().expect("remaining_ms");
        assert!(remaining <= 2000, "{st}");
    } else {
        assert_eq!(st["state"], "held", "{st}");
        assert_eq!(code, Some(0), "{st}");
    }
    assert_eq!(st["name"], name.as_str());
    let text_status = c.daemons[2].cli(&["status"]);
    assert!(matches!(text_status.code, Some(0 | 3)), "{text_status:?}");
    assert!(text_status.stdout.contains(&name), "{text_status:?}");

    // Exactly one leader, every replica agrees (GET /leader and GET /).
    let l = c.wait_agreed_leader(&all, SLOW);
    let who = c.identity(l).to_string();
    let doc = c.daemons[l].status_doc().expect("leader document");
    assert_doc_shape(&doc);
    assert_eq!(doc["state"], "leader");
    assert_eq!(doc["identity"], who.as_str());
    let fence = doc["fence"].as_u64().expect("leader's fence");
    let acquired_at = doc["acquired_at_ms"].as_u64().expect("acquired_at_ms");
    assert!(doc["lease_valid_until_ms"].as_u64().unwrap() > acquired_at);
    assert!(doc["acquired_at"].as_str().unwrap().ends_with('Z'));
    // The first term's fence is the seeded counter (the server clock in microseconds when
    // the quarantine began) plus one: it began only once the quarantine had ended.
    let set_ms = quarantine_set_ms.unwrap_or((fence - 1) / 1000);
    assert!(
        acquired_at + 50 >= set_ms + LEASE.as_millis() as u64,
        "the first term ({acquired_at}) began before the quarantine ({set_ms} + 2s) ended"
    );
    for i in c.others(l) {
        let d = c.daemons[i].status_doc().unwrap();
        assert_eq!(d["state"], "follower", "{d}");
        assert_eq!(
            d["fence"].as_u64(),
            Some(fence),
            "follower sees the leader's fence: {d}"
        );
        assert_eq!(d["acquired_at_ms"], Value::Null);
        assert_eq!(d["lease_valid_until_ms"], Value::Null);
        assert_eq!(c.daemons[i].get("/readyz").0, 503);
        assert_eq!(c.daemons[i].get("/healthz").0, 200);
    }
    assert_eq!(c.daemons[l].get("/readyz").0, 200);
    assert_eq!(c.daemons[l].get("/healthz").0, 200);

    // The leader files say the same (they are rewritten at every change).
    let files = wait_until(Duration::from_secs(3), POLL, || {
        let docs: Vec<Value> = all
            .iter()
            .map(|&i| c.daemons[i].file_doc())
            .collect::<Option<_>>()?;
        docs.iter()
            .all(|d| d["leader"].as_str() == Some(&who))
            .then_some(docs)
    })
    .expect("every leader file names the leader");
    for (i, f) in files.iter().enumerate() {
        assert_doc_shape(f);
        assert_eq!(f["is_leader"], i == l, "{f}");
        assert_eq!(f["fence"].as_u64(), Some(fence), "{f}");
    }

    // `status`: held, exit 0, the documented shape.
    let (code, st) = status_json(&c, 1);
    assert_eq!(code, Some(0), "{st}");
    let want: BTreeSet<String> = [
        "name",
        "state",
        "holder",
        "fence",
        "remaining_ms",
        "candidates",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(keys_of(&st), want, "{st}");
    assert_eq!(st["state"], "held");
    assert_eq!(st["holder"], who.as_str());
    assert_eq!(st["fence"].as_u64(), Some(fence));
    let remaining = st["remaining_ms"].as_u64().unwrap();
    assert!(remaining > 0 && remaining <= 2000, "{st}");

    // Followers log `leader_changed` naming the leader and its fence.
    for i in c.others(l) {
        let ev = wait_until(Duration::from_secs(3), POLL, || {
            c.daemons[i]
                .events_named("leader_changed")
                .into_iter()
                .find(|e| e["leader"].as_str() == Some(&who))
        })
        .unwrap_or_else(|| panic!("{} never logged leader_changed to {who}", c.identity(i)));
        assert_eq!(ev["fence"].as_u64(), Some(fence), "{ev}");
    }

    // HTTP surface.
    let d = &c.daemons[l];
    assert_eq!(d.get("/nope").0, 404);
    assert_eq!(d.get("/leader/x").0, 404);
    assert_eq!(d.request("POST", "/leader").0, 405);
    assert_eq!(d.request("DELETE", "/metrics").0, 405);
    let (code, metrics_text) = d.get("/metrics");
    assert_eq!(code, 200);
    assert_documented_metrics(&metrics_text, &name);
    let m = |text: &str, metric: &str, labels: &[(&str, &str)]| {
        metric_value(text, metric, labels).unwrap_or_else(|| panic!("no {metric} in\n{text}"))
    };
    assert_eq!(m(&metrics_text, "leaderd_is_leader", &[]), 1.0);
    assert_eq!(m(&metrics_text, "leader_election_master_status", &[]), 1.0);
    assert_eq!(m(&metrics_text, "leaderd_fence", &[]), fence as f64);
    // A fresh Redis: the election's first term begins after its quarantine.
    let after_quarantine = [("began", "quarantine")];
    assert_eq!(
        m(
            &metrics_text,
            "leaderd_leader_transitions_total",
            &after_quarantine
        ),
        1.0
    );
    let acquired_count = [("result", "acquired")];
    assert_eq!(
        m(
            &metrics_text,
            "leaderd_acquire_attempts_total",
            &acquired_count
        ),
        1.0
    );
    let left = m(&metrics_text, "leaderd_lease_remaining_seconds", &[]);
    assert!(left > 0.0 && left <= 2.0, "{left}");
    support::tools::promtool_accepts(&metrics_text, "the leader's /metrics");
    let follower = c.others(l)[0];
    let (_, ftext) = c.daemons[follower].get("/metrics");
    assert_documented_metrics(&ftext, &name);
    assert_eq!(m(&ftext, "leaderd_is_leader", &[]), 0.0);
    assert_eq!(m(&ftext, "leader_election_master_status", &[]), 0.0);
    assert_eq!(m(&ftext, "leaderd_fence", &[]), 0.0);
    assert_eq!(m(&ftext, "leaderd_lease_remaining_seconds", &[]), 0.0);
    assert!(
        m(
            &ftext,
            "leaderd_acquire_attempts_total",
            &[("result", "held")]
        ) >= 1.0
    );
    support::tools::promtool_accepts(&ftext, "a follower's /metrics");

    // /events: the document at once (well before the next change).
    let (code, body) =
        support::daemon::http_request(d.http_addr(), "GET", "/events", Duration::from_millis(700));
    assert_eq!(code, 200, "{body}");
    let events = sse_documents(&body);
    let first = events
        .first()
        .unwrap_or_else(|| panic!("no status event in {body:?}"));
    assert_doc_shape(first);
    assert_eq!(first["identity"], who.as_str());
    assert_eq!(first["is_leader"], true);

    // Still live well after renew_deadline of leading (renewing is progress too).
    let since = now_ms().saturating_sub(acquired_at);
    std::thread::sleep(Duration::from_millis(2500u64.saturating_sub(since)));
    for d in &c.daemons {
        assert_eq!(
            d.get("/healthz").0,
            200,
            "{} stuck:\n{}",
            d.identity(),
            d.log()
        );
    }
    assert_eq!(c.daemons[l].get("/readyz").0, 200);
    assert_eq!(
        c.agreed_leader(&all),
        Some(l),
        "leadership moved without a fault"
    );

    let terms = c.check_safety();
    assert_eq!(terms.len(), 1, "{terms:#?}");
}

fn metric_value(text: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    support::metrics::metric(text, metric, labels)
}

/// `leaderd_leader_transitions_total{began}` of `d`.
fn began(d: &support::Daemon, how: &str) -> f64 {
    let (_, text) = d.get("/metrics");
    let labels = [("began", how)];
    metric_value(&text, "leaderd_leader_transitions_total", &labels).expect("transitions")
}

#[test]
fn sigterm_leader_exits_0_and_hands_over_quickly() {
    let mut c = Replicas::start("sigterm", 3, false, "");
    let l = c.wait_agreed_leader(&c.all(), SLOW);
    let fence1 = c.daemons[l].status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();

    // Followers' /events streams, read for a while across the handover.
    let streams: Vec<_> = c
        .others(l)
        .into_iter()
        .map(|i| {
            let addr = c.daemons[i].http_addr();
            std::thread::spawn(move || {
                support::daemon::http_request(addr, "GET", "/events", Duration::from_millis(2500))
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let release = watch_release(&c.redis, &c.name, SLOW);

    let sent = now_ms();
    let signalled = Instant::now();
    c.daemons[l].signal(Signal::SIGTERM);
    let code = c.daemons[l].wait_exit(EXIT_WAIT);
    assert_eq!(code, Some(0), "SIGTERM: exit 0");
    // It released before it exited: the lease is no longer its own.
    let holder = c.redis.cmd(&["HGET", &c.keys().lock, "holder"]);
    assert_ne!(
        holder,
        c.identity(l),
        "the lease outlived its holder's exit"
    );
    // Within grace_period (3s by default) + 1s.
    assert!(
        signalled.elapsed() < Duration::from_secs(4),
        "{:?}",
        signalled.elapsed()
    );
    let file = c.daemons[l].file_doc().expect("leader file after shutdown");
    assert_eq!(file["state"], "stopped", "{file}");
    assert_eq!(file["is_leader"], false, "{file}");
    assert_eq!(file["lease_valid_until_ms"], Value::Null, "{file}");

    let others = c.others(l);
    let n = c.wait_agreed_leader(&others, SLOW);
    let doc = c.daemons[n].status_doc().unwrap();
    let fence2 = doc["fence"].as_u64().unwrap();
    let acquired_at = doc["acquired_at_ms"].as_i64().unwrap();
    let handover = acquired_at - sent as i64;
    println!("SIGTERM -> new leader's acquired_at: {handover}ms");
    assert!(
        handover < HANDOVER_BOUND_MS,
        "handover took {handover}ms (bound {HANDOVER_BOUND_MS}ms)"
    );
    assert!(fence2 > fence1);
    // Counted by the successor, which lives on: the old leader's count exits with it.
    assert_eq!(
        began(&c.daemons[n], "handover"),
        1.0,
        "the reserved release's term"
    );
    // Each stream delivered the old document at once, then the change.
    for stream in streams {
        let (code, body) = stream.join().expect("events reader");
        assert_eq!(code, 200);
        let docs = sse_documents(&body);
        assert_eq!(
            docs.first().map(|d| d["fence"].as_u64()),
            Some(Some(fence1)),
            "{body}"
        );
        assert!(
            docs.iter().any(|d| d["fence"].as_u64() == Some(fence2)
                && d["leader"].as_str() == Some(c.identity(n))),
            "no event for the new term in {body}"
        );
    }

    // The old leader stepped down (shutdown), and only then released: the release reached
    // Redis after it had stopped claiming, and the new term began after both.
    let down = wait_event(&c.daemons[l], "stepped_down", 1, SLOW);
    assert_eq!(down["reason"], "shutdown");
    assert_eq!(down["fence"].as_u64(), Some(fence1));
    let ended_at = u64_of(&down, "ended_at_ms") as i64;
    let (released, heard_at) = release
        .join()
        .expect("release watcher")
        .expect("the release is announced");
    assert_eq!(released["holder"], c.identity(l), "{released}");
    assert_eq!(released["fence"].as_u64(), Some(fence1), "{released}");
    assert!(
        heard_at as i64 >= ended_at,
        "the release was heard {}ms before the leader stepped down",
        ended_at - heard_at as i64
    );
    assert!(
        acquired_at >= ended_at,
        "the new term began {}ms before the old leader stepped down",
        ended_at - acquired_at
    );
    // The remaining follower saw the change.
    let follower = others.iter().copied().find(|&i| i != n).unwrap();
    let new_leader = c.identity(n).to_string();
    wait_until(Duration::from_secs(3), POLL, || {
        c.daemons[follower]
            .events_named("leader_changed")
            .iter()
            .any(|e| {
                e["leader"].as_str() == Some(&new_leader) && e["fence"].as_u64() == Some(fence2)
            })
            .then_some(())
    })
    .expect("the follower logs leader_changed to the new leader");

    // Bring it back as a follower, then hand over again: fences keep increasing.
    c.daemons[l].restart();
    wait_until(SLOW, POLL, || {
        let d = c.daemons[l].status_doc()?;
        (d["leader"].as_str() == Some(c.identity(n))).then_some(())
    })
    .expect("restarted replica follows the leader");
    c.daemons[n].signal(Signal::SIGINT);
    assert_eq!(c.daemons[n].wait_exit(EXIT_WAIT), Some(0), "SIGINT: exit 0");
    let rest = c.others(n);
    let third = c.wait_agreed_leader(&rest, SLOW);
    let fence3 = c.daemons[third].status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();
    assert!(fence3 > fence2, "{fence3} <= {fence2}");

    let terms = c.check_safety();
    assert_eq!(fences_increase(&terms), vec![fence1, fence2, fence3]);
}

/// The default timings (lease 15 s, renew deadline 10 s, retry 2 s): the best successor's
/// heartbeat (every `lease_duration / 3`, a read that may find the lease vacant) lands within
/// the bound after the expiry by chance about 1 time in 33 (the followers start at random
/// moments, out of step with the leader's renewals), so a follower that does not wake at the
/// expiry fails it.
const SIGKILL_TIMINGS: &str =
    "election:\n  lease_duration: 15s\n  renew_deadline: 10s\n  retry_period: 2s\n";
const SIGKILL_LEASE_MS: i64 = 15_000;
/// `lease_duration * 0.01 + 2ms` of those timings.
const SIGKILL_DRIFT_MS: i64 = 152;

#[test]
fn sigkill_leader_is_replaced_once_its_lease_expires() {
    let name = "sigkill";
    let mut c = Replicas::seeded(name, |o| o.extra_yaml = SIGKILL_TIMINGS.into());
    c.spawn_as(IDENTITIES[0]);
    c.wait_agreed_leader(&[0], SLOW);
    for id in &IDENTITIES[1..] {
        let ms = u64::from_str_radix(&support::new_token()[..8], 16).unwrap() % 2000;
        std::thread::sleep(Duration::from_millis(ms));
        c.spawn_as(id);
    }
    let l = c.wait_agreed_leader(&c.all(), SLOW);
    let fence = c.daemons[l].status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();
    wait_event(&c.daemons[l], "renewed", 1, SLOW);

    let killed_at = now_ms();
    c.daemons[l].kill();
    let dead_valid_until =
        last_valid_until(&c.daemons[l], fence).expect("the term's validity in its log");

    let others = c.others(l);
    let n = c.wait_agreed_leader(&others, 2 * SLOW);
    let doc = c.daemons[n].status_doc().unwrap();
    let acquired_at = doc["acquired_at_ms"].as_i64().unwrap();
    let (killed_at, dead_valid_until) = (killed_at as i64, dead_valid_until as i64);
    assert!(
        acquired_at >= dead_valid_until,
        "new term at {acquired_at} began before the dead leader's validity {dead_valid_until}"
    );
    // Taken at its expiry in Redis (the validity plus the drift), not a poll later.
    let late = acquired_at - (dead_valid_until + SIGKILL_DRIFT_MS);
    let took = acquired_at - killed_at;
    println!(
        "SIGKILL -> new leader: {took}ms, {late}ms after the lease expired (its validity ended {}ms after the kill)",
        dead_valid_until - killed_at
    );
    assert!(
        late < EXPIRY_BOUND_MS,
        "taken {late}ms after the dead leader's lease expired (bound {EXPIRY_BOUND_MS}ms)"
    );
    let most = SIGKILL_LEASE_MS + EXPIRY_BOUND_MS;
    assert!(took < most, "took {took}ms to replace a dead leader");
    assert!(doc["fence"].as_u64().unwrap() > fence);
    assert_eq!(
        began(&c.daemons[n], "expiry"),
        1.0,
        "the dead leader's lease expired"
    );

    // The dead leader's file is stale but carries its validity, which has passed.
    let file = c.daemons[l].file_doc().expect("dead leader's file");
    if file["is_leader"] == true {
        let until = file["lease_valid_until_ms"].as_i64().unwrap();
        assert!(until <= acquired_at, "{file}");
    }
    c.check_safety();
}

#[test]
fn sigstop_leader_resumes_as_not_leader() {
    let c = Replicas::start("sigstop", 3, false, "");
    let l = c.wait_agreed_leader(&c.all(), SLOW);
    let fence = c.daemons[l].status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();

    c.daemons[l].signal(Signal::SIGSTOP);
    let stopped = Instant::now();
    let others = c.others(l);
    let n = c.wait_agreed_leader(&others, SLOW);
    let new_doc = c.daemons[n].status_doc().unwrap();
    let new_acquired = new_doc["acquired_at_ms"].as_u64().unwrap();
    let new_fence = new_doc["fence"].as_u64().unwrap();
    assert!(new_fence > fence);
    std::thread::sleep((2 * LEASE).saturating_sub(stopped.elapsed()));

    c.daemons[l].signal(Signal::SIGCONT);
    // The very first answers after SIGCONT already say not-leader.
    let (ready, _) = c.daemons[l].get("/readyz");
    let doc = c.daemons[l].status_doc().expect("resumed replica answers");
    assert_eq!(ready, 503, "resumed replica is ready as leader");
    assert_eq!(doc["is_leader"], false, "{doc}");
    assert_ne!(doc["state"], "leader", "{doc}");
    assert_eq!(doc["lease_valid_until_ms"], Value::Null, "{doc}");
    let (_, metrics_text) = c.daemons[l].get("/metrics");
    assert_eq!(
        metric_value(&metrics_text, "leaderd_is_leader", &[]),
        Some(0.0)
    );
    // The file, frozen while it was stopped, stops claiming promptly too.
    wait_until(Duration::from_secs(2), POLL, || {
        c.daemons[l].file_doc().filter(|f| f["is_leader"] == false)
    })
    .expect("the resumed replica's file stops claiming");

    // It steps down, and its last validity ended before the new term began.
    let down = wait_event(&c.daemons[l], "stepped_down", 1, Duration::from_secs(5));
    assert_eq!(down["fence"].as_u64(), Some(fence));
    let reason = str_of(&down, "reason");
    assert!(matches!(reason, "lost" | "deadline"), "{down}");
    let until = last_valid_until(&c.daemons[l], fence).expect("the term's validity in its log");
    assert!(
        until <= new_acquired,
        "old validity {until} reaches into the new term at {new_acquired}"
    );
    // ... and then follows the new leader.
    let all = c.all();
    let again = c.wait_agreed_leader(&all, SLOW);
    assert_eq!(again, n, "leadership moved again after the resume");
    c.check_safety();
}

#[test]
fn sigusr1_yields_releases_and_sits_out_one_lease() {
    let mut c = Replicas::start("yield", 3, false, "");
    let l = c.wait_agreed_leader(&c.all(), SLOW);
    let fence = c.daemons[l].status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();

    let sent = now_ms();
    c.daemons[l].signal(Signal::SIGUSR1);
    let down = wait_event(&c.daemons[l], "stepped_down", 1, Duration::from_secs(3));
    assert_eq!(down["reason"], "yield", "{down}");
    assert_eq!(down["fence"].as_u64(), Some(fence));
    let yielded_at = u64_of(&down, "ended_at_ms");
    assert!(yielded_at <= u64_of(&down, "lease_valid_until_ms"));
    wait_event(&c.daemons[l], "released", 1, Duration::from_secs(3));

    // Another replica leads, at once (the release is published), and the yielder follows it.
    let all = c.all();
    let n = c.wait_agreed_leader(&all, SLOW);
    assert_ne!(n, l, "the yielder led again at once");
    let acquired = c.daemons[n].status_doc().unwrap()["acquired_at_ms"]
        .as_u64()
        .unwrap();
    println!("SIGUSR1 -> new leader: {}ms", acquired.saturating_sub(sent));
    assert!(acquired.saturating_sub(sent) < 1000);
    assert!(
        c.daemons[l].is_running(),
        "SIGUSR1 must not stop the daemon"
    );

    // Remove every other contender: the lease is free, but the yielder sits out one
    // lease_duration from its yield before it contends again.
    let third = c.others(l).into_iter().find(|&i| i != n).unwrap();
    c.daemons[third].signal(Signal::SIGTERM);
    assert_eq!(c.daemons[third].wait_exit(EXIT_WAIT), Some(0));
    c.daemons[n].signal(Signal::SIGTERM);
    assert_eq!(c.daemons[n].wait_exit(EXIT_WAIT), Some(0));
    let released_at = u64_of(&stepped_down(&c.daemons[n])[0], "ended_at_ms");
    let ev = wait_event(&c.daemons[l], "acquired", 2, SLOW);
    let again = u64_of(&ev, "acquired_at_ms");
    println!(
        "yield at {yielded_at}, lease free at {released_at}, yielder led again at {again} (+{}ms)",
        again - yielded_at
    );
    assert!(
        again >= yielded_at + LEASE.as_millis() as u64,
        "the yielder led again {}ms after yielding",
        again - yielded_at
    );
    assert!(
        again < released_at.max(yielded_at + 2000) + 1500,
        "the yielder took too long to lead again"
    );
    c.check_safety();
}

#[test]
fn on_lost_exit_leader_exits_1_when_its_lease_is_taken() {
    let mut c = Replicas::start("onlost", 3, false, "election:\n  on_lost: exit\n");
    let l = c.wait_agreed_leader(&c.all(), SLOW);
    let fence = c.daemons[l].status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();

    // Someone else's term now holds the key (its token is no longer ours).
    let key = c.keys().lock;
    c.redis.cmd(&[
        "HSET",
        &key,
        "token",
        "taken-by-the-test",
        "holder",
        "intruder",
    ]);
    let code = c.daemons[l].wait_exit(EXIT_WAIT);
    assert_eq!(
        code,
        Some(1),
        "on_lost: exit must exit 1:\n{}",
        c.daemons[l].log()
    );
    let down = stepped_down(&c.daemons[l]);
    assert_eq!(down.len(), 1);
    assert_eq!(down[0]["reason"], "lost", "{}", down[0]);
    assert_eq!(down[0]["fence"].as_u64(), Some(fence));
    assert!(u64_of(&down[0], "ended_at_ms") <= u64_of(&down[0], "lease_valid_until_ms"));
    let file = c.daemons[l].file_doc().unwrap();
    assert_eq!(file["is_leader"], false, "{file}");

    // The others saw the intruder, then take over once its lease expires.
    for i in c.others(l) {
        wait_until(Duration::from_secs(3), POLL, || {
            c.daemons[i]
                .events_named("leader_changed")
                .iter()
                .any(|e| e["leader"] == "intruder")
                .then_some(())
        })
        .unwrap_or_else(|| panic!("{} never saw the intruder", c.identity(i)));
    }
    let others = c.others(l);
    let n = c.wait_agreed_leader(&others, SLOW);
    assert!(c.daemons[n].is_running());
    c.check_safety();
}

#[test]
fn a_follower_logs_a_new_term_of_the_same_leader() {
    let mut c = Replicas::start("sameleader", 2, false, "");
    let x = c.wait_agreed_leader(&c.all(), SLOW);
    let y = 1 - x;
    let fence1 = c.daemons[x].status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();
    let who = c.identity(x).to_string();
    wait_until(Duration::from_secs(3), POLL, || {
        c.daemons[y]
            .events_named("leader_changed")
            .iter()
            .any(|e| e["fence"].as_u64() == Some(fence1))
            .then_some(())
    })
    .expect("the follower logs the first term");

    // The follower misses the gap between two terms of the same leader.
    c.daemons[y].signal(Signal::SIGSTOP);
    c.daemons[x].signal(Signal::SIGTERM);
    assert_eq!(c.daemons[x].wait_exit(EXIT_WAIT), Some(0));
    c.daemons[x].restart();
    c.wait_agreed_leader(&[x], SLOW);
    let fence2 = c.daemons[x].status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();
    assert!(fence2 > fence1);
    c.daemons[y].signal(Signal::SIGCONT);

    let doc = wait_until(Duration::from_secs(5), POLL, || {
        c.daemons[y]
            .status_doc()
            .filter(|d| d["fence"].as_u64() == Some(fence2))
    })
    .expect("the follower sees the new term");
    assert_eq!(doc["leader"], who.as_str());
    let logged = wait_until(Duration::from_secs(2), POLL, || {
        c.daemons[y]
            .events_named("leader_changed")
            .into_iter()
            .find(|e| e["fence"].as_u64() == Some(fence2))
    });
    assert!(
        logged.is_some(),
        "the follower logged no leader_changed for the new term (fence {fence2}) of {who}:\n{}",
        c.daemons[y].log()
    );
    c.check_safety();
}
