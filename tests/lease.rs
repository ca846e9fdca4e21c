//! Integration tests of the lease primitive (`leaderd::lease`) against real redis-server
//! processes: mutual exclusion, fencing, expiry, quarantine after data loss, NOSCRIPT,
//! waiting, and the failures a caller must be told about clearly.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use leaderd::connection::FailureKind;
use leaderd::{Acquire, Lease, LeaseClient, LeaseError, LeaseSpec, Observed, Term};
use support::locks::bounded;
use support::{free_port, seed_fence, wait_until, Proxy, RedisServer};
use tokio::time::{timeout, Instant};

fn spec(name: &str, holder: &str, lease: Duration) -> LeaseSpec {
    LeaseSpec::new(name, holder, lease)
}

fn client(url: &str, name: &str, holder: &str, lease: Duration) -> LeaseClient {
    LeaseClient::connect(url, spec(name, holder, lease)).expect("valid url")
}

async fn must_acquire(c: &LeaseClient) -> Term {
    match bounded("try_acquire", c.try_acquire(c.default_budget())).await {
        Ok(Acquire::Acquired(term)) => term,
        other => panic!(
            "expected the lease for {}, got {other:?}",
            c.spec().holder()
        ),
    }
}

async fn must_be_held(c: &LeaseClient) -> Observed {
    match bounded("try_acquire", c.try_acquire(c.default_budget())).await {
        Ok(Acquire::Denied(h)) => h,
        other => panic!("expected the lease to be held, got {other:?}"),
    }
}

fn unavailable_kind(r: Result<impl std::fmt::Debug, LeaseError>) -> FailureKind {
    match r {
        Err(LeaseError::Unavailable(f)) => {
            assert!(!f.cause.is_empty(), "a failure carries a cause: {f:?}");
            f.kind
        }
        other => panic!("expected LeaseError::Unavailable, got {other:?}"),
    }
}

/// Eight contenders, each with its own client and holder identity, on a multi-thread
/// runtime, take turns through the blocking acquire. The first attempt on a fresh Redis
/// meets the quarantine (one lease duration under a placeholder), after which they contend
/// for about three seconds. The critical section never sees two of them, and fences
/// strictly increase in the order the terms were granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contenders_are_mutually_exclusive_and_fences_increase() {
    let redis = RedisServer::start();
    let url = redis.url();
    let lease = Duration::from_secs(1);
    let start = Instant::now();
    let end = start + Duration::from_secs(4);
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    // (fence, contender, when granted), pushed inside the critical section: grant order.
    let grants: Arc<Mutex<Vec<(u64, usize, Instant)>>> = Arc::new(Mutex::new(Vec::new()));
    let problems: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));

    let mut tasks = Vec::new();
    for i in 0..8 {
        let (url, inside, overlaps) = (url.clone(), inside.clone(), overlaps.clone());
        let (grants, problems) = (grants.clone(), problems.clone());
        tasks.push(tokio::spawn(async move {
            let c = client(&url, "mutex", &format!("contender-{i}"), lease);
            for _ in 0..1000 {
                if Instant::now() >= end {
                    break;
                }
                match c.acquire(end, Duration::from_millis(200)).await {
                    Ok(term) => {
                        if inside.swap(true, Ordering::SeqCst) {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        grants.lock().unwrap().push((term.fence, i, Instant::now()));
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        if !term.is_valid() {
                            problems
                                .lock()
                                .unwrap()
                                .push(format!("contender {i}: term {} ran out", term.fence));
                        }
                        inside.store(false, Ordering::SeqCst);
                        match c.release(&term, c.default_budget()).await {
                            Ok(true) => {}
                            other => problems.lock().unwrap().push(format!(
                                "contender {i}: release of {} gave {other:?}",
                                term.fence
                            )),
                        }
                        // Let the others (woken by the release) have a go.
                        tokio::time::sleep(Duration::from_millis(15)).await;
                    }
                    Err(LeaseError::Timeout { .. }) => break,
                    Err(e) => {
                        problems
                            .lock()
                            .unwrap()
                            .push(format!("contender {i}: {e:?}"));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        timeout(Duration::from_secs(20), t)
            .await
            .expect("contender finishes")
            .expect("contender does not panic");
    }

    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    let problems = problems.lock().unwrap();
    assert!(problems.is_empty(), "problems: {problems:#?}");
    let grants = grants.lock().unwrap();
    assert!(grants.len() >= 8, "too few terms granted: {}", grants.len());
    for w in grants.windows(2) {
        assert!(
            w[1].0 > w[0].0,
            "fence {} granted after fence {}",
            w[1].0,
            w[0].0
        );
    }
    let holders: std::collections::HashSet<usize> = grants.iter().map(|g| g.1).collect();
    eprintln!(
        "{} terms over {} of 8 contenders",
        grants.len(),
        holders.len()
    );
    assert!(holders.len() >= 2, "the lease never changed hands");
    // Nobody got it during the quarantine of the first attempt (one lease duration).
    let first = grants[0].2;
    assert!(
        first >= start + lease - Duration::from_millis(20),
        "first term granted {:?} after start, inside the quarantine",
        first - start
    );
}

/// A stale term (expired, then the lease taken by another holder) can neither renew nor
/// release, and the new holder's lease is untouched by its attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_holder_can_renew_or_release() {
    let redis = RedisServer::start();
    seed_fence(&redis, "owner");
    let a = client(&redis.url(), "owner", "a", Duration::from_millis(400));
    let b = client(&redis.url(), "owner", "b", Duration::from_secs(5));
    let keys = a.keys().clone();

    let mut stale = must_acquire(&a).await;
    // While a holds it, b is told who holds it.
    let h = must_be_held(&b).await;
    assert_eq!(support::held_by(&h), Some("a"));
    assert_eq!(support::fence_of(&h), stale.fence);

    // Let a's lease expire (bounded), then b takes it.
    let gone = wait_until(Duration::from_secs(3), Duration::from_millis(20), || {
        (redis.cmd(&["EXISTS", &keys.lock]) == "0").then_some(())
    });
    assert!(gone.is_some(), "a's lease did not expire");
    let term_b = must_acquire(&b).await;
    assert!(term_b.fence > stale.fence);

    // The stale term: renew is Lost (and leaves the term unchanged), release is Ok(false).
    let before = stale.clone();
    let r = bounded("renew", a.renew(&mut stale, a.default_budget())).await;
    assert_eq!(r, Err(LeaseError::Lost));
    assert_eq!(stale, before, "a failed renew must not touch the term");
    assert_eq!(
        bounded("release", a.release(&stale, a.default_budget())).await,
        Ok(false)
    );

    // A term forged with b's fence but another token fails as well.
    let mut forged = term_b.clone();
    forged.token = support::new_token();
    assert_eq!(
        bounded("renew", a.renew(&mut forged, a.default_budget())).await,
        Err(LeaseError::Lost)
    );
    assert_eq!(
        bounded("release", a.release(&forged, a.default_budget())).await,
        Ok(false)
    );

    // b's lease is untouched: holder, token, fence, and its TTL was not cut to a's 400ms.
    assert_eq!(redis.cmd(&["HGET", &keys.lock, "holder"]), "b");
    assert_eq!(redis.cmd(&["HGET", &keys.lock, "token"]), term_b.token);
    assert_eq!(
        redis.cmd(&["HGET", &keys.lock, "fence"]),
        term_b.fence.to_string()
    );
    let pttl: i64 = redis.cmd(&["PTTL", &keys.lock]).parse().unwrap();
    assert!(pttl > 3000, "b's TTL was changed: {pttl}ms");
    let seen = bounded("observe", a.observe(a.default_budget()))
        .await
        .unwrap();
    assert_eq!(support::held_by(&seen), Some("b"));
    assert_eq!(support::fence_of(&seen), term_b.fence);

    // The real holder can.
    let mut term_b = term_b;
    let old_valid = term_b.valid_until;
    tokio::time::sleep(Duration::from_millis(20)).await;
    bounded("renew", b.renew(&mut term_b, b.default_budget()))
        .await
        .expect("holder renews");
    assert!(term_b.valid_until > old_valid);
    assert_eq!(
        bounded("release", b.release(&term_b, b.default_budget())).await,
        Ok(true)
    );
    assert_eq!(redis.cmd(&["EXISTS", &keys.lock]), "0");
    // Releasing twice is harmless.
    assert_eq!(
        bounded("release", b.release(&term_b, b.default_budget())).await,
        Ok(false)
    );
    assert_eq!(
        bounded("renew", b.renew(&mut term_b, b.default_budget())).await,
        Err(LeaseError::Lost)
    );
}

/// A lease that is not renewed expires; a waiting candidate gets it within the PTTL plus a
/// small slack, and the old holder's validity ended before the new holder's acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrenewed_lease_expires_and_passes_to_the_next() {
    let redis = RedisServer::start();
    seed_fence(&redis, "expiry");
    let lease = Duration::from_secs(1);
    let a = client(&redis.url(), "expiry", "a", lease);
    let b = client(&redis.url(), "expiry", "b", lease);

    let term_a = must_acquire(&a).await;
    assert!(term_a.is_valid());
    assert!(term_a.valid_until <= term_a.last_sent + lease - a.spec().drift());
    let seen_at = Instant::now();
    let seen = bounded("observe", b.observe(b.default_budget()))
        .await
        .unwrap();
    let pttl = seen.remaining().expect("the lease has a TTL");
    assert!(pttl <= lease);

    let term_b = bounded(
        "acquire",
        b.acquire(
            Instant::now() + Duration::from_secs(8),
            Duration::from_secs(5),
        ),
    )
    .await
    .expect("b gets the lease after expiry");
    let got = Instant::now();
    assert!(term_b.fence > term_a.fence);
    assert!(
        got - seen_at <= pttl + Duration::from_millis(500),
        "b got the lease {:?} after seeing {pttl:?} left",
        got - seen_at
    );
    assert!(!term_a.is_valid());
    assert!(
        term_a.valid_until < got,
        "a's validity reached past b's acquisition"
    );
    assert!(
        term_a.valid_until_wall < term_b.acquired_at,
        "a's validity (wall) reached past b's acquired_at"
    );
    assert!(term_a.valid_until < term_b.valid_until);
}

/// Redis loses its data (restart without persistence): fences keep increasing, and the
/// quarantine keeps a second holder out until the first holder's validity has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_loss_keeps_fences_increasing_and_quarantines() {
    let mut redis = RedisServer::start();
    let lease = Duration::from_secs(1);
    let url = redis.url();
    let a = client(&url, "loss", "a", lease);
    let b = client(&url, "loss", "b", lease);
    let keys = a.keys().clone();

    // Fresh Redis: the first acquire waits out the quarantine.
    let t0 = Instant::now();
    let mut term_a = bounded(
        "acquire",
        a.acquire(t0 + Duration::from_secs(6), Duration::from_millis(200)),
    )
    .await
    .expect("a acquires after the first-start quarantine");
    assert!(Instant::now() - t0 >= lease - Duration::from_millis(20));
    assert_eq!(
        redis.cmd(&["PTTL", &keys.fence]),
        "-1",
        "counter has no TTL"
    );

    let mut last_fence = term_a.fence;
    for round in 0..2 {
        redis.restart_empty();
        // b's blocking acquire must not succeed before a's term has run out.
        let term_b = bounded(
            "acquire",
            b.acquire(
                Instant::now() + Duration::from_secs(6),
                Duration::from_millis(200),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("round {round}: b did not acquire: {e:?}"));
        let got = Instant::now();
        assert!(
            term_a.valid_until < got,
            "round {round}: b got the lease {:?} before a's validity ended",
            term_a.valid_until - got
        );
        assert!(term_a.valid_until_wall < term_b.acquired_at);
        assert!(
            term_b.fence > last_fence,
            "round {round}: fence went from {last_fence} to {}",
            term_b.fence
        );
        // a's old term is gone for good. a's connection died with the old server, so its
        // first call may fail on the dead link; it must never succeed.
        let mut outcomes = Vec::new();
        for _ in 0..3 {
            let r = bounded("renew", a.renew(&mut term_a, a.default_budget())).await;
            let done = r == Err(LeaseError::Lost);
            assert!(
                matches!(r, Err(LeaseError::Lost | LeaseError::Unavailable(_))),
                "round {round}: stale renew gave {r:?}"
            );
            outcomes.push(r);
            if done {
                break;
            }
        }
        assert_eq!(
            outcomes.last(),
            Some(&Err(LeaseError::Lost)),
            "{outcomes:?}"
        );
        assert_eq!(
            bounded("release", b.release(&term_b, b.default_budget())).await,
            Ok(true)
        );
        last_fence = term_b.fence;
        // Next round: a takes it again (no quarantine: the counter exists) and then loses the data.
        term_a = must_acquire(&a).await;
        assert!(term_a.fence > last_fence);
        last_fence = term_a.fence;
    }
}

/// After `SCRIPT FLUSH` every operation still works (run by SHA, reload on NOSCRIPT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_is_survived() {
    let redis = RedisServer::start();
    seed_fence(&redis, "flush");
    let a = client(&redis.url(), "flush", "a", Duration::from_secs(5));
    let b = client(&redis.url(), "flush", "b", Duration::from_secs(5));

    assert_eq!(redis.cmd(&["SCRIPT", "FLUSH"]), "OK");
    let mut term = must_acquire(&a).await;
    assert_eq!(redis.cmd(&["SCRIPT", "FLUSH"]), "OK");
    let h = must_be_held(&b).await;
    assert_eq!(support::held_by(&h), Some("a"));
    assert_eq!(redis.cmd(&["SCRIPT", "FLUSH"]), "OK");
    bounded("renew", a.renew(&mut term, a.default_budget()))
        .await
        .expect("renew after SCRIPT FLUSH");
    assert_eq!(redis.cmd(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(
        bounded("release", a.release(&term, a.default_budget())).await,
        Ok(true)
    );
    assert_eq!(redis.cmd(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(
        bounded("release", a.release(&term, a.default_budget())).await,
        Ok(false)
    );
    assert_eq!(redis.cmd(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(
        bounded("renew", a.renew(&mut term, a.default_budget())).await,
        Err(LeaseError::Lost)
    );

    // The scripts ran by SHA, never by sending their text with EVAL.
    let stats = redis.cmd(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_evalsha:"), "{stats}");
    assert!(!stats.contains("cmdstat_eval:"), "{stats}");
}

/// A waiter wakes on a published release at once, not at its next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_wakes_on_release() {
    let redis = RedisServer::start();
    seed_fence(&redis, "wake");
    let a = client(&redis.url(), "wake", "a", Duration::from_secs(10));
    let b = client(&redis.url(), "wake", "b", Duration::from_secs(10));
    let channel = a.keys().released.clone();
    let term_a = must_acquire(&a).await;

    let waiter = tokio::spawn(async move {
        let r = b
            .acquire(
                Instant::now() + Duration::from_secs(8),
                Duration::from_secs(5),
            )
            .await;
        (r, Instant::now())
    });
    // Wait (bounded) until the waiter listens on the release channel, then a bit more so it
    // has made its attempts and sleeps.
    let subscribed = wait_until(Duration::from_secs(3), Duration::from_millis(10), || {
        let n = redis.cmd(&["PUBSUB", "NUMSUB", &channel]);
        (n.lines().nth(1) == Some("1")).then_some(())
    });
    assert!(subscribed.is_some(), "the waiter never subscribed");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());

    let released_at = Instant::now();
    assert_eq!(
        bounded("release", a.release(&term_a, a.default_budget())).await,
        Ok(true)
    );
    let (r, got) = bounded("waiter", waiter).await.unwrap();
    let term_b = r.expect("waiter acquires after the release");
    assert!(term_b.fence > term_a.fence);
    let delay = got - released_at;
    assert!(
        delay < Duration::from_millis(300),
        "waiter took {delay:?} after the release (retry is 5s)"
    );
}

/// With no release, a waiter takes the lease at its expiry (from the PTTL), not a retry
/// period later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_wakes_at_expiry_not_at_next_retry() {
    let redis = RedisServer::start();
    seed_fence(&redis, "expiry-wake");
    let lease = Duration::from_secs(1);
    let a = client(&redis.url(), "expiry-wake", "a", lease);
    let b = client(&redis.url(), "expiry-wake", "b", lease);
    let term_a = must_acquire(&a).await;
    let t0 = Instant::now();
    let term_b = bounded(
        "acquire",
        b.acquire(t0 + Duration::from_secs(8), Duration::from_secs(5)),
    )
    .await
    .expect("b gets the lease at a's expiry");
    let waited = Instant::now() - t0;
    assert!(
        term_a.valid_until < Instant::now(),
        "b got it inside a's validity"
    );
    assert!(term_b.fence > term_a.fence);
    assert!(
        waited < Duration::from_millis(2500),
        "b waited {waited:?}: that is the retry period (5s), not the PTTL (1s)"
    );
}

/// Nothing listening: a clear `Unavailable` of kind `Connection` from every operation,
/// quickly; the blocking acquire keeps trying until its deadline and then says `Timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_a_connection_error() {
    let url = format!("redis://127.0.0.1:{}/0", free_port());
    let c = client(&url, "down", "a", Duration::from_secs(1));
    // A term won on a live server: renewed and released here, where nothing listens.
    let live = RedisServer::start();
    seed_fence(&live, "down");
    let mut term = must_acquire(&client(&live.url(), "down", "a", Duration::from_secs(1))).await;
    let t0 = Instant::now();
    assert_eq!(
        unavailable_kind(bounded("try_acquire", c.try_acquire(c.default_budget())).await),
        FailureKind::Connection
    );
    assert_eq!(
        unavailable_kind(bounded("observe", c.observe(c.default_budget())).await),
        FailureKind::Connection
    );
    assert_eq!(
        unavailable_kind(bounded("renew", c.renew(&mut term, c.default_budget())).await),
        FailureKind::Connection
    );
    assert_eq!(
        unavailable_kind(bounded("release", c.release(&term, c.default_budget())).await),
        FailureKind::Connection
    );
    assert!(
        Instant::now() - t0 < Duration::from_secs(2),
        "refused connections must fail fast"
    );

    let e = LeaseError::Unavailable(match c.try_acquire(c.default_budget()).await {
        Err(LeaseError::Unavailable(f)) => f,
        other => panic!("{other:?}"),
    });
    assert_eq!(e.redis_kind(), Some(FailureKind::Connection));
    assert!(e.to_string().starts_with("Redis unavailable: "), "{e}");

    let t1 = Instant::now();
    let r = bounded(
        "acquire",
        c.acquire(t1 + Duration::from_millis(600), Duration::from_millis(200)),
    )
    .await;
    assert!(
        matches!(r, Err(LeaseError::Timeout { last_seen: None })),
        "{r:?}"
    );
    assert!(Instant::now() - t1 < Duration::from_secs(2));

    let bad = LeaseClient::connect("http://nowhere", spec("down", "a", Duration::from_secs(1)));
    assert!(matches!(bad, Err(leaderd::ConnectError::BadUrl { .. })));
}

/// A Redis slower than the command timeout: `Unavailable` of kind `Timeout`, returned within
/// about the command timeout; it works again once the latency is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_redis_times_out_within_the_command_timeout() {
    let redis = RedisServer::start();
    seed_fence(&redis, "slow");
    let proxy = Proxy::start(redis.addr());
    let s = spec("slow", "a", Duration::from_secs(5))
        .with_command_timeout(Duration::from_millis(300))
        .with_connect_timeout(Duration::from_millis(500));
    let c = LeaseClient::connect(&proxy.url(), s).unwrap();

    // A warm connection first, so the command itself is what is slow.
    assert_eq!(
        bounded("observe", c.observe(c.default_budget())).await,
        Ok(Observed::Vacant)
    );
    proxy.set_latency(Duration::from_millis(1500));
    for what in ["try_acquire (warm)", "try_acquire (reconnecting)"] {
        let t0 = Instant::now();
        let r = bounded(what, c.try_acquire(c.default_budget())).await;
        let took = Instant::now() - t0;
        assert_eq!(unavailable_kind(r), FailureKind::Timeout, "{what}");
        assert!(
            took < Duration::from_millis(1000),
            "{what} took {took:?} with a 300ms command timeout"
        );
    }
    let t0 = Instant::now();
    let r = bounded("observe", c.observe(c.default_budget())).await;
    assert_eq!(unavailable_kind(r), FailureKind::Timeout);
    assert!(Instant::now() - t0 < Duration::from_millis(1000));
    // An explicit, shorter budget is honoured: 100 ms, with 100 ms of slack for a loaded
    // machine, well short of the 300 ms command timeout it replaces.
    let t0 = Instant::now();
    let r = bounded(
        "try_acquire_within",
        c.try_acquire(Duration::from_millis(100)),
    )
    .await;
    let took = Instant::now() - t0;
    assert_eq!(unavailable_kind(r), FailureKind::Timeout);
    assert!(
        (Duration::from_millis(95)..Duration::from_millis(200)).contains(&took),
        "a 100 ms budget took {took:?} (the command timeout is 300 ms)"
    );

    proxy.set_latency(Duration::ZERO);
    // Commands delayed by the proxy may still land: wait for them, then it works again.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let recovered = wait_until_async(Duration::from_secs(5), || async {
        c.observe(c.default_budget()).await.ok()
    })
    .await;
    assert!(
        recovered.is_some(),
        "never recovered after the latency went"
    );
}

/// A paused (SIGSTOPped) Redis: a timeout, on a warm connection and on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_redis_times_out() {
    let redis = RedisServer::start();
    seed_fence(&redis, "paused");
    let s = spec("paused", "a", Duration::from_secs(5))
        .with_command_timeout(Duration::from_millis(300))
        .with_connect_timeout(Duration::from_millis(500));
    let warm = LeaseClient::connect(&redis.url(), s.clone()).unwrap();
    let cold = LeaseClient::connect(&redis.url(), s).unwrap();
    assert_eq!(
        bounded("observe", warm.observe(warm.default_budget())).await,
        Ok(Observed::Vacant)
    );

    struct Resume<'a>(&'a RedisServer);
    impl Drop for Resume<'_> {
        fn drop(&mut self) {
            self.0.resume();
        }
    }
    redis.pause();
    let resume = Resume(&redis);
    for (what, c) in [("warm", &warm), ("cold", &cold)] {
        let t0 = Instant::now();
        let r = bounded("try_acquire", c.try_acquire(c.default_budget())).await;
        let took = Instant::now() - t0;
        assert_eq!(unavailable_kind(r), FailureKind::Timeout, "{what}");
        assert!(took < Duration::from_millis(1200), "{what} took {took:?}");
    }
    drop(resume);
    let recovered = wait_until_async(Duration::from_secs(5), || async {
        match warm.try_acquire(warm.default_budget()).await {
            Ok(Acquire::Acquired(t)) => Some(t),
            _ => None,
        }
    })
    .await;
    assert!(recovered.is_some(), "never recovered after SIGCONT");
}

/// The lease key holding another type (a string): `WrongType` naming the key, from every
/// operation, with no panic; the blocking acquire gives up at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_key_type_is_reported_with_the_key() {
    let redis = RedisServer::start();
    seed_fence(&redis, "wrongtype");
    let c = client(&redis.url(), "wrongtype", "a", Duration::from_secs(5));
    let lock = c.keys().lock.clone();
    let wrong = LeaseError::WrongType { key: lock.clone() };

    let mut term = must_acquire(&c).await;
    assert_eq!(redis.cmd(&["SET", &lock, "somebody else's"]), "OK");

    assert_eq!(
        bounded("try_acquire", c.try_acquire(c.default_budget())).await,
        Err(wrong.clone())
    );
    assert_eq!(
        bounded("renew", c.renew(&mut term, c.default_budget())).await,
        Err(wrong.clone())
    );
    assert_eq!(
        bounded("release", c.release(&term, c.default_budget())).await,
        Err(wrong.clone())
    );
    assert_eq!(
        bounded("observe", c.observe(c.default_budget())).await,
        Err(wrong.clone())
    );
    let t0 = Instant::now();
    let r = bounded(
        "acquire",
        c.acquire(t0 + Duration::from_secs(5), Duration::from_millis(200)),
    )
    .await;
    assert_eq!(r, Err(wrong.clone()));
    assert!(
        Instant::now() - t0 < Duration::from_secs(1),
        "acquire kept retrying"
    );

    assert_eq!(wrong.redis_kind(), Some(FailureKind::Script));
    assert!(wrong.to_string().contains(&lock), "{wrong}");
    // The foreign value was left alone.
    assert_eq!(redis.cmd(&["GET", &lock]), "somebody else's");
}

/// observe(): vacant → None; quarantined → no holder; held → holder and fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_reports_vacant_quarantined_and_held() {
    let redis = RedisServer::start();
    let lease = Duration::from_secs(3);
    let c = client(&redis.url(), "observe", "a", lease);
    let keys = c.keys().clone();

    assert_eq!(
        bounded("observe", c.observe(c.default_budget())).await,
        Ok(Observed::Vacant)
    );

    // The first attempt on a fresh Redis seeds the counter and quarantines the lease.
    let q = must_be_held(&c).await;
    assert!(matches!(q, Observed::Quarantined { .. }), "{q:?}");
    assert_eq!(support::held_by(&q), None);
    assert!(q.remaining().is_some_and(|r| r <= lease));
    let seen = bounded("observe", c.observe(c.default_budget()))
        .await
        .unwrap();
    assert_ne!(seen, Observed::Vacant, "quarantined is not vacant");
    assert!(
        matches!(seen, leaderd::Observed::Quarantined { .. }),
        "{seen:?}"
    );
    assert_eq!(support::fence_of(&seen), support::fence_of(&q));
    assert!(seen.remaining().is_some_and(|r| r <= lease && !r.is_zero()));
    assert_eq!(redis.cmd(&["HGET", &keys.lock, "holder"]), "");
    assert_eq!(redis.cmd(&["HGET", &keys.lock, "token"]), "");
    assert_eq!(
        redis.cmd(&["GET", &keys.fence]),
        support::fence_of(&q).to_string()
    );
    // Seeded from the server clock (microseconds), so it stays above any earlier fences.
    let now_us = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert!(
        support::fence_of(&q) > now_us - 60_000_000 && support::fence_of(&q) < now_us + 60_000_000
    );

    // End the quarantine by hand (the counter stays), then a term is granted.
    assert_eq!(redis.cmd(&["DEL", &keys.lock]), "1");
    let term = must_acquire(&c).await;
    // Above the counter, and not behind the server clock (microseconds) either.
    assert!(
        term.fence > support::fence_of(&q),
        "{} after {q:?}",
        term.fence
    );
    let now_us = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert!(term.fence <= now_us + 60_000_000);
    assert_eq!(redis.cmd(&["GET", &keys.fence]), term.fence.to_string());
    let seen = bounded("observe", c.observe(c.default_budget()))
        .await
        .unwrap();
    assert_eq!(support::held_by(&seen), Some("a"));
    assert_eq!(support::fence_of(&seen), term.fence);
    assert!(seen.remaining().is_some_and(|r| r <= lease && !r.is_zero()));
    assert!(!matches!(seen, leaderd::Observed::Quarantined { .. }));
    // The lease hash carries the fields of docs/protocol.md#the-lease-hash.
    assert_eq!(redis.cmd(&["HGET", &keys.lock, "token"]), term.token);
    let acquired_at_ms: u64 = redis
        .cmd(&["HGET", &keys.lock, "acquired_at_ms"])
        .parse()
        .expect("acquired_at_ms is a number");
    assert!(acquired_at_ms <= support::unix_ms(SystemTime::now()));

    assert_eq!(
        bounded("release", c.release(&term, c.default_budget())).await,
        Ok(true)
    );
    assert_eq!(
        bounded("observe", c.observe(c.default_budget())).await,
        Ok(Observed::Vacant)
    );
}

/// Poll an async probe every 50ms until it gives `Some`, for at most `limit`.
async fn wait_until_async<T, F, Fut>(limit: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = Instant::now() + limit;
    for _ in 0..(limit.as_millis() / 50 + 2) {
        if let Ok(Some(v)) = timeout(Duration::from_secs(2), f()).await {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// The fence key holding another type (a list): the error names the fence key, not the
/// lock; a foreign lock at release names the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_type_names_the_foreign_key_fence_or_lock() {
    let redis = RedisServer::start();
    let c = client(&redis.url(), "wrongfence", "a", Duration::from_secs(5));
    let keys = c.keys().clone();
    assert_eq!(redis.cmd(&["RPUSH", &keys.fence, "foreign"]), "1");
    let got = bounded("try_acquire", c.try_acquire(c.default_budget())).await;
    assert_eq!(
        got,
        Err(LeaseError::WrongType {
            key: keys.fence.clone()
        })
    );
    assert!(got.unwrap_err().to_string().contains(&keys.fence));
    assert_eq!(redis.cmd(&["LRANGE", &keys.fence, "0", "-1"]), "foreign");

    assert_eq!(redis.cmd(&["DEL", &keys.fence]), "1");
    seed_fence(&redis, "wrongfence");
    let term = must_acquire(&c).await;
    assert_eq!(redis.cmd(&["DEL", &keys.lock]), "1");
    assert_eq!(redis.cmd(&["RPUSH", &keys.lock, "foreign"]), "1");
    assert_eq!(
        bounded("release", c.release(&term, c.default_budget())).await,
        Err(LeaseError::WrongType {
            key: keys.lock.clone()
        })
    );
}

/// An acquire that times out on a frozen Redis is run when it resumes, granting a lease
/// nobody holds a term of; the client kept its token, so its blocking acquire releases that
/// grant and takes the lease at once instead of waiting out its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_run_after_its_timeout_does_not_hold_the_lease_for_nobody() {
    let redis = RedisServer::start();
    seed_fence(&redis, "stray");
    let c = client(&redis.url(), "stray", "a", Duration::from_secs(10));
    // The scripts loaded (a NOSCRIPT would not run) and the connection made.
    seed_fence(&redis, "warm");
    must_acquire(&c.for_lease(spec("warm", "a", Duration::from_secs(10)))).await;
    assert_eq!(
        bounded("observe", c.observe(c.default_budget())).await,
        Ok(Observed::Vacant)
    );
    redis.pause();
    let r = bounded("try_acquire", c.try_acquire(c.default_budget())).await;
    redis.resume();
    assert_eq!(unavailable_kind(r), FailureKind::Timeout);
    let held = wait_until_async(Duration::from_secs(3), || async {
        match c.observe(c.default_budget()).await {
            Ok(seen @ Observed::Held(_)) => Some(seen),
            _ => None,
        }
    })
    .await
    .expect("Redis ran the acquire when it resumed");
    assert_eq!(held.holder().map(|h| h.holder.as_str()), Some("a"));
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(3);
    let term = bounded("acquire", c.acquire(deadline, Duration::from_millis(200))).await;
    assert!(term.is_ok(), "{term:?} after {:?}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
}
