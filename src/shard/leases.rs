//! What a [`super::ShardElector`] needs of its shards' leases (README, "Shards"): take one
//! shard, release one (reserved for a successor), renew every owned shard in one call (per
//! node in Redlock), read every shard; beside the election's registry and release channel of
//! [`Lease`]. [`LeaseClient`] (one Redis, Sentinel, Cluster) and [`RedlockClient`] have it.

use std::future::Future;
use std::time::Duration;

use super::{ShardRenewal, ShardTerm};
use crate::backend::Backend;
use crate::lease::{Acquire, Lease, LeaseClient, LeaseError, Observed, Reservation};
use crate::redlock::RedlockClient;

/// The leases of a sharded election's shards, on the Redis of a backend. Sealed: implemented
/// by [`LeaseClient`], [`RedlockClient`] and [`crate::Backend`].
pub trait ShardLeases: Lease + sealed::Registry {
    /// One attempt to take shard `shard` for a new term ([`Lease::try_acquire`] of that
    /// shard's lease).
    ///
    /// # Errors
    /// `Unavailable` or `WrongType`.
    fn try_acquire_shard(
        &self,
        shard: u32,
        budget: Duration,
    ) -> impl Future<Output = Result<Acquire, LeaseError>> + Send;

    /// Releases `held` if it is still its term's, reserved for a successor when one is given
    /// ([`Lease::release_to`] of that shard's lease). False when it was no longer ours.
    ///
    /// # Errors
    /// `Unavailable` or `WrongType`.
    fn release_shard(
        &self,
        held: &ShardTerm,
        reservation: Option<Reservation<'_>>,
        budget: Duration,
    ) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Renews every shard in `owned` with one call (per node in Redlock), in the order of
    /// `owned`; each renewed shard's validity moves to this renew's send.
    ///
    /// # Errors
    /// `Unavailable` (no validity moved), `WrongType` or `Protocol`.
    fn renew_shards(
        &self,
        owned: &mut [ShardTerm],
        budget: Duration,
    ) -> impl Future<Output = Result<Vec<ShardRenewal>, LeaseError>> + Send;

    /// Shards `0..count` as they are (as a majority sees each, in Redlock).
    ///
    /// # Errors
    /// `Unavailable` or `Protocol`.
    fn read_shards(
        &self,
        count: u32,
        budget: Duration,
    ) -> impl Future<Output = Result<Vec<Observed>, LeaseError>> + Send;
}

pub(crate) mod sealed {
    use std::future::Future;
    use std::time::Duration;

    use crate::lease::LeaseError;

    /// The registry's index, read by the elector only.
    #[allow(unreachable_pub)] // sealed: nameable nowhere outside the crate
    pub trait Registry {
        /// The identities whose registry entry was refreshed at or after `since_ms`.
        fn candidates_seen_since(
            &self,
            since_ms: u64,
            budget: Duration,
        ) -> impl Future<Output = Result<Vec<String>, LeaseError>> + Send;
    }
}

/// [`ShardLeases`] for a client with the inherent `shard`, `renew_shards`, `read_shards` and
/// `candidates_seen_since` of its mode.
macro_rules! shard_leases {
    ($client:ty) => {
        impl sealed::Registry for $client {
            async fn candidates_seen_since(
                &self,
                since_ms: u64,
                budget: Duration,
            ) -> Result<Vec<String>, LeaseError> {
                <$client>::candidates_seen_since(self, since_ms, budget).await
            }
        }

        impl ShardLeases for $client {
            async fn try_acquire_shard(
                &self,
                shard: u32,
                budget: Duration,
            ) -> Result<Acquire, LeaseError> {
                self.shard(shard).try_acquire(budget).await
            }

            async fn release_shard(
                &self,
                held: &ShardTerm,
                reservation: Option<Reservation<'_>>,
                budget: Duration,
            ) -> Result<bool, LeaseError> {
                let shard = self.shard(held.shard);
                shard.release_to(&held.term, reservation, budget).await
            }

            async fn renew_shards(
                &self,
                owned: &mut [ShardTerm],
                budget: Duration,
            ) -> Result<Vec<ShardRenewal>, LeaseError> {
                <$client>::renew_shards(self, owned, budget).await
            }

            async fn read_shards(
                &self,
                count: u32,
                budget: Duration,
            ) -> Result<Vec<Observed>, LeaseError> {
                <$client>::read_shards(self, count, budget).await
            }
        }
    };
}

shard_leases!(LeaseClient);
shard_leases!(RedlockClient);

impl sealed::Registry for Backend {
    async fn candidates_seen_since(
        &self,
        since_ms: u64,
        budget: Duration,
    ) -> Result<Vec<String>, LeaseError> {
        match self {
            Backend::Redis(l) => l.candidates_seen_since(since_ms, budget).await,
            Backend::Redlock(l) => l.candidates_seen_since(since_ms, budget).await,
        }
    }
}

impl ShardLeases for Backend {
    async fn try_acquire_shard(&self, shard: u32, budget: Duration) -> Result<Acquire, LeaseError> {
        match self {
            Backend::Redis(l) => l.try_acquire_shard(shard, budget).await,
            Backend::Redlock(l) => l.try_acquire_shard(shard, budget).await,
        }
    }

    async fn release_shard(
        &self,
        held: &ShardTerm,
        reservation: Option<Reservation<'_>>,
        budget: Duration,
    ) -> Result<bool, LeaseError> {
        match self {
            Backend::Redis(l) => l.release_shard(held, reservation, budget).await,
            Backend::Redlock(l) => l.release_shard(held, reservation, budget).await,
        }
    }

    async fn renew_shards(
        &self,
        owned: &mut [ShardTerm],
        budget: Duration,
    ) -> Result<Vec<ShardRenewal>, LeaseError> {
        match self {
            Backend::Redis(l) => ShardLeases::renew_shards(l, owned, budget).await,
            Backend::Redlock(l) => ShardLeases::renew_shards(l, owned, budget).await,
        }
    }

    async fn read_shards(&self, count: u32, budget: Duration) -> Result<Vec<Observed>, LeaseError> {
        match self {
            Backend::Redis(l) => ShardLeases::read_shards(l, count, budget).await,
            Backend::Redlock(l) => ShardLeases::read_shards(l, count, budget).await,
        }
    }
}
