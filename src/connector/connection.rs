//! A connection made by a [`Connector`](super::Connector) to one server or to a cluster, and
//! `WAIT` for replicas on it.

use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::key_slot;

/// A connection made by a [`Connector`](super::Connector): a multiplexed connection to one
/// server, or a cluster connection that routes each command to the shard of its keys.
#[derive(Clone)]
pub enum Conn {
    /// One server (single mode, or the current Sentinel master).
    Single(MultiplexedConnection),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// `WAIT replicas ms` on the node that holds `key`, on the connection that just wrote
    /// it, so it counts the replicas that acknowledged that write. Returns how many did, or
    /// `None` when Redis gave no answer within `budget` (a server checks a `WAIT`'s timeout
    /// only at its next tick, up to 100 ms late with the default `hz 10`). The connection is
    /// then still blocked in the `WAIT`: drop it.
    ///
    /// # Errors
    /// The error of the connection or of Redis.
    pub async fn wait_for_replicas(
        &mut self,
        replicas: u32,
        budget: Duration,
        key: &str,
    ) -> RedisResult<Option<i64>> {
        let mut wait = redis::cmd("WAIT");
        // At least 1 ms: 0 would block forever.
        wait.arg(replicas).arg((budget.as_millis() as u64).max(1));
        let ask = async {
            match self {
                Conn::Single(c) => wait.query_async(c).await,
                Conn::Cluster(c) => {
                    // WAIT has no key: route it to the primary of the key's slot, whose
                    // connection carried the script (it would otherwise go to every primary).
                    let route = Route::new(key_slot(key.as_bytes()), SlotAddr::Master);
                    let routing =
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                    let reply = c.route_command(wait, routing).await?;
                    Ok(redis::from_redis_value(reply)?)
                }
            }
        };
        match tokio::time::timeout(budget, ask).await {
            Ok(answer) => answer.map(Some),
            Err(_) => Ok(None),
        }
    }
}
