//! The election timings the benchmarks run with, and the replicas of one election that run
//! them (the tests' `support::Replicas`, on a Redis whose fence counter is seeded).

use crate::support::Replicas;

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

    /// No replica yet of election `name` with these timings and `extra_yaml`, on a fresh
    /// Redis whose election already has a fence counter, so the first acquire is not
    /// quarantined for a lease duration (the state of a running election, not a brand-new
    /// one). `spawn` starts replicas `r0`, `r1`, ...
    pub fn replicas(self, name: &str, extra_yaml: &str) -> Replicas {
        Replicas::seeded(name, |o| {
            o.lease = format!("{}ms", self.lease_ms);
            o.renew_deadline = format!("{}ms", self.renew_deadline_ms);
            o.retry = format!("{}ms", self.retry_ms);
            o.command_timeout = format!("{}ms", self.command_timeout_ms);
            o.extra_yaml = extra_yaml.to_string();
        })
    }
}
