//! The Prometheus metrics (docs/outputs.md#metrics): a private registry whose every series carries
//! the `name` label, counters the elector bumps, and gauges derived from the state when scraped.

use std::collections::HashMap;
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use tokio::time::Instant;

use crate::conn::FailureKind;
use crate::daemon::state::Snapshot;
use crate::election::{AcquireResult, Began, RenewResult, StepDown};
use crate::shard::ShardStepDown;

mod outputs;
pub(crate) use outputs::OutputMetrics;

/// Buckets of `leaderd_renew_duration_seconds`: from a loopback round trip to command timeouts.
const RENEW_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

const LEADING_HELP: &str = "1 while this replica leads with a valid lease, else 0.";
const MASTER_HELP: &str =
    "1 while this replica leads with a valid lease, else 0 (the client-go name).";
const HEALTHY_HELP: &str = "1 while the local health check passes or none is configured, else 0.";
const REMAINING_HELP: &str =
    "Seconds until the current term's lease validity ends; 0 when not leader.";
const FENCE_HELP: &str = "Fencing token of this replica's current term; 0 when not leader.";
const TRANSITIONS_HELP: &str =
    "Terms this replica has begun, by how the lease became free (counted by the new leader).";
const ACQUIRE_HELP: &str = "Attempts to acquire the lease, by result.";
const RENEWALS_HELP: &str = "Attempts to renew the lease, by result.";
const RENEW_DURATION_HELP: &str = "Round trip of each renew of the lease, in seconds.";
const STEP_DOWNS_HELP: &str = "Terms this replica has ended, by reason.";
const SHARDS_HELP: &str = "Shards of the election (election.shards); 0 without shards.";
const SHARDS_OWNED_HELP: &str = "Shards this replica owns (a sharded election).";
const SHARD_MOVES_HELP: &str = "Shard terms this replica has ended, by reason.";
const REDIS_ERRORS_HELP: &str = "Failed Redis calls, by kind.";
const HTTP_REFUSED_HELP: &str = "HTTP connections closed at once: publish.max_connections reached.";
const EVICTION_RISK_HELP: &str =
    "1 while a Redis server of the election has a maxmemory-policy other than noeviction.";
const CANDIDATES_HELP: &str = "Registered candidates of the election as last read, by health.";
const DROPPED_HELP: &str =
    "Messages on the election's channels dropped unread: over 1 KiB, or a field out of bounds.";
const IDENTITY_CONFLICT_HELP: &str =
    "1 while another live process registers this replica's identity (within a lease_duration).";
const BUILD_INFO_HELP: &str = "Build of leaderd; always 1, the version is a label.";

/// Every series of docs/outputs.md#metrics, in one private registry (never the global default, so
/// several elections or tests in one process do not collide).
pub(crate) struct Metrics {
    registry: Registry,
    is_leader: IntGauge,
    master_status: IntGauge,
    healthy: IntGauge,
    lease_remaining: Gauge,
    fence: IntGauge,
    transitions: IntCounterVec,
    acquire_attempts: IntCounterVec,
    renewals: IntCounterVec,
    renew_duration: Histogram,
    step_downs: IntCounterVec,
    redis_errors: IntCounterVec,
    http_refused: IntCounter,
    /// The hooks' and the proxy's series.
    pub outputs: OutputMetrics,
    eviction_risk: IntGauge,
    candidates: IntGaugeVec,
    messages_dropped: IntCounter,
    /// Where `messages_dropped` is read from at each scrape (the lease's listeners).
    dropped_source: std::sync::OnceLock<Box<dyn Fn() -> u64 + Send + Sync>>,
    identity_conflict: IntGauge,
    shards: IntGauge,
    shards_owned: IntGauge,
    shard_moves: IntCounterVec,
}

impl Metrics {
    /// Registers every series of docs/outputs.md#metrics, labelled `name="<election>"`, each label
    /// value pre-created at 0 so `rate()` and alerts work before the first event.
    pub(crate) fn new(election: &str, version: &str) -> Metrics {
        let labels = HashMap::from([("name".to_owned(), election.to_owned())]);
        let registry = Registry::new_custom(None, Some(labels)).expect("valid registry labels");
        let r = &registry;
        let metrics = Metrics {
            is_leader: int_gauge(r, "leaderd_is_leader", LEADING_HELP),
            master_status: int_gauge(r, "leader_election_master_status", MASTER_HELP),
            healthy: int_gauge(r, "leaderd_healthy", HEALTHY_HELP),
            lease_remaining: float_gauge(r, "leaderd_lease_remaining_seconds", REMAINING_HELP),
            fence: int_gauge(r, "leaderd_fence", FENCE_HELP),
            transitions: counters(
                r,
                "leaderd_leader_transitions_total",
                TRANSITIONS_HELP,
                "began",
                &Began::ALL.map(Began::as_str),
            ),
            acquire_attempts: counters(
                r,
                "leaderd_acquire_attempts_total",
                ACQUIRE_HELP,
                "result",
                &AcquireResult::ALL.map(AcquireResult::as_str),
            ),
            renewals: counters(
                r,
                "leaderd_renewals_total",
                RENEWALS_HELP,
                "result",
                &RenewResult::ALL.map(RenewResult::as_str),
            ),
            renew_duration: renew_histogram(r),
            step_downs: counters(
                r,
                "leaderd_step_downs_total",
                STEP_DOWNS_HELP,
                "reason",
                &step_down_reasons(),
            ),
            redis_errors: counters(
                r,
                "leaderd_redis_errors_total",
                REDIS_ERRORS_HELP,
                "kind",
                &FailureKind::ALL.map(FailureKind::as_str),
            ),
            http_refused: counter(r, "leaderd_http_refused_total", HTTP_REFUSED_HELP),
            outputs: OutputMetrics::new(r),
            eviction_risk: int_gauge(r, "leaderd_redis_eviction_risk", EVICTION_RISK_HELP),
            candidates: register(
                r,
                IntGaugeVec::new(
                    Opts::new("leaderd_candidates", CANDIDATES_HELP),
                    &["healthy"],
                )
                .expect("valid gauge"),
            ),
            messages_dropped: counter(r, "leaderd_messages_dropped_total", DROPPED_HELP),
            dropped_source: std::sync::OnceLock::new(),
            identity_conflict: int_gauge(r, "leaderd_identity_conflict", IDENTITY_CONFLICT_HELP),
            shards: int_gauge(r, "leaderd_shards", SHARDS_HELP),
            shards_owned: int_gauge(r, "leaderd_shards_owned", SHARDS_OWNED_HELP),
            shard_moves: counters(
                r,
                "leaderd_shard_moves_total",
                SHARD_MOVES_HELP,
                "reason",
                &ShardStepDown::ALL.map(ShardStepDown::as_str),
            ),
            registry,
        };
        for h in ["true", "false"] {
            metrics.candidates.with_label_values(&[h]).set(0);
        }
        metrics.register_build_info(version);
        metrics.register_process();
        metrics
    }

    /// The candidates as last read: how many are healthy and how many not.
    pub(crate) fn candidates(&self, healthy: usize, unhealthy: usize) {
        let n = |x: usize| i64::try_from(x).unwrap_or(i64::MAX);
        self.candidates.with_label_values(&["true"]).set(n(healthy));
        self.candidates
            .with_label_values(&["false"])
            .set(n(unhealthy));
    }

    /// Whether another live process registers this replica's identity.
    pub(crate) fn set_identity_conflict(&self, conflict: bool) {
        self.identity_conflict.set(i64::from(conflict));
    }

    /// Counts a term this replica has begun, by how it began.
    pub(crate) fn transition(&self, began: Began) {
        self.transitions.with_label_values(&[began.as_str()]).inc();
    }

    /// Counts an acquire attempt.
    pub(crate) fn acquire_attempt(&self, result: AcquireResult) {
        self.acquire_attempts
            .with_label_values(&[result.as_str()])
            .inc();
    }

    /// Counts a renew attempt and observes its round trip.
    pub(crate) fn renewal(&self, result: RenewResult, took: Duration) {
        self.renewals.with_label_values(&[result.as_str()]).inc();
        self.renew_duration.observe(took.as_secs_f64());
    }

    /// Counts a step-down.
    pub(crate) fn step_down(&self, reason: StepDown) {
        self.step_downs.with_label_values(&[reason.as_str()]).inc();
    }

    /// How many shards the election has (`election.shards`), so that the shards owned summed
    /// over the replicas can be compared with it (deploy/README.md, `LeaderdShardUnowned`).
    pub(crate) fn set_shards(&self, count: u32) {
        self.shards.set(i64::from(count));
    }

    /// How many shards this replica owns now.
    pub(crate) fn set_shards_owned(&self, owned: usize) {
        self.shards_owned
            .set(i64::try_from(owned).unwrap_or(i64::MAX));
    }

    /// Counts a shard term ended for `reason`: a move, and a step-down (README, "Shards").
    pub(crate) fn shard_moved(&self, reason: ShardStepDown) {
        self.shard_moves.with_label_values(&[reason.as_str()]).inc();
        self.step_downs.with_label_values(&[reason.as_str()]).inc();
    }

    /// Counts an HTTP connection closed at once because the connection cap was reached.
    pub(crate) fn http_refused(&self) {
        self.http_refused.inc();
    }

    /// Whether some Redis server of the election can evict its keys.
    pub(crate) fn set_eviction_risk(&self, at_risk: bool) {
        self.eviction_risk.set(i64::from(at_risk));
    }

    /// Counts a failed Redis call by its kind.
    pub(crate) fn redis_error(&self, kind: FailureKind) {
        self.redis_errors.with_label_values(&[kind.as_str()]).inc();
    }

    /// Reads `leaderd_messages_dropped_total` from `source` (a running total) at each
    /// scrape. Set once; later calls are ignored.
    pub(crate) fn count_dropped_messages(&self, source: impl Fn() -> u64 + Send + Sync + 'static) {
        let _ = self.dropped_source.set(Box::new(source));
    }

    /// The text exposition. The leadership gauges are set from `snapshot` checked at `now`
    /// first, so a scrape never reports a claim whose validity has passed.
    pub(crate) fn render(&self, snapshot: &Snapshot, now: Instant) -> String {
        self.set_leadership(snapshot, now);
        if let Some(source) = self.dropped_source.get() {
            let (total, shown) = (source(), self.messages_dropped.get());
            self.messages_dropped.inc_by(total.saturating_sub(shown));
        }
        let mut families = self.registry.gather();
        sort_labels(&mut families);
        match TextEncoder::new().encode_to_string(&families) {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(error = %e, "cannot encode metrics");
                String::new()
            }
        }
    }

    fn set_leadership(&self, snapshot: &Snapshot, now: Instant) {
        let term = snapshot.valid_term(now);
        let leading = i64::from(snapshot.is_leader_at(now));
        self.is_leader.set(leading);
        self.master_status.set(leading);
        self.healthy.set(i64::from(snapshot.healthy));
        let remaining = term.map_or(Duration::ZERO, |t| {
            t.valid_until.saturating_duration_since(now)
        });
        self.lease_remaining.set(remaining.as_secs_f64());
        self.fence
            .set(term.map_or(0, |t| i64::try_from(t.fence).unwrap_or(i64::MAX)));
    }

    fn register_build_info(&self, version: &str) {
        let opts = Opts::new("leaderd_build_info", BUILD_INFO_HELP);
        let info = register(
            &self.registry,
            IntGaugeVec::new(opts, &["version"]).expect("valid gauge"),
        );
        info.with_label_values(&[version]).set(1);
    }

    #[cfg(target_os = "linux")]
    fn register_process(&self) {
        let collector = prometheus::process_collector::ProcessCollector::for_self();
        self.registry
            .register(Box::new(collector))
            .expect("process metrics are registered once");
    }

    #[cfg(not(target_os = "linux"))]
    fn register_process(&self) {}
}

/// Puts every series' labels in name order, as the Go client writes them (the registry
/// appends its `name` label after a series' own labels).
fn sort_labels(families: &mut [MetricFamily]) {
    for family in families {
        for metric in family.mut_metric() {
            let mut labels = metric.take_label();
            labels.sort_by(|a, b| a.name().cmp(b.name()));
            metric.set_label(labels);
        }
    }
}

/// Registers `collector` and hands it back; a clash is a programming error.
fn register<C: Collector + Clone + 'static>(registry: &Registry, collector: C) -> C {
    registry
        .register(Box::new(collector.clone()))
        .expect("each series is registered once");
    collector
}

fn int_gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    register(registry, IntGauge::new(name, help).expect("valid gauge"))
}

fn float_gauge(registry: &Registry, name: &str, help: &str) -> Gauge {
    register(registry, Gauge::new(name, help).expect("valid gauge"))
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    register(
        registry,
        IntCounter::new(name, help).expect("valid counter"),
    )
}

/// The reasons of `leaderd_step_downs_total`: a single lease's, and a shard's `rebalance`.
fn step_down_reasons() -> Vec<&'static str> {
    let mut reasons = StepDown::ALL.map(StepDown::as_str).to_vec();
    for reason in ShardStepDown::ALL.map(ShardStepDown::as_str) {
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
    }
    reasons
}

/// A counter family with every one of `values` created at 0.
fn counters(
    registry: &Registry,
    name: &str,
    help: &str,
    label: &str,
    values: &[&str],
) -> IntCounterVec {
    let family = IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid counter");
    for value in values {
        family.with_label_values(&[*value]);
    }
    register(registry, family)
}

fn renew_histogram(registry: &Registry) -> Histogram {
    let opts = HistogramOpts::new("leaderd_renew_duration_seconds", RENEW_DURATION_HELP)
        .buckets(RENEW_BUCKETS.to_vec());
    register(
        registry,
        Histogram::with_opts(opts).expect("valid histogram"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_exists_from_the_start_with_the_name_label() {
        let metrics = Metrics::new("e1", "0.1.0");
        let text = metrics.render(&Snapshot::starting(true), Instant::now());
        for series in [
            "leaderd_is_leader{name=\"e1\"} 0",
            "leaderd_messages_dropped_total{name=\"e1\"} 0",
            "leader_election_master_status{name=\"e1\"} 0",
            "leaderd_acquire_attempts_total{name=\"e1\",result=\"held\"} 0",
            "leaderd_leader_transitions_total{began=\"first\",name=\"e1\"} 0",
            "leaderd_leader_transitions_total{began=\"handover\",name=\"e1\"} 0",
            "leaderd_leader_transitions_total{began=\"quarantine\",name=\"e1\"} 0",
            "leaderd_step_downs_total{name=\"e1\",reason=\"child_exit\"} 0",
            "leaderd_step_downs_total{name=\"e1\",reason=\"rebalance\"} 0",
            "leaderd_redis_errors_total{kind=\"auth\",name=\"e1\"} 0",
            "leaderd_build_info{name=\"e1\",version=\"0.1.0\"} 1",
            "leaderd_renewals_total{name=\"e1\",result=\"lost\"} 0",
            "leaderd_healthy{name=\"e1\"} 1",
            "leaderd_http_refused_total{name=\"e1\"} 0",
            "leaderd_hook_runs_total{hook=\"on_leader_changed\",name=\"e1\",result=\"dropped\"} 0",
            "leaderd_proxy_connections_total{name=\"e1\",target=\"refused\"} 0",
            "leaderd_proxy_active_connections{name=\"e1\"} 0",
            "leaderd_proxy_bytes_total{direction=\"out\",name=\"e1\"} 0",
            "leaderd_shards{name=\"e1\"} 0",
            "leaderd_shards_owned{name=\"e1\"} 0",
            "leaderd_shard_moves_total{name=\"e1\",reason=\"rebalance\"} 0",
        ] {
            assert!(text.contains(series), "missing {series} in\n{text}");
        }
    }

    #[test]
    fn the_shard_count_is_a_gauge_beside_the_shards_owned() {
        let metrics = Metrics::new("e1", "0.1.0");
        metrics.set_shards(16);
        metrics.set_shards_owned(5);
        let text = metrics.render(&Snapshot::starting(true), Instant::now());
        assert!(text.contains("leaderd_shards{name=\"e1\"} 16"), "{text}");
        assert!(
            text.contains("leaderd_shards_owned{name=\"e1\"} 5"),
            "{text}"
        );
    }
}
