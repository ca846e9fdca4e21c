//! The sharded elector (`leaderd::shard::ShardElector`, README "Shards") against a real
//! redis-server: three electors and 16 shards settle to exactly the assignment, a fourth
//! joins and gets its share, one shuts down and every shard it owned moves; fences of each
//! shard only increase across its owners. Over a Redlock of three nodes too: a dead node
//! moves no shard.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use leaderd::shard::{Assignment, OwnedShard, ShardElector, ShardEvents, ShardLeases, ShardPolicy};
use leaderd::{LeaseClient, LeaseSpec, Observed, RedlockClient};
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
        release_on_shutdown: true,
    }
}

struct Replica {
    id: String,
    owned: watch::Receiver<Vec<OwnedShard>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

fn start(url: &str, id: &str) -> Replica {
    start_with(url, id, policy(), |e| e)
}

/// An elector of `policy` telling `events` of every shard's term.
fn start_told(
    url: &str,
    id: &str,
    policy: ShardPolicy,
    events: std::sync::Arc<dyn ShardEvents>,
) -> Replica {
    start_with(url, id, policy, |e| e.with_events(events))
}

fn start_with(
    url: &str,
    id: &str,
    policy: ShardPolicy,
    with: impl FnOnce(ShardElector) -> ShardElector,
) -> Replica {
    let spec = LeaseSpec::new(NAME, id, LEASE);
    let client = LeaseClient::connect(url, spec).expect("valid url");
    start_over(with(ShardElector::new(client, policy)), id)
}

fn start_over<C: ShardLeases>(elector: ShardElector<C>, id: &str) -> Replica {
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

/// Electors a, b and c of a fresh election (its counter seeded: no quarantine), settled.
async fn three_settled(redis: &RedisServer, fences: &mut HashMap<u32, u64>) -> Vec<Replica> {
    let fence = format!("leaderd:{{{NAME}}}:fence");
    assert_eq!(redis.cmd(&["SET", &fence, "1000"]), "OK");
    let replicas: Vec<Replica> = ["a", "b", "c"]
        .iter()
        .map(|id| start(&redis.url(), id))
        .collect();
    settled(&replicas, fences).await;
    replicas
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn electors_settle_to_the_assignment_share_with_a_newcomer_and_take_over_a_leaver() {
    let redis = RedisServer::start();
    let mut fences = HashMap::new();
    let mut replicas = three_settled(&redis, &mut fences).await;
    let loads: Vec<usize> = replicas.iter().map(|r| r.owned.borrow().len()).collect();
    assert!(loads.iter().all(|&l| l <= 6), "{loads:?}");
    // Settled, a replica reads the shards it does not hold when one can next be free (their
    // owners renew every 200 ms: about once a lease), not every retry_period.
    assert_eq!(redis.cmd(&["CONFIG", "RESETSTAT"]), "OK");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stats = redis.cmd(&["INFO", "commandstats"]);
    let hmget = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_hmget:calls="))
        .and_then(|l| l.split(',').next()?.parse::<u64>().ok())
        .unwrap_or(0);
    let every_retry_period = 3 * u64::from(SHARDS) * 5;
    assert!(hmget < every_retry_period / 2, "{hmget} shard reads in 1 s");

    replicas.push(start(&redis.url(), "d"));
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
    let mut fences = HashMap::new();
    let mut replicas = three_settled(&redis, &mut fences).await;
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
    let mut late = Duration::ZERO;
    while !pending.is_empty() && died.elapsed() < SETTLE {
        let now = owners(&replicas, &mut fences);
        for (shard, (owner, _)) in &now {
            if let Some(valid_until) = pending.remove(shard) {
                // Taken only once c's own validity for it had passed.
                assert!(
                    Instant::now() > valid_until,
                    "shard {shard} taken by {owner} early"
                );
                late = late.max(valid_until.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(pending.is_empty(), "never taken: {pending:?}");
    let took = died.elapsed();
    eprintln!(
        "c's {} shards taken within {took:?} of its death, at most {late:?} after their validity",
        had.len()
    );
    assert!(took < LEASE + Duration::from_secs(1), "{took:?}");
    settled(&replicas, &mut fences).await;
    for r in &replicas {
        r.stop.cancel();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_frozen_each_shard_is_stepped_down_before_its_validity() {
    let redis = RedisServer::start();
    let fence = format!("leaderd:{{{NAME}}}:fence");
    assert_eq!(redis.cmd(&["SET", &fence, "1000"]), "OK");
    let mut fences = HashMap::new();
    let replicas = vec![start(&redis.url(), "a")];
    settled(&replicas, &mut fences).await;
    let before: Vec<OwnedShard> = replicas[0].owned.borrow().clone();
    assert_eq!(before.len(), SHARDS as usize);
    redis.pause();
    let frozen = Instant::now();
    let last_validity = before.iter().map(|o| o.valid_until).max().expect("owned");
    // Every shard listed is within its validity; all are gone by the last validity.
    let mut emptied = None;
    while frozen.elapsed() < LEASE * 2 {
        let now = Instant::now();
        let owned = replicas[0].owned.borrow().clone();
        for o in &owned {
            assert!(
                o.valid_until > now,
                "shard {} listed past its validity",
                o.shard
            );
        }
        if owned.is_empty() {
            emptied = Some(now);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    redis.resume();
    let emptied = emptied.expect("every shard stepped down");
    assert!(emptied < last_validity, "stepped down after the validity");
    // Redis back: the shards expire there and are taken again, with higher fences.
    settled(&replicas, &mut fences).await;
    let after = replicas[0].owned.borrow().clone();
    for (b, a) in before.iter().zip(&after) {
        assert!(
            a.fence > b.fence,
            "shard {}: {} then {}",
            a.shard,
            b.fence,
            a.fence
        );
    }
    replicas[0].stop.cancel();
}

/// A Redlock client of the election over `urls`, as `id`.
fn redlock(urls: &[String], id: &str) -> RedlockClient {
    let spec = LeaseSpec::new(NAME, id, LEASE)
        .with_command_timeout(Duration::from_millis(200))
        .with_connect_timeout(Duration::from_millis(200));
    RedlockClient::connect(urls, spec).expect("redlock client")
}

/// How many scripts `node` ran since its stats were reset.
fn script_calls(node: &RedisServer) -> u64 {
    let stats = node.cmd(&["INFO", "commandstats"]);
    let calls = |name: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
            .and_then(|l| l.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    calls("evalsha") + calls("eval")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redlock_a_dead_node_moves_no_shard_and_leavers_shards_move() {
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let fence = format!("leaderd:{{{NAME}}}:fence");
    for n in &nodes {
        assert_eq!(n.cmd(&["SET", &fence, "1000"]), "OK");
    }
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let mut fences = HashMap::new();
    let mut replicas: Vec<Replica> = ["a", "b", "c"]
        .iter()
        .map(|id| start_over(ShardElector::new(redlock(&urls, id), policy()), id))
        .collect();
    settled(&replicas, &mut fences).await;
    let before = owners(&replicas, &mut fences);
    // Each shard's lease is held on a majority of the nodes with the term's one fence, and
    // on no node by anyone else (a node whose acquire timed out may lack it until a renew
    // takes it back).
    for (s, (owner, fence)) in &before {
        let key = format!("leaderd:{{{NAME}}}:shard:{s}");
        let mut held = 0;
        for n in &nodes {
            let holder = n.cmd(&["HGET", &key, "holder"]);
            if holder == *owner {
                assert_eq!(n.cmd(&["HGET", &key, "fence"]), fence.to_string());
                held += 1;
            } else {
                assert_eq!(holder, "(nil)", "shard {s} held by {holder} on a node");
            }
        }
        assert!(held >= 2, "shard {s} of {owner} held on {held} of 3 nodes");
    }
    // One renew per node per retry_period for all of a replica's shards: in 1 s (5 retry
    // periods) about 3 x 5 renews and 3 x 1.5 heartbeats on a node (18-21 on a quiet host,
    // up to 27 on a loaded one, where a late answer has a renew take a shard back), against
    // SHARDS x 5 = 80 if every shard were renewed on its own: bounded at half of that.
    assert_eq!(nodes[0].cmd(&["CONFIG", "RESETSTAT"]), "OK");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let scripts = script_calls(&nodes[0]);
    eprintln!("{scripts} scripts in 1 s on one node");
    let per_shard = u64::from(SHARDS) * 5;
    assert!(
        scripts < per_shard / 2,
        "{scripts} scripts in 1 s on one node (per shard: {per_shard})"
    );

    // One node killed: every shard kept by its term, renewed past its first validity.
    nodes[2].stop();
    let killed = Instant::now();
    while killed.elapsed() < LEASE * 2 {
        assert_eq!(
            owners(&replicas, &mut fences),
            before,
            "a dead node moved a shard"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reader = redlock(&urls, "reader");
    let read = reader.read_shards(SHARDS, Duration::from_millis(500)).await;
    for (s, seen) in read.expect("read on two nodes").iter().enumerate() {
        let Observed::Held(h) = seen else {
            panic!("shard {s}: {seen:?}");
        };
        assert_eq!(Some(&(h.holder.clone(), h.fence)), before.get(&(s as u32)));
    }
    nodes[2].start_again(); // empty

    // c shuts down: its shards are released to their next targets at once.
    let c = replicas.pop().expect("c");
    let had: Vec<u32> = c.owned.borrow().iter().map(|o| o.shard).collect();
    assert!(!had.is_empty());
    c.stop.cancel();
    let left = Instant::now();
    while !had
        .iter()
        .all(|s| owners(&replicas, &mut fences).contains_key(s))
    {
        assert!(left.elapsed() < LEASE / 2, "c's shards not owned again");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    c.task.await.expect("c's task");
    settled(&replicas, &mut fences).await;

    // b dies: each of its shards is taken by a only after b's validity, with a higher fence.
    let b = replicas.pop().expect("b");
    b.task.abort();
    let _ = b.task.await;
    let dead = b.owned.borrow().clone();
    settled(&replicas, &mut fences).await;
    let a_owns = replicas[0].owned.borrow().clone();
    for o in &dead {
        let new = a_owns
            .iter()
            .find(|n| n.shard == o.shard)
            .expect("taken by a");
        assert!(
            new.fence > o.fence,
            "shard {}: {} then {}",
            o.shard,
            o.fence,
            new.fence
        );
        assert!(
            new.acquired_at > o.valid_until_wall,
            "shard {} taken early",
            o.shard
        );
    }
    replicas[0].stop.cancel();
}

/// Waits until `d` owns exactly its share of the assignment of `replicas`; returns how long it
/// took.
async fn owns_its_share(replicas: &[Replica], d: &Replica, within: Duration) -> Duration {
    let ids: Vec<&str> = replicas.iter().map(|r| r.id.as_str()).collect();
    let want = Assignment::compute(NAME, SHARDS, &ids, 0).shards_of(&d.id);
    let start = Instant::now();
    while start.elapsed() < within {
        let owned: Vec<u32> = d.owned.borrow().iter().map(|o| o.shard).collect();
        if owned == want {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{} does not own {want:?} within {within:?}", d.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_owns_its_share_a_heartbeat_period_after_it_registers() {
    let redis = RedisServer::start();
    let mut fences = HashMap::new();
    let begun = Instant::now();
    let mut replicas = three_settled(&redis, &mut fences).await;
    // The owners read the members every heartbeat period from their start: d registers just
    // after one such read, so it is seen almost a period later. Its share is due a period
    // after it registered, not a period after it was seen.
    let beat = LEASE / 3;
    let periods = begun.elapsed().as_millis() / beat.as_millis() + 1;
    let after_a_read = begun + beat * periods as u32 + Duration::from_millis(100);
    tokio::time::sleep_until(after_a_read).await;
    replicas.push(start(&redis.url(), "d"));
    let took = owns_its_share(&replicas, &replicas[3], SETTLE).await;
    eprintln!("d owned its share {took:?} after it started");
    assert!(
        took >= beat - Duration::from_millis(50),
        "{took:?}: before a heartbeat period"
    );
    assert!(
        took < beat + beat / 2,
        "{took:?}: not within a heartbeat period + ms"
    );
    settled(&replicas, &mut fences).await;
    for r in &replicas {
        r.stop.cancel();
    }
}

/// Keeps `id`'s registry entry refreshed, as a live replica's (its process alive, its
/// elector not): `lua` rewrites `seen_at_ms` in the entry and the index with the Redis time.
fn refresh_entry(redis: &RedisServer, id: &str) {
    let lua = "local t = redis.call('TIME') \
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
        redis.call('ZADD', KEYS[2], now, ARGV[1]) \
        local raw = redis.call('HGET', KEYS[1], ARGV[1]) \
        if raw then local e = cjson.decode(raw) e['seen_at_ms'] = now \
        redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e)) end return now";
    let keys = LeaseSpec::new(NAME, id, LEASE).keys();
    let (entries, index) = (keys.candidates.as_str(), keys.candidates_index.as_str());
    redis.cmd(&["EVAL", lua, "2", entries, index, id]);
}

/// Every shard term begun, as the electors tell it: (shard, owner, when).
#[derive(Default)]
struct Begun(std::sync::Mutex<Vec<(u32, String, Instant)>>);

/// The events of one elector, into `Begun`.
struct Told(String, std::sync::Arc<Begun>);

impl ShardEvents for Told {
    fn acquired(&self, owned: &OwnedShard) {
        let mut begun = self.1 .0.lock().expect("begun");
        begun.push((owned.shard, self.0.clone(), Instant::now()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_an_expiry_the_target_without_the_dead_owner_takes_the_shard_at_once() {
    let redis = RedisServer::start();
    let fence = format!("leaderd:{{{NAME}}}:fence");
    assert_eq!(redis.cmd(&["SET", &fence, "1000"]), "OK");
    let begun = std::sync::Arc::new(Begun::default());
    // A long retry_period: the others wait half of it at an expiry, far longer than a
    // loaded machine may delay the target.
    let slow = ShardPolicy {
        retry_period: LEASE / 2,
        ..policy()
    };
    let told = |id: &str| std::sync::Arc::new(Told(id.to_owned(), begun.clone()));
    let mut replicas: Vec<Replica> = ["a", "b", "c"]
        .iter()
        .map(|id| start_told(&redis.url(), id, slow, told(id)))
        .collect();
    settled(&replicas, &mut HashMap::new()).await;
    // c's elector dies, but its registry entry stays fresh: c stays a member (and the
    // target of its shards) for everyone; each of its shards is still taken at its expiry
    // by its target in the assignment without c, not a retry_period later by anyone.
    let c = replicas.pop().expect("c");
    c.task.abort();
    let _ = c.task.await;
    let had: Vec<u32> = c.owned.borrow().iter().map(|o| o.shard).collect();
    assert!(!had.is_empty());
    let mut expiry = HashMap::new();
    for &s in &had {
        let key = LeaseSpec::new(NAME, "c", LEASE).shard_key(s);
        let asked = Instant::now();
        let ttl: u64 = redis.cmd(&["PTTL", &key]).parse().expect("a TTL");
        expiry.insert(s, asked + Duration::from_millis(ttl));
    }
    let last = *expiry.values().max().expect("c's shards");
    let died = begun.0.lock().expect("begun").len();
    while Instant::now() < last + LEASE / 4 {
        refresh_entry(&redis, "c");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let without_c = Assignment::compute(NAME, SHARDS, &["a", "b"], 0);
    let mut late = Duration::ZERO;
    for (shard, owner, at) in begun.0.lock().expect("begun")[died..].iter() {
        let Some(expired) = expiry.remove(shard) else {
            continue;
        };
        let after = at.saturating_duration_since(expired);
        assert_eq!(
            Some(owner.as_str()),
            without_c.target(*shard),
            "shard {shard}, taken {after:?} after its expiry"
        );
        late = late.max(at.saturating_duration_since(expired));
    }
    assert!(expiry.is_empty(), "never taken: {expiry:?}");
    eprintln!(
        "c's {} shards taken at most {late:?} after their expiry",
        had.len()
    );
    assert!(
        late < slow.retry_period / 2,
        "taken {late:?} after the expiry"
    );
    for r in &replicas {
        r.stop.cancel();
    }
}

/// `max_shards_per_replica` is a hard bound: with 4 shards, a bound of 1 and 2 electors, each
/// owns exactly one and the other two stay vacant, however long they have been (a vacant shard
/// may be taken by anyone, but not past the bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_shards_per_replica_bounds_vacant_shards_too() {
    let redis = RedisServer::start();
    support::seed_fence(&redis, NAME);
    let bounded = ShardPolicy {
        shards: 4,
        max_shards_per_replica: 1,
        ..policy()
    };
    let replicas: Vec<Replica> = ["a", "b"]
        .iter()
        .map(|id| start_with(&redis.url(), id, bounded, |e| e))
        .collect();
    let begun = Instant::now();
    let mut both_seen = false;
    // Vacant shards may be taken by anyone after a retry_period: watch for many of them.
    while begun.elapsed() < Duration::from_secs(4) {
        for r in &replicas {
            let owned = r.owned.borrow().len();
            assert!(owned <= 1, "{} owns {owned} shards with a bound of 1", r.id);
        }
        both_seen |= replicas.iter().all(|r| r.owned.borrow().len() == 1);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(both_seen, "the two electors never owned a shard each");
    for r in &replicas {
        r.stop.cancel();
    }
}
