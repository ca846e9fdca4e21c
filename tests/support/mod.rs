//! Test support shared by leaderd's integration tests and benchmarks: real redis-server,
//! TCP proxy, daemon runner, replicas of one election, log and safety checks.
// Every test binary (and the benchmark) compiles all of it and uses a part: what one binary
// leaves unused is used by another, so unused items and imports are not reported here.
#![allow(dead_code, unused_imports)]

pub mod cluster;
pub mod daemon;
pub mod election;
pub mod exec;
pub mod locks;
pub mod logs;
pub mod metrics;
pub mod monitor;
pub mod prometheus;
pub mod proxy;
pub mod redis;
pub mod replicas;
pub mod safety;
pub mod sentinel;
pub mod shards;
pub mod timeshift;
pub mod tools;

pub use self::daemon::{leaderd_bin, run_cli, CliOutput, Daemon, DaemonOpts};
pub use self::election::{is_leader, keys, seed_fence, wait_leader};
pub use self::proxy::Proxy;
pub use self::redis::{payload, resp_cmd, RedisServer, Reply, RespConn};
pub use self::replicas::Replicas;
pub use self::safety::{check_logs, check_no_overlap, terms_from_logs, Term};
pub use self::sentinel::Sentinel;
pub use self::timeshift::ShiftedClock;

use std::net::TcpListener;
use std::time::{Duration, Instant};

/// How often a test polls what it waits for.
pub const POLL: Duration = Duration::from_millis(25);
/// How long a test waits for what should come soon. Generous: the machine may be small and
/// shared.
pub const SLOW: Duration = Duration::from_secs(15);

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
/// Never a port that another test process can be handed, nor one that port 0 or an
/// outgoing connection can take: ports come from blocks below the kernel's ephemeral range,
/// and a process owns a block while it holds a listener on the block's first port (the
/// kernel frees it when the process ends), so test binaries can run side by side. A process
/// keeps every block it claimed and walks each one once: a port is handed out at most once
/// per process, even if whoever asked has not bound it yet.
pub fn free_port() -> u16 {
    static BLOCKS: std::sync::Mutex<PortBlocks> = std::sync::Mutex::new(PortBlocks {
        held: Vec::new(),
        next: 0,
        end: 0,
    });
    let mut blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        while blocks.next < blocks.end {
            let port = u16::try_from(blocks.next).expect("below the ephemeral range");
            blocks.next += 1;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
        // Bounded: every claim is a block this process does not hold yet, and
        // `claim_port_block` panics once there is none.
        let owner = claim_port_block();
        let first = u32::from(owner.local_addr().expect("local_addr").port());
        blocks.held.push(owner);
        (blocks.next, blocks.end) = (first + 1, first + PORT_BLOCK);
    }
}

/// The blocks of ports this process owns (their first ports' listeners, held until it
/// ends), and what is left of the newest one: `next..end`.
struct PortBlocks {
    held: Vec<TcpListener>,
    next: u32,
    end: u32,
}

/// Ports per block of `free_port`.
const PORT_BLOCK: u32 = 64;

/// Binds the first port of a block nobody owns, this process included (searching from a
/// place of this process's); panics when every block below the ephemeral range is taken.
fn claim_port_block() -> TcpListener {
    const LOW: u32 = 10_000;
    let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768u32);
    let blocks = high.saturating_sub(LOW) / PORT_BLOCK;
    assert!(
        blocks > 8,
        "the ephemeral range starts at {high}: no room below it"
    );
    let start = std::process::id().wrapping_mul(7_919);
    (0..blocks)
        .map(|i| LOW + (start.wrapping_add(i) % blocks) * PORT_BLOCK)
        .find_map(|first| TcpListener::bind(("127.0.0.1", first as u16)).ok())
        .expect("no free port on 127.0.0.1 below the ephemeral range: every block is taken")
}

/// The minimal ACL line of the docs, as arguments, for `user` with `password`, without the
/// permissions in `without`.
pub fn minimal_acl(user: &str, password: &str, without: &[&str]) -> Vec<String> {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/redis-modes.md"),
    )
    .expect("read docs/redis-modes.md");
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

mod doc_keys;
pub use doc_keys::DOC_KEYS;

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

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    unix_ms(std::time::SystemTime::now())
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
