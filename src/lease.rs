//! The lease primitive: one named lease in Redis that only its holder can extend or release,
//! with fencing tokens, held through the three Lua scripts in `lua/`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use leaderd::{Acquire, Lease, LeaseClient, LeaseSpec};
//!
//! let spec = LeaseSpec::new("orders-scheduler", "pod-a", Duration::from_secs(15));
//! let lease = LeaseClient::connect("redis://127.0.0.1:6379/0", spec)?;
//! let budget = lease.default_budget();
//! match lease.try_acquire(budget).await? {
//!     Acquire::Acquired(mut term) => {
//!         // Work guarded by term.fence, only while term.is_valid().
//!         lease.renew(&mut term, budget).await?;
//!         lease.release(&term, budget).await?;
//!     }
//!     Acquire::Denied(seen) => println!("not ours: {seen}"),
//! }
//! # Ok(()) }
//! ```

mod acl;
mod acquire;
mod announcement;
mod candidates;
mod control;
mod foreign;
mod interface;
mod lock_key;
mod native;
mod ops;
mod pending;
mod registry;
mod release_watch;
mod reply;
mod shard;
mod strays;
mod types;
mod wait;
mod watch;

use redis::{Client, Script};

use crate::conn::{Endpoint, RedisFailure};
use crate::connector::{ConnectError, Connector};
use crate::lease::acl::LeaseScript;
use crate::server_info::ServerInfoWatch;

pub use announcement::Announcement;
pub use candidates::{Candidate, Heartbeat, Registration, Roster, MAX_CANDIDATES};
pub use control::{Control, ControlMessage, ControlWatch, HandoverRequest};
pub use interface::Lease;
pub(crate) use lock_key::LockKey;
pub use shard::{ShardRenewal, ShardTerm};
pub(crate) use types::{new_token, push_token, unix_ms};
pub use types::{Acquire, Holder, LeaseError, LeaseKeys, LeaseSpec, Observed, Reservation, Term};
pub(crate) use wait::jittered;
pub use watch::ReleaseWatch;

/// The lease's Lua scripts (each hashed once, for every client).
struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
    announce: Script,
    release_announce: Script,
    candidate: Script,
    handover: Script,
}

static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    acquire: Script::new(include_str!("../lua/acquire.lua")),
    renew: Script::new(include_str!("../lua/renew.lua")),
    release: Script::new(include_str!("../lua/release.lua")),
    announce: Script::new(include_str!("../lua/announce.lua")),
    release_announce: Script::new(include_str!("../lua/release_announce.lua")),
    candidate: Script::new(include_str!("../lua/candidate.lua")),
    handover: Script::new(include_str!("../lua/handover.lua")),
});

/// Client for one lease on one Redis endpoint.
pub struct LeaseClient {
    spec: LeaseSpec,
    keys: LeaseKeys,
    endpoint: std::sync::Arc<Endpoint>,
    scripts: &'static Scripts,
    /// Poked when a renew sees a pending handover request (see [`ControlWatch`]).
    control_poke: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
    /// Grants this client may hold without knowing it (see [`Lease::release_strays`]).
    strays: std::sync::Arc<strays::Strays>,
    /// A lock's client ([`Lease::for_lock`]): the lock's own key and commands ([`LockKey`])
    /// instead of the election's.
    lock: Option<Box<LockKey>>,
    /// Messages its listeners dropped (see [`Lease::messages_dropped`]).
    dropped: announcement::Dropped,
    /// The candidates as last read, with the registry's version then, and this client's
    /// instance id in its entry.
    registry: candidates::Cache,
    /// The shard this client's lease is ([`LeaseClient::shard`]), `None` for the election's
    /// one lease or a lock.
    shard: Option<shard::ShardOf>,
}

impl LeaseClient {
    /// A client for the lease `spec` on the Redis at `url` (`redis://`, `rediss://` or
    /// `unix://`). Nothing is sent until the first operation.
    ///
    /// # Errors
    /// [`ConnectError::BadUrl`] when the URL cannot be parsed.
    pub fn connect(url: &str, spec: LeaseSpec) -> Result<Self, ConnectError> {
        let client = crate::connector::open_client(url).map_err(|cause| ConnectError::BadUrl {
            key: "url".into(),
            cause,
        })?;
        Ok(Self::with_client(client, spec))
    }

    /// A client over an already configured `redis::Client` (a Redlock node). Credentials and
    /// TLS come from a [`crate::RedisSpec`] through [`crate::Backend::connect`].
    pub(crate) fn with_client(client: Client, spec: LeaseSpec) -> Self {
        let endpoint = Endpoint::new(client, spec.connect_timeout, spec.command_timeout);
        Self::with_endpoint(endpoint, spec)
    }

    /// A client whose connections come from `connector` (one server, the Sentinel master, a
    /// cluster). With `min_replicas_ack > 0` an acquire or renew counts only after that many
    /// replicas acknowledged it (`WAIT`); an unacknowledged acquire is undone and reported as
    /// [`LeaseError::Unavailable`] of kind timeout, an unacknowledged renew leaves the term's
    /// validity as it was.
    pub(crate) fn with_connector(
        connector: Connector,
        spec: LeaseSpec,
        min_replicas_ack: u32,
    ) -> Self {
        let endpoint =
            Endpoint::with_connector(connector, spec.connect_timeout, spec.command_timeout)
                .with_min_replicas_ack(min_replicas_ack);
        Self::with_endpoint(endpoint, spec)
    }

    fn with_endpoint(endpoint: Endpoint, spec: LeaseSpec) -> Self {
        let endpoint = endpoint.into();
        LeaseClient {
            keys: spec.keys(),
            spec,
            endpoint,
            scripts: &SCRIPTS,
            control_poke: std::sync::Arc::new(tokio::sync::watch::channel(0).0),
            strays: Default::default(),
            lock: None,
            dropped: Default::default(),
            registry: Default::default(),
            shard: None,
        }
    }

    /// A client for another lease over this client's connection (and its timeouts): many
    /// leases, e.g. a [`crate::lock::Locker`] per resource, on one multiplexed connection.
    /// Its listeners are its own; the messages they drop count in this client's
    /// [`Lease::messages_dropped`] too (a sharded election's elector listens on such a twin).
    pub fn for_lease(&self, spec: LeaseSpec) -> LeaseClient {
        LeaseClient {
            keys: spec.keys(),
            spec,
            endpoint: self.endpoint.clone(),
            scripts: self.scripts,
            control_poke: std::sync::Arc::new(tokio::sync::watch::channel(0).0),
            strays: Default::default(),
            lock: None,
            dropped: self.dropped.clone(),
            registry: Default::default(),
            shard: None,
        }
    }

    /// The keys of the lease.
    pub fn keys(&self) -> &LeaseKeys {
        &self.keys
    }

    /// The Redis endpoint, to run other scripts on the same connection (Redlock).
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// What the server offers, as last read at a connect ([`ServerInfo`]).
    #[cfg_attr(not(feature = "daemon"), allow(dead_code))] // read by check-config --probe
    pub(crate) fn server_infos(&self) -> Vec<ServerInfoWatch> {
        vec![self.endpoint.server_info()]
    }

    /// The endpoint, shared, for work that outlives a call (Redlock's background undo).
    pub(crate) fn shared_endpoint(&self) -> std::sync::Arc<Endpoint> {
        self.endpoint.clone()
    }

    fn ttl_ms(&self) -> u64 {
        self.spec.lease_duration.as_millis() as u64
    }

    /// Keeps the token of a grant this client may hold without knowing it, for a few
    /// lease durations.
    fn stray(&self, token: &str) {
        self.strays.remember(token, self.spec.lease_duration * 4);
    }

    /// A failed script call as the error to return, naming the ACL permission it lacked
    /// when that is why it failed.
    async fn fail<T>(&self, failure: RedisFailure, script: LeaseScript) -> Result<T, LeaseError> {
        if failure.code.as_deref() == Some("WRONGTYPE") {
            let key = self.foreign_key().await;
            return Err(LeaseError::WrongType { key });
        }
        let failure = crate::lease::acl::explain(&self.endpoint, &self.keys, script, failure).await;
        Err(self.lift(failure))
    }

    /// Which key of the election holds another type (after a `WRONGTYPE`).
    pub(crate) async fn foreign_key(&self) -> String {
        foreign::foreign_key(&self.endpoint, &self.keys, None).await
    }

    fn lift(&self, failure: RedisFailure) -> LeaseError {
        lifted(failure, &self.keys.lock)
    }
}

/// A failed call as a lease error: a wrong key type names `lock` (callers that can tell which
/// key is foreign ask first), a reply the call cannot have produced (another type, or bytes
/// that do not parse) is `Protocol`, anything else `Unavailable`.
pub(crate) fn lifted(failure: RedisFailure, lock: &str) -> LeaseError {
    let unexpected = failure.source.as_deref().is_some_and(|e| {
        matches!(
            e.kind(),
            redis::ErrorKind::UnexpectedReturnType | redis::ErrorKind::Parse
        )
    });
    if failure.code.as_deref() == Some("WRONGTYPE") {
        LeaseError::WrongType {
            key: lock.to_owned(),
        }
    } else if unexpected {
        LeaseError::Protocol(failure.cause)
    } else {
        LeaseError::Unavailable(failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure_of(err: redis::RedisError) -> RedisFailure {
        RedisFailure::from_redis(&err)
    }

    #[test]
    fn a_reply_of_another_type_is_protocol_and_a_refused_connection_is_not() {
        let not_an_int = redis::from_redis_value::<i64>(redis::Value::BulkString(b"x".to_vec()))
            .expect_err("a string is not an integer");
        let lifted_err = lifted(failure_of(not_an_int.into()), "k:lock");
        assert!(
            matches!(lifted_err, LeaseError::Protocol(_)),
            "{lifted_err:?}"
        );
        let typed = redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "odd"));
        let lifted_err = lifted(failure_of(typed), "k:lock");
        assert!(
            matches!(lifted_err, LeaseError::Protocol(_)),
            "{lifted_err:?}"
        );
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let lifted_err = lifted(failure_of(refused), "k:lock");
        assert!(
            matches!(lifted_err, LeaseError::Unavailable(_)),
            "{lifted_err:?}"
        );
    }
}
