//! A real Prometheus (Debian's, run on its own loopback port) scraping live replicas every
//! second, evaluating `deploy/prometheus/alerts.yaml` every second, and every query of
//! `deploy/grafana/leaderd.json`, through real faults; asserted through Prometheus's HTTP API.
//!
//! The rules' windows are scaled down tenfold by a rule file generated from the real one
//! (`for: 2m` runs as 12 s, `[10m]` as 60 s; thresholds unchanged), so the run takes about two
//! minutes; the replicas' own timings (lease 3 s, renew deadline 2 s, retry 500 ms) are not
//! scaled. Four elections run side by side, each with its own fault, and each alert is
//! asserted for the election whose fault is its point:
//! - `rollout`: two rolling updates that restart the leader each time (6 graceful handovers);
//! - `pause`: the leader SIGSTOPped for 6 s (two leases), then resumed;
//! - `outage`: its Redis killed until its alerts fire, then started again (empty);
//! - `split`: two replicas of one election on two Redis servers, a real split brain;
//! - `shards`: 16 shards over 3 replicas, one SIGKILLed (its shards taken at their expiry)
//!   and a rolling update: `LeaderdShardUnowned` never fires;
//! - `unhealthy`: 8 shards over 3 replicas whose health check fails: no shard has an owner,
//!   `LeaderdShardUnowned` fires after its `for:` and resolves once the check passes again.

mod support;

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use support::election::{all, others};
use support::prometheus::{prometheus_bin, scale_rules, unix_s, Prometheus, Target};
use support::{is_leader, wait_leader, wait_until, Daemon, DaemonOpts, RedisServer, SLOW};

/// The rules' windows are divided by this.
const SCALE: u64 = 10;
const SCRAPE: Duration = Duration::from_secs(1);
/// One scrape, one evaluation and a poll, and as much again on a loaded machine (seconds).
const SLACK: f64 = 5.0;
const POLL: Duration = Duration::from_millis(200);
/// Scaled windows of the rules (seconds): MultipleLeaders' claim window and `for:`,
/// RedisErrors' rate window and `for:`, NoLeader's `for:`, Flapping's window.
const SPLIT_WINDOW: f64 = 12.0;
const SPLIT_FOR: f64 = 3.0;
const ERRORS_WINDOW: f64 = 6.0;
const ERRORS_FOR: f64 = 12.0;
const NO_LEADER_FOR: f64 = 6.0;
const FLAPPING_WINDOW: f64 = 60.0;
/// Rolling updates of the `rollout` election, each a handover per replica.
const ROLLOUTS: usize = 2;
/// LeaderdShardUnowned's scaled `for:` (seconds), and the replicas' lease.
const UNOWNED_FOR: f64 = 6.0;
const LEASE: f64 = 3.0;

fn opts(name: &str, identity: &str, url: &str) -> DaemonOpts {
    let mut o = DaemonOpts::new(name, identity, url);
    o.lease = "3s".into();
    o.renew_deadline = "2s".into();
    o.retry = "500ms".into();
    o.command_timeout = "300ms".into();
    o
}

fn election(name: &str, url: &str) -> Vec<Daemon> {
    (1..=3)
        .map(|i| Daemon::spawn(&opts(name, &format!("{name}-{i}"), url)))
        .collect()
}

/// Seconds until `/api/v1/alerts` shows `alert` of election `name` in `state` (`None`: not
/// at all), polled for at most `within` seconds.
fn wait_alert(
    prom: &Prometheus,
    alert: &str,
    name: &str,
    state: Option<&str>,
    within: f64,
) -> Option<f64> {
    let start = unix_s();
    wait_until(Duration::from_secs_f64(within), POLL, || {
        let alerts = prom.alerts();
        let now = alerts.iter().find(|a| a.is(alert, name));
        (now.map(|a| a.state.as_str()) == state).then(|| unix_s() - start)
    })
}

/// The evaluation times at which `alert` of `name` was in `state` over the last `span` s.
fn history(prom: &Prometheus, alert: &str, name: &str, state: &str, span: u64) -> Vec<f64> {
    let selector =
        format!("ALERTS{{alertname=\"{alert}\",name=\"{name}\",alertstate=\"{state}\"}}");
    let mut times: Vec<f64> = prom
        .samples(&selector, span)
        .iter()
        .flat_map(|s| s.values.iter().map(|(t, _)| *t))
        .collect();
    times.sort_by(f64::total_cmp);
    times
}

/// Terms of election `name` that began `began` over the last `span` s, counted from the
/// samples of every replica (restarts included).
fn terms(prom: &Prometheus, name: &str, began: &str, span: u64) -> f64 {
    let selector = format!("leaderd_leader_transitions_total{{name=\"{name}\",began=\"{began}\"}}");
    prom.samples(&selector, span)
        .iter()
        .map(|s| s.counter_increase())
        .sum()
}

/// Two rolling updates that restart the leader each time (the worst order: every restart
/// moves leadership). Returns when each handover began.
fn rolling_updates(e: &mut [Daemon]) -> Vec<f64> {
    let mut moves = Vec::new();
    for _ in 0..ROLLOUTS * e.len() {
        let leader = wait_leader(e, &all(e), SLOW);
        let at = unix_s();
        e[leader].signal(Signal::SIGTERM);
        assert_eq!(e[leader].wait_exit(SLOW), Some(0), "SIGTERM exits 0");
        wait_leader(e, &others(e, leader), SLOW);
        e[leader].restart();
        moves.push(at);
        // Each term lasts a few scrapes, as in a rollout that waits for readiness.
        std::thread::sleep(Duration::from_secs_f64((at + 3.0 - unix_s()).max(0.0)));
    }
    moves
}

/// SIGSTOPs the leader for two leases, resumes it, and checks that LeaderdLeaderSteppedDown
/// fires within a scrape and an evaluation of its step-down (it says a leader lost its term).
fn pause_the_leader(e: &mut [Daemon], prom: &Prometheus) {
    std::thread::sleep(Duration::from_secs(3));
    let leader = wait_leader(e, &all(e), SLOW);
    let stopped = unix_s();
    e[leader].signal(Signal::SIGSTOP);
    wait_leader(e, &others(e, leader), SLOW);
    std::thread::sleep(Duration::from_secs_f64((stopped + 6.0 - unix_s()).max(0.0)));
    e[leader].signal(Signal::SIGCONT);
    let fired = wait_alert(
        prom,
        "LeaderdLeaderSteppedDown",
        "pause",
        Some("firing"),
        30.0,
    );
    let fired = fired.expect("LeaderdLeaderSteppedDown fires after the paused leader resumes");
    println!("pause: LeaderdLeaderSteppedDown firing {fired:.1} s after SIGCONT");
    assert!(fired <= SLACK, "fired {fired:.1} s after SIGCONT");
}

/// What the `outage` election's alerts did, in seconds from Redis going down (`fired`) or
/// coming back (`cleared`).
struct Outage {
    down: f64,
    errors_fired: f64,
    errors_cleared: f64,
    no_leader_cleared: f64,
    back_at: f64,
}

/// Kills the election's Redis until LeaderdRedisErrors and LeaderdNoLeader fire (during the
/// fault, as they must), then starts it again and measures how long they take to resolve.
fn redis_outage(redis: &mut RedisServer, prom: &Prometheus) -> Outage {
    std::thread::sleep(Duration::from_secs(3));
    let down = unix_s();
    redis.stop();
    let bound = ERRORS_WINDOW + ERRORS_FOR + 2.0 * SLACK;
    let errors = wait_alert(prom, "LeaderdRedisErrors", "outage", Some("firing"), bound);
    let errors_fired = errors.expect("LeaderdRedisErrors fires while Redis is down");
    let no_leader = wait_alert(prom, "LeaderdNoLeader", "outage", Some("firing"), bound);
    no_leader.expect("LeaderdNoLeader fires while Redis is down");
    let stepped = wait_alert(
        prom,
        "LeaderdLeaderSteppedDown",
        "outage",
        Some("firing"),
        SLACK,
    );
    stepped.expect("LeaderdLeaderSteppedDown (deadline) fires while Redis is down");
    let back_at = unix_s();
    redis.start_again();
    let within = ERRORS_WINDOW + 2.0 * SLACK;
    let errors_cleared = wait_alert(prom, "LeaderdRedisErrors", "outage", None, within)
        .expect("LeaderdRedisErrors resolves within its rate window of Redis coming back");
    let no_leader_cleared = wait_alert(prom, "LeaderdNoLeader", "outage", None, within)
        .map(|_| unix_s() - back_at)
        .expect("LeaderdNoLeader resolves once a term begins after the quarantine");
    Outage {
        down,
        errors_fired,
        errors_cleared,
        no_leader_cleared,
        back_at,
    }
}

/// `replicas` replicas of a sharded election (`yaml`: its `election.shards` and bound).
fn sharded(name: &str, url: &str, replicas: usize, yaml: &str) -> Vec<Daemon> {
    (1..=replicas)
        .map(|i| {
            let mut o = opts(name, &format!("{name}-{i}"), url);
            o.extra_yaml = yaml.into();
            Daemon::spawn(&o)
        })
        .collect()
}

/// Waits until `GET /shards` on `d` names an owner for every shard (an HTTP request per poll,
/// not a `leaderd status` process: the other elections' timings must not suffer).
fn wait_all_owned(d: &Daemon) {
    let owned = wait_until(SLOW, POLL, || {
        let (code, body) = d.get("/shards");
        let rows: Vec<Value> = serde_json::from_str(&body).ok()?;
        let all = code == 200 && !rows.is_empty() && rows.iter().all(|r| r["owner"].is_string());
        all.then_some(())
    });
    owned.unwrap_or_else(|| panic!("{}: a shard still without owner", d.identity()));
}

/// The `shards` election through a SIGKILL (each of its shards taken at its expiry, within a
/// lease), its return (shards handed back, reason `rebalance`) and a rolling update (every
/// shard of a leaver moved at once). The alert's silence is asserted from its history.
fn shards_through_faults(e: &mut [Daemon]) {
    wait_all_owned(&e[0]);
    std::thread::sleep(Duration::from_secs(3));
    e[0].kill();
    wait_all_owned(&e[1]);
    e[0].restart();
    wait_until(SLOW, POLL, || is_leader(&e[0]).then_some(()))
        .expect("the restarted replica gets its share back");
    for i in 0..e.len() {
        std::thread::sleep(Duration::from_secs(2));
        e[i].signal(Signal::SIGTERM);
        assert_eq!(e[i].wait_exit(SLOW), Some(0), "SIGTERM exits 0");
        e[i].restart();
        wait_all_owned(&e[(i + 1) % e.len()]);
    }
}

/// When every shard of `unhealthy` had an owner (plus a scrape and an evaluation) and when its
/// replicas' health check began to fail; the alert's times from then (`fired`) and from the
/// check passing again (`resolved`), in seconds.
struct Unowned {
    quiet_from: f64,
    failed: f64,
    fired: f64,
    resolved: f64,
}

/// Makes the health check of every `unhealthy` replica fail (`healthy`, the file it tests, is
/// removed): each hands its shards over and takes none, so no shard has an owner while every
/// replica still runs and is scraped, until the file is back.
fn shards_unowned_while_unhealthy(e: &[Daemon], healthy: &Path, prom: &Prometheus) -> Unowned {
    wait_all_owned(&e[0]);
    let quiet_from = unix_s() + 2.0 * SCRAPE.as_secs_f64();
    std::thread::sleep(Duration::from_secs(4));
    let failed = unix_s();
    std::fs::remove_file(healthy).expect("remove the health file");
    let within = UNOWNED_FOR + LEASE + 2.0 * SLACK;
    wait_alert(
        prom,
        "LeaderdShardUnowned",
        "unhealthy",
        Some("firing"),
        within,
    )
    .expect("LeaderdShardUnowned fires while no shard has an owner");
    let fired = unix_s() - failed;
    let status = e[0].cli(&["status"]);
    assert_eq!(status.code, Some(3), "status exits 3: {}", status.stdout);
    std::fs::write(healthy, "").expect("write the health file");
    let resolved = wait_alert(prom, "LeaderdShardUnowned", "unhealthy", None, within)
        .expect("LeaderdShardUnowned resolves once every shard has an owner again");
    wait_all_owned(&e[0]);
    Unowned {
        quiet_from,
        failed,
        fired,
        resolved,
    }
}

/// Every `expr` of the Grafana dashboard, with its panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/leaderd.json");
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard"))
        .expect("dashboard JSON");
    let mut panels: Vec<Value> = dash["panels"].as_array().cloned().unwrap_or_default();
    let nested: Vec<Value> = panels
        .iter()
        .flat_map(|p| p["panels"].as_array().cloned().unwrap_or_default())
        .collect();
    panels.extend(nested);
    let mut out = Vec::new();
    for p in &panels {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                out.push((
                    p["title"].as_str().unwrap_or("?").to_owned(),
                    expr.to_owned(),
                ));
            }
        }
    }
    out
}

#[test]
fn alerts_and_dashboard_in_a_real_prometheus_through_real_faults() {
    prometheus_bin();
    let mut redis = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let mut rollout = election("rollout", &redis[0].url());
    let mut pause = election("pause", &redis[0].url());
    let outage = election("outage", &redis[1].url());
    // The sharded elections on a Redis of their own.
    let mut shards = sharded("shards", &redis[3].url(), 3, "election:\n  shards: 16\n");
    let health = tempfile::tempdir().expect("temp dir");
    let healthy = health.path().join("healthy");
    std::fs::write(&healthy, "").expect("write the health file");
    let check = format!(
        "election:\n  shards: 8\n  health_check:\n    command: [test, -e, {}]\n    \
         period: 300ms\n    timeout: 200ms\n    failures: 1\n",
        healthy.display()
    );
    let unhealthy = sharded("unhealthy", &redis[3].url(), 3, &check);
    // split-2's Redis comes up once Prometheus runs, so that it sees the overlap begin.
    redis[2].stop();
    let split = [
        Daemon::spawn(&opts("split", "split-1", &redis[0].url())),
        Daemon::spawn(&opts("split", "split-2", &redis[2].url())),
    ];
    let targets: Vec<Target> = [&rollout[..], &pause, &outage, &split, &shards, &unhealthy]
        .iter()
        .flat_map(|e| e.iter())
        .map(|d| Target {
            addr: format!("127.0.0.1:{}", d.http_port()),
            pod: d.identity().to_owned(),
        })
        .collect();
    let real = include_str!("../deploy/prometheus/alerts.yaml");
    let rules = scale_rules(real, SCALE);
    assert!(rules.contains("[60s]"), "scaled:\n{rules}");
    let prom = Prometheus::start(&targets, &rules, SCRAPE);
    let t0 = unix_s();

    for e in [&rollout, &pause, &outage] {
        wait_leader(e, &all(e), SLOW);
    }
    // Prometheus scrapes a target seconds after it is ready (its discovery sends targets in
    // batches): split-2 must have been scraped as a follower before it leads, else the claim
    // window begins with its first sample and goes pending at once.
    let scraped = wait_until(SLOW, POLL, || {
        (prom.query("leaderd_is_leader{name=\"split\"}").len() == 2).then_some(())
    });
    scraped.expect("Prometheus scrapes both split replicas");
    redis[2].start_again();
    wait_until(SLOW, POLL, || split.iter().all(is_leader).then_some(()))
        .expect("each split replica leads on its own Redis");
    // Both claims began when the later of the two terms did (each replica's own
    // `acquired_at_ms`), not when this test got round to seeing them.
    let split_from = split
        .iter()
        .filter_map(|d| d.status_doc()?["acquired_at_ms"].as_u64())
        .max()
        .expect("each split replica publishes its term") as f64
        / 1000.0;

    let (moves, out, short) = std::thread::scope(|s| {
        let moves = s.spawn(|| rolling_updates(&mut rollout));
        s.spawn(|| pause_the_leader(&mut pause, &prom));
        let out = s.spawn(|| redis_outage(&mut redis[1], &prom));
        s.spawn(|| shards_through_faults(&mut shards));
        let short = s.spawn(|| shards_unowned_while_unhealthy(&unhealthy, &healthy, &prom));
        let split_fired = wait_alert(
            &prom,
            "LeaderdMultipleLeaders",
            "split",
            Some("firing"),
            60.0,
        );
        assert!(
            split_fired.is_some(),
            "LeaderdMultipleLeaders fires for a split brain"
        );
        (
            moves.join().expect("rollout"),
            out.join().expect("outage"),
            short.join().expect("unhealthy"),
        )
    });

    // Flapping: two rollouts go past its threshold; it must stay pending at most and end
    // once its window has passed the last handover.
    let last = *moves.last().expect("handovers");
    let left = (last + FLAPPING_WINDOW + 2.0 * SLACK - unix_s()).max(1.0);
    let flapping = wait_alert(&prom, "LeaderdLeadershipFlapping", "rollout", None, left);
    assert!(
        flapping.is_some(),
        "LeaderdLeadershipFlapping still active {left:.0} s after the window"
    );

    let span = (unix_s() - t0).ceil() as u64 + 10;
    let never = |alert: &str, name: &str, state: &str| {
        let seen = history(&prom, alert, name, state, span);
        assert!(
            seen.is_empty(),
            "{alert} {name} was {state} at {seen:?} (run began {t0:.1})"
        );
    };
    // A clean handover or a failover never looks like a split brain, not even pending; nor
    // do the replicas of a sharded election, each owning shards.
    for name in ["rollout", "pause", "outage", "shards", "unhealthy"] {
        never("LeaderdMultipleLeaders", name, "pending");
    }
    // Neither a rollout nor a failover within a lease pages anyone.
    never("LeaderdLeadershipFlapping", "rollout", "firing");
    never("LeaderdNoLeader", "rollout", "firing");
    never("LeaderdNoLeader", "pause", "firing");
    never("LeaderdFrequentHandovers", "rollout", "firing");
    // An outage is not a renewal problem: the leader steps down and renewals stop.
    never("LeaderdRenewalsFailing", "outage", "firing");
    // Shards taken at their expiry or moved at a rollout are never missing for a minute; an
    // election without shards has none to miss.
    never("LeaderdShardUnowned", "shards", "firing");
    for name in ["rollout", "pause", "outage", "split"] {
        never("LeaderdShardUnowned", name, "pending");
    }

    // Every replica unhealthy: quiet while every shard had an owner, firing after its for:
    // once none had, resolved within a lease and a scrape of the check passing again.
    let fired = history(&prom, "LeaderdShardUnowned", "unhealthy", "firing", span);
    let after = fired.iter().find(|&&t| t >= short.quiet_from);
    let first = after.expect("ShardUnowned fired") - short.failed;
    println!(
        "unhealthy: ShardUnowned firing {first:.1} s after the check began to fail (seen \
         {:.1} s), resolved {:.1} s after it passed again",
        short.fired, short.resolved
    );
    assert!(
        first >= UNOWNED_FOR,
        "ShardUnowned fired {first:.1} s after the failure"
    );
    assert!(
        short.fired <= UNOWNED_FOR + 2.0 * SLACK,
        "ShardUnowned seen firing {:.1} s after the failure",
        short.fired
    );
    assert!(
        short.resolved <= LEASE + SLACK,
        "ShardUnowned resolved {:.1} s after the check passed again",
        short.resolved
    );
    let counted = prom.query("max(leaderd_shards{name=\"unhealthy\"})");
    assert_eq!(counted[0]["value"][1], "8", "leaderd_shards: {counted:?}");

    // A real split brain goes pending only once both claims have lasted the whole window.
    let pending = history(&prom, "LeaderdMultipleLeaders", "split", "pending", span);
    let firing = history(&prom, "LeaderdMultipleLeaders", "split", "firing", span);
    let (p, f) = (pending[0] - split_from, firing[0] - split_from);
    println!("split: MultipleLeaders pending at +{p:.1} s, firing at +{f:.1} s of both leading");
    assert!(p >= SPLIT_WINDOW - 2.0, "pending after {p:.1} s of overlap");
    assert!(
        f <= SPLIT_WINDOW + SPLIT_FOR + SLACK,
        "firing after {f:.1} s"
    );

    let no_leader = history(&prom, "LeaderdNoLeader", "outage", "firing", span);
    let no_leader_fired = no_leader.first().expect("NoLeader fired") - out.down;
    println!(
        "outage: RedisErrors firing at +{:.1} s, NoLeader at +{no_leader_fired:.1} s of Redis \
         down; resolved {:.1} s and {:.1} s after it came back",
        out.errors_fired, out.errors_cleared, out.no_leader_cleared
    );
    // NoLeader waits for its for: after the leader's step-down at renew_deadline (2 s).
    assert!(
        no_leader_fired >= NO_LEADER_FOR,
        "NoLeader fired before its for:"
    );
    let errors = (ERRORS_FOR, ERRORS_FOR + ERRORS_WINDOW + SLACK);
    assert!(
        (errors.0..=errors.1).contains(&out.errors_fired),
        "RedisErrors firing {:.1} s into the outage, not within {errors:?}",
        out.errors_fired
    );
    assert!(
        out.errors_cleared <= ERRORS_WINDOW + SLACK,
        "RedisErrors resolved {:.1} s after Redis came back",
        out.errors_cleared
    );
    let renewals = history(&prom, "LeaderdRenewalsFailing", "outage", "pending", span);
    let late = renewals
        .iter()
        .filter(|&&t| t > out.back_at + ERRORS_WINDOW + SLACK);
    assert_eq!(
        late.count(),
        0,
        "RenewalsFailing after the outage: {renewals:?}"
    );

    // Graceful step-downs are counted by the replicas that took over.
    let handovers = terms(&prom, "rollout", "handover", span);
    let shutdowns: f64 = prom
        .samples(
            "leaderd_step_downs_total{name=\"rollout\",reason=\"shutdown\"}",
            span,
        )
        .iter()
        .map(|s| s.counter_increase())
        .sum();
    println!(
        "rollout: {handovers} terms began by handover; {shutdowns} shutdown step-downs scraped"
    );
    assert_eq!(
        handovers,
        moves.len() as f64,
        "every handover is counted once"
    );
    assert_eq!(
        terms(&prom, "pause", "expiry", span),
        1.0,
        "the paused leader's lease expired"
    );
    assert!(
        terms(&prom, "outage", "quarantine", span) >= 1.0,
        "a term after the empty Redis"
    );

    // Every dashboard query returns data over the run.
    let queries = dashboard_queries();
    assert!(queries.len() >= 20, "{} dashboard queries", queries.len());
    let end = unix_s();
    for (title, expr) in &queries {
        let q = expr
            .replace("$name", "rollout|pause|outage|split|shards|unhealthy")
            .replace("$__rate_interval", "4s")
            .replace("$__range", &format!("{}s", (end - t0).ceil()));
        let result = prom.query_range(&q, t0, end, 1.0);
        let data = result
            .iter()
            .any(|s| s["values"].as_array().is_some_and(|v| !v.is_empty()));
        assert!(data, "panel {title:?}: no data for {q}");
    }
}
