//! The members of a sharded election (README, "Shards"): registered candidates that are
//! healthy and contending, whose entry was refreshed within `lease_duration / 2` (read from
//! the registry's index by `seen_at_ms`, not from the roster, whose other entries are only as
//! fresh as its last full read), and since when each has been one, as this replica saw it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::{Candidate, Roster};

/// The members as last read, each with when this replica first saw it as one.
#[derive(Debug, Default)]
pub(crate) struct Members {
    since: HashMap<String, Instant>,
}

impl Members {
    /// Takes in a read: the roster's candidates, and the identities the index shows
    /// refreshed within `lease_duration / 2`. Returns the members, ordered by identity.
    pub(crate) fn update(&mut self, roster: &Roster, fresh: &[String]) -> Vec<String> {
        let fresh: HashSet<&str> = fresh.iter().map(String::as_str).collect();
        let mut members: Vec<String> = roster
            .candidates
            .iter()
            .filter(|c| is_member(c) && fresh.contains(c.identity.as_str()))
            .map(|c| c.identity.clone())
            .collect();
        members.sort();
        members.dedup();
        let now = Instant::now();
        self.since.retain(|id, _| members.contains(id));
        for id in &members {
            self.since.entry(id.clone()).or_insert(now);
        }
        members
    }

    /// True when `identity` has been a member for at least `settle` (a heartbeat period).
    pub(crate) fn settled(&self, identity: &str, settle: Duration) -> bool {
        self.since
            .get(identity)
            .is_some_and(|since| since.elapsed() >= settle)
    }
}

/// Healthy, contending, and not stopping.
fn is_member(c: &Candidate) -> bool {
    c.healthy && c.contending && c.state != "stopping"
}

#[cfg(feature = "daemon")]
/// The members as Redis says now (the registry read, then its index for who is fresh within
/// `lease_duration / 2`), for a reader that is not an elector (`leaderd status`, `GET /shards`).
pub(crate) async fn read_now<C: super::ShardLeases>(
    client: &C,
    lease_duration: Duration,
    budget: Duration,
) -> Result<Vec<String>, crate::lease::LeaseError> {
    use crate::lease::Heartbeat;
    let roster = client.heartbeat(Heartbeat::Read, budget).await?;
    let window = lease_duration.as_millis() as u64 / 2;
    let since = roster.now_ms.saturating_sub(window);
    let fresh = client.candidates_seen_since(since, budget).await?;
    Ok(Members::default().update(&roster, &fresh))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(identity: &str, healthy: bool, contending: bool, state: &str) -> Candidate {
        Candidate {
            identity: identity.into(),
            state: state.into(),
            healthy,
            contending,
            priority: 0,
            address: None,
            version: "0".into(),
            started_at_ms: 0,
            healthy_since_ms: None,
            seen_at_ms: 0,
        }
    }

    #[test]
    fn members_are_fresh_healthy_contending_and_not_stopping() {
        let roster = Roster {
            candidates: vec![
                candidate("e", true, true, "follower"),
                candidate("a", true, true, "leader"),
                candidate("sick", false, true, "follower"),
                candidate("out", true, false, "follower"),
                candidate("bye", true, true, "stopping"),
                candidate("stale", true, true, "follower"),
            ],
            ..Roster::default()
        };
        let fresh: Vec<String> = ["a", "e", "sick", "out", "bye", "ghost"]
            .map(String::from)
            .into();
        let mut members = Members::default();
        assert_eq!(members.update(&roster, &fresh), ["a", "e"]);
        assert!(members.settled("a", Duration::ZERO));
        assert!(!members.settled("a", Duration::from_secs(60)));
        assert!(!members.settled("stale", Duration::ZERO));
    }
}
