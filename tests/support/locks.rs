//! Helpers of the lock tests: a lock call that must end.

use std::time::Duration;

use leaderd::{Lease, LeaseGuard, Locker};

use super::RedisServer;
use tokio::time::{timeout, Instant};

/// How long a lock test waits for any one call before it fails.
pub const BOUND: Duration = Duration::from_secs(15);

/// `f`, which must finish within [`BOUND`] (a panic naming `what` otherwise).
pub async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {BOUND:?}"))
}

/// Takes the lock, waiting up to 5 s for it.
pub async fn lock_now<L: Lease>(l: &Locker<L>) -> LeaseGuard<L> {
    bounded("lock", l.lock(Instant::now() + Duration::from_secs(5)))
        .await
        .expect("lock")
}

/// Successful calls of one command (`calls - failed_calls` of `INFO commandstats`; 0 when
/// never called): a refused probe or a `NOSCRIPT` does not count.
pub fn calls(redis: &RedisServer, command: &str) -> u64 {
    let stats = redis.cmd(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = stats.lines().find_map(|l| l.trim().strip_prefix(&prefix)) else {
        return 0;
    };
    let field = |name: &str| {
        line.split(',')
            .find_map(|f| f.strip_prefix(name))
            .map_or(0, |n| n.parse::<u64>().expect("a count"))
    };
    field("calls=") - field("failed_calls=")
}
