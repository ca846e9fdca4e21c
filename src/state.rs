//! The leadership state the elector publishes on a `watch` channel, and the status document
//! every output derives from it, checked against the lease validity when it is produced.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::time::Instant;

use crate::lease::unix_ms;

/// Where the replica is in the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No attempt has finished yet.
    Starting,
    /// Another replica leads, or nobody does.
    Follower,
    /// This replica holds a term (valid only until its `valid_until`).
    Leader,
    /// The term has ended and the replica is stopping its work and releasing.
    SteppingDown,
    /// The daemon has shut down.
    Stopped,
}

/// This replica's current term, as published.
#[derive(Debug, Clone, PartialEq)]
pub struct TermView {
    /// The fencing token of the term.
    pub fence: u64,
    /// When the reply that granted the term arrived.
    pub acquired_at: SystemTime,
    /// Before this monotonic instant no one else can hold the lease.
    pub valid_until: Instant,
    /// The same instant on the wall clock, for publishing.
    pub valid_until_wall: SystemTime,
}

/// What the elector knows, sent on the state channel at every change.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Where the replica is in the election.
    pub phase: Phase,
    /// The leader as last observed (this replica's identity while it leads).
    pub leader: Option<String>,
    /// The observed leader's fencing token (this term's while leading).
    pub fence: Option<u64>,
    /// This replica's term while it leads.
    pub term: Option<TermView>,
    /// When this was observed.
    pub observed_at: SystemTime,
    /// Whether the local service passes its health check (always true without one).
    pub healthy: bool,
    /// The leader's `publish.advertise` as last observed (this replica's own while leading).
    pub leader_address: Option<String>,
}

impl Snapshot {
    /// The state before the first attempt.
    pub fn starting(healthy: bool) -> Self {
        Snapshot {
            phase: Phase::Starting,
            leader: None,
            fence: None,
            term: None,
            observed_at: SystemTime::now(),
            healthy,
            leader_address: None,
        }
    }

    /// The term this replica may claim at `now`: its own term, only while still valid.
    pub fn valid_term(&self, now: Instant) -> Option<&TermView> {
        match (&self.phase, &self.term) {
            (Phase::Leader, Some(term)) if now < term.valid_until => Some(term),
            _ => None,
        }
    }

    /// True when this replica may claim leadership at `now`.
    pub fn is_leader_at(&self, now: Instant) -> bool {
        self.valid_term(now).is_some()
    }

    /// The status document as of `now`: a leader whose validity has passed is reported as
    /// `stepping_down`, never as leader, even if the elector has not caught up yet.
    pub fn document(&self, name: &str, identity: &str, now: Instant) -> StatusDoc {
        let valid = self.valid_term(now);
        let expired_claim = self.phase == Phase::Leader && valid.is_none();
        let (state, leader, fence, leader_address) = if expired_claim {
            (Phase::SteppingDown, None, None, None)
        } else {
            let address = self.leader.as_ref().and(self.leader_address.clone());
            (self.phase, self.leader.clone(), self.fence, address)
        };
        StatusDoc {
            name: name.to_owned(),
            identity: identity.to_owned(),
            state,
            is_leader: valid.is_some(),
            leader,
            fence: valid.map(|t| t.fence).or(fence),
            acquired_at: valid.map(|t| rfc3339(t.acquired_at)),
            acquired_at_ms: valid.map(|t| unix_ms(t.acquired_at)),
            lease_valid_until: valid.map(|t| rfc3339(t.valid_until_wall)),
            lease_valid_until_ms: valid.map(|t| unix_ms(t.valid_until_wall)),
            observed_at: rfc3339(self.observed_at),
            observed_at_ms: unix_ms(self.observed_at),
            healthy: self.healthy,
            leader_address,
        }
    }
}

/// The status document of the contract: the leader file and `GET /leader`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusDoc {
    pub name: String,
    pub identity: String,
    pub state: Phase,
    pub is_leader: bool,
    pub leader: Option<String>,
    pub fence: Option<u64>,
    pub acquired_at: Option<String>,
    pub acquired_at_ms: Option<u64>,
    pub lease_valid_until: Option<String>,
    pub lease_valid_until_ms: Option<u64>,
    pub observed_at: String,
    pub observed_at_ms: u64,
    pub healthy: bool,
    pub leader_address: Option<String>,
}

/// UTC, RFC 3339 with milliseconds.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// When the election loop last finished an attempt, successful or not, for `/healthz`.
#[derive(Debug, Clone)]
pub struct Progress {
    origin: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// Progress counted from now.
    pub fn new() -> Self {
        Progress {
            origin: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records that an attempt has just finished.
    pub fn touch(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the last finished attempt (or since start).
    pub fn since_last(&self) -> Duration {
        let last = self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        Instant::now().saturating_duration_since(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(valid_for: Duration) -> Snapshot {
        let now = SystemTime::now();
        Snapshot {
            phase: Phase::Leader,
            leader: Some("a".into()),
            fence: Some(7),
            term: Some(TermView {
                fence: 7,
                acquired_at: now,
                valid_until: Instant::now() + valid_for,
                valid_until_wall: now + valid_for,
            }),
            observed_at: now,
            healthy: true,
            leader_address: None,
        }
    }

    #[test]
    fn a_valid_leader_claims_with_its_term() {
        let doc = leader(Duration::from_secs(5)).document("n", "a", Instant::now());
        assert!(doc.is_leader);
        assert_eq!(doc.state, Phase::Leader);
        assert_eq!(doc.fence, Some(7));
        assert!(doc.lease_valid_until_ms.is_some());
        let json = serde_json::to_value(&doc).unwrap();
        assert_eq!(json["state"], "leader");
        assert!(json["acquired_at"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn an_expired_claim_is_never_published_as_leader() {
        let snap = leader(Duration::from_millis(10));
        let doc = snap.document("n", "a", Instant::now() + Duration::from_millis(11));
        assert!(!doc.is_leader);
        assert_eq!(doc.state, Phase::SteppingDown);
        assert_eq!(doc.leader, None);
        assert_eq!(doc.acquired_at_ms, None);
        assert_eq!(doc.lease_valid_until_ms, None);
    }
}
