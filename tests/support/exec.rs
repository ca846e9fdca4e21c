//! Exec mode from outside: the writer and heartbeat children, reading their lines back,
//! the check that every child lived within its term, and process (and process group)
//! inspection through `/proc`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::logs::{u64_of, wait_event};
use super::{check_logs, wait_until, Daemon, DaemonOpts, Term, POLL, SLOW};

pub const GRACE_300: &str = "exec:\n  grace_period: 300ms\n";

/// A perl child appending `<unix_ms> <fence>` to `out` every 4ms; optionally deaf to SIGTERM.
pub fn writer(out: &Path, ignore_term: bool) -> Vec<String> {
    let deaf = if ignore_term {
        "$SIG{TERM} = 'IGNORE'; "
    } else {
        ""
    };
    let prog = format!(
        "{deaf}use Time::HiRes qw(time sleep); open(my $f, '>>', $ARGV[0]) or die \"open: $!\"; \
         select((select($f), $| = 1)[0]); \
         while (1) {{ printf $f \"%d %s\\n\", int(time() * 1000), $ENV{{LEADERD_FENCE}}; sleep(0.004); }}"
    );
    vec!["perl".into(), "-e".into(), prog, out.display().to_string()]
}

/// A perl child that starts a `sleep 1000` in its own process group, then appends
/// `<unix_ms> <fence>` to `out` every 50ms (the format of [`writer`]).
pub fn heartbeat(out: &Path) -> Vec<String> {
    let prog = "use Time::HiRes qw(time sleep); \
         if (fork() == 0) { exec('sleep', '1000'); die \"exec: $!\"; } \
         open(my $f, '>>', $ARGV[0]) or die \"open: $!\"; select((select($f), $| = 1)[0]); \
         while (1) { printf $f \"%d %s\\n\", int(time() * 1000), $ENV{LEADERD_FENCE}; sleep(0.05); }";
    vec![
        "perl".into(),
        "-e".into(),
        prog.into(),
        out.display().to_string(),
    ]
}

/// `fence -> (first ms, last ms, lines)` of the writer output.
pub fn spans(out: &Path) -> BTreeMap<u64, (u64, u64, usize)> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let mut spans: BTreeMap<u64, (u64, u64, usize)> = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(Ok(ms)), Some(Ok(fence))) = (
            words.next().map(str::parse::<u64>),
            words.next().map(str::parse::<u64>),
        ) else {
            continue; // a line cut by SIGKILL in the middle
        };
        let span = spans.entry(fence).or_insert((ms, ms, 0));
        span.0 = span.0.min(ms);
        span.1 = span.1.max(ms);
        span.2 += 1;
    }
    spans
}

/// The safety of the logs, then of the children: every child line lies within its own
/// term (after `acquired_at_ms`, before the term's last `lease_valid_until_ms`), and no two
/// children's lifetimes overlap. Returns the spans.
pub fn check_children(daemons: &[&Daemon], out: &Path) -> BTreeMap<u64, (u64, u64, usize)> {
    let logs: Vec<(String, Vec<Value>)> = daemons.iter().map(|d| d.safety_log()).collect();
    let terms: Vec<Term> = check_logs(&logs).unwrap_or_else(|e| panic!("{e}"));
    let spans = spans(out);
    for (fence, &(first, last, _)) in &spans {
        let term = terms
            .iter()
            .find(|t| t.fence == *fence)
            .unwrap_or_else(|| panic!("a child ran with fence {fence}, which no replica logged"));
        assert!(
            first >= term.acquired_at_ms,
            "fence {fence}: a line at {first} before acquired_at_ms {}",
            term.acquired_at_ms
        );
        assert!(
            last < term.last_valid_until_ms,
            "fence {fence}: a line at {last}, not before the last lease_valid_until_ms {} ({term:?})",
            term.last_valid_until_ms
        );
        eprintln!(
            "fence {fence}: {} lines, the last {}ms before the validity",
            spans[fence].2,
            term.last_valid_until_ms - last
        );
    }
    let list: Vec<(u64, (u64, u64, usize))> = spans.iter().map(|(f, s)| (*f, *s)).collect();
    for (i, (f1, (a1, b1, _))) in list.iter().enumerate() {
        for (f2, (a2, b2, _)) in &list[i + 1..] {
            assert!(
                b1 < a2 || b2 < a1,
                "children of fences {f1} [{a1}..{b1}] and {f2} [{a2}..{b2}] were alive together"
            );
        }
    }
    spans
}

pub fn opts(name: &str, identity: &str, url: &str, extra: &str, exec: Vec<String>) -> DaemonOpts {
    let mut o = DaemonOpts::new(name, identity, url);
    o.extra_yaml = extra.to_string();
    o.exec = exec;
    o
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Every living descendant of `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if let Some((_, rest)) = stat.rsplit_once(')') {
            let mut f = rest.split_whitespace();
            let state = f.next().unwrap_or("Z");
            if let Some(Ok(ppid)) = f.next().map(str::parse::<u32>) {
                if state != "Z" {
                    parents.push((p, ppid));
                }
            }
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() && i < 10_000 {
        let cur = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == cur).map(|(p, _)| *p));
        i += 1;
    }
    found.remove(0);
    found
}

/// The living (not zombie) processes of process group `pgid`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().take(3).collect();
        if f.len() == 3 && f[0] != "Z" && f[2].parse() == Ok(pgid) {
            found.push(p);
        }
    }
    found
}

/// SIGKILLs a process group when dropped: a failing test leaves no child running.
pub struct GroupGuard(pub u32);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0 as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
}

/// The pid of `d`'s keeper process (`leaderd-keeper __keeper ...`), once there is one.
pub fn keeper_of(d: &Daemon) -> u32 {
    wait_until(SLOW, POLL, || {
        descendants(d.pid()).into_iter().find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"__keeper"))
        })
    })
    .expect("no keeper process")
}

/// The pid of the current term's child, from its `child_started` line.
pub fn child_pid(d: &Daemon, n: usize) -> u32 {
    u64_of(&wait_event(d, "child_started", n, SLOW), "pid") as u32
}
