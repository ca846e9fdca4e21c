//! Lock throughput and its cost to Redis: acquire+release pairs per second on one multiplexed
//! connection, for leaderd's fenced lease and lock (fence + holder), its plain lock (no fence),
//! rslock (no fence, no holder), and the physical floor of two plain commands (`SET NX PX` +
//! `DEL`), on each server of `BENCH_LOCK_SERVERS` (default `redis,valkey9`). The run fails when
//! the commands per pair differ from [`EXPECTED_COMMANDS`], which BENCHMARKS.md quotes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaderd::Locker;
use leaderd::PlainLease;
use leaderd::{Acquire, Lease, LeaseClient, LeaseSpec};
use serde_json::json;

use super::stats::{
    calls_delta, command_calls, command_usec, f, median, process_cpu, redis_cpu_seconds, Table,
};
use crate::support::RedisServer;

const TTL: Duration = Duration::from_secs(15);

/// Redis commands per acquire+release pair (`INFO commandstats`, a script's own calls
/// included), by implementation and server (`*`: every server), as BENCHMARKS.md states
/// them ("Lock throughput"). The fenced lock (docs/protocol.md, "A lock's key"): `MULTI`,
/// `SET NX PX`, `INCR`, `TIME`, `EXEC` to acquire, `DELIFEQ` and `PUBLISH` to release on
/// Valkey 9, `EVALSHA`, `GET`, `DEL`, `PUBLISH` elsewhere; the grants `lua/lock_acquire.lua` makes instead (about once per 10 ms per lock,
/// checked on their own: [`SCRIPT_GRANTS_PER_LOCK_S`]) send 1 to 5 more. The election's
/// acquire (`lua/acquire.lua`) also publishes `acquired`, and writes the counter at every
/// grant (not counted here). The plain lock: `SET NX PX` and `DELIFEQ` on Valkey 9, `SET NX
/// PX` and a script (`EVALSHA`, `GET`, `DEL`) elsewhere.
pub const EXPECTED_COMMANDS: &[(&str, &str, f64)] = &[
    ("floor", "*", 2.0),
    ("rslock", "*", 4.0),
    ("election", "*", 11.0),
    ("lease", "valkey9", 7.0),
    ("locker", "valkey9", 7.0),
    ("lease", "*", 9.0),
    ("locker", "*", 9.0),
    ("plain", "valkey9", 2.0),
    ("plain", "*", 4.0),
];

/// How far a measured median may lie from [`EXPECTED_COMMANDS`] (a fenced lock's script
/// grants add up to 5 commands each on top).
const COMMANDS_SLACK: f64 = 0.05;

/// The most grants a second per lock that may go through `lua/lock_acquire.lua` (the first,
/// and those that raise the fence counter 12 ms past the server clock when its lead is under
/// 2 ms: about one per 10 ms).
const SCRIPT_GRANTS_PER_LOCK_S: f64 = 110.0;

fn expected_commands(imp: Impl, server: &str) -> f64 {
    EXPECTED_COMMANDS
        .iter()
        .find(|(i, s, _)| *i == imp.key() && (*s == server || *s == "*"))
        .map_or(f64::NAN, |(_, _, n)| *n)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Impl {
    Floor,
    Rslock,
    Election,
    Lease,
    Locker,
    Plain,
}

impl Impl {
    fn label(self) -> &'static str {
        match self {
            Impl::Floor => "floor: `SET NX PX` + `DEL`",
            Impl::Rslock => "rslock 0.10 (no fence, no holder)",
            Impl::Election => "leaderd `LeaseClient` as the election's (announced)",
            Impl::Lease => "leaderd `LeaseClient::for_lock` try_acquire + release",
            Impl::Locker => "leaderd `Locker` try_lock + release (watchdog)",
            Impl::Plain => "leaderd `Locker::plain` try_lock + release (watchdog, no fence)",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Impl::Floor => "floor",
            Impl::Rslock => "rslock",
            Impl::Election => "election",
            Impl::Lease => "lease",
            Impl::Locker => "locker",
            Impl::Plain => "plain",
        }
    }
}

/// One measurement: pairs, seconds, Redis CPU seconds, Redis commands by name.
struct Sample {
    pairs: u64,
    secs: f64,
    redis_cpu: f64,
    client_cpu: f64,
    commands: std::collections::BTreeMap<String, u64>,
    /// Microseconds of execution by command name (`INFO commandstats`; a script's calls are
    /// also in the script's own time).
    usec: std::collections::BTreeMap<String, u64>,
    /// Execution time of the commands the client sent (scripts with their calls), in s.
    exec_secs: f64,
}

impl Sample {
    fn rate(&self) -> f64 {
        self.pairs as f64 / self.secs
    }
    fn cpu_us_per_pair(&self) -> f64 {
        self.redis_cpu * 1e6 / self.pairs as f64
    }
    fn exec_us_per_pair(&self) -> f64 {
        self.exec_secs * 1e6 / self.pairs as f64
    }
    fn client_us_per_pair(&self) -> f64 {
        self.client_cpu * 1e6 / self.pairs as f64
    }
    fn commands_per_pair(&self) -> f64 {
        self.commands.values().sum::<u64>() as f64 / self.pairs as f64
    }
}

/// Worker state shared by the tasks of one measurement.
struct Run {
    stop: AtomicBool,
    pairs: AtomicU64,
    errors: AtomicU64,
}

pub struct LockOpts {
    pub seconds: f64,
    pub repeats: usize,
}

/// The client's tokio runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runtime {
    /// One thread: tasks and the connection's driver batch their I/O together.
    Current,
    /// `#[tokio::main]`'s default: a worker per core.
    Multi,
}

impl Runtime {
    fn label(self) -> &'static str {
        match self {
            Runtime::Current => "current-thread",
            Runtime::Multi => "multi-thread",
        }
    }
}

pub fn run(
    opts: &LockOpts,
    tables: &mut Vec<Table>,
    json_out: &mut serde_json::Map<String, serde_json::Value>,
) {
    let servers = std::env::var("BENCH_LOCK_SERVERS").unwrap_or_else(|_| "redis,valkey9".into());
    let mut wrong = Vec::new();
    let mut per_server = serde_json::Map::new();
    for server in servers.split(',').filter(|s| !s.is_empty()) {
        let redis = RedisServer::start_on(server);
        let version = redis.cmd(&["INFO", "server"]);
        let version = version
            .lines()
            .find_map(|l| l.strip_prefix("valkey_version:"))
            .or_else(|| {
                version
                    .lines()
                    .find_map(|l| l.strip_prefix("redis_version:"))
            })
            .unwrap_or("?")
            .trim()
            .to_string();
        eprintln!("  lock on {server} {version}");
        let results = measure_all(opts, &redis);
        let (table, rows) = report(opts, &format!("{server} {version}"), &results);
        for (rt, tasks, imp, samples) in &results {
            let what = format!("{server} {} {tasks} tasks {}", rt.label(), imp.key());
            wrong.extend(check_commands(&what, *imp, server, *tasks, samples));
        }
        per_server.insert(server.to_string(), json!(rows));
        tables.push(table);
    }
    json_out.insert("lock".into(), serde_json::Value::Object(per_server));
    if !wrong.is_empty() {
        for t in tables.iter() {
            eprintln!("{}", t.markdown());
        }
        panic!(
            "the lock benchmark no longer measures what BENCHMARKS.md states (EXPECTED_COMMANDS in benches/bench/lock.rs):\n{}",
            wrong.join("\n")
        );
    }
}

type Results = Vec<(Runtime, usize, Impl, Vec<Sample>)>;

/// What differs from [`EXPECTED_COMMANDS`] (and, for a fenced lock, [`SCRIPT_GRANTS_PER_LOCK_S`]) in one
/// row's samples.
fn check_commands(
    what: &str,
    imp: Impl,
    server: &str,
    tasks: usize,
    samples: &[Sample],
) -> Vec<String> {
    let lock = matches!(imp, Impl::Lease | Impl::Locker);
    let calls = |s: &Sample, name: &str| *s.commands.get(name).unwrap_or(&0) as f64;
    // A fenced lock's grants by script: its `EVALSHA`s beyond the releases' (one per pair
    // where the server has no native compare-and-delete).
    let scripted = |s: &Sample| {
        let native = calls(s, "delifeq") + calls(s, "delex") > 0.0;
        let releases = if native { 0.0 } else { s.pairs as f64 };
        (calls(s, "evalsha") - releases).max(0.0)
    };
    let checked = |s: &Sample| match imp {
        Impl::Election => s.commands_per_pair() - calls(s, "set") / s.pairs as f64,
        _ => s.commands_per_pair(),
    };
    let cmds = median(&samples.iter().map(checked).collect::<Vec<_>>());
    let slack = COMMANDS_SLACK
        + if lock {
            5.0 * median(
                &samples
                    .iter()
                    .map(|s| scripted(s) / s.pairs as f64)
                    .collect::<Vec<_>>(),
            )
        } else {
            0.0
        };
    let want = expected_commands(imp, server);
    let mut wrong = Vec::new();
    if (cmds - want).abs().is_nan() || (cmds - want).abs() > slack {
        let counter = if imp == Impl::Election {
            " (without the fence counter's SET)"
        } else {
            ""
        };
        wrong.push(format!(
            "{what}: {cmds:.2} commands per pair{counter}, BENCHMARKS.md states {want}"
        ));
    }
    if lock {
        for s in samples {
            let per_lock_s = scripted(s) / s.secs / tasks as f64;
            if per_lock_s > SCRIPT_GRANTS_PER_LOCK_S {
                wrong.push(format!("{what}: {per_lock_s:.0} grants a second per lock went through lock_acquire.lua, more than {SCRIPT_GRANTS_PER_LOCK_S}"));
            }
        }
    }
    wrong
}

/// Every implementation of `BENCH_LOCK_ONLY`, at 16 tasks and 1, on both runtimes, repeats
/// interleaved.
fn measure_all(opts: &LockOpts, redis: &RedisServer) -> Results {
    let only = std::env::var("BENCH_LOCK_ONLY").unwrap_or_default();
    let all = [
        Impl::Floor,
        Impl::Rslock,
        Impl::Election,
        Impl::Lease,
        Impl::Locker,
        Impl::Plain,
    ];
    let impls: Vec<Impl> = all
        .into_iter()
        .filter(|i| only.is_empty() || only.split(',').any(|o| o == i.key()))
        .collect();
    let mut results: Results = Vec::new();
    for rt in [Runtime::Current, Runtime::Multi] {
        for &tasks in &[16usize, 1] {
            for &imp in &impls {
                results.push((rt, tasks, imp, Vec::new()));
            }
        }
    }
    // Interleave the repeats so that a change of machine load hits every row alike.
    for rep in 0..opts.repeats {
        for (rt, tasks, imp, samples) in results.iter_mut() {
            let s = measure(redis, *rt, *imp, *tasks, opts.seconds);
            eprintln!(
                "  lock [{}/{}] {:<14} {:<8} tasks={:>2}: {:>8.0} pairs/s, {:>5.1} us Redis CPU/pair ({:.1} executing), {:>5.1} us client CPU/pair, {:.2} commands/pair",
                rep + 1,
                opts.repeats,
                rt.label(),
                imp.key(),
                tasks,
                s.rate(),
                s.cpu_us_per_pair(),
                s.exec_us_per_pair(),
                s.client_us_per_pair(),
                s.commands_per_pair()
            );
            samples.push(s);
        }
    }
    results
}

/// The table of one server's results, and its rows as JSON.
fn report(opts: &LockOpts, server: &str, results: &Results) -> (Table, Vec<serde_json::Value>) {
    let med = |samples: &[Sample], f: fn(&Sample) -> f64| {
        median(&samples.iter().map(f).collect::<Vec<_>>())
    };
    let rslock_rate = |rt: Runtime, tasks: usize| {
        results
            .iter()
            .find(|(r, t, i, _)| *r == rt && *t == tasks && *i == Impl::Rslock)
            .map_or(f64::NAN, |(_, _, _, s)| med(s, Sample::rate))
    };
    let mut table = Table::new(
        &format!("Lock: acquire+release pairs on one multiplexed connection, {server}"),
        &[
            "client runtime",
            "tasks",
            "implementation",
            "pairs/s",
            "vs rslock",
            "Redis CPU / pair (us)",
            "of which executing commands (us)",
            "client CPU / pair (us)",
            "Redis commands / pair",
        ],
    );
    let mut rows_json = Vec::new();
    for (rt, tasks, imp, samples) in results {
        let rate = med(samples, Sample::rate);
        let cpu = med(samples, Sample::cpu_us_per_pair);
        let client = med(samples, Sample::client_us_per_pair);
        let exec = med(samples, Sample::exec_us_per_pair);
        let cmds = med(samples, Sample::commands_per_pair);
        let spread = |f: fn(&Sample) -> f64| {
            let v: Vec<f64> = samples.iter().map(f).collect();
            let (lo, hi) = v
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
            (lo, hi)
        };
        let (lo, hi) = spread(Sample::rate);
        table.row(vec![
            rt.label().to_string(),
            tasks.to_string(),
            imp.label().to_string(),
            if samples.len() > 1 {
                format!("{} ({}-{})", f(rate, 0), f(lo, 0), f(hi, 0))
            } else {
                f(rate, 0)
            },
            format!("{}%", f(100.0 * rate / rslock_rate(*rt, *tasks), 0)),
            f(cpu, 1),
            f(exec, 1),
            f(client, 1),
            f(cmds, 2),
        ]);
        rows_json.push(json!({
            "runtime": rt.label(), "tasks": tasks, "impl": imp.key(), "pairs_per_s": rate,
            "redis_cpu_us_per_pair": cpu, "redis_exec_us_per_pair": exec, "client_cpu_us_per_pair": client,
            "redis_commands_per_pair": cmds,
            "samples": samples.iter().map(|s| json!({
                "pairs_per_s": s.rate(), "redis_cpu_us_per_pair": s.cpu_us_per_pair(),
                "client_cpu_us_per_pair": s.client_us_per_pair()})).collect::<Vec<_>>(),
        }));
    }
    table.note(format!(
        "Median of {} runs of {:.0} s each (interleaved; pairs/s with the lowest and highest run), after 1 s of warm-up; every task locks its own key, so nothing waits for a holder; every pair must succeed.",
        opts.repeats, opts.seconds
    ));
    table.note("Redis CPU = `used_cpu_sys + used_cpu_user` of `INFO cpu` over the run / pairs (network, event loop and idle wake-ups included); executing = `usec` of `INFO commandstats` for the commands the client sent (a script with its calls) / pairs; client CPU = the benchmark process's CPU / pairs; commands = every `INFO commandstats` call (a script's `redis.call`s count too) / pairs.");
    table.note("One `redis` multiplexed connection shared by all tasks (leaderd: leases made with `LeaseClient::for_lease` share one; rslock: one `LockManager`).");
    for imp in [Impl::Rslock, Impl::Lease, Impl::Plain] {
        let found = results
            .iter()
            .find(|(r, t, i, _)| *r == Runtime::Current && *t == 16 && *i == imp);
        if let Some(last) = found.and_then(|(_, _, _, s)| s.last()) {
            table.note(format!(
                "`{}` commands per pair (us of Redis execution per pair): {}.",
                imp.key(),
                last.commands
                    .iter()
                    .map(|(k, v)| {
                        let per_pair = |n: u64| n as f64 / last.pairs as f64;
                        let us = per_pair(last.usec.get(k).copied().unwrap_or(0));
                        format!("{k} {:.2} ({us:.2})", per_pair(*v))
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    (table, rows_json)
}

fn measure(redis: &RedisServer, runtime: Runtime, imp: Impl, tasks: usize, seconds: f64) -> Sample {
    let rt = match runtime {
        Runtime::Current => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Runtime::Multi => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    }
    .expect("tokio runtime");
    let url = redis.url();
    // Fence counters exist already: a running election, not a brand-new one (which would
    // quarantine every lease for one lease duration).
    for i in 0..tasks {
        crate::support::seed_fence(redis, &format!("bench-{i}"));
    }
    rt.block_on(async move {
        let run = Arc::new(Run {
            stop: AtomicBool::new(false),
            pairs: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        let client = redis::Client::open(url.as_str()).expect("redis url");
        let mut handles = Vec::new();
        match imp {
            Impl::Floor => {
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect");
                for i in 0..tasks {
                    let (mut conn, run) = (conn.clone(), run.clone());
                    let key = format!("bench:floor:{i}");
                    handles.push(tokio::spawn(async move {
                        let mut n = 0u64;
                        while !run.stop.load(Ordering::Relaxed) {
                            n = n.wrapping_add(1);
                            let set: redis::RedisResult<Option<String>> = redis::cmd("SET")
                                .arg(&key)
                                .arg(n)
                                .arg("NX")
                                .arg("PX")
                                .arg(TTL.as_millis() as u64)
                                .query_async(&mut conn)
                                .await;
                            let del: redis::RedisResult<i64> =
                                redis::cmd("DEL").arg(&key).query_async(&mut conn).await;
                            count(&run, matches!(set, Ok(Some(_))) && del == Ok(1));
                        }
                    }));
                }
            }
            Impl::Rslock => {
                let manager = rslock::LockManager::new(vec![url.clone()]);
                for i in 0..tasks {
                    let (manager, run) = (manager.clone(), run.clone());
                    let key = format!("bench:rslock:{i}");
                    handles.push(tokio::spawn(async move {
                        while !run.stop.load(Ordering::Relaxed) {
                            match manager.lock(key.as_bytes(), TTL).await {
                                Ok(lock) => {
                                    manager.unlock(&lock).await;
                                    count(&run, true);
                                }
                                Err(_) => count(&run, false),
                            }
                        }
                    }));
                }
            }
            Impl::Plain => {
                let spec = |i: usize| LeaseSpec::new(&format!("bench-plain-{i}"), "bench", TTL);
                let first = LeaseClient::connect(&url, spec(0)).expect("lease client");
                let others: Vec<LeaseClient> =
                    (1..tasks).map(|i| first.for_lease(spec(i))).collect();
                for client in std::iter::once(first).chain(others) {
                    let run = run.clone();
                    let locker = Locker::<PlainLease>::plain(client);
                    handles.push(tokio::spawn(async move {
                        while !run.stop.load(Ordering::Relaxed) {
                            let ok = match locker.try_lock().await {
                                Ok(guard) => guard.release().await == Ok(true),
                                Err(_) => false,
                            };
                            count(&run, ok);
                        }
                    }));
                }
            }
            Impl::Election | Impl::Lease | Impl::Locker => {
                let spec = |i: usize| LeaseSpec::new(&format!("bench-{i}"), "bench", TTL);
                let first = LeaseClient::connect(&url, spec(0)).expect("lease client");
                let clients: Vec<LeaseClient> =
                    (1..tasks).map(|i| first.for_lease(spec(i))).collect();
                let clients = std::iter::once(first).chain(clients);
                for client in clients {
                    let run = run.clone();
                    if imp != Impl::Locker {
                        let lock = imp == Impl::Lease;
                        let client = Arc::new(if lock { client.for_lock() } else { client });
                        handles.push(tokio::spawn(async move {
                            while !run.stop.load(Ordering::Relaxed) {
                                let ok = match client.try_acquire(client.default_budget()).await {
                                    Ok(Acquire::Acquired(term)) => {
                                        client.release(&term, client.default_budget()).await
                                            == Ok(true)
                                    }
                                    _ => false,
                                };
                                count(&run, ok);
                            }
                        }));
                    } else {
                        let locker = Locker::new(client);
                        handles.push(tokio::spawn(async move {
                            while !run.stop.load(Ordering::Relaxed) {
                                let ok = match locker.try_lock().await {
                                    Ok(guard) => guard.release().await == Ok(true),
                                    Err(_) => false,
                                };
                                count(&run, ok);
                            }
                        }));
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        // On the current-thread runtime no task runs while INFO blocks it, so the counter
        // and Redis's counters are read at the same moment (on the multi-thread one, nearly).
        let me = std::process::id();
        let (p0, cpu0, calls0, usec0, t0) = snapshot(redis, &run);
        let client0 = process_cpu(me).unwrap_or_default();
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        let client1 = process_cpu(me).unwrap_or_default();
        let (p1, cpu1, calls1, usec1, t1) = snapshot(redis, &run);
        // Only what the client sent: a script's calls are inside its own time already.
        let sent: &[&str] = match imp {
            Impl::Floor => &["set", "del"],
            Impl::Rslock => &["set", "evalsha", "eval", "script|load"],
            Impl::Election => &["evalsha", "eval", "script|load"],
            Impl::Lease | Impl::Locker => &[
                "multi",
                "exec",
                "evalsha",
                "eval",
                "script|load",
                "delifeq",
                "delex",
            ],
            Impl::Plain => &["set", "evalsha", "eval", "script|load", "delifeq", "delex"],
        };
        let delta = |c: &str| usec1.get(c).unwrap_or(&0) - usec0.get(c).unwrap_or(&0);
        let mut exec_us: u64 = sent.iter().map(|c| delta(c)).sum();
        // A fenced lock sends its `PUBLISH` itself where it deletes natively (elsewhere the
        // script does, inside its own time).
        let native = |c: &str| calls1.get(c).unwrap_or(&0) > calls0.get(c).unwrap_or(&0);
        if matches!(imp, Impl::Lease | Impl::Locker) && (native("delifeq") || native("delex")) {
            exec_us += delta("publish");
        }
        run.stop.store(true, Ordering::Relaxed);
        for h in handles {
            let _ = h.await;
        }
        let errors = run.errors.load(Ordering::Relaxed);
        assert!(
            errors == 0,
            "{}: {errors} failed pairs (a pair must never fail here)",
            imp.key()
        );
        Sample {
            pairs: p1 - p0,
            secs: (t1 - t0).as_secs_f64(),
            redis_cpu: cpu1 - cpu0,
            client_cpu: (client1 - client0).as_secs_f64(),
            commands: calls_delta(&calls0, &calls1),
            usec: calls_delta(&usec0, &usec1),
            exec_secs: exec_us as f64 / 1e6,
        }
    })
}

fn count(run: &Run, ok: bool) {
    if ok {
        run.pairs.fetch_add(1, Ordering::Relaxed);
    } else {
        run.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// The pair counter and Redis's counters: `(pairs, CPU s, calls, usec, when)`.
fn snapshot(redis: &RedisServer, run: &Run) -> (u64, f64, Counts, Counts, Instant) {
    let pairs = run.pairs.load(Ordering::Relaxed);
    let t = Instant::now();
    let info = redis.cmd(&["INFO", "everything"]);
    (
        pairs,
        redis_cpu_seconds(&info),
        command_calls(&info),
        command_usec(&info),
        t,
    )
}

type Counts = std::collections::BTreeMap<String, u64>;
