//! The chaos run's report: the summary text, the timeline picture (SVG), and the exec-mode
//! check of the children's lines against the terms.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::clock::{moved_between, Step, VALIDITY_SPAN_MS};
use super::{Fault, Kind, Settings, REPLICAS};
use crate::support::Term;

/// One finished run, as the report sees it.
pub struct Run<'a> {
    pub settings: &'a Settings,
    /// The wall clock's steps during the run, and what they excused.
    pub steps: &'a [Step],
    pub excused: &'a [String],
    pub mode: &'a str,
    pub faults: &'a [Fault],
    pub terms: &'a [Term],
    pub violations: &'a [String],
    /// `acquired` lines that were never a term (see `safety::never_valid_from_logs`).
    pub never_valid: usize,
    pub from: u64,
    pub to: u64,
}

impl Run<'_> {
    fn line(&self) -> String {
        format!(
            "{} s, {} transitions, {} faults, {} violations",
            (self.to - self.from) / 1000,
            self.terms.len(),
            self.faults.len(),
            self.violations.len()
        )
    }

    pub fn summary(&self) -> String {
        let (s, terms) = (self.settings, self.terms);
        let mut by_kind: BTreeMap<Kind, (usize, usize)> = BTreeMap::new();
        for f in self.faults {
            let e = by_kind.entry(f.kind).or_default();
            e.0 += 1;
            e.1 += usize::from(f.on_leader);
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "chaos {} ({}{}, seed {}, exec {}): {}",
            s.label,
            self.mode,
            match s.shards {
                0 => String::new(),
                n => format!(", {n} shards"),
            },
            s.seed,
            s.exec,
            self.line()
        );
        let _ = writeln!(out, "faults:");
        for (kind, (n, on_leader)) in &by_kind {
            let _ = writeln!(
                out,
                "  {:<34} {:>5} ({} on the leader)",
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
        let leases = self.settings.shards.max(1);
        let who = match self.settings.shards {
            0 => "someone claimed leadership".to_owned(),
            n => format!("{n} shards: each claimed by someone"),
        };
        let _ = writeln!(
            out,
            "{who} {:.1}% of the time on average; fences {} .. {}",
            100.0 * led as f64 / (self.to - self.from).max(1) as f64 / f64::from(leases),
            terms.first().map_or(0, |t| t.fence),
            terms.last().map_or(0, |t| t.fence)
        );
        let _ = writeln!(
            out,
            "acquires never valid (reply after its validity; not terms): {}",
            self.never_valid
        );
        let forward: i64 = self.steps.iter().map(|st| st.delta_ms.max(0)).sum();
        let back: i64 = self.steps.iter().map(|st| st.delta_ms.min(0)).sum();
        let _ = writeln!(
            out,
            "wall clock against the monotonic one: {} steps, {forward} ms forward, {} ms back",
            self.steps.len(),
            -back
        );
        for e in self.excused {
            let _ = writeln!(out, "  {e}");
        }
        if self.violations.is_empty() {
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
            for v in self.violations {
                let _ = writeln!(out, "  {v}");
            }
        }
        out
    }

    /// Extra legend lines the fault kinds need beyond the first (wrapped at `width`).
    fn legend_rows(kinds: &[Kind], width: f64) -> usize {
        let mut x = 196.0;
        let mut rows = 0;
        for k in kinds {
            let step = 30.0 + k.name().len() as f64 * 5.8;
            if x + step > width && x > 196.0 {
                x = 196.0;
                rows += 1;
            }
            x += step;
        }
        rows
    }

    pub fn timeline_svg(&self, kinds: &[Kind]) -> String {
        let title = format!("{}: {}", self.mode, self.line());
        timeline_svg(self.terms, self.faults, kinds, self.from, self.to, &title)
    }
}

/// Exec mode: every `<unix_ms> <fence>` line a child wrote must fall inside its term: from
/// `acquired_at_ms` to the earlier of the term's last validity and the next term's start.
/// A violation carries the story of its term (see [`term_story`]). A line past its term by
/// no more than the wall clock stepped forward since the term's last renew is not one (the
/// check compares wall times read at different moments): it is returned second, as a note.
pub fn check_children(
    s: &Settings,
    terms: &[Term],
    faults: &[Fault],
    steps: &[Step],
) -> (Vec<String>, Vec<String>) {
    // Each term ends at the latest when the next term of its lease (shard) begins.
    let mut sorted: Vec<&Term> = terms.iter().collect();
    sorted.sort_by_key(|t| (t.shard, t.acquired_at_ms, t.fence));
    let mut bounds: BTreeMap<(Option<u64>, u64), (String, u64, u64)> = BTreeMap::new();
    for (k, t) in sorted.iter().enumerate() {
        let next = sorted
            .get(k + 1)
            .filter(|n| n.shard == t.shard)
            .map_or(u64::MAX, |n| n.acquired_at_ms);
        bounds.insert(
            (t.shard, t.fence),
            (
                t.replica.clone(),
                t.acquired_at_ms,
                t.last_valid_until_ms.min(next),
            ),
        );
    }
    let mut out = Vec::new();
    let mut excused = Vec::new();
    let mut told = std::collections::HashSet::new();
    let mut lines_seen = 0usize;
    for i in 0..REPLICAS {
        let me = format!("r{i}");
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
            let shard = parts.next().and_then(|v| v.parse::<u64>().ok());
            lines_seen += 1;
            let fence_of = shard.map_or(format!("{fence}"), |s| format!("{fence} (shard {s})"));
            match bounds.get(&(shard, fence)) {
                None => out.push(format!(
                    "r{i}: a child wrote fence {fence_of} at {ts}, a fence no term was granted"
                )),
                Some((who, _, to)) if *who == me && ts > *to && {
                    let moved = moved_between(steps, to.saturating_sub(VALIDITY_SPAN_MS), ts);
                    moved > 0 && ts <= to + moved as u64
                } => excused.push(format!(
                    "r{i}: a child of fence {fence_of} wrote at {ts}, {} ms past its term's end {to}, within the wall clock's step forward since",
                    ts - to
                )),
                Some((who, from, to)) if ts < *from || ts > *to || *who != me => {
                    let mut v = format!(
                        "r{i}: a child of fence {fence_of} was alive at {ts}, outside its term [{from}, {to}] ({who})"
                    );
                    if told.insert(fence) {
                        v += &term_story(s, i, fence, faults, (*from, ts));
                    }
                    out.push(v);
                }
                Some(_) => {}
            }
        }
    }
    if lines_seen == 0 {
        out.push("exec mode: no child wrote anything (did exec mode start?)".into());
    }
    (out, excused)
}

/// What r`i` logged about `fence` (of its `renewed` lines only the last two) and the
/// faults on r`i` or on Redis that overlapped `span`: enough to tell from CI's output alone
/// why a child outlived its term.
fn term_story(s: &Settings, i: usize, fence: u64, faults: &[Fault], span: (u64, u64)) -> String {
    let log = std::fs::read_to_string(s.out.join(format!("r{i}.log"))).unwrap_or_default();
    let needle = format!("\"fence\":{fence}");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(&needle)).collect();
    let renewed = |l: &str| l.contains("\"event\":\"renewed\"");
    let skip = lines
        .iter()
        .filter(|l| renewed(l))
        .count()
        .saturating_sub(2);
    let mut story = String::new();
    let mut skipped = 0;
    for line in &lines {
        if renewed(line) && skipped < skip {
            skipped += 1;
            continue;
        }
        let _ = write!(story, "\n    r{i} log: {line}");
    }
    for f in faults {
        let hits = f.replica.is_none_or(|r| r == i);
        let overlaps = f.start_ms <= span.1 + 1000 && f.end_ms.is_none_or(|e| e + 1000 >= span.0);
        if hits && overlaps {
            let _ = write!(
                story,
                "\n    fault {} {} [{}, {:?}]",
                f.kind.name(),
                f.what,
                f.start_ms,
                f.end_ms
            );
        }
    }
    story
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
/// Extra legend lines the fault kinds need beyond the first (wrapped at `width`).
fn legend_rows(kinds: &[Kind], width: f64) -> usize {
    let mut x = 196.0;
    let mut rows = 0;
    for k in kinds {
        let step = 30.0 + k.name().len() as f64 * 5.8;
        if x + step > width && x > 196.0 {
            x = 196.0;
            rows += 1;
        }
        x += step;
    }
    rows
}

pub fn timeline_svg(
    terms: &[Term],
    faults: &[Fault],
    kinds: &[Kind],
    from: u64,
    to: u64,
    title: &str,
) -> String {
    let strips = (to.saturating_sub(from)).div_ceil(STRIP_SECS * 1000).max(1);
    let rows = REPLICAS + 1;
    let strip_h = rows as f64 * ROW + 22.0;
    let width = LEFT + STRIP_SECS as f64 * PX_PER_SEC + 24.0;
    let legend_h = 52.0 + 13.0 * legend_rows(kinds, width) as f64;
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
    let mut y = 45.0;
    for k in kinds {
        let step = 30.0 + k.name().len() as f64 * 5.8;
        if x + step > width && x > 196.0 {
            x = 196.0;
            y += 13.0;
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="{:.0}" width="14" height="4" fill="{}"/><text x="{}" y="{y:.0}">{}</text>"#,
            y - 6.0,
            k.color(),
            x + 17.0,
            esc(k.name())
        );
        x += step;
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
                term.acquired_at_ms.saturating_sub(from),
                term.claim_end_ms().saturating_sub(from)
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
                    r#"<rect x="{:.2}" y="{:.1}" width="{:.2}" height="3" fill="{c}" opacity="0.85"><title>{}{} {}..{} ms</title></rect>"#,
                    px(a, strip),
                    y + ROW - 3.0,
                    (px(b, strip) - px(a, strip)).max(1.0),
                    esc(fault.kind.name()),
                    if fault.what.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", esc(&fault.what))
                    },
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
