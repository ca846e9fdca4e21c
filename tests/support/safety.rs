//! Owns the shared safety checker: rebuilds leadership terms from replicas' JSON logs and checks that no two claims of one lease overlap (in a sharded election, of one shard).

use std::collections::HashMap;

use serde_json::Value;

/// One term of leadership as a replica logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub replica: String,
    /// The shard of a sharded election's term (`"shard"` on its lines); `None` for the one
    /// lease of an election without shards.
    pub shard: Option<u64>,
    pub fence: u64,
    pub acquired_at_ms: u64,
    /// Max `lease_valid_until_ms` over the term's acquired / renewed / stepped_down lines.
    pub last_valid_until_ms: u64,
    /// From the `stepped_down` line; `None` if the replica never logged one (e.g. SIGKILL).
    pub ended_at_ms: Option<u64>,
}

impl Term {
    /// When this term's claim ends: the earlier of `ended_at_ms` and `last_valid_until_ms`.
    pub fn claim_end_ms(&self) -> u64 {
        match self.ended_at_ms {
            Some(end) => end.min(self.last_valid_until_ms),
            None => self.last_valid_until_ms,
        }
    }
}

/// A field of a log event: top level (the flattened form of docs/outputs.md#logs), or under
/// `fields`.
pub fn field<'a>(ev: &'a Value, key: &str) -> Option<&'a Value> {
    ev.get(key)
        .filter(|v| !v.is_null())
        .or_else(|| ev.get("fields").and_then(|f| f.get(key)))
        .filter(|v| !v.is_null())
}

/// A numeric field, written as a JSON number or a string of digits.
pub fn field_u64(ev: &Value, key: &str) -> Option<u64> {
    let v = field(ev, key)?;
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// The `event` field of a log line.
pub fn event_name(ev: &Value) -> Option<&str> {
    field(ev, "event").and_then(Value::as_str)
}

/// Rebuild terms from `(replica, events)` pairs, sorted by `acquired_at_ms` (then fence).
/// `renewed` and `stepped_down` lines attach to the latest `acquired` line with the same
/// fence in the same replica's log; lines without one are ignored here (`check_logs`
/// reports them). `acquired` lines without `fence` or `acquired_at_ms` are ignored too, and
/// so are acquires that were never valid (see `never_valid_from_logs`).
pub fn terms_from_logs(logs: &[(String, Vec<Value>)]) -> Vec<Term> {
    build(logs).0
}

/// The `acquired` lines that were never a term: the reply came after the validity it
/// carried (`lease_valid_until_ms <= acquired_at_ms`, e.g. a replica frozen between sending
/// the acquire and reading its reply), and no later line of that fence extended it. Such a
/// claim is empty, so it cannot overlap anything, and its fence (granted before the freeze)
/// is older than terms that began meanwhile: counting it would read as a fence going back.
pub fn never_valid_from_logs(logs: &[(String, Vec<Value>)]) -> Vec<Term> {
    build(logs).2
}

fn build(logs: &[(String, Vec<Value>)]) -> (Vec<Term>, Vec<String>, Vec<Term>) {
    let mut terms: Vec<Term> = Vec::new();
    let mut problems = Vec::new();
    for (replica, events) in logs {
        let mut by_fence: HashMap<(Option<u64>, u64), usize> = HashMap::new();
        for ev in events {
            let Some(name) = event_name(ev) else {
                continue;
            };
            if !matches!(name, "acquired" | "renewed" | "stepped_down") {
                continue;
            }
            let shard = field_u64(ev, "shard");
            let fence = field_u64(ev, "fence");
            let valid = field_u64(ev, "lease_valid_until_ms");
            if name == "acquired" {
                match (fence, field_u64(ev, "acquired_at_ms")) {
                    (Some(fence), Some(at)) => {
                        by_fence.insert((shard, fence), terms.len());
                        terms.push(Term {
                            replica: replica.clone(),
                            shard,
                            fence,
                            acquired_at_ms: at,
                            last_valid_until_ms: valid.unwrap_or(at),
                            ended_at_ms: None,
                        });
                    }
                    _ => problems.push(format!(
                        "{replica}: `acquired` line without fence or acquired_at_ms: {ev}"
                    )),
                }
                continue;
            }
            let Some(&idx) = fence.and_then(|f| by_fence.get(&(shard, f))) else {
                problems.push(format!(
                    "{replica}: `{name}` line with no earlier `acquired` line for its fence (and shard): {ev}"
                ));
                continue;
            };
            let term = &mut terms[idx];
            if let Some(v) = valid {
                term.last_valid_until_ms = term.last_valid_until_ms.max(v);
            }
            if name == "stepped_down" {
                if let Some(end) = field_u64(ev, "ended_at_ms") {
                    term.ended_at_ms = Some(term.ended_at_ms.map_or(end, |e| e.min(end)));
                }
            }
        }
    }
    let (mut terms, mut never_valid): (Vec<Term>, Vec<Term>) = terms
        .into_iter()
        .partition(|t| t.last_valid_until_ms > t.acquired_at_ms);
    terms.sort_by_key(|t| (t.acquired_at_ms, t.fence));
    never_valid.sort_by_key(|t| (t.acquired_at_ms, t.fence));
    (terms, problems, never_valid)
}

fn describe(t: &Term) -> String {
    let shard = t.shard.map_or_else(String::new, |s| format!(" shard {s}"));
    format!(
        "{}{shard} fence {} [acquired {} .. claim end {}; valid until {}, ended {}]",
        t.replica,
        t.fence,
        t.acquired_at_ms,
        t.claim_end_ms(),
        t.last_valid_until_ms,
        t.ended_at_ms
            .map_or_else(|| "never".to_string(), |e| e.to_string())
    )
}

/// Check the safety properties over all terms of one election, per lease (the one lease,
/// or each shard of a sharded election):
/// - no two claims of one lease overlap: every earlier term's claim ends at or before each
///   later term's `acquired_at_ms` (every pair is checked, not only neighbours);
/// - fences strictly increase per lease in order of `acquired_at_ms`;
/// - each fence belongs to exactly one `acquired` line in the whole election (one counter
///   numbers the terms of every shard).
///
/// The error lists every violation, one per line.
pub fn check_no_overlap(terms: &[Term]) -> Result<(), String> {
    check_terms(terms, Fences::OneCounter)
}

/// Which fences a mode makes unique.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fences {
    /// One Redis: one counter numbers every term of every shard, so no fence repeats.
    OneCounter,
    /// Redlock: each node has its counter and a term's fence is its majority's highest, so
    /// terms of two shards may share one; per shard they strictly increase.
    PerLease,
}

/// [`check_no_overlap`], with the fence rule of `fences`.
pub fn check_terms(terms: &[Term], fences: Fences) -> Result<(), String> {
    let mut sorted: Vec<&Term> = terms.iter().collect();
    sorted.sort_by_key(|t| (t.acquired_at_ms, t.fence));
    let mut violations = Vec::new();
    let mut by_lease: HashMap<Option<u64>, Vec<&Term>> = HashMap::new();
    for t in &sorted {
        by_lease.entry(t.shard).or_default().push(t);
    }
    let mut leases: Vec<_> = by_lease.into_iter().collect();
    leases.sort_by_key(|(shard, _)| *shard);

    let mut by_fence: HashMap<(Option<u64>, u64), Vec<&Term>> = HashMap::new();
    for t in &sorted {
        let lease = (fences == Fences::PerLease).then_some(t.shard).flatten();
        by_fence.entry((lease, t.fence)).or_default().push(t);
    }
    let mut dup: Vec<_> = by_fence.iter().filter(|(_, v)| v.len() > 1).collect();
    dup.sort_by_key(|(f, _)| **f);
    for ((_, fence), ts) in dup {
        let who: Vec<String> = ts.iter().map(|t| describe(t)).collect();
        violations.push(format!(
            "fence {fence} acquired {} times: {}",
            ts.len(),
            who.join("; ")
        ));
    }

    for (_, sorted) in &leases {
        check_one_lease(sorted, &mut violations);
    }

    if violations.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} safety violation(s) over {} term(s):\n{}",
            violations.len(),
            terms.len(),
            violations.join("\n")
        ))
    }
}

/// Fences in order and no overlapping claims among the terms of one lease, sorted by
/// `acquired_at_ms`.
fn check_one_lease(sorted: &[&Term], violations: &mut Vec<String>) {
    for w in sorted.windows(2) {
        if w[1].fence <= w[0].fence {
            violations.push(format!(
                "fence regression: {} acquired after {}",
                describe(w[1]),
                describe(w[0])
            ));
        }
    }

    for (i, earlier) in sorted.iter().enumerate() {
        for later in &sorted[i + 1..] {
            if earlier.claim_end_ms() > later.acquired_at_ms {
                violations.push(format!(
                    "overlap of {} ms: {} still claims when {} begins",
                    earlier.claim_end_ms() - later.acquired_at_ms,
                    describe(earlier),
                    describe(later)
                ));
            }
        }
    }
}

/// `terms_from_logs` + `check_no_overlap`, also failing on malformed `acquired` lines and on
/// `renewed` / `stepped_down` lines whose fence has no `acquired` line in that replica's log.
/// Returns the terms when everything holds.
pub fn check_logs(logs: &[(String, Vec<Value>)]) -> Result<Vec<Term>, String> {
    check_logs_with(logs, Fences::OneCounter)
}

/// [`check_logs`] with the fence rule of `fences`.
pub fn check_logs_with(logs: &[(String, Vec<Value>)], fences: Fences) -> Result<Vec<Term>, String> {
    let (terms, mut problems, _) = build(logs);
    if let Err(e) = check_terms(&terms, fences) {
        problems.push(e);
    }
    if problems.is_empty() {
        Ok(terms)
    } else {
        Err(problems.join("\n"))
    }
}
