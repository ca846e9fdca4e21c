//! Percentiles, Redis INFO parsing, /proc readings and the markdown tables of the report.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// p50 / p99 / max (and min, mean) of a sample, nearest-rank percentiles.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

pub fn summarize(values: &[f64]) -> Summary {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    let n = v.len();
    if n == 0 {
        return Summary {
            n,
            min: f64::NAN,
            p50: f64::NAN,
            p99: f64::NAN,
            max: f64::NAN,
            mean: f64::NAN,
        };
    }
    let rank = |p: f64| v[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    Summary {
        n,
        min: v[0],
        p50: rank(0.50),
        p99: rank(0.99),
        max: v[n - 1],
        mean: v.iter().sum::<f64>() / n as f64,
    }
}

pub fn median(values: &[f64]) -> f64 {
    summarize(values).p50
}

/// Milliseconds since the Unix epoch, with sub-millisecond precision.
pub fn unix_ms_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// `key:value` lines of an INFO section.
pub fn info_fields(info: &str) -> BTreeMap<String, String> {
    info.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `used_cpu_sys + used_cpu_user` of `INFO cpu`, in seconds.
pub fn redis_cpu_seconds(info_cpu: &str) -> f64 {
    let f = info_fields(info_cpu);
    let get = |k: &str| f.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    get("used_cpu_sys") + get("used_cpu_user")
}

/// `calls` per command of `INFO commandstats` (`cmdstat_evalsha:calls=3,usec=...`).
pub fn command_calls(info: &str) -> BTreeMap<String, u64> {
    command_stat(info, "calls=")
}

/// `usec` (time spent executing) per command of `INFO commandstats`. A script's `usec`
/// includes its `redis.call`s, which are also counted under their own names.
pub fn command_usec(info: &str) -> BTreeMap<String, u64> {
    command_stat(info, "usec=")
}

fn command_stat(info: &str, stat: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (k, v) in info_fields(info) {
        let Some(cmd) = k.strip_prefix("cmdstat_") else {
            continue;
        };
        let n = v
            .split(',')
            .find_map(|kv| kv.strip_prefix(stat))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        out.insert(cmd.to_string(), n);
    }
    out
}

/// `after - before` per command, leaving out the measuring commands themselves.
pub fn calls_delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "info" | "pubsub|numsub" | "pubsub" | "config|resetstat"
            )
        })
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// On-CPU time of every thread of a process, from `/proc/<pid>/task/*/schedstat` (ns).
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let mut total = 0u64;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += text
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(Duration::from_nanos(total))
}

/// `(VmRSS, VmHWM)` of a process in MiB.
pub fn process_rss_mib(pid: u32) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    };
    Some((kb("VmRSS:")?, kb("VmHWM:")?))
}

/// The 1-minute load average.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| {
            let f: Vec<&str> = s.split_whitespace().take(3).collect();
            (f.len() == 3).then(|| f.join(" "))
        })
        .unwrap_or_else(|| "?".into())
}

/// A markdown table.
pub struct Table {
    pub title: String,
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub notes: Vec<String>,
}

impl Table {
    pub fn new(title: &str, head: &[&str]) -> Table {
        Table {
            title: title.to_string(),
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub fn markdown(&self) -> String {
        let mut s = format!("### {}\n\n", self.title);
        s += &format!("| {} |\n", self.head.join(" | "));
        s += &format!("|{}\n", "---|".repeat(self.head.len()));
        for r in &self.rows {
            s += &format!("| {} |\n", r.join(" | "));
        }
        if !self.notes.is_empty() {
            s.push('\n');
            for n in &self.notes {
                s += &format!("- {n}\n");
            }
        }
        s
    }
}

/// A number with `digits` decimals.
pub fn f(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "-".into()
    }
}

/// `p50 / p99 / max` cells of a summary, in the summary's unit.
pub fn pcells(s: &Summary, digits: usize) -> Vec<String> {
    vec![f(s.p50, digits), f(s.p99, digits), f(s.max, digits)]
}
