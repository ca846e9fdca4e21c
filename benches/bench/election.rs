//! The daemon benchmarks: graceful handover, crash failover, steady cost, and the herd.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use super::stats::{
    calls_delta, command_calls, f, pcells, process_cpu, process_rss_mib, redis_cpu_seconds,
    summarize, unix_ms_f64, Summary, Table,
};
use super::timings::{Timings, DEFAULTS, FAST};
use crate::support::check_logs;
use crate::support::logs::{last_valid_until, terms_since};
use crate::support::Replicas;

type Json = serde_json::Map<String, serde_json::Value>;

fn summary_json(s: &Summary) -> serde_json::Value {
    json!({"n": s.n, "min": s.min, "p50": s.p50, "p99": s.p99, "max": s.max, "mean": s.mean})
}

/// After a replica has been restarted: wait for it to be running and subscribed again.
fn restart(c: &mut Replicas, idx: usize) {
    c.daemons[idx].restart();
    c.wait_settled(Duration::from_secs(30));
}

fn check_safety(c: &Replicas, what: &str) -> usize {
    match check_logs(&c.logs()) {
        Ok(terms) => terms.len(),
        Err(e) => panic!("{what}: safety check failed:\n{e}"),
    }
}

// ---------------------------------------------------------------------------------------
// Graceful handover

/// SIGTERM of the leader to the new leader's `acquired_at`, and to the winning acquire's
/// sending, in ms.
fn handover_runs(timings: Timings, replicas: usize, runs: usize) -> (Vec<f64>, Vec<f64>) {
    let mut c = timings.replicas(&format!("handover-{}", timings.retry_ms), "");
    for _ in 0..replicas {
        c.spawn();
    }
    let (mut out, mut sent) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let (leader, fence) = c.wait_settled(Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(50));
        let t0 = unix_ms_f64();
        c.daemons[leader].signal(Signal::SIGTERM);
        std::thread::sleep(Duration::from_millis(100));
        let new = c.wait_new_term(fence, Duration::from_millis(20), Duration::from_secs(30));
        assert!(
            new.replica != leader && new.fence > fence,
            "handover: {new:?} after r{leader}"
        );
        out.push(new.acquired_at_ms as f64 - t0);
        sent.push(new.sent_ms as f64 - t0);
        let code = c.daemons[leader].wait_exit(Duration::from_secs(10));
        assert_eq!(code, Some(0), "leader did not exit cleanly after SIGTERM");
        restart(&mut c, leader);
        if (run + 1) % 25 == 0 {
            eprintln!("  handover {}: {}/{runs}", timings.label, run + 1);
        }
    }
    let terms = check_safety(&c, "handover");
    eprintln!("  handover {}: {terms} terms, no overlap", timings.label);
    (out, sent)
}

pub fn handover(runs: usize, tables: &mut Vec<Table>, out: &mut Json) {
    let mut table = Table::new(
        "Graceful handover: SIGTERM of the leader to the new leader's `acquired_at` (ms)",
        &[
            "timings",
            "replicas",
            "runs",
            "p50",
            "p99",
            "max",
            "winning acquire sent p50 / p99 / max",
            "target",
            "client-go, release-on-cancel",
        ],
    );
    let mut rows = Vec::new();
    for timings in [DEFAULTS, FAST] {
        let (samples, sent) = handover_runs(timings, 3, runs);
        let s = summarize(&samples);
        let sent_s = summarize(&sent);
        let rp = timings.retry_ms as f64;
        let mut row = vec![timings.label.to_string(), "3".into(), s.n.to_string()];
        row.extend(pcells(&s, 0));
        row.push(pcells(&sent_s, 0).join(" / "));
        row.push("p50 <= 10, p99 <= 50".into());
        row.push(format!("up to 2.2 x RP = {} ms", f(2.2 * rp, 0)));
        table.row(row);
        rows.push(json!({"timings": timings.label, "ms": summary_json(&s), "sent_ms": summary_json(&sent_s), "samples": samples}));
    }
    table.note("`acquired_at_ms` (from the winner's log) has a resolution of 1 ms; the time of the signal is taken just before `kill(2)`. \"Winning acquire sent\" is the lease's own `acquired_at_ms` field in Redis: the winner's clock when it sent the acquire that Redis granted.");
    table.note("client-go polls every RP x (1 + U(0, 1.2)) and sees a released lease only at its next poll; leaderd followers are woken by the release on pub/sub.");
    out.insert("handover".into(), json!(rows));
    tables.push(table);
}

// ---------------------------------------------------------------------------------------
// `leaderd handover --to`

/// `leaderd handover --to` the next replica, 3 replicas, default timings: the command's own
/// `elapsed_ms` (request written to the new term's `acquired` announcement received), and the
/// command's start to the target's `acquired_at`.
pub fn handover_to(runs: usize, tables: &mut Vec<Table>, out: &mut Json) {
    let mut c = DEFAULTS.replicas("handover-to", "");
    for _ in 0..3 {
        c.spawn();
    }
    let (mut elapsed, mut from_start) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let (leader, fence) = c.wait_settled(Duration::from_secs(60));
        // The target's candidate entry must be there (it is written at start).
        std::thread::sleep(Duration::from_millis(if run == 0 { 1500 } else { 100 }));
        let target = (leader + 1) % 3;
        let to = format!("r{target}");
        let t0 = unix_ms_f64();
        let cli =
            c.daemons[leader].cli(&["handover", "--to", &to, "--json", "--identity", "bench"]);
        assert_eq!(cli.code, Some(0), "handover run {run}: {cli:?}");
        let doc: serde_json::Value = serde_json::from_str(cli.stdout.trim()).expect("JSON");
        let new = c.wait_new_term(fence, Duration::from_millis(5), Duration::from_secs(30));
        assert_eq!(new.replica, target, "handover run {run}: {new:?}");
        elapsed.push(doc["elapsed_ms"].as_f64().unwrap_or(f64::NAN));
        from_start.push(new.acquired_at_ms as f64 - t0);
    }
    let terms = check_safety(&c, "handover-to");
    let e = summarize(&elapsed);
    let s = summarize(&from_start);
    let mut table = Table::new(
        "`leaderd handover --to`: 3 replicas, default timings (ms)",
        &["measure", "runs", "p50", "p99", "max", "target"],
    );
    let mut row = |name: &str, x: &Summary, target: &str| {
        let mut r = vec![name.to_string(), x.n.to_string()];
        r.extend(pcells(x, 0));
        r.push(target.into());
        table.row(r);
    };
    row(
        "request written to the new term's `acquired` received (the command's `elapsed_ms`)",
        &e,
        "p99 <= 10",
    );
    row(
        "command started to the target's `acquired_at` (process start, reads, subscribing)",
        &s,
        "",
    );
    table.note(format!(
        "Every run handed over to the named target; {terms} terms in all, no overlap."
    ));
    out.insert(
        "handover_to".into(),
        json!({"elapsed_ms": summary_json(&e), "start_to_acquired_ms": summary_json(&s)}),
    );
    tables.push(table);
}

// ---------------------------------------------------------------------------------------
// Crash failover

struct CrashSample {
    late_ms: f64,
    late_pttl_ms: f64,
    total_ms: f64,
}

fn crash_runs(timings: Timings, replicas: usize, runs: usize) -> Vec<CrashSample> {
    let mut c = timings.replicas(&format!("crash-{}", timings.retry_ms), "");
    for _ in 0..replicas {
        c.spawn();
    }
    let mut out = Vec::new();
    for run in 0..runs {
        let (leader, fence) = c.wait_settled(Duration::from_secs(60));
        // Let the kill fall anywhere in the renew cycle.
        let pause = rand_ms(timings.retry_ms);
        std::thread::sleep(Duration::from_millis(pause));
        let t0 = unix_ms_f64();
        c.daemons[leader].kill();
        let pttl = c.pttl_ms().unwrap_or(-2);
        let expiry_pttl = unix_ms_f64() + pttl as f64;
        let step = Duration::from_millis(5);
        let timeout = Duration::from_millis(timings.lease_ms * 2 + 10_000);
        let at = c.wait_new_term(fence, step, timeout).acquired_at_ms;
        let valid =
            last_valid_until(&c.daemons[leader], fence).expect("the leader logged its term") as f64;
        let expiry = valid + timings.drift_ms();
        out.push(CrashSample {
            late_ms: at as f64 - expiry,
            late_pttl_ms: at as f64 - expiry_pttl,
            total_ms: at as f64 - t0,
        });
        restart(&mut c, leader);
        if (run + 1) % 10 == 0 {
            eprintln!("  crash {}: {}/{runs}", timings.label, run + 1);
        }
    }
    let terms = check_safety(&c, "crash");
    eprintln!("  crash {}: {terms} terms, no overlap", timings.label);
    out
}

pub fn rand_ms(below: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .elapsed()
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() % below.max(1)
}

pub fn crash(runs_fast: usize, runs_default: usize, tables: &mut Vec<Table>, out: &mut Json) {
    let mut table = Table::new(
        "Crash failover: SIGKILL of the leader",
        &[
            "timings",
            "runs",
            "late after expiry p50 / p99 / max (ms)",
            "from the kill p50 / p99 / max (ms)",
            "from the kill / lease_duration p50 / p99 / max",
            "client-go worst case after the last renew: LD + 2.2 x RP",
        ],
    );
    let mut rows = Vec::new();
    for (timings, runs) in [(FAST, runs_fast), (DEFAULTS, runs_default)] {
        if runs == 0 {
            continue;
        }
        let samples = crash_runs(timings, 3, runs);
        let late = summarize(&samples.iter().map(|s| s.late_ms).collect::<Vec<_>>());
        let late_pttl = summarize(&samples.iter().map(|s| s.late_pttl_ms).collect::<Vec<_>>());
        let total = summarize(&samples.iter().map(|s| s.total_ms).collect::<Vec<_>>());
        let ld = timings.lease_ms as f64;
        let ratio = summarize(&samples.iter().map(|s| s.total_ms / ld).collect::<Vec<_>>());
        table.row(vec![
            timings.label.to_string(),
            late.n.to_string(),
            pcells(&late, 0).join(" / "),
            pcells(&total, 0).join(" / "),
            pcells(&ratio, 2).join(" / "),
            format!(
                "{} ms ({:.2} x LD)",
                f(ld + 2.2 * timings.retry_ms as f64, 0),
                (ld + 2.2 * timings.retry_ms as f64) / ld
            ),
        ]);
        table.note(format!(
            "{}: lateness measured against Redis's own clock instead (PTTL read right after the kill): p50 {} / p99 {} / max {} ms.",
            timings.label,
            f(late_pttl.p50, 0),
            f(late_pttl.p99, 0),
            f(late_pttl.max, 0)
        ));
        rows.push(json!({
            "timings": timings.label,
            "late_ms": summary_json(&late),
            "late_vs_pttl_ms": summary_json(&late_pttl),
            "total_ms": summary_json(&total),
            "total_over_lease": summary_json(&ratio),
        }));
    }
    table.note("Expiry = the dead leader's last logged `lease_valid_until_ms` + drift (1% of LD + 2 ms); late = the new leader's `acquired_at_ms` - expiry. Target p99 <= 20 ms.");
    table.note("The kill falls at a random point of the renew cycle, so the total is between LD - RP and LD, plus the lateness.");
    out.insert("crash".into(), json!(rows));
    tables.push(table);
}

// ---------------------------------------------------------------------------------------
// Steady cost

/// Redis's CPU and commands, and each replica's CPU, over a window of `secs`.
pub struct Window {
    pub secs: f64,
    pub redis_cpu: f64,
    pub calls: std::collections::BTreeMap<String, u64>,
    pub cpu: Vec<Duration>,
}

pub fn window(c: &Replicas, secs: f64) -> Window {
    let pids: Vec<u32> = c.daemons.iter().map(|d| d.pid()).collect();
    let cpu0: Vec<Duration> = pids
        .iter()
        .map(|p| process_cpu(*p).unwrap_or_default())
        .collect();
    let redis0 = redis_cpu_seconds(&c.redis.cmd(&["INFO", "cpu"]));
    let calls0 = command_calls(&c.redis.cmd(&["INFO", "commandstats"]));
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let cpu1: Vec<Duration> = pids
        .iter()
        .map(|p| process_cpu(*p).unwrap_or_default())
        .collect();
    let redis1 = redis_cpu_seconds(&c.redis.cmd(&["INFO", "cpu"]));
    let calls1 = command_calls(&c.redis.cmd(&["INFO", "commandstats"]));
    Window {
        secs: t0.elapsed().as_secs_f64(),
        redis_cpu: redis1 - redis0,
        calls: calls_delta(&calls0, &calls1),
        cpu: cpu1
            .iter()
            .zip(&cpu0)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect(),
    }
}

/// CPU seconds of all these processes together.
fn replicas_cpu(pids: &[u32]) -> f64 {
    pids.iter()
        .filter_map(|p| process_cpu(*p))
        .map(|d| d.as_secs_f64())
        .sum()
}

pub fn total_calls(w: &Window) -> u64 {
    w.calls.values().sum()
}

pub fn steady(secs: f64, tables: &mut Vec<Table>, out: &mut Json) {
    let followers = 4;
    // Production-like: INFO logging (no `renewed` line per renew).
    let mut c = DEFAULTS.replicas("steady", "logging:\n  level: info\n");
    eprintln!("  steady: Redis alone, {secs:.0} s");
    let w0 = window(&c, secs);
    c.spawn();
    c.wait_settled(Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(5));
    eprintln!("  steady: leader alone, {secs:.0} s");
    let wa = window(&c, secs);
    for _ in 0..followers {
        c.spawn();
    }
    let (leader, _) = c.wait_settled(Duration::from_secs(30));
    assert_eq!(leader, 0, "the first replica should still lead");
    std::thread::sleep(Duration::from_secs(5));
    eprintln!("  steady: leader + {followers} followers, {secs:.0} s");
    let wb = window(&c, secs);
    let rss: Vec<(f64, f64)> = c
        .daemons
        .iter()
        .map(|d| process_rss_mib(d.pid()).unwrap_or((f64::NAN, f64::NAN)))
        .collect();

    let per_hour = |cpu: Duration, secs: f64| cpu.as_secs_f64() / secs * 3600.0;
    let leader_cmds = total_calls(&wa) as f64 / wa.secs;
    let follower_cmds = (total_calls(&wb) as f64 / wb.secs - leader_cmds) / followers as f64;
    let idle_redis = w0.redis_cpu / w0.secs;
    let leader_redis = (wa.redis_cpu / wa.secs - idle_redis).max(0.0);
    let follower_redis =
        ((wb.redis_cpu / wb.secs - wa.redis_cpu / wa.secs) / followers as f64).max(0.0);
    let follower_cpu: Vec<f64> = wb.cpu[1..].iter().map(|d| per_hour(*d, wb.secs)).collect();
    let follower_rss: Vec<f64> = rss[1..].iter().map(|r| r.0).collect();
    let follower_hwm: Vec<f64> = rss[1..].iter().map(|r| r.1).collect();
    let mix = |w: &Window, div: f64| {
        w.calls
            .iter()
            .map(|(k, v)| format!("{k} {:.2}", *v as f64 / w.secs / div))
            .collect::<Vec<_>>()
            .join(", ")
    };

    let mut table = Table::new(
        "Steady cost per replica at default timings (15s/10s/2s)",
        &[
            "role",
            "RSS (MiB)",
            "peak RSS (MiB)",
            "CPU per hour",
            "Redis commands/s",
            "Redis CPU per hour",
        ],
    );
    let max = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    table.row(vec![
        "leader".into(),
        f(rss[0].0, 1),
        f(rss[0].1, 1),
        format!("{} s", f(per_hour(wb.cpu[0], wb.secs), 2)),
        f(leader_cmds, 2),
        format!("{} ms", f(leader_redis * 3600.0 * 1000.0, 0)),
    ]);
    table.row(vec![
        format!("follower (mean of {followers}; max)"),
        format!(
            "{} ({})",
            f(follower_rss.iter().sum::<f64>() / followers as f64, 1),
            f(max(&follower_rss), 1)
        ),
        f(max(&follower_hwm), 1),
        format!(
            "{} s ({} s)",
            f(follower_cpu.iter().sum::<f64>() / followers as f64, 2),
            f(max(&follower_cpu), 2)
        ),
        f(follower_cmds, 2),
        format!("{} ms", f(follower_redis * 3600.0 * 1000.0, 0)),
    ]);
    table.note(format!(
        "Windows of {secs:.0} s: Redis alone (its own cron: {} ms CPU per hour), the leader alone, the leader + {followers} followers. Process CPU from /proc/<pid>/task/*/schedstat; RSS from /proc/<pid>/status at the end.",
        f(idle_redis * 3600.0 * 1000.0, 0)
    ));
    table.note(format!(
        "Leader's Redis commands per second: {}.",
        mix(&wa, 1.0)
    ));
    table.note(format!(
        "Leader + {followers} followers, per second: {}.",
        mix(&wb, 1.0)
    ));
    table.note("Targets: RSS <= 10 MiB; a follower costs Redis close to nothing while the leader holds the lease.");
    out.insert(
        "steady".into(),
        json!({
            "secs": secs,
            "leader": {"rss_mib": rss[0].0, "hwm_mib": rss[0].1, "cpu_s_per_hour": per_hour(wb.cpu[0], wb.secs),
                       "redis_cmds_per_s": leader_cmds, "redis_cpu_ms_per_hour": leader_redis * 3.6e6},
            "follower": {"rss_mib": follower_rss, "hwm_mib": follower_hwm, "cpu_s_per_hour": follower_cpu,
                         "redis_cmds_per_s": follower_cmds, "redis_cpu_ms_per_hour": follower_redis * 3.6e6},
            "redis_idle_cpu_ms_per_hour": idle_redis * 3.6e6,
        }),
    );
    tables.push(table);
}

// ---------------------------------------------------------------------------------------
// Herd

pub fn herd(followers: usize, runs: usize, tables: &mut Vec<Table>, out: &mut Json) {
    let mut c = DEFAULTS.replicas("herd", "logging:\n  level: info\n");
    c.spawn();
    c.wait_settled(Duration::from_secs(30));
    eprintln!("  herd: starting {followers} followers");
    for i in 0..followers {
        c.spawn();
        if i % 20 == 19 {
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    c.wait_settled(Duration::from_secs(180));
    std::thread::sleep(Duration::from_secs(5));
    let rest = window(&c, 10.0);
    let rest_cpu_ms_per_s = rest.redis_cpu / rest.secs * 1000.0;
    let rest_cmds = total_calls(&rest) as f64 / rest.secs;

    let mut handover = Vec::new();
    let mut sent = Vec::new();
    let mut burst_cpu = Vec::new();
    let mut replicas_burst = Vec::new();
    let mut burst_calls = Vec::new();
    let mut winners = Vec::new();
    for run in 0..runs {
        let (leader, fence) = c.wait_settled(Duration::from_secs(120));
        // Away from the moment a restarted replica's polls were scheduled.
        std::thread::sleep(Duration::from_secs(3));
        // The followers (the leader exits during the window).
        let pids: Vec<u32> = (0..c.daemons.len())
            .filter(|i| *i != leader)
            .map(|i| c.daemons[i].pid())
            .collect();
        let replicas0 = replicas_cpu(&pids);
        let cpu0 = redis_cpu_seconds(&c.redis.cmd(&["INFO", "cpu"]));
        let calls0 = command_calls(&c.redis.cmd(&["INFO", "commandstats"]));
        let t0 = unix_ms_f64();
        c.daemons[leader].signal(Signal::SIGTERM);
        std::thread::sleep(Duration::from_secs(1));
        let cpu1 = redis_cpu_seconds(&c.redis.cmd(&["INFO", "cpu"]));
        let calls1 = command_calls(&c.redis.cmd(&["INFO", "commandstats"]));
        replicas_burst.push((replicas_cpu(&pids) - replicas0) * 1000.0);
        let new = c.wait_new_term(fence, Duration::from_millis(20), Duration::from_secs(30));
        assert!(
            new.replica != leader && new.fence > fence,
            "herd: {new:?} after r{leader}"
        );
        handover.push(new.acquired_at_ms as f64 - t0);
        sent.push(new.sent_ms as f64 - t0);
        burst_cpu.push((cpu1 - cpu0) * 1000.0);
        burst_calls.push(calls_delta(&calls0, &calls1).values().sum::<u64>() as f64);
        let new_terms = terms_since(&c.daemons, t0.floor() as u64).len();
        winners.push(new_terms);
        assert_eq!(
            new_terms, 1,
            "herd run {run}: {new_terms} terms began after the release"
        );
        assert_eq!(
            c.daemons[leader].wait_exit(Duration::from_secs(10)),
            Some(0)
        );
        c.daemons[leader].restart();
        eprintln!(
            "  herd {}/{runs}: handover {:.0} ms (acquire sent at {:.0} ms), Redis CPU {:.1} ms in the second after the release",
            run + 1,
            handover.last().unwrap(),
            sent.last().unwrap(),
            burst_cpu.last().unwrap()
        );
    }
    let terms = check_safety(&c, "herd");
    let h = summarize(&handover);
    let sent_s = summarize(&sent);
    let cpu = summarize(&burst_cpu);
    let calls = summarize(&burst_calls);
    let replicas = summarize(&replicas_burst);
    let mut table = Table::new(
        &format!("Herd: 1 leader + {followers} followers on one Redis, default timings"),
        &["measure", "p50", "p99", "max"],
    );
    let mut row = |name: &str, s: &Summary, d: usize| {
        let mut r = vec![name.to_string()];
        r.extend(pcells(s, d));
        table.row(r);
    };
    row("handover: SIGTERM to new `acquired_at` (ms)", &h, 0);
    row("SIGTERM to the winning acquire being sent (ms)", &sent_s, 0);
    row("Redis CPU in the second after the release (ms)", &cpu, 1);
    row("Redis commands in that second", &calls, 0);
    row(
        &format!("CPU of the {followers} followers together in that second (ms)"),
        &replicas,
        0,
    );
    table.note(format!(
        "{} releases; each time exactly one replica began a term (checked over all {} logs; {terms} terms in all, no overlap).",
        h.n,
        followers + 1
    ));
    table.note(format!(
        "At rest with {} replicas Redis used {} ms CPU per second ({}% of a core) for {} commands/s.",
        followers + 1,
        f(rest_cpu_ms_per_s, 1),
        f(rest_cpu_ms_per_s / 10.0, 2),
        f(rest_cmds, 0)
    ));
    out.insert(
        "herd".into(),
        json!({
            "followers": followers,
            "handover_ms": summary_json(&h),
            "winning_acquire_sent_ms": summary_json(&sent_s),
            "redis_cpu_ms_after_release": summary_json(&cpu),
            "redis_commands_after_release": summary_json(&calls),
            "replicas_cpu_ms_after_release": summary_json(&replicas),
            "winners_per_release": winners,
            "rest_redis_cpu_ms_per_s": rest_cpu_ms_per_s,
            "rest_commands_per_s": rest_cmds,
        }),
    );
    tables.push(table);
}
