//! The shards section (README, "Shards"): the assignment's balance and the shards a join or
//! a leave moves against the ideal (N / M per replica, N / (M + 1) for a newcomer's share),
//! computed over 20 election names (one name is one sample); then real replicas' joins,
//! SIGTERMs and SIGKILLs (`shard_moves`), and the Redis cost and RSS at 1,024 shards
//! (`shard_cost`), each beside its target and what an operator would otherwise get.

use std::time::Instant;

use leaderd::shard::Assignment;
use serde_json::json;

use super::shard_moves::{self, Runs, Samples, SHARDS};
use super::stats::{f, pcells, summarize, Summary, Table};
use super::timings::{Timings, FAST};

type Json = serde_json::Map<String, serde_json::Value>;

const SIZES: [(u32, usize); 4] = [(16, 3), (64, 3), (256, 8), (1024, 16)];
const NAMES: usize = 20;

fn replicas(m: usize) -> Vec<String> {
    (0..m).map(|i| format!("orders-7c9f-{i}")).collect()
}

/// Over the names: the lowest and highest load, the moves of a join (each name) and of
/// every single leave (each name, each member).
struct Sample {
    load: (u32, u32),
    joins: Vec<f64>,
    leaves: Vec<f64>,
    compute_us: f64,
}

fn sample(n: u32, m: usize) -> Sample {
    let ids = replicas(m + 1);
    let mut s = Sample {
        load: (u32::MAX, 0),
        joins: Vec::new(),
        leaves: Vec::new(),
        compute_us: 0.0,
    };
    for k in 0..NAMES {
        let name = format!("election-{k}");
        let started = Instant::now();
        let before = Assignment::compute(&name, n, &ids[..m], 0);
        s.compute_us += started.elapsed().as_secs_f64() * 1e6 / NAMES as f64;
        for &load in &before.loads() {
            s.load = (s.load.0.min(load), s.load.1.max(load));
        }
        let joined = Assignment::compute(&name, n, &ids, 0);
        s.joins.push(joined.moved_from(&before).len() as f64);
        for gone in 0..m {
            let rest: Vec<&String> = ids[..m].iter().filter(|i| **i != ids[gone]).collect();
            let after = Assignment::compute(&name, n, &rest, 0);
            s.leaves.push(after.moved_from(&before).len() as f64);
        }
    }
    s
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// `mean / max (ideal)`, and `max / ideal`.
fn moved_cells(moved: &[f64], ideal: f64) -> [String; 2] {
    let cell = format!("{} / {} ({})", f(mean(moved), 1), max(moved), f(ideal, 1));
    [cell, f(max(moved) / ideal, 2)]
}

/// `BENCH_SHARDS_ONLY=balance,moves,cost` runs only those parts (default: all).
fn part(name: &str) -> bool {
    std::env::var("BENCH_SHARDS_ONLY")
        .map_or(true, |only| only.split(',').any(|p| p.trim() == name))
}

pub fn run(quick: bool, tables: &mut Vec<Table>, json: &mut Json) {
    if part("balance") {
        balance(tables, json);
    }
    let runs = if quick {
        Runs {
            joins: 2,
            terms: 3,
            kills: 2,
        }
    } else {
        Runs {
            joins: 10,
            terms: 30,
            kills: 15,
        }
    };
    if part("moves") {
        eprintln!("  shards: moves with {} replicas", FAST.label);
        moves(FAST, &shard_moves::measure(FAST, &runs), tables, json);
    }
    if part("cost") {
        super::shard_cost::run(quick, tables, json);
    }
}

fn balance(tables: &mut Vec<Table>, json: &mut Json) {
    let mut t = Table::new(
        "Shards: balance and moves per join and leave (assignment only)",
        &[
            "shards / replicas",
            "cap",
            "load min-max (ideal)",
            "join: moved mean / max (ideal)",
            "join max / ideal",
            "leave: moved mean / max (ideal)",
            "leave max / ideal",
            "compute (us)",
        ],
    );
    let mut rows = Vec::new();
    for (n, m) in SIZES {
        let s = sample(n, m);
        let ideal = f64::from(n) / m as f64;
        let ideal_join = f64::from(n) / (m + 1) as f64;
        let mut row = vec![
            format!("{n} / {m}"),
            n.div_ceil(m as u32).to_string(),
            format!("{}-{} ({})", s.load.0, s.load.1, f(ideal, 1)),
        ];
        row.extend(moved_cells(&s.joins, ideal_join));
        row.extend(moved_cells(&s.leaves, ideal));
        row.push(f(s.compute_us, 0));
        t.row(row);
        rows.push(json!({
            "shards": n, "replicas": m, "load_min": s.load.0, "load_max": s.load.1,
            "join_mean": mean(&s.joins), "join_max": max(&s.joins), "join_ideal": ideal_join,
            "leave_mean": mean(&s.leaves), "leave_max": max(&s.leaves), "leave_ideal": ideal,
            "compute_us": s.compute_us,
        }));
    }
    t.note(format!(
        "{NAMES} election names per row; a join adds one replica to M, a leave removes each of the M in turn. \
         Moved: shards whose target changed (the newcomer's share, or the leaver's, plus what bounded load \
         cascades onto others)."
    ));
    tables.push(t);
    json.insert("shards".into(), serde_json::Value::Array(rows));
}

fn met(ok: bool) -> String {
    if ok { "met" } else { "**missed**" }.into()
}

/// A row: measure, samples, p50 / p99 / max, target, met, what an operator would otherwise get.
fn row(t: &mut Table, measure: &str, s: &Summary, target: &str, ok: Option<bool>, other: &str) {
    let mut r = vec![measure.to_string(), s.n.to_string()];
    r.extend(pcells(s, 0));
    r.push(target.into());
    r.push(ok.map_or_else(String::new, met));
    r.push(other.into());
    t.row(r);
}

fn moves(t: Timings, s: &Samples, tables: &mut Vec<Table>, json: &mut Json) {
    let mut table = Table::new(
        &format!(
            "Shards: join, SIGTERM and SIGKILL with real replicas ({SHARDS} shards, {})",
            t.label
        ),
        &[
            "measure",
            "samples",
            "p50",
            "p99",
            "max",
            "target",
            "",
            "otherwise (knative buckets: a client-go Lease per bucket)",
        ],
    );
    let (ld, rp) = (t.lease_ms as f64, t.retry_ms as f64);
    let join_target = ld / 3.0 + 1000.0;
    let share = summarize(&s.joins.iter().map(|j| j.share_ms).collect::<Vec<_>>());
    let moved = summarize(&s.joins.iter().map(|j| j.moves as f64).collect::<Vec<_>>());
    let gaps: Vec<f64> = s.joins.iter().flat_map(|j| j.unowned_ms.clone()).collect();
    let gaps = summarize(&gaps);
    let ideal = f64::from(SHARDS) / 4.0;
    row(
        &mut table,
        "join (3 -> 4): the newcomer owns its share, from its spawn (ms)",
        &share,
        &format!("<= LD/3 + 1 s = {join_target:.0}"),
        Some(share.max <= join_target),
        "never: no balancing, a bucket moves only when its holder stops or dies",
    );
    row(
        &mut table,
        &format!("join: shards moved (ideal {ideal:.0})"),
        &moved,
        &format!("<= 1.5 x ideal = {:.0}", 1.5 * ideal),
        Some(moved.max <= 1.5 * ideal),
        "0",
    );
    row(
        &mut table,
        "join: each moved shard unowned, old claim's end to new acquire (ms)",
        &gaps,
        "<= 10",
        Some(gaps.max <= 10.0),
        "-",
    );
    let term_runs = summarize(&s.term_runs);
    let term_gap = summarize(&s.terms.unowned_ms);
    let polls = format!("each bucket at a follower's next poll: up to 2.2 x RP = {:.0} ms (4,400 at knative's 15s/10s/2s)", 2.2 * rp);
    row(&mut table, "SIGTERM (3 replicas): every shard of the leaver owned again, per run, from the signal (ms)",
        &term_runs, "p99 <= 20", Some(term_runs.p99 <= 20.0), &polls);
    row(
        &mut table,
        "SIGTERM: each shard unowned, leaver's step-down to new acquire (ms)",
        &term_gap,
        "",
        None,
        "",
    );
    let stairs = summarize(&s.terms.spacing_ms);
    let spread = summarize(&s.terms.ends_spread_ms);
    row(
        &mut table,
        "SIGTERM: per run, mean time from one shard's takeover to the next (ms)",
        &stairs,
        "",
        None,
        "",
    );
    let late = summarize(&s.kills.late_ms);
    let late_pttl = summarize(&s.kills.late_pttl_ms);
    let total = summarize(&s.kills.from_signal_ms);
    row(
        &mut table,
        "SIGKILL: each shard taken, late past its expiry (last logged validity + drift) (ms)",
        &late,
        "p99 <= 20",
        Some(late.p99 <= 20.0),
        &format!(
            "up to 2.2 x RP = {:.0} ms late (4,400 at 15s/10s/2s): followers poll",
            2.2 * rp
        ),
    );
    row(
        &mut table,
        "SIGKILL: the same against Redis's own expiry (PTTL read after the kill) (ms)",
        &late_pttl,
        "",
        None,
        "",
    );
    row(
        &mut table,
        "SIGKILL: from the kill (ms)",
        &total,
        &format!("LD - RP .. LD + 20 = {:.0} .. {:.0}", ld - rp, ld + 20.0),
        None,
        &format!("LD .. LD + 2.2 x RP = {:.0} .. {:.0}", ld, ld + 2.2 * rp),
    );
    table.note(format!(
        "{} joins, {} SIGTERMs, {} SIGKILLs (victims r0, r1, r2 in turn; each restarted and the 3 settled again before the next); {} shard terms in all, no two claims of one shard overlapping (the safety checker over every log).",
        s.joins.len(), s.term_runs.len(), s.kill_runs, s.safety_terms
    ));
    table.note(format!(
        "SIGTERM: the leaver's shards' claims all end within {} ms of each other (max over runs: every shard stepped down at once); the takeovers then come one after another.",
        f(spread.max, 0)
    ));
    let pairs = s
        .kills
        .dropout
        .iter()
        .map(|(m, l)| format!("{} / {}", f(*m, 0), f(*l, 0)));
    table.note(format!(
        "SIGKILL, per run: how long before its shards' first expiry the dead replica stopped being a member (last registry refresh + LD/2; the others see it at their next read, every LD/3) / the run's latest lateness (ms): {}.",
        pairs.collect::<Vec<_>>().join(", ")
    ));
    table.note("Times are the replicas' logged `acquired_at_ms` (1 ms resolution) against the wall clock read just before the spawn or the signal; a shard's unowned time is its new term's `acquired_at_ms` less the old term's claim end (`ended_at_ms`, or its last `lease_valid_until_ms` if earlier). Expiry = last logged validity + drift (1% of LD + 2 ms).");
    table.note("Otherwise: knative's buckets (knative.dev/pkg leaderelection) run one client-go LeaderElector per bucket with ReleaseOnCancel; followers poll every RP x (1 + U(0, 1.2)), so a released bucket waits for a poll and a dead holder's bucket for LD from the last renew a poll saw, plus a poll. Derived from client-go's timings, not measured here.");
    tables.push(table);
    let sum = |x: &Summary| serde_json::json!({"n": x.n, "p50": x.p50, "p99": x.p99, "max": x.max});
    json.insert("shard_moves".into(), json!({
        "timings": t.label,
        "join_share_ms": sum(&share), "join_moves": sum(&moved), "join_unowned_ms": sum(&gaps),
        "join_share_size": s.joins.iter().map(|j| j.share).collect::<Vec<_>>(),
        "sigterm_run_ms": sum(&term_runs), "sigterm_unowned_ms": sum(&term_gap),
        "sigterm_takeover_spacing_ms": sum(&stairs), "sigterm_claim_end_spread_ms": sum(&spread),
        "sigkill_late_ms": sum(&late), "sigkill_late_pttl_ms": sum(&late_pttl), "sigkill_from_kill_ms": sum(&total),
        "safety_terms": s.safety_terms,
    }));
}
