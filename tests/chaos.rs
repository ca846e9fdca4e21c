//! The chaos run: 5 real `leaderd` replicas, each talking to one real Redis through its own
//! fault-injecting proxy, under random faults for a set time: SIGKILL and restart,
//! SIGSTOP/SIGCONT, SIGTERM and restart, Redis restarts (losing its data), latency and cuts.
//! Then every term is rebuilt from the replicas' JSON logs and checked: no two claims
//! overlap, fences strictly increase, and (exec mode) no child was alive outside its term.
//! It prints the transitions, the faults and any violation, and draws the timeline as SVG.
//!
//! - `chaos_short` (in `cargo test`): `CHAOS_SECONDS` (default 60) and at least 50 terms.
//! - `chaos_long` (`cargo test --release --test chaos -- --ignored chaos_long --nocapture`):
//!   `CHAOS_SECONDS` (default 1200) and at least 1,000 terms.
//!
//! Options (environment): `CHAOS_SEED` (the fault schedule's random seed), `CHAOS_EXEC=1`
//! (replicas run a child in exec mode that writes `<unix_ms> <fence>` lines, checked against
//! the terms), `CHAOS_OUT` (directory for `timeline.svg`, `summary.txt` and the logs; default
//! `target/tmp/chaos-<short|long>`).

mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{check_logs, Daemon, DaemonOpts, Proxy, RedisServer, Term};

const REPLICAS: usize = 5;
const NAME: &str = "chaos";
const LEASE_MS: u64 = 1000;

#[test]
fn chaos_short() {
    run(&Settings::from_env("short", 60, 50));
}

#[test]
#[ignore = "the long chaos run takes about 20 minutes; run it with --ignored (see BENCHMARKS.md)"]
fn chaos_long() {
    run(&Settings::from_env("long", 1200, 1000));
}

struct Settings {
    label: &'static str,
    seconds: u64,
    min_transitions: usize,
    seed: u64,
    exec: bool,
    out: PathBuf,
}

impl Settings {
    fn from_env(label: &'static str, seconds: u64, min_transitions: usize) -> Settings {
        let env_u64 = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Settings {
            label,
            seconds: env_u64("CHAOS_SECONDS").unwrap_or(seconds),
            min_transitions,
            seed: env_u64("CHAOS_SEED").unwrap_or_else(|| rand::rng().random()),
            exec: std::env::var("CHAOS_EXEC").is_ok_and(|v| v == "1"),
            out: std::env::var_os("CHAOS_OUT").map_or_else(
                || Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chaos-{label}")),
                PathBuf::from,
            ),
        }
    }

    /// The run stops at `seconds` once it has `min_transitions` terms, and never later than
    /// three times `seconds`.
    fn hard_limit(&self) -> Duration {
        Duration::from_secs(self.seconds * 3)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Kill,
    Stop,
    Term,
    Latency,
    Cut,
    RedisRestart,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Kill => "SIGKILL+restart",
            Kind::Stop => "SIGSTOP/SIGCONT",
            Kind::Term => "SIGTERM+restart",
            Kind::Latency => "proxy latency",
            Kind::Cut => "proxy cut",
            Kind::RedisRestart => "Redis restart (data lost)",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Kind::Kill => "#d62728",
            Kind::Stop => "#7f7f7f",
            Kind::Term => "#111111",
            Kind::Latency => "#ff9f1c",
            Kind::Cut => "#9467bd",
            Kind::RedisRestart => "#8c1c13",
        }
    }
}

/// One injected fault, for the summary and the timeline.
#[derive(Debug, Clone)]
struct Fault {
    kind: Kind,
    /// `None` for Redis.
    replica: Option<usize>,
    start_ms: u64,
    end_ms: Option<u64>,
    /// Whether the replica led when the fault began.
    on_leader: bool,
}

/// What is due later: the end of a fault.
#[derive(Debug)]
enum Undo {
    Restart(usize),
    Cont(usize),
    Latency(usize),
    Restore(usize),
    RedisStart,
}

struct World {
    redis: RedisServer,
    proxies: Vec<Proxy>,
    daemons: Vec<Daemon>,
    /// Replicas that are under a fault now.
    busy: Vec<bool>,
    redis_busy: bool,
    pending: Vec<(Instant, Undo, usize)>,
    faults: Vec<Fault>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl World {
    fn start(s: &Settings) -> World {
        let redis = RedisServer::start();
        let proxies: Vec<Proxy> = (0..REPLICAS).map(|_| Proxy::start(redis.addr())).collect();
        let daemons = (0..REPLICAS)
            .map(|i| Daemon::spawn(&opts(s, i, &proxies[i].url())))
            .collect();
        World {
            redis,
            proxies,
            daemons,
            busy: vec![false; REPLICAS],
            redis_busy: false,
            pending: Vec::new(),
            faults: Vec::new(),
        }
    }

    /// The replica Redis names as holder, asked directly (not through a proxy).
    fn leader(&self) -> Option<usize> {
        if !self.redis.is_running() {
            return None;
        }
        let key = format!("leaderd:{{{NAME}}}:lock");
        let holder = self
            .redis
            .try_cmd(&["HGET", &key, "holder"], Duration::from_millis(300))
            .ok()?;
        holder.strip_prefix('r')?.parse().ok()
    }

    /// Injects one fault, mostly on the leader; returns false when it chose to wait (no
    /// leader to hit right now).
    fn inject(&mut self, rng: &mut StdRng) -> bool {
        let kind = match rng.random_range(0..100) {
            0..=21 => Kind::Kill,
            22..=43 => Kind::Stop,
            44..=65 => Kind::Term,
            66..=80 => Kind::Latency,
            81..=95 => Kind::Cut,
            _ => Kind::RedisRestart,
        };
        // The leader, unless a fault is already on it.
        let leader = self.leader().filter(|l| !self.busy[*l]);
        let now = Instant::now();
        let ms =
            |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..=hi));
        if kind == Kind::RedisRestart {
            if self.redis_busy || leader.is_none() {
                return false;
            }
            self.redis_busy = true;
            self.redis.stop();
            let idx = self.record(kind, None, true);
            let down = ms(rng, 50, 1000);
            self.pending.push((now + down, Undo::RedisStart, idx));
            return true;
        }
        // Mostly the leader (that is where faults matter), sometimes anyone not already
        // faulted; while there is no leader to hit, mostly wait for one.
        let free: Vec<usize> = (0..REPLICAS).filter(|i| !self.busy[*i]).collect();
        let target = match leader {
            Some(l) if rng.random_bool(0.75) => l,
            None if rng.random_bool(0.95) => return false,
            _ if free.is_empty() => return false,
            _ => free[rng.random_range(0..free.len())],
        };
        let on_leader = leader == Some(target);
        self.busy[target] = true;
        let idx = self.record(kind, Some(target), on_leader);
        let (due, undo) = match kind {
            Kind::Kill => {
                self.daemons[target].kill();
                (ms(rng, 100, 1500), Undo::Restart(target))
            }
            Kind::Stop => {
                self.daemons[target].signal(Signal::SIGSTOP);
                (ms(rng, 200, 3000), Undo::Cont(target))
            }
            Kind::Term => {
                self.daemons[target].signal(Signal::SIGTERM);
                (ms(rng, 300, 1500), Undo::Restart(target))
            }
            Kind::Latency => {
                self.proxies[target].set_latency(ms(rng, 40, 400));
                (ms(rng, 500, 3000), Undo::Latency(target))
            }
            Kind::Cut => {
                self.proxies[target].cut();
                (ms(rng, 300, 3000), Undo::Restore(target))
            }
            Kind::RedisRestart => unreachable!(),
        };
        self.pending.push((now + due, undo, idx));
        true
    }

    fn record(&mut self, kind: Kind, replica: Option<usize>, on_leader: bool) -> usize {
        self.faults.push(Fault {
            kind,
            replica,
            start_ms: now_ms(),
            end_ms: None,
            on_leader,
        });
        self.faults.len() - 1
    }

    /// Ends the faults that are due (all of them with `all`).
    fn undo_due(&mut self, all: bool) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(at, _, _)| all || *at <= now);
        self.pending = later;
        for (_, undo, idx) in due {
            match undo {
                Undo::Restart(i) => {
                    // After SIGTERM a clean exit is expected well before the restart.
                    self.daemons[i].wait_exit(Duration::from_secs(5));
                    self.daemons[i].restart();
                    self.busy[i] = false;
                }
                Undo::Cont(i) => {
                    self.daemons[i].signal(Signal::SIGCONT);
                    self.busy[i] = false;
                }
                Undo::Latency(i) => {
                    self.proxies[i].set_latency(Duration::ZERO);
                    self.busy[i] = false;
                }
                Undo::Restore(i) => {
                    self.proxies[i].restore();
                    self.busy[i] = false;
                }
                Undo::RedisStart => {
                    self.redis.start_again();
                    self.redis_busy = false;
                }
            }
            self.faults[idx].end_ms = Some(now_ms());
        }
    }

    fn logs(&self) -> Vec<(String, Vec<serde_json::Value>)> {
        self.daemons.iter().map(Daemon::safety_log).collect()
    }

    fn transitions(&self) -> usize {
        self.daemons
            .iter()
            .map(|d| d.events_named("acquired").len())
            .sum()
    }
}

fn opts(s: &Settings, i: usize, url: &str) -> DaemonOpts {
    let mut o = DaemonOpts::new(NAME, &format!("r{i}"), url);
    o.lease = format!("{LEASE_MS}ms");
    o.renew_deadline = "650ms".into();
    o.retry = "150ms".into();
    o.command_timeout = "100ms".into();
    if s.exec {
        let out = s.out.join(format!("child-r{i}.txt"));
        o.env
            .push(("CHAOS_CHILD_OUT".into(), out.display().to_string()));
        o.exec = vec![
            "sh".into(),
            "-c".into(),
            r#"while :; do echo "$(date +%s%3N) $LEADERD_FENCE" >> "$CHAOS_CHILD_OUT"; sleep 0.02; done"#.into(),
        ];
        o.extra_yaml = "exec:\n  grace_period: 200ms\n".into();
    }
    o
}

fn run(s: &Settings) {
    let _ = std::fs::remove_dir_all(&s.out);
    std::fs::create_dir_all(&s.out).expect("create the chaos output directory");
    eprintln!(
        "chaos {}: {} replicas, {} s (at least {} transitions), seed {}, exec {}, output {}",
        s.label,
        REPLICAS,
        s.seconds,
        s.min_transitions,
        s.seed,
        s.exec,
        s.out.display()
    );
    let mut rng = StdRng::seed_from_u64(s.seed);
    let mut world = World::start(s);
    let started = Instant::now();
    let started_ms = now_ms();
    let mut next_fault = started + Duration::from_millis(LEASE_MS * 2);
    let mut counted_at = started;
    loop {
        world.undo_due(false);
        let now = Instant::now();
        if now >= next_fault {
            next_fault = if world.inject(&mut rng) {
                now + Duration::from_millis(rng.random_range(100..=600))
            } else {
                now + Duration::from_millis(50)
            };
        }
        if now - counted_at >= Duration::from_secs(2) {
            let transitions = world.transitions();
            counted_at = now;
            let elapsed = started.elapsed();
            if elapsed >= Duration::from_secs(s.seconds)
                && (transitions >= s.min_transitions || elapsed >= s.hard_limit())
            {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Heal everything, let the election settle, then stop every replica cleanly.
    world.undo_due(true);
    std::thread::sleep(Duration::from_millis(LEASE_MS * 2));
    for d in &world.daemons {
        d.signal(Signal::SIGTERM);
    }
    for d in &mut world.daemons {
        d.wait_exit(Duration::from_secs(10));
    }
    let ended_ms = now_ms();

    let logs = world.logs();
    for (i, d) in world.daemons.iter().enumerate() {
        let _ = std::fs::copy(d.log_path(), s.out.join(format!("r{i}.log")));
    }
    let (terms, mut violations) = match check_logs(&logs) {
        Ok(terms) => (terms, Vec::new()),
        Err(e) => (
            support::terms_from_logs(&logs),
            e.lines().map(str::to_string).collect(),
        ),
    };
    if s.exec {
        violations.extend(check_children(s, &terms));
    }
    let exits: Vec<Option<i32>> = world
        .daemons
        .iter_mut()
        .map(|d| d.try_exit_code())
        .collect();
    for (i, code) in exits.iter().enumerate() {
        if *code != Some(0) {
            violations.push(format!(
                "r{i} did not exit 0 after the final SIGTERM: {code:?}"
            ));
        }
    }

    let summary = summarize(s, &world.faults, &terms, &violations, started_ms, ended_ms);
    eprintln!("{summary}");
    std::fs::write(s.out.join("summary.txt"), &summary).expect("write summary");
    let faults: Vec<serde_json::Value> = world
        .faults
        .iter()
        .map(|f| {
            serde_json::json!({"kind": f.kind.name(), "replica": f.replica, "start_ms": f.start_ms,
                "end_ms": f.end_ms, "on_leader": f.on_leader})
        })
        .collect();
    let _ = std::fs::write(
        s.out.join("faults.json"),
        serde_json::to_string_pretty(&faults).unwrap_or_default(),
    );
    let svg = timeline_svg(
        &terms,
        &world.faults,
        started_ms,
        ended_ms,
        &summary_line(&world.faults, &terms, &violations, started_ms, ended_ms),
    );
    std::fs::write(s.out.join("timeline.svg"), svg).expect("write timeline");
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

/// Exec mode: every `<unix_ms> <fence>` line a child wrote must fall inside its term: from
/// `acquired_at_ms` to the earlier of the term's last validity and the next term's start.
fn check_children(s: &Settings, terms: &[Term]) -> Vec<String> {
    let mut sorted: Vec<&Term> = terms.iter().collect();
    sorted.sort_by_key(|t| (t.acquired_at_ms, t.fence));
    let mut bounds: BTreeMap<u64, (String, u64, u64)> = BTreeMap::new();
    for (k, t) in sorted.iter().enumerate() {
        let next = sorted.get(k + 1).map_or(u64::MAX, |n| n.acquired_at_ms);
        bounds.insert(
            t.fence,
            (
                t.replica.clone(),
                t.acquired_at_ms,
                t.last_valid_until_ms.min(next),
            ),
        );
    }
    let mut out = Vec::new();
    let mut lines_seen = 0usize;
    for i in 0..REPLICAS {
        let text =
            std::fs::read_to_string(s.out.join(format!("child-r{i}.txt"))).unwrap_or_default();
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(ts), Some(fence)) = (
                parts.next().and_then(|v| v.parse::<u64>().ok()),
                parts.next().and_then(|v| v.parse::<u64>().ok()),
            ) else {
                continue;
            };
            lines_seen += 1;
            match bounds.get(&fence) {
                None => out.push(format!("r{i}: a child wrote fence {fence} at {ts}, a fence no term was granted")),
                Some((who, from, to)) if ts < *from || ts > *to || *who != format!("r{i}") => out.push(format!(
                    "r{i}: a child of fence {fence} was alive at {ts}, outside its term [{from}, {to}] ({who})"
                )),
                Some(_) => {}
            }
        }
    }
    if lines_seen == 0 {
        out.push("exec mode: no child wrote anything (did exec mode start?)".into());
    }
    out
}

fn summary_line(
    faults: &[Fault],
    terms: &[Term],
    violations: &[String],
    from: u64,
    to: u64,
) -> String {
    format!(
        "{} s, {} transitions, {} faults, {} violations",
        (to - from) / 1000,
        terms.len(),
        faults.len(),
        violations.len()
    )
}

fn summarize(
    s: &Settings,
    faults: &[Fault],
    terms: &[Term],
    violations: &[String],
    from: u64,
    to: u64,
) -> String {
    let mut by_kind: BTreeMap<Kind, (usize, usize)> = BTreeMap::new();
    for f in faults {
        let e = by_kind.entry(f.kind).or_default();
        e.0 += 1;
        e.1 += usize::from(f.on_leader);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "chaos {} (seed {}, exec {}): {}",
        s.label,
        s.seed,
        s.exec,
        summary_line(faults, terms, violations, from, to)
    );
    let _ = writeln!(out, "faults:");
    for (kind, (n, on_leader)) in &by_kind {
        let _ = writeln!(
            out,
            "  {:<26} {:>5} ({} on the leader)",
            kind.name(),
            n,
            on_leader
        );
    }
    let mut per_replica: BTreeMap<&str, usize> = BTreeMap::new();
    for t in terms {
        *per_replica.entry(t.replica.as_str()).or_default() += 1;
    }
    let _ = writeln!(out, "terms per replica: {per_replica:?}");
    let led: u64 = terms
        .iter()
        .map(|t| t.claim_end_ms().saturating_sub(t.acquired_at_ms))
        .sum();
    let _ = writeln!(
        out,
        "someone claimed leadership {:.1}% of the time; fences {} .. {}",
        100.0 * led as f64 / (to - from).max(1) as f64,
        terms.first().map_or(0, |t| t.fence),
        terms.last().map_or(0, |t| t.fence)
    );
    if violations.is_empty() {
        let _ = writeln!(
            out,
            "violations: none (no overlapping claims, fences strictly increase{})",
            if s.exec {
                ", every child inside its term"
            } else {
                ""
            }
        );
    } else {
        let _ = writeln!(out, "VIOLATIONS:");
        for v in violations {
            let _ = writeln!(out, "  {v}");
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The timeline picture

const STRIP_SECS: u64 = 60;
const PX_PER_SEC: f64 = 18.0;
const ROW: f64 = 15.0;
const LEFT: f64 = 44.0;
const PALETTE: [&str; REPLICAS] = ["#1f77b4", "#2ca02c", "#17becf", "#bcbd22", "#e377c2"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Who led when (one row per replica, one bar per term's claim), with every fault drawn on
/// the row it hit (a band for its duration) and Redis restarts on a row of their own. The
/// run is cut into strips of a minute, one under the other.
fn timeline_svg(terms: &[Term], faults: &[Fault], from: u64, to: u64, title: &str) -> String {
    let strips = (to.saturating_sub(from)).div_ceil(STRIP_SECS * 1000).max(1);
    let rows = REPLICAS + 1;
    let strip_h = rows as f64 * ROW + 22.0;
    let width = LEFT + STRIP_SECS as f64 * PX_PER_SEC + 24.0;
    let legend_h = 52.0;
    let height = legend_h + strips as f64 * strip_h + 6.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="10">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="4" y="13" font-size="12" font-weight="bold">leaderd chaos run: {}</text>"#,
        esc(title)
    );
    // Legend: the replicas' colours, then the faults'.
    let _ = writeln!(
        svg,
        r#"<text x="4" y="30">leader (a bar is a term's claim):</text>"#
    );
    let mut x = 196.0;
    for (i, c) in PALETTE.iter().enumerate() {
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="22" width="14" height="9" fill="{c}"/><text x="{}" y="30">r{i}</text>"#,
            x + 17.0
        );
        x += 40.0;
    }
    let _ = writeln!(
        svg,
        r#"<text x="4" y="45">faults (band = duration, tick = start):</text>"#
    );
    let mut x = 196.0;
    for k in [
        Kind::Kill,
        Kind::Stop,
        Kind::Term,
        Kind::Latency,
        Kind::Cut,
        Kind::RedisRestart,
    ] {
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="39" width="14" height="4" fill="{}"/><text x="{}" y="45">{}</text>"#,
            k.color(),
            x + 17.0,
            esc(k.name())
        );
        x += 30.0 + k.name().len() as f64 * 5.8;
    }
    let px = |ms: u64, strip: u64| {
        LEFT + (ms.saturating_sub(from + strip * STRIP_SECS * 1000)) as f64 / 1000.0 * PX_PER_SEC
    };
    for strip in 0..strips {
        let top = legend_h + strip as f64 * strip_h;
        let s0 = from + strip * STRIP_SECS * 1000;
        let s1 = (s0 + STRIP_SECS * 1000).min(to);
        // Rows and their labels.
        for r in 0..rows {
            let y = top + 12.0 + r as f64 * ROW;
            let label = if r < REPLICAS {
                format!("r{r}")
            } else {
                "redis".into()
            };
            let fill = if r % 2 == 0 { "#f4f4f4" } else { "#ffffff" };
            let _ = writeln!(
                svg,
                r#"<rect x="{LEFT}" y="{y:.1}" width="{:.1}" height="{ROW}" fill="{fill}"/><text x="4" y="{:.1}">{label}</text>"#,
                px(s1, strip) - LEFT,
                y + 9.5
            );
        }
        // Time ticks every 10 s.
        let mut t = 0;
        while s0 + t * 1000 <= s1 {
            let xt = px(s0 + t * 1000, strip);
            let _ = writeln!(
                svg,
                r##"<line x1="{xt:.1}" y1="{:.1}" x2="{xt:.1}" y2="{:.1}" stroke="#cccccc" stroke-width="0.5"/><text x="{:.1}" y="{:.1}" fill="#666666">{}s</text>"##,
                top + 12.0,
                top + 12.0 + rows as f64 * ROW,
                xt + 1.0,
                top + 9.0,
                strip * STRIP_SECS + t
            );
            t += 10;
        }
        // Terms.
        for term in terms {
            let (a, b) = (term.acquired_at_ms.max(s0), term.claim_end_ms().min(s1));
            if a >= b {
                continue;
            }
            let r: usize = term.replica.trim_start_matches('r').parse().unwrap_or(0);
            let y = top + 12.0 + r as f64 * ROW + 2.0;
            let _ = writeln!(
                svg,
                r#"<rect x="{:.2}" y="{y:.1}" width="{:.2}" height="{:.1}" fill="{}"><title>r{r} fence {} {}..{} ms</title></rect>"#,
                px(a, strip),
                (px(b, strip) - px(a, strip)).max(0.6),
                ROW - 6.0,
                PALETTE[r % REPLICAS],
                term.fence,
                term.acquired_at_ms - from,
                term.claim_end_ms() - from
            );
        }
        // Faults: a thin band along the bottom of the row for the fault's duration, and a
        // tick where it began.
        for fault in faults {
            let end = fault
                .end_ms
                .unwrap_or(fault.start_ms + 100)
                .max(fault.start_ms + 50);
            let (a, b) = (fault.start_ms.max(s0), end.min(s1));
            if a >= b && !(s0..s1).contains(&fault.start_ms) {
                continue;
            }
            let r = fault.replica.unwrap_or(REPLICAS);
            let y = top + 12.0 + r as f64 * ROW;
            let c = fault.kind.color();
            if a < b {
                let _ = writeln!(
                    svg,
                    r#"<rect x="{:.2}" y="{:.1}" width="{:.2}" height="3" fill="{c}" opacity="0.85"><title>{} {}..{} ms</title></rect>"#,
                    px(a, strip),
                    y + ROW - 3.0,
                    (px(b, strip) - px(a, strip)).max(1.0),
                    esc(fault.kind.name()),
                    fault.start_ms - from,
                    end - from
                );
            }
            if (s0..s1).contains(&fault.start_ms) {
                let xs = px(fault.start_ms, strip);
                let _ = writeln!(
                    svg,
                    r#"<line x1="{xs:.2}" y1="{:.1}" x2="{xs:.2}" y2="{:.1}" stroke="{c}" stroke-width="1.2"/>"#,
                    y,
                    y + ROW
                );
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}

#[test]
fn the_timeline_draws_terms_and_faults() {
    let terms = vec![Term {
        replica: "r1".into(),
        fence: 7,
        acquired_at_ms: 1_000,
        last_valid_until_ms: 3_000,
        ended_at_ms: Some(2_500),
    }];
    let faults = vec![Fault {
        kind: Kind::Kill,
        replica: Some(1),
        start_ms: 2_400,
        end_ms: Some(3_000),
        on_leader: true,
    }];
    let svg = timeline_svg(&terms, &faults, 0, 70_000, "test");
    assert!(svg.starts_with("<svg"));
    assert!(svg.contains("r1 fence 7 1000..2500 ms"));
    assert!(svg.contains("SIGKILL+restart 2400..3000 ms"));
    // Two strips of a minute.
    assert!(svg.contains(">60s<"));
    assert!(svg.trim_end().ends_with("</svg>"));
}

#[test]
fn child_lines_outside_their_term_are_violations() {
    let dir = tempfile::tempdir().unwrap();
    let s = Settings {
        label: "t",
        seconds: 0,
        min_transitions: 0,
        seed: 0,
        exec: true,
        out: dir.path().to_path_buf(),
    };
    let terms = vec![
        Term {
            replica: "r0".into(),
            fence: 5,
            acquired_at_ms: 100,
            last_valid_until_ms: 400,
            ended_at_ms: Some(300),
        },
        Term {
            replica: "r1".into(),
            fence: 6,
            acquired_at_ms: 350,
            last_valid_until_ms: 900,
            ended_at_ms: None,
        },
    ];
    std::fs::write(dir.path().join("child-r0.txt"), "100 5\n349 5\n").unwrap();
    std::fs::write(dir.path().join("child-r1.txt"), "360 6\n").unwrap();
    assert!(check_children(&s, &terms).is_empty());
    std::fs::write(dir.path().join("child-r0.txt"), "100 5\n351 5\n").unwrap();
    let v = check_children(&s, &terms);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("outside its term"), "{v:?}");
}
