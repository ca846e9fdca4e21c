//! `redis.mode: sentinel` against real processes: one master, two replicas, three
//! redis-sentinel processes and three leaderd replicas. A forced failover
//! (`SENTINEL FAILOVER`) and then a killed master: leadership continues after each, on the
//! new master (whose script cache is empty: NOSCRIPT is handled), and no two terms overlap.
//! One replica runs as an ACL user with the documented minimal ACL (+wait, without +role).

mod support;

use std::time::Duration;

use nix::sys::signal::Signal;
use support::sentinel::MASTER;
use support::{
    check_logs, keys, now_ms, seed_fence, wait_until, Daemon, DaemonOpts, RedisServer, Sentinel,
};

const NAME: &str = "sentinel-election";
const LEASE_MS: u64 = 3000;
const T: Duration = Duration::from_secs(5);

/// Waits until a daemon leads with a validity that can only come from an acquire or renew
/// sent after `after_ms`; returns its identity and fence.
fn leader_after(daemons: &[Daemon], after_ms: u64, bound: Duration) -> Option<(String, u64)> {
    wait_until(bound, Duration::from_millis(100), || {
        daemons.iter().find_map(|d| {
            let doc = d.status_doc()?;
            let valid = doc["lease_valid_until_ms"].as_u64()?;
            (doc["is_leader"] == true && valid > after_ms + LEASE_MS)
                .then(|| (d.identity().to_string(), doc["fence"].as_u64().unwrap_or(0)))
        })
    })
}

/// The minimal ACL line of `docs/redis-modes.md`, plus `+wait` (for `min_replicas_ack`).
fn minimal_acl_plus_wait(password: &str) -> Vec<String> {
    let mut acl = support::minimal_acl("leaderd", password, &[]);
    acl.push("+wait".into());
    acl
}

fn server_on(servers: &mut [RedisServer], port: u16) -> &mut RedisServer {
    servers
        .iter_mut()
        .find(|s| s.port() == port)
        .expect("the master is one of ours")
}

#[test]
fn leadership_follows_a_forced_failover_and_a_killed_master() {
    // No delay before a (diskless) full sync: replicas are in sync at once, also after a
    // failover.
    let (mut servers, sentinels) =
        support::sentinel::start_watched(&["--repl-diskless-sync-delay", "0"]);

    // The election exists already (skip the first-start quarantine).
    seed_fence(&servers[0], NAME);

    let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
    let extra = format!(
        "redis:\n  mode: sentinel\n  sentinels: [{}]\n  master_name: {MASTER}\n  min_replicas_ack: 1\n",
        urls.join(", ")
    );
    // s-c runs as an ACL user with the documented minimal ACL plus +wait, without +role:
    // the master is then taken on the Sentinels' word (ACLs are per node: on every node).
    let password = format!("pw-{}", support::new_token());
    for server in &servers {
        let acl = minimal_acl_plus_wait(&password);
        let args: Vec<&str> = acl.iter().map(String::as_str).collect();
        assert_eq!(server.cmd(&args), "OK");
    }
    let daemons: Vec<Daemon> = ["s-a", "s-b", "s-c"]
        .iter()
        .map(|id| {
            let mut o = DaemonOpts::new(NAME, id, "");
            o.lease = "3s".into();
            o.renew_deadline = "2s".into();
            o.retry = "300ms".into();
            o.command_timeout = "250ms".into();
            o.extra_yaml = extra.clone();
            if *id == "s-c" {
                o.extra_yaml += "  username: leaderd\n";
                o.env = vec![("LEADERD_REDIS_PASSWORD".into(), password.clone())];
            }
            Daemon::spawn(&o)
        })
        .collect();

    let (first, _) = leader_after(&daemons, 0, Duration::from_secs(15)).expect("a first leader");
    let as_user = wait_until(T, Duration::from_millis(100), || {
        let master = sentinels[0].master_port();
        let clients = server_on(&mut servers, master).cmd(&["CLIENT", "LIST"]);
        clients.contains("user=leaderd").then_some(())
    });
    assert!(as_user.is_some(), "s-c is connected as the ACL user");
    let status = daemons[0].cli(&["status", "--json"]);
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(status.stdout.contains(&first), "{status:?}");

    // The replicas have no scripts: after a failover the new master answers NOSCRIPT.
    let acquire = redis::Script::new(include_str!("../lua/acquire.lua"));
    for replica in &servers[1..] {
        assert_eq!(replica.cmd(&["SCRIPT", "EXISTS", acquire.get_hash()]), "0");
    }

    // 1. A forced failover.
    let old = sentinels[0].master_port();
    assert_eq!(sentinels[0].cmd(&["SENTINEL", "FAILOVER", MASTER]), "OK");
    let moved = wait_until(Duration::from_secs(15), Duration::from_millis(100), || {
        let port = sentinels[0].master_port();
        (port != 0 && port != old).then_some(port)
    });
    let new = moved.expect("the sentinels promoted a replica");
    // Every replica moves to the new master, followers too: the demoted master keeps
    // answering (and accepting writes) until the Sentinels reconfigure it, so waiting for
    // an error is not enough; `+switch-master` makes them look again.
    let followed = wait_until(Duration::from_secs(5), Duration::from_millis(100), || {
        daemons
            .iter()
            .all(|d| {
                d.events_named("redis_master")
                    .iter()
                    .any(|e| e["addr"] == format!("127.0.0.1:{new}"))
            })
            .then_some(())
    });
    assert!(followed.is_some(), "every leaderd moved to the new master");
    // A validity from a renew sent a second after the switch: made on the new master.
    let t1 = now_ms() + 1000;
    let (leader, _) = leader_after(&daemons, t1, Duration::from_secs(15))
        .expect("leadership continues after the forced failover");
    let lock = keys(NAME).lock;
    let holder = wait_until(T, Duration::from_millis(100), || {
        let h = server_on(&mut servers, new).cmd(&["HGET", &lock, "holder"]);
        (h == leader).then_some(h)
    });
    assert!(holder.is_some(), "the new master holds {leader}'s lease");
    let renew = redis::Script::new(include_str!("../lua/renew.lua"));
    let loaded = server_on(&mut servers, new).cmd(&[
        "SCRIPT",
        "EXISTS",
        acquire.get_hash(),
        renew.get_hash(),
    ]);
    assert!(
        loaded.contains('1'),
        "a script was loaded on the new master after NOSCRIPT"
    );

    // 2. The master is killed.
    server_on(&mut servers, new).stop();
    let moved = wait_until(Duration::from_secs(20), Duration::from_millis(100), || {
        let port = sentinels[1].master_port();
        (port != 0 && port != new).then_some(port)
    });
    moved.expect("the sentinels replaced the killed master");
    let t2 = now_ms();
    leader_after(&daemons, t2, Duration::from_secs(20))
        .expect("leadership continues after the master was killed");

    for d in &daemons {
        d.signal(Signal::SIGTERM);
    }
    let mut daemons = daemons;
    for d in &mut daemons {
        assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(0));
    }
    let logs: Vec<_> = daemons.iter().map(Daemon::safety_log).collect();
    let terms = check_logs(&logs).unwrap_or_else(|e| panic!("{e}"));
    assert!(!terms.is_empty());
    // DUMP=1 shows what happened (terms, every log).
    if std::env::var("DUMP").is_ok() {
        eprintln!("first leader {first}; terms: {terms:#?}");
        for d in &daemons {
            eprintln!("==== {} ====\n{}", d.identity(), d.log());
        }
        for s in &sentinels {
            let log = std::fs::read_to_string(s.log_path()).unwrap_or_default();
            eprintln!("==== sentinel {} ====\n{log}", s.port());
        }
    }
}
