//! Sharded leadership (README, "Shards"): shard `s` of an election is a lease of its own,
//! fenced from the election's one counter; [`Assignment`] says which member should own it.

mod assign;

pub use crate::lease::{ShardRenewal, ShardTerm};
pub use assign::Assignment;
