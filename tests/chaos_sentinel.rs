//! The chaos run in `redis.mode: sentinel` with `min_replicas_ack: 1`: a master, two
//! replicas, three redis-sentinel processes and 5 `leaderd` replicas, under random faults:
//! the master SIGKILLed (and restarted empty) or SIGSTOPped, hence the Sentinels'
//! failovers, a replica SIGKILLed and restarted, and the process faults on the
//! leaderd replicas (SIGKILL, SIGSTOP, SIGTERM). Redis faults come one at a time, each
//! followed by 1-5 s without one. Then the same global checks as
//! `tests/chaos.rs` (shared harness: `tests/chaos_common`).
//!
//! - `chaos_short_sentinel` (CI): `CHAOS_SECONDS` (default 60) and at least 15 terms.
//! - `chaos_long_sentinel` (`cargo test --release --test chaos_sentinel -- --ignored
//!   --nocapture`): `CHAOS_SECONDS` (default 1200) and at least 1,000 terms.
//!
//! Output: `target/tmp/chaos-sentinel-<short|long>/`. `CHAOS_SENTINEL_ACK` sets `min_replicas_ack`
//! (default 1), `CHAOS_SENTINEL_REPLICAS` the number of Redis replicas (default 2; with 1,
//! `min_replicas_ack: 1` is every replica). `CHAOS_SENTINEL_FORCED=1` adds forced failovers
//! (`SENTINEL FAILOVER`): with `min_replicas_ack` below the number of replicas they lose
//! acknowledged acquires (the old master keeps taking writes that the other replica acknowledges
//! until the Sentinels reconfigure it), so that run finds reused fences and overlaps; it is not
//! part of CI (docs/safety.md#faults-what-leaderd-guarantees-and-what-it-cannot).

mod chaos_common;
mod support;

use std::time::{Duration, Instant};

use chaos_common::{
    daemon_opts, ms, replica_of, ChaosWorld, FaultTargets, Faults, Kind, Pending, ReplicaUndo,
    Settings, Timings, NAME,
};
use rand::rngs::StdRng;
use rand::Rng;
use support::sentinel::MASTER;
use support::{keys, resp_cmd, seed_fence, RedisServer, Sentinel};

/// `command_timeout` of 250 ms: `min_replicas_ack` wants 200 ms or more
/// (docs/redis-modes.md#min_replicas_ack-single-sentinel-cluster).
const TIMINGS: Timings = Timings {
    lease: "1000ms",
    renew_deadline: "650ms",
    retry: "300ms",
    command_timeout: "250ms",
};
const KINDS: &[Kind] = &[
    Kind::Kill,
    Kind::Stop,
    Kind::Term,
    Kind::MasterKill,
    Kind::MasterStop,
    Kind::Failover,
    Kind::ReplicaKill,
];
const MODE: &str = "sentinel";
/// The quiet time after a Redis fault ends, before the next (ms, uniform). Without it a
/// new Redis fault began a few hundred ms after the last one ended, and with
/// `min_replicas_ack` equal to the replicas the election stood still 96% of a long run.
const REDIS_QUIET_MS: (u64, u64) = (1000, 5000);

#[test]
fn chaos_short_sentinel() {
    run(&Settings::from_env("sentinel-short", 60, 15));
}

#[test]
#[ignore = "the long chaos run takes about 20 minutes; run it with --ignored (see BENCHMARKS.md)"]
fn chaos_long_sentinel() {
    run(&Settings::from_env("sentinel-long", 1200, 1000));
}

fn run(s: &Settings) {
    let mode = format!(
        "{MODE}, {} replicas, min_replicas_ack {}, forced failovers {}",
        data_replicas(),
        min_replicas_ack(),
        if forced_failovers() { "on" } else { "off" }
    );
    chaos_common::start_and_run(s, &mode, World::start);
}

/// `CHAOS_SENTINEL_ACK` (default 1) replicas must acknowledge every acquire and renew.
fn min_replicas_ack() -> u32 {
    std::env::var("CHAOS_SENTINEL_ACK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// `CHAOS_SENTINEL_REPLICAS` (default 2, at least 1) Redis replicas of the master.
fn data_replicas() -> usize {
    std::env::var("CHAOS_SENTINEL_REPLICAS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
        .max(1)
}

/// `CHAOS_SENTINEL_FORCED=1` adds forced failovers (`SENTINEL FAILOVER`), which break the
/// guarantee with `min_replicas_ack: 1` (see the module doc and BENCHMARKS.md).
fn forced_failovers() -> bool {
    std::env::var("CHAOS_SENTINEL_FORCED").is_ok_and(|v| v == "1")
}

#[derive(Debug)]
enum Undo {
    Replica(ReplicaUndo),
    ServerStart(usize),
    ServerCont(usize),
    /// A failover's time to complete, during which no other Redis fault is injected.
    Settled,
}

struct World {
    servers: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
    replicas: FaultTargets,
    redis_busy: bool,
    /// No Redis fault before this: the election gets a quiet time after each one.
    redis_quiet_until: Instant,
    /// The quiet time that follows the Redis fault under way.
    redis_gap: Duration,
    pending: Pending<Undo>,
}

impl World {
    fn start(s: &Settings) -> World {
        // No delay before a (diskless) full sync: replicas are in sync at once, also after a
        // failover or a restart. And a replica loads a full sync from the socket: by default
        // (`repl-diskless-load disabled`) it writes it to `dump.rdb`, which a restart loads
        // even with `save ""`: a restart with old data (found by this run).
        let args = [
            "--repl-diskless-sync-delay",
            "0",
            "--repl-diskless-load",
            "swapdb",
        ];
        let (servers, sentinels) = support::sentinel::start_watched_with(&args, data_replicas());
        // The election exists already (skip the first-start quarantine).
        seed_fence(&servers[0], NAME);
        let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
        let yaml = format!(
            "redis:\n  mode: sentinel\n  sentinels: [{}]\n  master_name: {MASTER}\n  min_replicas_ack: {}\n",
            urls.join(", "),
            min_replicas_ack()
        );
        let replicas = FaultTargets::spawn(|i| daemon_opts(s, i, "", &yaml, &TIMINGS));
        World {
            servers,
            sentinels,
            replicas,
            redis_busy: false,
            redis_quiet_until: Instant::now(),
            redis_gap: Duration::ZERO,
            pending: Pending::default(),
        }
    }

    /// The server the Sentinels name as master (the first that answers).
    fn master(&self) -> Option<usize> {
        let port = self.sentinels.iter().find_map(|s| {
            let reply = resp_cmd(
                s.addr(),
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER],
                Duration::from_millis(500),
            )
            .ok()?;
            reply.lines().nth(1)?.parse::<u16>().ok()
        })?;
        self.servers.iter().position(|r| r.port() == port)
    }

    /// The holder on the master, asked directly.
    fn leader(&self, master: Option<usize>) -> Option<usize> {
        let m = &self.servers[master?];
        if !m.is_running() {
            return None;
        }
        let key = keys(NAME).lock;
        let holder = m
            .try_cmd(&["HGET", &key, "holder"], Duration::from_millis(300))
            .ok()?;
        replica_of(&holder)
    }

    fn redis_fault(&mut self, kind: Kind, rng: &mut StdRng, faults: &mut Faults) -> bool {
        let Some(m) = self.master().filter(|m| self.servers[*m].is_running()) else {
            return false;
        };
        let port = self.servers[m].port();
        let (idx, due, undo) = match kind {
            Kind::MasterKill => {
                self.servers[m].stop();
                let idx = faults.begin(kind, None, &format!("master :{port}"), true);
                (idx, ms(rng, 300, 4000), Undo::ServerStart(m))
            }
            Kind::MasterStop => {
                self.servers[m].pause();
                let idx = faults.begin(kind, None, &format!("master :{port}"), true);
                (idx, ms(rng, 300, 4000), Undo::ServerCont(m))
            }
            Kind::Failover => {
                let s = &self.sentinels[rng.random_range(0..self.sentinels.len())];
                let reply = resp_cmd(
                    s.addr(),
                    &["SENTINEL", "FAILOVER", MASTER],
                    Duration::from_secs(2),
                )
                .unwrap_or_else(|e| format!("error: {e}"));
                let idx = faults.begin(kind, None, &format!("from :{port}: {reply}"), true);
                (idx, Duration::from_secs(3), Undo::Settled)
            }
            _ => {
                let others: Vec<usize> = (0..self.servers.len())
                    .filter(|i| *i != m && self.servers[*i].is_running())
                    .collect();
                if others.is_empty() {
                    return false;
                }
                let r = others[rng.random_range(0..others.len())];
                let what = format!("replica :{}", self.servers[r].port());
                self.servers[r].stop();
                let idx = faults.begin(kind, None, &what, false);
                (idx, ms(rng, 300, 3000), Undo::ServerStart(r))
            }
        };
        self.redis_busy = true;
        self.redis_gap = ms(rng, REDIS_QUIET_MS.0, REDIS_QUIET_MS.1);
        self.pending.push(due, undo, idx);
        true
    }

    fn redis_fault_ended(&mut self) {
        self.redis_busy = false;
        self.redis_quiet_until = Instant::now() + self.redis_gap;
    }

    fn redis_free(&self) -> bool {
        !self.redis_busy && Instant::now() >= self.redis_quiet_until
    }
}

impl ChaosWorld for World {
    fn replicas(&mut self) -> &mut FaultTargets {
        &mut self.replicas
    }

    /// A failover takes the Sentinels' down-after (1 s) and a few seconds more.
    fn settle(&self) -> Duration {
        Duration::from_secs(6)
    }

    fn kinds(&self) -> &'static [Kind] {
        KINDS
    }

    fn inject(&mut self, rng: &mut StdRng, faults: &mut Faults) -> bool {
        let kind = match rng.random_range(0..100) {
            0..=22 => Kind::Kill,
            23..=45 => Kind::Stop,
            46..=70 => Kind::Term,
            71..=79 => Kind::MasterKill,
            80..=86 => Kind::MasterStop,
            87..=92 if forced_failovers() => Kind::Failover,
            87..=92 => Kind::MasterKill,
            _ => Kind::ReplicaKill,
        };
        let master = self.master();
        let leader = self.leader(master);
        if kind.on_redis() {
            if !self.redis_free() || (kind != Kind::ReplicaKill && leader.is_none()) {
                return false;
            }
            return self.redis_fault(kind, rng, faults);
        }
        let Some((due, undo, idx)) = self.replicas.inject(kind, leader, rng, faults) else {
            return false;
        };
        self.pending.push(due, Undo::Replica(undo), idx);
        true
    }

    fn undo_due(&mut self, all: bool, faults: &mut Faults) {
        for (undo, idx) in self.pending.take_due(all) {
            match undo {
                Undo::Replica(u) => self.replicas.undo(u),
                Undo::ServerStart(i) => {
                    // Empty, as the no-persistence setup promises (see `start`).
                    let rdb = self.servers[i].log_path().with_file_name("dump.rdb");
                    let _ = std::fs::remove_file(rdb);
                    self.servers[i].start_again();
                    // What a Sentinel-rewritten config does on a real restart: follow the
                    // current master, not the one of the command line.
                    if let Some(m) = self.master().filter(|m| *m != i) {
                        let port = self.servers[m].port().to_string();
                        let _ = self.servers[i]
                            .try_cmd(&["REPLICAOF", "127.0.0.1", &port], Duration::from_secs(1));
                    }
                    self.redis_fault_ended();
                }
                Undo::ServerCont(i) => {
                    self.servers[i].resume();
                    self.redis_fault_ended();
                }
                Undo::Settled => self.redis_fault_ended(),
            }
            faults.end(idx);
        }
    }
}
