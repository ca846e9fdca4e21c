//! A connection made by a [`Connector`](super::Connector) to one server or to a cluster, and
//! `WAIT` for replicas on it. On a cluster a script is loaded (`SCRIPT LOAD`, after
//! `NOSCRIPT`) on the node that runs it, not on every node (README, "cluster").

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Arg, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::key_slot;

/// A connection made by a [`Connector`](super::Connector): a multiplexed connection to one
/// server, or a cluster connection that routes each command to the shard of its keys.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server (single mode, or the current Sentinel master).
    Single(MultiplexedConnection),
    /// A Redis Cluster, and the slot of the last script run on it ([`ScriptSlot`]).
    Cluster(ClusterConnection, ScriptSlot),
}

/// The slot of the keys of the last `EVALSHA` sent on a cluster connection, where its
/// `SCRIPT LOAD` goes when the node answered `NOSCRIPT` (a new master after a failover).
/// redis-rs would send it to every node it knows and wait for all of them: right after a
/// failover that includes a node that is restarting or rejoining, and each script's first
/// call waited out the response timeout. Every key of one lease has the same hash tag.
#[derive(Clone, Default)]
pub(crate) struct ScriptSlot(Arc<AtomicU32>);

impl ScriptSlot {
    const NONE: u32 = u32::MAX;

    /// A new connection's: no script run yet.
    pub(crate) fn new() -> Self {
        ScriptSlot(Arc::new(AtomicU32::new(Self::NONE)))
    }

    /// Notes the slot of `cmd`'s first key when it is an `EVALSHA` with keys; returns the
    /// noted slot when `cmd` is a `SCRIPT LOAD`.
    fn observe(&self, cmd: &Cmd) -> Option<u16> {
        let mut args = cmd.args_iter().filter_map(|a| match a {
            Arg::Simple(bytes) => Some(bytes),
            _ => None,
        });
        let name = args.next()?;
        if name.eq_ignore_ascii_case(b"EVALSHA") {
            let numkeys = args.nth(1)?;
            if numkeys != b"0" {
                let slot = key_slot(args.next()?);
                self.0.store(u32::from(slot), Ordering::Relaxed);
            }
            return None;
        }
        let load = name.eq_ignore_ascii_case(b"SCRIPT")
            && args.next().is_some_and(|a| a.eq_ignore_ascii_case(b"LOAD"));
        let slot = self.0.load(Ordering::Relaxed);
        (load && slot != Self::NONE).then_some(slot as u16)
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c, scripts) => match scripts.observe(cmd) {
                Some(slot) => {
                    let (mut c, cmd) = (c.clone(), cmd.clone());
                    Box::pin(async move { c.route_command(cmd, on_master_of(slot)).await })
                }
                None => c.req_packed_command(cmd),
            },
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
            Conn::Cluster(c, _) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c, _) => c.get_db(),
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
    pub(crate) async fn wait_for_replicas(
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
                Conn::Cluster(c, _) => {
                    // WAIT has no key: route it to the primary of the key's slot, whose
                    // connection carried the script (it would otherwise go to every primary).
                    let routing = on_master_of(key_slot(key.as_bytes()));
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

/// Routing to the master that serves `slot`.
fn on_master_of(slot: u16) -> RoutingInfo {
    let route = Route::new(slot, SlotAddr::Master);
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_is_loaded_where_its_keys_are() {
        let slots = ScriptSlot::new();
        let load = redis::cmd("SCRIPT").arg("LOAD").arg("return 1").clone();
        assert_eq!(slots.observe(&load), None, "no script run yet");
        let keyless = redis::cmd("EVALSHA").arg("abc").arg(0).clone();
        assert_eq!(slots.observe(&keyless), None);
        assert_eq!(slots.observe(&load), None);
        let evalsha = redis::cmd("evalsha")
            .arg("abc")
            .arg(2)
            .arg("leaderd:{orders}:lock")
            .arg("leaderd:{orders}:fence")
            .clone();
        assert_eq!(slots.observe(&evalsha), None);
        assert_eq!(slots.observe(&load), Some(key_slot(b"orders")));
        let other = redis::cmd("HGET").arg("x").arg("y").clone();
        assert_eq!(slots.observe(&other), None);
    }
}
