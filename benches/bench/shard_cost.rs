//! The settled cost of 1,024 shards over 16 replicas on one Redis (README, "Shards"): Redis's
//! commands and CPU per second (INFO's `used_cpu_*` and `commandstats` deltas) and each
//! replica's RSS, against the knative way: a lease per shard, each renewed by its own call.

use std::time::Duration;

use leaderd::{Acquire, Lease, LeaseClient, LeaseSpec};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::election::{rand_ms, total_calls, window, Window};
use super::stats::{f, process_rss_mib, Table};
use super::timings::{Timings, DEFAULTS};
use crate::support::shards::wait_assigned;
use crate::support::Replicas;

type Json = serde_json::Map<String, serde_json::Value>;

const SHARDS: u32 = 1024;
const REPLICAS: usize = 16;
const NAME: &str = "shard-cost";

/// What Redis did per second over a settled window, and the replicas' RSS.
struct Cost {
    w: Window,
    idle_cpu: f64,
    /// `(VmRSS, VmHWM)` of each replica, MiB.
    rss: Vec<(f64, f64)>,
    /// Shard terms begun during the window (0 when settled).
    moves: usize,
}

impl Cost {
    fn cmds(&self) -> f64 {
        total_calls(&self.w) as f64 / self.w.secs
    }

    /// Redis CPU in % of a core.
    fn cpu_pct(&self) -> f64 {
        self.w.redis_cpu / self.w.secs * 100.0
    }

    fn mix(&self) -> String {
        let per_s = |v: &u64| *v as f64 / self.w.secs;
        let mix = self
            .w
            .calls
            .iter()
            .map(|(k, v)| format!("{k} {}", f(per_s(v), 1)));
        mix.collect::<Vec<_>>().join(", ")
    }
}

/// Shard terms begun, over every replica's log.
fn terms_begun(c: &Replicas) -> usize {
    c.daemons
        .iter()
        .map(|d| d.events_named("acquired").len())
        .sum()
}

/// 16 replicas of a 1,024-shard election (INFO logging), settled, over a window of `secs`.
fn sharded(t: Timings, secs: f64) -> Cost {
    let yaml = format!("election:\n  shards: {SHARDS}\nlogging:\n  level: info\n");
    let mut c = t.replicas(NAME, &yaml);
    let idle = window(&c, secs.min(10.0));
    for _ in 0..REPLICAS {
        c.spawn();
    }
    let ids: Vec<String> = (0..REPLICAS).map(|i| c.identity(i).to_owned()).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (step, within) = (Duration::from_millis(500), Duration::from_secs(180));
    wait_assigned(&c.daemons[0], NAME, SHARDS, &ids, step, within)
        .unwrap_or_else(|_| panic!("{SHARDS} shards over {REPLICAS} not settled in {within:?}"));
    std::thread::sleep(Duration::from_secs(3));
    let before = terms_begun(&c);
    let w = window(&c, secs);
    let rss = c
        .daemons
        .iter()
        .map(|d| process_rss_mib(d.pid()).unwrap_or((f64::NAN, f64::NAN)));
    Cost {
        idle_cpu: idle.redis_cpu / idle.secs * 100.0,
        rss: rss.collect(),
        moves: terms_begun(&c) - before,
        w,
    }
}

/// The knative way on a Redis of its own: 16 clients (one connection each), 64 leases each
/// (the shard leases of one election, so the same scripts), every lease renewed by its own
/// `Lease::renew` every `retry_period`, spread over the period; with `polls`, also each
/// client's look (`Lease::observe`) at every lease it does not hold every RP x (1 +
/// U(0, 1.2)), as client-go's followers do.
fn per_lease(t: Timings, secs: f64, polls: bool) -> Cost {
    let name = "knative-way";
    let c = Replicas::seeded(name, |_| {});
    let idle = window(&c, secs.min(10.0));
    let url = c.redis.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let stop = CancellationToken::new();
    let running = {
        let stop = stop.clone();
        std::thread::spawn(move || rt.block_on(renew_all(url, name, t, polls, stop)))
    };
    std::thread::sleep(Duration::from_secs(3));
    let w = window(&c, secs);
    stop.cancel();
    let renewed = running.join().expect("the renewing thread");
    assert!(renewed > 0, "no renew succeeded");
    Cost {
        idle_cpu: idle.redis_cpu / idle.secs * 100.0,
        rss: Vec::new(),
        moves: 0,
        w,
    }
}

/// Runs [`per_lease`]'s clients until `stop`; how many renews succeeded.
async fn renew_all(
    url: String,
    name: &str,
    t: Timings,
    polls: bool,
    stop: CancellationToken,
) -> usize {
    let (lease, rp) = (
        Duration::from_millis(t.lease_ms),
        Duration::from_millis(t.retry_ms),
    );
    let mut tasks = tokio::task::JoinSet::new();
    let per = SHARDS / REPLICAS as u32;
    for r in 0..REPLICAS as u32 {
        let spec = LeaseSpec::new(name, &format!("k{r}"), lease);
        let client = LeaseClient::connect(&url, spec).expect("client");
        for s in 0..SHARDS {
            let shard = client.shard(s);
            let stop = stop.clone();
            let start = rp * s / SHARDS;
            if s / per == r {
                tasks.spawn(async move { hold(shard, start, rp, stop).await });
            } else if polls {
                tasks.spawn(async move { poll(shard, start, rp, stop).await });
            }
        }
    }
    let mut renewed = 0;
    while let Some(n) = tasks.join_next().await {
        renewed += n.unwrap_or(0);
    }
    renewed
}

/// Takes `shard`'s lease, then renews it every `rp` (first at `start`) until `stop`.
async fn hold(shard: LeaseClient, start: Duration, rp: Duration, stop: CancellationToken) -> usize {
    let budget = shard.default_budget();
    let Ok(Acquire::Acquired(mut term)) = shard.try_acquire(budget).await else {
        return 0;
    };
    let mut next = tokio::time::Instant::now() + start;
    let mut renewed = 0;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return renewed,
            _ = tokio::time::sleep_until(next) => {}
        }
        renewed += usize::from(shard.renew(&mut term, budget).await.is_ok());
        next += rp;
    }
}

/// Looks at `shard`'s lease every RP x (1 + U(0, 1.2)) (first at `start`) until `stop`.
async fn poll(shard: LeaseClient, start: Duration, rp: Duration, stop: CancellationToken) -> usize {
    let budget = shard.default_budget();
    let mut next = tokio::time::Instant::now() + start;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return 0,
            _ = tokio::time::sleep_until(next) => {}
        }
        let _ = shard.observe(budget).await;
        let rp_ms = rp.as_millis() as u64;
        next += Duration::from_millis(rp_ms + rand_ms(rp_ms * 6 / 5));
    }
}

pub fn run(quick: bool, tables: &mut Vec<Table>, json: &mut Json) {
    let secs = if quick { 10.0 } else { 60.0 };
    let t = DEFAULTS;
    eprintln!("  shards cost: {SHARDS} shards over {REPLICAS} replicas, {secs:.0} s");
    let ours = sharded(t, secs);
    eprintln!("  shards cost: the knative way, renews only");
    let renews = per_lease(t, secs, false);
    eprintln!("  shards cost: the knative way, with the followers' polls");
    let polls = per_lease(t, secs, true);
    report(t, secs, [&ours, &renews, &polls], tables, json);
}

fn report(t: Timings, secs: f64, costs: [&Cost; 3], tables: &mut Vec<Table>, json: &mut Json) {
    let [ours, renews, polls] = costs;
    let mut table = Table::new(
        &format!(
            "Shards: Redis cost settled, {SHARDS} shards over {REPLICAS} replicas, one Redis ({})",
            t.label
        ),
        &[
            "setup",
            "Redis commands/s",
            "Redis CPU (% of a core)",
            "Redis alone (%)",
            "target",
            "",
        ],
    );
    let pct = |x: f64| f(x, 2);
    table.row(vec![
        format!("leaderd: one renew call per replica per RP for all its shards ({} shard terms begun in the window)", ours.moves),
        f(ours.cmds(), 0), pct(ours.cpu_pct()), pct(ours.idle_cpu), "< 5 %".into(),
        if ours.cpu_pct() < 5.0 { "met" } else { "**missed**" }.into(),
    ]);
    table.row(vec![
        format!("the knative way: {SHARDS} leases, each renewed by its own call (`Lease::renew`) per RP"),
        f(renews.cmds(), 0), pct(renews.cpu_pct()), pct(renews.idle_cpu), String::new(), String::new(),
    ]);
    table.row(vec![
        format!("the knative way with its followers: also each of the other {} replicas looks at every lease it does not hold (`Lease::observe`) every RP x (1 + U(0, 1.2))", REPLICAS - 1),
        f(polls.cmds(), 0), pct(polls.cpu_pct()), pct(polls.idle_cpu), String::new(), String::new(),
    ]);
    table.note(format!("Windows of {secs:.0} s once settled; Redis CPU = the delta of INFO's used_cpu_sys + used_cpu_user over the window; commands from INFO commandstats (a pipeline's commands each count; a script counts once plus its `redis.call`s). \"Redis alone\": the same server before any client, its own cron."));
    table.note(format!("leaderd, per second: {}.", ours.mix()));
    table.note(format!(
        "Knative way, renews: {}. With the followers: {}.",
        renews.mix(),
        polls.mix()
    ));
    table.note("The knative way here runs on Redis with leaderd's own lease (one script call per renew); on Kubernetes each client-go renew or poll is a GET and an UPDATE (or a GET) of a Lease object through the API server to etcd, and knative allows at most 10 buckets by default (MaxBuckets).");
    tables.push(table);

    let mut rss = Table::new(
        &format!(
            "Shards: RSS and CPU per replica at {SHARDS} shards over {REPLICAS} ({})",
            t.label
        ),
        &["measure", "mean", "max", "target"],
    );
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let max = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    let now: Vec<f64> = ours.rss.iter().map(|r| r.0).collect();
    let hwm: Vec<f64> = ours.rss.iter().map(|r| r.1).collect();
    let cpu: Vec<f64> = ours
        .w
        .cpu
        .iter()
        .map(|d| d.as_secs_f64() / ours.w.secs * 3600.0)
        .collect();
    rss.row(vec![
        "VmRSS (MiB), each owning 64 shards".into(),
        f(mean(&now), 1),
        f(max(&now), 1),
        "-".into(),
    ]);
    rss.row(vec![
        "VmHWM, peak RSS (MiB)".into(),
        f(mean(&hwm), 1),
        f(max(&hwm), 1),
        "-".into(),
    ]);
    rss.row(vec![
        "CPU per hour (s)".into(),
        f(mean(&cpu), 1),
        f(max(&cpu), 1),
        "-".into(),
    ]);
    rss.note("From /proc/<pid>/status (VmRSS, VmHWM) at the end of the settled window, and /proc/<pid>/task/*/schedstat over it; INFO logging. A replica of an election without shards: see \"Steady cost\" (target RSS <= 10 MiB).");
    tables.push(rss);
    json.insert("shard_cost".into(), json!({
        "timings": t.label, "secs": secs, "shards": SHARDS, "replicas": REPLICAS,
        "leaderd": {"cmds_per_s": ours.cmds(), "redis_cpu_pct": ours.cpu_pct(), "idle_pct": ours.idle_cpu, "moves": ours.moves,
                    "rss_mib": now, "hwm_mib": hwm, "cpu_s_per_hour": cpu},
        "knative_renews": {"cmds_per_s": renews.cmds(), "redis_cpu_pct": renews.cpu_pct(), "idle_pct": renews.idle_cpu},
        "knative_with_polls": {"cmds_per_s": polls.cmds(), "redis_cpu_pct": polls.cpu_pct(), "idle_pct": polls.idle_cpu},
    }));
}
