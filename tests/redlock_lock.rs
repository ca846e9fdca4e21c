//! The reentrant lock over Redlock, against real independent redis-server masters: one node
//! killed while held (the lock goes on), a majority killed (`lost()` fires before the
//! validity ends); and the first round's majority count at its boundary on 5 nodes.

mod support;

use std::time::Duration;

use leaderd::{Acquire, Lease, LeaseSpec, Locker, LossReason, RedlockClient, WatchdogConfig};
use support::{keys, seed_fence, RedisServer};
use tokio::time::{timeout, Instant};

const LEASE: Duration = Duration::from_secs(2);
const BOUND: Duration = Duration::from_secs(15);

fn client(nodes: &[RedisServer], name: &str, holder: &str) -> RedlockClient {
    let spec = LeaseSpec::new(name, holder, LEASE)
        .with_command_timeout(Duration::from_millis(200))
        .with_connect_timeout(Duration::from_millis(200));
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    RedlockClient::connect(&urls, spec).expect("redlock client")
}

/// Sets every node's fence counter, so that the first lock is not quarantined.
fn seed(nodes: &[RedisServer], name: &str) {
    for node in nodes {
        seed_fence(node, name);
    }
}

fn locker(nodes: &[RedisServer], name: &str) -> Locker<RedlockClient> {
    let config = WatchdogConfig::for_lease(LEASE)
        .with_renew_every(Duration::from_millis(300))
        .with_renew_deadline(Duration::from_millis(1200))
        .with_retry(Duration::from_millis(300));
    Locker::with_config(client(nodes, name, "worker"), config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_killed_while_held_the_lock_goes_on() {
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    seed(&nodes, "rl-one-down");
    let locker = locker(&nodes, "rl-one-down");
    let guard = timeout(BOUND, locker.lock(Instant::now() + Duration::from_secs(5)))
        .await
        .expect("bounded")
        .expect("locked");
    let first_validity = guard.valid_until().expect("a validity");
    nodes[0].stop();
    // Two leases later the watchdog has kept renewing on the two live nodes.
    tokio::time::sleep(LEASE * 2).await;
    assert!(guard.is_valid(), "still valid with one node down");
    assert!(guard.loss_watch().borrow().is_none(), "not reported lost");
    let later = guard.valid_until().expect("a validity");
    assert!(
        later > first_validity + LEASE,
        "renewals moved the validity on: {:?}",
        later - first_validity
    );
    assert_eq!(locker.hold_count().await, 1);
    let released = timeout(BOUND, guard.release()).await.expect("bounded");
    assert_eq!(released, Ok(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_killed_reports_the_loss_before_the_validity_ends() {
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    seed(&nodes, "rl-majority-down");
    let locker = locker(&nodes, "rl-majority-down");
    let mut guard = timeout(BOUND, locker.lock(Instant::now() + Duration::from_secs(5)))
        .await
        .expect("bounded")
        .expect("locked");
    nodes[0].stop();
    nodes[1].stop();
    let reason = timeout(LEASE * 2, guard.lost())
        .await
        .expect("lost() fires within two leases");
    let fired_at = Instant::now();
    let valid_until = guard.valid_until().expect("a validity");
    assert_eq!(reason, LossReason::Deadline);
    assert!(
        fired_at < valid_until,
        "lost() fired {:?} after the validity ended",
        fired_at - valid_until
    );
    assert!(!guard.is_valid());
}

/// Holds the lease for someone else on `node` for `ms` milliseconds.
fn hold_for_other(node: &RedisServer, name: &str, ms: u64) {
    let key = keys(name).lock;
    node.cmd(&["HSET", &key, "holder", "x", "token", "t", "fence", "5"]);
    assert_eq!(node.cmd(&["PEXPIRE", &key, &ms.to_string()]), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_grants_win_and_two_do_not() {
    let nodes: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    // Two of five held elsewhere: the three free nodes are a majority.
    seed(&nodes, "rl-3of5");
    for node in &nodes[..2] {
        hold_for_other(node, "rl-3of5", 10_000);
    }
    let c = client(&nodes, "rl-3of5", "a");
    match timeout(BOUND, c.try_acquire(c.default_budget()))
        .await
        .expect("bounded")
    {
        Ok(Acquire::Acquired(term)) => assert!(term.fence > 1000),
        other => panic!("3 of 5 grants must win, got {other:?}"),
    }
    // Three of five held elsewhere: two grants are no majority, and they are taken back.
    seed(&nodes, "rl-2of5");
    for node in &nodes[..3] {
        hold_for_other(node, "rl-2of5", 10_000);
    }
    let c = client(&nodes, "rl-2of5", "a");
    match timeout(BOUND, c.try_acquire(c.default_budget()))
        .await
        .expect("bounded")
    {
        Ok(Acquire::Denied(seen)) => assert_eq!(support::held_by(&seen), Some("x")),
        other => panic!("2 of 5 grants must not win, got {other:?}"),
    }
    for node in &nodes[3..] {
        let key = &keys("rl-2of5").lock;
        assert_eq!(
            node.cmd(&["EXISTS", key]),
            "0",
            "the minority grant was undone"
        );
    }
}
