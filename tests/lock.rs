//! Integration tests of the reentrant lock and its watchdog (`leaderd::lock`) against real
//! redis-server processes: reentrancy, exclusion of other holders, renewal past several
//! TTLs, and loss reported (before the validity ends) when the key vanishes or Redis is cut off.

mod support;

use std::time::Duration;

use leaderd::{Lease, LeaseClient, LeaseError, LeaseSpec};
use leaderd::{LeaseGuard, Locker, LossReason, WatchdogConfig};
use support::locks::{bounded, calls, lock_now, BOUND};
use support::{keys, seed_fence, wait_until, Proxy, RedisServer};
use tokio::time::Instant;

fn spec(name: &str, holder: &str, lease: Duration) -> LeaseSpec {
    LeaseSpec::new(name, holder, lease)
        .with_command_timeout(Duration::from_millis(200))
        .with_connect_timeout(Duration::from_millis(300))
}

fn locker(url: &str, name: &str, holder: &str, lease: Duration) -> Locker<LeaseClient> {
    Locker::new(LeaseClient::connect(url, spec(name, holder, lease)).expect("valid url"))
}

/// The holder named by the lock's string key `<holder>:<token>`.
fn holder_of(redis: &RedisServer, key: &str) -> String {
    let value = redis.cmd(&["GET", key]);
    let (holder, token) = value.rsplit_once(':').expect("<holder>:<token>");
    assert_eq!(token.len(), 32, "{value}");
    holder.to_owned()
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
    let key = keys("reentrant").lock;
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
            // The fence counter: the holder's fence, or past it once others tried (each
            // attempt counts, docs/protocol.md "A lock's key").
            assert!(support::fence_of(&h) >= g1.fence(), "{h:?}");
            let left = h.remaining().expect("a TTL");
            assert!(left > Duration::ZERO && left <= Duration::from_secs(5));
        }
        Err(e) => panic!("expected Held, got {e:?}"),
        Ok(g) => panic!("b took a held lease (fence {})", g.fence()),
    }
    assert_eq!(b.hold_count().await, 0);

    assert_eq!(bounded("release", g1.release()).await, Ok(true));
    assert_eq!(a.hold_count().await, 1);
    assert_eq!(holder_of(&redis, &key), "a");
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
    assert_eq!(holder_of(&redis, &key), "b");
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
    let key = keys("handover").lock;
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
    let key = keys("watchdog").lock;
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
    assert_eq!(holder_of(&redis, &key), "a");
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
    let key = keys("deleted").lock;
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
    let counter = keys("deleted").fence;
    assert_eq!(redis.cmd(&["GET", &counter]), g2.fence().to_string());
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
    let config = WatchdogConfig::for_lease(Duration::from_secs(1))
        .with_renew_every(Duration::from_millis(400))
        .with_renew_deadline(Duration::from_millis(700))
        .with_retry(Duration::from_millis(200));
    loss_is_reported_before_validity_ends(config, |p| p.blackhole(true), "hung").await;
}

/// The messages published on `channel` while `work` runs (read after a PING round trip).
async fn published_during<F: std::future::Future>(
    redis: &RedisServer,
    channel: &str,
    work: F,
) -> Vec<String> {
    let mut sub = support::RespConn::connect(redis.addr(), BOUND).expect("subscriber");
    sub.call(&["SUBSCRIBE", channel]).expect("subscribe");
    work.await;
    // In subscribe mode the pong comes after every message published before it.
    let mut reply = sub.call(&["PING"]).expect("ping").render();
    let mut messages = Vec::new();
    for _ in 0..100 {
        if reply.starts_with("pong") {
            return messages;
        }
        messages.push(reply);
        reply = sub.read_next().expect("read").render();
    }
    panic!("no pong after 100 messages: {messages:?}");
}

/// A lock's grant is announced to nobody (a lock has no followers) while its release is
/// published for waiters; the election's own grant is still announced (README, "Library").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locks_grant_is_not_announced_and_its_release_is() {
    let redis = RedisServer::start();
    seed_fence(&redis, "quiet");
    let channel = keys("quiet").released;
    let a = locker(&redis.url(), "quiet", "a", Duration::from_secs(5));
    let lock = published_during(&redis, &channel, async {
        let g = lock_now(&a).await;
        assert_eq!(bounded("release", g.release()).await, Ok(true));
    })
    .await;
    assert_eq!(lock.len(), 1, "{lock:?}");
    assert!(lock[0].contains(r#""event":"released""#), "{lock:?}");
    assert!(!lock.iter().any(|m| m.contains("acquired")), "{lock:?}");

    let election = LeaseClient::connect(&redis.url(), spec("quiet", "e", Duration::from_secs(5)))
        .expect("valid url");
    let announced = published_during(&redis, &channel, async {
        let term = match bounded("acquire", election.try_acquire(election.default_budget())).await {
            Ok(leaderd::Acquire::Acquired(t)) => t,
            other => panic!("the election's acquire: {other:?}"),
        };
        let released = election.release(&term, election.default_budget());
        assert_eq!(bounded("release", released).await, Ok(true));
    })
    .await;
    assert_eq!(announced.len(), 2, "{announced:?}");
    assert!(announced[0].contains("acquired"), "{announced:?}");
}

/// A lock taken and released 300 times in a row gets strictly increasing fences, each at
/// least the server clock in microseconds, while the fence counter is written only about
/// once per 10 ms (not at every grant); after Redis loses its data, the next fence is still
/// higher and the lock waits out the quarantine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_fences_increase_without_a_counter_write_per_grant_and_across_data_loss() {
    let mut redis = RedisServer::start();
    seed_fence(&redis, "rapid");
    let a = locker(&redis.url(), "rapid", "a", Duration::from_secs(1));
    let server_us = |redis: &RedisServer| {
        let t = redis.cmd(&["TIME"]);
        let parts: Vec<u64> = t
            .split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse().expect("digits"))
            .collect();
        parts[0] * 1_000_000 + parts[1]
    };
    let sets_before = calls(&redis, "set");
    let started = Instant::now();
    let clock_before = server_us(&redis);
    let mut last = 0;
    for i in 0..300 {
        let g = lock_now(&a).await;
        assert!(
            g.fence() > last,
            "grant {i}: fence {} after {last}",
            g.fence()
        );
        assert!(
            g.fence() >= clock_before,
            "grant {i}: fence {} below the clock",
            g.fence()
        );
        last = g.fence();
        assert_eq!(bounded("release", g.release()).await, Ok(true));
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    // Every grant's own `SET NX PX` of the lock's key, and the counter's writes.
    let sets = calls(&redis, "set") - sets_before - 300;
    assert!(
        sets <= elapsed_ms / 10 + 2 && sets < 300,
        "the fence counter was written {sets} times for 300 grants in {elapsed_ms} ms"
    );

    redis.restart_empty();
    let lost_at = Instant::now();
    let g = bounded("lock", a.lock(Instant::now() + Duration::from_secs(8)))
        .await
        .expect("lock after the data loss");
    assert!(
        g.fence() > last,
        "fence {} after {last} across the data loss",
        g.fence()
    );
    assert!(
        lost_at.elapsed() >= Duration::from_millis(980),
        "granted {:?} after the data loss, inside the quarantine",
        lost_at.elapsed()
    );
    assert_eq!(bounded("release", g.release()).await, Ok(true));
}

/// The fence counter gone while the lock is held (evicted, or deleted by hand), and created
/// again as 1 by another's denied attempt: the next grant's fence is still above the
/// holder's, raised to the server clock (docs/protocol.md, "A lock's key").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_fence_stays_above_the_holders_after_its_counter_is_lost() {
    let redis = RedisServer::start();
    seed_fence(&redis, "evicted");
    let counter = keys("evicted").fence;
    let a = locker(&redis.url(), "evicted", "a", Duration::from_secs(5));
    let b = locker(&redis.url(), "evicted", "b", Duration::from_secs(5));
    // Grants of the common path (no script) first, so that b knows the counter's lead.
    let gb = lock_now(&b).await;
    assert_eq!(bounded("release", gb.release()).await, Ok(true));
    let ga = lock_now(&a).await;
    let fence_a = ga.fence();
    assert_eq!(redis.cmd(&["DEL", &counter]), "1");
    match bounded("try_lock", b.try_lock()).await {
        Err(LeaseError::Held(h)) => assert_eq!(support::held_by(&h), Some("a")),
        other => panic!("b got a held lock: {:?}", other.map(|g| g.fence())),
    }
    // b's denied attempt counted on its common path (1), or the script answered it
    // (missing: the client's window for the common path had run out on a loaded host).
    // Either way the counter is set to what a denied `MULTI` leaves.
    let left = redis.cmd(&["GET", &counter]);
    assert!(
        left == "1" || left == "(nil)",
        "counter {left} after a denial"
    );
    assert_eq!(redis.cmd(&["SET", &counter, "1"]), "OK");
    assert_eq!(bounded("release", ga.release()).await, Ok(true));
    let gb = lock_now(&b).await;
    assert!(
        gb.fence() > fence_a,
        "fence {} after a's {fence_a}",
        gb.fence()
    );
    assert_eq!(bounded("release", gb.release()).await, Ok(true));
}

/// Redis restarted empty, and a client that took the lock with its `MULTI` (which got 1: the
/// counter was missing) died before the script seeded the counter: its value blocks the lock
/// for a lease duration, and the next grant's fence is still above every fence before the
/// loss (docs/protocol.md, "A lock's key").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_by_a_client_that_died_before_seeding_waits_and_fences_above() {
    let mut redis = RedisServer::start();
    seed_fence(&redis, "orphan");
    let keys = keys("orphan");
    let a = locker(&redis.url(), "orphan", "a", Duration::from_secs(1));
    let g = lock_now(&a).await;
    let before = g.fence();
    assert_eq!(bounded("release", g.release()).await, Ok(true));
    redis.restart_empty();
    // What the dead client's MULTI left: its value with the lock's TTL, and the counter at 1.
    let value = format!("dead:{}", "0".repeat(32));
    assert_eq!(
        redis.cmd(&["SET", &keys.lock, &value, "NX", "PX", "1000"]),
        "OK"
    );
    assert_eq!(redis.cmd(&["INCR", &keys.fence]), "1");
    let left_at = Instant::now();
    let g = bounded("lock", a.lock(Instant::now() + Duration::from_secs(8)))
        .await
        .expect("the lock once the dead client's value expired");
    assert!(
        left_at.elapsed() >= Duration::from_millis(900),
        "granted {:?} after, while the dead client's value was there",
        left_at.elapsed()
    );
    assert!(g.fence() > before, "fence {} after {before}", g.fence());
    assert_eq!(bounded("release", g.release()).await, Ok(true));
}

/// The counter deleted between two grants of the common path: the next `MULTI` gets 1, and
/// the script it hands over to seeds the counter above the last fence and quarantines the
/// lock instead of granting it (docs/protocol.md, "A lock's key").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_that_finds_the_counter_missing_quarantines_the_lock() {
    let redis = RedisServer::start();
    seed_fence(&redis, "unseeded");
    let keys = keys("unseeded");
    let lease = Duration::from_secs(1);
    let a = locker(&redis.url(), "unseeded", "a", lease);
    // The common path is taken within about 10 ms of a grant (the counter's lead over the
    // clock); a loaded host may miss that window, and the script then answers. Both must
    // quarantine; the round is tried again (after the quarantine) until the MULTI ran.
    for round in 0..10 {
        let g = lock_now(&a).await;
        assert_eq!(bounded("release", g.release()).await, Ok(true));
        let g = lock_now(&a).await;
        let last = g.fence();
        assert_eq!(bounded("release", g.release()).await, Ok(true));
        assert_eq!(redis.cmd(&["DEL", &keys.fence]), "1");
        let exec = calls(&redis, "exec");
        match bounded("try_lock", a.try_lock()).await {
            Err(LeaseError::Held(leaderd::Observed::Quarantined { fence, .. })) => {
                assert!(
                    fence > last,
                    "round {round}: seeded at {fence}, after {last}"
                )
            }
            other => panic!("granted without a counter: {:?}", other.map(|g| g.fence())),
        }
        assert_eq!(
            redis.cmd(&["GET", &keys.lock]),
            "",
            "round {round}: the quarantine placeholder"
        );
        if calls(&redis, "exec") == exec + 1 {
            return;
        }
        tokio::time::sleep(lease).await;
    }
    panic!("in 10 rounds the try_lock never took the common path's MULTI");
}

/// A fenced lock and unlock on its common path run no script where the server has a native
/// compare-and-delete: `MULTI`/`SET NX PX`/`INCR`/`TIME`/`EXEC`, then `DELIFEQ` and `PUBLISH`
/// (Valkey 9), or `lua/lock_release.lua` (Redis 7.0); the acquire script runs for the first
/// grant only (docs/protocol.md, "A lock's key").
async fn fenced_pairs_run_the_servers_commands(server: &str) {
    let redis = RedisServer::start_on(server);
    seed_fence(&redis, "pairs");
    let a = locker(&redis.url(), "pairs", "a", Duration::from_secs(60));
    let before = ["evalsha", "exec", "delifeq", "publish"].map(|c| calls(&redis, c));
    let started = Instant::now();
    let mut last = 0;
    for _ in 0..20 {
        let g = lock_now(&a).await;
        assert!(g.fence() > last);
        last = g.fence();
        assert_eq!(bounded("release", g.release()).await, Ok(true));
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let [evalsha, exec, delifeq, publish] =
        ["evalsha", "exec", "delifeq", "publish"].map(|c| calls(&redis, c));
    let (evalsha, exec) = (evalsha - before[0], exec - before[1]);
    let (delifeq, publish) = (delifeq - before[2], publish - before[3]);
    assert_eq!(publish, 20, "one release message per unlock");
    let native = server.starts_with("valkey9");
    assert_eq!(delifeq, if native { 20 } else { 0 }, "{server}");
    // The script's grants: the first, and about one per 10 ms (the clock passed the counter).
    let scripted = evalsha - if native { 0 } else { 20 };
    assert!(
        scripted <= 2 + elapsed_ms / 10 && exec + scripted >= 20,
        "{server}: {scripted} grants by script and {exec} by MULTI in {elapsed_ms} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fenced_pairs_run_scripts_to_release() {
    fenced_pairs_run_the_servers_commands("redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey9_fenced_pairs_run_no_script() {
    fenced_pairs_run_the_servers_commands("valkey9").await;
}

/// One holder's watchdog renews each of its holds: one taken right after a release (the
/// watchdog still sleeps for the earlier hold's renew) and one taken after the watchdog found
/// nothing to renew and waits to be told of a hold (README, "Library").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_watchdog_renews_every_hold_of_its_holder() {
    let redis = RedisServer::start();
    seed_fence(&redis, "holds");
    let lease = Duration::from_millis(600);
    let a = locker(&redis.url(), "holds", "a", lease);
    let b = locker(&redis.url(), "holds", "b", lease);
    for pause in [Duration::ZERO, lease] {
        let g = lock_now(&a).await;
        assert_eq!(bounded("release", g.release()).await, Ok(true));
        tokio::time::sleep(pause).await;
        let g = lock_now(&a).await;
        tokio::time::sleep(lease * 3).await;
        assert!(g.is_valid() && not_lost(&g), "after {pause:?}: not renewed");
        match bounded("try_lock", b.try_lock()).await {
            Err(LeaseError::Held(_)) => {}
            other => panic!("after {pause:?}: b got {:?}", other.map(|g| g.fence())),
        }
        assert_eq!(bounded("release", g.release()).await, Ok(true));
    }
}

/// A lock released with a reservation (`Lease::release_to`) is taken by its successor alone:
/// the lock's own acquire script leaves a reservation to acquire.lua (docs/protocol.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_lock_is_taken_by_its_successor_alone() {
    let redis = RedisServer::start();
    seed_fence(&redis, "handed");
    let client = |holder: &str| {
        LeaseClient::connect(&redis.url(), spec("handed", holder, Duration::from_secs(5)))
            .expect("valid url")
            .for_lock()
    };
    let (a, b, c) = (client("a"), client("b"), client("c"));
    let term = match bounded("acquire", a.try_acquire(a.default_budget())).await {
        Ok(leaderd::Acquire::Acquired(t)) => t,
        other => panic!("a's acquire: {other:?}"),
    };
    let reserved = leaderd::handover::Reservation::new("b", Duration::from_secs(2));
    let released = a.release_to(&term, Some(reserved), a.default_budget());
    assert_eq!(bounded("release", released).await, Ok(true));
    match bounded("acquire", c.try_acquire(c.default_budget())).await {
        Ok(leaderd::Acquire::Denied(_)) => {}
        other => panic!("c took b's reservation: {other:?}"),
    }
    match bounded("acquire", b.try_acquire(b.default_budget())).await {
        Ok(leaderd::Acquire::Acquired(t)) => assert!(t.fence > term.fence, "{t:?}"),
        other => panic!("b's acquire of its reservation: {other:?}"),
    }
}

/// The fenced lock on a 3-master cluster: its `MULTI` and scripts go to the node of the
/// name's slot. The first grant finds no counter (quarantine), then every fence is higher
/// than the last and the watchdog renews the lock (docs/protocol.md, "A lock's key").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_lock_works_on_a_cluster() {
    let servers = support::cluster::create_cluster(3, 0, &[]);
    let urls = servers.iter().map(|s| s.url()).collect();
    let redis = leaderd::RedisSpec::new(leaderd::connection::Topology::Cluster { urls });
    let lease = Duration::from_secs(1);
    let client = |holder: &str| {
        let backend = leaderd::Backend::connect(&redis, spec("clustered", holder, lease));
        Locker::new(backend.expect("a cluster spec"))
    };
    let (a, b) = (client("a"), client("b"));
    let first = bounded("lock", a.lock(Instant::now() + Duration::from_secs(5)))
        .await
        .expect("the lock after its quarantine");
    let mut last = first.fence();
    assert_eq!(bounded("release", first.release()).await, Ok(true));
    for i in 0..20 {
        let locker = if i % 2 == 0 { &a } else { &b };
        let g = lock_now(locker).await;
        assert!(g.fence() > last, "grant {i}: {} after {last}", g.fence());
        last = g.fence();
        assert_eq!(bounded("release", g.release()).await, Ok(true));
    }
    let g = lock_now(&a).await;
    tokio::time::sleep(lease * 2).await;
    assert!(g.is_valid(), "not renewed on the cluster");
    assert!(matches!(
        bounded("try_lock", b.try_lock()).await,
        Err(LeaseError::Held(_))
    ));
    assert_eq!(bounded("release", g.release()).await, Ok(true));
}
