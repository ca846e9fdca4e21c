//! Owns `Sentinel`: a real Sentinel process (the test server binary with `--sentinel`) on 127.0.0.1 watching one master, killed on drop.

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, resp_cmd, wait_until, RedisServer};

/// The master name the Sentinels monitor.
pub const MASTER: &str = "leaderd-master";
const T: Duration = Duration::from_secs(5);

/// A Sentinel process on 127.0.0.1 with its own config file; killed on drop.
pub struct Sentinel {
    port: u16,
    dir: tempfile::TempDir,
    child: Child,
}

impl Sentinel {
    pub fn start(master_port: u16) -> Sentinel {
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
            let mut child = Command::new(super::redis::server_bin())
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::from(log.try_clone().expect("log")))
                .stderr(Stdio::from(log))
                .spawn()
                .expect("spawn the Sentinel");
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
        panic!("the Sentinel did not start");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn cmd(&self, args: &[&str]) -> String {
        resp_cmd(self.addr(), args, T).unwrap_or_else(|e| panic!("sentinel {args:?}: {e}"))
    }

    /// The master's port as this sentinel names it.
    pub fn master_port(&self) -> u16 {
        let reply = self.cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]);
        reply
            .lines()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// `SENTINEL MASTER` as field -> value.
    pub fn master_field(&self, field: &str) -> String {
        let reply = self.cmd(&["SENTINEL", "MASTER", MASTER]);
        let lines: Vec<&str> = reply.lines().collect();
        lines
            .chunks(2)
            .find(|kv| kv[0] == field)
            .map(|kv| kv.get(1).unwrap_or(&"").to_string())
            .unwrap_or_default()
    }

    pub fn log_path(&self) -> PathBuf {
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

/// A master and two replicas of it (each started with `args`), in sync, and three Sentinels
/// that see both replicas and each other.
pub fn start_watched(args: &[&str]) -> (Vec<RedisServer>, Vec<Sentinel>) {
    start_watched_with(args, 2)
}

/// [`start_watched`] with `replicas` replicas.
pub fn start_watched_with(args: &[&str], replicas: usize) -> (Vec<RedisServer>, Vec<Sentinel>) {
    let master = RedisServer::start_with_args(args);
    let mport = master.port().to_string();
    let replica = || {
        let mut with = args.to_vec();
        with.extend(["--replicaof", "127.0.0.1", &mport]);
        RedisServer::start_with_args(&with)
    };
    let mut servers = vec![master];
    servers.extend((0..replicas).map(|_| replica()));
    let synced = wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
        let info = servers[0].cmd(&["INFO", "replication"]);
        (info.matches("state=online").count() == replicas).then_some(())
    });
    assert!(synced.is_some(), "the replicas never got in sync");
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(servers[0].port())).collect();
    let ready = wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        sentinels
            .iter()
            .all(|s| {
                s.master_field("num-slaves") == replicas.to_string()
                    && s.master_field("num-other-sentinels") == "2"
            })
            .then_some(())
    });
    assert!(
        ready.is_some(),
        "sentinels never saw {replicas} replicas and each other"
    );
    (servers, sentinels)
}
