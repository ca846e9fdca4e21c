//! The elector's public vocabulary: the work done while leading, the timing and policy,
//! the inputs besides the lease, and why a term ends.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::TermView;
use crate::lease::Roster;

/// The work done only while leading (exec mode); [`NoWork`] when there is none.
pub trait LeaderWork: Send {
    /// A term has begun.
    fn start(&mut self, term: &TermView) -> impl Future<Output = ()> + Send;
    /// The term's validity moved forward.
    fn extend(&mut self, term: &TermView) -> impl Future<Output = ()> + Send;
    /// The term is over: stop the work and wait until it has stopped.
    fn stop(&mut self) -> impl Future<Output = ()> + Send;
    /// Resolves with the exit code when the work ends by itself while leading.
    fn exited(&mut self) -> impl Future<Output = i32> + Send;
}

/// No work: leadership is only published.
pub struct NoWork;

impl LeaderWork for NoWork {
    async fn start(&mut self, _: &TermView) {}
    async fn extend(&mut self, _: &TermView) {}
    async fn stop(&mut self) {}
    async fn exited(&mut self) -> i32 {
        std::future::pending().await
    }
}

/// The timing of an election (docs/protocol.md#timing): [`Timing::new`] scales the defaults
/// (15 s / 10 s / 2 s) to a lease duration, the `with_` methods change one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Lease TTL in Redis.
    pub(crate) lease_duration: Duration,
    /// A leader without a successful renew for this long (from its send) steps down.
    pub(crate) renew_deadline: Duration,
    /// Renew interval of the leader, poll interval of followers.
    pub(crate) retry_period: Duration,
    /// Followers wait `retry_period * (1 + U(0, jitter))`.
    pub(crate) jitter: f64,
    /// Timeout of one Redis command.
    pub(crate) command_timeout: Duration,
}

impl Timing {
    /// The timing of a `lease_duration` lease: renew deadline two thirds of it, retry period
    /// two fifteenths (10 s and 2 s for 15 s), jitter 0.2, 500 ms per Redis command.
    pub fn new(lease_duration: Duration) -> Self {
        Timing {
            lease_duration,
            renew_deadline: lease_duration * 2 / 3,
            retry_period: lease_duration * 2 / 15,
            jitter: 0.2,
            command_timeout: Duration::from_millis(500),
        }
    }

    /// A leader without a successful renew for this long (from its send) steps down; keep
    /// it below the lease duration.
    pub fn with_renew_deadline(mut self, renew_deadline: Duration) -> Self {
        self.renew_deadline = renew_deadline;
        self
    }

    /// The leader's renew interval and the followers' poll interval.
    pub fn with_retry_period(mut self, retry_period: Duration) -> Self {
        self.retry_period = retry_period;
        self
    }

    /// Followers wait `retry_period * (1 + U(0, jitter))`, `0 <= jitter <= 1`.
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The timeout of one Redis command; keep it below the retry period.
    pub fn with_command_timeout(mut self, command_timeout: Duration) -> Self {
        self.command_timeout = command_timeout;
        self
    }

    /// The lease TTL in Redis.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// How long a leader goes without a successful renew before it steps down.
    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    /// The leader's renew interval and the followers' poll interval.
    pub fn retry_period(&self) -> Duration {
        self.retry_period
    }
}

/// What to do after a term is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterLoss {
    /// Campaign again after `retry_period`.
    Contend,
    /// Stop the elector with exit code 1.
    Exit,
}

/// What to do when the work exits by itself while leading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterWorkExit {
    /// Release, then contend again after `retry_period`.
    Release,
    /// Release, then stop with the work's exit code.
    Exit,
}

/// How the elector behaves: [`Policy::new`] contends again after a loss, releases when the
/// work exits, releases on shutdown and does not preempt; the `with_` methods change one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// The timings.
    pub(crate) timing: Timing,
    /// After losing a term.
    pub(crate) on_lost: AfterLoss,
    /// After the work exits by itself.
    pub(crate) on_work_exit: AfterWorkExit,
    /// Release the lease on shutdown (otherwise let it expire).
    pub(crate) release_on_shutdown: bool,
    /// Hand over to a healthy candidate of higher priority once it has been registered and
    /// healthy for a lease duration (docs/operating.md#priority).
    pub(crate) preempt: bool,
}

impl Policy {
    /// The default policy with `timing`.
    pub fn new(timing: Timing) -> Self {
        Policy {
            timing,
            on_lost: AfterLoss::Contend,
            on_work_exit: AfterWorkExit::Release,
            release_on_shutdown: true,
            preempt: false,
        }
    }

    /// What to do after a term is lost.
    pub fn with_on_lost(mut self, on_lost: AfterLoss) -> Self {
        self.on_lost = on_lost;
        self
    }

    /// What to do when the work exits by itself while leading.
    pub fn with_on_work_exit(mut self, on_work_exit: AfterWorkExit) -> Self {
        self.on_work_exit = on_work_exit;
        self
    }

    /// Whether to release the lease on shutdown (otherwise it expires).
    pub fn with_release_on_shutdown(mut self, release: bool) -> Self {
        self.release_on_shutdown = release;
        self
    }

    /// Whether to hand over to a healthy candidate of higher priority once it has been
    /// registered and healthy for a lease duration (docs/operating.md#priority).
    pub fn with_preempt(mut self, preempt: bool) -> Self {
        self.preempt = preempt;
        self
    }

    /// The timings.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }
}

/// Why a term ended; the `reason` of `stepped_down` and of the step-down metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepDown {
    /// Redis said the lease is no longer ours.
    Lost,
    /// No renew succeeded within the renew deadline.
    Deadline,
    /// The daemon is shutting down.
    Shutdown,
    /// Asked to yield (SIGUSR1, or the health check failed).
    Yield,
    /// The work exited by itself, with this code.
    WorkExit(i32),
    /// Handed over to a successor on request (`leaderd handover`).
    Handover,
    /// Handed over to a healthy candidate of higher priority (`election.preempt`).
    Preempted,
}

impl StepDown {
    /// One of each reason (`WorkExit` with code 0), in the order the metrics list them.
    pub const ALL: [StepDown; 7] = [
        StepDown::Lost,
        StepDown::Deadline,
        StepDown::Shutdown,
        StepDown::Yield,
        StepDown::WorkExit(0),
        StepDown::Handover,
        StepDown::Preempted,
    ];

    /// The label used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            StepDown::Lost => "lost",
            StepDown::Deadline => "deadline",
            StepDown::Shutdown => "shutdown",
            StepDown::Yield => "yield",
            StepDown::WorkExit(_) => "child_exit",
            StepDown::Handover => "handover",
            StepDown::Preempted => "preempted",
        }
    }
}

/// The longest the elector waits for [`ElectionEvents::work_stopped`](super::ElectionEvents::work_stopped) before it releases:
/// a slow events implementation delays the successor by at most this much.
pub const WORK_STOPPED_LIMIT: Duration = Duration::from_secs(2);

/// Inputs of the elector besides the lease: [`Inputs::new`] with only a shutdown token
/// (never asked to yield, always healthy, no candidates); the `with_` methods add the others.
pub struct Inputs {
    /// Cancelled on SIGTERM/SIGINT.
    pub(crate) shutdown: CancellationToken,
    /// One message per SIGUSR1.
    pub(crate) yields: mpsc::Receiver<()>,
    /// Whether the local service is healthy; a leader yields when it turns false.
    pub(crate) healthy: watch::Receiver<bool>,
    /// The election's candidates as last read (the daemon's heartbeat sends them): who the
    /// best successor is. [`no_candidates`] when nobody registers.
    pub(crate) candidates: watch::Receiver<Roster>,
}

impl Inputs {
    /// The elector stops (releasing, unless the policy says otherwise) when `shutdown` is
    /// cancelled.
    pub fn new(shutdown: CancellationToken) -> Self {
        Inputs {
            shutdown,
            yields: mpsc::channel(1).1,
            healthy: watch::channel(true).1,
            candidates: no_candidates(),
        }
    }

    /// A leader steps down, and a follower sits out a lease, at each message (the daemon
    /// sends one per SIGUSR1).
    pub fn with_yields(mut self, yields: mpsc::Receiver<()>) -> Self {
        self.yields = yields;
        self
    }

    /// Whether the local service is healthy: a leader yields when it turns false, a
    /// follower contends only while it is true.
    pub fn with_health(mut self, healthy: watch::Receiver<bool>) -> Self {
        self.healthy = healthy;
        self
    }

    /// The election's candidates as last read (the daemon's heartbeat sends them): who the
    /// best successor is.
    pub fn with_candidates(mut self, candidates: watch::Receiver<Roster>) -> Self {
        self.candidates = candidates;
        self
    }
}

/// A candidates input that never changes: no registry, so no successor is known.
fn no_candidates() -> watch::Receiver<Roster> {
    watch::channel(Roster::default()).1
}

/// The next change of health; never, once nobody checks health any more.
pub(super) async fn health_change(healthy: &mut watch::Receiver<bool>) {
    if healthy.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
