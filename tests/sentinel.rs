//! `redis.mode: sentinel` against real processes: one master, two replicas, three
//! redis-sentinel processes and three leaderd replicas. A forced failover
//! (`SENTINEL FAILOVER`) and then a killed master: leadership continues after each, on the
//! new master (whose script cache is empty: NOSCRIPT is handled), and no two terms overlap.
//! One replica runs as an ACL user with the documented minimal ACL (+wait, without +role).

mod support;

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;
use support::{check_logs, free_port, resp_cmd, wait_until, Daemon, DaemonOpts, RedisServer};

const MASTER: &str = "leaderd-master";
const NAME: &str = "sentinel-election";
const LEASE_MS: u64 = 3000;
const T: Duration = Duration::from_secs(5);

/// A redis-sentinel process on 127.0.0.1 with its own config file; killed on drop.
struct Sentinel {
    port: u16,
    dir: tempfile::TempDir,
    child: Child,
}

impl Sentinel {
    fn start(master_port: u16) -> Sentinel {
        let dir = tempfile::Builder::new()
            .prefix("leaderd-sentinel-")
            .tempdir()
            .expect("temp dir");
        for _ in 0..5 {
            let port = free_port();
            let conf = dir.path().join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\nprotected-mode no\ndir {dir}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 6000\n\
                 sentinel parallel-syncs {MASTER} 2\n",
                dir = dir.path().display()
            );
            std::fs::write(&conf, text).expect("write sentinel.conf");
            let log = OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.path().join("sentinel.log"))
                .expect("log");
            let mut child = Command::new("redis-sentinel")
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::from(log.try_clone().expect("log")))
                .stderr(Stdio::from(log))
                .spawn()
                .expect("spawn redis-sentinel");
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let up = wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
                if let Ok(Some(_)) = child.try_wait() {
                    return Some(false);
                }
                resp_cmd(addr, &["PING"], Duration::from_millis(300))
                    .ok()
                    .filter(|r| r == "PONG")
                    .map(|_| true)
            });
            if up == Some(true) {
                return Sentinel { port, dir, child };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-sentinel did not start");
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn cmd(&self, args: &[&str]) -> String {
        resp_cmd(self.addr(), args, T).unwrap_or_else(|e| panic!("sentinel {args:?}: {e}"))
    }

    /// The master's port as this sentinel names it.
    fn master_port(&self) -> u16 {
        let reply = self.cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]);
        reply
            .lines()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// `SENTINEL MASTER` as field -> value.
    fn master_field(&self, field: &str) -> String {
        let reply = self.cmd(&["SENTINEL", "MASTER", MASTER]);
        let lines: Vec<&str> = reply.lines().collect();
        lines
            .chunks(2)
            .find(|kv| kv[0] == field)
            .map(|kv| kv.get(1).unwrap_or(&"").to_string())
            .unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("sentinel.log")
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(30)..];
            eprintln!("---- sentinel {} ----\n{}", self.port, tail.join("\n"));
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

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

/// The minimal ACL line of `README.md`, plus `+wait` (for `min_replicas_ack`).
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
    let fast = ["--repl-diskless-sync-delay", "0"];
    let master = RedisServer::start_with_args(&fast);
    let mport = master.port().to_string();
    let replica =
        || RedisServer::start_with_args(&[fast[0], fast[1], "--replicaof", "127.0.0.1", &mport]);
    let mut servers = vec![master, replica(), replica()];
    let synced = wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
        let info = servers[0].cmd(&["INFO", "replication"]);
        (info.matches("state=online").count() == 2).then_some(())
    });
    assert!(synced.is_some(), "the replicas never got in sync");
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(servers[0].port())).collect();
    let ready = wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        sentinels
            .iter()
            .all(|s| {
                s.master_field("num-slaves") == "2" && s.master_field("num-other-sentinels") == "2"
            })
            .then_some(())
    });
    assert!(
        ready.is_some(),
        "sentinels never saw 2 replicas and each other"
    );

    // The election exists already (skip the first-start quarantine).
    let fence_key = format!("leaderd:{{{NAME}}}:fence");
    assert_eq!(servers[0].cmd(&["SET", &fence_key, "1000"]), "OK");

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
    let lock = format!("leaderd:{{{NAME}}}:lock");
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
            eprintln!("==== sentinel {} ====\n{log}", s.port);
        }
    }
}
