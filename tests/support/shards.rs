//! A sharded election seen from outside (README, "Shards"): `GET /shards` of a replica, the
//! shards its status document says it owns, waiting until the owners are an assignment's
//! targets, and the shard terms of the replicas' logs grouped by shard.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leaderd::shard::Assignment;
use serde_json::Value;

use super::{Daemon, Term};

/// One row of `GET /shards`: shard, owner, target.
pub type Row = (u64, Option<String>, Option<String>);

/// `GET /shards` of `d`; None when it does not answer 200.
pub fn shard_rows(d: &Daemon) -> Option<Vec<Row>> {
    let (code, body) = d.get("/shards");
    if code != 200 {
        return None;
    }
    let rows: Vec<Value> = serde_json::from_str(&body).ok()?;
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let rows = rows.iter().map(|r| {
        (
            r["shard"].as_u64().unwrap_or(u64::MAX),
            text(&r["owner"]),
            text(&r["target"]),
        )
    });
    Some(rows.collect())
}

/// The owner of each shard, as `d` reads them now, when every shard is owned.
pub fn owners(d: &Daemon) -> Option<BTreeMap<u64, String>> {
    let rows = shard_rows(d)?;
    rows.into_iter()
        .map(|(s, owner, _)| Some((s, owner?)))
        .collect()
}

/// `(shard, fence)` of each shard `d`'s status document lists as owned.
pub fn owned_with_fences(d: &Daemon) -> Vec<(u64, u64)> {
    let doc = d.status_doc().expect("a status document");
    let owned = doc["shards"]["owned"].as_array().cloned();
    let pair = |o: &Value| Some((o["shard"].as_u64()?, o["fence"].as_u64()?));
    owned.unwrap_or_default().iter().filter_map(pair).collect()
}

/// The shards `d`'s status document says it owns.
pub fn owned_in_doc(d: &Daemon) -> Vec<u64> {
    owned_with_fences(d).into_iter().map(|(s, _)| s).collect()
}

/// Waits (polling every `step`, at most `within`) until every shard of election `name` is
/// owned by its target among `members`, as `d` reads them; the assignment, or the last
/// owners read.
pub fn wait_assigned(
    d: &Daemon,
    name: &str,
    shards: u32,
    members: &[&str],
    step: Duration,
    within: Duration,
) -> Result<Assignment, Option<BTreeMap<u64, String>>> {
    let expected = Assignment::compute(name, shards, members, 0);
    let want: BTreeMap<u64, String> = (0..shards)
        .filter_map(|s| Some((u64::from(s), expected.target(s)?.to_owned())))
        .collect();
    let deadline = Instant::now() + within;
    let mut last = None;
    while Instant::now() < deadline {
        last = owners(d);
        if last.as_ref() == Some(&want) {
            return Ok(expected);
        }
        std::thread::sleep(step);
    }
    Err(last)
}

/// The shard terms of `terms` (from `terms_from_logs`), by shard, each shard's in order of
/// `acquired_at_ms`.
pub fn terms_by_shard(terms: &[Term]) -> BTreeMap<u64, Vec<Term>> {
    let mut by: BTreeMap<u64, Vec<Term>> = BTreeMap::new();
    for t in terms {
        if let Some(s) = t.shard {
            by.entry(s).or_default().push(t.clone());
        }
    }
    for list in by.values_mut() {
        list.sort_by_key(|t| (t.acquired_at_ms, t.fence));
    }
    by
}

/// For each term of a shard begun at or after `since_ms`: `(the term, its predecessor)`,
/// the predecessor being the shard's term begun just before it (if any).
pub fn successions(terms: &[Term], since_ms: u64) -> Vec<(Term, Option<Term>)> {
    let mut out = Vec::new();
    for list in terms_by_shard(terms).into_values() {
        for (i, t) in list.iter().enumerate() {
            if t.acquired_at_ms >= since_ms {
                let before = i.checked_sub(1).map(|j| list[j].clone());
                out.push((t.clone(), before));
            }
        }
    }
    out
}
