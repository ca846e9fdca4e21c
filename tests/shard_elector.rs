//! The sharded elector (`leaderd::shard::ShardElector`, README "Shards") against a real
//! redis-server: three electors and 16 shards settle to exactly the assignment, a fourth
//! joins and gets its share, one shuts down and every shard it owned moves; fences of each
//! shard only increase across its owners.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use leaderd::shard::{Assignment, OwnedShard, ShardElector, ShardPolicy};
use leaderd::{LeaseClient, LeaseSpec};
use support::RedisServer;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NAME: &str = "sh-elector";
const SHARDS: u32 = 16;
const LEASE: Duration = Duration::from_secs(2);
/// How long any settling may take: a heartbeat to be seen, one to settle, moves.
const SETTLE: Duration = Duration::from_secs(10);

fn policy() -> ShardPolicy {
    ShardPolicy {
        shards: SHARDS,
        max_shards_per_replica: 0,
        lease_duration: LEASE,
        renew_deadline: LEASE * 2 / 3,
        retry_period: Duration::from_millis(200),
        handover_window: Duration::from_secs(1),
    }
}

struct Replica {
    id: String,
    owned: watch::Receiver<Vec<OwnedShard>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

fn start(url: &str, id: &str) -> Replica {
    let spec = LeaseSpec::new(NAME, id, LEASE);
    let client = LeaseClient::connect(url, spec).expect("valid url");
    let elector = ShardElector::new(client, policy());
    let owned = elector.watch();
    let stop = CancellationToken::new();
    let task = tokio::spawn(elector.run(stop.clone()));
    Replica {
        id: id.to_owned(),
        owned,
        stop,
        task,
    }
}

/// Shard -> (owner, fence) of every shard held with a valid lease, checking that no shard is
/// listed by two replicas with one fence, and that each shard's fence never went down.
fn owners(replicas: &[Replica], fences: &mut HashMap<u32, u64>) -> HashMap<u32, (String, u64)> {
    let now = Instant::now();
    let mut owners = HashMap::new();
    for r in replicas {
        for o in r.owned.borrow().iter().filter(|o| o.valid_until > now) {
            let last = fences.entry(o.shard).or_insert(o.fence);
            assert!(
                o.fence >= *last,
                "shard {}: fence {} after {last}",
                o.shard,
                o.fence
            );
            *last = o.fence;
            if let Some((other, fence)) = owners.insert(o.shard, (r.id.clone(), o.fence)) {
                assert_ne!(
                    fence, o.fence,
                    "shard {} owned by {other} and {}",
                    o.shard, r.id
                );
            }
        }
    }
    owners
}

/// Waits until the replicas own exactly the assignment of their identities; returns how
/// long it took.
async fn settled(replicas: &[Replica], fences: &mut HashMap<u32, u64>) -> Duration {
    let ids: Vec<&str> = replicas.iter().map(|r| r.id.as_str()).collect();
    let want = Assignment::compute(NAME, SHARDS, &ids, 0);
    let start = Instant::now();
    let mut last = HashMap::new();
    while start.elapsed() < SETTLE {
        last = owners(replicas, fences);
        let exact = (0..SHARDS).all(|s| last.get(&s).map(|(o, _)| o.as_str()) == want.target(s));
        if exact {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not settled to {want:?} within {SETTLE:?}: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn electors_settle_to_the_assignment_share_with_a_newcomer_and_take_over_a_leaver() {
    let redis = RedisServer::start();
    let fence = format!("leaderd:{{{NAME}}}:fence");
    assert_eq!(redis.cmd(&["SET", &fence, "1000"]), "OK");
    let url = redis.url();
    let mut fences = HashMap::new();
    let mut replicas: Vec<Replica> = ["a", "b", "c"].iter().map(|id| start(&url, id)).collect();
    settled(&replicas, &mut fences).await;
    let loads: Vec<usize> = replicas.iter().map(|r| r.owned.borrow().len()).collect();
    assert!(loads.iter().all(|&l| l <= 6), "{loads:?}");

    replicas.push(start(&url, "d"));
    let took = settled(&replicas, &mut fences).await;
    let want = Assignment::compute(NAME, SHARDS, &["a", "b", "c", "d"], 0);
    assert_eq!(replicas[3].owned.borrow().len(), want.shards_of("d").len());
    eprintln!("a fourth replica had its share after {took:?}");

    // b shuts down: each of its shards is released to its next target at once.
    let b = replicas.remove(1);
    let had: Vec<u32> = b.owned.borrow().iter().map(|o| o.shard).collect();
    assert!(!had.is_empty());
    b.stop.cancel();
    tokio::time::timeout(SETTLE, b.task)
        .await
        .expect("b stops")
        .expect("b's task");
    assert!(b.owned.borrow().is_empty(), "b claims nothing once stopped");
    let left_at = Instant::now();
    let mut moved = None;
    while left_at.elapsed() < SETTLE {
        let now = owners(&replicas, &mut fences);
        if had.iter().all(|s| now.contains_key(s)) {
            moved = Some(left_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let moved = moved.expect("every shard of b owned again");
    eprintln!("b's {} shards owned again after {moved:?}", had.len());
    assert!(moved < LEASE / 2, "b's shards owned again after {moved:?}");
    settled(&replicas, &mut fences).await;
    for r in &replicas {
        r.stop.cancel();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_electors_shards_are_taken_after_their_validity_by_their_targets() {
    let redis = RedisServer::start();
    let fence = format!("leaderd:{{{NAME}}}:fence");
    assert_eq!(redis.cmd(&["SET", &fence, "1000"]), "OK");
    let url = redis.url();
    let mut fences = HashMap::new();
    let mut replicas: Vec<Replica> = ["a", "b", "c"].iter().map(|id| start(&url, id)).collect();
    settled(&replicas, &mut fences).await;
    // c dies without a word: no release, no registry removal.
    let c = replicas.pop().expect("c");
    c.task.abort();
    let _ = c.task.await;
    let had: HashMap<u32, Instant> = c
        .owned
        .borrow()
        .iter()
        .map(|o| (o.shard, o.valid_until))
        .collect();
    assert!(!had.is_empty());
    let died = Instant::now();
    let mut pending = had.clone();
    while !pending.is_empty() && died.elapsed() < SETTLE {
        let now = owners(&replicas, &mut fences);
        for (shard, (owner, _)) in &now {
            if let Some(valid_until) = pending.remove(shard) {
                // Taken only once c's own validity for it had passed.
                assert!(
                    Instant::now() > valid_until,
                    "shard {shard} taken by {owner} early"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(pending.is_empty(), "never taken: {pending:?}");
    let took = died.elapsed();
    eprintln!(
        "c's {} shards taken within {took:?} of its death",
        had.len()
    );
    assert!(took < LEASE + Duration::from_secs(1), "{took:?}");
    settled(&replicas, &mut fences).await;
    for r in &replicas {
        r.stop.cancel();
    }
}
