//! The one lease interface: what every backend (one Redis, Sentinel, Cluster, Redlock) does,
//! each operation within an explicit time budget.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{Acquire, Heartbeat, LeaseError, LeaseSpec, Observed, ReleaseWatch, Roster, Term};
use super::{Control, ControlWatch, HandoverRequest, Reservation};

/// A named lease that only its holder can extend or release, with fencing tokens.
///
/// Every operation takes a `budget`: the longest it may take, connecting included (Redlock
/// caps each node's share at its node timeout). [`Lease::default_budget`] is the budget to
/// use when the caller has none of its own.
pub trait Lease: Send + Sync + 'static {
    /// The spec the lease was made with.
    fn spec(&self) -> &LeaseSpec;

    /// The budget of one operation when the caller has none: the command timeout (the node
    /// timeout on Redlock).
    fn default_budget(&self) -> Duration;

    /// The same lease, used as a lock ([`crate::Locker`] calls it): a lock has no followers,
    /// so a backend may leave out what only an election needs (a [`crate::LeaseClient`]
    /// takes the lock's own key and commands: docs/protocol.md, "A lock's key"). Unchanged
    /// by default.
    fn for_lock(self) -> Self
    where
        Self: Sized,
    {
        self
    }

    /// One attempt to take the lease for a new term, answering what holds it otherwise.
    ///
    /// # Errors
    /// [`LeaseError::Unavailable`] (with the cause) or [`LeaseError::WrongType`].
    fn try_acquire(
        &self,
        budget: Duration,
    ) -> impl Future<Output = Result<Acquire, LeaseError>> + Send;

    /// Extends the term's lease by a full lease duration if it is still ours, and moves
    /// `term.valid_until` forward (counted from when this renew was sent).
    ///
    /// # Errors
    /// [`LeaseError::Lost`] when the lease is gone or another term's; `Unavailable` or
    /// `WrongType` otherwise. On error `term` is unchanged.
    fn renew(
        &self,
        term: &mut Term,
        budget: Duration,
    ) -> impl Future<Output = Result<(), LeaseError>> + Send;

    /// Deletes the lease if it is still this term's, and publishes the release so waiting
    /// candidates contend at once. Returns false when it was no longer ours.
    ///
    /// # Errors
    /// `Unavailable` or `WrongType`.
    fn release(
        &self,
        term: &Term,
        budget: Duration,
    ) -> impl Future<Output = Result<bool, LeaseError>> + Send {
        self.release_to(term, None, budget)
    }

    /// [`Lease::release`], reserving the lease for a successor when one is given: in the same step
    /// the lease becomes a placeholder only `successor` may acquire for `window`, and the release
    /// is published with `reserved_for` (docs/protocol.md#handover-window), so exactly one
    /// candidate contends instead of all of them. The successor is told first, on
    /// [`super::LeaseKeys::successor_channel`]; the release channel gets the release once, right
    /// before the successor's `acquired`, or from here within `min(window / 4, 20 ms)` if the
    /// successor has not taken the lease by then (so this call may take that long).
    ///
    /// # Errors
    /// `Unavailable` or `WrongType`.
    fn release_to(
        &self,
        term: &Term,
        reservation: Option<Reservation<'_>>,
        budget: Duration,
    ) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Releases (compare-and-delete, announced) the grants this client may hold without
    /// knowing it: acquires whose reply never came and terms whose release failed. A Redis
    /// that was frozen runs what it was sent when it resumes, so such a grant can appear
    /// (or be extended) later, holding the lease for nobody. Call it when the lease is seen
    /// held under this replica's own identity while it leads nothing. Returns how many it
    /// released; none by default.
    fn release_strays(&self, budget: Duration) -> impl Future<Output = usize> + Send {
        let _ = budget;
        std::future::ready(0)
    }

    /// How many messages on the election's channels this client's listeners dropped unread:
    /// over 1 KiB, or with a field outside what the keys can hold (README, "Announcements").
    /// None by default.
    fn messages_dropped(&self) -> u64 {
        0
    }

    /// What holds the lease, without contending.
    ///
    /// # Errors
    /// `Unavailable` or `WrongType`.
    fn observe(
        &self,
        budget: Duration,
    ) -> impl Future<Output = Result<Observed, LeaseError>> + Send;

    /// The `maxmemory-policy` of each server the lease uses, read at every (re)connect: a
    /// policy other than `noeviction` can evict the lease (and, `allkeys-*`, the fencing
    /// counter). Empty by default.
    fn eviction_policies(
        &self,
    ) -> Vec<tokio::sync::watch::Receiver<Option<crate::eviction::EvictionPolicy>>> {
        Vec::new()
    }
    /// The candidates' heartbeat: writes, refreshes or removes this replica's entry (or only
    /// reads) and returns the live candidates. On Redlock it counts on a majority of nodes.
    ///
    /// # Errors
    /// `Unavailable` or `WrongType`.
    fn heartbeat(
        &self,
        beat: Heartbeat<'_>,
        budget: Duration,
    ) -> impl Future<Output = Result<Roster, LeaseError>> + Send;

    /// The handover request key: write a request, read the pending one, or answer it (see
    /// [`Control`]). Returns the pending request (for `Read`, and for a `Request` refused
    /// because another one is pending). On Redlock a request counts on a majority of nodes.
    ///
    /// # Errors
    /// `Unavailable` or `WrongType`.
    fn control(
        &self,
        op: Control<'_>,
        budget: Duration,
    ) -> impl Future<Output = Result<Option<HandoverRequest>, LeaseError>> + Send {
        let _ = (op, budget);
        std::future::ready(Ok(None))
    }

    /// The control channel (handover requests and refusals), subscribed in the background
    /// until the watch is dropped. Never changes by default.
    fn watch_control(&self) -> ControlWatch {
        ControlWatch::never()
    }

    /// A watch that changes whenever a release of the lease is published (and at every loss
    /// of the subscription and resubscription, since a release may have been missed
    /// meanwhile). Its subscription is PINGed every [`LeaseSpec::with_release_check`] period;
    /// [`ReleaseWatch::is_confirmed`] says whether it can be relied on.
    fn watch_releases(&self) -> ReleaseWatch;

    /// Waits until the lease is ours or `deadline` passes. Between attempts it sleeps until
    /// the holder's lease runs out in Redis, or a jittered `retry` if sooner, and wakes at
    /// once when a release is published.
    ///
    /// # Errors
    /// [`LeaseError::Timeout`] (with what was seen last) when the deadline passes;
    /// `WrongType` at once; Redis errors are retried until the deadline.
    fn acquire(
        &self,
        deadline: Instant,
        retry: Duration,
    ) -> impl Future<Output = Result<Term, LeaseError>> + Send
    where
        Self: Sized,
    {
        super::wait::wait_for_lease(self, deadline, retry)
    }
}
