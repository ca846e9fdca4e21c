//! Owns `Prometheus`: Debian's prometheus server run on a free loopback port with its own
//! config and storage under `target/tmp`, scraping given targets and evaluating given rules;
//! its HTTP API (instant queries, raw samples, `/api/v1/alerts`); and the rule file scaled
//! down in time from `deploy/prometheus/alerts.yaml`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::daemon::http_request;
use super::{free_port, wait_until};

const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// The `prometheus` binary: `$PROMETHEUS`, else the first on `PATH`. A missing one fails the
/// test (scripts/test puts the one scripts/ensure-prometheus extracted on `PATH`).
pub fn prometheus_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("PROMETHEUS") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("prometheus"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "prometheus is not on PATH (nor in $PROMETHEUS): run \
                 `export PATH=\"$(scripts/ensure-prometheus):$PATH\"` (scripts/test does)"
            )
        })
}

/// Unix time in seconds, as Prometheus stamps samples.
pub fn unix_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

/// A scrape target: `host:port` and the `pod` label it gets.
pub struct Target {
    pub addr: String,
    pub pod: String,
}

/// A running prometheus; killed on drop (its directory is kept when the test fails).
pub struct Prometheus {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Prometheus {
    /// Starts prometheus scraping `targets` every `interval` (timeout: 80% of it) and
    /// evaluating `rules` (the text of a rule file) as often, and waits until it is ready.
    pub fn start(targets: &[Target], rules: &str, interval: Duration) -> Prometheus {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "prometheus-{}-{}",
            std::process::id(),
            free_port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).expect("create prometheus dir");
        std::fs::write(dir.join("rules.yaml"), rules).expect("write rules.yaml");
        std::fs::write(dir.join("prometheus.yml"), config(targets, interval))
            .expect("write prometheus.yml");
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("create log");
        let child = Command::new(prometheus_bin())
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("clone log")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", prometheus_bin().display()));
        let prometheus = Prometheus { child, dir, port };
        let ready = wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            (prometheus.get("/-/ready").0 == 200).then_some(())
        });
        assert!(
            ready.is_some(),
            "prometheus not ready in 30 s:\n{}",
            prometheus.log()
        );
        prometheus
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    fn get(&self, path: &str) -> (u16, String) {
        let addr = format!("127.0.0.1:{}", self.port).parse().expect("addr");
        http_request(addr, "GET", path, HTTP_TIMEOUT)
    }

    /// `GET /api/v1/<path>`: the `data` of a successful answer.
    fn api(&self, path: &str) -> Value {
        let (status, body) = self.get(&format!("/api/v1/{path}"));
        let doc: Value = serde_json::from_str(&body)
            .unwrap_or_else(|_| panic!("GET /api/v1/{path}: {status} {body}"));
        assert_eq!(doc["status"], "success", "GET /api/v1/{path}: {body}");
        doc["data"].clone()
    }

    /// An instant query at now: its `result` (a vector, or a matrix for a range selector).
    pub fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api(&format!("query?query={}", encode(expr)));
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// A range query from `start` to `end` (Unix seconds) every `step` seconds.
    pub fn query_range(&self, expr: &str, start: f64, end: f64, step: f64) -> Vec<Value> {
        let path = format!(
            "query_range?query={}&start={start:.3}&end={end:.3}&step={step}",
            encode(expr)
        );
        self.api(&path)["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The raw samples of `selector` over the last `seconds`: per series, its labels and
    /// `(time, value)` pairs in order.
    pub fn samples(&self, selector: &str, seconds: u64) -> Vec<Series> {
        self.query(&format!("{selector}[{seconds}s]"))
            .iter()
            .map(Series::of)
            .collect()
    }

    /// `/api/v1/alerts`: the pending and firing alerts now.
    pub fn alerts(&self) -> Vec<Alert> {
        let data = self.api("alerts");
        let list = data["alerts"].as_array().cloned().unwrap_or_default();
        list.iter().map(Alert::of).collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- prometheus kept in {} ----", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One series of a matrix: labels and samples.
#[derive(Debug, Clone)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub values: Vec<(f64, f64)>,
}

/// A JSON object of label names to values, as the HTTP API writes labels.
fn labels_of(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

impl Series {
    fn of(v: &Value) -> Series {
        let labels = labels_of(&v["metric"]);
        let values = v["values"]
            .as_array()
            .map(|vs| vs.iter().filter_map(sample).collect())
            .unwrap_or_default();
        Series { labels, values }
    }

    /// What a counter grew by over these samples, counting each reset as a restart from 0.
    pub fn counter_increase(&self) -> f64 {
        self.values
            .windows(2)
            .map(|w| {
                let (prev, now) = (w[0].1, w[1].1);
                if now >= prev {
                    now - prev
                } else {
                    now
                }
            })
            .sum()
    }
}

fn sample(v: &Value) -> Option<(f64, f64)> {
    let t = v.get(0)?.as_f64()?;
    let x = v.get(1)?.as_str()?.parse().ok()?;
    Some((t, x))
}

/// An alert as `/api/v1/alerts` shows it.
#[derive(Debug, Clone)]
pub struct Alert {
    pub labels: BTreeMap<String, String>,
    /// `pending` or `firing`.
    pub state: String,
}

impl Alert {
    fn of(v: &Value) -> Alert {
        let labels = labels_of(&v["labels"]);
        Alert {
            labels,
            state: v["state"].as_str().unwrap_or_default().to_owned(),
        }
    }

    /// Whether it is `alertname` for election `name`.
    pub fn is(&self, alertname: &str, name: &str) -> bool {
        self.labels.get("alertname").map(String::as_str) == Some(alertname)
            && self.labels.get("name").map(String::as_str) == Some(name)
    }
}

fn config(targets: &[Target], interval: Duration) -> String {
    let ms = interval.as_millis();
    let mut y = format!(
        "global:\n  scrape_interval: {ms}ms\n  scrape_timeout: {}ms\n  evaluation_interval: {ms}ms\n\
         rule_files: [rules.yaml]\nscrape_configs:\n  - job_name: leaderd\n    static_configs:\n",
        ms * 4 / 5
    );
    for t in targets {
        y += &format!(
            "      - targets: [\"{}\"]\n        labels: {{pod: \"{}\"}}\n",
            t.addr, t.pod
        );
    }
    y
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `rules` (a Prometheus rule file) with every duration (each `for:`, each range `[...]`)
/// divided by `factor`, so that hours of alerting run in minutes; thresholds stay.
pub fn scale_rules(rules: &str, factor: u64) -> String {
    let mut doc: serde_yaml::Value = serde_yaml::from_str(rules).expect("rules parse");
    let groups = doc["groups"].as_sequence_mut().expect("groups");
    for group in groups {
        for rule in group["rules"].as_sequence_mut().expect("rules") {
            let map = rule.as_mapping_mut().expect("rule");
            if let Some(serde_yaml::Value::String(f)) = map.get_mut("for") {
                *f = scale_duration(f, factor);
            }
            if let Some(serde_yaml::Value::String(expr)) = map.get_mut("expr") {
                *expr = scale_ranges(expr, factor);
            }
        }
    }
    serde_yaml::to_string(&doc).expect("rules serialize")
}

/// Every `[duration]` of `expr` divided by `factor`.
fn scale_ranges(expr: &str, factor: u64) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(open) = rest.find('[') {
        let close = open + rest[open..].find(']').expect("a range closes");
        out += &rest[..=open];
        out += &scale_duration(&rest[open + 1..close], factor);
        out.push(']');
        rest = &rest[close + 1..];
    }
    out + rest
}

/// A Prometheus duration (`1h30m`, `2m`, `30s`, `500ms`) divided by `factor`.
fn scale_duration(d: &str, factor: u64) -> String {
    let mut ms = 0;
    let mut digits = String::new();
    let mut chars = d.trim().chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let n: u64 = digits.parse().unwrap_or_else(|_| panic!("duration {d:?}"));
        digits.clear();
        ms += n * match c {
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                1
            }
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            _ => panic!("duration {d:?}"),
        };
    }
    assert!(digits.is_empty() && ms > 0, "duration {d:?}");
    let scaled = ms / factor;
    if scaled % 1000 == 0 {
        format!("{}s", scaled / 1000)
    } else {
        format!("{scaled}ms")
    }
}
