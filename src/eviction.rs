//! What a server's `maxmemory-policy` can evict of the election: read at every new
//! connection and reported through a watch the lease exposes.

use redis::aio::ConnectionLike;

/// What a server's `maxmemory-policy` puts at risk.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EvictionPolicy {
    /// The server, as configured (host:port).
    pub server: String,
    /// The policy as Redis names it (`noeviction`, `allkeys-lru`, ...).
    pub policy: String,
}

impl EvictionPolicy {
    /// True unless the policy is `noeviction`.
    pub fn at_risk(&self) -> bool {
        self.policy != "noeviction"
    }

    /// What the policy can evict: nothing, the lease (it has a TTL: `volatile-*`), or the
    /// lease and the fencing counter (`allkeys-*`).
    pub fn can_lose(&self) -> &'static str {
        if !self.at_risk() {
            "nothing"
        } else if self.policy.starts_with("allkeys") {
            "the lease and the fencing counter (fences could repeat)"
        } else {
            "the lease (a leader can lose its term early)"
        }
    }
}

/// The `maxmemory_policy` of the server `conn` talks to: `INFO memory`, else
/// `CONFIG GET` (older servers). `None` when neither answers (an ACL that forbids both).
pub(crate) async fn read_policy<C: ConnectionLike + Send>(conn: &mut C) -> Option<String> {
    let info: Result<String, _> = redis::cmd("INFO").arg("memory").query_async(conn).await;
    if let Some(policy) = info.ok().as_deref().and_then(policy_in_info) {
        return Some(policy);
    }
    let config: Result<Vec<String>, _> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    config.ok().and_then(|kv| kv.get(1).cloned())
}

fn policy_in_info(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix("maxmemory_policy:"))
        .map(|p| p.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_policy_and_what_it_risks() {
        let info = "# Memory\r\nused_memory:1\r\nmaxmemory_policy:allkeys-lru\r\n";
        assert_eq!(policy_in_info(info).as_deref(), Some("allkeys-lru"));
        assert_eq!(policy_in_info("# Memory\r\n"), None);
        let p = |policy: &str| EvictionPolicy {
            server: "s".into(),
            policy: policy.into(),
        };
        assert!(!p("noeviction").at_risk());
        assert!(p("volatile-lru").can_lose().starts_with("the lease ("));
        assert!(p("allkeys-lfu").can_lose().contains("fencing counter"));
    }
}
