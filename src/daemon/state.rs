//! The leadership state the elector publishes on a `watch` channel, and the status document
//! every output derives from it, checked against the lease validity when it is produced.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

pub(crate) use crate::election::TermView;

/// Where the replica is in the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "daemon", derive(serde::Serialize))]
#[cfg_attr(feature = "daemon", serde(rename_all = "snake_case"))]
pub(crate) enum Phase {
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

/// What the elector knows, sent on the state channel at every change.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
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
    /// The leader's advertised address (`LeaseSpec::address`) as last observed; this
    /// replica's own while it leads.
    pub leader_address: Option<String>,
    /// This replica's `election.priority` (published in the status document).
    pub priority: u32,
    /// Sitting out (after a yield or a lost term): it does not contend, so it is nobody's
    /// successor meanwhile.
    pub sitting_out: bool,
    /// In a sharded election (README, "Shards"): how many shards, and those owned.
    pub shards: Option<ShardsView>,
}

/// The shards of a sharded election as this replica sees them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ShardsView {
    /// How many shards the election has.
    pub count: u32,
    /// The shards owned, in order.
    pub owned: Vec<crate::shard::OwnedShard>,
}

impl Snapshot {
    /// The state before the first attempt.
    pub(crate) fn starting(healthy: bool) -> Self {
        Snapshot {
            phase: Phase::Starting,
            leader: None,
            fence: None,
            term: None,
            observed_at: SystemTime::now(),
            healthy,
            leader_address: None,
            priority: 0,
            sitting_out: false,
            shards: None,
        }
    }

    /// Moves to `phase`, keeping the fields a phase carries consistent (a term only while
    /// leading) and stamping `observed_at`.
    pub(crate) fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
        self.observed_at = SystemTime::now();
        if phase != Phase::Leader {
            self.term = None;
        }
    }

    /// The term this replica may claim at `now`: its own term, only while still valid.
    pub(crate) fn valid_term(&self, now: Instant) -> Option<&TermView> {
        match (&self.phase, &self.term) {
            (Phase::Leader, Some(term)) if now < term.valid_until => Some(term),
            _ => None,
        }
    }

    /// The shards this replica may claim at `now`: those owned, each only while still valid.
    pub(crate) fn valid_shards(&self, now: Instant) -> Vec<&crate::shard::OwnedShard> {
        let owned = self.shards.iter().flat_map(|s| &s.owned);
        owned.filter(|o| now < o.valid_until).collect()
    }

    /// True when this replica may claim leadership at `now` (in a sharded election: while it
    /// owns a shard with a valid lease).
    pub(crate) fn is_leader_at(&self, now: Instant) -> bool {
        self.valid_term(now).is_some() || !self.valid_shards(now).is_empty()
    }
}

/// When the election loop last finished an attempt, successful or not, for `/healthz`.
#[derive(Debug, Clone)]
pub(crate) struct Progress {
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
    pub(crate) fn new() -> Self {
        Progress {
            origin: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records that an attempt has just finished.
    pub(crate) fn touch(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the last finished attempt (or since start).
    pub(crate) fn since_last(&self) -> Duration {
        let last = self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        Instant::now().saturating_duration_since(last)
    }
}

#[cfg(feature = "daemon")]
mod document;
#[cfg(test)]
pub(crate) mod samples;
#[cfg(feature = "daemon")]
pub(crate) use document::StatusDoc;
