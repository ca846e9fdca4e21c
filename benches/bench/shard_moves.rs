//! Shard moves with real leaderd processes on a real redis-server (README, "Shards"): a
//! fourth replica joining 64 shards over 3, SIGTERM and SIGKILL of one of 3. Every time is
//! read from the replicas' logs (`acquired_at_ms`, `ended_at_ms`, `lease_valid_until_ms`)
//! against the wall clock taken just before the spawn or the signal.

use std::time::{Duration, Instant};

use leaderd::shard::Assignment;
use nix::sys::signal::Signal;

use super::stats::unix_ms_f64;
use super::timings::Timings;
use crate::support::shards::{owned_with_fences, successions, wait_assigned};
use crate::support::{terms_from_logs, Replicas, Term};

pub const NAME: &str = "shard-moves";
pub const SHARDS: u32 = 64;

/// Replicas of the 64-shard election with `timings`, 3 of them settled to the assignment.
pub fn three(t: Timings) -> Replicas {
    let mut c = t.replicas(NAME, &format!("election:\n  shards: {SHARDS}\n"));
    for _ in 0..3 {
        c.spawn();
    }
    settle(&c, &[0, 1, 2], t);
    c
}

/// Waits until the shards' owners are the targets of the replicas `live` (asked of the
/// first of them); panics with the last owners read after `lease_duration` + 30 s.
pub fn settle(c: &Replicas, live: &[usize], t: Timings) -> Assignment {
    let members: Vec<&str> = live.iter().map(|&i| c.identity(i)).collect();
    let within = Duration::from_millis(t.lease_ms) + Duration::from_secs(30);
    let step = Duration::from_millis(100);
    let d = &c.daemons[live[0]];
    wait_assigned(d, NAME, SHARDS, &members, step, within)
        .unwrap_or_else(|last| panic!("not settled to {members:?} in {within:?}: {last:?}"))
}

/// A join of `r3` to `r0..r2`, in ms from its spawn.
#[derive(Debug, Clone)]
pub struct Join {
    /// Until the newcomer's last shard of its share was acquired.
    pub share_ms: f64,
    /// The newcomer's share (its targets).
    pub share: usize,
    /// Shard terms begun: the shards that moved.
    pub moves: usize,
    /// Per moved shard: its new term's `acquired_at_ms` - the old term's claim end.
    pub unowned_ms: Vec<f64>,
}

/// Starts (or restarts) replica 3, measures its join, then stops it and lets the 3 settle.
pub fn join(c: &mut Replicas, t: Timings) -> Join {
    let t0 = unix_ms_f64();
    if c.daemons.len() == 3 {
        c.spawn();
    } else {
        c.daemons[3].restart();
    }
    let four = settle(c, &[0, 1, 2, 3], t);
    let terms = terms_from_logs(&c.logs());
    let moved = successions(&terms, t0.floor() as u64);
    let newcomer = c.identity(3).to_owned();
    let last = moved.iter().filter(|(n, _)| n.replica == newcomer);
    let last = last.map(|(n, _)| n.acquired_at_ms).max().unwrap_or(0);
    let sample = Join {
        share_ms: last as f64 - t0,
        share: four.shards_of(&newcomer).len(),
        moves: moved.len(),
        unowned_ms: moved.iter().filter_map(unowned_ms).collect(),
    };
    c.daemons[3].signal(Signal::SIGTERM);
    assert_eq!(c.daemons[3].wait_exit(Duration::from_secs(10)), Some(0));
    settle(c, &[0, 1, 2], t);
    sample
}

/// How long a shard was unowned between `before`'s claim end and `next`'s acquire (ms).
fn unowned_ms((next, before): &(Term, Option<Term>)) -> Option<f64> {
    let before = before.as_ref()?;
    Some(next.acquired_at_ms as f64 - before.claim_end_ms() as f64)
}

/// One leave of a replica: per shard it owned, its new owner's `acquired_at_ms` against
/// the signal, against the old term's claim end, and against its expiry (its last logged
/// validity + drift; and as Redis had it, from PTTL read right after the signal).
#[derive(Debug, Clone, Default)]
pub struct Leave {
    pub from_signal_ms: Vec<f64>,
    pub unowned_ms: Vec<f64>,
    pub late_ms: Vec<f64>,
    pub late_pttl_ms: Vec<f64>,
    /// Per leave: the mean time between one takeover and the next, in order of acquire.
    pub spacing_ms: Vec<f64>,
    /// Per leave: the latest old claim's end less the earliest (0: all ended at once).
    pub ends_spread_ms: Vec<f64>,
    /// Per SIGKILL: `(margin, latest)`: how long before its shards' earliest expiry the dead
    /// replica's registry entry stopped counting as a member (its last refresh +
    /// `lease_duration / 2`), and the run's latest lateness.
    pub dropout: Vec<(f64, f64)>,
}

/// SIGTERM (or, `kill`, SIGKILL at a random point of the renew cycle) of replica `victim`
/// of 3 settled; waits until each shard it owned has a new owner, then restarts it and lets
/// the 3 settle again.
pub fn leave(c: &mut Replicas, victim: usize, kill: bool, t: Timings) -> Leave {
    let owned = owned_with_fences(&c.daemons[victim]);
    assert!(!owned.is_empty(), "r{victim} owns no shard");
    if kill {
        std::thread::sleep(Duration::from_millis(super::election::rand_ms(t.retry_ms)));
    }
    let t0 = unix_ms_f64();
    let (mut expiry_pttl, mut dropout_at) = (Vec::new(), f64::NAN);
    if kill {
        c.daemons[victim].kill();
        expiry_pttl = pttl_expiries(c, &owned);
        let index = c.keys().candidates_index;
        let seen = c.redis.cmd(&["ZSCORE", &index, c.identity(victim)]);
        dropout_at = seen.parse::<f64>().unwrap_or(f64::NAN) + t.lease_ms as f64 / 2.0;
    } else {
        c.daemons[victim].signal(Signal::SIGTERM);
    }
    let others: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
    wait_taken(
        c,
        &others,
        &owned,
        Duration::from_millis(2 * t.lease_ms + 10_000),
    );
    let terms = terms_from_logs(&c.logs());
    let moved = successions(&terms, t0.floor() as u64);
    let mut out = Leave::default();
    for (k, (shard, fence)) in owned.iter().enumerate() {
        let (next, before) = moved
            .iter()
            .find(|(n, b)| n.shard == Some(*shard) && b.as_ref().is_some_and(|b| b.fence == *fence))
            .unwrap_or_else(|| panic!("no term after shard {shard}'s fence {fence}"));
        let (at, before) = (next.acquired_at_ms as f64, before.as_ref().expect("found"));
        out.from_signal_ms.push(at - t0);
        out.unowned_ms.push(at - before.claim_end_ms() as f64);
        if kill {
            out.late_ms
                .push(at - (before.last_valid_until_ms as f64 + t.drift_ms()));
            out.late_pttl_ms.push(at - expiry_pttl[k]);
        }
    }
    out.spacing_ms.push(spacing(&out.from_signal_ms));
    if kill {
        let first = expiry_pttl.iter().copied().fold(f64::NAN, f64::min);
        let latest = out.late_ms.iter().copied().fold(f64::NAN, f64::max);
        out.dropout.push((first - dropout_at, latest));
    }
    let ends = owned.iter().map(|(s, f)| {
        let of = |(_, b): &&(Term, Option<Term>)| {
            b.as_ref()
                .is_some_and(|b| b.shard == Some(*s) && b.fence == *f)
        };
        moved
            .iter()
            .find(of)
            .and_then(|(_, b)| b.as_ref())
            .map_or(0.0, |b| b.claim_end_ms() as f64)
    });
    let ends: Vec<f64> = ends.collect();
    let spread = ends.iter().copied().fold(f64::NAN, f64::max)
        - ends.iter().copied().fold(f64::NAN, f64::min);
    out.ends_spread_ms.push(spread);
    let code = c.daemons[victim].wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(if kill { 137 } else { 0 }), "r{victim}'s exit");
    c.daemons[victim].restart();
    settle(c, &[0, 1, 2], t);
    out
}

/// The mean step between consecutive values of `times` once sorted (0 for fewer than 2).
fn spacing(times: &[f64]) -> f64 {
    let (lo, hi) = times
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), t| (l.min(*t), h.max(*t)));
    if times.len() < 2 {
        return 0.0;
    }
    (hi - lo) / (times.len() - 1) as f64
}

/// When each of `owned`'s shard keys expires as Redis has it: its PTTL, read in one script
/// call right after the kill, added to the wall clock when the answer came.
fn pttl_expiries(c: &Replicas, owned: &[(u64, u64)]) -> Vec<f64> {
    let script =
        "local r = {} for i, k in ipairs(KEYS) do r[i] = redis.call('PTTL', k) end return r";
    let keys: Vec<String> = owned
        .iter()
        .map(|(s, _)| format!("leaderd:{{{NAME}}}:shard:{s}"))
        .collect();
    let n = keys.len().to_string();
    let mut args = vec!["EVAL", script, n.as_str()];
    args.extend(keys.iter().map(String::as_str));
    let reply = c.redis.cmd(&args);
    let now = unix_ms_f64();
    let ttls: Vec<f64> = reply.lines().filter_map(|l| l.parse().ok()).collect();
    assert_eq!(ttls.len(), owned.len(), "PTTLs: {reply}");
    ttls.iter().map(|ttl| now + ttl).collect()
}

/// Waits until every shard of `owned` is owned, under a fence above its old one, by one
/// of `others` (their status documents, every 10 ms, at most `within`).
fn wait_taken(c: &Replicas, others: &[usize], owned: &[(u64, u64)], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now: Vec<(u64, u64)> = others
            .iter()
            .flat_map(|&i| owned_with_fences(&c.daemons[i]))
            .collect();
        let taken = |(s, f): &(u64, u64)| now.iter().any(|(s2, f2)| s2 == s && f2 > f);
        if owned.iter().all(taken) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "shards {owned:?} not all taken within {within:?}: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How many of each: joins, SIGTERMs, SIGKILLs.
pub struct Runs {
    pub joins: usize,
    pub terms: usize,
    pub kills: usize,
}

/// All the moves' samples of one run of the section.
#[derive(Default)]
pub struct Samples {
    pub joins: Vec<Join>,
    pub terms: Leave,
    pub term_runs: Vec<f64>,
    pub kills: Leave,
    pub kill_runs: usize,
    pub safety_terms: usize,
}

/// Joins, then SIGTERMs, then SIGKILLs (victims in turn), on one set of replicas; the
/// safety checker over every log at the end.
pub fn measure(t: Timings, runs: &Runs) -> Samples {
    let mut c = three(t);
    let mut s = Samples::default();
    for run in 0..runs.joins {
        s.joins.push(join(&mut c, t));
        eprintln!(
            "  shards join {}/{}: {:?}",
            run + 1,
            runs.joins,
            s.joins.last()
        );
    }
    for run in 0..runs.terms {
        let l = leave(&mut c, run % 3, false, t);
        let done = l.from_signal_ms.iter().copied().fold(f64::NAN, f64::max);
        eprintln!("  shards SIGTERM {}/{}: {done:.0} ms", run + 1, runs.terms);
        s.term_runs.push(done);
        s.terms.extend(l);
    }
    for run in 0..runs.kills {
        let l = leave(&mut c, run % 3, true, t);
        eprintln!(
            "  shards SIGKILL {}/{}: late {:?}",
            run + 1,
            runs.kills,
            l.late_ms
        );
        s.kills.extend(l);
        s.kill_runs += 1;
    }
    s.safety_terms = c.check_safety().len();
    s
}

impl Leave {
    fn extend(&mut self, other: Leave) {
        self.from_signal_ms.extend(other.from_signal_ms);
        self.unowned_ms.extend(other.unowned_ms);
        self.late_ms.extend(other.late_ms);
        self.late_pttl_ms.extend(other.late_pttl_ms);
        self.spacing_ms.extend(other.spacing_ms);
        self.ends_spread_ms.extend(other.ends_spread_ms);
        self.dropout.extend(other.dropout);
    }
}
