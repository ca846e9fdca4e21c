//! The configured backend: one type for "the lease of this [`RedisSpec`]", whichever mode
//! it names, so that callers dispatch nowhere.

use std::time::Duration;

use crate::connector::{ConnectError, RedisSpec, Topology};
use crate::lease::{
    Acquire, Control, ControlWatch, HandoverRequest, Heartbeat, Lease, LeaseClient, LeaseError,
    LeaseSpec, Observed, ReleaseWatch, Reservation, Roster, Term,
};
use crate::redlock::RedlockClient;

/// The lease on the Redis a [`RedisSpec`] names: one server, the Sentinel master or a
/// cluster through [`LeaseClient`], or independent masters through [`RedlockClient`].
pub enum Backend {
    /// Mode single, sentinel or cluster.
    Redis(LeaseClient),
    /// Mode redlock.
    Redlock(RedlockClient),
}

impl Backend {
    /// The backend for `lease` on the Redis of `redis`. Nothing is sent until the first
    /// operation.
    ///
    /// # Errors
    /// A [`ConnectError`] naming the setting that is wrong (a URL, the number of Redlock
    /// nodes, a TLS file).
    pub fn connect(redis: &RedisSpec, lease: LeaseSpec) -> Result<Backend, ConnectError> {
        match &redis.topology {
            Topology::Redlock { urls } => {
                if redis.min_replicas_ack > 0 {
                    return Err(ConnectError::ReplicasWithRedlock(redis.min_replicas_ack));
                }
                let clients = urls
                    .iter()
                    .enumerate()
                    .map(|(i, url)| redis.client_for_url(url, &format!("redis.urls[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?;
                RedlockClient::with_clients(clients, lease).map(Backend::Redlock)
            }
            _ => {
                let timeouts = (lease.connect_timeout, lease.command_timeout);
                let connector = redis.connector(timeouts)?;
                Ok(Backend::Redis(LeaseClient::with_connector(
                    connector,
                    lease,
                    redis.min_replicas_ack,
                )))
            }
        }
    }
}

impl Backend {
    /// The same lease over the same connections, with listeners and registry state of its
    /// own: a sharded election's elector and its readers each have one.
    #[cfg_attr(not(feature = "daemon"), allow(dead_code))]
    pub(crate) fn twin(&self) -> Backend {
        match self {
            Backend::Redis(l) => Backend::Redis(l.for_lease(l.spec().clone())),
            Backend::Redlock(l) => Backend::Redlock(l.twin()),
        }
    }

    /// What each server offers, as last read at a connect (one per Redlock node).
    #[cfg_attr(not(feature = "daemon"), allow(dead_code))] // read by check-config --probe
    pub(crate) fn server_infos(&self) -> Vec<crate::server_info::ServerInfoWatch> {
        match self {
            Backend::Redis(l) => l.server_infos(),
            Backend::Redlock(l) => l.server_infos(),
        }
    }
}

impl Lease for Backend {
    fn spec(&self) -> &LeaseSpec {
        match self {
            Backend::Redis(l) => l.spec(),
            Backend::Redlock(l) => l.spec(),
        }
    }

    fn default_budget(&self) -> Duration {
        match self {
            Backend::Redis(l) => l.default_budget(),
            Backend::Redlock(l) => l.default_budget(),
        }
    }

    fn for_lock(self) -> Self {
        match self {
            Backend::Redis(l) => Backend::Redis(l.for_lock()),
            Backend::Redlock(l) => Backend::Redlock(l.for_lock()),
        }
    }

    async fn try_acquire(&self, budget: Duration) -> Result<Acquire, LeaseError> {
        match self {
            Backend::Redis(l) => l.try_acquire(budget).await,
            Backend::Redlock(l) => l.try_acquire(budget).await,
        }
    }

    async fn renew(&self, term: &mut Term, budget: Duration) -> Result<(), LeaseError> {
        match self {
            Backend::Redis(l) => l.renew(term, budget).await,
            Backend::Redlock(l) => l.renew(term, budget).await,
        }
    }

    async fn release_to(
        &self,
        term: &Term,
        reservation: Option<Reservation<'_>>,
        budget: Duration,
    ) -> Result<bool, LeaseError> {
        match self {
            Backend::Redis(l) => l.release_to(term, reservation, budget).await,
            Backend::Redlock(l) => l.release_to(term, reservation, budget).await,
        }
    }

    async fn control(
        &self,
        op: Control<'_>,
        budget: Duration,
    ) -> Result<Option<HandoverRequest>, LeaseError> {
        match self {
            Backend::Redis(l) => l.control(op, budget).await,
            Backend::Redlock(l) => l.control(op, budget).await,
        }
    }

    fn watch_control(&self) -> ControlWatch {
        match self {
            Backend::Redis(l) => l.watch_control(),
            Backend::Redlock(l) => l.watch_control(),
        }
    }

    fn messages_dropped(&self) -> u64 {
        match self {
            Backend::Redis(l) => l.messages_dropped(),
            Backend::Redlock(l) => l.messages_dropped(),
        }
    }

    async fn release_strays(&self, budget: Duration) -> usize {
        match self {
            Backend::Redis(l) => l.release_strays(budget).await,
            Backend::Redlock(l) => l.release_strays(budget).await,
        }
    }
    async fn observe(&self, budget: Duration) -> Result<Observed, LeaseError> {
        match self {
            Backend::Redis(l) => l.observe(budget).await,
            Backend::Redlock(l) => l.observe(budget).await,
        }
    }

    async fn heartbeat(&self, beat: Heartbeat<'_>, budget: Duration) -> Result<Roster, LeaseError> {
        match self {
            Backend::Redis(l) => l.heartbeat(beat, budget).await,
            Backend::Redlock(l) => l.heartbeat(beat, budget).await,
        }
    }

    fn watch_releases(&self) -> ReleaseWatch {
        match self {
            Backend::Redis(l) => l.watch_releases(),
            Backend::Redlock(l) => l.watch_releases(),
        }
    }

    fn eviction_policies(
        &self,
    ) -> Vec<tokio::sync::watch::Receiver<Option<crate::eviction::EvictionPolicy>>> {
        match self {
            Backend::Redis(l) => l.eviction_policies(),
            Backend::Redlock(l) => l.eviction_policies(),
        }
    }
}
