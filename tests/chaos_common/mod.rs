//! The chaos harness shared by `tests/chaos*.rs`: 5 real `leaderd` replicas under random
//! faults that a mode's `ChaosWorld` injects, then every term rebuilt from the JSON logs and
//! checked by the shared checker (`tests/support/safety.rs`): no two claims overlap, fences
//! strictly increase, every replica exits 0, and (exec mode) no child lived outside its term.
//! It writes `summary.txt`, `faults.json`, the logs and `timeline.svg` to the output dir.
//!
//! Options (environment): `CHAOS_SECONDS`, `CHAOS_SEED` (the fault schedule's random seed),
//! `CHAOS_EXEC=1` (replicas run a child in exec mode that writes `<unix_ms> <fence>` lines,
//! checked against the terms), `CHAOS_SHARDS=N` (a sharded election of N shards, README
//! "Shards": every check per shard, and in exec mode one child per owned shard, writing
//! `<unix_ms> <fence> <shard>`), `CHAOS_OUT` (default `target/tmp/chaos-<label>`).
// Each mode (chaos.rs, chaos_sentinel.rs, chaos_redlock.rs) compiles this harness and
// injects its own kinds of fault: what one mode leaves unused (a `Kind`, `FaultTargets::inject`,
// `handover_in_background`) another uses, so unused items are not reported here.
#![allow(dead_code)]

pub mod clock;
pub mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::support::safety::{check_logs_with, never_valid_from_logs, Fences};
use crate::support::{now_ms, Daemon, DaemonOpts};

pub const REPLICAS: usize = 5;
pub const NAME: &str = "chaos";

pub struct Settings {
    pub label: &'static str,
    pub seconds: u64,
    pub min_transitions: usize,
    pub seed: u64,
    pub exec: bool,
    /// 0: one lease; N: a sharded election of N shards.
    pub shards: u32,
    pub out: PathBuf,
}

impl Settings {
    pub fn from_env(label: &'static str, seconds: u64, min_transitions: usize) -> Settings {
        let env_u64 = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Settings {
            label,
            seconds: env_u64("CHAOS_SECONDS").unwrap_or(seconds),
            min_transitions: env_u64("CHAOS_MIN_TRANSITIONS")
                .map_or(min_transitions, |n| n as usize),
            seed: env_u64("CHAOS_SEED").unwrap_or_else(|| rand::rng().random()),
            exec: std::env::var("CHAOS_EXEC").is_ok_and(|v| v == "1"),
            shards: env_u64("CHAOS_SHARDS").map_or(0, |n| n as u32),
            // Absolute: the replicas (and their exec-mode children) run in their own dirs.
            out: std::env::var_os("CHAOS_OUT").map_or_else(
                || Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chaos-{label}")),
                |p| std::path::absolute(PathBuf::from(p)).expect("CHAOS_OUT as an absolute path"),
            ),
        }
    }

    /// The run stops at `seconds` once it has `min_transitions` terms, and never later than
    /// three times `seconds`.
    fn hard_limit(&self) -> Duration {
        Duration::from_secs(self.seconds * 3)
    }
}

/// Every kind of fault, of every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Kill,
    Stop,
    Term,
    Latency,
    Cut,
    RedisRestart,
    MasterKill,
    MasterStop,
    Failover,
    ReplicaKill,
    NodeKill,
    NodeStop,
    NodeCut,
    MinorityStop,
    MinorityCut,
    /// `leaderd handover` with a random `--to` (a replica, a missing one, or none).
    Handover,
    /// A replica restarted with another `election.priority` (preemption follows).
    Priority,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Kill => "SIGKILL+restart",
            Kind::Stop => "SIGSTOP/SIGCONT",
            Kind::Term => "SIGTERM+restart",
            Kind::Latency => "proxy latency",
            Kind::Cut => "proxy cut",
            Kind::RedisRestart => "Redis restart (data lost)",
            Kind::MasterKill => "master SIGKILL+empty restart",
            Kind::MasterStop => "master SIGSTOP/SIGCONT",
            Kind::Failover => "SENTINEL FAILOVER",
            Kind::ReplicaKill => "replica SIGKILL+restart",
            Kind::NodeKill => "node SIGKILL, empty after > lease",
            Kind::NodeStop => "node SIGSTOP/SIGCONT",
            Kind::NodeCut => "node cut",
            Kind::MinorityStop => "2 nodes SIGSTOP",
            Kind::MinorityCut => "2 nodes cut",
            Kind::Handover => "leaderd handover",
            Kind::Priority => "priority change",
        }
    }

    pub fn color(self) -> &'static str {
        match self {
            Kind::Kill => "#d62728",
            Kind::Stop => "#7f7f7f",
            Kind::Term => "#111111",
            Kind::Latency => "#ff9f1c",
            Kind::Cut => "#9467bd",
            Kind::RedisRestart | Kind::MasterKill | Kind::NodeKill => "#8c1c13",
            Kind::MasterStop | Kind::NodeStop => "#2f4f4f",
            Kind::Failover => "#1b9e77",
            Kind::ReplicaKill => "#e7298a",
            Kind::NodeCut => "#6a3d9a",
            Kind::MinorityStop => "#a6761d",
            Kind::MinorityCut => "#386cb0",
            Kind::Handover => "#17becf",
            Kind::Priority => "#bcbd22",
        }
    }

    /// Whether the fault hits a Redis-side process (drawn on the last row).
    pub fn on_redis(self) -> bool {
        !matches!(
            self,
            Kind::Kill
                | Kind::Stop
                | Kind::Term
                | Kind::Latency
                | Kind::Cut
                | Kind::Handover
                | Kind::Priority
        )
    }
}

/// One injected fault, for the summary and the timeline.
#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: Kind,
    /// `None` for Redis.
    pub replica: Option<usize>,
    /// What was hit on the Redis side (e.g. `node 2`, `master :6380`), for the picture.
    pub what: String,
    pub start_ms: u64,
    pub end_ms: Option<u64>,
    /// Whether the replica led when the fault began (Redis faults: a leader existed).
    pub on_leader: bool,
}

/// The faults of one run, in the order they began.
#[derive(Default)]
pub struct Faults {
    pub list: Vec<Fault>,
}

impl Faults {
    /// Records a fault that begins now; returns its index for `end`.
    pub fn begin(
        &mut self,
        kind: Kind,
        replica: Option<usize>,
        what: &str,
        on_leader: bool,
    ) -> usize {
        self.list.push(Fault {
            kind,
            replica,
            what: what.to_string(),
            start_ms: now_ms(),
            end_ms: None,
            on_leader,
        });
        self.list.len() - 1
    }

    pub fn end(&mut self, idx: usize) {
        self.list[idx].end_ms = Some(now_ms());
    }
}

/// One mode's processes and faults.
pub trait ChaosWorld {
    fn replicas(&mut self) -> &mut FaultTargets;
    /// Injects one fault; false when it chose to wait (no leader to hit right now).
    fn inject(&mut self, rng: &mut StdRng, faults: &mut Faults) -> bool;
    /// Ends the faults that are due (all of them with `all`).
    fn undo_due(&mut self, all: bool, faults: &mut Faults);
    /// How long the election needs to settle after everything healed.
    fn settle(&self) -> Duration;
    /// The fault kinds this mode injects (the picture's legend).
    fn kinds(&self) -> &'static [Kind];

    /// Which fences the mode makes unique (one Redis: every fence of the election).
    fn fences(&self) -> Fences {
        Fences::OneCounter
    }
}

/// The lease whose holder faults aim at: the election's one lease, or in a sharded election
/// the shard of this second (every replica owns some).
pub fn lease_key(shards: u32) -> String {
    let keys = crate::support::keys(NAME);
    if shards == 0 {
        return keys.lock;
    }
    let shard = now_ms() / 1000 % u64::from(shards);
    keys.lock.replace(":lock", &format!(":shard:{shard}"))
}

/// The election's timings, as config values.
pub struct Timings {
    pub lease: &'static str,
    pub renew_deadline: &'static str,
    pub retry: &'static str,
    pub command_timeout: &'static str,
}

/// Replica `i`'s options: `url` (or empty) and `redis_yaml` for the Redis side, and in exec
/// mode a child that writes `<unix_ms> <fence>` every 20 ms.
pub fn daemon_opts(s: &Settings, i: usize, url: &str, redis_yaml: &str, t: &Timings) -> DaemonOpts {
    let mut o = DaemonOpts::new(NAME, &format!("r{i}"), url);
    o.lease = t.lease.into();
    o.renew_deadline = t.renew_deadline.into();
    o.retry = t.retry.into();
    o.command_timeout = t.command_timeout.into();
    o.extra_yaml = redis_yaml.into();
    if s.shards > 0 {
        o.extra_yaml += &format!("election:\n  shards: {}\n", s.shards);
    }
    if s.exec {
        let out = s.out.join(format!("child-r{i}.txt"));
        o.env
            .push(("CHAOS_CHILD_OUT".into(), out.display().to_string()));
        o.exec = vec!["bash".into(), "-c".into(), CHILD.into()];
        o.extra_yaml += "exec:\n  grace_period: 200ms\n";
    }
    o
}

/// The exec-mode child: `<unix_ms> <fence> <shard>` every 20 ms, without a process per line
/// (one child per shard runs at once); it waits on a pipe that never speaks (its writer dies
/// with the child's process group).
const CHILD: &str = r#"exec 3< <(exec sleep 86400)
while :; do
  t=${EPOCHREALTIME/./}
  echo "${t:0:-3} $LEADERD_FENCE $LEADERD_SHARD" >> "$CHAOS_CHILD_OUT"
  read -t 0.02 -u 3 || :
done"#;

/// Prepares the output directory and the seed's random source.
pub fn prepare(s: &Settings, mode: &str) -> StdRng {
    let _ = std::fs::remove_dir_all(&s.out);
    std::fs::create_dir_all(&s.out).expect("create the chaos output directory");
    eprintln!(
        "chaos {} ({mode}): {} replicas, {} shards, {} s (at least {} transitions), seed {}, exec {}, output {}",
        s.label, REPLICAS, s.shards, s.seconds, s.min_transitions, s.seed, s.exec,
        s.out.display()
    );
    StdRng::seed_from_u64(s.seed)
}

fn transitions(daemons: &[Daemon]) -> usize {
    daemons
        .iter()
        .map(|d| d.events_named("acquired").len())
        .sum()
}

/// Prepares the output, starts the mode's world and runs it (see `run`).
pub fn start_and_run<W: ChaosWorld>(s: &Settings, mode: &str, start: impl FnOnce(&Settings) -> W) {
    let mut rng = prepare(s, mode);
    let mut world = start(s);
    run(s, mode, &mut rng, &mut world);
}

/// Runs the faults until the time and the transitions are reached, heals, stops every
/// replica with SIGTERM, checks, reports, and fails on any violation.
pub fn run(s: &Settings, mode: &str, rng: &mut StdRng, world: &mut dyn ChaosWorld) {
    let mut faults = Faults::default();
    let clock = clock::ClockWatch::start();
    let started = Instant::now();
    let started_ms = now_ms();
    let mut next_fault = started + world.settle();
    let mut counted_at = started;
    loop {
        world.undo_due(false, &mut faults);
        let now = Instant::now();
        if now >= next_fault {
            next_fault = if world.inject(rng, &mut faults) {
                now + Duration::from_millis(rng.random_range(100..=600))
            } else {
                now + Duration::from_millis(50)
            };
        }
        if now - counted_at >= Duration::from_secs(2) {
            counted_at = now;
            let elapsed = started.elapsed();
            if elapsed >= Duration::from_secs(s.seconds)
                && (transitions(&world.replicas().daemons) >= s.min_transitions
                    || elapsed >= s.hard_limit())
            {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Heal everything, let the election settle, then stop every replica cleanly.
    world.undo_due(true, &mut faults);
    std::thread::sleep(world.settle());
    for d in &world.replicas().daemons {
        d.signal(Signal::SIGTERM);
    }
    for d in &mut world.replicas().daemons {
        d.wait_exit(Duration::from_secs(10));
    }
    let ended_ms = now_ms();
    let steps = clock.finish();
    check_and_report(s, mode, world, &faults.list, &steps, (started_ms, ended_ms));
}

fn check_and_report(
    s: &Settings,
    mode: &str,
    world: &mut dyn ChaosWorld,
    faults: &[Fault],
    steps: &[clock::Step],
    (started_ms, ended_ms): (u64, u64),
) {
    let fences = world.fences();
    let daemons = &mut world.replicas().daemons;
    let logs: Vec<_> = daemons.iter().map(Daemon::safety_log).collect();
    for (i, d) in daemons.iter().enumerate() {
        let _ = std::fs::copy(d.log_path(), s.out.join(format!("r{i}.log")));
    }
    let (terms, mut violations) = match check_logs_with(&logs, fences) {
        Ok(terms) => (terms, Vec::new()),
        Err(e) => (
            crate::support::terms_from_logs(&logs),
            e.lines().map(str::to_string).collect(),
        ),
    };
    // The replicas were spawned before the clock started: a first term may begin earlier.
    let started_ms = terms
        .first()
        .map_or(started_ms, |t| t.acquired_at_ms.min(started_ms));
    let never_valid = never_valid_from_logs(&logs).len();
    let mut excused = Vec::new();
    if s.exec {
        let (found, notes) = report::check_children(s, &terms, faults, steps);
        violations.extend(found);
        excused = notes;
    }
    for (i, d) in daemons.iter_mut().enumerate() {
        let code = d.try_exit_code();
        if code != Some(0) {
            violations.push(format!(
                "r{i} did not exit 0 after the final SIGTERM: {code:?}"
            ));
        }
    }
    let run = report::Run {
        settings: s,
        steps,
        excused: &excused,
        mode,
        faults,
        terms: &terms,
        violations: &violations,
        never_valid,
        from: started_ms,
        to: ended_ms,
    };
    let summary = run.summary();
    eprintln!("{summary}");
    std::fs::write(s.out.join("summary.txt"), &summary).expect("write summary");
    let faults_json: Vec<serde_json::Value> = faults
        .iter()
        .map(|f| {
            serde_json::json!({"kind": f.kind.name(), "replica": f.replica, "what": f.what,
                "start_ms": f.start_ms, "end_ms": f.end_ms, "on_leader": f.on_leader})
        })
        .collect();
    let _ = std::fs::write(
        s.out.join("faults.json"),
        serde_json::to_string_pretty(&faults_json).unwrap_or_default(),
    );
    std::fs::write(s.out.join("timeline.svg"), run.timeline_svg(world.kinds()))
        .expect("write timeline");
    assert!(
        violations.is_empty(),
        "chaos {}: {} violation(s); logs in {}:\n{}",
        s.label,
        violations.len(),
        s.out.display(),
        violations.join("\n")
    );
    assert!(
        terms.len() >= s.min_transitions,
        "chaos {}: only {} transitions in {} s (wanted at least {})",
        s.label,
        terms.len(),
        (ended_ms - started_ms) / 1000,
        s.min_transitions
    );
}

/// Faults due to end later, with the index of their `Fault`.
pub struct Pending<U> {
    list: Vec<(Instant, U, usize)>,
}

impl<U> Default for Pending<U> {
    fn default() -> Self {
        Pending { list: Vec::new() }
    }
}

impl<U> Pending<U> {
    pub fn push(&mut self, after: Duration, undo: U, idx: usize) {
        self.list.push((Instant::now() + after, undo, idx));
    }

    /// The undos that are due now (all of them with `all`), in the order they were pushed.
    pub fn take_due(&mut self, all: bool) -> Vec<(U, usize)> {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.list)
            .into_iter()
            .partition(|(at, _, _)| all || *at <= now);
        self.list = later;
        due.into_iter().map(|(_, u, i)| (u, i)).collect()
    }
}

/// A random duration in `[lo, hi]` ms.
pub fn ms(rng: &mut StdRng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.random_range(lo..=hi))
}

/// The leaderd processes of a chaos run, in any Redis mode, and the process faults every
/// mode injects on them. (`support::Replicas` is another thing: replicas on one Redis it owns.)
pub struct FaultTargets {
    pub daemons: Vec<Daemon>,
    /// Replicas that are under a fault now.
    pub busy: Vec<bool>,
}

/// How a process fault ends.
#[derive(Debug)]
pub enum ReplicaUndo {
    Restart(usize),
    Cont(usize),
    /// The fault's end is the mode's own (a proxy's latency or cut).
    Free(usize),
}

impl FaultTargets {
    pub fn spawn(opts: impl Fn(usize) -> DaemonOpts) -> FaultTargets {
        FaultTargets {
            daemons: (0..REPLICAS).map(|i| Daemon::spawn(&opts(i))).collect(),
            busy: vec![false; REPLICAS],
        }
    }

    /// Mostly the leader (that is where faults matter), sometimes anyone not already
    /// faulted; while there is no leader to hit, mostly `None` (wait for one).
    pub fn pick(&self, leader: Option<usize>, rng: &mut StdRng) -> Option<usize> {
        let leader = leader.filter(|l| !self.busy[*l]);
        let free: Vec<usize> = (0..REPLICAS).filter(|i| !self.busy[*i]).collect();
        match leader {
            Some(l) if rng.random_bool(0.75) => Some(l),
            None if rng.random_bool(0.95) => None,
            _ if free.is_empty() => None,
            _ => Some(free[rng.random_range(0..free.len())]),
        }
    }

    /// A process fault (`Kill`, `Stop`, `Term`) on a target `pick` chose, recorded in
    /// `faults`: when it ends, how, and its index; `None` when it chose to wait.
    pub fn inject(
        &mut self,
        kind: Kind,
        leader: Option<usize>,
        rng: &mut StdRng,
        faults: &mut Faults,
    ) -> Option<(Duration, ReplicaUndo, usize)> {
        let target = self.pick(leader, rng)?;
        let idx = faults.begin(kind, Some(target), "", leader == Some(target));
        let (due, undo) = self.hit(kind, target, rng);
        Some((due, undo, idx))
    }

    /// SIGKILL, SIGSTOP or SIGTERM `target`; when and how it ends.
    pub fn hit(&mut self, kind: Kind, target: usize, rng: &mut StdRng) -> (Duration, ReplicaUndo) {
        self.busy[target] = true;
        match kind {
            Kind::Kill => {
                self.daemons[target].kill();
                (ms(rng, 100, 1500), ReplicaUndo::Restart(target))
            }
            Kind::Stop => {
                self.daemons[target].signal(Signal::SIGSTOP);
                (ms(rng, 200, 3000), ReplicaUndo::Cont(target))
            }
            Kind::Term => {
                self.daemons[target].signal(Signal::SIGTERM);
                (ms(rng, 300, 1500), ReplicaUndo::Restart(target))
            }
            other => panic!("{other:?} is not a process fault"),
        }
    }

    pub fn undo(&mut self, undo: ReplicaUndo) {
        match undo {
            ReplicaUndo::Restart(i) => {
                // After SIGTERM a clean exit is expected well before the restart.
                self.daemons[i].wait_exit(Duration::from_secs(5));
                self.daemons[i].restart();
                self.busy[i] = false;
            }
            ReplicaUndo::Cont(i) => {
                self.daemons[i].signal(Signal::SIGCONT);
                self.busy[i] = false;
            }
            ReplicaUndo::Free(i) => self.busy[i] = false,
        }
    }
}

/// `election` YAML of replica `i` with `priority`: every replica preempts.
pub fn priority_yaml(priority: u32) -> String {
    format!("election:\n  preempt: true\n  priority: {priority}\n")
}

/// Starts `leaderd handover` (config `config`, timeout `timeout`) in the background with a
/// random target: a replica (any, faulted or not), a missing one, or the best successor.
/// Returns what it asked for and the thread (its exit code).
pub fn handover_in_background(
    config: &std::path::Path,
    timeout: &str,
    rng: &mut StdRng,
) -> (String, std::thread::JoinHandle<Option<i32>>) {
    let to = match rng.random_range(0..10) {
        0..=5 => Some(format!("r{}", rng.random_range(0..REPLICAS))),
        6..=7 => Some("ghost".to_string()),
        _ => None,
    };
    let what = to
        .as_ref()
        .map_or("best successor".into(), |t| format!("--to {t}"));
    let config = config.display().to_string();
    let timeout = timeout.to_string();
    let thread = std::thread::spawn(move || {
        let mut args = vec!["handover", "--config", &config, "--timeout", &timeout];
        if let Some(to) = &to {
            args.extend(["--to", to.as_str()]);
        }
        crate::support::run_cli(&args, &[], Duration::from_secs(10)).code
    });
    (what, thread)
}

/// The replica a holder name (`r<i>`) stands for.
pub fn replica_of(holder: &str) -> Option<usize> {
    holder.strip_prefix('r')?.parse().ok()
}
