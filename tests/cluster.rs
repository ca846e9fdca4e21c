//! `redis.mode: cluster` against a real Redis Cluster made with `redis-cli --cluster create`:
//! three masters with one replica each. The lease works; its slot is migrated to another
//! master (ASK during the migration, MOVED after it), then its shard fails over to the
//! replica (`CLUSTER FAILOVER`); a seed node hangs; leadership continues and no two terms
//! overlap. And right after a crashed master's replica took over and the old master
//! rejoined empty, renewals and a graceful handover are as quick as before.

mod support;

use std::time::Duration;

use nix::sys::signal::Signal;
use support::metrics::metric;
use support::{check_logs, keys, now_ms, seed_fence, wait_until, Daemon, DaemonOpts, RedisServer};

const NAME: &str = "cluster-election";
const LEASE_MS: u64 = 3000;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct Node {
    id: String,
    port: u16,
    master: bool,
    master_id: String,
    slots: Vec<(u16, u16)>,
}

fn cluster_nodes(server: &RedisServer) -> Vec<Node> {
    server
        .cmd(&["CLUSTER", "NODES"])
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port = f
                .get(1)?
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(Node {
                id: f[0].to_string(),
                port,
                master: f[2].contains("master"),
                master_id: f[3].to_string(),
                slots,
            })
        })
        .collect()
}

fn owner_of(nodes: &[Node], slot: u16) -> Option<Node> {
    nodes
        .iter()
        .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
        .cloned()
}

fn by_port(servers: &[RedisServer], port: u16) -> &RedisServer {
    servers.iter().find(|s| s.port() == port).expect("ours")
}

/// A daemon leading with a validity from an acquire or renew sent after `after_ms`.
fn leader_after(daemons: &[Daemon], after_ms: u64, bound: Duration) -> Option<String> {
    wait_until(bound, Duration::from_millis(100), || {
        daemons.iter().find_map(|d| {
            let doc = d.status_doc()?;
            let valid = doc["lease_valid_until_ms"].as_u64()?;
            (doc["is_leader"] == true && valid > after_ms + LEASE_MS)
                .then(|| d.identity().to_string())
        })
    })
}

/// Every node agrees that the cluster is ok and that `slot` is served by `port`.
fn settled(servers: &[RedisServer], slot: u16, port: u16) -> bool {
    servers.iter().all(|s| {
        s.cmd(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
            && owner_of(&cluster_nodes(s), slot).is_some_and(|n| n.port == port)
    })
}

/// Six nodes (`cluster-node-timeout 1000`), three masters with one replica each, all agreeing
/// that the cluster is ok; returns them, the lease's slot and the master that serves it.
fn six_node_cluster() -> (Vec<RedisServer>, u16, Node) {
    let servers = support::cluster::create_cluster(3, 1, &["--repl-diskless-sync-delay", "0"]);
    let lock = keys(NAME).lock;
    let slot: u16 = servers[0]
        .cmd(&["CLUSTER", "KEYSLOT", &lock])
        .parse()
        .expect("a slot");
    let ready = wait_until(Duration::from_secs(20), Duration::from_millis(100), || {
        let nodes = cluster_nodes(&servers[0]);
        let owner = owner_of(&nodes, slot)?;
        let replicas = nodes.iter().filter(|n| !n.master).count();
        (replicas == 3 && settled(&servers, slot, owner.port)).then_some(owner)
    });
    let owner = ready.expect("the cluster is ok with 3 masters and 3 replicas");
    (servers, slot, owner)
}

#[test]
fn lease_survives_resharding_and_failover_of_its_shard() {
    let (servers, slot, owner) = six_node_cluster();
    let lock = keys(NAME).lock;
    let fence = keys(NAME).fence;
    // The election exists already (skip the first-start quarantine).
    seed_fence(by_port(&servers, owner.port), NAME);

    let seeds: Vec<String> = servers[..3]
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}", s.port()))
        .collect();
    let extra = format!(
        "redis:\n  mode: cluster\n  urls: [{}]\n  min_replicas_ack: 1\n",
        seeds.join(", ")
    );
    let daemons: Vec<Daemon> = ["c-a", "c-b", "c-c"]
        .iter()
        .map(|id| {
            let mut o = DaemonOpts::new(NAME, id, "");
            o.lease = "3s".into();
            o.renew_deadline = "2s".into();
            o.retry = "300ms".into();
            o.command_timeout = "250ms".into();
            o.extra_yaml = extra.clone();
            Daemon::spawn(&o)
        })
        .collect();
    let first = leader_after(&daemons, 0, Duration::from_secs(15)).expect("a first leader");
    let status = daemons[1].cli(&["status", "--json"]);
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(status.stdout.contains(&first), "{status:?}");

    // 1. Resharding: migrate the lease's slot to another master, key by key, the way
    // `redis-cli --cluster reshard` does (ASK while migrating, MOVED after).
    let nodes = cluster_nodes(&servers[0]);
    let target = nodes
        .iter()
        .find(|n| n.master && n.id != owner.id)
        .cloned()
        .expect("another master");
    let (src, dst) = (
        by_port(&servers, owner.port),
        by_port(&servers, target.port),
    );
    let s = slot.to_string();
    assert_eq!(
        dst.cmd(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &owner.id]),
        "OK"
    );
    assert_eq!(
        src.cmd(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &target.id]),
        "OK"
    );
    std::thread::sleep(Duration::from_millis(500)); // a few renews while MIGRATING
    let keys = src.cmd(&["CLUSTER", "GETKEYSINSLOT", &s, "100"]);
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    assert!(keys.contains(&fence.as_str()), "{keys:?}");
    let port = target.port.to_string();
    let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    migrate.extend(keys.iter().copied());
    assert_eq!(src.cmd(&migrate), "OK");
    std::thread::sleep(Duration::from_millis(500)); // a few renews through ASK
    for master in nodes.iter().filter(|n| n.master) {
        let server = by_port(&servers, master.port);
        assert_eq!(
            server.cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &target.id]),
            "OK"
        );
    }
    let moved = wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        settled(&servers, slot, target.port).then_some(())
    });
    assert!(
        moved.is_some(),
        "every node sees the slot on its new master"
    );
    let t1 = now_ms();
    let leader = leader_after(&daemons, t1, Duration::from_secs(15))
        .expect("leadership continues after the resharding");
    assert_eq!(dst.cmd(&["HGET", &lock, "holder"]), leader);

    // 2. Failover of the shard that holds the lease: its replica takes over.
    let replica = cluster_nodes(&servers[0])
        .into_iter()
        .find(|n| !n.master && n.master_id == target.id)
        .expect("the new owner has a replica");
    let promoted = by_port(&servers, replica.port);
    assert_eq!(promoted.cmd(&["CLUSTER", "FAILOVER"]), "OK");
    let failed_over = wait_until(Duration::from_secs(15), Duration::from_millis(100), || {
        settled(&servers, slot, replica.port).then_some(())
    });
    assert!(failed_over.is_some(), "the replica took over the shard");
    let t2 = now_ms();
    let leader = leader_after(&daemons, t2, Duration::from_secs(15))
        .expect("leadership continues after the failover");
    assert_eq!(promoted.cmd(&["HGET", &lock, "holder"]), leader);

    // 3. A seed node that hangs (paused; neither the lease's master nor its replica): a new connection,
    // e.g. `leaderd status`, still gets through (the cluster client waits for every seed
    // when it connects: not within one call's budget), and leadership goes on.
    let hung = servers[..3]
        .iter()
        .find(|s| s.port() != replica.port && s.port() != target.port)
        .expect("a seed that neither serves the slot nor acknowledges its writes");
    hung.pause();
    let status = daemons[0].cli(&["status", "--json"]);
    let t3 = now_ms();
    let continued = leader_after(&daemons, t3, Duration::from_secs(10));
    hung.resume();
    assert_eq!(status.code, Some(0), "status with a seed hung: {status:?}");
    assert!(
        continued.is_some(),
        "leadership goes on with a seed hung:\n{}",
        daemons
            .iter()
            .map(Daemon::log)
            .collect::<Vec<_>>()
            .join("\n====\n")
    );

    for d in &daemons {
        d.signal(Signal::SIGTERM);
    }
    let mut daemons = daemons;
    for d in &mut daemons {
        assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(0));
    }
    let logs: Vec<_> = daemons.iter().map(Daemon::safety_log).collect();
    let terms = check_logs(&logs).unwrap_or_else(|e| panic!("{e}"));
    if std::env::var("DUMP").is_ok() {
        eprintln!("{terms:#?}");
        for d in &daemons {
            eprintln!("==== {} ====\n{}", d.identity(), d.log());
        }
    }
}

/// Every node agrees that the cluster is ok, that `slot` is served by `port`, and that the
/// node on `rejoined` is a replica again.
fn rejoined(servers: &[RedisServer], slot: u16, port: u16, rejoined: u16) -> bool {
    settled(servers, slot, port)
        && servers.iter().all(|s| {
            cluster_nodes(s)
                .iter()
                .any(|n| n.port == rejoined && !n.master)
        })
}

/// A field of `INFO replication`.
fn replication(server: &RedisServer, field: &str) -> Option<String> {
    let info = server.cmd(&["INFO", "replication"]);
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().to_owned())
}

/// The replica of `master` has everything `master` wrote (its link is up and its offset is
/// the master's): a kill of `master` then loses no acknowledged write of the lease.
fn replica_caught_up(servers: &[RedisServer], master: &Node) -> bool {
    let nodes = cluster_nodes(by_port(servers, master.port));
    let Some(replica) = nodes.iter().find(|n| !n.master && n.master_id == master.id) else {
        return false;
    };
    let replica = by_port(servers, replica.port);
    let master = by_port(servers, master.port);
    replication(replica, "master_link_status").as_deref() == Some("up")
        && replication(master, "master_repl_offset") == replication(replica, "slave_repl_offset")
}

/// The first `acquired` event at or after `after_ms` among `daemons`: (identity, acquired_at_ms).
fn acquired_since(daemons: &[Daemon], after_ms: u64) -> Option<(String, u64)> {
    daemons.iter().find_map(|d| {
        d.events_named("acquired").into_iter().find_map(|e| {
            let at = e["acquired_at_ms"].as_u64()?;
            (at >= after_ms).then(|| (d.identity().to_string(), at))
        })
    })
}

/// `leaderd_redis_errors_total{kind="script"}` of `d` (NOSCRIPT, BUSY, WRONGTYPE).
fn script_errors(d: &Daemon) -> f64 {
    let (_, text) = d.get("/metrics");
    metric(&text, "leaderd_redis_errors_total", &[("kind", "script")]).unwrap_or(0.0)
}

/// The slot's master is SIGKILLed, its replica is promoted, and the old master comes back
/// empty and rejoins as a replica; three times. Within 1 s of every node agreeing again, the
/// leader renews and a graceful handover (SIGTERM) takes milliseconds: no call waits on a
/// node that is gone or on the one that rejoins (README, "cluster").
#[test]
fn right_after_a_failover_renewals_and_handovers_are_quick() {
    let (mut servers, slot, mut owner) = six_node_cluster();
    let _fence = keys(NAME).fence;
    seed_fence(by_port(&servers, owner.port), NAME);
    let seeds: Vec<String> = servers
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}", s.port()))
        .collect();
    let extra = format!("redis:\n  mode: cluster\n  urls: [{}]\n", seeds.join(", "));
    // A renew deadline that outlasts a failover (up to 3 s here), so that a leader renews
    // through it.
    let mut daemons: Vec<Daemon> = ["f-a", "f-b", "f-c"]
        .iter()
        .map(|id| {
            let mut o = DaemonOpts::new(NAME, id, "");
            o.lease = "6s".into();
            o.renew_deadline = "4s".into();
            o.retry = "300ms".into();
            o.command_timeout = "250ms".into();
            o.extra_yaml = extra.clone();
            Daemon::spawn(&o)
        })
        .collect();
    wait_until(Duration::from_secs(15), Duration::from_millis(50), || {
        daemons
            .iter()
            .find(|d| d.status_doc().is_some_and(|doc| doc["is_leader"] == true))
    })
    .expect("a first leader");
    let dump = |daemons: &[Daemon]| {
        daemons
            .iter()
            .map(|d| format!("==== {}\n{}", d.identity(), d.log()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for round in 1..=3 {
        // Replication is asynchronous: a kill may lose the last writes (README, "cluster":
        // min_replicas_ack), which is not what this test is about.
        let synced = wait_until(Duration::from_secs(10), Duration::from_millis(5), || {
            replica_caught_up(&servers, &owner).then_some(())
        });
        assert!(
            synced.is_some(),
            "round {round}: the master's replica catches up"
        );
        let killed = servers
            .iter()
            .position(|s| s.port() == owner.port)
            .expect("ours");
        servers[killed].stop();
        let promoted = wait_until(Duration::from_secs(15), Duration::from_millis(50), || {
            let alive: Vec<&RedisServer> = servers.iter().filter(|s| s.is_running()).collect();
            let new = owner_of(&cluster_nodes(alive[0]), slot)?;
            let agreed = alive.iter().all(|s| {
                s.cmd(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
                    && owner_of(&cluster_nodes(s), slot).is_some_and(|n| n.port == new.port)
            });
            (new.port != owner.port && agreed).then_some(new)
        });
        let promoted = promoted.unwrap_or_else(|| panic!("round {round}: a replica is promoted"));
        servers[killed].start_again();
        let back = wait_until(Duration::from_secs(20), Duration::from_millis(20), || {
            rejoined(&servers, slot, promoted.port, owner.port).then_some(())
        });
        assert!(
            back.is_some(),
            "round {round}: the old master rejoins as a replica"
        );
        let ok_at = now_ms();
        eprintln!("round {round}: the cluster is ok again at {ok_at}");
        let script_errors_at_ok: Vec<f64> = daemons.iter().map(script_errors).collect();
        let renewed = wait_until(Duration::from_secs(1), Duration::from_millis(20), || {
            daemons.iter().find_map(|d| {
                let doc = d.status_doc()?;
                let valid = doc["lease_valid_until_ms"].as_u64()?;
                // Renewed after `ok_at`: drift is 6 s * 1 % + 2 ms.
                (doc["is_leader"] == true && valid >= ok_at + 6000 - 62)
                    .then(|| d.identity().to_string())
            })
        });
        let leader = renewed.unwrap_or_else(|| {
            panic!(
                "round {round}: no renewal within 1 s of the cluster being ok:\n{}",
                dump(&daemons)
            )
        });
        let i = daemons
            .iter()
            .position(|d| d.identity() == leader)
            .expect("ours");
        // A script's first run on the new master answers NOSCRIPT: it is loaded and run
        // again in the same call, also when the client's map of the slot changed between
        // the load and the run; it is never an error once the nodes agree.
        let no_script_errors = |d: &Daemon, at_ok: f64| {
            assert_eq!(
                script_errors(d),
                at_ok,
                "round {round}: {} had a script error after the cluster was ok:\n{}",
                d.identity(),
                d.log()
            );
        };
        no_script_errors(&daemons[i], script_errors_at_ok[i]);
        let stop_at = now_ms();
        daemons[i].signal(Signal::SIGTERM);
        assert_eq!(daemons[i].wait_exit(Duration::from_secs(10)), Some(0));
        let next = wait_until(Duration::from_secs(5), Duration::from_millis(10), || {
            acquired_since(&daemons, stop_at)
        });
        let (next, at) =
            next.unwrap_or_else(|| panic!("round {round}: nobody took over:\n{}", dump(&daemons)));
        assert!(
            at - stop_at < 250,
            "round {round}: handover from {leader} to {next} took {} ms:\n{}",
            at - stop_at,
            dump(&daemons)
        );
        eprintln!(
            "round {round}: handover from {leader} to {next} in {} ms",
            at - stop_at
        );
        for (j, d) in daemons.iter().enumerate().filter(|(j, _)| *j != i) {
            no_script_errors(d, script_errors_at_ok[j]);
        }
        daemons[i].restart();
        let up = wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
            daemons[i].status_doc()
        });
        assert!(up.is_some(), "{} answers again", daemons[i].identity());
        owner = promoted;
    }
    for d in &daemons {
        d.signal(Signal::SIGTERM);
    }
    let codes: Vec<_> = daemons
        .iter_mut()
        .map(|d| d.wait_exit(Duration::from_secs(10)))
        .collect();
    assert!(
        codes.iter().all(|c| *c == Some(0)),
        "{codes:?}:\n{}",
        dump(&daemons)
    );
    if std::env::var("DUMP").is_ok() {
        eprintln!("{}", dump(&daemons));
    }
    let logs: Vec<_> = daemons.iter().map(Daemon::safety_log).collect();
    check_logs(&logs).unwrap_or_else(|e| panic!("{e}"));
}
