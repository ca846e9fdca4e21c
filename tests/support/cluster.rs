//! A real Redis Cluster for a test: servers started here, joined by `redis-cli --cluster
//! create`, and waited for until every node says the cluster is ok.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::{wait_until, RedisServer};

/// How long the nodes may take to join.
const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// `masters` masters with `replicas` replicas each (`cluster-node-timeout 1000`, and `extra`
/// arguments), all agreeing the cluster is ok within 20 s.
pub fn create_cluster(masters: usize, replicas: usize, extra: &[&str]) -> Vec<RedisServer> {
    let mut args = vec!["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"];
    args.extend_from_slice(extra);
    let servers: Vec<RedisServer> = (0..masters * (1 + replicas))
        .map(|_| RedisServer::start_with_args(&args))
        .collect();
    let addrs: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect();
    // `redis-cli --cluster create` waits for the nodes to join without a bound of its own.
    let created = Command::new("timeout")
        .args([
            "--kill-after=5",
            &JOIN_TIMEOUT.as_secs().to_string(),
            "redis-cli",
        ])
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli --cluster create");
    assert!(
        created.status.success(),
        "redis-cli --cluster create failed ({}; it is killed after {JOIN_TIMEOUT:?}):\n{}",
        created.status,
        String::from_utf8_lossy(&created.stdout)
    );
    wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
        let ok = servers
            .iter()
            .all(|s| s.cmd(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
        ok.then_some(())
    })
    .expect("the cluster is ok");
    servers
}
