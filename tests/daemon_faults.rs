//! Issue 3, faults: Redis lost, slow, cut off, unreachable, refusing our password, or holding
//! something else under the lease key. Real redis-server, real `leaderd` processes; every
//! test with a leader ends with the shared safety checker over all replicas' logs.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;

use support::logs::*;
use support::metrics::metric;
use support::replicas::*;
use support::{keys, now_ms, wait_until, Daemon, DaemonOpts, RedisServer, POLL, SLOW};

fn fence_of(d: &Daemon) -> u64 {
    d.status_doc().expect("a status document")["fence"]
        .as_u64()
        .expect("a fence")
}

/// The leader's step-down came before its validity ended.
fn assert_stepped_down_in_time(ev: &Value) {
    let ended = u64_of(ev, "ended_at_ms");
    let valid = u64_of(ev, "lease_valid_until_ms");
    assert!(
        ended <= valid,
        "stepped down {}ms after its validity ended: {ev}",
        ended - valid
    );
}

#[test]
fn redis_restarted_empty_leader_steps_down_and_a_new_term_follows_the_quarantine() {
    let mut c = Replicas::start("restart", 3, false, "");
    let l = c.wait_agreed_leader(&c.all(), SLOW);
    let fence1 = fence_of(&c.daemons[l]);
    wait_event(&c.daemons[l], "renewed", 1, Duration::from_secs(5));

    let restarted_ms = now_ms();
    c.redis.restart_empty();
    let down = wait_event(&c.daemons[l], "stepped_down", 1, Duration::from_secs(5));
    assert_eq!(down["fence"].as_u64(), Some(fence1));
    assert_stepped_down_in_time(&down);
    println!("leader stepped down: {}", down["reason"]);
    let old_valid =
        last_valid_until(&c.daemons[l], fence1).expect("the term's validity in its log");

    // Once Redis is back every replica first sees the quarantine, then one leads.
    let all = c.all();
    let n = c.wait_agreed_leader(&all, SLOW);
    let doc = c.daemons[n].status_doc().unwrap();
    let acquired = doc["acquired_at_ms"].as_u64().unwrap();
    let fence2 = doc["fence"].as_u64().unwrap();
    assert!(
        acquired >= old_valid,
        "new term at {acquired} began before the old term's validity {old_valid} ended"
    );
    assert!(
        acquired >= restarted_ms + LEASE.as_millis() as u64,
        "new term at {acquired} began within the quarantine after the restart at {restarted_ms}"
    );
    assert!(
        fence2 > fence1,
        "fence went backwards after data loss: {fence2} <= {fence1}"
    );
    for d in &c.daemons {
        let quarantine_seen = d
            .events_named("leader_changed")
            .iter()
            .any(|e| e["leader"].is_null() && field_is_true(e, "quarantined"));
        assert!(
            quarantine_seen,
            "{} never saw the quarantine:\n{}",
            d.identity(),
            d.log()
        );
    }
    let terms = c.check_safety();
    assert_eq!(fences_increase(&terms), vec![fence1, fence2]);
}

fn field_is_true(ev: &Value, key: &str) -> bool {
    support::safety::field(ev, key) == Some(&Value::Bool(true))
}

#[test]
fn slow_then_cut_off_redis_leader_steps_down_in_time_and_a_leader_returns() {
    let mut c = Replicas::start("proxy", 3, true, "");
    let l = c.wait_agreed_leader(&c.all(), SLOW);
    let fence1 = fence_of(&c.daemons[l]);
    wait_event(&c.daemons[l], "renewed", 1, Duration::from_secs(5));

    // Slower than command_timeout: no renew can succeed any more.
    c.proxy().set_latency(Duration::from_millis(300));
    let down = wait_event(&c.daemons[l], "stepped_down", 1, Duration::from_secs(5));
    assert_eq!(down["fence"].as_u64(), Some(fence1));
    assert_eq!(down["reason"], "deadline", "{down}");
    assert_stepped_down_in_time(&down);
    assert!(
        c.claiming(&c.all()).is_empty(),
        "someone claims through a slow Redis"
    );
    let (_, text) = c.daemons[l].get("/metrics");
    let deadline = metric(&text, "leaderd_step_downs_total", &[("reason", "deadline")]);
    assert_eq!(deadline, Some(1.0), "{text}");
    assert_eq!(metric(&text, "leaderd_is_leader", &[]), Some(0.0));

    // Cut off entirely.
    c.proxy().cut();
    std::thread::sleep(Duration::from_millis(1500));
    for d in &c.daemons {
        assert_eq!(
            d.get("/healthz").0,
            200,
            "{}: unreachable Redis is progress",
            d.identity()
        );
        assert_eq!(d.get("/readyz").0, 503, "{}", d.identity());
        let doc = d.status_doc().unwrap();
        assert_eq!(doc["is_leader"], false, "{doc}");
    }

    // SIGTERM without Redis: still a clean, prompt exit (the release just fails).
    c.daemons[l].signal(nix::sys::signal::Signal::SIGTERM);
    let code = c.daemons[l].wait_exit(Duration::from_secs(4));
    assert_eq!(code, Some(0), "{}", c.daemons[l].log());
    assert_eq!(c.daemons[l].file_doc().unwrap()["state"], "stopped");

    // Restored: a leader again.
    c.proxy().set_latency(Duration::ZERO);
    c.proxy().restore();
    let n = c.wait_agreed_leader(&c.others(l), SLOW);
    let fence2 = fence_of(&c.daemons[n]);
    assert!(fence2 > fence1);
    for i in c.others(l) {
        let d = &c.daemons[i];
        let (_, text) = d.get("/metrics");
        let timeouts = metric(&text, "leaderd_redis_errors_total", &[("kind", "timeout")]);
        let conns = metric(
            &text,
            "leaderd_redis_errors_total",
            &[("kind", "connection")],
        );
        assert!(
            timeouts.unwrap_or(0.0) + conns.unwrap_or(0.0) > 0.0,
            "{}: no Redis errors counted:\n{text}",
            d.identity()
        );
    }
    let terms = c.check_safety();
    fences_increase(&terms);
}

#[test]
fn on_lost_exit_leader_exits_1_when_redis_is_cut_off() {
    let mut c = Replicas::start("cutexit", 1, true, "election:\n  on_lost: exit\n");
    c.wait_agreed_leader(&[0], SLOW);
    let fence = fence_of(&c.daemons[0]);
    c.proxy().cut();
    let code = c.daemons[0].wait_exit(Duration::from_secs(5));
    assert_eq!(code, Some(1), "{}", c.daemons[0].log());
    let down = stepped_down(&c.daemons[0]);
    assert_eq!(down.len(), 1);
    assert_eq!(down[0]["reason"], "deadline");
    assert_eq!(down[0]["fence"].as_u64(), Some(fence));
    assert_stepped_down_in_time(&down[0]);
    let file = c.daemons[0].file_doc().unwrap();
    assert_eq!(file["is_leader"], false, "{file}");

    // Back, then its lease key is deleted behind its back: lost, exit 1.
    c.proxy().restore();
    c.daemons[0].restart();
    c.wait_agreed_leader(&[0], SLOW);
    let fence2 = fence_of(&c.daemons[0]);
    assert!(fence2 > fence);
    assert_eq!(c.redis.cmd(&["DEL", &c.keys().lock]), "1");
    let code = c.daemons[0].wait_exit(Duration::from_secs(5));
    assert_eq!(code, Some(1), "{}", c.daemons[0].log());
    let down = stepped_down(&c.daemons[0]);
    assert_eq!(down.len(), 2);
    assert_eq!(down[1]["reason"], "lost");
    assert_eq!(down[1]["fence"].as_u64(), Some(fence2));
    let terms = c.check_safety();
    assert_eq!(fences_increase(&terms), vec![fence, fence2]);
}

#[test]
fn unreachable_redis_daemon_stays_up_unready_and_quiet() {
    let nowhere = format!("redis://127.0.0.1:{}/0", support::free_port());
    let opts = DaemonOpts::new("unreachable", "replica-a", &nowhere);
    let mut d = Daemon::spawn(&opts);
    let started = Instant::now();
    wait_until(Duration::from_secs(5), POLL, || d.status_doc())
        .expect("HTTP answers without Redis");
    std::thread::sleep(Duration::from_secs(3).saturating_sub(started.elapsed()));
    let window = started.elapsed();

    assert!(d.is_running(), "gave up without Redis:\n{}", d.log());
    assert_eq!(d.get("/healthz").0, 200, "an unreachable Redis is progress");
    assert_eq!(d.get("/readyz").0, 503);
    let doc = d.status_doc().unwrap();
    assert_eq!(doc["is_leader"], false, "{doc}");
    assert_eq!(doc["state"], "follower", "{doc}");
    assert_eq!(doc["leader"], Value::Null, "{doc}");
    let warns = warn_lines(&d);
    println!("{} WARN/ERROR lines in {window:?}", warns.len());
    assert!(
        !warns.is_empty(),
        "the failure is never logged:\n{}",
        d.log()
    );
    assert!(
        warns.len() <= 5,
        "{} warnings in {window:?}: flooding the log:\n{}",
        warns.len(),
        d.log()
    );
    let (_, text) = d.get("/metrics");
    let errors = metric(
        &text,
        "leaderd_redis_errors_total",
        &[("kind", "connection")],
    );
    assert!(errors.unwrap_or(0.0) > 0.0, "{text}");
    let attempts = metric(
        &text,
        "leaderd_acquire_attempts_total",
        &[("result", "error")],
    );
    assert!(attempts.unwrap_or(0.0) > 0.0, "{text}");

    // `status` cannot reach Redis: exit 1.
    let out = d.cli(&["status"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(!out.stderr.trim().is_empty(), "{out:?}");
    let out = d.cli(&["status", "--json"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(d.events_named("acquired").is_empty());

    // SIGTERM of a follower that never reached Redis: exit 0, file `stopped`.
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(4)), Some(0), "{}", d.log());
    let file = d.file_doc().expect("leader file");
    assert_eq!(file["state"], "stopped", "{file}");
    check_all_logs(&[d]);
}

#[test]
fn wrong_password_is_a_clear_auth_error_and_counted() {
    let redis = RedisServer::start_with_args(&["--requirepass", "right-secret"]);
    let mut opts = DaemonOpts::new("auth", "replica-a", &redis.url());
    opts.env = vec![("LEADERD_REDIS_PASSWORD".into(), "wrong-secret".into())];
    let mut wrong = Daemon::spawn(&opts);
    let mut opts = DaemonOpts::new("auth", "replica-b", &redis.url());
    opts.env = vec![("LEADERD_REDIS_PASSWORD".into(), "right-secret".into())];
    let right = Daemon::spawn(&opts);
    let none = Daemon::spawn(&DaemonOpts::new("auth", "replica-c", &redis.url()));

    // The replica with the right password leads (after the quarantine).
    wait_until(SLOW, POLL, || {
        right.status_doc().filter(|d| d["is_leader"] == true)
    })
    .unwrap_or_else(|| {
        panic!(
            "the replica with the right password never led:\n{}",
            right.log()
        )
    });

    assert!(wrong.is_running(), "{}", wrong.log());
    let log = wrong.log();
    let auth_line = warn_lines(&wrong)
        .into_iter()
        .find(|e| {
            let text = e.to_string().to_lowercase();
            text.contains("auth") || text.contains("password") || text.contains("wrongpass")
        })
        .unwrap_or_else(|| panic!("no clear authentication error in the log:\n{log}"));
    println!("auth error line: {auth_line}");
    assert!(
        !log.contains("wrong-secret"),
        "the password is in the log:\n{log}"
    );
    assert!(!log.contains("right-secret"));
    let (_, text) = wrong.get("/metrics");
    let auth = metric(
        &text,
        "leaderd_redis_errors_total",
        &[("kind", "auth"), ("name", "auth")],
    );
    assert!(
        auth.unwrap_or(0.0) > 0.0,
        "auth errors not counted:\n{text}"
    );
    assert_eq!(wrong.get("/healthz").0, 200);
    assert_eq!(wrong.get("/readyz").0, 503);
    assert!(warn_lines(&wrong).len() <= 5, "flooding:\n{log}");
    let out = wrong.cli(&["status"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    let out = right.cli(&["status"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    // check-config never prints the password.
    let out = wrong.cli(&["check-config"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!out.stdout.contains("wrong-secret"), "{}", out.stdout);

    // No password at all (NOAUTH) is an auth error too.
    let (_, text) = none.get("/metrics");
    let auth = metric(&text, "leaderd_redis_errors_total", &[("kind", "auth")]);
    assert!(
        auth.unwrap_or(0.0) > 0.0,
        "NOAUTH not counted as auth:\n{text}"
    );
    assert_eq!(none.status_doc().unwrap()["is_leader"], false);

    let terms = check_all_logs(&[wrong, right, none]);
    assert_eq!(terms.len(), 1);
    assert_eq!(terms[0].replica, "replica-b");
}

#[test]
fn lease_key_of_the_wrong_type_is_reported_and_never_led() {
    let redis = RedisServer::start();
    let key = &keys("wrongtype").lock;
    assert_eq!(redis.cmd(&["SET", key, "somebody else's string"]), "OK");
    let mut d = Daemon::spawn(&DaemonOpts::new("wrongtype", "replica-a", &redis.url()));
    let started = Instant::now();
    let line = wait_until(Duration::from_secs(5), POLL, || {
        warn_lines(&d)
            .into_iter()
            .find(|e| e.to_string().contains(&keys("wrongtype").lock))
    })
    .unwrap_or_else(|| panic!("no error naming the key:\n{}", d.log()));
    println!("wrong type error line: {line}");
    // It stays up and never claims, for longer than a quarantine would last.
    let deadline = started + Duration::from_secs(3);
    while Instant::now() < deadline {
        let doc = d.status_doc().expect("still answering");
        assert_eq!(doc["is_leader"], false, "{doc}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(d.is_running(), "{}", d.log());
    assert_eq!(d.get("/healthz").0, 200);
    assert_eq!(d.get("/readyz").0, 503);
    assert!(d.events_named("acquired").is_empty(), "{}", d.log());
    assert!(warn_lines(&d).len() <= 5, "flooding:\n{}", d.log());
    assert_eq!(
        redis.cmd(&["GET", key]),
        "somebody else's string",
        "the key was touched"
    );
    let out = d.cli(&["status"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains(key), "{out:?}");
    check_all_logs(&[d]);
}

/// A list at the fence key: the run logs name the fence key, never the lock key.
#[test]
fn fence_key_of_the_wrong_type_is_named_in_the_logs() {
    let redis = RedisServer::start();
    let fence = &keys("wrongfence").fence;
    assert_eq!(redis.cmd(&["RPUSH", fence, "foreign"]), "1");
    let mut d = Daemon::spawn(&DaemonOpts::new("wrongfence", "replica-a", &redis.url()));
    let line = wait_until(Duration::from_secs(5), POLL, || {
        warn_lines(&d)
            .into_iter()
            .find(|e| e.to_string().contains(fence))
    })
    .unwrap_or_else(|| panic!("no error naming the fence key:\n{}", d.log()));
    assert!(
        !line.to_string().contains(&keys("wrongfence").lock),
        "{line}"
    );
    assert!(d.events_named("acquired").is_empty(), "{}", d.log());
    assert!(d.is_running(), "{}", d.log());
    assert_eq!(redis.cmd(&["LRANGE", fence, "0", "-1"]), "foreign");
    check_all_logs(&[d]);
}

#[test]
fn hung_redis_leader_steps_down_by_its_deadline_and_a_leader_returns() {
    let c = Replicas::start("hung", 3, false, "");
    let l = c.wait_agreed_leader(&c.all(), SLOW);
    let fence1 = fence_of(&c.daemons[l]);
    wait_event(&c.daemons[l], "renewed", 1, Duration::from_secs(5));

    // A hung server: connections stay open, nothing is answered.
    c.redis.pause();
    let down = wait_event(&c.daemons[l], "stepped_down", 1, Duration::from_secs(5));
    assert_eq!(down["reason"], "deadline", "{down}");
    assert_stepped_down_in_time(&down);
    // At its renew deadline (1400 ms after the last renew's send, which its validity tells),
    // give or take scheduling: no call, nor a connect of another task, holds it up.
    let deadline =
        u64_of(&down, "lease_valid_until_ms") - LEASE.as_millis() as u64 + DRIFT_MS + 1400;
    let late = u64_of(&down, "ended_at_ms").saturating_sub(deadline);
    assert!(
        late <= 150,
        "stepped down {late} ms after its renew deadline: {down}"
    );
    std::thread::sleep(Duration::from_millis(1500));
    for d in &c.daemons {
        assert_eq!(
            d.get("/healthz").0,
            200,
            "{}: a hung Redis is progress",
            d.identity()
        );
        assert_eq!(d.get("/readyz").0, 503, "{}", d.identity());
    }
    c.redis.resume();
    let n = c.wait_agreed_leader(&c.all(), SLOW);
    assert!(fence_of(&c.daemons[n]) > fence1);
    for d in &c.daemons {
        assert!(warn_lines(d).len() <= 5, "flooding:\n{}", d.log());
    }
    let terms = c.check_safety();
    fences_increase(&terms);
}

/// A Redis frozen past the lease runs, when it resumes, what it was sent meanwhile: a
/// follower's acquire that timed out grants a term nobody claims, a stepped-down leader's
/// renew extends its dead term. The replica that sees its own identity hold the lease
/// releases such grants (it kept their tokens), so a leader follows within a few attempts,
/// not a whole lease later; and a leader whose step-down is done reads `follower` while
/// Redis is still away, not `stepping_down`.
#[test]
fn a_redis_frozen_past_the_lease_leaves_no_term_held_for_nobody() {
    let c = Replicas::start("ghost", 3, false, "");
    let l = c.wait_agreed_leader(&c.all(), SLOW);
    wait_event(&c.daemons[l], "renewed", 1, Duration::from_secs(5));
    let frozen = Instant::now();
    c.redis.pause();
    wait_event(&c.daemons[l], "stepped_down", 1, Duration::from_secs(5));
    let state = wait_until(Duration::from_secs(1), POLL, || {
        let doc = c.daemons[l].status_doc()?;
        (doc["state"] == "follower").then_some(doc)
    });
    assert!(
        state.is_some(),
        "after its step-down, with Redis away: {:?}",
        c.daemons[l].status_doc()
    );
    // Lease 2 s: every grant made before the freeze has expired when it resumes.
    std::thread::sleep(Duration::from_millis(3500).saturating_sub(frozen.elapsed()));
    c.redis.resume();
    let resumed = Instant::now();
    let leading = wait_until(Duration::from_secs(5), POLL, || {
        c.all().into_iter().find(|&i| {
            c.daemons[i]
                .status_doc()
                .is_some_and(|d| d["is_leader"] == true)
        })
    });
    let took = resumed.elapsed();
    assert!(leading.is_some(), "nobody leads after the freeze");
    // A term held for nobody would keep everyone out for its whole lease (2 s).
    assert!(
        took < Duration::from_millis(1200),
        "a leader only {took:?} after Redis resumed"
    );
    let terms = c.check_safety();
    fences_increase(&terms);
}
