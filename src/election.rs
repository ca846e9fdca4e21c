//! The election state machine: contend as a follower, renew as a leader, step down in time,
//! and report every change to the caller's [`ElectionEvents`].
//!
//! - `types`: the public vocabulary ([`Policy`], [`Timing`], [`Inputs`], [`LeaderWork`],
//!   [`StepDown`], ...); `events`: what the elector reports ([`ElectionEvents`]);
//!   `began`: how a term began; `view`: the term as the work sees it ([`TermView`]).
//! - `follower`: contending and waiting; `leader`: renewing and stepping down;
//!   `handover`: handover requests, preemption and the successor of a release.
//! - [`run`] (here): the loop from one to the other.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::Lease;

mod began;
mod events;
mod follower;
mod handover;
mod leader;
mod types;
mod view;
pub use began::Began;
pub(crate) use began::Origin;
pub use events::{AcquireResult, ElectionEvents, NoEvents, RenewResult};
#[cfg(feature = "daemon")]
pub(crate) use handover::target as handover_target;
use handover::Successor;
pub(crate) use leader::handover_window;
pub use types::{
    AfterLoss, AfterWorkExit, Inputs, LeaderWork, NoWork, Policy, StepDown, Timing,
    WORK_STOPPED_LIMIT,
};
pub use view::TermView;

use follower::follow;
use leader::{lead, step_down};

/// Runs the election until shutdown (returns 0), a loss with `on_lost: exit` (returns 1),
/// or the work's exit with `on_exit: exit` (returns its code). The last state sent is
/// `Stopped`.
pub async fn run<L: Lease, W: LeaderWork, E: ElectionEvents>(
    lease: Arc<L>,
    policy: Policy,
    mut work: W,
    mut inputs: Inputs,
    events: E,
) -> i32 {
    let reporter = &events;
    let mut releases = lease.watch_releases();
    let mut sit_out_until: Option<Instant> = None;
    let code = loop {
        let term = match follow(
            &*lease,
            &policy,
            &mut inputs,
            &mut releases,
            reporter,
            sit_out_until,
        )
        .await
        {
            Some(term) => term,
            None => break 0,
        };
        let ending = lead(&*lease, &policy, &mut work, &mut inputs, reporter, term).await;
        let (reason, term) = (ending.reason, &ending.term);
        let hint = {
            let roster = inputs.candidates.borrow();
            let best = roster.best_successor(Some(lease.spec().holder.as_str()));
            best.map(|c| c.identity.clone())
        };
        let successor = match ending.to.clone() {
            Some(to) => Successor::Named(to, ending.request.clone()),
            None => Successor::Best { hint },
        };
        step_down(
            &*lease, &policy, &mut work, reporter, term, reason, successor,
        )
        .await;
        let sit_out = match reason {
            StepDown::Shutdown => break 0,
            // The reservation keeps this replica out while the target takes over; after a
            // handover it may be handed the lease back at once.
            StepDown::Handover | StepDown::Preempted => Duration::ZERO,
            StepDown::Yield => policy.timing.lease_duration,
            StepDown::Lost | StepDown::Deadline if policy.on_lost == AfterLoss::Exit => break 1,
            StepDown::WorkExit(code) if policy.on_work_exit == AfterWorkExit::Exit => break code,
            _ => policy.timing.retry_period,
        };
        sit_out_until = (!sit_out.is_zero()).then(|| Instant::now() + sit_out);
        if sit_out_until.is_some() {
            reporter.sitting_out(sit_out_until);
        }
    };
    reporter.stopped();
    code
}

#[cfg(test)]
mod tests;
