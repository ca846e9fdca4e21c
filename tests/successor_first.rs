//! A reserved release is told to the successor first (on its own channel) and published on
//! the release channel exactly once, before the successor's `acquired`: by the successor's
//! announcement, or by the releaser when the successor does not come or its term is undone.

mod support;

use std::time::Duration;

use leaderd::handover::{Announcement, Reservation};
use leaderd::{Acquire, Backend, Lease, LeaseError, LeaseSpec, RedisSpec, RedlockClient, Term};
use serde_json::Value;
use support::{seed_fence, RedisServer, Reply, RespConn};
use tokio::time::timeout;

const BOUND: Duration = Duration::from_secs(15);
const WINDOW: Duration = Duration::from_secs(1);

fn spec(name: &str, holder: &str) -> LeaseSpec {
    LeaseSpec::new(name, holder, Duration::from_secs(10))
        .with_command_timeout(Duration::from_millis(300))
}

fn backend(redis: &RedisServer, name: &str, holder: &str, acks: u32) -> Backend {
    let r = RedisSpec::single(&redis.url()).with_min_replicas_ack(acks);
    Backend::connect(&r, spec(name, holder)).expect("url")
}

fn granted(outcome: Result<Acquire, LeaseError>) -> Term {
    match outcome {
        Ok(Acquire::Acquired(term)) => term,
        other => panic!("expected the lease, got {other:?}"),
    }
}

/// A raw subscriber to the release channel of `name`.
fn subscriber(redis: &RedisServer, name: &str) -> RespConn {
    subscribe(redis, &spec(name, "x").keys().released)
}

fn subscribe(redis: &RedisServer, channel: &str) -> RespConn {
    let mut conn = RespConn::connect(redis.addr(), BOUND).expect("connect");
    conn.call(&["SUBSCRIBE", channel]).expect("subscribed");
    conn
}

/// Every message on `conn` until `quiet` passes without one (at most 20), as JSON.
fn messages(conn: &mut RespConn, quiet: Duration) -> Vec<Value> {
    conn.set_timeout(quiet).expect("timeout");
    let mut seen = Vec::new();
    while seen.len() < 20 {
        let Ok(Reply::Array(items)) = conn.read_next() else {
            break;
        };
        if let Some(Reply::Bulk(b)) = items.get(2) {
            seen.push(serde_json::from_slice(b).unwrap_or(Value::Null));
        }
    }
    seen
}

fn events(seen: &[Value]) -> Vec<(String, String)> {
    seen.iter()
        .map(|m| {
            let s = |k: &str| m[k].as_str().unwrap_or("").to_string();
            (s("event"), s("holder"))
        })
        .collect()
}

/// What a reserved release from `a` to `b` gave: a's term, what b heard, b's acquire.
struct Handed {
    term: Term,
    heard: Option<Announcement>,
    acquired: Result<Acquire, LeaseError>,
}

/// `a` takes the lease and releases it reserved for `b` (whose acquires need `b_acks`
/// replicas), which acquires as soon as it hears; `sub` is drained of `a`'s `acquired`.
async fn reserve_for_b(redis: &RedisServer, name: &str, b_acks: u32, sub: &mut RespConn) -> Handed {
    seed_fence(redis, name);
    let a = backend(redis, name, "a", 0);
    let b = backend(redis, name, "b", b_acks);
    hand_over(&a, &b, std::slice::from_mut(sub)).await
}

/// `a` takes the lease and releases it reserved for `b`, which acquires as soon as it hears;
/// every subscriber in `subs` is drained of `a`'s `acquired` first.
async fn hand_over<L: Lease>(a: &L, b: &L, subs: &mut [RespConn]) -> Handed {
    let mut watch = b.watch_releases();
    assert!(watch.confirmed_within(BOUND).await, "b subscribed");
    let term = granted(a.try_acquire(a.default_budget()).await);
    for sub in subs.iter_mut() {
        messages(sub, Duration::from_millis(200));
    }
    watch.mark_seen();
    let reservation = Reservation::new("b", WINDOW);
    // On Redlock (one subscriber per node) the first node to tell b may be ahead of the
    // others, and a's term still held on a majority: b tries again on the next node's
    // message, as the elector does, once per node at most.
    let tries = subs.len();
    let (released, (heard, acquired)) = tokio::join!(
        a.release_to(&term, Some(reservation), a.default_budget()),
        async {
            let heard = timeout(BOUND, watch.changed()).await.expect("b hears");
            let mut acquired = b.try_acquire(b.default_budget()).await;
            for _ in 1..tries {
                if !matches!(acquired, Ok(Acquire::Denied(_))) {
                    break;
                }
                timeout(BOUND, watch.changed())
                    .await
                    .expect("b hears again");
                acquired = b.try_acquire(b.default_budget()).await;
            }
            (heard, acquired)
        }
    );
    assert!(released.expect("released"), "a's term was released");
    Handed {
        term,
        heard,
        acquired,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_successor_hears_first_and_the_channel_gets_released_then_acquired() {
    let redis = RedisServer::start();
    let name = "sf-order";
    let mut sub = subscriber(&redis, name);
    let mut own = subscribe(&redis, &spec(name, "x").keys().successor_channel("b"));
    let Handed {
        term,
        heard,
        acquired,
    } = reserve_for_b(&redis, name, 0, &mut sub).await;
    let fence = granted(acquired).fence;
    assert_eq!(
        heard,
        Some(Announcement::Released {
            holder: "a".into(),
            fence: term.fence,
            reserved_for: Some("b".into())
        }),
        "b is told of its reservation"
    );
    assert!(fence > term.fence);
    let seen = messages(&mut sub, Duration::from_millis(300));
    assert_eq!(
        events(&seen),
        vec![
            ("released".into(), "a".into()),
            ("acquired".into(), "b".into())
        ],
        "the release once, then the successor's term: {seen:?}"
    );
    assert_eq!(seen[0]["reserved_for"], "b", "{seen:?}");
    assert_eq!(seen[0]["fence"].as_u64(), Some(term.fence), "{seen:?}");
    assert_eq!(seen[1]["fence"].as_u64(), Some(fence), "{seen:?}");
    let told = messages(&mut own, Duration::from_millis(100));
    assert_eq!(
        events(&told),
        vec![("released".into(), "a".into())],
        "b's own channel: {told:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_that_does_not_come_leaves_the_announcement_to_the_releaser() {
    let redis = RedisServer::start();
    let name = "sf-absent";
    seed_fence(&redis, name);
    let a = backend(&redis, name, "a", 0);
    let c = backend(&redis, name, "c", 0);
    let mut sub = subscriber(&redis, name);
    let term = granted(a.try_acquire(a.default_budget()).await);
    messages(&mut sub, Duration::from_millis(200));

    let reservation = Reservation::new("ghost", WINDOW);
    let released = timeout(
        BOUND,
        a.release_to(&term, Some(reservation), a.default_budget()),
    )
    .await
    .expect("bounded");
    assert!(released.expect("released"));
    let seen = messages(&mut sub, Duration::from_millis(300));
    assert_eq!(
        events(&seen),
        vec![("released".into(), "a".into())],
        "published once by the releaser: {seen:?}"
    );
    assert_eq!(seen[0]["reserved_for"], "ghost", "{seen:?}");
    // The reservation still holds everyone else off for its window, then anyone may.
    assert!(matches!(
        c.try_acquire(c.default_budget()).await,
        Ok(Acquire::Denied(_))
    ));
    tokio::time::sleep(WINDOW).await;
    let next = granted(c.try_acquire(c.default_budget()).await);
    assert!(next.fence > term.fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_term_undone_for_want_of_replicas_still_gets_the_release_out_once() {
    // A master without replicas: b's acquire (WAIT 1) takes the reservation and is undone.
    let redis = RedisServer::start();
    let name = "sf-undone";
    let mut sub = subscriber(&redis, name);
    let handed = reserve_for_b(&redis, name, 1, &mut sub).await;
    assert!(handed.heard.is_some(), "b is told of its reservation");
    assert!(
        handed.acquired.is_err(),
        "not acknowledged: {:?}",
        handed.acquired
    );
    let seen = messages(&mut sub, Duration::from_millis(500));
    let seen = events(&seen);
    assert_eq!(
        seen.first(),
        Some(&("released".into(), "a".into())),
        "{seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|e| e.1 == "a").count(),
        1,
        "a's release once: {seen:?}"
    );
    assert!(
        seen.iter().all(|e| e.0 == "released"),
        "no term announced (the undo's own release may follow): {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redlock_every_node_tells_the_successor_first_then_announces_in_order() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let name = "sf-redlock";
    for n in &nodes {
        seed_fence(n, name);
    }
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let a = RedlockClient::connect(&urls, spec(name, "a")).expect("redlock");
    let b = RedlockClient::connect(&urls, spec(name, "b")).expect("redlock");
    let mut subs: Vec<RespConn> = nodes.iter().map(|n| subscriber(n, name)).collect();
    let Handed {
        term,
        heard,
        acquired,
    } = hand_over(&a, &b, &mut subs).await;
    assert!(
        matches!(&heard, Some(Announcement::Released { reserved_for: Some(s), .. }) if s == "b"),
        "{heard:?}"
    );
    let fence = granted(acquired).fence;
    assert!(fence > term.fence);
    // b acts on the first node that tells it, so on a node whose release is still on its
    // way b's acquire is denied there, and an attempt without a majority is undone (with
    // the release it took over; a then announces that release itself, unless b's next
    // attempt took the node first). So each node hears a's release, b's term, or both in
    // that order, each once; and each of the two on a majority.
    let release = ("released".to_string(), "a".to_string());
    let term_of_b = ("acquired".to_string(), "b".to_string());
    let (mut released, mut announced) = (0, 0);
    for (i, sub) in subs.iter_mut().enumerate() {
        let seen = events(&messages(sub, Duration::from_millis(300)));
        let allowed = [
            vec![release.clone()],
            vec![release.clone(), term_of_b.clone()],
            vec![term_of_b.clone()],
        ];
        assert!(allowed.contains(&seen), "node {i}: {seen:?}");
        released += usize::from(seen.contains(&release));
        announced += usize::from(seen.contains(&term_of_b));
    }
    assert!(
        released >= 2,
        "a's release heard on a majority: {released} of 3"
    );
    assert!(
        announced >= 2,
        "b's term announced on a majority: {announced} of 3"
    );
}
