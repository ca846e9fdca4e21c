//! Tests of the assignment: fixed vectors, balance, the cap, no members, and how many shards
//! a join or a leave moves.

use super::*;

/// The vectors below come from an independent implementation: the assignment written in
/// Python from the README's words, hashing with the xxHash reference C library (libxxhash
/// 0.8.1, `XXH3_64bits`, called through ctypes), not from this code.
#[test]
fn the_hash_is_xxh3_64_of_name_shard_and_identity() {
    let mut key = Vec::new();
    assert_eq!(rank_hash("orders", 0, "r1", &mut key), 0xcefba73e80a4b0df);
    assert_eq!(key, b"orders\n0\nr1");
    assert_eq!(rank_hash("orders", 15, "r3", &mut key), 0xe11714bd0a177a1d);
    assert_eq!(rank_hash("jobs", 7, "nœud-é", &mut key), 0x8b208e4da86e2a71);
}

fn targets(a: &Assignment) -> Vec<Option<&str>> {
    (0..a.shards()).map(|s| a.target(s)).collect()
}

fn all(names: &[&'static str]) -> Vec<Option<&'static str>> {
    names.iter().map(|&n| Some(n)).collect()
}

#[test]
fn fixed_vectors_from_the_reference_implementation() {
    let a = Assignment::compute("orders", 16, &["r1", "r2", "r3"], 0);
    let want = [
        "r3", "r3", "r3", "r2", "r2", "r3", "r2", "r3", "r1", "r1", "r1", "r2", "r1", "r2", "r3",
        "r2",
    ];
    assert_eq!(targets(&a), all(&want));
    let a = Assignment::compute("orders", 16, &["r1", "r2", "r3", "r4"], 0);
    let want = [
        "r3", "r3", "r3", "r2", "r2", "r3", "r2", "r1", "r1", "r1", "r1", "r2", "r4", "r4", "r4",
        "r4",
    ];
    assert_eq!(targets(&a), all(&want));
    // Members in any order: the assignment orders them by identity.
    let a = Assignment::compute("tenants", 10, &["pod-c", "pod-a", "pod-d", "pod-b"], 0);
    let want = [
        "pod-d", "pod-c", "pod-b", "pod-d", "pod-b", "pod-c", "pod-c", "pod-d", "pod-b", "pod-a",
    ];
    assert_eq!(targets(&a), all(&want));
    assert_eq!(a.members(), ["pod-a", "pod-b", "pod-c", "pod-d"]);
    // max_shards_per_replica 1: three shards, five members, three of them active.
    let a = Assignment::compute("cron", 3, &["a", "b", "c", "d", "e"], 1);
    assert_eq!(targets(&a), all(&["d", "b", "e"]));
    // More shards than members may take: the rest have no target.
    let a = Assignment::compute("cron", 5, &["a", "b"], 1);
    assert_eq!(targets(&a), [Some("b"), Some("a"), None, None, None]);
}

fn replicas(m: usize) -> Vec<String> {
    (0..m).map(|i| format!("replica-{i}")).collect()
}

#[test]
fn every_shard_has_a_target_and_none_owns_more_than_ceil_n_over_m() {
    for n in [1, 2, 7, 16, 64, 100, 256, 1024, 4096] {
        for m in [1, 2, 3, 5, 8, 16, 33] {
            let a = Assignment::compute("orders", n, &replicas(m), 0);
            let cap = n.div_ceil(m as u32);
            assert_eq!(a.cap(), cap);
            assert!(targets(&a).iter().all(Option::is_some), "{n}/{m}");
            let loads = a.loads();
            assert_eq!(loads.iter().sum::<u32>(), n, "{n}/{m}");
            assert!(loads.iter().all(|&l| l <= cap), "{n}/{m}: {loads:?}");
        }
    }
}

#[test]
fn max_shards_per_replica_bounds_each_member_and_makes_a_semaphore() {
    // shards: K, max 1: K members active, one shard each.
    for (k, m) in [(1, 4), (3, 5), (4, 4), (8, 20)] {
        let a = Assignment::compute("sem", k, &replicas(m), 1);
        assert_eq!(a.cap(), 1);
        let loads = a.loads();
        assert_eq!(loads.iter().filter(|&&l| l == 1).count(), k as usize);
        assert!(loads.iter().all(|&l| l <= 1));
    }
    // A cap above the fair share changes nothing.
    let fair = Assignment::compute("orders", 64, &replicas(3), 0);
    assert_eq!(Assignment::compute("orders", 64, &replicas(3), 30), fair);
    // A smaller one bounds everyone and leaves the rest without a target.
    let a = Assignment::compute("orders", 64, &replicas(3), 10);
    assert_eq!(a.loads(), [10, 10, 10]);
    assert_eq!(targets(&a).iter().filter(|t| t.is_none()).count(), 34);
}

#[test]
fn without_members_no_shard_has_a_target() {
    let a = Assignment::compute::<&str>("orders", 16, &[], 0);
    assert_eq!(a.cap(), 0);
    assert_eq!(targets(&a), vec![None; 16]);
    assert!(a.shards_of("r1").is_empty());
    assert_eq!(a.target(16), None);
}

#[test]
fn a_repeated_identity_counts_once() {
    let once = Assignment::compute("orders", 16, &["r1", "r2"], 0);
    assert_eq!(
        Assignment::compute("orders", 16, &["r2", "r1", "r2"], 0),
        once
    );
}

/// Shards moved by a join of one member, and the most moved by any one member's leave.
fn moves(n: u32, m: usize) -> (usize, usize) {
    let ids = replicas(m + 1);
    let before = Assignment::compute("orders", n, &ids[..m], 0);
    let joined = Assignment::compute("orders", n, &ids, 0).moved_from(&before);
    let left = (0..m)
        .map(|gone| {
            let rest: Vec<&String> = ids[..m].iter().filter(|i| **i != ids[gone]).collect();
            let after = Assignment::compute("orders", n, &rest, 0);
            let moved = after.moved_from(&before);
            // Every shard of the leaver moves.
            for s in before.shards_of(&ids[gone]) {
                assert!(moved.contains(&s), "{n}/{m}: shard {s} of the leaver");
            }
            moved.len()
        })
        .max()
        .unwrap_or(0);
    (joined.len(), left)
}

#[test]
fn a_join_or_a_leave_moves_at_most_one_and_a_half_times_the_ideal() {
    // Ideal: a newcomer's share n / (m + 1); a leaver's share n / m. (16/3: 6 and 7; 64/3: 18
    // and 25; 256/8: 42 and 43; 1024/16: 85 and 94, as BENCHMARKS.md "Shards" lists.)
    for (n, m) in [(16, 3), (64, 3), (256, 8), (1024, 16)] {
        let (joined, left) = moves(n, m);
        let ideal_join = f64::from(n) / (m + 1) as f64;
        let ideal_leave = f64::from(n) / m as f64;
        assert!(
            joined as f64 <= 1.5 * ideal_join,
            "{n}/{m}: a join moved {joined}"
        );
        assert!(
            left as f64 <= 1.5 * ideal_leave,
            "{n}/{m}: a leave moved {left}"
        );
        assert!(joined as f64 >= ideal_join.floor() && left as f64 >= ideal_leave.floor());
    }
}

#[test]
fn a_join_gives_the_newcomer_its_share() {
    let ids = replicas(4);
    let a = Assignment::compute("orders", 64, &ids, 0);
    assert_eq!(a.shards_of("replica-3").len(), 16);
}
