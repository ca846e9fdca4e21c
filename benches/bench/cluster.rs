//! A Redis and a set of real `leaderd` replicas of one election, with the probes the
//! benchmarks need: who holds the lease (asked of Redis directly), subscriptions, log events.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::safety::{event_name, field_u64};
use crate::support::{Daemon, DaemonOpts, RedisServer};

/// Election timings, as written in the config.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    pub label: &'static str,
    pub lease_ms: u64,
    pub renew_deadline_ms: u64,
    pub retry_ms: u64,
    pub command_timeout_ms: u64,
}

/// The defaults of the config (and of client-go): 15 s / 10 s / 2 s.
pub const DEFAULTS: Timings = Timings {
    label: "defaults 15s/10s/2s",
    lease_ms: 15_000,
    renew_deadline_ms: 10_000,
    retry_ms: 2_000,
    command_timeout_ms: 500,
};

/// Short timings: 2 s / 1.4 s / 300 ms.
pub const FAST: Timings = Timings {
    label: "fast 2s/1.4s/300ms",
    lease_ms: 2_000,
    renew_deadline_ms: 1_400,
    retry_ms: 300,
    command_timeout_ms: 200,
};

impl Timings {
    /// `lease_duration * 1% + 2ms`, as leaderd subtracts it.
    pub fn drift_ms(&self) -> f64 {
        self.lease_ms as f64 / 100.0 + 2.0
    }
}

pub struct Cluster {
    pub redis: RedisServer,
    pub daemons: Vec<Daemon>,
    pub name: String,
    pub timings: Timings,
    extra_yaml: String,
}

/// A fresh Redis whose election already has a fence counter, so the first acquire is not
/// quarantined for a lease duration (the state of a running election, not a brand-new one).
pub fn redis_for(name: &str) -> RedisServer {
    let redis = RedisServer::start();
    redis.cmd(&["SET", &format!("leaderd:{{{name}}}:fence"), "1000"]);
    redis
}

impl Cluster {
    pub fn new(name: &str, timings: Timings, extra_yaml: &str) -> Cluster {
        Cluster {
            redis: redis_for(name),
            daemons: Vec::new(),
            name: name.to_string(),
            timings,
            extra_yaml: extra_yaml.to_string(),
        }
    }

    pub fn opts(&self, identity: &str) -> DaemonOpts {
        let t = self.timings;
        let mut o = DaemonOpts::new(&self.name, identity, &self.redis.url());
        o.lease = format!("{}ms", t.lease_ms);
        o.renew_deadline = format!("{}ms", t.renew_deadline_ms);
        o.retry = format!("{}ms", t.retry_ms);
        o.command_timeout = format!("{}ms", t.command_timeout_ms);
        o.extra_yaml = self.extra_yaml.clone();
        o
    }

    /// Starts one more replica, `r<index>`.
    pub fn spawn(&mut self) -> usize {
        let idx = self.daemons.len();
        let opts = self.opts(&format!("r{idx}"));
        self.daemons.push(Daemon::spawn(&opts));
        idx
    }

    pub fn lock_key(&self) -> String {
        format!("leaderd:{{{}}}:lock", self.name)
    }

    pub fn channel(&self) -> String {
        format!("leaderd:{{{}}}:released", self.name)
    }

    /// `(holder, fence)` of the lease as Redis has it; `None` when vacant or quarantined.
    pub fn holder(&self) -> Option<(usize, u64)> {
        let out = self
            .redis
            .try_cmd(
                &["HMGET", &self.lock_key(), "holder", "fence"],
                Duration::from_secs(2),
            )
            .ok()?;
        let mut lines = out.lines();
        let holder = lines.next()?.strip_prefix('r')?.parse().ok()?;
        let fence = lines.next()?.parse().ok()?;
        Some((holder, fence))
    }

    pub fn pttl_ms(&self) -> Option<i64> {
        self.redis
            .try_cmd(&["PTTL", &self.lock_key()], Duration::from_secs(2))
            .ok()?
            .parse()
            .ok()
    }

    /// Subscribers of the release channel.
    pub fn subscribers(&self) -> usize {
        self.redis
            .try_cmd(
                &["PUBSUB", "NUMSUB", &self.channel()],
                Duration::from_secs(2),
            )
            .ok()
            .and_then(|s| s.lines().nth(1).and_then(|n| n.parse().ok()))
            .unwrap_or(0)
    }

    /// Waits until every running replica is subscribed and a leader holds the lease.
    pub fn wait_settled(&mut self, timeout: Duration) -> (usize, u64) {
        let deadline = Instant::now() + timeout;
        loop {
            let running = self
                .daemons
                .iter_mut()
                .map(|d| d.is_running())
                .filter(|r| *r)
                .count();
            if let Some(h) = self.holder() {
                if self.subscribers() == running && self.daemons[h.0].is_running() {
                    return h;
                }
            }
            assert!(
                Instant::now() < deadline,
                "election {} did not settle within {timeout:?}: holder {:?}, {} of {running} subscribed",
                self.name,
                self.holder(),
                self.subscribers()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The lease's `acquired_at_ms` field: the winner's wall clock when it *sent* the
    /// acquire that Redis granted.
    pub fn lease_sent_ms(&self) -> Option<u64> {
        self.redis
            .try_cmd(
                &["HGET", &self.lock_key(), "acquired_at_ms"],
                Duration::from_secs(2),
            )
            .ok()?
            .parse()
            .ok()
    }

    /// Waits for a term other than `old_fence`, and reads the winner's `acquired` line.
    pub fn wait_new_term(&self, old_fence: u64, step: Duration, timeout: Duration) -> NewTerm {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((idx, fence)) = self.holder().filter(|h| h.1 != old_fence) {
                let sent_ms = self.lease_sent_ms().unwrap_or(0);
                while Instant::now() < deadline {
                    if let Some(acquired_at_ms) = acquired_at(&self.daemons[idx], fence) {
                        return NewTerm {
                            replica: idx,
                            fence,
                            acquired_at_ms,
                            sent_ms,
                        };
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            assert!(
                Instant::now() < deadline,
                "no new term after fence {old_fence} within {timeout:?}"
            );
            std::thread::sleep(step);
        }
    }

    pub fn logs(&self) -> Vec<(String, Vec<Value>)> {
        self.daemons.iter().map(Daemon::safety_log).collect()
    }
}

/// A term that began.
#[derive(Debug, Clone, Copy)]
pub struct NewTerm {
    pub replica: usize,
    pub fence: u64,
    /// From the winner's `acquired` line: when it received the grant.
    pub acquired_at_ms: u64,
    /// From the lease in Redis: when the winner sent the acquire that was granted.
    pub sent_ms: u64,
}

/// `acquired_at_ms` of the term `fence` in the replica's log.
pub fn acquired_at(d: &Daemon, fence: u64) -> Option<u64> {
    d.log_events()
        .iter()
        .filter(|e| event_name(e) == Some("acquired") && field_u64(e, "fence") == Some(fence))
        .find_map(|e| field_u64(e, "acquired_at_ms"))
}

/// The last `lease_valid_until_ms` the replica logged for the term `fence`.
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

/// `acquired_at_ms` of every term begun at or after `since_ms`, over all replicas.
pub fn terms_since(daemons: &[Daemon], since_ms: u64) -> Vec<(usize, u64, u64)> {
    let mut out = Vec::new();
    for (i, d) in daemons.iter().enumerate() {
        for e in d.log_events() {
            if event_name(&e) != Some("acquired") {
                continue;
            }
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
