//! Integration tests of the plain lock (`Locker::plain`, no fence) on Redis 7.0 and on
//! Valkey 9.1 (real servers): mutual exclusion and reentrancy, renewal by the watchdog,
//! `lost()` when the key is deleted or overwritten, release only by the owner, and which
//! commands each server is sent (native `SET .. IFEQ` and `DELIFEQ` on Valkey 9, scripts on
//! Redis 7.0).

mod support;

use std::time::Duration;

use leaderd::{LeaseClient, LeaseError, LeaseSpec, Observed};
use leaderd::{Locker, LossReason, PlainLease};
use support::locks::{bounded, calls, lock_now};
use support::{keys, RedisServer};
use tokio::time::Instant;

fn locker(redis: &RedisServer, name: &str, holder: &str, lease: Duration) -> Locker<PlainLease> {
    let spec = LeaseSpec::new(name, holder, lease).with_command_timeout(Duration::from_millis(300));
    Locker::plain(LeaseClient::connect(&redis.url(), spec).expect("valid url"))
}

/// One holder at a time, reentrant for the same `Locker`: a second holder is refused with
/// who holds it, a waiting one takes it once released; the fence is 0; the key is a string.
async fn excludes_and_reenters(server: &str) {
    let redis = RedisServer::start_on(server);
    let a = locker(&redis, "plain-x", "a", Duration::from_secs(5));
    let b = locker(&redis, "plain-x", "b", Duration::from_secs(5));
    let g1 = lock_now(&a).await;
    let g2 = bounded("reenter", a.try_lock()).await.expect("reenter");
    assert_eq!(a.hold_count().await, 2);
    assert_eq!((g1.fence(), g2.fence()), (0, 0));
    assert_eq!(redis.cmd(&["TYPE", &keys("plain-x").lock]), "string");
    match bounded("try_lock", b.try_lock()).await {
        Err(LeaseError::Held(Observed::Held(h))) => {
            assert_eq!(h.holder, "a");
            assert!(h.remaining.is_some_and(|r| r <= Duration::from_secs(5)));
        }
        Err(other) => panic!("b got {other:?} while a holds the lock"),
        Ok(_) => panic!("b got the lock while a holds it"),
    }
    let b2 = b.clone();
    let waiter = tokio::spawn(async move {
        // Nothing is published on release: b tries again every lease / 3.
        b2.lock(Instant::now() + Duration::from_secs(8)).await
    });
    assert_eq!(bounded("release", g1.release()).await, Ok(true));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "b took the lock while a still held it once"
    );
    assert_eq!(bounded("release", g2.release()).await, Ok(true));
    let gb = bounded("waiter", waiter)
        .await
        .unwrap()
        .expect("b takes over");
    assert!(gb.is_valid());
    assert_eq!(bounded("release", gb.release()).await, Ok(true));
    assert_eq!(redis.cmd(&["EXISTS", &keys("plain-x").lock]), "0");
}

/// The watchdog renews a 600 ms lock for 2 s, with the server's native compare-and-set where
/// it has it: on Valkey 9 only `SET` and `DELIFEQ` are sent, on Redis 7.0 scripts renew and
/// release (`EVALSHA` with `GET`, `PEXPIRE`, `DEL`).
async fn renews_with_the_servers_commands(server: &str) {
    let redis = RedisServer::start_on(server);
    let a = locker(&redis, "plain-renew", "a", Duration::from_millis(600));
    let g = lock_now(&a).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(g.is_valid(), "the watchdog did not keep the lock");
    assert!(g.loss_watch().borrow().is_none());
    let pttl: i64 = redis
        .cmd(&["PTTL", &keys("plain-renew").lock])
        .parse()
        .unwrap();
    assert!(pttl > 0 && pttl <= 600, "PTTL {pttl}");
    assert_eq!(bounded("release", g.release()).await, Ok(true));
    let (set, evalsha, get, pexpire, del) = (
        calls(&redis, "set"),
        calls(&redis, "evalsha"),
        calls(&redis, "get"),
        calls(&redis, "pexpire"),
        calls(&redis, "del"),
    );
    let (delifeq, delex) = (calls(&redis, "delifeq"), calls(&redis, "delex"));
    let stats = redis.cmd(&["INFO", "commandstats"]);
    if server == "valkey9" {
        // 2 s / 200 ms: about 10 renewals, each a `SET .. IFEQ .. PX`, after the acquire.
        assert!(
            set > 5,
            "{set} SETs: the renewals are not SET IFEQ\n{stats}"
        );
        assert_eq!(
            (delifeq, evalsha, get, pexpire, del),
            (1, 0, 0, 0, 0),
            "{stats}"
        );
    } else {
        // The acquire (the one `SET .. IFEQ` Redis 7.0 refused as a syntax error failed).
        assert_eq!(set, 1, "{stats}");
        assert!(pexpire >= 5, "{pexpire} renewals\n{stats}");
        assert_eq!(
            evalsha,
            pexpire + 1,
            "renewals and the release are scripts\n{stats}"
        );
        assert_eq!((get, del, delifeq, delex), (evalsha, 1, 0, 0), "{stats}");
    }
}

/// A deleted key and an overwritten one are both reported by `lost()` (at the next renew),
/// and an overwritten key is left alone by the old holder's release.
async fn reports_loss_and_releases_only_its_own(server: &str) {
    let redis = RedisServer::start_on(server);
    let k = keys("plain-lost").lock;
    let a = locker(&redis, "plain-lost", "a", Duration::from_millis(900));

    let mut g = lock_now(&a).await;
    assert_eq!(redis.cmd(&["DEL", &k]), "1");
    let cut = Instant::now();
    assert_eq!(bounded("lost", g.lost()).await, LossReason::Lost);
    assert!(
        cut.elapsed() < Duration::from_millis(900),
        "{:?}",
        cut.elapsed()
    );
    assert!(!g.is_valid());
    assert_eq!(bounded("release", g.release()).await, Ok(false));

    let mut g = lock_now(&a).await;
    assert_eq!(redis.cmd(&["SET", &k, "someone-else", "PX", "5000"]), "OK");
    assert_eq!(bounded("lost", g.lost()).await, LossReason::Lost);
    assert_eq!(bounded("release", g.release()).await, Ok(false));
    assert_eq!(
        redis.cmd(&["GET", &k]),
        "someone-else",
        "the old holder deleted another's lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_plain_lock_excludes_and_reenters() {
    excludes_and_reenters("redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey9_plain_lock_excludes_and_reenters() {
    excludes_and_reenters("valkey9").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_plain_lock_renews_with_scripts() {
    renews_with_the_servers_commands("redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey9_plain_lock_renews_and_releases_natively() {
    renews_with_the_servers_commands("valkey9").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_plain_lock_reports_loss_and_releases_only_its_own() {
    reports_loss_and_releases_only_its_own("redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey9_plain_lock_reports_loss_and_releases_only_its_own() {
    reports_loss_and_releases_only_its_own("valkey9").await;
}
