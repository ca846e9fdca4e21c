//! What the elector reports: one call per transition to an [`ElectionEvents`] the caller
//! owns (the daemon's metrics, state channel and logs; a library user's own), and the typed
//! label values of those calls.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{Began, StepDown};
use crate::lease::{HandoverRequest, LeaseError, Observed, Term};

/// Receives every transition of the elector, in order. Every method does nothing by
/// default, so an implementation picks what it needs. Calls are made from the elector's
/// task and should return quickly.
pub trait ElectionEvents: Send + Sync {
    /// An attempt (acquire, observe, renew) has finished, successfully or not; or a quiet
    /// follower checked in (every `retry_period` while it waits without asking Redis).
    fn attempted(&self) {}
    /// An acquire attempt ended with `result`.
    fn acquire_result(&self, _result: AcquireResult) {}
    /// An acquire was granted but its reply came after the grant's validity: no term
    /// began, and the grant is released.
    fn acquired_too_late(&self, _grant: &Term) {}
    /// A follower saw what holds the lease.
    fn observed(&self, _seen: &Observed) {}
    /// A Redis call failed.
    fn redis_failed(&self, _err: &LeaseError) {}
    /// A term is about to begin (just before [`acquired`](Self::acquired)), and how.
    fn began(&self, _term: &Term, _how: Began) {}
    /// A term has begun (before the work starts).
    fn acquired(&self, _term: &Term) {}
    /// A renew ended with `result` after `took`.
    fn renew_result(&self, _result: RenewResult, _took: Duration) {}
    /// The term's validity moved forward.
    fn renewed(&self, _term: &Term) {}
    /// The replica has stopped claiming the term (before the work is stopped and before
    /// any release).
    fn stepped_down(&self, _term: &Term, _reason: StepDown) {}
    /// The work of the term has stopped: nothing guarded by the term runs any more. Comes
    /// after [`stepped_down`](Self::stepped_down) and before any release: the elector
    /// awaits the returned future (at most [`WORK_STOPPED_LIMIT`](super::WORK_STOPPED_LIMIT))
    /// before it releases, so whatever must end before a successor can take over (e.g. the
    /// connections a proxy forwards to this replica) can be finished here.
    fn work_stopped(&self, _term: &Term, _reason: StepDown) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
    /// The lease was released (not called when it was no longer this term's).
    fn released(&self, _term: &Term) {}
    /// The step-down is complete: the work has stopped and the release, if one was due, was
    /// sent, whatever came of it (Redis may not have answered). Next the elector follows
    /// again, or stops ([`stopped`](Self::stopped)).
    fn step_down_done(&self, _term: &Term, _reason: StepDown) {}
    /// The replica sits out until `until` (after a yield, or a term it lost) and does not
    /// contend before; `None` once that is over.
    fn sitting_out(&self, _until: Option<Instant>) {}
    /// The leader received a handover request (before it checks it).
    fn handover_requested(&self, _request: &HandoverRequest) {}
    /// The leader dropped a handover request asked of another term (one that has ended).
    fn handover_dropped(&self, _request: &HandoverRequest) {}
    /// The leader refused a handover request, for `reason` (one line).
    fn handover_refused(&self, _request: &HandoverRequest, _reason: &str) {}
    /// The elector has finished.
    fn stopped(&self) {}
}

/// No events: for callers that only need the return value of [`super::run`].
pub struct NoEvents;

impl ElectionEvents for NoEvents {}

/// How an acquire attempt ended: the `result` label of `leaderd_acquire_attempts_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AcquireResult {
    /// A term began.
    Acquired,
    /// Someone else holds the lease (or it is quarantined or reserved).
    Held,
    /// Redis failed.
    Error,
    /// Granted, but the reply came after the grant's validity: not a term, released.
    Expired,
}

impl AcquireResult {
    /// Every result, in the order the metrics list them.
    pub const ALL: [AcquireResult; 4] = [
        AcquireResult::Acquired,
        AcquireResult::Held,
        AcquireResult::Error,
        AcquireResult::Expired,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AcquireResult::Acquired => "acquired",
            AcquireResult::Held => "held",
            AcquireResult::Error => "error",
            AcquireResult::Expired => "expired",
        }
    }
}

/// How a renew ended: the `result` label of `leaderd_renewals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RenewResult {
    /// The validity moved forward.
    Ok,
    /// The lease is no longer ours.
    Lost,
    /// Redis failed; retried until the renew deadline.
    Error,
}

impl RenewResult {
    /// Every result, in the order the metrics list them.
    pub const ALL: [RenewResult; 3] = [RenewResult::Ok, RenewResult::Lost, RenewResult::Error];

    /// The result of a renew's outcome.
    pub fn of(outcome: &Result<(), LeaseError>) -> Self {
        match outcome {
            Ok(()) => RenewResult::Ok,
            Err(LeaseError::Lost) => RenewResult::Lost,
            Err(_) => RenewResult::Error,
        }
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RenewResult::Ok => "ok",
            RenewResult::Lost => "lost",
            RenewResult::Error => "error",
        }
    }
}
