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
pub(crate) use connection::Conn;
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
    pub async fn connect(&self, limit: Duration) -> RedisResult<Conn> {
        match self {
            Connector::Direct(client) => client
                .get_multiplexed_async_connection_with_config(&conn_config(limit))
                .await
                .map(Conn::Single),
            Connector::Sentinel(s) => s.master(limit).await.map(|(_, c)| Conn::Single(c)),
            Connector::Cluster(c) => c.client.get_async_connection().await.map(Conn::Cluster),
        }
    }

    /// Changes when connections made before should be dropped: for Sentinel, when the
    /// master moved; always 0 otherwise.
    /// Which server this is, for reports (no credentials).
    pub fn server_label(&self) -> String {
        match self {
            Connector::Direct(client) => client.get_connection_info().addr().to_string(),
            Connector::Sentinel(_) => "the Sentinel master".into(),
            Connector::Cluster(_) => "the cluster".into(),
        }
    }

    pub fn epoch(&self) -> u64 {
        match self {
            Connector::Sentinel(s) => s.epoch(),
            _ => 0,
        }
    }

    /// A pub/sub connection on which a release published on the lease's channel arrives: the
    /// server itself, the current Sentinel master, or any reachable node of a cluster
    /// (a plain `PUBLISH` is broadcast to every node of a cluster).
    ///
    /// # Errors
    /// The error of the connect or of the lookup.
    pub async fn pubsub(&self, limit: Duration) -> RedisResult<PubSub> {
        match self {
            Connector::Direct(client) => client.get_async_pubsub().await,
            Connector::Sentinel(s) => {
                let (client, _) = s.master(limit).await?;
                client.get_async_pubsub().await
            }
            Connector::Cluster(c) => {
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
fn conn_config(limit: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(limit))
        .set_response_timeout(None)
}

fn io_error(what: &str) -> RedisError {
    RedisError::from(io::Error::other(what.to_string()))
}
