//! The members of a sharded election (README, "Shards"): registered candidates that are
//! healthy and contending, whose entry was refreshed within `lease_duration / 2` (read from
//! the registry's index by `seen_at_ms`, not from the roster, whose other entries are only as
//! fresh as its last full read), and since when each has been one: from its entry's
//! `healthy_since_ms` (Redis time), never before the last read that did not list it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::{Candidate, Roster};

/// The members as last read, each with since when it has been one (this replica's clock).
#[derive(Debug, Default)]
pub(crate) struct Members {
    since: HashMap<String, Instant>,
    /// When the last read was taken in: a member it did not list became one after it.
    last_read: Option<Instant>,
}

impl Members {
    /// Takes in a read: the roster's candidates, and the identities the index shows
    /// refreshed within `lease_duration / 2`. Returns the members, ordered by identity.
    pub(crate) fn update(&mut self, roster: &Roster, fresh: &[String]) -> Vec<String> {
        let fresh: HashSet<&str> = fresh.iter().map(String::as_str).collect();
        let listed = roster
            .candidates
            .iter()
            .filter(|c| is_member(c) && fresh.contains(c.identity.as_str()));
        let mut found: Vec<(&str, Option<u64>)> = listed
            .map(|c| (c.identity.as_str(), c.healthy_since_ms))
            .collect();
        found.sort();
        found.dedup_by(|a, b| a.0 == b.0);
        let now = Instant::now();
        let floor = self.last_read.replace(now);
        self.since
            .retain(|id, _| found.iter().any(|(m, _)| m == id));
        for (id, healthy_since_ms) in &found {
            let joined = || joined_at(*healthy_since_ms, roster.now_ms, now, floor);
            self.since.entry((*id).to_owned()).or_insert_with(joined);
        }
        found.into_iter().map(|(id, _)| id.to_owned()).collect()
    }

    /// True when `identity` has been a member for at least `settle` (a heartbeat period).
    pub(crate) fn settled(&self, identity: &str, settle: Duration) -> bool {
        self.settles_at(identity, settle)
            .is_some_and(|at| Instant::now() >= at)
    }

    /// When `identity` will have been a member for `settle`; `None` when it is not one.
    pub(crate) fn settles_at(&self, identity: &str, settle: Duration) -> Option<Instant> {
        self.since.get(identity).map(|since| *since + settle)
    }
}

/// When a member became one, on this replica's clock: when its entry says it turned
/// healthy (`healthy_since_ms`, Redis time, taken as an age from the read's Redis time
/// `now_ms`, so that the two clocks need not agree; a time in the future is an age of 0),
/// never before `floor` (the last read, which did not list it), and `now` when unknown.
fn joined_at(
    healthy_since_ms: Option<u64>,
    now_ms: u64,
    now: Instant,
    floor: Option<Instant>,
) -> Instant {
    let age = healthy_since_ms.map_or(0, |t| now_ms.saturating_sub(t));
    let at = now.checked_sub(Duration::from_millis(age)).unwrap_or(now);
    floor.map_or(at, |floor| at.max(floor))
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
        since(identity, healthy, contending, state, None)
    }

    fn since(
        identity: &str,
        healthy: bool,
        contending: bool,
        state: &str,
        healthy_since_ms: Option<u64>,
    ) -> Candidate {
        Candidate {
            identity: identity.into(),
            state: state.into(),
            healthy,
            contending,
            priority: 0,
            address: None,
            version: "0".into(),
            started_at_ms: 0,
            healthy_since_ms,
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

    /// A read at Redis time `now_ms` of `entries` (identity, `healthy_since_ms`), all fresh.
    fn read(members: &mut Members, now_ms: u64, entries: &[(&str, Option<u64>)]) {
        let roster = Roster {
            now_ms,
            candidates: entries
                .iter()
                .map(|(id, t)| since(id, true, true, "follower", *t))
                .collect(),
            ..Roster::default()
        };
        let fresh: Vec<String> = entries.iter().map(|(id, _)| id.to_string()).collect();
        members.update(&roster, &fresh);
    }

    #[test]
    fn a_member_has_been_one_since_its_entry_turned_healthy_by_the_redis_clock() {
        let beat = Duration::from_secs(1);
        let mut members = Members::default();
        // Healthy for 5 s (Redis time) when first read: settled at once.
        read(&mut members, 100_000, &[("a", Some(95_000))]);
        assert!(members.settled("a", beat));
        // Healthy for 300 ms when first seen, 400 ms after the last read: settled 700 ms
        // from now, not a heartbeat period from now.
        std::thread::sleep(Duration::from_millis(400));
        read(
            &mut members,
            100_400,
            &[("a", Some(95_000)), ("n", Some(100_100))],
        );
        let at = members.settles_at("n", beat).expect("a member");
        let left = at.saturating_duration_since(Instant::now());
        assert!(left <= Duration::from_millis(700), "{left:?}");
        assert!(left >= Duration::from_millis(600), "{left:?}");
    }

    #[test]
    fn a_future_absurd_or_missing_timestamp_skips_no_wait() {
        let beat = Duration::from_secs(1);
        let mut members = Members::default();
        read(
            &mut members,
            100_000,
            &[("f", Some(u64::MAX)), ("none", None)],
        );
        assert!(!members.settled("f", beat), "a time in the future");
        assert!(!members.settled("none", beat), "no time");
        // A member the last read did not list joined after it, whatever its entry says.
        read(
            &mut members,
            100_010,
            &[("f", Some(u64::MAX)), ("old", Some(0))],
        );
        assert!(!members.settled("old", beat), "an absurd age");
        assert!(members.settled("old", Duration::ZERO));
        // Gone from a read, then back: since the read that did not list it.
        read(&mut members, 100_020, &[("f", Some(u64::MAX))]);
        read(
            &mut members,
            100_030,
            &[("f", Some(u64::MAX)), ("old", Some(10))],
        );
        assert!(
            !members.settled("old", beat),
            "back after a read without it"
        );
    }
}
