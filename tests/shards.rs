//! A sharded election's leases (README, "Shards") against real redis-server processes: one
//! fence counter for every shard, the reserved release per shard, one renew of every owned
//! shard, one read of every shard, the election-wide quarantine after data loss, and the
//! keys in one Cluster slot; over Redlock, a shard a majority neither extended nor lost keeps
//! its validity and is taken back where it was lost.

mod support;

use std::time::Duration;

use leaderd::connection::Topology;
use leaderd::handover::Reservation;
use leaderd::shard::{ShardLeases, ShardRenewal, ShardTerm};
use leaderd::{
    Acquire, Backend, Lease, LeaseClient, LeaseSpec, Observed, RedisSpec, RedlockClient, Term,
};
use support::locks::{bounded, BOUND};
use support::{seed_fence, RedisServer, RespConn};
use tokio::time::Instant;

fn client(url: &str, name: &str, holder: &str, lease: Duration) -> LeaseClient {
    LeaseClient::connect(url, LeaseSpec::new(name, holder, lease)).expect("valid url")
}

async fn try_shard(c: &LeaseClient, shard: u32) -> Acquire {
    let lease = c.shard(shard);
    bounded("try_acquire", lease.try_acquire(c.default_budget()))
        .await
        .unwrap_or_else(|e| panic!("shard {shard}: {e}"))
}

async fn must_take(c: &LeaseClient, shard: u32) -> Term {
    match try_shard(c, shard).await {
        Acquire::Acquired(term) => term,
        Acquire::Denied(seen) => panic!("shard {shard} for {}: {seen}", c.spec().holder()),
    }
}

async fn must_be_denied(c: &LeaseClient, shard: u32) -> Observed {
    match try_shard(c, shard).await {
        Acquire::Denied(seen) => seen,
        Acquire::Acquired(t) => panic!("shard {shard} granted to {}: {t:?}", c.spec().holder()),
    }
}

/// Releases `term` of `shard` reserved for `b` for 5 s.
async fn release_to_b(c: &LeaseClient, shard: u32, term: &Term) {
    let reservation = Reservation::new("b", Duration::from_secs(5));
    let lease = c.shard(shard);
    let released = lease.release_to(term, Some(reservation), c.default_budget());
    assert!(bounded("release_to", released).await.unwrap());
}

fn held(seen: &Observed) -> Option<(&str, u64)> {
    seen.holder().map(|h| (h.holder.as_str(), h.fence))
}

#[tokio::test]
async fn fences_strictly_increase_across_shards_from_the_one_counter() {
    let redis = RedisServer::start();
    let name = "sh-fence";
    seed_fence(&redis, name);
    let lease = Duration::from_secs(10);
    let (a, b) = (
        client(&redis.url(), name, "a", lease),
        client(&redis.url(), name, "b", lease),
    );
    let mut fences = Vec::new();
    for shard in 0..12 {
        let owner = if shard % 3 == 0 { &b } else { &a };
        let term = must_take(owner, shard).await;
        fences.push(term.fence);
        let key = format!("leaderd:{{{name}}}:shard:{shard}");
        assert_eq!(owner.shard(shard).keys().lock, key);
        assert_eq!(redis.cmd(&["HGET", &key, "fence"]), term.fence.to_string());
        // The counter holds the last fence granted, whichever shard it was.
        let counter = redis.cmd(&["GET", &format!("leaderd:{{{name}}}:fence")]);
        assert_eq!(counter, term.fence.to_string());
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences across shards: {fences:?}"
    );
    // Held per shard: the other replica is told who holds it, and so is an observer.
    let seen = must_be_denied(&b, 1).await;
    assert_eq!(held(&seen), Some(("a", fences[1])));
    let seen = bounded("observe", a.shard(3).observe(a.default_budget()))
        .await
        .unwrap();
    assert_eq!(held(&seen), Some(("b", fences[3])));
    assert_eq!(a.shard(3).shard_index(), Some(3));
    // The election's one lease is not one of them.
    let lock = format!("leaderd:{{{name}}}:lock");
    assert_eq!(redis.cmd(&["EXISTS", &lock]), "0");
}

/// The next message on a subscription (skipping nothing: the caller knows what comes).
fn next_message(sub: &mut RespConn) -> String {
    match sub.read_next().expect("a message") {
        support::Reply::Array(items) => items.last().expect("payload").render(),
        other => panic!("not a message: {other:?}"),
    }
}

#[tokio::test]
async fn a_reserved_release_of_a_shard_lets_only_its_successor_take_it() {
    let redis = RedisServer::start();
    let name = "sh-reserve";
    seed_fence(&redis, name);
    let lease = Duration::from_secs(10);
    let a = client(&redis.url(), name, "a", lease);
    let b = client(&redis.url(), name, "b", lease);
    let c = client(&redis.url(), name, "c", lease);
    let mut sub = RespConn::connect(redis.addr(), BOUND).unwrap();
    let successor_channel = format!("leaderd:{{{name}}}:released:b");
    sub.call(&["SUBSCRIBE", &successor_channel]).unwrap();
    let taken = must_take(&a, 5).await;
    let other = must_take(&a, 6).await;
    release_to_b(&a, 5, &taken).await;
    // The successor is told first, and the message names the shard.
    let told: serde_json::Value = serde_json::from_str(&next_message(&mut sub)).unwrap();
    assert_eq!(told["event"], "released");
    assert_eq!(told["shard"], 5);
    assert_eq!(told["reserved_for"], "b");
    assert_eq!(told["fence"], taken.fence);
    // Anyone else is refused that shard; the reservation is that shard's alone.
    match must_be_denied(&c, 5).await {
        Observed::Reserved { for_identity, .. } => assert_eq!(for_identity, "b"),
        other => panic!("shard 5 seen as {other}"),
    }
    assert_eq!(held(&must_be_denied(&c, 6).await), Some(("a", other.fence)));
    let seven = must_take(&c, 7).await;
    let successor = must_take(&b, 5).await;
    assert!(successor.fence > seven.fence && seven.fence > other.fence);
    assert_eq!(
        held(&must_be_denied(&c, 5).await),
        Some(("b", successor.fence))
    );
}

#[tokio::test]
async fn one_renew_extends_only_the_shards_still_held_by_their_term() {
    let redis = RedisServer::start();
    let name = "sh-renew";
    seed_fence(&redis, name);
    let lease = Duration::from_secs(5);
    let a = client(&redis.url(), name, "a", lease);
    let b = client(&redis.url(), name, "b", lease);
    let mut owned = Vec::new();
    for shard in 0..5 {
        owned.push(ShardTerm {
            shard,
            term: must_take(&a, shard).await,
        });
    }
    let key = |s: u32| format!("leaderd:{{{name}}}:shard:{s}");
    // Shard 1 expires; shard 2 expires and b takes it; shard 3 is released and taken again
    // by a new term of a (the old term's token no longer holds it).
    redis.cmd(&["DEL", &key(1)]);
    redis.cmd(&["DEL", &key(2)]);
    let b_term = must_take(&b, 2).await;
    let three = a.shard(3);
    let released = three.release(&owned[3].term, a.default_budget());
    assert!(bounded("release", released).await.unwrap());
    let again = must_take(&a, 3).await;
    // A warm-up renew loads the script, then one renew is one call whatever the count.
    let budget = a.default_budget();
    bounded("renew", a.renew_shards(&mut owned[..1], budget))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before: Vec<Instant> = owned.iter().map(|o| o.term.valid_until).collect();
    assert_eq!(redis.cmd(&["CONFIG", "RESETSTAT"]), "OK");
    let got = bounded("renew_shards", a.renew_shards(&mut owned, budget))
        .await
        .unwrap();
    let stats = redis.cmd(&["INFO", "commandstats"]);
    let evalsha = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .expect("evalsha ran");
    assert!(evalsha.contains("calls=1,"), "{evalsha}");
    use ShardRenewal::{Lost, Renewed};
    assert_eq!(got, [Renewed, Lost, Lost, Lost, Renewed]);
    for (i, o) in owned.iter().enumerate() {
        let moved = o.term.valid_until > before[i];
        assert_eq!(moved, got[i] == Renewed, "shard {}", o.shard);
    }
    let pttl = |s: u32| redis.cmd(&["PTTL", &key(s)]).parse::<i64>().unwrap();
    assert!(pttl(0) > 4_800 && pttl(4) > 4_800, "renewed: {}", pttl(0));
    // Not ours: untouched (b's term and a's new term of shard 3 keep their TTLs).
    assert!(
        pttl(2) <= 4_750 && pttl(3) <= 4_750,
        "{} {}",
        pttl(2),
        pttl(3)
    );
    assert_eq!(pttl(1), -2);
    let seen = must_be_denied(&a, 2).await;
    assert_eq!(held(&seen), Some(("b", b_term.fence)));
    let seen = must_be_denied(&b, 3).await;
    assert_eq!(held(&seen), Some(("a", again.fence)));
    // Nothing to renew: no call at all.
    let none = a.renew_shards(&mut [], budget).await.unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn one_read_shows_every_shard_held_reserved_or_vacant() {
    let redis = RedisServer::start();
    let name = "sh-read";
    seed_fence(&redis, name);
    let lease = Duration::from_secs(10);
    let a = client(&redis.url(), name, "a", lease);
    let zero = must_take(&a, 0).await;
    let one = must_take(&a, 1).await;
    release_to_b(&a, 1, &one).await;
    let seen = bounded("read_shards", a.read_shards(4, a.default_budget()))
        .await
        .unwrap();
    assert_eq!(seen.len(), 4);
    assert_eq!(held(&seen[0]), Some(("a", zero.fence)));
    let left = seen[0].remaining().unwrap();
    assert!(left > Duration::from_secs(9) && left <= lease, "{left:?}");
    match &seen[1] {
        Observed::Reserved {
            for_identity,
            fence,
            remaining,
        } => {
            assert_eq!((for_identity.as_str(), *fence), ("b", one.fence));
            assert!(remaining.unwrap() <= Duration::from_secs(5));
        }
        other => panic!("shard 1 seen as {other}"),
    }
    assert_eq!(seen[2..], [Observed::Vacant, Observed::Vacant]);
}

#[tokio::test]
async fn after_data_loss_no_shard_is_granted_for_one_lease_then_fences_are_above_all_before() {
    let mut redis = RedisServer::start();
    let name = "sh-loss";
    seed_fence(&redis, name);
    let lease = Duration::from_millis(1500);
    let a = client(&redis.url(), name, "a", lease);
    let b = client(&redis.url(), name, "b", lease);
    let mut before = 0;
    for shard in 0..4 {
        before = before.max(must_take(&a, shard).await.fence);
    }
    redis.restart_empty();
    // The first acquire after the loss (any shard) finds the counter missing: every shard,
    // the ones never held included, is refused for one lease.
    let refused_at = Instant::now();
    let seen = must_be_denied(&b, 2).await;
    assert!(matches!(seen, Observed::Quarantined { .. }), "{seen}");
    for shard in 0..8 {
        let seen = must_be_denied(&b, shard).await;
        let Observed::Quarantined { remaining, .. } = seen else {
            panic!("shard {shard} seen as {seen}");
        };
        assert!(remaining.unwrap() <= lease);
    }
    let all = bounded("read_shards", b.read_shards(8, b.default_budget()))
        .await
        .unwrap();
    assert!(
        all.iter()
            .all(|s| matches!(s, Observed::Quarantined { .. })),
        "{all:?}"
    );
    // Until the quarantine ends, no shard is granted; then fences are above all before.
    let step = Duration::from_millis(50);
    let mut granted = None;
    for _ in 0..(BOUND.as_millis() / step.as_millis()) {
        if let Acquire::Acquired(term) = try_shard(&b, 5).await {
            granted = Some((term, refused_at.elapsed()));
            break;
        }
        tokio::time::sleep(step).await;
    }
    let (term, after) = granted.expect("shard 5 granted once the quarantine ended");
    assert!(after >= lease - step, "granted {after:?} after the loss");
    assert!(term.fence > before, "{} after {before}", term.fence);
    // a's connection died with the server: its first call notices, the next reconnects.
    let _ = a.read_shards(1, a.default_budget()).await;
    let mut fences = vec![term.fence];
    for shard in [0, 1, 2, 3, 7] {
        fences.push(must_take(&a, shard).await.fence);
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[test]
fn in_a_cluster_every_shard_key_is_in_the_election_slot() {
    let servers = support::cluster::create_cluster(3, 0, &[]);
    let name = "sh-cluster";
    let spec = LeaseSpec::new(name, "a", Duration::from_secs(10));
    let slot = |key: &str| servers[0].cmd(&["CLUSTER", "KEYSLOT", key]);
    let lock_slot = slot(&spec.keys().lock);
    assert_eq!(slot(&spec.keys().fence), lock_slot);
    assert_eq!(slot(&spec.quarantine_key()), lock_slot);
    for shard in [0, 1, 63, 4095] {
        assert_eq!(slot(&spec.shard_key(shard)), lock_slot);
    }
    let urls = servers.iter().map(|s| s.url()).collect();
    let redis = RedisSpec::new(Topology::Cluster { urls });
    let Backend::Redis(a) = Backend::connect(&redis, spec).unwrap() else {
        panic!("a cluster is one LeaseClient");
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // A first start: the election's quarantine, then every script over many keys.
        assert!(matches!(
            must_be_denied(&a, 0).await,
            Observed::Quarantined { .. }
        ));
        let quarantine = a.read_shards(3, a.default_budget()).await.unwrap();
        let left = quarantine[2].remaining().expect("a TTL");
        tokio::time::sleep(left + Duration::from_millis(20)).await;
        let mut owned = Vec::new();
        for shard in 0..3 {
            owned.push(ShardTerm {
                shard,
                term: must_take(&a, shard).await,
            });
        }
        let got = a
            .renew_shards(&mut owned, a.default_budget())
            .await
            .unwrap();
        assert_eq!(got, [ShardRenewal::Renewed; 3]);
        let seen = a.read_shards(3, a.default_budget()).await.unwrap();
        for (o, s) in owned.iter().zip(&seen) {
            assert_eq!(held(s), Some(("a", o.term.fence)));
        }
    });
}

/// Redlock, 3 nodes: shard 3 held on all; node 2 down and the shard's key gone on node 0.
/// The renew extends it on node 1 only: neither renewed nor lost (`Unconfirmed`, validity
/// unchanged), and node 0 is taken back for the term, so the next renew confirms it.
#[tokio::test]
async fn over_redlock_a_shard_extended_on_no_majority_keeps_its_validity_and_is_taken_back() {
    let name = "sh-redlock-split";
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for n in &nodes {
        seed_fence(n, name);
    }
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let spec = LeaseSpec::new(name, "a", Duration::from_secs(2))
        .with_command_timeout(Duration::from_millis(200));
    let c = RedlockClient::connect(&urls, spec).expect("redlock client");
    let budget = c.default_budget();
    let Acquire::Acquired(term) = bounded("acquire", c.try_acquire_shard(3, budget))
        .await
        .expect("acquire")
    else {
        panic!("shard 3 not granted");
    };
    let key = format!("leaderd:{{{name}}}:shard:3");
    for n in &nodes {
        assert_eq!(n.cmd(&["HGET", &key, "fence"]), term.fence.to_string());
    }
    nodes[2].stop();
    assert_eq!(nodes[0].cmd(&["DEL", &key]), "1");
    let mut owned = vec![ShardTerm { shard: 3, term }];
    let before = owned[0].term.valid_until;
    let renewed = bounded("renew", c.renew_shards(&mut owned, budget)).await;
    assert_eq!(
        renewed.expect("a majority answered"),
        [ShardRenewal::Unconfirmed]
    );
    assert_eq!(
        owned[0].term.valid_until, before,
        "an unconfirmed renew moved the validity"
    );
    assert_eq!(nodes[0].cmd(&["HGET", &key, "holder"]), "a");
    assert_eq!(
        nodes[0].cmd(&["HGET", &key, "fence"]),
        owned[0].term.fence.to_string()
    );
    let renewed = bounded("renew", c.renew_shards(&mut owned, budget)).await;
    assert_eq!(
        renewed.expect("a majority answered"),
        [ShardRenewal::Renewed]
    );
    assert!(owned[0].term.valid_until > before);
    // Lost on a majority: lost.
    assert_eq!(nodes[1].cmd(&["DEL", &key]), "1");
    assert_eq!(nodes[0].cmd(&["DEL", &key]), "1");
    let renewed = bounded("renew", c.renew_shards(&mut owned, budget)).await;
    assert_eq!(renewed.expect("a majority answered"), [ShardRenewal::Lost]);
}

/// A key of the election holding another type: the error names that key (a shard's, or the
/// registry's index), not `:lock`, which a sharded election never writes; the key is left as
/// it was.
#[tokio::test]
async fn a_foreign_key_is_named_by_shard_reads_renews_and_heartbeats() {
    use leaderd::handover::Heartbeat;
    use leaderd::LeaseError;
    let redis = RedisServer::start();
    let name = "sh-foreign";
    seed_fence(&redis, name);
    let c = client(&redis.url(), name, "a", Duration::from_secs(5));
    let budget = c.default_budget();
    let shard_5 = c.spec().shard_key(5);
    assert_eq!(redis.cmd(&["SET", &shard_5, "foreign"]), "OK");
    let read = bounded("read_shards", c.read_shards(8, budget)).await;
    assert_eq!(
        read,
        Err(LeaseError::WrongType {
            key: shard_5.clone()
        })
    );

    let term = must_take(&c, 2).await;
    let shard_2 = c.spec().shard_key(2);
    assert_eq!(redis.cmd(&["DEL", &shard_2]), "1");
    assert_eq!(redis.cmd(&["RPUSH", &shard_2, "foreign"]), "1");
    let mut owned = vec![ShardTerm { shard: 2, term }];
    let renewed = bounded("renew_shards", c.renew_shards(&mut owned, budget)).await;
    assert_eq!(
        renewed,
        Err(LeaseError::WrongType {
            key: shard_2.clone()
        })
    );
    assert_eq!(redis.cmd(&["LRANGE", &shard_2, "0", "-1"]), "foreign");

    let index = c.keys().candidates_index.clone();
    assert_eq!(redis.cmd(&["SET", &index, "foreign"]), "OK");
    let read = bounded("heartbeat", c.heartbeat(Heartbeat::Read, budget)).await;
    assert_eq!(read.map(|_| ()), Err(LeaseError::WrongType { key: index }));
    assert_eq!(redis.cmd(&["GET", &shard_5]), "foreign");
}
