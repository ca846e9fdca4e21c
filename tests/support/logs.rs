//! What the replicas' JSON logs say, read back: events by name, waiting for the n-th one,
//! their fields, each term's validity, and the end-of-test checks over every replica's log
//! (the shared checker of `safety.rs` plus the log shape of docs/outputs.md#logs).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::Value;

use super::safety::{event_name, field, field_u64};
use super::{check_logs, wait_until, Daemon, Term, POLL};

/// The `acquired` events of `d`, in log order.
pub fn acquired(d: &Daemon) -> Vec<Value> {
    d.events_named("acquired")
}

/// The `stepped_down` events of `d`, in log order.
pub fn stepped_down(d: &Daemon) -> Vec<Value> {
    d.events_named("stepped_down")
}

/// The `n`-th event named `name` that `d` logged (from 1), once there is one.
pub fn wait_event(d: &Daemon, name: &str, n: usize, timeout: Duration) -> Value {
    wait_until(timeout, POLL, || d.events_named(name).get(n - 1).cloned()).unwrap_or_else(|| {
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

/// The log lines of `d` at WARN or ERROR.
pub fn warn_lines(d: &Daemon) -> Vec<Value> {
    d.log_events()
        .into_iter()
        .filter(|e| matches!(e["level"].as_str(), Some("WARN" | "ERROR")))
        .collect()
}

/// `acquired_at_ms` of the term `fence` in `d`'s log.
pub fn acquired_at(d: &Daemon, fence: u64) -> Option<u64> {
    d.log_events()
        .iter()
        .filter(|e| event_name(e) == Some("acquired") && field_u64(e, "fence") == Some(fence))
        .find_map(|e| field_u64(e, "acquired_at_ms"))
}

/// The highest `lease_valid_until_ms` `d` logged for the term `fence`.
pub fn last_valid_until(d: &Daemon, fence: u64) -> Option<u64> {
    d.log_events()
        .iter()
        .filter(|e| {
            matches!(event_name(e), Some("acquired" | "renewed" | "stepped_down"))
                && field_u64(e, "fence") == Some(fence)
        })
        .filter_map(|e| field_u64(e, "lease_valid_until_ms"))
        .max()
}

/// `(replica, fence, acquired_at_ms)` of every term begun at or after `since_ms`.
pub fn terms_since(daemons: &[Daemon], since_ms: u64) -> Vec<(usize, u64, u64)> {
    let mut out = Vec::new();
    for (i, d) in daemons.iter().enumerate() {
        for e in acquired(d) {
            if let (Some(fence), Some(at)) =
                (field_u64(&e, "fence"), field_u64(&e, "acquired_at_ms"))
            {
                if at >= since_ms {
                    out.push((i, fence, at));
                }
            }
        }
    }
    out
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
                        [
                            "lost",
                            "deadline",
                            "shutdown",
                            "yield",
                            "child_exit",
                            "rebalance"
                        ]
                        .contains(&reason),
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

/// `d` logs `identity_conflict` at WARN within `within` and sets `leaderd_identity_conflict`
/// to 1 (two live processes with one identity).
pub fn assert_identity_conflict(d: &Daemon, within: Duration) {
    let warned = wait_until(within, POLL, || {
        d.events_named("identity_conflict").first().cloned()
    })
    .unwrap_or_else(|| panic!("no identity_conflict line:\n{}", d.log()));
    assert_eq!(warned["level"], "WARN", "{warned}");
    let (_, text) = d.get("/metrics");
    assert_eq!(
        super::metrics::metric(&text, "leaderd_identity_conflict", &[]),
        Some(1.0),
        "{text}"
    );
}
