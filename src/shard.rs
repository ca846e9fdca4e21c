//! Sharded leadership (README, "Shards"): shard `s` of an election is a lease of its own,
//! fenced from the election's one counter ([`crate::LeaseClient::shard`]); [`Assignment`]
//! says which member should own it, and a [`ShardElector`] owns its share, over any
//! [`ShardLeases`] (one Redis, Sentinel, Cluster, or Redlock).

mod assign;
mod elector;
mod events;
mod leases;
mod members;
mod vacancy;
#[cfg(feature = "daemon")]
pub(crate) use members::read_now as read_members;

pub use crate::lease::{ShardRenewal, ShardTerm};
pub use assign::Assignment;
pub use elector::{OwnedShard, ShardElector, ShardPolicy};
pub use events::{ShardEvents, ShardStepDown};
pub use leases::ShardLeases;
