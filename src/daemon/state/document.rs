//! The status document (docs/outputs.md#the-status-document: the leader file and `GET /leader`),
//! derived from a [`Snapshot`] and checked against the lease validity when it is produced.

use std::time::SystemTime;

use serde::Serialize;
use tokio::time::Instant;

use super::{Phase, Snapshot};
use crate::lease::unix_ms;

impl Snapshot {
    /// The status document as of `now`: a leader whose validity has passed is reported as
    /// `stepping_down`, never as leader, even if the elector has not caught up yet.
    pub(crate) fn document(&self, name: &str, identity: &str, now: Instant) -> StatusDoc {
        if let Some(shards) = &self.shards {
            return self.sharded_document(name, identity, shards.count, now);
        }
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
            priority: self.priority,
            shards: None,
        }
    }

    /// The document of a sharded election: `leader` while it owns a valid shard, no leader
    /// or fence of its own, and the valid shards it owns.
    fn sharded_document(&self, name: &str, identity: &str, count: u32, now: Instant) -> StatusDoc {
        let owned: Vec<ShardDoc> = self
            .valid_shards(now)
            .into_iter()
            .map(|o| ShardDoc {
                shard: o.shard,
                fence: o.fence,
                acquired_at_ms: unix_ms(o.acquired_at),
                lease_valid_until_ms: unix_ms(o.valid_until_wall),
            })
            .collect();
        let state = match self.phase {
            _ if !owned.is_empty() => Phase::Leader,
            Phase::Leader => Phase::Follower,
            phase => phase,
        };
        StatusDoc {
            name: name.to_owned(),
            identity: identity.to_owned(),
            state,
            is_leader: !owned.is_empty(),
            leader: None,
            fence: None,
            acquired_at: None,
            acquired_at_ms: None,
            lease_valid_until: None,
            lease_valid_until_ms: None,
            observed_at: rfc3339(self.observed_at),
            observed_at_ms: unix_ms(self.observed_at),
            healthy: self.healthy,
            leader_address: None,
            priority: self.priority,
            shards: Some(ShardsDoc { count, owned }),
        }
    }
}

/// The status document's `shards` (README, "Shards").
#[derive(Debug, Clone, PartialEq, Serialize)]
#[allow(missing_docs)]
pub(crate) struct ShardsDoc {
    pub count: u32,
    pub owned: Vec<ShardDoc>,
}

/// One owned shard in the status document.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[allow(missing_docs)]
pub(crate) struct ShardDoc {
    pub shard: u32,
    pub fence: u64,
    pub acquired_at_ms: u64,
    pub lease_valid_until_ms: u64,
}

/// The status document (docs/outputs.md#the-status-document): the leader file and `GET /leader`;
/// its fields are the document's keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[allow(missing_docs)]
pub(crate) struct StatusDoc {
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
    pub priority: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardsDoc>,
}

/// UTC, RFC 3339 with milliseconds.
pub(super) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::state::samples::{leader, ME};
    use crate::daemon::state::Phase;
    use std::time::Duration;

    #[test]
    fn a_valid_leader_claims_with_its_term() {
        let doc = leader(Duration::from_secs(5)).document("n", ME, Instant::now());
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
        let doc = snap.document("n", ME, Instant::now() + Duration::from_millis(11));
        assert!(!doc.is_leader);
        assert_eq!(doc.state, Phase::SteppingDown);
        assert_eq!(doc.leader, None);
        assert_eq!(doc.acquired_at_ms, None);
        assert_eq!(doc.lease_valid_until_ms, None);
    }
}
