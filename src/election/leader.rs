//! The leader: renews every `retry_period` until it must step down, then stops claiming,
//! stops the work and releases, in that order.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::handover::{self, Successor};
use super::types::health_change;
use super::WORK_STOPPED_LIMIT;
use super::{ElectionEvents, Inputs, LeaderWork, Policy, RenewResult, StepDown, TermView, Timing};
use crate::lease::{HandoverRequest, Lease, LeaseError, Reservation, Term};

/// How long a reserved release holds the lease for the successor: `min(retry_period, 1s)`.
pub(crate) fn handover_window(t: &Timing) -> Duration {
    t.retry_period.min(Duration::from_secs(1))
}

/// Why and how a term ends: the reason, the term as last renewed, the successor chosen for
/// a handover or preemption, and the handover request to answer once released.
pub(super) struct Ending {
    pub(super) reason: StepDown,
    pub(super) term: Term,
    pub(super) to: Option<String>,
    pub(super) request: Option<HandoverRequest>,
}

impl Ending {
    fn new(reason: StepDown, term: Term) -> Self {
        Ending {
            reason,
            term,
            to: None,
            request: None,
        }
    }
}

/// Holds the term, renewing every `retry_period`, until it must step down; returns why, with
/// the term as last renewed. Listens for handover requests meanwhile (and, with `preempt`,
/// for a better candidate).
pub(super) async fn lead<L: Lease, W: LeaderWork, E: ElectionEvents>(
    lease: &L,
    policy: &Policy,
    work: &mut W,
    inputs: &mut Inputs,
    reporter: &E,
    mut term: Term,
) -> Ending {
    let t = policy.timing;
    reporter.acquired(&term);
    let mut control = lease.watch_control();
    let mut handled = None;
    work.start(&TermView::from(&term)).await;
    let mut next_renew = term.last_sent + t.retry_period;
    loop {
        let deadline = term.last_sent + t.renew_deadline;
        if Instant::now() >= deadline {
            return Ending::new(StepDown::Deadline, term);
        }
        tokio::select! {
            biased;
            _ = inputs.shutdown.cancelled() => return Ending::new(StepDown::Shutdown, term),
            _ = tokio::time::sleep_until(next_renew.min(deadline)) => {}
            Some(()) = inputs.yields.recv() => return Ending::new(StepDown::Yield, term),
            _ = unhealthy(&mut inputs.healthy) => return Ending::new(StepDown::Yield, term),
            code = work.exited() => return Ending::new(StepDown::WorkExit(code), term),
            msg = control.changed() => {
                let asked = handover::on_control(lease, t.command_timeout, reporter, (msg, term.fence), &mut handled);
                if let Some((request, to)) = asked.await.filter(|_| term.is_valid()) {
                    let mut ending = Ending::new(StepDown::Handover, term);
                    (ending.to, ending.request) = (Some(to), Some(request));
                    return ending;
                }
                continue;
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Ending::new(StepDown::Deadline, term);
        }
        let budget = t.command_timeout.min(deadline - now);
        let outcome = lease.renew(&mut term, budget).await;
        reporter.attempted();
        reporter.renew_result(RenewResult::of(&outcome), now.elapsed());
        if let Err(
            err @ (LeaseError::Unavailable(_)
            | LeaseError::WrongType { .. }
            | LeaseError::Protocol(_)),
        ) = &outcome
        {
            reporter.redis_failed(err);
        }
        match outcome {
            Ok(()) => {
                next_renew = term.last_sent + t.retry_period;
                if term.is_valid() {
                    reporter.renewed(&term);
                    work.extend(&TermView::from(&term)).await;
                }
                if policy.preempt {
                    if let Some(to) = handover::preempt(lease, &t, &inputs.candidates).await {
                        let mut ending = Ending::new(StepDown::Preempted, term);
                        ending.to = Some(to);
                        return ending;
                    }
                }
            }
            Err(LeaseError::Lost) => return Ending::new(StepDown::Lost, term),
            Err(_) => {
                next_renew = Instant::now() + (t.retry_period / 4).max(Duration::from_millis(10))
            }
        }
    }
}

/// Stops claiming, stops the work, then releases: in that order, so that nothing guarded by
/// the lease outlives the claim, and the release is never sent before `stepped_down` is logged.
/// A release on purpose is reserved for the successor (when there is one) for the
/// handover window.
pub(super) async fn step_down<L: Lease, W: LeaderWork, E: ElectionEvents>(
    lease: &L,
    policy: &Policy,
    work: &mut W,
    reporter: &E,
    term: &Term,
    reason: StepDown,
    successor: Successor,
) {
    reporter.stepped_down(term, reason);
    let release = match reason {
        StepDown::Lost => false,
        StepDown::Shutdown => policy.release_on_shutdown,
        _ => true,
    };
    // The candidates are read again while the work stops (a read claims nothing).
    let budget = policy.timing.command_timeout;
    let best = successor.choose(lease, budget, release);
    let ((), (successor, request)) = tokio::join!(work.stop(), best);
    if tokio::time::timeout(WORK_STOPPED_LIMIT, reporter.work_stopped(term, reason))
        .await
        .is_err()
    {
        tracing::warn!(
            fence = term.fence,
            "work_stopped took longer than {WORK_STOPPED_LIMIT:?}; releasing anyway"
        );
    }
    if let Some(request) = &request {
        // Done before the release: the successor, once leading, must not find the request
        // and refuse it as a handover to itself.
        handover::accepted(lease, budget, reporter, request).await;
    }
    if release {
        let reservation = successor.as_deref().map(|successor| Reservation {
            successor,
            window: handover_window(&policy.timing),
        });
        match lease.release_to(term, reservation, budget).await {
            Ok(true) => reporter.released(term),
            Ok(false) => {} // no longer ours: nothing was released
            Err(err) => reporter.redis_failed(&err),
        }
    }
    reporter.step_down_done(term, reason);
}

async fn unhealthy(healthy: &mut watch::Receiver<bool>) {
    while *healthy.borrow_and_update() {
        health_change(healthy).await;
    }
}
