//! The chaos run: 5 real `leaderd` replicas, each talking to one real Redis through its own
//! fault-injecting proxy, under random faults for a set time: SIGKILL and restart,
//! SIGSTOP/SIGCONT, SIGTERM and restart, Redis restarts (losing its data), latency and cuts,
//! `leaderd handover` with random targets (also faulted or missing ones), and restarts with
//! another priority (every replica has `preempt: true`, so leadership follows priority).
//! Then every term is rebuilt from the replicas' JSON logs and checked: no two claims
//! overlap, fences strictly increase, and (exec mode) no child was alive outside its term.
//! It prints the transitions, the faults and any violation, and draws the timeline as SVG.
//!
//! - `chaos_short` (in `cargo test`): `CHAOS_SECONDS` (default 60) and at least 50 terms.
//! - `chaos_long` (`cargo test --release --test chaos -- --ignored chaos_long --nocapture`):
//!   `CHAOS_SECONDS` (default 1200) and at least 1,000 terms.
//!
//! Options (environment, see `tests/chaos_common`): `CHAOS_SEED`, `CHAOS_EXEC=1`,
//! `CHAOS_SHARDS=N` (a sharded election: no handover or priority faults, which do not apply),
//! `CHAOS_MIN_TRANSITIONS` (CI runs shorter), `CHAOS_OUT` (default
//! `target/tmp/chaos-<short|long>`). The Sentinel and Redlock siblings:
//! `tests/chaos_sentinel.rs`, `tests/chaos_redlock.rs`.

mod chaos_common;
mod support;

use std::time::Duration;

use chaos_common::clock::Step;
use chaos_common::report::{check_children, timeline_svg};
use chaos_common::{
    daemon_opts, handover_in_background, lease_key, ms, priority_yaml, replica_of, ChaosWorld,
    Fault, FaultTargets, Faults, Kind, Pending, ReplicaUndo, Settings, Timings, REPLICAS,
};
use rand::rngs::StdRng;
use rand::Rng;
use support::{Proxy, RedisServer, Term};

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
    Kind::Latency,
    Kind::Cut,
    Kind::RedisRestart,
    Kind::Handover,
    Kind::Priority,
];

#[test]
fn chaos_short() {
    run(&Settings::from_env("short", 60, 50));
}

#[test]
#[ignore = "the long chaos run takes about 20 minutes; run it with --ignored (see BENCHMARKS.md)"]
fn chaos_long() {
    run(&Settings::from_env("long", 1200, 1000));
}

fn run(s: &Settings) {
    chaos_common::start_and_run(s, "single Redis", World::start);
}

/// How a fault ends.
#[derive(Debug)]
enum Undo {
    Replica(ReplicaUndo),
    Latency(usize),
    Restore(usize),
    RedisStart,
    Handover(std::thread::JoinHandle<Option<i32>>),
    /// Restart replica `.0` with priority `.1`.
    Priority(usize, u32),
}

/// One Redis, each replica talking to it through its own proxy.
struct World {
    redis: RedisServer,
    proxies: Vec<Proxy>,
    replicas: FaultTargets,
    redis_busy: bool,
    pending: Pending<Undo>,
    priorities: Vec<u32>,
    /// A config for `leaderd handover`, straight to Redis (no proxy).
    cli: (tempfile::TempDir, std::path::PathBuf),
    /// 0, or the election's shards (`CHAOS_SHARDS`).
    shards: u32,
}

impl World {
    fn start(s: &Settings) -> World {
        let redis = RedisServer::start();
        let proxies: Vec<Proxy> = (0..REPLICAS).map(|_| Proxy::start(redis.addr())).collect();
        let priorities: Vec<u32> = (0..REPLICAS as u32).map(|i| (i % 3) * 10).collect();
        // Priority does not apply to shards (the assignment decides).
        let election = |i: usize| match s.shards {
            0 => priority_yaml(priorities[i]),
            _ => String::new(),
        };
        let replicas =
            FaultTargets::spawn(|i| daemon_opts(s, i, &proxies[i].url(), &election(i), &TIMINGS));
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("cli.yaml");
        let opts = daemon_opts(s, 0, &redis.url(), "", &TIMINGS);
        let text = support::daemon::render_config(&opts, 0, &dir.path().join("leader"));
        std::fs::write(&path, text).expect("write the CLI config");
        World {
            redis,
            proxies,
            replicas,
            redis_busy: false,
            pending: Pending::default(),
            priorities,
            cli: (dir, path),
            shards: s.shards,
        }
    }

    /// The replica Redis names as holder (of the shard of this second, when sharded), asked
    /// directly (not through a proxy).
    fn leader(&self) -> Option<usize> {
        if !self.redis.is_running() {
            return None;
        }
        let key = lease_key(self.shards);
        let holder = self
            .redis
            .try_cmd(&["HGET", &key, "holder"], Duration::from_millis(300))
            .ok()?;
        replica_of(&holder)
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

    fn inject(&mut self, rng: &mut StdRng, faults: &mut Faults) -> bool {
        let kind = match rng.random_range(0..100) {
            0..=18 => Kind::Kill,
            19..=37 => Kind::Stop,
            38..=53 => Kind::Term,
            54..=65 => Kind::Latency,
            66..=77 => Kind::Cut,
            78..=85 => Kind::Handover,
            86..=95 => Kind::Priority,
            _ => Kind::RedisRestart,
        };
        if self.shards > 0 && matches!(kind, Kind::Handover | Kind::Priority) {
            return false; // neither applies to shards: another fault in a moment
        }
        let leader = self.leader();
        if kind == Kind::Handover {
            let (what, thread) = handover_in_background(&self.cli.1, "1s", rng);
            let idx = faults.begin(kind, None, &what, true);
            self.pending
                .push(ms(rng, 1200, 1500), Undo::Handover(thread), idx);
            return true;
        }
        if kind == Kind::RedisRestart {
            if self.redis_busy || leader.is_none() {
                return false;
            }
            self.redis_busy = true;
            self.redis.stop();
            let idx = faults.begin(kind, None, "redis", true);
            self.pending.push(ms(rng, 50, 1000), Undo::RedisStart, idx);
            return true;
        }
        let Some(target) = self.replicas.pick(leader, rng) else {
            return false;
        };
        let on_leader = leader == Some(target);
        let idx = faults.begin(kind, Some(target), "", on_leader);
        let (due, undo) = match kind {
            Kind::Latency => {
                self.replicas.busy[target] = true;
                self.proxies[target].set_latency(ms(rng, 40, 400));
                (ms(rng, 500, 3000), Undo::Latency(target))
            }
            Kind::Cut => {
                self.replicas.busy[target] = true;
                self.proxies[target].cut();
                (ms(rng, 300, 3000), Undo::Restore(target))
            }
            Kind::Priority => {
                self.replicas.busy[target] = true;
                self.replicas.daemons[target].signal(nix::sys::signal::Signal::SIGTERM);
                let priority = rng.random_range(0..4) * 10;
                (ms(rng, 300, 1000), Undo::Priority(target, priority))
            }
            _ => {
                let (due, undo) = self.replicas.hit(kind, target, rng);
                (due, Undo::Replica(undo))
            }
        };
        self.pending.push(due, undo, idx);
        true
    }

    fn undo_due(&mut self, all: bool, faults: &mut Faults) {
        for (undo, idx) in self.pending.take_due(all) {
            match undo {
                Undo::Replica(u) => self.replicas.undo(u),
                Undo::Latency(i) => {
                    self.proxies[i].set_latency(Duration::ZERO);
                    self.replicas.undo(ReplicaUndo::Free(i));
                }
                Undo::Restore(i) => {
                    self.proxies[i].restore();
                    self.replicas.undo(ReplicaUndo::Free(i));
                }
                Undo::RedisStart => {
                    self.redis.start_again();
                    self.redis_busy = false;
                }
                Undo::Handover(thread) => {
                    let _ = thread.join();
                }
                Undo::Priority(i, priority) => {
                    let d = &mut self.replicas.daemons[i];
                    d.wait_exit(Duration::from_secs(5));
                    let old = priority_yaml(self.priorities[i]);
                    let yaml = d.opts().extra_yaml.replace(&old, &priority_yaml(priority));
                    self.priorities[i] = priority;
                    d.restart_with_yaml(&yaml);
                    self.replicas.busy[i] = false;
                }
            }
            faults.end(idx);
        }
    }
}

#[test]
fn the_timeline_draws_terms_and_faults() {
    let terms = vec![Term {
        replica: "r1".into(),
        shard: None,
        fence: 7,
        acquired_at_ms: 1_000,
        last_valid_until_ms: 3_000,
        ended_at_ms: Some(2_500),
    }];
    let faults = vec![Fault {
        kind: Kind::Kill,
        replica: Some(1),
        what: String::new(),
        start_ms: 2_400,
        end_ms: Some(3_000),
        on_leader: true,
    }];
    let svg = timeline_svg(&terms, &faults, KINDS, 0, 70_000, "test");
    assert!(svg.starts_with("<svg"));
    assert!(svg.contains("r1 fence 7 1000..2500 ms"));
    assert!(svg.contains("SIGKILL+restart 2400..3000 ms"));
    // Two strips of a minute.
    assert!(svg.contains(">60s<"));
    assert!(svg.trim_end().ends_with("</svg>"));
}

/// The settings of an exec-mode run with `shards` that writes into `dir` (for the checker
/// tests: no run takes place).
fn exec_settings(dir: &tempfile::TempDir, shards: u32) -> Settings {
    Settings {
        label: "t",
        seconds: 0,
        min_transitions: 0,
        seed: 0,
        exec: true,
        shards,
        out: dir.path().to_path_buf(),
    }
}

#[test]
fn child_lines_outside_their_term_are_violations() {
    let dir = tempfile::tempdir().unwrap();
    let s = exec_settings(&dir, 0);
    let terms = vec![
        Term {
            replica: "r0".into(),
            shard: None,
            fence: 5,
            acquired_at_ms: 100,
            last_valid_until_ms: 400,
            ended_at_ms: Some(300),
        },
        Term {
            replica: "r1".into(),
            shard: None,
            fence: 6,
            acquired_at_ms: 350,
            last_valid_until_ms: 900,
            ended_at_ms: None,
        },
    ];
    std::fs::write(dir.path().join("child-r0.txt"), "100 5\n349 5\n").unwrap();
    std::fs::write(dir.path().join("child-r1.txt"), "360 6\n").unwrap();
    assert_eq!(check_children(&s, &terms, &[], &[]), (vec![], vec![]));
    std::fs::write(dir.path().join("child-r0.txt"), "100 5\n351 5\n").unwrap();
    let (v, _) = check_children(&s, &terms, &[], &[]);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("outside its term"), "{v:?}");
    // r1's child 20 ms past its validity: excused by a 30 ms step forward of the wall clock
    // after its last renew, not by a step back, nor by a step before the renew.
    std::fs::write(dir.path().join("child-r0.txt"), "100 5\n").unwrap();
    std::fs::write(dir.path().join("child-r1.txt"), "360 6\n920 6\n").unwrap();
    let step = |at_ms, delta_ms| Step { at_ms, delta_ms };
    let (v, excused) = check_children(&s, &terms, &[], &[step(910, 30)]);
    assert!(v.is_empty(), "{v:?}");
    assert_eq!(excused.len(), 1, "{excused:?}");
    for steps in [[step(910, -30)], [step(910, 10)]] {
        let (v, excused) = check_children(&s, &terms, &[], &steps);
        assert_eq!((v.len(), excused.len()), (1, 0), "{steps:?}: {v:?}");
    }
    let (v, _) = check_children(&s, &terms, &[], &[step(2500, 30)]);
    assert_eq!(v.len(), 1, "a step after the line excuses nothing: {v:?}");
    // A violation tells its term's story: what its replica logged of that fence.
    let line = r#"{"event":"stepped_down","fence":6,"reason":"deadline"}"#;
    std::fs::write(dir.path().join("r1.log"), format!("{line}\n")).unwrap();
    let (v, _) = check_children(&s, &terms, &[], &[]);
    assert!(v[0].contains(&format!("r1 log: {line}")), "{v:?}");
}

#[test]
fn shard_children_are_checked_against_their_own_shards_terms() {
    let dir = tempfile::tempdir().unwrap();
    let s = exec_settings(&dir, 2);
    let term = |replica: &str, shard, fence, acquired_at_ms, last_valid_until_ms| Term {
        replica: replica.into(),
        shard: Some(shard),
        fence,
        acquired_at_ms,
        last_valid_until_ms,
        ended_at_ms: None,
    };
    // Shard 0's term is not ended by shard 1's (Redlock: they may even share a fence).
    let terms = vec![
        term("r0", 0, 5, 100, 900),
        term("r1", 1, 5, 350, 900),
        term("r1", 0, 7, 950, 1500),
    ];
    std::fs::write(dir.path().join("child-r0.txt"), "100 5 0\n500 5 0\n").unwrap();
    std::fs::write(dir.path().join("child-r1.txt"), "400 5 1\n960 7 0\n").unwrap();
    assert_eq!(check_children(&s, &terms, &[], &[]), (vec![], vec![]));
    // Past its own validity, or a fence of another shard: violations.
    std::fs::write(dir.path().join("child-r0.txt"), "901 5 0\n").unwrap();
    std::fs::write(dir.path().join("child-r1.txt"), "960 7 1\n").unwrap();
    let (v, _) = check_children(&s, &terms, &[], &[]);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v[0].contains("fence 5 (shard 0) was alive at 901"), "{v:?}");
    assert!(
        v[1].contains("fence 7 (shard 1) at 960, a fence no term"),
        "{v:?}"
    );
}
