//! The election state machine: contend as a follower, renew as a leader, step down in time,
//! and publish every change on the state channel.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::lease::{jittered, Acquire, Holder, Lease, LeaseError, Observed, Roster, Term};
use crate::lease::{HandoverRequest, Reservation};

mod began;
mod events;
mod handover;
mod view;
pub use began::Began;
use began::Origin;
pub use events::{AcquireResult, ElectionEvents, NoEvents, RenewResult};
#[cfg(feature = "daemon")]
pub(crate) use handover::target as handover_target;
use handover::Successor;
pub use view::TermView;

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

/// Contends until a term is won (`Some`) or shutdown (`None`). Before `sit_out_until` and
/// while unhealthy it only observes. While a live leader holds the lease and the release
/// subscription is confirmed it sends nothing: it wakes at an announcement, a heartbeat's
/// read of the lease (`inputs.candidates`) or the observed expiry (see [`next_attempt`]).
async fn follow<L: Lease, E: ElectionEvents>(
    lease: &L,
    policy: &Policy,
    inputs: &mut Inputs,
    releases: &mut crate::lease::ReleaseWatch,
    reporter: &E,
    mut sit_out_until: Option<Instant>,
) -> Option<Term> {
    let t = policy.timing;
    let me = lease.spec().holder.as_str();
    // Subscribed before the first read, so that the subscription's wake-up is no news; and
    // what was published or read while we led (our own term's messages) is none either.
    if !releases.is_confirmed() {
        releases.confirmed_within(t.command_timeout).await;
    }
    releases.mark_seen();
    inputs.candidates.mark_unchanged();
    let mut origin = Origin::default();
    loop {
        if inputs.shutdown.is_cancelled() {
            return None;
        }
        if sit_out_until.is_some_and(|until| Instant::now() >= until) {
            sit_out_until = None;
            reporter.sitting_out(None);
        }
        let contend = sit_out_until.is_none() && *inputs.healthy.borrow();
        let sent = Instant::now();
        let outcome = if contend {
            lease.try_acquire(t.command_timeout).await
        } else {
            lease.observe(t.command_timeout).await.map(Acquire::Denied)
        };
        reporter.attempted();
        let mut sight = match outcome {
            Ok(Acquire::Acquired(term)) if term.is_valid() => {
                reporter.acquire_result(AcquireResult::Acquired);
                reporter.began(&term, origin.began);
                return Some(term);
            }
            Ok(Acquire::Acquired(term)) => {
                undo_expired_grant(lease, t.command_timeout, reporter, &term).await;
                Sight::unknown(Instant::now() + jittered(t.retry_period, t.jitter), origin)
            }
            Ok(Acquire::Denied(seen)) => {
                if contend {
                    reporter.acquire_result(AcquireResult::Held);
                }
                reporter.observed(&seen);
                if disowned(lease, held_by(&seen), me, t.command_timeout).await {
                    continue;
                }
                Sight::read(seen, sent, jittered(t.retry_period, t.jitter), origin, me)
            }
            Err(err) => {
                if contend {
                    reporter.acquire_result(AcquireResult::Error);
                }
                reporter.redis_failed(&err);
                // Redis cannot be reached: poll every retry_period with jitter
                // (docs/protocol.md#wake-ups).
                Sight::unknown(Instant::now() + jittered(t.retry_period, t.jitter), origin)
            }
        };
        loop {
            let best = is_best_successor(&inputs.candidates.borrow(), &sight, me);
            let quiet = releases.is_confirmed();
            let mut until = next_attempt(&sight, me, contend, quiet, best, &t);
            if let Some(end) = sit_out_until {
                until = until.min(end);
            }
            // A quiet wait still shows the loop alive (`/healthz`) every retry_period.
            let check_in = Instant::now() + t.retry_period;
            tokio::select! {
                _ = tokio::time::sleep_until(until.min(check_in)) => {
                    if Instant::now() >= until {
                        break;
                    }
                    reporter.attempted();
                }
                // A message only wakes: what it says is read from the lease (README,
                // "Announcements"). The watch holds one change however many arrived, and
                // the read is awaited here, so a flood costs one read in flight.
                _ = releases.changed() => {
                    let sent = Instant::now();
                    let seen = match lease.observe(t.command_timeout).await {
                        Ok(seen) => seen,
                        Err(err) => {
                            reporter.redis_failed(&err);
                            continue;
                        }
                    };
                    if disowned(lease, held_by(&seen), me, t.command_timeout).await {
                        break;
                    }
                    let hold_off = if best { Duration::ZERO } else { t.retry_period / 2 };
                    if sight.take_read((seen, sent), me, contend, hold_off, reporter) == Next::Attempt {
                        break;
                    }
                }
                Some(read) = roster_lease(&mut inputs.candidates) => {
                    if disowned(lease, held_by(&read.0), me, t.command_timeout).await {
                        break;
                    }
                    let hold_off = if best { Duration::ZERO } else { t.retry_period / 2 };
                    if sight.take_read(read, me, contend, hold_off, reporter) == Next::Attempt {
                        break;
                    }
                }
                _ = health_change(&mut inputs.healthy) => break,
                Some(_) = inputs.yields.recv() => {
                    // Nothing to step down from: a follower asked to yield sits out a lease
                    // as a yielding leader does (so that it can be kept from leading).
                    let until = Instant::now() + t.lease_duration;
                    sit_out_until = Some(until);
                    reporter.sitting_out(sit_out_until);
                    break;
                }
                _ = inputs.shutdown.cancelled() => return None,
            }
        }
        origin = sight.origin;
    }
}

/// Whether the lease is seen held by this replica, which leads nothing, and releasing the
/// grants it may hold without knowing it ([`Lease::release_strays`]) freed the lease.
async fn disowned<L: Lease>(lease: &L, holder: Option<&str>, me: &str, budget: Duration) -> bool {
    holder == Some(me) && lease.release_strays(budget).await > 0
}

fn held_by(seen: &Observed) -> Option<&str> {
    seen.holder().map(|h| h.holder.as_str())
}

/// What a follower knows of the lease between two attempts.
#[derive(Debug, Clone)]
struct Sight {
    /// What holds the lease; `None` when unknown (Redis failed).
    seen: Option<Observed>,
    /// When that was true: the read's send (so `remaining` never overstates the lease).
    at: Instant,
    /// When to attempt again at the latest while polling.
    poll_at: Instant,
    /// How a term won now would begin.
    origin: Origin,
}

/// Whether the follower attempts at once or keeps waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Attempt,
    Wait,
}

impl Sight {
    fn unknown(poll_at: Instant, origin: Origin) -> Self {
        Sight {
            seen: None,
            at: Instant::now(),
            poll_at,
            origin,
        }
    }

    fn read(seen: Observed, sent: Instant, retry: Duration, origin: Origin, me: &str) -> Self {
        let mut sight = Sight {
            seen: Some(seen),
            at: sent,
            poll_at: Instant::now() + retry,
            origin,
        };
        sight.learn_origin(sent, me);
        sight
    }

    /// Updates how a term won now would begin from what was just learned at `at`.
    fn learn_origin(&mut self, at: Instant, me: &str) {
        if let Some(seen) = &self.seen {
            self.origin.learn(seen, at, self.expiry(), me);
        }
    }

    /// When the lease as seen expires in Redis; `None`: no TTL, or nothing known.
    fn expiry(&self) -> Option<Instant> {
        self.seen.as_ref()?.remaining().map(|left| self.at + left)
    }

    /// Whether a vacancy read at `sent` is the expiry of the lease seen (read from `hold_off`
    /// before it on), inside the `hold_off` after it that a follower that is not the best successor
    /// leaves to the best one: the wait for the expiry goes on (docs/protocol.md#wake-ups), as it
    /// would have without the read.
    fn held_off(&self, sent: Instant, hold_off: Duration) -> bool {
        let expiring = matches!(
            self.seen,
            Some(Observed::Held(_) | Observed::Quarantined { .. })
        );
        match self.expiry() {
            Some(expiry) if expiring && !hold_off.is_zero() => {
                sent + hold_off >= expiry
                    && Instant::now() <= expiry + Duration::from_millis(1) + hold_off
            }
            _ => false,
        }
    }

    /// What was seen, with `remaining` counted from now: what the follower publishes.
    fn now(&self) -> Option<Observed> {
        let mut seen = self.seen.clone()?;
        let gone = self.at.elapsed();
        match &mut seen {
            Observed::Held(Holder { remaining, .. })
            | Observed::Reserved { remaining, .. }
            | Observed::Quarantined { remaining, .. } => {
                *remaining = remaining.map(|r| r.saturating_sub(gone));
            }
            Observed::Vacant => {}
        }
        Some(seen)
    }

    fn learn<E: ElectionEvents>(&mut self, seen: Observed, at: Instant, me: &str, reporter: &E) {
        self.seen = Some(seen);
        self.at = at;
        self.learn_origin(at, me);
        if let Some(now) = self.now() {
            reporter.observed(&now);
        }
    }

    /// A heartbeat's read of the lease, sent at `sent`: news unless something newer is
    /// known already. A vacant lease, or one reserved for us, is worth an attempt at once,
    /// unless it is the expiry of the lease seen and this follower leaves `hold_off` after
    /// it to the best successor.
    fn take_read<E: ElectionEvents>(
        &mut self,
        (seen, sent): (Observed, Instant),
        me: &str,
        contend: bool,
        hold_off: Duration,
        reporter: &E,
    ) -> Next {
        if sent < self.at || (seen == Observed::Vacant && self.held_off(sent, hold_off)) {
            return Next::Wait;
        }
        let urgent = match &seen {
            Observed::Vacant => true,
            Observed::Reserved { for_identity, .. } => for_identity == me,
            _ => false,
        };
        self.learn(seen, sent, me, reporter);
        if urgent && contend {
            Next::Attempt
        } else {
            Next::Wait
        }
    }
}

/// The next lease a follower's heartbeat read, when a new one arrives (never, once nobody
/// sends rosters).
async fn roster_lease(rx: &mut watch::Receiver<Roster>) -> Option<(Observed, Instant)> {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
    rx.borrow_and_update().lease.clone()
}

/// How long a reserved release holds the lease for the successor: `min(retry_period, 1s)`.
pub(crate) fn handover_window(t: &Timing) -> Duration {
    t.retry_period.min(Duration::from_secs(1))
}

/// Whether this follower is the best successor of the leader it sees, as it last read the
/// candidates (true when it knows no candidates: nobody is preferred then).
fn is_best_successor(roster: &Roster, sight: &Sight, me: &str) -> bool {
    let leader = sight
        .seen
        .as_ref()
        .and_then(|s| s.holder())
        .map(|h| h.holder.as_str());
    roster
        .best_successor(leader)
        .is_none_or(|c| c.identity == me)
}

/// When a follower attempts next (docs/protocol.md#wake-ups):
/// - a live leader: at the observed expiry + 1 ms, `retry_period / 2` later when this
///   follower is not the best successor; polling (the jittered retry, never inside that
///   extra wait) only while the release subscription is not `quiet` (confirmed);
/// - a reservation for someone else: at its expiry + 1 ms (the `acquired` announcement
///   usually comes first); for us: at once;
/// - a quarantine (which may be undone without an announcement): the poll before its
///   expiry, else its expiry + 1 ms, `retry_period / 2` later when not the best successor
///   (so that the preferred replica begins the election's first term);
/// - vacant, unknown, or no TTL: the poll.
fn next_attempt(
    sight: &Sight,
    me: &str,
    contend: bool,
    quiet: bool,
    best: bool,
    t: &Timing,
) -> Instant {
    let one_ms = Duration::from_millis(1);
    let (Some(seen), Some(expiry)) = (&sight.seen, sight.expiry()) else {
        return sight.poll_at;
    };
    let extra = if best {
        Duration::ZERO
    } else {
        t.retry_period / 2
    };
    let wake = expiry + one_ms + extra;
    match seen {
        Observed::Vacant => sight.poll_at,
        Observed::Reserved { for_identity, .. } if for_identity == me && contend => sight.at,
        Observed::Reserved { .. } => expiry + one_ms,
        Observed::Quarantined { .. } if sight.poll_at < expiry => sight.poll_at,
        Observed::Quarantined { .. } => wake,
        Observed::Held(_) if !quiet && sight.poll_at < expiry => sight.poll_at,
        Observed::Held(_) => wake,
    }
}

/// A grant whose reply came after its validity was never a term: it is not published,
/// only counted, and released with its token so the lease is not held for nobody.
async fn undo_expired_grant<L: Lease, E: ElectionEvents>(
    lease: &L,
    budget: Duration,
    reporter: &E,
    term: &Term,
) {
    reporter.acquire_result(AcquireResult::Expired);
    reporter.acquired_too_late(term);
    if let Err(err) = lease.release(term, budget).await {
        reporter.redis_failed(&err);
    }
}

/// Why and how a term ends: the reason, the term as last renewed, the successor chosen for
/// a handover or preemption, and the handover request to answer once released.
struct Ending {
    reason: StepDown,
    term: Term,
    to: Option<String>,
    request: Option<HandoverRequest>,
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
async fn lead<L: Lease, W: LeaderWork, E: ElectionEvents>(
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
async fn step_down<L: Lease, W: LeaderWork, E: ElectionEvents>(
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

/// The next change of health; never, once nobody checks health any more.
async fn health_change(healthy: &mut watch::Receiver<bool>) {
    if healthy.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests;
