//! Shared by `tests/daemon*.rs`: a cluster of real `leaderd` processes over one real
//! redis-server (optionally behind a fault-injecting proxy), leader detection through HTTP,
//! and the end-of-test checks over every replica's JSON log.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::safety::{event_name, field, field_u64};
use crate::support::{
    check_logs, wait_until, Daemon, DaemonOpts, Proxy, RedisServer, Reply, RespConn, Term,
};

/// Lease duration of every test (the support default): 2s.
pub const LEASE: Duration = Duration::from_secs(2);
/// `lease_duration * 0.01 + 2ms`.
pub const DRIFT_MS: u64 = 22;
pub const POLL: Duration = Duration::from_millis(25);
/// Generous: the machine is small and shared.
pub const SLOW: Duration = Duration::from_secs(15);

pub const IDENTITIES: [&str; 3] = ["replica-a", "replica-b", "replica-c"];

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// A real redis-server, an optional proxy in front of it, and replicas of one election.
pub struct Cluster {
    pub name: String,
    pub daemons: Vec<Daemon>,
    pub proxy: Option<Proxy>,
    pub redis: RedisServer,
}

impl Cluster {
    /// `n` replicas (identities `replica-a`, ...) of election `name` on a fresh Redis, each
    /// with `extra_yaml` merged into its config; through a proxy when `via_proxy`.
    pub fn start(name: &str, n: usize, via_proxy: bool, extra_yaml: &str) -> Cluster {
        let redis = RedisServer::start();
        let proxy = via_proxy.then(|| Proxy::start(redis.addr()));
        let url = proxy.as_ref().map_or_else(|| redis.url(), Proxy::url);
        let daemons = IDENTITIES[..n]
            .iter()
            .map(|id| {
                let mut opts = DaemonOpts::new(name, id, &url);
                opts.extra_yaml = extra_yaml.to_string();
                Daemon::spawn(&opts)
            })
            .collect();
        Cluster {
            name: name.to_string(),
            daemons,
            proxy,
            redis,
        }
    }

    pub fn proxy(&self) -> &Proxy {
        self.proxy.as_ref().expect("cluster started with a proxy")
    }

    pub fn lock_key(&self) -> String {
        format!("leaderd:{{{}}}:lock", self.name)
    }

    pub fn fence_key(&self) -> String {
        format!("leaderd:{{{}}}:fence", self.name)
    }

    pub fn identity(&self, i: usize) -> &str {
        self.daemons[i].identity()
    }

    /// The one replica among `among` that claims leadership over HTTP while every other one
    /// of them names it as leader in `GET /leader` and `GET /`; `None` otherwise.
    pub fn agreed_leader(&self, among: &[usize]) -> Option<usize> {
        let docs: Vec<(usize, Value)> = among
            .iter()
            .map(|&i| Some((i, self.daemons[i].status_doc()?)))
            .collect::<Option<_>>()?;
        let leaders: Vec<usize> = docs
            .iter()
            .filter(|(_, d)| d["is_leader"] == Value::Bool(true))
            .map(|(i, _)| *i)
            .collect();
        let [leader] = leaders[..] else {
            // Answers come one after another, so two claims may both be true at their own
            // moments; but never with overlapping validity.
            let claims: Vec<&Value> = docs
                .iter()
                .filter(|(i, _)| leaders.contains(i))
                .map(|(_, d)| d)
                .collect();
            for a in &claims {
                for b in &claims {
                    let (a_from, b_to) = (&a["acquired_at_ms"], &b["lease_valid_until_ms"]);
                    if a_from.as_u64() > b["acquired_at_ms"].as_u64() {
                        assert!(
                            b_to.as_u64() <= a_from.as_u64(),
                            "two overlapping claims over HTTP: {claims:#?}"
                        );
                    }
                }
            }
            return None;
        };
        let who = self.identity(leader);
        for (i, doc) in &docs {
            if doc["leader"].as_str() != Some(who) {
                return None;
            }
            let (code, body) = self.daemons[*i].get("/");
            let root: Value = serde_json::from_str(&body).ok()?;
            if code != 200 || root["name"].as_str() != Some(who) {
                return None;
            }
        }
        Some(leader)
    }

    /// Waits (bounded) until `agreed_leader(among)` holds; panics with the documents if not.
    pub fn wait_agreed_leader(&self, among: &[usize], timeout: Duration) -> usize {
        wait_until(timeout, POLL, || self.agreed_leader(among)).unwrap_or_else(|| {
            let docs: Vec<_> = among
                .iter()
                .map(|&i| self.daemons[i].status_doc())
                .collect();
            panic!("no agreed leader among {among:?} within {timeout:?}: {docs:#?}")
        })
    }

    /// Index of the replica whose HTTP claims leadership right now, if exactly one does.
    pub fn claiming(&self, among: &[usize]) -> Vec<usize> {
        among
            .iter()
            .copied()
            .filter(|&i| {
                self.daemons[i]
                    .status_doc()
                    .is_some_and(|d| d["is_leader"] == Value::Bool(true))
            })
            .collect()
    }

    pub fn all(&self) -> Vec<usize> {
        (0..self.daemons.len()).collect()
    }

    pub fn others(&self, but: usize) -> Vec<usize> {
        self.all().into_iter().filter(|&i| i != but).collect()
    }

    /// The end-of-test checks over every replica's log (see [`check_all_logs`]).
    pub fn check_safety(&self) -> Vec<Term> {
        check_all_logs(&self.daemons)
    }
}

/// The `acquired` events of `d`, in log order.
pub fn acquired(d: &Daemon) -> Vec<Value> {
    d.events_named("acquired")
}

/// The `stepped_down` events of `d`, in log order.
pub fn stepped_down(d: &Daemon) -> Vec<Value> {
    d.events_named("stepped_down")
}

/// Waits until `d` has logged at least `n` events named `name`; returns the last one.
pub fn wait_event(d: &Daemon, name: &str, n: usize, timeout: Duration) -> Value {
    wait_until(timeout, POLL, || {
        let evs = d.events_named(name);
        (evs.len() >= n).then(|| evs.last().cloned()).flatten()
    })
    .unwrap_or_else(|| {
        panic!(
            "{} logged fewer than {n} `{name}` events within {timeout:?}:\n{}",
            d.identity(),
            d.log()
        )
    })
}

pub fn u64_of(ev: &Value, key: &str) -> u64 {
    field_u64(ev, key).unwrap_or_else(|| panic!("no numeric `{key}` in {ev}"))
}

pub fn str_of<'a>(ev: &'a Value, key: &str) -> &'a str {
    field(ev, key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string `{key}` in {ev}"))
}

/// The highest `lease_valid_until_ms` `d` logged for the term with `fence`.
pub fn last_validity(d: &Daemon, fence: u64) -> u64 {
    d.log_events()
        .iter()
        .filter(|e| {
            matches!(event_name(e), Some("acquired" | "renewed" | "stepped_down"))
                && field_u64(e, "fence") == Some(fence)
        })
        .filter_map(|e| field_u64(e, "lease_valid_until_ms"))
        .max()
        .unwrap_or_else(|| panic!("{} logged no validity for fence {fence}", d.identity()))
}

/// The shared safety checker over all replicas' logs, plus the log shape of docs/outputs.md#logs:
/// every term has exactly one `acquired` line with its fields, at most one `stepped_down`
/// line carrying fence, reason, lease_valid_until_ms and ended_at_ms, and every
/// leadership-change line is at INFO.
pub fn check_all_logs(daemons: &[Daemon]) -> Vec<Term> {
    let logs: Vec<(String, Vec<Value>)> = daemons.iter().map(Daemon::safety_log).collect();
    let terms = check_logs(&logs).unwrap_or_else(|e| panic!("{e}\nterms: {logs:#?}"));
    let mut acquired_fences = HashSet::new();
    for (replica, events) in &logs {
        let mut downs: HashMap<u64, usize> = HashMap::new();
        for ev in events {
            let name = event_name(ev);
            match name {
                Some("acquired") => {
                    for key in ["fence", "acquired_at_ms", "lease_valid_until_ms"] {
                        assert!(field_u64(ev, key).is_some(), "{replica}: no {key}: {ev}");
                    }
                    let fence = u64_of(ev, "fence");
                    assert!(
                        acquired_fences.insert(fence),
                        "fence {fence} acquired twice"
                    );
                    assert!(
                        u64_of(ev, "lease_valid_until_ms") > u64_of(ev, "acquired_at_ms"),
                        "{replica}: acquired with no validity left: {ev}"
                    );
                }
                Some("stepped_down") => {
                    for key in ["fence", "lease_valid_until_ms", "ended_at_ms"] {
                        assert!(field_u64(ev, key).is_some(), "{replica}: no {key}: {ev}");
                    }
                    let reason = str_of(ev, "reason");
                    assert!(
                        ["lost", "deadline", "shutdown", "yield", "child_exit"].contains(&reason),
                        "{replica}: bad reason: {ev}"
                    );
                    *downs.entry(u64_of(ev, "fence")).or_default() += 1;
                }
                _ => {}
            }
            if matches!(name, Some("acquired" | "stepped_down" | "leader_changed")) {
                assert_eq!(ev["level"], "INFO", "{replica}: not at INFO: {ev}");
            }
        }
        for (fence, n) in downs {
            assert_eq!(n, 1, "{replica}: {n} stepped_down lines for fence {fence}");
        }
    }
    terms
}

/// The terms' fences in order of `acquired_at_ms`, asserting they strictly increase.
pub fn fences_increase(terms: &[Term]) -> Vec<u64> {
    let fences: Vec<u64> = terms.iter().map(|t| t.fence).collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences do not increase: {terms:#?}"
    );
    fences
}

/// Parses the Prometheus text format into `(metric name, labels) -> value`.
pub fn parse_metrics(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a series and its value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').expect("closing brace");
                let labels = inner
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (k, v) = p.split_once('=').expect("label=value");
                        (k.to_string(), v.trim_matches('"').to_string())
                    })
                    .collect();
                (name.to_string(), labels)
            }
        };
        out.push((name, labels, value));
    }
    out
}

/// The value of the series `name` whose labels include every pair of `labels`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    parse_metrics(text)
        .into_iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
}

/// The log lines of `d` at WARN or ERROR.
pub fn warn_lines(d: &Daemon) -> Vec<Value> {
    d.log_events()
        .into_iter()
        .filter(|e| matches!(e["level"].as_str(), Some("WARN" | "ERROR")))
        .collect()
}

/// The payload of a subscriber's `message` push.
pub fn payload(reply: Reply) -> Option<String> {
    match reply {
        Reply::Array(items) if items.len() == 3 => match &items[2] {
            Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        },
        _ => None,
    }
}

/// Subscribes to election `name`'s release channel on `redis` (subscribed when this
/// returns); the thread returns the first `released` announcement and the wall time (unix
/// ms) it arrived, `None` if none came within `timeout` (or 16 other messages).
pub fn watch_release(
    redis: &RedisServer,
    name: &str,
    timeout: Duration,
) -> std::thread::JoinHandle<Option<(Value, u64)>> {
    let channel = format!("leaderd:{{{name}}}:released");
    let mut conn = RespConn::connect(redis.addr(), SLOW).expect("connect to Redis");
    conn.call(&["SUBSCRIBE", &channel]).expect("SUBSCRIBE");
    conn.set_timeout(timeout).expect("read timeout");
    std::thread::spawn(move || {
        for _ in 0..16 {
            let text = payload(conn.read_next().ok()?)?;
            let at = now_ms();
            let message: Value = serde_json::from_str(&text).unwrap_or_default();
            if message["event"] == "released" {
                return Some((message, at));
            }
        }
        None
    })
}
