//! Integration tests of the reentrant lock and its watchdog (`leaderd::lock`) against real
//! redis-server processes: reentrancy, exclusion of other holders, renewal past several
//! TTLs, and loss reported (before the validity ends) when the key vanishes or Redis is cut off.

mod support;

use std::time::Duration;

use leaderd::{LeaseClient, LeaseError, LeaseSpec};
use leaderd::{LeaseGuard, Locker, LossReason, WatchdogConfig};
use support::{wait_until, Proxy, RedisServer};
use tokio::time::{timeout, Instant};

/// Upper bound for any single await in these tests (they never hang).
const BOUND: Duration = Duration::from_secs(15);

fn spec(name: &str, holder: &str, lease: Duration) -> LeaseSpec {
    let mut s = LeaseSpec::new(name, holder, lease);
    s.command_timeout = Duration::from_millis(200);
    s.connect_timeout = Duration::from_millis(300);
    s
}

fn locker(url: &str, name: &str, holder: &str, lease: Duration) -> Locker<LeaseClient> {
    Locker::new(LeaseClient::connect(url, spec(name, holder, lease)).expect("valid url"))
}

/// Pretend the election already exists (the fencing counter is there), so that the first
/// lock is not quarantined for a lease duration.
fn seed_fence(redis: &RedisServer, name: &str) {
    let key = LeaseSpec::new(name, "x", Duration::from_secs(1))
        .keys()
        .fence;
    assert_eq!(redis.cmd(&["SET", &key, "1000"]), "OK");
}

fn lock_key(name: &str) -> String {
    LeaseSpec::new(name, "x", Duration::from_secs(1))
        .keys()
        .lock
}

async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {BOUND:?}"))
}

async fn lock_now(l: &Locker<LeaseClient>) -> LeaseGuard<LeaseClient> {
    bounded("lock", l.lock(Instant::now() + Duration::from_secs(5)))
        .await
        .expect("lock")
}

/// Not lost yet (without waiting).
fn not_lost(g: &LeaseGuard<LeaseClient>) -> bool {
    g.loss_watch().borrow().is_none()
}

/// The same Locker locks twice (count 2); the first release keeps the lease, the second
/// frees it. Another Locker is refused meanwhile (`Held`, with who and how long), and can
/// take it afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_lock_counts_holds_and_excludes_others() {
    let redis = RedisServer::start();
    seed_fence(&redis, "reentrant");
    let key = lock_key("reentrant");
    let a = locker(&redis.url(), "reentrant", "a", Duration::from_secs(5));
    let b = locker(&redis.url(), "reentrant", "b", Duration::from_secs(5));

    let g1 = lock_now(&a).await;
    // A clone of the Locker is the same holder; try_lock reenters too.
    let g2 = bounded("try_lock", a.clone().try_lock())
        .await
        .expect("reenter");
    assert_eq!(a.hold_count().await, 2);
    assert_eq!(g1.fence(), g2.fence());
    assert!(g1.is_valid() && g2.is_valid());

    match bounded("try_lock", b.try_lock()).await {
        Err(LeaseError::Held(h)) => {
            assert_eq!(support::held_by(&h), Some("a"));
            assert_eq!(support::fence_of(&h), g1.fence());
            let left = h.remaining().expect("a TTL");
            assert!(left > Duration::ZERO && left <= Duration::from_secs(5));
        }
        Err(e) => panic!("expected Held, got {e:?}"),
        Ok(g) => panic!("b took a held lease (fence {})", g.fence()),
    }
    assert_eq!(b.hold_count().await, 0);

    assert_eq!(bounded("release", g1.release()).await, Ok(true));
    assert_eq!(a.hold_count().await, 1);
    assert_eq!(redis.cmd(&["HGET", &key, "holder"]), "a");
    assert_eq!(redis.cmd(&["HGET", &key, "fence"]), g2.fence().to_string());
    assert!(matches!(
        bounded("try_lock", b.try_lock()).await,
        Err(LeaseError::Held(_))
    ));
    assert!(g2.is_valid());

    let fence_a = g2.fence();
    assert_eq!(bounded("release", g2.release()).await, Ok(true));
    assert_eq!(a.hold_count().await, 0);
    assert_eq!(redis.cmd(&["EXISTS", &key]), "0");

    let gb = bounded("try_lock", b.try_lock())
        .await
        .expect("b takes the freed lease");
    assert!(gb.fence() > fence_a);
    assert_eq!(redis.cmd(&["HGET", &key, "holder"]), "b");
    // Now a is the one refused.
    assert!(matches!(
        bounded("try_lock", a.try_lock()).await,
        Err(LeaseError::Held(_))
    ));
    assert_eq!(bounded("release", gb.release()).await, Ok(true));
}

/// A Locker waiting in `lock` takes the lease as soon as the other holder releases it, and
/// a guard dropped without `release` frees the lease in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_lock_takes_over_on_release_and_drop_releases() {
    let redis = RedisServer::start();
    seed_fence(&redis, "handover");
    let key = lock_key("handover");
    let a = locker(&redis.url(), "handover", "a", Duration::from_secs(10));
    let b = locker(&redis.url(), "handover", "b", Duration::from_secs(10));

    let ga = lock_now(&a).await;
    let fence_a = ga.fence();
    let b2 = b.clone();
    let waiter = tokio::spawn(async move {
        let r = b2.lock(Instant::now() + Duration::from_secs(8)).await;
        (r, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "b got the lease while a held it");
    let released = Instant::now();
    assert_eq!(bounded("release", ga.release()).await, Ok(true));
    let (r, got) = bounded("waiter", waiter).await.unwrap();
    let gb = r.expect("b takes over");
    assert!(gb.fence() > fence_a);
    assert!(
        got - released < Duration::from_millis(500),
        "b took {:?} after the release (its retry is 3.3s)",
        got - released
    );
    assert_eq!(b.hold_count().await, 1);

    drop(gb);
    let freed = wait_until(Duration::from_secs(3), Duration::from_millis(20), || {
        (redis.cmd(&["EXISTS", &key]) == "0").then_some(())
    });
    assert!(freed.is_some(), "a dropped guard did not release the lease");
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut count = b.hold_count().await;
    while count != 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        count = b.hold_count().await;
    }
    assert_eq!(count, 0);
}

/// The watchdog keeps a 1s lease alive for 3.5s: still valid, same fence in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_the_lease_past_several_ttls() {
    let redis = RedisServer::start();
    seed_fence(&redis, "watchdog");
    let key = lock_key("watchdog");
    let lease = Duration::from_secs(1);
    let a = locker(&redis.url(), "watchdog", "a", lease);
    let b = locker(&redis.url(), "watchdog", "b", lease);

    let g = lock_now(&a).await;
    let fence = g.fence();
    let first_valid = g.valid_until().unwrap();
    let start = Instant::now();
    for _ in 0..7 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(not_lost(&g), "reported lost at {:?}", start.elapsed());
        assert!(matches!(
            bounded("try_lock", b.try_lock()).await,
            Err(LeaseError::Held(_))
        ));
    }
    assert!(start.elapsed() >= Duration::from_millis(3500));
    assert!(g.is_valid());
    assert!(g.valid_until().unwrap() > first_valid + Duration::from_secs(2));
    assert_eq!(g.fence(), fence);
    assert_eq!(redis.cmd(&["HGET", &key, "holder"]), "a");
    assert_eq!(redis.cmd(&["HGET", &key, "fence"]), fence.to_string());
    let pttl: i64 = redis.cmd(&["PTTL", &key]).parse().unwrap();
    assert!(pttl > 0 && pttl <= 1000, "PTTL {pttl}");
    assert_eq!(bounded("release", g.release()).await, Ok(true));
    assert_eq!(redis.cmd(&["EXISTS", &key]), "0");
}

/// The key deleted behind the holder's back: `lost()` resolves with `Lost` at the next
/// renew, the guard is no longer valid, and the Locker can lock again for a new term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_reports_a_deleted_key_as_lost() {
    let redis = RedisServer::start();
    seed_fence(&redis, "deleted");
    let key = lock_key("deleted");
    let a = locker(&redis.url(), "deleted", "a", Duration::from_secs(1));

    let mut g = lock_now(&a).await;
    let fence = g.fence();
    assert_eq!(redis.cmd(&["DEL", &key]), "1");
    let deleted = Instant::now();
    let reason = bounded("lost", g.lost()).await;
    assert_eq!(reason, LossReason::Lost);
    assert!(
        deleted.elapsed() < Duration::from_millis(1000),
        "loss reported {:?} after the DEL (renew every 333ms)",
        deleted.elapsed()
    );
    assert!(!g.is_valid());
    // lost() keeps answering.
    assert_eq!(bounded("lost", g.lost()).await, LossReason::Lost);

    // The Locker does not reenter a lost hold: it takes a new term.
    let g2 = lock_now(&a).await;
    assert!(g2.fence() > fence);
    assert!(g2.is_valid());
    assert_eq!(bounded("release", g.release()).await, Ok(false));
    assert!(
        g2.is_valid(),
        "releasing the lost guard touched the new term"
    );
    assert_eq!(redis.cmd(&["HGET", &key, "fence"]), g2.fence().to_string());
    assert_eq!(bounded("release", g2.release()).await, Ok(true));
}

async fn loss_is_reported_before_validity_ends(
    config: WatchdogConfig,
    cut_off: impl FnOnce(&Proxy),
    name: &str,
) {
    let redis = RedisServer::start();
    seed_fence(&redis, name);
    let proxy = Proxy::start(redis.addr());
    let lease = Duration::from_secs(1);
    let client = LeaseClient::connect(&proxy.url(), spec(name, "a", lease)).unwrap();
    let a = Locker::with_config(client, config);

    let mut g = lock_now(&a).await;
    // Let one renew succeed first, so the lost term is a renewed one.
    tokio::time::sleep(config.renew_every + Duration::from_millis(100)).await;
    assert!(not_lost(&g));
    cut_off(&proxy);
    let reason = bounded("lost", g.lost()).await;
    let reported = Instant::now();
    let valid_until = g.valid_until().unwrap();
    assert!(
        matches!(reason, LossReason::Deadline | LossReason::Lost),
        "{reason:?}"
    );
    assert!(
        reported < valid_until,
        "{name}: loss reported {:?} after the lease validity ended",
        reported - valid_until
    );
    assert!(!g.is_valid());
    proxy.restore();
    proxy.blackhole(false);
}

/// Redis cut off (connections closed and refused): the watchdog reports the loss before the
/// guard's validity passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_reports_loss_when_redis_is_cut_off() {
    let config = WatchdogConfig::for_lease(Duration::from_secs(1));
    loss_is_reported_before_validity_ends(config, Proxy::cut, "cut").await;
}

/// Redis hung (nothing answers, each renew times out), with a renew interval close to the
/// renew deadline: the loss is still reported before the validity passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_reports_loss_when_redis_hangs() {
    let config = WatchdogConfig {
        renew_every: Duration::from_millis(400),
        renew_deadline: Duration::from_millis(700),
        retry: Duration::from_millis(200),
    };
    loss_is_reported_before_validity_ends(config, |p| p.blackhole(true), "hung").await;
}
