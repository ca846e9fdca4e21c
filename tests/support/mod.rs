//! Test support shared by leaderd's integration tests: real redis-server, TCP proxy, daemon runner, safety checker.
#![allow(dead_code, unused_imports)]

pub mod daemon;
pub mod monitor;
pub mod proxy;
pub mod redis;
pub mod safety;
pub mod sentinel;
pub mod timeshift;

pub use self::daemon::{leaderd_bin, run_cli, CliOutput, Daemon, DaemonOpts};
pub use self::proxy::Proxy;
pub use self::redis::{resp_cmd, RedisServer, Reply, RespConn};
pub use self::safety::{check_logs, check_no_overlap, terms_from_logs, Term};
pub use self::sentinel::Sentinel;
pub use self::timeshift::ShiftedClock;

use std::net::TcpListener;
use std::time::{Duration, Instant};

/// Poll `f` every `step` until it returns `Some`, for at most `timeout` (and at most
/// `timeout / step + 2` calls). Returns `None` when time runs out.
pub fn wait_until<T>(
    timeout: Duration,
    step: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let step = step.max(Duration::from_millis(1));
    let deadline = Instant::now() + timeout;
    let max_calls = timeout.as_millis() / step.as_millis() + 2;
    for _ in 0..max_calls {
        if let Some(v) = f() {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::sleep(step.min(deadline - now));
    }
    None
}

/// A port on 127.0.0.1 that was free a moment ago, for a server a test starts.
///
/// Picked below the kernel's ephemeral range, so that no `connect()` and no `bind(0)` (of
/// this process or any other) can take it between now and the server's own bind: port 0
/// handed out such a port, and an outgoing connection took it before leaderd listened.
/// Within this process each call gets a new port; processes start at different places.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 10_000;
    let high = ephemeral_low().max(LOW);
    let span = high - LOW;
    if span < 1_000 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        return l.local_addr().expect("local_addr").port();
    }
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..span {
        let port = LOW + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let port = u16::try_from(port).expect("ports below the ephemeral range fit in u16");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {LOW}..{high}");
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The minimal ACL line of the docs, as arguments, for `user` with `password`, without the
/// permissions in `without`.
pub fn minimal_acl(user: &str, password: &str, without: &[&str]) -> Vec<String> {
    let docs =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .expect("read README.md");
    let line = docs
        .lines()
        .find(|l| l.starts_with("ACL SETUSER leaderd on "))
        .expect("the minimal ACL line in the docs");
    line.split_whitespace()
        .filter(|arg| !without.contains(arg))
        .map(|arg| match arg {
            "leaderd" => user.to_string(),
            ">PASSWORD" => format!(">{password}"),
            other => other.to_string(),
        })
        .collect()
}

/// The keys of the contract's status document, in its order.
pub const DOC_KEYS: [&str; 15] = [
    "name",
    "identity",
    "state",
    "is_leader",
    "leader",
    "fence",
    "acquired_at",
    "acquired_at_ms",
    "lease_valid_until",
    "lease_valid_until_ms",
    "observed_at",
    "observed_at_ms",
    "healthy",
    "leader_address",
    "priority",
];

/// A new random term token (128 bits as 32 hex digits), as the lease makes them.
pub fn new_token() -> String {
    let a: u64 = rand_u64();
    let b: u64 = rand_u64();
    format!("{a:016x}{b:016x}")
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Who holds the lease in `seen` (`None`: vacant, quarantined or reserved).
pub fn held_by(seen: &leaderd::Observed) -> Option<&str> {
    seen.holder().map(|h| h.holder.as_str())
}

/// The fence `seen` shows: the holder's, or the placeholder's counter; 0 when vacant.
pub fn fence_of(seen: &leaderd::Observed) -> u64 {
    match seen {
        leaderd::Observed::Vacant => 0,
        leaderd::Observed::Held(h) => h.fence,
        leaderd::Observed::Quarantined { fence, .. }
        | leaderd::Observed::Reserved { fence, .. } => *fence,
    }
}
