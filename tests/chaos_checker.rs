//! The chaos checker's reading of crafted log lines: an acquire whose reply came after its
//! validity (issue 13, item 7) is not a term, and is not read as a fence going backwards.

mod support;

use support::daemon::parse_json_lines;
use support::safety::{check_logs_with, never_valid_from_logs, Fences};
use support::{check_logs, terms_from_logs};

/// r0 leads fence 10 and steps down at its deadline. r1 sends an acquire at 2000, Redis
/// grants it fence 11, and r1 is frozen until 5000; the grant expires, r2 acquires fence 12 at
/// 3001 and leads past 5000. r1 wakes, reads the reply and logs `acquired` with a validity
/// already in the past (2978 < 5000), then steps down 5 ms later: never a term.
const R0: &str = r#"
{"level":"INFO","event":"acquired","fence":10,"acquired_at_ms":1000,"lease_valid_until_ms":1950}
{"level":"DEBUG","event":"renewed","fence":10,"lease_valid_until_ms":1950}
{"level":"INFO","event":"stepped_down","fence":10,"reason":"deadline","lease_valid_until_ms":1950,"ended_at_ms":1900}
"#;
const R2: &str = r#"
{"level":"INFO","event":"acquired","fence":12,"acquired_at_ms":3001,"lease_valid_until_ms":3980}
{"level":"DEBUG","event":"renewed","fence":12,"lease_valid_until_ms":5900}
{"level":"INFO","event":"stepped_down","fence":12,"reason":"shutdown","lease_valid_until_ms":5900,"ended_at_ms":6000}
"#;

fn r1(valid_until_ms: u64) -> String {
    format!(
        r#"
{{"level":"INFO","event":"acquired","fence":11,"acquired_at_ms":5000,"lease_valid_until_ms":{valid_until_ms}}}
not json: a plain text line is skipped
{{"level":"INFO","event":"stepped_down","fence":11,"reason":"deadline","lease_valid_until_ms":{valid_until_ms},"ended_at_ms":5005}}
"#
    )
}

fn logs(r1_text: &str) -> Vec<(String, Vec<serde_json::Value>)> {
    [("r0", R0), ("r1", r1_text), ("r2", R2)]
        .iter()
        .map(|(who, text)| (who.to_string(), parse_json_lines(text)))
        .collect()
}

#[test]
fn an_acquire_whose_reply_came_after_its_validity_is_not_a_term() {
    let logs = logs(&r1(2978));
    let terms = check_logs(&logs).unwrap_or_else(|e| panic!("{e}"));
    let fences: Vec<u64> = terms.iter().map(|t| t.fence).collect();
    assert_eq!(fences, [10, 12]);
    let never = never_valid_from_logs(&logs);
    assert_eq!(never.len(), 1, "{never:?}");
    assert_eq!((never[0].replica.as_str(), never[0].fence), ("r1", 11));
    assert_eq!(never[0].claim_end_ms(), 2978);
    assert_eq!(terms_from_logs(&logs), terms);
}

#[test]
fn a_validity_equal_to_the_reply_time_was_never_valid_either() {
    let logs = logs(&r1(5000));
    assert!(check_logs(&logs).is_ok());
    assert_eq!(never_valid_from_logs(&logs).len(), 1);
}

/// The control: the same line with a validity in the future is a real claim, and then it is a
/// fence regression and an overlap with r2's term.
#[test]
fn the_same_acquire_with_a_future_validity_is_a_violation() {
    let logs = logs(&r1(5900));
    let err = check_logs(&logs).expect_err("a real claim of fence 11 inside fence 12's term");
    assert!(err.contains("fence regression"), "{err}");
    assert!(err.contains("overlap of"), "{err}");
    assert!(never_valid_from_logs(&logs).is_empty());
}

/// A never-valid acquire whose fence has a later line extending it (which a correct leaderd
/// never writes) is a term again, so such a bug cannot hide behind the rule.
#[test]
fn a_renewed_line_makes_a_late_acquire_a_term_again() {
    let mut text = r1(2978);
    text.push_str(r#"{"level":"DEBUG","event":"renewed","fence":11,"lease_valid_until_ms":5900}"#);
    let logs = logs(&text);
    assert!(check_logs(&logs).is_err());
    assert!(never_valid_from_logs(&logs).is_empty());
}

/// A sharded election: claims are grouped by shard. Two shards held at once by two replicas
/// is no overlap, and one counter numbers them both; two claims of one shard at once are.
const SHARDED: &str = r#"
{"level":"INFO","event":"acquired","shard":0,"fence":20,"acquired_at_ms":1000,"lease_valid_until_ms":2000}
{"level":"DEBUG","event":"renewed","shard":0,"fence":20,"lease_valid_until_ms":3000}
{"level":"INFO","event":"stepped_down","shard":0,"fence":20,"reason":"rebalance","lease_valid_until_ms":3000,"ended_at_ms":2500}
"#;

fn sharded(other: &str) -> Vec<(String, Vec<serde_json::Value>)> {
    [("r0", SHARDED), ("r1", other)]
        .iter()
        .map(|(who, text)| (who.to_string(), parse_json_lines(text)))
        .collect()
}

#[test]
fn shards_are_checked_each_on_its_own() {
    // r1 holds shard 1 while r0 holds shard 0, then takes shard 0 when r0 handed it over.
    let ok = r#"
{"level":"INFO","event":"acquired","shard":1,"fence":21,"acquired_at_ms":1100,"lease_valid_until_ms":4000}
{"level":"INFO","event":"acquired","shard":0,"fence":22,"acquired_at_ms":2500,"lease_valid_until_ms":4000}
{"level":"DEBUG","event":"renewed","shard":0,"fence":22,"lease_valid_until_ms":5000}
"#;
    let terms = check_logs(&sharded(ok)).unwrap_or_else(|e| panic!("{e}"));
    let shards: Vec<(Option<u64>, u64)> = terms.iter().map(|t| (t.shard, t.fence)).collect();
    assert_eq!(shards, [(Some(0), 20), (Some(1), 21), (Some(0), 22)]);
    assert_eq!(terms[2].last_valid_until_ms, 5000);

    // The same shard 0 taken before r0's claim ended: an overlap of that shard only.
    let early = ok.replace("\"acquired_at_ms\":2500", "\"acquired_at_ms\":2400");
    let err = check_logs(&sharded(&early)).expect_err("shard 0 claimed twice at 2400");
    assert!(err.contains("overlap of 100 ms"), "{err}");
    assert!(err.contains("r0 shard 0 fence 20"), "{err}");
    assert_eq!(err.matches("overlap of").count(), 1, "{err}");

    // One counter numbers every shard's terms: a fence granted twice is a violation even
    // across shards.
    let reused = ok.replace("\"fence\":21", "\"fence\":20");
    let err = check_logs(&sharded(&reused)).expect_err("fence 20 acquired twice");
    assert!(err.contains("fence 20 acquired 2 times"), "{err}");
    // In Redlock each node counts: two shards' terms may share a fence, one shard's not.
    check_logs_with(&sharded(&reused), Fences::PerLease).unwrap_or_else(|e| panic!("{e}"));
    let twice = ok.replace("\"fence\":22", "\"fence\":20");
    let err = check_logs_with(&sharded(&twice), Fences::PerLease).expect_err("shard 0 twice");
    assert!(err.contains("fence 20 acquired 2 times"), "{err}");

    // A fence going back within one shard is a regression; across shards it is not.
    let back = ok.replace("\"fence\":22", "\"fence\":19");
    let err = check_logs(&sharded(&back)).expect_err("shard 0: fence 19 after 20");
    assert!(err.contains("fence regression"), "{err}");
}
