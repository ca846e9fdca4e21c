//! Who may take a free shard: the target at once, at an expiry the target without the owner
//! that let it expire at once and the others after half a `retry_period`, anybody after a
//! `retry_period` otherwise.

use super::*;
use crate::lease::Holder;

const RETRY: Duration = Duration::from_millis(200);

fn held(by: &str) -> Observed {
    Observed::Held(Holder {
        holder: by.into(),
        fence: 7,
        remaining: Some(Duration::from_millis(500)),
        address: None,
    })
}

/// `me`'s verdict on shard 0 seen as `seen` at `now`, targets given by `target(identity)`.
fn judge(v: &mut Vacancies, seen: &Observed, now: Instant, me: &str, target: &str) -> Verdict {
    let mut without = |dead: &str| Some(if dead.is_empty() { "dead" } else { target }.to_owned());
    v.judge((0, seen), (now, now), me, RETRY, &mut without)
}

#[test]
fn a_held_shard_is_tried_when_its_ttl_runs_out() {
    let (mut v, now) = (Vacancies::default(), Instant::now());
    let at = now + Duration::from_millis(501);
    assert_eq!(
        judge(&mut v, &held("x"), now, "a", "a"),
        Verdict::Wait(Some(at))
    );
}

#[test]
fn at_an_expiry_the_target_without_the_dead_owner_takes_it_at_once() {
    let (mut v, now) = (Vacancies::default(), Instant::now());
    judge(&mut v, &held("dead"), now, "a", "a");
    assert_eq!(
        judge(&mut v, &Observed::Vacant, now, "a", "a"),
        Verdict::Take
    );
}

#[test]
fn at_an_expiry_the_others_wait_half_a_retry_period() {
    let (mut v, now) = (Vacancies::default(), Instant::now());
    judge(&mut v, &held("dead"), now, "b", "a");
    let anyone = now + RETRY / 2;
    assert_eq!(
        judge(&mut v, &Observed::Vacant, now, "b", "a"),
        Verdict::Wait(Some(anyone))
    );
    assert_eq!(
        judge(&mut v, &Observed::Vacant, anyone, "b", "a"),
        Verdict::Take
    );
}

#[test]
fn a_shard_vacant_without_an_owner_before_waits_a_retry_period_for_the_others() {
    let (mut v, now) = (Vacancies::default(), Instant::now());
    // Its target (as the assignment is) is "dead"; "b" waits a whole retry_period.
    let anyone = now + RETRY;
    assert_eq!(
        judge(&mut v, &Observed::Vacant, now, "b", "b"),
        Verdict::Wait(Some(anyone))
    );
    assert_eq!(
        judge(&mut v, &Observed::Vacant, anyone, "b", "b"),
        Verdict::Take
    );
}

#[test]
fn the_assignment_without_an_identity_is_computed_once_and_only_for_members() {
    let a = Assignment::compute("w", 16, &["a", "b", "c"], 0);
    let mut w = Without::new(&a, "w", 0);
    let bc = Assignment::compute("w", 16, &["b", "c"], 0);
    for s in 0..16 {
        assert_eq!(w.target(s, "a").as_deref(), bc.target(s));
        assert_eq!(w.target(s, "zz").as_deref(), a.target(s));
        assert_eq!(w.target(s, "").as_deref(), a.target(s));
    }
    assert_eq!(w.computed.len(), 1);
}

#[test]
fn a_resting_shard_is_not_taken_before_its_rest_ends() {
    let (mut v, now) = (Vacancies::default(), Instant::now());
    let until = now + RETRY;
    v.rest(0, until);
    assert_eq!(
        judge(&mut v, &Observed::Vacant, now, "a", "a"),
        Verdict::Wait(Some(until))
    );
    assert_eq!(
        judge(&mut v, &Observed::Vacant, until, "a", "a"),
        Verdict::Take
    );
}

#[test]
fn a_lease_run_out_is_tried_before_a_read_by_the_target_without_its_holder_only() {
    let (mut v, now) = (Vacancies::default(), Instant::now());
    judge(&mut v, &held("dead"), now, "a", "a");
    let target = |_: u32, holder: &str| Some(if holder == "dead" { "a" } else { "x" }.to_owned());
    assert!(v.expired(now, "a", target).is_empty(), "not run out yet");
    let out = now + Duration::from_millis(500);
    assert_eq!(v.expired(out, "a", target), [0]);
    assert!(v.expired(out, "b", target).is_empty(), "not b's");
    v.rest(0, out + RETRY);
    assert!(v.expired(out, "a", target).is_empty(), "resting");
}

/// A shard taken says how it became free, as a single lease's term does
/// (`leaderd_leader_transitions_total{began}`).
#[test]
fn a_shard_taken_says_how_it_became_free() {
    let (mut v, now) = (Vacancies::default(), Instant::now());
    let ms = Duration::from_millis;
    assert_eq!(v.taken(0), Began::First, "nothing known");
    let reserved = Observed::Reserved {
        for_identity: "a".into(),
        fence: 7,
        remaining: Some(ms(500)),
    };
    judge(&mut v, &reserved, now, "a", "a");
    assert_eq!(v.taken(0), Began::Handover);
    judge(&mut v, &held("x"), now, "a", "a");
    judge(&mut v, &Observed::Vacant, now + ms(100), "a", "a");
    assert_eq!(v.taken(0), Began::Release, "vacant before its expiry");
    judge(&mut v, &held("x"), now, "a", "a");
    judge(&mut v, &Observed::Vacant, now + ms(600), "a", "a");
    assert_eq!(v.taken(0), Began::Expiry, "vacant after its expiry");
    let quarantined = Observed::Quarantined {
        fence: 7,
        remaining: Some(ms(500)),
    };
    judge(&mut v, &quarantined, now, "a", "a");
    judge(&mut v, &Observed::Vacant, now + ms(600), "a", "a");
    assert_eq!(v.taken(0), Began::Quarantine);
    assert_eq!(
        v.taken(0),
        Began::First,
        "its own term ended: nothing known"
    );
}
