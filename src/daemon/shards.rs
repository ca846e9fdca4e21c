//! A sharded election as Redis says now (README, "Shards"): every shard with its owner, fence,
//! remaining validity and target, for `GET /shards` and `leaderd status`.

use std::time::Duration;

use serde::Serialize;

use crate::daemon::config::Config;
use crate::lease::{LeaseError, Observed};
use crate::shard::{Assignment, ShardLeases};

/// One shard as read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ShardRow {
    pub shard: u32,
    /// None when vacant, quarantined or reserved.
    pub owner: Option<String>,
    pub fence: Option<u64>,
    /// Time until the shard's lease expires in Redis (0 when vacant).
    pub remaining_ms: Option<u64>,
    /// Its member in the assignment from the members read now.
    pub target: Option<String>,
    /// The election is quarantined (its fence counter was lost): no shard is granted.
    #[serde(skip)]
    pub quarantined: bool,
}

/// Every shard of `config`'s election, read from Redis within `budget` per call.
pub(crate) async fn read<C: ShardLeases>(
    client: &C,
    config: &Config,
    budget: Duration,
) -> Result<Vec<ShardRow>, LeaseError> {
    let e = &config.election;
    let members = crate::shard::read_members(client, e.lease_duration, budget).await?;
    let seen = client.read_shards(e.shards, budget).await?;
    let assignment =
        Assignment::compute(&config.name, e.shards, &members, e.max_shards_per_replica);
    let rows = (0..e.shards)
        .zip(seen)
        .map(|(shard, seen)| row(shard, &seen, &assignment));
    Ok(rows.collect())
}

fn row(shard: u32, seen: &Observed, assignment: &Assignment) -> ShardRow {
    let holder = seen.holder();
    ShardRow {
        shard,
        owner: holder.map(|h| h.holder.clone()),
        fence: holder.map(|h| h.fence),
        remaining_ms: seen.remaining().map(|r| r.as_millis() as u64),
        target: assignment.target(shard).map(str::to_owned),
        quarantined: matches!(seen, Observed::Quarantined { .. }),
    }
}
