//! Node counts, timeouts, the reported holder and the errors, without Redis.

use super::*;
use crate::conn::{FailureKind, RedisFailure};
use crate::lease::Holder;

fn client(n: usize) -> RedlockClient {
    let urls: Vec<String> = (0..n)
        .map(|i| format!("redis://127.0.0.1:{}/0", 1 + i))
        .collect();
    RedlockClient::connect(&urls, LeaseSpec::new("x", "me", Duration::from_secs(10)))
        .expect("client")
}

fn held(who: Option<&str>, fence: u64, ms: Option<u64>) -> Observed {
    let remaining = ms.map(Duration::from_millis);
    match who {
        Some(who) => Observed::Held(Holder {
            holder: who.to_owned(),
            fence,
            remaining,
            address: None,
        }),
        None => Observed::Quarantined { fence, remaining },
    }
}

fn who(seen: &Observed) -> (Option<&str>, u64) {
    match seen {
        Observed::Held(h) => (Some(h.holder.as_str()), h.fence),
        Observed::Quarantined { fence, .. } => (None, *fence),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn needs_an_odd_number_of_at_least_three_nodes() {
    let spec = LeaseSpec::new("x", "me", Duration::from_secs(10));
    for n in [0, 1, 2, 4, 6] {
        let urls = vec!["redis://127.0.0.1:1/0"; n];
        let err = RedlockClient::connect(&urls, spec.clone()).err().unwrap();
        assert!(err.to_string().contains("odd number >= 3"), "{err}");
    }
    let c = client(5);
    assert_eq!((c.len(), c.quorum()), (5, 3));
    assert_eq!(client(3).quorum(), 2);
}

#[test]
fn node_timeout_is_a_tenth_of_the_lease_at_most() {
    let mut spec = LeaseSpec::new("x", "me", Duration::from_secs(2));
    assert_eq!(default_node_timeout(&spec), Duration::from_millis(200));
    spec.command_timeout = Duration::from_millis(150);
    assert_eq!(default_node_timeout(&spec), Duration::from_millis(150));
    let c = client(3);
    assert_eq!(c.node_timeout(), Duration::from_millis(500));
    assert_eq!(
        c.per_node(Duration::from_millis(100)),
        Duration::from_millis(100)
    );
    assert_eq!(c.per_node(Duration::from_secs(5)), c.node_timeout());
}

#[test]
fn summary_reports_the_majority_holder_and_when_a_majority_frees() {
    let c = client(3);
    let h = c.summarize(
        &[
            held(Some("a"), 7, Some(900)),
            held(Some("a"), 9, Some(1000)),
            held(Some("a"), 9, Some(800)),
        ],
        0,
    );
    assert_eq!(h, held(Some("a"), 9, Some(900)));
    // One node down: a majority is free when both live ones are.
    let h = c.summarize(
        &[held(Some("a"), 9, Some(500)), held(Some("a"), 9, Some(700))],
        0,
    );
    assert_eq!(h.remaining(), Some(Duration::from_millis(700)));
    // A split vote: nobody can be leading; a majority frees with the sooner of the others.
    let h = c.summarize(
        &[held(Some("b"), 3, Some(400)), held(None, 5, Some(300))],
        1,
    );
    assert_eq!(who(&h), (None, 5));
    assert_eq!(h.remaining(), Some(Duration::from_millis(300)));
    let h = c.summarize(
        &[held(Some("x"), 3, Some(400)), held(Some("y"), 4, None)],
        1,
    );
    assert_eq!(who(&h), (None, 0));
    // Seen on one node, one silent: it may hold a majority; with the free node, a
    // majority frees when it does.
    let h = c.summarize(&[held(Some("a"), 3, Some(400))], 1);
    assert_eq!(who(&h), (Some("a"), 3));
    assert_eq!(h.remaining(), Some(Duration::from_millis(400)));
    // Quarantined on a majority.
    let h = c.summarize(&[held(None, 5, Some(300)), held(None, 6, Some(300))], 1);
    assert_eq!(who(&h), (None, 6));
    // A reservation seen on a majority is reported as such.
    let reserved = Observed::Reserved {
        for_identity: "b".into(),
        fence: 4,
        remaining: Some(Duration::from_millis(200)),
    };
    let h = c.summarize(&[reserved.clone(), reserved], 1);
    assert!(
        matches!(h, Observed::Reserved { ref for_identity, fence: 4, .. } if for_identity == "b")
    );
}

#[test]
fn errors_name_the_nodes_without_credentials() {
    let spec = LeaseSpec::new("x", "me", Duration::from_secs(10));
    let c = RedlockClient::connect(
        &[
            "redis://:secret@127.0.0.1:1/0",
            "redis://127.0.0.1:2/0",
            "redis://127.0.0.1:3/0",
        ],
        spec,
    )
    .unwrap();
    let failure = |kind| LeaseError::Unavailable(RedisFailure::new(kind, "refused"));
    let err = c.unavailable(
        "acquire",
        1,
        &[
            (0, failure(FailureKind::Connection)),
            (2, failure(FailureKind::Connection)),
        ],
    );
    let text = err.to_string();
    assert!(!text.contains("secret"), "{text}");
    assert!(text.contains("127.0.0.1:1: "), "{text}");
    assert!(text.contains("1 of 3 nodes, a majority of 2"), "{text}");
    assert_eq!(err.redis_kind(), Some(FailureKind::Connection));
    let wrong = LeaseError::WrongType { key: "k".into() };
    let all_wrong: Vec<_> = (0..3).map(|i| (i, wrong.clone())).collect();
    assert_eq!(c.unavailable("acquire", 0, &all_wrong), wrong);
}
