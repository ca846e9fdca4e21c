//! How the daemon shows what the elector does: its [`ElectionEvents`] feed the state
//! channel, the metrics, the progress marker for `/healthz`, and the log lines with their
//! `event` fields.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::daemon::metrics::Metrics;
use crate::daemon::state::{Phase, Progress, Snapshot, TermView};
use crate::election::{AcquireResult, Began, ElectionEvents, RenewResult, StepDown};
use crate::lease::{unix_ms, LeaseError, Observed, Term};

mod own;
mod shards;
pub(crate) use own::Own;
pub(crate) use shards::ShardReporter;

fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}

fn with_phase(snapshot: &mut Snapshot, phase: Phase) {
    snapshot.set_phase(phase);
}

/// A repeated Redis error is logged at most this often.
const ERROR_LOG_EVERY: Duration = Duration::from_secs(30);

#[derive(Default)]
struct ErrorLog {
    /// The last error logged, without its digits (a timeout's "after N ms" varies).
    last: Option<String>,
    logged_at: Option<Instant>,
    suppressed: u64,
    failing: u64,
    /// When `redis_recovered` was last logged.
    recovered_at: Option<Instant>,
    /// When an out-of-memory error was last logged: said once per [`ERROR_LOG_EVERY`],
    /// whichever call met it (a renew, an acquire, a heartbeat) and whatever answered between.
    oom_logged_at: Option<Instant>,
}

/// Whether Redis refused the call for want of memory.
fn out_of_memory(err: &LeaseError) -> bool {
    matches!(err, LeaseError::Unavailable(f) if f.code.as_deref() == Some("OOM")
        || f.cause.starts_with("Redis is out of memory"))
}

/// A leader (none while vacant or quarantined) and its fence, as last logged.
type Seen = (Option<String>, Option<u64>);

/// Publishes what the elector does. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Reporter {
    state: Arc<watch::Sender<Snapshot>>,
    metrics: Arc<Metrics>,
    progress: Progress,
    identity: String,
    /// The leader and fence last logged; a new term of the same leader is a change too.
    first_seen: Arc<Mutex<Option<Seen>>>,
    errors: Arc<Mutex<ErrorLog>>,
    outputs: Outputs,
}

/// The daemon's outputs that follow the term: hooks, the proxy's local connections, and
/// this replica's advertised address.
#[derive(Clone, Default)]
pub(crate) struct Outputs {
    pub hooks: Option<crate::daemon::hooks::HookSink>,
    pub proxy: Option<crate::daemon::proxy::LocalGate>,
    pub advertise: Option<String>,
}

impl Reporter {
    /// A reporter for the replica `identity`.
    pub(crate) fn new(
        identity: &str,
        state: Arc<watch::Sender<Snapshot>>,
        metrics: Arc<Metrics>,
        progress: Progress,
    ) -> Self {
        Reporter {
            state,
            metrics,
            progress,
            identity: identity.to_owned(),
            first_seen: Arc::default(),
            errors: Arc::default(),
            outputs: Outputs::default(),
        }
    }

    /// The same reporter, also feeding `outputs`.
    pub(crate) fn with_outputs(mut self, outputs: Outputs) -> Self {
        self.outputs = outputs;
        self
    }

    fn hook(&self, event: crate::daemon::hooks::HookEvent) {
        if let Some(hooks) = &self.outputs.hooks {
            hooks.push(event);
        }
    }

    /// A follower saw what holds the lease (a quarantined or reserved lease has no leader).
    fn follower_saw(&self, seen: &Observed) {
        self.recovered();
        if let Some(proxy) = &self.outputs.proxy {
            proxy.leader_seen(seen.remaining());
        }
        let holder = seen.holder();
        let leader = holder.map(|h| h.holder.clone());
        let fence = holder.map(|h| h.fence);
        let changed = {
            let mut seen = self.first_seen.lock().expect("reporter lock");
            let now = (leader.clone(), fence);
            let changed = seen.as_ref() != Some(&now);
            *seen = Some(now);
            changed
        };
        if changed {
            tracing::info!(
                event = "leader_changed",
                leader = leader.as_deref(),
                fence,
                quarantined = matches!(seen, Observed::Quarantined { .. }),
                "leader is {}",
                leader.as_deref().unwrap_or("nobody")
            );
            self.hook(crate::daemon::hooks::HookEvent::leader_changed(
                leader.clone(),
                fence,
            ));
        }
        self.state.send_if_modified(|s| {
            let before = s.clone();
            if s.phase != Phase::Follower {
                with_phase(s, Phase::Follower);
            }
            s.leader = leader;
            s.fence = fence;
            s.leader_address = holder.and_then(|h| h.address.clone());
            if *s != before {
                s.observed_at = SystemTime::now();
                return true;
            }
            false
        });
    }

    /// A Redis call failed: count it, log it (rate-limited), and leave `starting`.
    fn failed(&self, err: &LeaseError) {
        if let Some(kind) = err.redis_kind() {
            self.metrics.redis_error(kind);
        }
        self.log_error(err);
        self.state.send_if_modified(|s| {
            if s.phase == Phase::Starting {
                with_phase(s, Phase::Follower);
                return true;
            }
            false
        });
    }

    fn log_error(&self, err: &LeaseError) {
        let text = err.to_string();
        let shape: String = text.chars().filter(|c| !c.is_ascii_digit()).collect();
        let mut log = self.errors.lock().expect("reporter lock");
        log.failing += 1;
        let repeated = log.last.as_deref() == Some(shape.as_str());
        let recent = log.logged_at.is_some_and(|t| t.elapsed() < ERROR_LOG_EVERY);
        let oom = out_of_memory(err);
        let oom_recent = log
            .oom_logged_at
            .is_some_and(|t| t.elapsed() < ERROR_LOG_EVERY);
        if (oom && oom_recent) || (!oom && repeated && recent) {
            log.suppressed += 1;
            return;
        }
        tracing::warn!(event = "redis_error", error = %text, repeated = log.suppressed, "Redis call failed: {text}");
        log.last = Some(shape);
        log.logged_at = Some(Instant::now());
        if oom {
            log.oom_logged_at = log.logged_at;
        }
        log.suppressed = 0;
    }

    /// A call succeeded after failures: logged at most every [`ERROR_LOG_EVERY`]; while it
    /// is not, the same error coming back stays suppressed too (a Redis that fails every
    /// other call, e.g. writes that no replica acknowledges between reads that work, costs a
    /// few lines every 30 s, not two a second; the next error line counts what it left out).
    fn recovered(&self) {
        let mut log = self.errors.lock().expect("reporter lock");
        if log.failing == 0 {
            return;
        }
        if log
            .recovered_at
            .is_none_or(|t| t.elapsed() >= ERROR_LOG_EVERY)
        {
            tracing::info!(
                event = "redis_recovered",
                failures = log.failing,
                "Redis answers again"
            );
            log.recovered_at = Some(Instant::now());
            // Said that it answers again: the next failure is news.
            log.last = None;
        }
        log.failing = 0;
    }

    /// Records whether the local service is healthy.
    pub(crate) fn set_healthy(&self, healthy: bool) {
        self.state.send_if_modified(|s| {
            let changed = s.healthy != healthy;
            s.healthy = healthy;
            changed
        });
    }
}

impl ElectionEvents for Reporter {
    fn attempted(&self) {
        self.progress.touch();
    }

    fn acquire_result(&self, result: AcquireResult) {
        self.metrics.acquire_attempt(result);
    }

    /// Not a term: only a WARN line, nothing published.
    fn acquired_too_late(&self, grant: &Term) {
        tracing::warn!(
            event = "acquire_expired",
            fence = grant.fence,
            lease_valid_until_ms = unix_ms(grant.valid_until_wall),
            "an acquire's reply came after its validity: not a term, releasing it (fence {})",
            grant.fence
        );
    }

    fn observed(&self, seen: &Observed) {
        self.follower_saw(seen);
    }

    fn redis_failed(&self, err: &LeaseError) {
        self.failed(err);
    }

    /// Counted here, on the replica whose term begins, which lives on (README, "Metrics").
    fn began(&self, _term: &Term, how: Began) {
        self.metrics.transition(how);
    }

    /// A term has begun: publish it and log `acquired`.
    fn acquired(&self, term: &Term) {
        self.recovered();
        *self.first_seen.lock().expect("reporter lock") =
            Some((Some(self.identity.clone()), Some(term.fence)));
        self.state.send_modify(|s| {
            with_phase(s, Phase::Leader);
            s.leader = Some(self.identity.clone());
            s.fence = Some(term.fence);
            s.term = Some(TermView::from(term));
            s.leader_address = self.outputs.advertise.clone();
        });
        tracing::info!(
            event = "acquired",
            fence = term.fence,
            acquired_at_ms = unix_ms(term.acquired_at),
            lease_valid_until_ms = unix_ms(term.valid_until_wall),
            "acquired leadership (fence {})",
            term.fence
        );
        self.hook(crate::daemon::hooks::HookEvent::acquired(
            &self.identity,
            term.fence,
            unix_ms(term.valid_until_wall),
        ));
    }

    /// Counts a renew and its round trip.
    fn renew_result(&self, result: RenewResult, took: Duration) {
        self.metrics.renewal(result, took);
    }

    /// The term's validity moved forward: publish it (the file is rewritten) and log
    /// `renewed` at DEBUG.
    fn renewed(&self, term: &Term) {
        self.recovered();
        self.state.send_modify(|s| {
            s.term = Some(TermView::from(term));
            s.observed_at = SystemTime::now();
        });
        tracing::debug!(
            event = "renewed",
            fence = term.fence,
            lease_valid_until_ms = unix_ms(term.valid_until_wall),
            "renewed"
        );
    }

    /// Stop claiming: publish `stepping_down` (not leader), then log `stepped_down`.
    fn stepped_down(&self, term: &Term, reason: StepDown) {
        self.state.send_modify(|s| {
            with_phase(s, Phase::SteppingDown);
            s.leader = None;
            s.fence = None;
            s.leader_address = None;
        });
        *self.first_seen.lock().expect("reporter lock") = None;
        self.metrics.step_down(reason);
        tracing::info!(
            event = "stepped_down",
            fence = term.fence,
            reason = reason.as_str(),
            lease_valid_until_ms = unix_ms(term.valid_until_wall),
            ended_at_ms = now_ms(),
            "stepped down ({})",
            reason.as_str()
        );
    }

    /// The claim is over and the work (the child) has stopped: the proxy's local
    /// connections are closed (waited for; the elector releases after this), then
    /// `on_stepped_down` is queued.
    async fn work_stopped(&self, term: &Term, reason: StepDown) {
        if let Some(gate) = &self.outputs.proxy {
            gate.end_term(term.fence).await;
        }
        self.hook(crate::daemon::hooks::HookEvent::stepped_down(
            term.fence,
            reason.as_str(),
        ));
    }

    /// The lease was released.
    fn released(&self, term: &Term) {
        tracing::info!(event = "released", fence = term.fence, "released the lease");
    }

    /// A completed step-down is a follower's state, even before Redis answers again (a
    /// shutdown's ends as `stopped` instead).
    fn step_down_done(&self, _term: &Term, reason: StepDown) {
        if reason == StepDown::Shutdown {
            return;
        }
        self.state.send_if_modified(|s| {
            let ending = s.phase == Phase::SteppingDown;
            if ending {
                with_phase(s, Phase::Follower);
                s.observed_at = SystemTime::now();
            }
            ending
        });
    }

    fn sitting_out(&self, until: Option<Instant>) {
        self.state.send_if_modified(|s| {
            let changed = s.sitting_out != until.is_some();
            s.sitting_out = until.is_some();
            changed
        });
    }

    fn handover_requested(&self, request: &crate::lease::HandoverRequest) {
        tracing::info!(
            event = "handover_requested",
            to = %request.to,
            by = %request.by,
            "handover to {} requested by {}",
            request.to,
            request.by
        );
    }

    fn handover_dropped(&self, request: &crate::lease::HandoverRequest) {
        tracing::info!(
            event = "handover_dropped",
            to = %request.to,
            by = %request.by,
            fence = request.fence,
            "handover to {} by {} dropped: it was asked of the term with fence {}, which has ended",
            request.to,
            request.by,
            request.fence
        );
    }

    fn handover_refused(&self, request: &crate::lease::HandoverRequest, reason: &str) {
        tracing::warn!(
            event = "handover_refused",
            to = %request.to,
            by = %request.by,
            reason,
            "handover to {} refused: {reason}",
            request.to
        );
    }

    /// The elector has finished.
    fn stopped(&self) {
        self.state.send_modify(|s| {
            with_phase(s, Phase::Stopped);
            s.leader = None;
            s.fence = None;
            s.leader_address = None;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::{FailureKind, RedisFailure};

    /// Log lines written while `f` runs, as JSON objects.
    fn logged(f: impl FnOnce()) -> Vec<serde_json::Value> {
        let buf = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_redis_that_fails_every_other_call_costs_a_few_lines() {
        let metrics = Arc::new(Metrics::new("e", "v"));
        let state = Arc::new(watch::channel(Snapshot::starting(true)).0);
        let reporter = Reporter::new("a", state, metrics, Progress::new());
        let lines = logged(|| {
            for i in 0..40 {
                let cause = format!("Redis command timed out after {}ms", 190 + i);
                let err = LeaseError::Unavailable(RedisFailure::new(FailureKind::Timeout, cause));
                reporter.redis_failed(&err);
                reporter.observed(&Observed::Vacant);
            }
        });
        let events: Vec<&str> = lines.iter().filter_map(|l| l["event"].as_str()).collect();
        let count = |e: &str| events.iter().filter(|x| **x == e).count();
        assert_eq!(count("redis_error"), 2, "{events:?}");
        assert_eq!(count("redis_recovered"), 1, "{events:?}");
    }
}
