//! The follower: contends until a term is won, waking at an announcement, a heartbeat's read
//! of the lease or the observed expiry, and sending nothing while a live leader holds it.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::began::Origin;
use super::types::health_change;
use super::{AcquireResult, ElectionEvents, Inputs, Policy, Timing};
use crate::lease::{jittered, Acquire, Holder, Lease, Observed, Roster, Term};

/// Contends until a term is won (`Some`) or shutdown (`None`). Before `sit_out_until` and
/// while unhealthy it only observes. While a live leader holds the lease and the release
/// subscription is confirmed it sends nothing: it wakes at an announcement, a heartbeat's
/// read of the lease (`inputs.candidates`) or the observed expiry (see [`next_attempt`]).
pub(super) async fn follow<L: Lease, E: ElectionEvents>(
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
