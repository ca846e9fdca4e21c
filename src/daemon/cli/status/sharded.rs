//! `leaderd status` of a sharded election (README, "Shards"): how many shards, owners and
//! unowned, then each candidate with the shards it owns; `--json` adds every shard as
//! `GET /shards` lists it. Exit 0 when every shard is owned, 3 when one is not (`--watch`
//! draws the same output at every change).

use std::time::Duration;

use super::{bounded, EXIT_VACANT};
use crate::backend::Backend;
use crate::daemon::candidacy::{self, Listed};
use crate::daemon::config::Config;
use crate::daemon::shards::ShardRow;
use crate::lease::{Heartbeat, Lease, LeaseError};

/// The shards and the candidates, read once.
pub(super) async fn read(
    lease: &Backend,
    config: &Config,
    budget: Duration,
) -> Result<(Vec<ShardRow>, Vec<Listed>), LeaseError> {
    let rows = crate::daemon::shards::read(lease, config, budget).await?;
    let roster = lease.heartbeat(Heartbeat::Read, budget).await?;
    Ok((rows, candidacy::listed(&roster, None)))
}

/// Reads the shards and the candidates once; prints them; returns the exit code (an error:
/// `Err`, printed by the caller).
pub(super) async fn status(
    lease: &Backend,
    config: &Config,
    json: bool,
    budget: Duration,
) -> Result<i32, LeaseError> {
    let (rows, listed) = read(lease, config, budget).await?;
    if json {
        println!("{}", json_doc(&config.name, &rows, &listed));
    } else {
        print!("{}", text(&config.name, &rows, &listed));
    }
    let unowned = rows.iter().any(|r| r.owner.is_none());
    Ok(if unowned { EXIT_VACANT } else { 0 })
}

/// The shards `identity` owns, in order.
fn owned_by<'a>(rows: &'a [ShardRow], identity: &'a str) -> impl Iterator<Item = u32> + 'a {
    rows.iter()
        .filter(move |r| r.owner.as_deref() == Some(identity))
        .map(|r| r.shard)
}

/// `<name>: 64 shards, 3 owners, 0 unowned`, then each candidate's line with what it owns,
/// then any owner with no entry (it is leaving, or dead and not yet expired).
pub(super) fn text(name: &str, rows: &[ShardRow], listed: &[Listed]) -> String {
    let mut owners: Vec<&str> = rows.iter().filter_map(|r| r.owner.as_deref()).collect();
    owners.sort_unstable();
    owners.dedup();
    let unowned = rows.iter().filter(|r| r.owner.is_none()).count();
    let mut text = format!(
        "{name}: {} shards, {} owners, {unowned} unowned\n",
        rows.len(),
        owners.len()
    );
    let owns = |id: &str| {
        let shards: Vec<String> = owned_by(rows, id).map(|s| s.to_string()).collect();
        format!("owns {}: {}", shards.len(), shards.join(","))
    };
    for c in listed {
        text += &format!("{} {}\n", candidacy::line(c), owns(&c.identity));
    }
    for id in owners
        .iter()
        .filter(|id| !listed.iter().any(|c| c.identity == **id))
    {
        let shown = crate::daemon::escape::escape_text(bounded(id));
        text += &format!("  {shown} (no registry entry) {}\n", owns(id));
    }
    text
}

/// The `status --json` document of a sharded election, on one line.
pub(super) fn json_doc(name: &str, rows: &[ShardRow], listed: &[Listed]) -> String {
    let unowned = rows.iter().filter(|r| r.owner.is_none()).count();
    let doc = serde_json::json!({
        "name": name,
        "shards_count": rows.len(),
        "unowned": unowned,
    });
    let mut text = doc.to_string();
    text.pop();
    let candidates = serde_json::to_string(listed).unwrap_or_else(|_| "[]".into());
    let shards = serde_json::to_string(rows).unwrap_or_else(|_| "[]".into());
    format!("{text},\"candidates\":{candidates},\"shards\":{shards}}}")
}
