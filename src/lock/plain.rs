//! The plain lock: no fence, what rslock, redsync and Redisson's `RLock` offer (README,
//! "Library"). The fenced lock's string key (`<holder>:<token>` at the lease's `:lock` key,
//! [`crate::lease::LockKey`]), taken with `SET NX PX` alone and released without a message.

use std::time::Duration;

use crate::lease::{Acquire, Heartbeat, Lease, LeaseClient, LeaseError, LeaseSpec, LockKey};
use crate::lease::{Observed, ReleaseWatch, Reservation, Roster, Term};

/// A lease without a fence, for [`crate::Locker::plain`]: cheaper than the fenced lock (two
/// commands a lock and unlock on Valkey 9, four on Redis 7.0, as rslock), but a holder that
/// stalls past its TTL cannot be told apart from the next one by the resource it writes to:
/// use it where a rare overlap costs only duplicate work. [`Term::fence`] is 0.
///
/// Nothing is published when it is released: a waiting [`crate::Locker::lock`] tries again
/// every [`crate::WatchdogConfig::retry`], or when the holder's TTL runs out if sooner. The
/// key is the fenced lock's, so a plain and a fenced locker of one name exclude each other.
pub struct PlainLease {
    spec: LeaseSpec,
    lock: LockKey,
    endpoint: std::sync::Arc<crate::conn::Endpoint>,
}

impl PlainLease {
    /// The plain lock of `client`'s lease name, on its connection.
    pub fn new(client: LeaseClient) -> Self {
        let endpoint = client.shared_endpoint();
        PlainLease {
            lock: LockKey::new(client.spec(), client.keys(), endpoint.clone(), false),
            spec: client.spec().clone(),
            endpoint,
        }
    }
}

impl Lease for PlainLease {
    fn spec(&self) -> &LeaseSpec {
        &self.spec
    }

    fn default_budget(&self) -> Duration {
        self.spec.command_timeout
    }

    async fn try_acquire(&self, budget: Duration) -> Result<Acquire, LeaseError> {
        self.lock.try_acquire(self.lock.new_value(), budget).await
    }

    async fn renew(&self, term: &mut Term, budget: Duration) -> Result<(), LeaseError> {
        self.lock.renew(term, budget).await
    }

    /// Compare-and-delete; a plain lock has no successors, so `reservation` is ignored.
    async fn release_to(
        &self,
        term: &Term,
        _reservation: Option<Reservation<'_>>,
        budget: Duration,
    ) -> Result<bool, LeaseError> {
        self.lock.release(term, None, budget).await
    }

    async fn observe(&self, budget: Duration) -> Result<Observed, LeaseError> {
        self.lock.observe(budget).await
    }

    /// A plain lock keeps no candidates' registry: an empty roster.
    async fn heartbeat(
        &self,
        _beat: Heartbeat<'_>,
        _budget: Duration,
    ) -> Result<Roster, LeaseError> {
        Ok(Roster::default())
    }

    /// Nothing is published when a plain lock is released: a watch that never changes.
    fn watch_releases(&self) -> ReleaseWatch {
        ReleaseWatch::from_receiver(tokio::sync::watch::channel(0).1)
    }

    fn eviction_policies(
        &self,
    ) -> Vec<tokio::sync::watch::Receiver<Option<crate::eviction::EvictionPolicy>>> {
        vec![self.endpoint.eviction_policy()]
    }
}
