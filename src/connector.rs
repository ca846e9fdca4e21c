//! Where the connection to the lease's Redis comes from: one server (`mode: single`), the
//! master the Sentinels name (`mode: sentinel`), or a Redis Cluster (`mode: cluster`).
//!
//! An [`crate::conn::Endpoint`] asks its [`Connector`] for a connection whenever it has none:
//! at the first call and after a call failed in a way that poisons the connection (a timeout,
//! a broken link, `READONLY`: the node is no longer a master, or a write too few replicas
//! acknowledged). For Sentinel the master is looked up again on every reconnect, and a
//! `+switch-master` announced by any Sentinel drops the connection too (see
//! [`Connector::epoch`]), so a failover is followed at the next call. A cluster connection
//! follows `MOVED` and `ASK` by itself.

mod cluster;
mod connection;
mod failover;
mod script;
mod sentinel;
mod spec;
mod tls;

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::PubSub;
use redis::{AsyncConnectionConfig, Client, RedisError, RedisResult};

pub(crate) use cluster::key_slot;
pub(crate) use cluster::ClusterConnector;
pub(crate) use connection::{Conn, ScriptSlot};
pub(crate) use script::{invoke, run as run_script};
pub(crate) use sentinel::{NodeSettings, SentinelConnector};
pub use spec::{ConnectError, RedisSpec, Secret, TlsFiles, Topology};
pub(crate) use tls::init_tls;

/// Makes connections to the Redis that holds the lease. Cheap to clone.
// One per endpoint, made once: the size of a `Client` does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Connector {
    /// One server.
    Direct(Client),
    /// The master that the Sentinels name, looked up on every (re)connect.
    Sentinel(Arc<SentinelConnector>),
    /// A Redis Cluster; MOVED and ASK are followed by the cluster connection.
    Cluster(Arc<ClusterConnector>),
}
impl Connector {
    /// A new connection, within `limit` (the caller also bounds the whole call).
    ///
    /// # Errors
    /// The error of the connect, of the Sentinel lookup or of the cluster's first contact.
    pub(crate) async fn connect(&self, limit: Duration) -> RedisResult<Conn> {
        match self {
            Connector::Direct(client) => client
                .get_multiplexed_async_connection_with_config(&conn_config(limit))
                .await
                .map(Conn::Single),
            Connector::Sentinel(s) => s.master(limit).await.map(|(_, c)| Conn::Single(c)),
            Connector::Cluster(c) => {
                let conn = c.client.get_async_connection().await?;
                Ok(Conn::Cluster(conn, ScriptSlot::new()))
            }
        }
    }

    /// Whether a failure of `kind` leaves the connection usable: a cluster connection
    /// reconnects to its nodes by itself, so a timeout (one node slow or hung) is no reason
    /// to make a new one, which would first reach every seed and every node again (and with
    /// one of them hung, time out again, and again).
    pub(crate) fn heals_itself(&self, kind: crate::failure::FailureKind) -> bool {
        matches!(self, Connector::Cluster(_)) && kind == crate::failure::FailureKind::Timeout
    }

    /// How long one connect may take in all, given the connect timeout of one server: a
    /// cluster connection reaches every seed and then every node of the slot map, each
    /// within its own timeout, so it gets a few.
    pub(crate) fn connect_limit(&self, connect_timeout: Duration) -> Duration {
        match self {
            Connector::Cluster(_) => connect_timeout * CLUSTER_CONNECTS,
            _ => connect_timeout,
        }
    }

    /// Which server this is, for reports (no credentials): `127.0.0.1:6379`, `Sentinel
    /// master mymaster`, `the cluster at a:7000, b:7000`.
    pub(crate) fn server_label(&self) -> String {
        let addr = |client: &Client| client.get_connection_info().addr().to_string();
        match self {
            Connector::Direct(client) => addr(client),
            Connector::Sentinel(s) => format!("Sentinel master {}", s.master_name()),
            Connector::Cluster(c) => {
                let seeds: Vec<String> = c.seeds.iter().map(addr).collect();
                format!("the cluster at {}", seeds.join(", "))
            }
        }
    }

    /// Changes when connections made before should be dropped: for Sentinel, when the
    /// master moved; always 0 otherwise.
    pub(crate) fn epoch(&self) -> u64 {
        match self {
            Connector::Sentinel(s) => s.epoch(),
            _ => 0,
        }
    }

    /// A pub/sub connection on which what is published on `channel` arrives: the server
    /// itself, the current Sentinel master, or in a cluster the master that serves
    /// `channel`'s slot (the lease's scripts publish there; a plain `PUBLISH` reaches the
    /// other nodes too, but over the cluster bus, tens of ms later), else any reachable node.
    ///
    /// # Errors
    /// The error of the connect or of the lookup.
    pub(crate) async fn pubsub(&self, channel: &str, limit: Duration) -> RedisResult<PubSub> {
        match self {
            Connector::Direct(client) => client.get_async_pubsub().await,
            Connector::Sentinel(s) => {
                let (client, _) = s.master(limit).await?;
                client.get_async_pubsub().await
            }
            Connector::Cluster(c) => {
                if let Some(owner) = c.slot_owner(key_slot(channel.as_bytes()), limit).await {
                    if let Ok(Ok(pubsub)) =
                        tokio::time::timeout(limit, owner.get_async_pubsub()).await
                    {
                        return Ok(pubsub);
                    }
                }
                // Start at the next seed each time, so one that hangs is not always first.
                let first = c.next_seed.fetch_add(1, Ordering::Relaxed);
                let n = c.seeds.len().max(1);
                let mut last = None;
                for seed in c.seeds.iter().cycle().skip(first % n).take(c.seeds.len()) {
                    match tokio::time::timeout(limit, seed.get_async_pubsub()).await {
                        Ok(Ok(pubsub)) => return Ok(pubsub),
                        Ok(Err(e)) => last = Some(e),
                        Err(_) => last = Some(io_error("connecting to a cluster seed timed out")),
                    }
                }
                Err(last.unwrap_or_else(|| io_error("no cluster seed node configured")))
            }
        }
    }
}
/// `info` without the `CLIENT SETINFO` that a connect sends by default: the minimal ACL
/// (README, "ACL") does not allow it, and a server that has it (Redis 7.2+, Valkey) would log
/// every connect as a denial in `ACL LOG`.
pub(crate) fn without_setinfo(info: redis::ConnectionInfo) -> redis::ConnectionInfo {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_redis_settings(settings)
}

/// A client for `url` that does not send `CLIENT SETINFO` ([`without_setinfo`]).
///
/// # Errors
/// The URL does not parse.
pub(crate) fn open_client(url: &str) -> RedisResult<Client> {
    Client::open(without_setinfo(
        redis::IntoConnectionInfo::into_connection_info(url)?,
    ))
}

/// Connect timeouts a cluster connection gets in all (see [`Connector::connect_limit`]).
pub(crate) const CLUSTER_CONNECTS: u32 = 4;

fn conn_config(limit: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(limit))
        .set_response_timeout(None)
}

fn io_error(what: &str) -> RedisError {
    RedisError::from(io::Error::other(what.to_string()))
}
