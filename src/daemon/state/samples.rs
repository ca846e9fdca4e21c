//! Snapshots and the status document's shape, for the outputs' tests (HTTP, metrics, the
//! leader file), which drive a hand-held state channel.

use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::time::Instant;

use super::{Phase, Snapshot, TermView};

pub(crate) const NAME: &str = "orders";
pub(crate) const ME: &str = "pod-a";

/// The keys of the status document, written once for these tests and the integration tests.
#[path = "../../../tests/support/doc_keys.rs"]
#[allow(unreachable_pub)]
mod doc_keys;
pub(crate) use doc_keys::DOC_KEYS;

pub(crate) fn leader(valid_for: Duration) -> Snapshot {
    let now = SystemTime::now();
    Snapshot {
        phase: Phase::Leader,
        leader: Some(ME.into()),
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
        priority: 0,
        sitting_out: false,
        shards: None,
    }
}

pub(crate) fn follower() -> Snapshot {
    Snapshot {
        phase: Phase::Follower,
        leader: Some("pod-b".into()),
        fence: Some(3),
        term: None,
        observed_at: SystemTime::now(),
        healthy: true,
        leader_address: None,
        priority: 0,
        sitting_out: false,
        shards: None,
    }
}

pub(crate) fn with_phase(phase: Phase) -> Snapshot {
    Snapshot {
        phase,
        ..Snapshot::starting(true)
    }
}

/// `doc` has exactly the keys of the status document, for [`NAME`] and [`ME`].
pub(crate) fn assert_document_shape(doc: &Value) {
    let object = doc.as_object().expect("an object");
    assert_eq!(object.len(), DOC_KEYS.len(), "{doc}");
    for key in DOC_KEYS {
        assert!(object.contains_key(key), "missing {key} in {doc}");
    }
    assert_eq!(doc["name"], NAME);
    assert_eq!(doc["identity"], ME);
    assert!(doc["observed_at"].as_str().unwrap().ends_with('Z'));
    assert!(doc["observed_at_ms"].as_u64().is_some());
}
