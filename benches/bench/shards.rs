//! The shard assignment's balance and the shards a join or a leave moves (README, "Shards"),
//! against the ideal: N / M per replica, N / (M + 1) for a newcomer's share, N / M for a
//! leaver's. Pure computation over 20 election names (the hash decides who gets what, so one
//! name is one sample); and the time to compute one assignment.

use std::time::Instant;

use leaderd::shard::Assignment;
use serde_json::json;

use super::stats::{f, Table};

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

pub fn run(tables: &mut Vec<Table>, json: &mut Json) {
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
