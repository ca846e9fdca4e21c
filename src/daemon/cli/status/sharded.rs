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
        let list = shards.join(",");
        format!(
            "owns {}:{}{list}",
            shards.len(),
            if list.is_empty() { "" } else { " " }
        )
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

/// The `status --json` document of a sharded election, on one line: the keys of one lease's
/// document (`state` held when every shard is owned; no one holder, fence or validity), then
/// the shards.
pub(super) fn json_doc(name: &str, rows: &[ShardRow], listed: &[Listed]) -> String {
    let unowned = rows.iter().filter(|r| r.owner.is_none()).count();
    let state = if rows.iter().any(|r| r.quarantined) {
        "quarantined"
    } else if unowned > 0 {
        "vacant"
    } else {
        "held"
    };
    // Keys in the order the README lists them (serde_json keeps insertion order).
    serde_json::json!({
        "name": name,
        "state": state,
        "holder": null,
        "fence": null,
        "remaining_ms": null,
        "shards_count": rows.len(),
        "unowned": unowned,
        "candidates": listed,
        "shards": rows,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(shard: u32, owner: Option<&str>) -> ShardRow {
        ShardRow {
            shard,
            owner: owner.map(str::to_owned),
            fence: owner.map(|_| 7),
            remaining_ms: owner.map(|_| 900),
            target: Some("a".into()),
            quarantined: false,
        }
    }

    fn candidate(identity: &str) -> Listed {
        Listed {
            identity: identity.into(),
            state: "follower".into(),
            healthy: true,
            priority: 0,
            address: None,
            version: "0".into(),
            started_at_ms: 0,
            seen_ms_ago: 5,
        }
    }

    #[test]
    fn a_candidate_owning_nothing_ends_its_line_with_owns_0() {
        let rows = [row(0, Some("a")), row(1, Some("a"))];
        let out = text("n", &rows, &[candidate("a"), candidate("b")]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "n: 2 shards, 1 owners, 0 unowned");
        assert!(lines[1].ends_with(" owns 2: 0,1"), "{out}");
        assert!(lines[2].ends_with(" owns 0:"), "{out:?}");
    }

    #[test]
    fn the_json_document_keeps_the_keys_of_one_lease() {
        let doc = |rows: &[ShardRow]| -> serde_json::Value {
            serde_json::from_str(&json_doc("n", rows, &[candidate("a")])).expect("json")
        };
        let held = doc(&[row(0, Some("a"))]);
        assert_eq!(held["state"], "held");
        for key in ["holder", "fence", "remaining_ms"] {
            assert!(
                held[key].is_null() && held.get(key).is_some(),
                "{key}: {held}"
            );
        }
        assert_eq!(held["candidates"][0]["identity"], "a");
        assert_eq!(held["shards"][0]["owner"], "a");
        assert!(held["shards"][0].get("quarantined").is_none(), "{held}");
        let keys: Vec<&str> = held
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let order = [
            "name",
            "state",
            "holder",
            "fence",
            "remaining_ms",
            "shards_count",
        ];
        let order: Vec<&str> = order
            .into_iter()
            .chain(["unowned", "candidates", "shards"])
            .collect();
        assert_eq!(keys, order, "the README's order");
        assert_eq!(doc(&[row(0, Some("a")), row(1, None)])["state"], "vacant");
        let mut lost = row(0, None);
        lost.quarantined = true;
        assert_eq!(doc(&[lost])["state"], "quarantined");
    }
}
