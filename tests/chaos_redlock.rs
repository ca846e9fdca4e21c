//! The chaos run in `redis.mode: redlock` over 5 independent nodes, each behind one proxy that
//! every replica goes through, under random faults: a node SIGKILLed and restarted empty after more
//! than `lease_duration` (docs/redis-modes.md#persistence-what-each-mode-needs-and-why), a node
//! SIGSTOPped or cut off, a minority (2 nodes) SIGSTOPped or cut off together, and the process
//! faults on the 5 `leaderd` replicas (SIGKILL, SIGSTOP, SIGTERM). At most 2 nodes are under a
//! fault at once. Then the same global checks as `tests/chaos.rs` (`tests/chaos_common`).
//!
//! - `chaos_short_redlock` (CI): `CHAOS_SECONDS` (default 60) and at least 25 terms.
//! - `chaos_long_redlock` (`cargo test --release --test chaos_redlock -- --ignored
//!   --nocapture`): `CHAOS_SECONDS` (default 1200) and at least 1,000 terms.
//!
//! With `CHAOS_SHARDS=N` a sharded election (README, "Shards"): a majority per shard, each
//! shard's fences strictly increasing (two shards' terms may share a fence: each node has its
//! counter). Output: `target/tmp/chaos-redlock-<short|long>/`.

mod chaos_common;
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chaos_common::{
    daemon_opts, lease_key, ms, replica_of, ChaosWorld, FaultTargets, Faults, Kind, Pending,
    ReplicaUndo, Settings, Timings, NAME,
};
use rand::rngs::StdRng;
use rand::Rng;
use support::safety::Fences;
use support::{seed_fence, Proxy, RedisServer};

const NODES: usize = 5;
const LEASE_MS: u64 = 1000;
const TIMINGS: Timings = Timings {
    lease: "1000ms",
    renew_deadline: "650ms",
    retry: "150ms",
    command_timeout: "100ms",
};
const KINDS: &[Kind] = &[
    Kind::Kill,
    Kind::Stop,
    Kind::Term,
    Kind::NodeKill,
    Kind::NodeStop,
    Kind::NodeCut,
    Kind::MinorityStop,
    Kind::MinorityCut,
];
const MODE: &str = "redlock, 5 nodes";

#[test]
fn chaos_short_redlock() {
    run(&Settings::from_env("redlock-short", 60, 25));
}

#[test]
#[ignore = "the long chaos run takes about 20 minutes; run it with --ignored (see BENCHMARKS.md)"]
fn chaos_long_redlock() {
    run(&Settings::from_env("redlock-long", 1200, 1000));
}

fn run(s: &Settings) {
    chaos_common::start_and_run(s, MODE, World::start);
}

#[derive(Debug)]
enum Undo {
    Replica(ReplicaUndo),
    /// Restart node `.0` empty, never before `.1` (more than `lease_duration` after its
    /// kill, also when everything is healed at the end).
    NodeStart(usize, Instant),
    NodeCont(Vec<usize>),
    NodeRestore(Vec<usize>),
}

struct World {
    nodes: Vec<RedisServer>,
    proxies: Vec<Proxy>,
    node_busy: Vec<bool>,
    replicas: FaultTargets,
    pending: Pending<Undo>,
    /// 0, or the election's shards (`CHAOS_SHARDS`).
    shards: u32,
}

impl World {
    fn start(s: &Settings) -> World {
        let nodes: Vec<RedisServer> = (0..NODES).map(|_| RedisServer::start()).collect();
        // The election exists already (skip the first-start quarantine).
        for n in &nodes {
            seed_fence(n, NAME);
        }
        let proxies: Vec<Proxy> = nodes.iter().map(|n| Proxy::start(n.addr())).collect();
        let list: Vec<String> = proxies.iter().map(|p| format!("\"{}\"", p.url())).collect();
        let yaml = format!("redis:\n  mode: redlock\n  urls: [{}]\n", list.join(", "));
        let replicas = FaultTargets::spawn(|i| daemon_opts(s, i, "", &yaml, &TIMINGS));
        World {
            nodes,
            proxies,
            node_busy: vec![false; NODES],
            replicas,
            pending: Pending::default(),
            shards: s.shards,
        }
    }

    /// The holder most nodes name (of the shard of this second, when sharded), asked
    /// directly (faulted nodes are skipped).
    fn leader(&self) -> Option<usize> {
        let key = lease_key(self.shards);
        let mut votes: HashMap<usize, usize> = HashMap::new();
        for (n, node) in self.nodes.iter().enumerate() {
            if self.node_busy[n] {
                continue;
            }
            let holder = node.try_cmd(&["HGET", &key, "holder"], Duration::from_millis(200));
            if let Some(r) = holder.ok().as_deref().and_then(replica_of) {
                *votes.entry(r).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .filter(|(_, v)| *v > NODES / 2)
            .map(|(r, _)| r)
            .next()
    }

    fn node_fault(&mut self, kind: Kind, rng: &mut StdRng, faults: &mut Faults) -> bool {
        let free: Vec<usize> = (0..NODES).filter(|n| !self.node_busy[*n]).collect();
        let faulted = NODES - free.len();
        let want = if matches!(kind, Kind::MinorityStop | Kind::MinorityCut) {
            2
        } else {
            1
        };
        if faulted + want > NODES / 2 {
            return false;
        }
        let mut hit = Vec::new();
        let mut pool = free;
        for _ in 0..want {
            hit.push(pool.swap_remove(rng.random_range(0..pool.len())));
        }
        for n in &hit {
            self.node_busy[*n] = true;
        }
        let what = hit
            .iter()
            .map(|n| format!("node {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let idx = faults.begin(kind, None, &what, true);
        let (due, undo) = match kind {
            Kind::NodeKill => {
                self.nodes[hit[0]].stop();
                let not_before = Instant::now() + Duration::from_millis(LEASE_MS + 100);
                (
                    ms(rng, LEASE_MS + 100, 3000),
                    Undo::NodeStart(hit[0], not_before),
                )
            }
            Kind::NodeStop | Kind::MinorityStop => {
                for n in &hit {
                    self.nodes[*n].pause();
                }
                (ms(rng, 200, 3000), Undo::NodeCont(hit))
            }
            _ => {
                for n in &hit {
                    self.proxies[*n].cut();
                }
                (ms(rng, 300, 3000), Undo::NodeRestore(hit))
            }
        };
        self.pending.push(due, undo, idx);
        true
    }
}

impl ChaosWorld for World {
    fn replicas(&mut self) -> &mut FaultTargets {
        &mut self.replicas
    }

    fn settle(&self) -> Duration {
        Duration::from_millis(LEASE_MS * 2)
    }

    fn kinds(&self) -> &'static [Kind] {
        KINDS
    }

    fn fences(&self) -> Fences {
        Fences::PerLease
    }

    fn inject(&mut self, rng: &mut StdRng, faults: &mut Faults) -> bool {
        let kind = match rng.random_range(0..100) {
            0..=17 => Kind::Kill,
            18..=35 => Kind::Stop,
            36..=53 => Kind::Term,
            54..=65 => Kind::NodeKill,
            66..=77 => Kind::NodeStop,
            78..=87 => Kind::NodeCut,
            88..=93 => Kind::MinorityStop,
            _ => Kind::MinorityCut,
        };
        let leader = self.leader();
        if kind.on_redis() {
            return self.node_fault(kind, rng, faults);
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
                Undo::NodeStart(n, not_before) => {
                    std::thread::sleep(not_before.saturating_duration_since(Instant::now()));
                    self.nodes[n].start_again();
                    self.node_busy[n] = false;
                }
                Undo::NodeCont(hit) => {
                    for n in hit {
                        self.nodes[n].resume();
                        self.node_busy[n] = false;
                    }
                }
                Undo::NodeRestore(hit) => {
                    for n in hit {
                        self.proxies[n].restore();
                        self.node_busy[n] = false;
                    }
                }
            }
            faults.end(idx);
        }
    }
}
