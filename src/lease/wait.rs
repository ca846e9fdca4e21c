//! Waiting for a lease: the blocking acquire of any backend, with its wake-ups, jitter and
//! backoff.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::{Acquire, Lease, LeaseError, Observed, Term};

/// The blocking acquire of any lease backend: attempts until the lease is ours or `deadline`
/// passes, sleeping until the holder's lease runs out (or a jittered `retry` if sooner) and
/// waking at once when a release is published.
///
/// # Errors
/// `Timeout` (with the last holder seen) when the deadline passes; `WrongType` at once;
/// Redis errors are retried until the deadline.
pub(crate) async fn wait_for_lease<L: Lease>(
    lease: &L,
    deadline: Instant,
    retry: Duration,
) -> Result<Term, LeaseError> {
    let mut releases = lease.watch_releases();
    let mut last_seen = None;
    let mut failures = 0u32;
    loop {
        let wait = match lease.try_acquire(lease.default_budget()).await {
            Ok(Acquire::Acquired(term)) => return Ok(term),
            Ok(Acquire::Denied(seen)) => {
                failures = 0;
                let mine = seen
                    .holder()
                    .is_some_and(|h| h.holder == lease.spec().holder);
                if mine && lease.release_strays(lease.default_budget()).await > 0 {
                    continue; // a grant of ours whose reply never came: freed, try again
                }
                let wait = wait_for_holder(&seen, jittered(retry, 0.2));
                last_seen = Some(seen);
                wait
            }
            Err(e @ LeaseError::WrongType { .. }) => return Err(e),
            Err(_) => {
                failures += 1;
                backoff(retry, failures)
            }
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(LeaseError::Timeout { last_seen });
        }
        tokio::select! {
            _ = tokio::time::sleep_until((now + wait).min(deadline)) => {}
            _ = releases.changed() => {}
        }
    }
}

/// How long a candidate waits before its next attempt after seeing `seen`: until the lease
/// expires in Redis (plus a millisecond) if that comes before `retry`.
pub(crate) fn wait_for_holder(seen: &Observed, retry: Duration) -> Duration {
    if *seen == Observed::Vacant {
        return retry; // seen by one who does not contend now (sitting out, unhealthy)
    }
    match seen.remaining() {
        Some(left) => retry.min(left + Duration::from_millis(1)),
        None => retry,
    }
}

/// `base * (1 + U(0, jitter))`, so that candidates do not retry in lockstep.
pub(crate) fn jittered(base: Duration, jitter: f64) -> Duration {
    let factor = 1.0 + rand::rng().random_range(0.0..=jitter.max(0.0));
    base.mul_f64(factor)
}

/// Exponential backoff after `failures` failed attempts in a row: from `base / 8`, doubling,
/// never above `base`, jittered.
pub(crate) fn backoff(base: Duration, failures: u32) -> Duration {
    let step = (base / 8).saturating_mul(1 << failures.min(3).saturating_sub(1));
    jittered(step.min(base), 0.2).min(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_candidate_wakes_at_expiry_when_sooner() {
        let holder = Observed::Quarantined {
            fence: 1,
            remaining: Some(Duration::from_millis(40)),
        };
        assert_eq!(
            wait_for_holder(&holder, Duration::from_secs(2)),
            Duration::from_millis(41)
        );
        let no_ttl = Observed::Quarantined {
            fence: 1,
            remaining: None,
        };
        assert_eq!(
            wait_for_holder(&no_ttl, Duration::from_secs(2)),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn an_observer_of_a_vacant_lease_waits_a_retry() {
        let retry = Duration::from_secs(2);
        assert_eq!(wait_for_holder(&Observed::Vacant, retry), retry);
    }

    #[test]
    fn backoff_grows_and_stays_below_base() {
        let base = Duration::from_secs(2);
        assert!(backoff(base, 1) < backoff(base, 3));
        for n in 0..40 {
            assert!(backoff(base, n) <= base);
        }
    }
}
