//! `redis.min_replicas_ack`: an acquire or renew counts only once that many replicas
//! acknowledged it (`WAIT`). Real redis-server processes: one master and one replica; the
//! replica is paused (SIGSTOP) to stop replication.

mod support;

use std::time::Duration;

use leaderd::connection::FailureKind;
use leaderd::{Acquire, Backend, Lease, LeaseError, LeaseSpec, RedisSpec, Term};
use support::{seed_fence, wait_until, RedisServer};
use tokio::time::timeout;

const BOUND: Duration = Duration::from_secs(15);

/// A command timeout that a loaded CI machine's replication acknowledges within (300 ms and
/// then 1 s did not, once each, with every test and the chaos runs beside); the
/// unacknowledged cases wait it out.
fn spec(name: &str, holder: &str) -> LeaseSpec {
    LeaseSpec::new(name, holder, Duration::from_secs(10))
        .with_command_timeout(Duration::from_secs(3))
}

fn client(master: &RedisServer, name: &str, holder: &str, acks: u32) -> Backend {
    let redis = RedisSpec::single(&master.url()).with_min_replicas_ack(acks);
    Backend::connect(&redis, spec(name, holder)).expect("url")
}

/// A master with one replica whose link is up.
fn master_and_replica() -> (RedisServer, RedisServer) {
    // No 5 s wait for more replicas before the first (diskless) sync.
    let master = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    // Acknowledging fresh writes, not only linked: a write and a WAIT on one connection.
    let mut conn = master.connect(Duration::from_secs(5)).expect("connect");
    let online = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        conn.call(&["SET", "probe", "1"]).ok()?;
        let acked = conn.call(&["WAIT", "1", "100"]).ok()?;
        (acked == support::Reply::Integer(1)).then_some(())
    });
    assert!(online.is_some(), "replica never came online");
    (master, replica)
}

/// `c` connected: connecting counts against an acquire's budget, which WAIT gets the rest of.
async fn connected(c: &Backend) {
    timeout(BOUND, c.observe(c.default_budget()))
        .await
        .expect("observe finishes")
        .expect("connected");
}

async fn acquire(c: &Backend) -> Result<Acquire, LeaseError> {
    timeout(BOUND, c.try_acquire(c.default_budget()))
        .await
        .expect("acquire finishes")
}

fn granted(outcome: Result<Acquire, LeaseError>) -> Term {
    match outcome {
        Ok(Acquire::Acquired(term)) => term,
        other => panic!("expected the lease, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_renew_count_only_when_replicas_acknowledge() {
    let (master, replica) = master_and_replica();
    let name = "wait-basic";
    seed_fence(&master, name);
    let lock = spec(name, "x").keys().lock;
    let a = client(&master, name, "a", 1);
    connected(&a).await;

    // Replication running: the acquire is acknowledged and the lease is on the replica too.
    let mut term = granted(acquire(&a).await);
    assert_eq!(replica.cmd(&["HGET", &lock, "holder"]), "a");
    let before = term.valid_until;
    timeout(BOUND, a.renew(&mut term, a.default_budget()))
        .await
        .expect("renew finishes")
        .expect("an acknowledged renew counts");
    assert!(term.valid_until > before);
    assert!(timeout(BOUND, a.release(&term, a.default_budget()))
        .await
        .unwrap()
        .unwrap());

    // Replication stopped: the acquire does not count and leaves no lease behind.
    replica.pause();
    let err = acquire(&a).await.expect_err("an unacknowledged acquire");
    match &err {
        LeaseError::Unavailable(f) => {
            assert_eq!(f.kind, FailureKind::Timeout, "{err}");
            assert!(f.cause.contains("min_replicas_ack"), "{err}");
            assert!(f.cause.contains("undone"), "{err}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert_eq!(
        master.cmd(&["EXISTS", &lock]),
        "0",
        "the acquire was undone"
    );

    // Another candidate without WAIT can take it at once: nothing blocks the election.
    let b = client(&master, name, "b", 0);
    let b_term = granted(acquire(&b).await);
    assert!(timeout(BOUND, b.release(&b_term, b.default_budget()))
        .await
        .unwrap()
        .unwrap());

    // A renew that is not acknowledged does not extend the validity.
    replica.resume();
    let linked = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        let ok = matches!(
            master.try_cmd(&["WAIT", "1", "100"], Duration::from_secs(2)),
            Ok(n) if n == "1"
        );
        ok.then_some(())
    });
    assert!(linked.is_some(), "replica did not catch up");
    let mut term = granted(acquire(&a).await);
    replica.pause();
    renew_unacknowledged(&a, &mut term).await;
    replica.resume();
}

/// A renew while the replica is paused: an error naming `min_replicas_ack`, the term as it was.
async fn renew_unacknowledged(a: &Backend, term: &mut Term) {
    let before = term.clone();
    let err = timeout(BOUND, a.renew(term, a.default_budget()))
        .await
        .expect("renew finishes")
        .expect_err("an unacknowledged renew");
    assert!(err.to_string().contains("min_replicas_ack"), "{err}");
    assert_eq!(*term, before, "the term is unchanged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replicas_nothing_is_acknowledged() {
    let master = RedisServer::start();
    let name = "wait-none";
    seed_fence(&master, name);
    let a = client(&master, name, "a", 1);
    let err = acquire(&a).await.expect_err("no replica can acknowledge");
    assert!(err.to_string().contains("min_replicas_ack"), "{err}");
    let lock = spec(name, "x").keys().lock;
    assert_eq!(master.cmd(&["EXISTS", &lock]), "0");
}

/// The fenced lock (`Lease::for_lock`, its own key and commands) honours `min_replicas_ack`
/// too: its grant and renew count once a replica acknowledged them, and an unacknowledged
/// grant is undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locks_grant_and_renew_count_only_when_replicas_acknowledge() {
    let (master, replica) = master_and_replica();
    let name = "wait-lock";
    seed_fence(&master, name);
    let lock = spec(name, "x").keys().lock;
    let a = client(&master, name, "a", 1).for_lock();
    connected(&a).await;

    let mut term = granted(acquire(&a).await);
    assert_eq!(
        replica.cmd(&["GET", &lock]),
        term.token,
        "the grant replicated"
    );
    let before = term.valid_until;
    timeout(BOUND, a.renew(&mut term, a.default_budget()))
        .await
        .expect("renew finishes")
        .expect("an acknowledged renew counts");
    assert!(term.valid_until > before);
    let mut held = term.clone();

    replica.pause();
    renew_unacknowledged(&a, &mut held).await;
    let released = timeout(BOUND, a.release(&held, a.default_budget())).await;
    assert_eq!(released.expect("release finishes"), Ok(true));

    let err = acquire(&a).await.expect_err("an unacknowledged acquire");
    assert!(err.to_string().contains("undone"), "{err}");
    assert_eq!(master.cmd(&["EXISTS", &lock]), "0", "the grant was undone");
    replica.resume();
}

#[test]
fn the_daemon_leads_only_while_a_replica_acknowledges() {
    let (master, replica) = master_and_replica();
    let name = "wait-daemon";
    seed_fence(&master, name);
    let lock = spec(name, "x").keys().lock;
    replica.pause();
    let mut o = support::DaemonOpts::new(name, "w-a", &master.url());
    o.extra_yaml = "redis:\n  min_replicas_ack: 1\n".into();
    let mut d = support::Daemon::spawn(&o);
    let refused = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        d.events_named("redis_error")
            .into_iter()
            .find(|e| e.to_string().contains("min_replicas_ack"))
    });
    assert!(refused.is_some(), "{}", d.log());
    assert!(d.events_named("acquired").is_empty(), "{}", d.log());
    let doc = d.status_doc().expect("status");
    assert_eq!(doc["is_leader"], false);

    replica.resume();
    let led = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        d.status_doc().filter(|doc| doc["is_leader"] == true)
    });
    assert!(
        led.is_some(),
        "leads once the replica acknowledges:\n{}",
        d.log()
    );
    assert_eq!(replica.cmd(&["HGET", &lock, "holder"]), "w-a");

    // Replication stops again: renews do not count, the leader steps down in time.
    replica.pause();
    let stepped = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        d.events_named("stepped_down").into_iter().next()
    });
    let stepped = stepped.expect("steps down");
    assert_eq!(stepped["reason"], "deadline", "{stepped}");
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(master.cmd(&["EXISTS", &lock]), "0", "no lease left behind");
    replica.resume();
}
