//! `cargo bench --bench leaderd_bench -- [--quick] [SECTION...]`
//!
//! Runs leaderd against real `redis-server` processes on loopback and prints the tables of
//! BENCHMARKS.md; writes them to `target/leaderd-bench/results.md` (and `.json`).
//! Sections: handover, crash, steady, herd, lock, proxy, followers, registry, shards (default: all). `BENCH_LOCK_ONLY=rslock,lease`
//! limits the lock section to some of floor, rslock, election, lease, locker, plain;
//! `BENCH_LOCK_SERVERS=redis,valkey9` (the default) names the servers it runs on (also valkey8).
//! `BENCH_SHARDS_ONLY=balance,moves,cost` limits the shards section to some of its parts.

#[path = "../tests/support/mod.rs"]
mod support;

mod bench {
    pub mod election;
    pub mod followers;
    pub mod lock;
    pub mod proxy;
    pub mod registry;
    pub mod shard_cost;
    pub mod shard_moves;
    pub mod shards;
    pub mod stats;
    pub mod timings;
}

use std::path::PathBuf;
use std::process::Command;

use bench::stats::{loadavg, Table};

const SECTIONS: [&str; 10] = [
    "handover",
    "handover-to",
    "crash",
    "steady",
    "herd",
    "lock",
    "proxy",
    "followers",
    "registry",
    "shards",
];

fn main() {
    let mut quick = false;
    let mut sections: Vec<String> = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--bench" => {} // cargo bench passes it
            "--quick" => quick = true,
            s if SECTIONS.contains(&s) => sections.push(s.to_string()),
            s if s.starts_with('-') => {} // other harness flags
            other => {
                eprintln!(
                    "unknown section {other:?}; sections: {}",
                    SECTIONS.join(", ")
                );
                std::process::exit(2);
            }
        }
    }
    if sections.is_empty() {
        sections = SECTIONS.iter().map(|s| s.to_string()).collect();
    }

    let machine = machine();
    eprintln!("{machine}");
    let load_before = loadavg();
    let started = std::time::Instant::now();
    let mut tables: Vec<Table> = Vec::new();
    let mut json = serde_json::Map::new();
    for section in &sections {
        eprintln!("== {section} (load {})", loadavg());
        match section.as_str() {
            "lock" => bench::lock::run(
                &bench::lock::LockOpts {
                    seconds: if quick { 2.0 } else { 5.0 },
                    repeats: if quick { 1 } else { 3 },
                },
                &mut tables,
                &mut json,
            ),
            "handover" => {
                bench::election::handover(if quick { 10 } else { 200 }, &mut tables, &mut json)
            }
            "handover-to" => {
                bench::election::handover_to(if quick { 20 } else { 200 }, &mut tables, &mut json)
            }
            "crash" => bench::election::crash(
                if quick { 5 } else { 100 },
                if quick { 0 } else { 12 },
                &mut tables,
                &mut json,
            ),
            "steady" => {
                bench::election::steady(if quick { 15.0 } else { 90.0 }, &mut tables, &mut json)
            }
            "herd" => {
                bench::election::herd(200, if quick { 3 } else { 20 }, &mut tables, &mut json)
            }
            "proxy" => bench::proxy::run(quick, &mut tables, &mut json),
            "registry" => bench::registry::run(quick, &mut tables, &mut json),
            "shards" => bench::shards::run(quick, &mut tables, &mut json),
            "followers" => bench::followers::run(
                if quick { 30.0 } else { 90.0 },
                if quick { 10 } else { 30 },
                &mut tables,
                &mut json,
            ),
            _ => unreachable!(),
        }
    }

    let mut report = format!(
        "## leaderd benchmark results\n\n{machine}\n- load average (1/5/15 min) before: {load_before}, after: {}\n- sections: {}{}; took {:.0} s\n\n",
        loadavg(),
        sections.join(", "),
        if quick { " (--quick)" } else { "" },
        started.elapsed().as_secs_f64()
    );
    for t in &tables {
        report += &t.markdown();
        report.push('\n');
    }
    println!("{report}");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/leaderd-bench");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("results.md"), &report);
    json.insert("machine".into(), serde_json::Value::String(machine));
    let _ = std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&json).unwrap_or_default(),
    );
    eprintln!("wrote {}", dir.join("results.md").display());
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or_else(
            || "?".into(),
            |kb| format!("{:.0} GiB", kb / 1024.0 / 1024.0),
        );
    let out = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "?".into())
    };
    format!(
        "- machine: {cores} cores ({cpu}), {mem} RAM, Linux {}\n- {}; {}; leaderd {} (release build)",
        out("uname", &["-r"]),
        out(
            &support::redis::server_bin().display().to_string(),
            &["--version"]
        )
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        out("rustc", &["--version"]),
        env!("CARGO_PKG_VERSION"),
    )
}
