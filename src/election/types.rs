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

/// The timing of an election (docs/protocol.md#timing).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Lease TTL in Redis.
    pub lease_duration: Duration,
    /// A leader without a successful renew for this long (from its send) steps down.
    pub renew_deadline: Duration,
    /// Renew interval of the leader, poll interval of followers.
    pub retry_period: Duration,
    /// Followers wait `retry_period * (1 + U(0, jitter))`.
    pub jitter: f64,
    /// Timeout of one Redis command.
    pub command_timeout: Duration,
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

/// How the elector behaves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// The timings.
    pub timing: Timing,
    /// After losing a term.
    pub on_lost: AfterLoss,
    /// After the work exits by itself.
    pub on_work_exit: AfterWorkExit,
    /// Release the lease on shutdown (otherwise let it expire).
    pub release_on_shutdown: bool,
    /// Hand over to a healthy candidate of higher priority once it has been registered and
    /// healthy for a lease duration (docs/operating.md#priority).
    pub preempt: bool,
}

/// Why a term ended; the `reason` of `stepped_down` and of the step-down metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// The longest the elector waits for [`ElectionEvents::work_stopped`] before it releases:
/// a slow events implementation delays the successor by at most this much.
pub const WORK_STOPPED_LIMIT: Duration = Duration::from_secs(2);

/// Inputs of the elector besides the lease.
pub struct Inputs {
    /// Cancelled on SIGTERM/SIGINT.
    pub shutdown: CancellationToken,
    /// One message per SIGUSR1.
    pub yields: mpsc::Receiver<()>,
    /// Whether the local service is healthy; a leader yields when it turns false.
    pub healthy: watch::Receiver<bool>,
    /// The election's candidates as last read (the daemon's heartbeat sends them): who the
    /// best successor is. [`no_candidates`] when nobody registers.
    pub candidates: watch::Receiver<Roster>,
}

/// A candidates input that never changes: no registry, so no successor is known.
pub fn no_candidates() -> watch::Receiver<Roster> {
    watch::channel(Roster::default()).1
}

/// The next change of health; never, once nobody checks health any more.
pub(super) async fn health_change(healthy: &mut watch::Receiver<bool>) {
    if healthy.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
