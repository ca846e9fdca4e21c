//! Issue 13, item 1: wall clocks that jump, for real. A time-shifting preload
//! (`tests/support/timeshift.c`) moves the wall clock of one redis-server or one leaderd
//! process. A Redis whose clock jumps 10 s forward expires the lease early: the overlap it
//! causes is at most one `retry_period` plus a renew's round trip, and the old leader steps
//! down with reason `lost`. In Redlock mode one node's jump causes no overlap at all and the
//! leader keeps its term. Jumps of leaderd's own wall clock change nothing.
//!
//! Every run appends what it measured to `target/tmp/clock-jump.txt` (see BENCHMARKS.md).

mod support;

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::election::all;
use support::safety::field_u64;
use support::{
    check_logs, keys, now_ms, seed_fence, terms_from_logs, wait_leader, wait_until, Daemon,
    DaemonOpts, RedisServer, ShiftedClock, Term, SLOW,
};

/// The single-Redis test's `retry_period` (lease 4 s, renew deadline 2.5 s, command timeout
/// 200 ms): the window in which a follower started at the jump can take the lease is this
/// minus its start-up, which takes up to a few hundred ms on a loaded machine. The other
/// tests use the support defaults (lease 2 s, renew deadline 1400 ms, retry 300 ms).
const RETRY_MS: u64 = 1000;
/// A renew's round trip on loopback (a few ms; the command timeout, 200 ms, is only what a
/// renew may take before it fails).
const ROUND_TRIP_MS: u64 = 10;
/// What the bound allows beyond `retry_period` plus a round trip
/// (docs/safety.md#faults-what-leaderd-guarantees-and-what-it-cannot): the leader's renew timer
/// firing late and its round trip slowed, on a 2-core machine shared with other builds (up to 30 ms
/// over seen at a load average of 15).
const SLACK_MS: u64 = 90;
const JUMP_MS: i64 = 10_000;
const POLL: Duration = Duration::from_millis(5);

fn record(line: &str) {
    eprintln!("{line}");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("clock-jump.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

fn leading(d: &Daemon) -> Option<u64> {
    let doc = d.status_doc()?;
    (doc["is_leader"] == true).then(|| doc["fence"].as_u64().unwrap_or(0))
}

/// Returns right after `d` logged a `renewed` line it had not logged before, so that the
/// next renew is about one `retry_period` away.
fn wait_fresh_renew(d: &Daemon) {
    let before = d.events_named("renewed").len();
    wait_until(Duration::from_secs(5), POLL, || {
        (d.events_named("renewed").len() > before).then_some(())
    })
    .expect("the leader renews");
}

fn stop_all(daemons: &mut [Daemon]) {
    for d in daemons.iter() {
        d.signal(Signal::SIGTERM);
    }
    for d in daemons.iter_mut() {
        assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(0));
    }
}

/// Every overlap between two claims: `(ms, earlier, later)`.
fn overlaps(terms: &[Term]) -> Vec<(u64, Term, Term)> {
    let mut out = Vec::new();
    for (i, earlier) in terms.iter().enumerate() {
        for later in &terms[i + 1..] {
            if earlier.claim_end_ms() > later.acquired_at_ms {
                let ms = earlier.claim_end_ms() - later.acquired_at_ms;
                out.push((ms, earlier.clone(), later.clone()));
            }
        }
    }
    out
}

fn events_of(d: &Daemon, name: &str, fence: u64) -> Vec<Value> {
    d.events_named(name)
        .into_iter()
        .filter(|e| field_u64(e, "fence") == Some(fence))
        .collect()
}

#[test]
fn redis_expires_keys_by_the_shifted_clock() {
    let clock = ShiftedClock::new();
    let redis = RedisServer::start_with_env(&[], &clock.env());
    let time_of = |r: &RedisServer| -> u64 {
        r.cmd(&["TIME"])
            .lines()
            .next()
            .and_then(|s| s.parse().ok())
            .expect("TIME")
    };
    let real = time_of(&redis);
    assert!(real.abs_diff(now_ms() / 1000) <= 2, "no shift yet");
    assert_eq!(redis.cmd(&["SET", "k", "v", "PX", "5000"]), "OK");
    assert_eq!(redis.cmd(&["SET", "long", "v", "PX", "60000"]), "OK");
    clock.set_offset_ms(JUMP_MS);
    std::thread::sleep(Duration::from_millis(20));
    let shifted = time_of(&redis);
    assert!(
        shifted.abs_diff(now_ms() / 1000 + 10) <= 2,
        "TIME follows the jump: {shifted} vs {}",
        now_ms() / 1000
    );
    assert_eq!(redis.cmd(&["GET", "k"]), "(nil)", "a 5 s key is gone");
    let ttl: i64 = redis.cmd(&["PTTL", "long"]).parse().expect("PTTL");
    assert!((40_000..=50_000).contains(&ttl), "60 s key: {ttl} ms left");
    clock.set_offset_ms(0);
    std::thread::sleep(Duration::from_millis(20));
    assert!(time_of(&redis).abs_diff(now_ms() / 1000) <= 2, "back");
}

/// Single Redis: three times, right after the leader renewed, the Redis clock jumps 10 s
/// forward and a new follower starts (it reads the lease at once, like a follower polling at
/// that moment). The lease is gone early; the new follower is granted it while the old
/// leader still claims, until its next renew (one `retry_period` later) says "not ours".
/// Each round must show that overlap: a round in which nobody took over showed nothing.
#[test]
fn a_redis_clock_jump_overlaps_by_at_most_a_retry_period_and_a_round_trip() {
    let name = "clock-jump";
    let clock = ShiftedClock::new();
    let redis = RedisServer::start_with_env(&[], &clock.env());
    // The election exists already (no first-start quarantine).
    seed_fence(&redis, name);
    let spawn = |id: &str| {
        let mut o = DaemonOpts::new(name, id, &redis.url());
        (o.lease, o.renew_deadline) = ("4s".into(), "2500ms".into());
        o.retry = format!("{RETRY_MS}ms");
        Daemon::spawn(&o)
    };
    let mut daemons = vec![spawn("r0"), spawn("r1")];
    let rounds = 3;
    let bound = RETRY_MS + ROUND_TRIP_MS + SLACK_MS;
    // The fence of each round's leader, and when its Redis clock jumped.
    let mut jumped = Vec::new();
    for round in 0..rounds {
        let leader = wait_leader(&daemons, &all(&daemons), SLOW);
        let fence = leading(&daemons[leader]).expect("leads");
        wait_fresh_renew(&daemons[leader]);
        clock.set_offset_ms(JUMP_MS * (round + 1));
        let at = now_ms();
        daemons.push(spawn(&format!("r{}", daemons.len())));
        let lost = wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
            events_of(&daemons[leader], "stepped_down", fence).pop()
        })
        .unwrap_or_else(|| panic!("round {round}: the leader never stepped down"));
        assert_eq!(
            lost["reason"], "lost",
            "round {round}: the leader learns at its next renew that the lease is gone"
        );
        // Its next renew was one retry_period after the jump, at most.
        let after = field_u64(&lost, "ended_at_ms").expect("ended_at_ms") as i64 - at as i64;
        assert!(
            after <= bound as i64,
            "round {round}: stepped down {after} ms after the jump (bound {bound} ms)"
        );
        // A new term (the new follower's, or another follower's whose heartbeat found the
        // lease gone) before the next jump.
        wait_until(SLOW, Duration::from_millis(20), || {
            daemons
                .iter()
                .any(|d| leading(d).is_some_and(|f| f > fence))
                .then_some(())
        })
        .unwrap_or_else(|| panic!("round {round}: nobody took over from fence {fence}"));
        jumped.push((fence, at));
    }
    stop_all(&mut daemons);
    let logs: Vec<_> = daemons.iter().map(Daemon::safety_log).collect();
    let terms = terms_from_logs(&logs);
    let fences: Vec<u64> = terms.iter().map(|t| t.fence).collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences strictly increase in order of acquisition: {fences:?}"
    );
    let found = overlaps(&terms);
    for (ms, a, b) in &found {
        assert!(
            *ms <= bound,
            "overlap of {ms} ms > {bound} ms: {a:?} still claimed when {b:?} began"
        );
    }
    // Each jump was exercised: a term began while the jumped-over leader still claimed.
    for (round, (fence, at)) in jumped.iter().enumerate() {
        assert!(
            found
                .iter()
                .any(|(_, a, b)| a.fence == *fence && b.acquired_at_ms >= *at),
            "round {round}: nobody took the lease while fence {fence} still claimed it: the jump showed nothing ({terms:?})"
        );
    }
    let measured: Vec<u64> = found.iter().map(|(ms, _, _)| *ms).collect();
    record(&format!(
        "redis clock +10 s (single, lease 4 s, retry {RETRY_MS} ms): {rounds} jumps, {} overlaps, measured {measured:?} ms (bound {bound} ms), {} terms",
        found.len(),
        terms.len()
    ));
}

fn redlock_opts(name: &str, id: &str, urls: &[String]) -> DaemonOpts {
    let mut o = DaemonOpts::new(name, id, "");
    let list: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    o.extra_yaml = format!("redis:\n  mode: redlock\n  urls: [{}]\n", list.join(", "));
    o
}

/// Redlock over 3 nodes: one node's clock jumps 10 s forward right after a renew, and a new
/// follower starts at that moment. That node loses the lease, the other two still hold it:
/// no majority for anyone else, the leader keeps its term and takes the node back.
#[test]
fn a_redlock_node_clock_jump_causes_no_overlap_and_the_leader_keeps_its_term() {
    let name = "clock-jump-redlock";
    let clock = ShiftedClock::new();
    let nodes: Vec<RedisServer> = (0..3)
        .map(|i| {
            let env = if i == 0 { clock.env() } else { Vec::new() };
            RedisServer::start_with_env(&[], &env)
        })
        .collect();
    let lock_key = keys(name).lock;
    for n in &nodes {
        seed_fence(n, name);
    }
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let mut daemons: Vec<Daemon> = ["r0", "r1"]
        .iter()
        .map(|id| Daemon::spawn(&redlock_opts(name, id, &urls)))
        .collect();
    let leader = wait_leader(&daemons, &all(&daemons), SLOW);
    let id = daemons[leader].identity().to_string();
    let fence = leading(&daemons[leader]).expect("leads");
    wait_fresh_renew(&daemons[leader]);
    clock.set_offset_ms(JUMP_MS);
    let jumped = Instant::now();
    daemons.push(Daemon::spawn(&redlock_opts(name, "r2", &urls)));
    // The jumped node lost the lease at once (nobody holds it there, or a contender's
    // attempt that a majority refused).
    let gone = nodes[0].cmd(&["HGET", &lock_key, "holder"]);
    assert_ne!(gone, id, "the jumped node expired the lease");
    let renewed_before = events_of(&daemons[leader], "renewed", fence).len();
    let back = wait_until(Duration::from_secs(8), Duration::from_millis(50), || {
        (nodes[0].cmd(&["HGET", &lock_key, "holder"]) == id).then(|| jumped.elapsed())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(leading(&daemons[leader]), Some(fence), "same term");
    let renewed = events_of(&daemons[leader], "renewed", fence).len() - renewed_before;
    assert!(renewed >= 3, "renewals went on: {renewed}");
    stop_all(&mut daemons);
    let logs: Vec<_> = daemons.iter().map(Daemon::safety_log).collect();
    let terms = check_logs(&logs).unwrap_or_else(|e| panic!("{e}"));
    let ours: Vec<&Term> = terms.iter().filter(|t| t.fence == fence).collect();
    assert_eq!(terms.len(), 1, "one term, no other: {terms:?}");
    assert_eq!(ours.len(), 1);
    let reasons: Vec<String> = events_of(&daemons[leader], "stepped_down", fence)
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        reasons,
        ["shutdown"],
        "the term ended only at the final SIGTERM"
    );
    let back = back.expect("the leader takes the jumped node back while its term is valid");
    record(&format!(
        "redis clock +10 s (redlock, 1 of 3 nodes): 0 overlaps, the leader kept fence {fence}, {renewed} renewals in the next {} ms, node taken back after {} ms",
        jumped.elapsed().as_millis(),
        back.as_millis()
    ));
}

/// leaderd's own wall clock jumps 1 h forward, then 1 h back (the follower's the other way),
/// each for 3 s: the leader keeps its term and renews on, the follower never takes over,
/// `/readyz` answers 200 throughout. Only what is published in wall time moves.
#[test]
fn jumps_of_leaderds_own_wall_clock_change_nothing() {
    let name = "clock-jump-leaderd";
    let redis = RedisServer::start();
    seed_fence(&redis, name);
    let clocks = [ShiftedClock::new(), ShiftedClock::new()];
    let mut daemons: Vec<Daemon> = ["r0", "r1"]
        .iter()
        .zip(&clocks)
        .map(|(id, clock)| {
            let mut o = DaemonOpts::new(name, id, &redis.url());
            o.env = clock.env();
            Daemon::spawn(&o)
        })
        .collect();
    let leader = wait_leader(&daemons, &all(&daemons), SLOW);
    let follower = 1 - leader;
    let fence = leading(&daemons[leader]).expect("leads");
    const HOUR: i64 = 3_600_000;
    for (phase, shift) in [HOUR, -HOUR, 0].into_iter().enumerate() {
        clocks[leader].set_offset_ms(shift);
        clocks[follower].set_offset_ms(-shift);
        let until = Instant::now() + Duration::from_secs(3);
        let mut checks = 0;
        while Instant::now() < until {
            let (code, _) = daemons[leader].get("/readyz");
            assert_eq!(code, 200, "phase {phase}: /readyz of the leader");
            let doc = daemons[leader].status_doc().expect("status");
            assert_eq!(doc["is_leader"], true, "phase {phase}");
            assert_eq!(doc["fence"].as_u64(), Some(fence), "phase {phase}");
            let shown = doc["observed_at_ms"].as_i64().expect("observed_at_ms");
            let real = now_ms() as i64;
            // From the first renew of the phase on, the published times are in shifted time.
            if until - Instant::now() < Duration::from_millis(2500) {
                assert!(
                    (shown - real - shift).abs() < 60_000,
                    "phase {phase}: the published wall time moved by {shift} ms ({shown} vs {real})"
                );
            }
            assert_eq!(leading(&daemons[follower]), None, "phase {phase}");
            checks += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(checks >= 5, "phase {phase}: checked {checks} times");
    }
    let renewed = events_of(&daemons[leader], "renewed", fence);
    let real = now_ms() as i64;
    let valid = |e: &Value| field_u64(e, "lease_valid_until_ms").unwrap_or(0) as i64;
    let ahead = renewed
        .iter()
        .filter(|e| valid(e) > real + HOUR / 2)
        .count();
    let behind = renewed
        .iter()
        .filter(|e| valid(e) < real - HOUR / 2)
        .count();
    assert!(
        ahead >= 3 && behind >= 3,
        "renewals went on while the clock was ahead ({ahead}) and behind ({behind})"
    );
    stop_all(&mut daemons);
    for d in &daemons {
        let acquired = d.events_named("acquired").len();
        let stepped: Vec<String> = d
            .events_named("stepped_down")
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or("").to_string())
            .collect();
        if d.identity() == daemons[leader].identity() {
            assert_eq!(acquired, 1, "one term");
            assert_eq!(
                stepped,
                ["shutdown"],
                "no step-down before the final SIGTERM"
            );
        } else {
            assert_eq!(acquired, 0, "the follower never took over");
        }
    }
    record(&format!(
        "leaderd wall clock +1 h then -1 h (3 s each): no step-down, one term, {ahead} renewals ahead and {behind} behind"
    ));
}
