//! What a sharded elector tells its user about each shard (README, "Shards"): a term begun,
//! renewed or ended with its reason, and, before a shard it hands over is released, a wait
//! until its work has stopped (the stop-before-release order of a single lease).

use std::time::Duration;

use futures::future::BoxFuture;

use super::OwnedShard;
use crate::election::{AcquireResult, Began, RenewResult};
use crate::lease::{LeaseError, Registration, Roster};

/// Why a shard's term ended (the `reason` of `stepped_down`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardStepDown {
    /// A renew found the shard no longer this replica's.
    Lost,
    /// No renew succeeded within the renew deadline.
    Deadline,
    /// Handed to its target in the assignment.
    Rebalance,
    /// Unhealthy, or asked to yield: handed to the next target.
    Yield,
    /// The elector is shutting down.
    Shutdown,
    /// The shard's work ended by itself (`child_exit`, as with one lease).
    WorkExit,
}

impl ShardStepDown {
    /// Every reason, in the order the metrics list them.
    pub const ALL: [ShardStepDown; 6] = [
        ShardStepDown::Lost,
        ShardStepDown::Deadline,
        ShardStepDown::Rebalance,
        ShardStepDown::Yield,
        ShardStepDown::Shutdown,
        ShardStepDown::WorkExit,
    ];

    /// The label used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ShardStepDown::Lost => "lost",
            ShardStepDown::Deadline => "deadline",
            ShardStepDown::Rebalance => "rebalance",
            ShardStepDown::Yield => "yield",
            ShardStepDown::Shutdown => "shutdown",
            ShardStepDown::WorkExit => "child_exit",
        }
    }
}

/// Told of every shard's term as it changes; each call comes after the elector's watch has
/// been updated. The defaults do nothing.
pub trait ShardEvents: Send + Sync + 'static {
    /// A round of the elector's loop has finished (whatever Redis answered): it is not stuck.
    fn attempted(&self) {}
    /// A Redis call failed (each shard keeps its own deadline meanwhile).
    fn redis_failed(&self, _err: &LeaseError) {}
    /// A Redis call answered (after failures: Redis answers again).
    fn redis_answered(&self) {}
    /// What a heartbeat found about this replica's own registry entry (another live process
    /// registering its identity, a full registry).
    fn registered(&self, _registration: Registration) {}
    /// The candidates a heartbeat read (every live entry, this replica's included).
    fn candidates_read(&self, _roster: &Roster) {}
    /// An attempt to take a shard: its result (as `ElectionEvents::acquire_result`).
    fn acquire_result(&self, _result: AcquireResult) {}
    /// One renew of every owned shard, and its round trip: `Lost` when a shard was found
    /// lost, `Error` when the call failed (as `ElectionEvents::renew_result`).
    fn renew_result(&self, _result: RenewResult, _took: Duration) {}
    /// A shard's term is beginning, and how the shard had become free, as with one lease
    /// (told just before `acquired`).
    fn began(&self, _owned: &OwnedShard, _how: Began) {}
    /// A shard's term began.
    fn acquired(&self, _owned: &OwnedShard) {}
    /// A shard's validity moved forward.
    fn renewed(&self, _owned: &OwnedShard) {}
    /// A shard's term ended (it has left the watch already).
    fn stepped_down(&self, _owned: &OwnedShard, _reason: ShardStepDown) {}
    /// Resolves once the work for `owned` has stopped; a shard handed over is released only
    /// then (not awaited for `Lost` and `Deadline`: nothing is released).
    fn work_stopped(&self, _owned: &OwnedShard) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// No events.
pub(crate) struct NoEvents;

impl ShardEvents for NoEvents {}
