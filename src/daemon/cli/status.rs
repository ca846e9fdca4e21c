//! `leaderd status [--json]`: who holds the lease and the candidates, read once from Redis
//! and printed as text or one JSON document; exit 0 when held, 3 otherwise, 1 when Redis
//! cannot be read (`--watch` is in `watch`).

mod sharded;
mod watch;

use super::{load, one_shot_budget, runtime, EXIT_FAILURE, EXIT_USAGE, EXIT_VACANT};
use crate::daemon::candidacy::Listed;
use crate::daemon::config::Overrides;
use crate::lease::{Heartbeat, Lease, LeaseError, Observed};

/// Runs the command; returns its exit code.
pub(super) fn status(overrides: &Overrides, json: bool, watch: bool) -> i32 {
    // `--watch` ends cleanly on a signal from its first moment.
    let early = match watch.then(super::catch_signals_early).transpose() {
        Ok(early) => early,
        Err(code) => return code,
    };
    let config = match load(overrides) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let lease = match crate::daemon::run::backend(&config) {
        Ok(lease) => lease,
        Err(err) => {
            eprintln!("leaderd: {err}");
            return EXIT_USAGE;
        }
    };
    if let Some(early) = early {
        return watch::run(&config, lease, json, early);
    }
    let budget = one_shot_budget(&lease, &config);
    if config.election.shards > 0 {
        let read = sharded::status(&lease, &config, json, budget);
        return runtime().block_on(read).unwrap_or_else(|err| {
            print_status_error(&config.name, &err, json);
            EXIT_FAILURE
        });
    }
    match runtime().block_on(read_status(&lease, budget)) {
        Ok((seen, candidates)) => print_status(&config.name, &seen, json, &candidates),
        Err(err) => {
            print_status_error(&config.name, &err, json);
            EXIT_FAILURE
        }
    }
}

/// What `status` shows: the lease, and the candidates in the order of docs/operating.md#candidates.
async fn read_status<L: Lease>(
    lease: &L,
    budget: std::time::Duration,
) -> Result<(Observed, Vec<Listed>), LeaseError> {
    let seen = lease.observe(budget).await?;
    let roster = lease
        .heartbeat(Heartbeat::Read, budget)
        .await
        .unwrap_or_default();
    let leader = seen.holder().map(|h| h.holder.clone());
    Ok((
        seen,
        crate::daemon::candidacy::listed(&roster, leader.as_deref()),
    ))
}

fn print_status(name: &str, seen: &Observed, json: bool, candidates: &[Listed]) -> i32 {
    if json {
        println!("{}", status_json(name, seen, candidates));
    } else {
        print!("{}", status_text(name, seen, candidates));
    }
    status_code(seen)
}

/// Exit code of `status`: 0 held, 3 otherwise.
fn status_code(seen: &Observed) -> i32 {
    match seen {
        Observed::Held(_) => 0,
        _ => EXIT_VACANT,
    }
}

/// Milliseconds until the lease may be free, as `status` shows them (none when vacant).
fn remaining_ms(seen: &Observed) -> Option<u64> {
    match seen {
        Observed::Vacant => None,
        other => other.remaining().map(|d| d.as_millis() as u64),
    }
}

/// The `status --json` document, on one line.
fn status_json(name: &str, seen: &Observed, candidates: &[Listed]) -> String {
    let state = match seen {
        Observed::Vacant => "vacant",
        Observed::Quarantined { .. } => "quarantined",
        Observed::Held(_) => "held",
        Observed::Reserved { .. } => "reserved",
    };
    let holder = seen.holder();
    let mut doc = serde_json::json!({
        "name": name,
        "state": state,
        "holder": holder.map(|h| bounded(&h.holder)),
        "fence": holder.map(|h| h.fence),
        "remaining_ms": remaining_ms(seen),
    });
    if let Observed::Reserved { for_identity, .. } = seen {
        doc["reserved_for"] = serde_json::json!(bounded(for_identity));
    }
    // Keys in the order the README lists them (serde_json keeps insertion order).
    doc["candidates"] = serde_json::to_value(candidates).unwrap_or_default();
    doc.to_string()
}

/// The text of `status`: the first line, then one line per candidate (each line ends in a
/// newline).
fn status_text(name: &str, seen: &Observed, candidates: &[Listed]) -> String {
    let left = match remaining_ms(seen) {
        Some(ms) => format!("{ms}ms left"),
        None => "no TTL".to_string(),
    };
    let mut text = match seen {
        Observed::Vacant => format!("{name}: vacant (nobody holds the lease)\n"),
        Observed::Quarantined { .. } => {
            format!("{name}: quarantined after data loss or first start ({left})\n")
        }
        Observed::Held(h) => format!(
            "{name}: held by {} (fence {}, {left})\n",
            shown_identity(&h.holder),
            h.fence,
        ),
        // Worded as the README gives it: `N ms left`, with a space.
        Observed::Reserved { for_identity, .. } => format!(
            "{name}: reserved for {} ({} ms left)\n",
            shown_identity(for_identity),
            remaining_ms(seen).unwrap_or(0),
        ),
    };
    for c in candidates {
        text += &crate::daemon::candidacy::line(c);
        text.push('\n');
    }
    text
}

/// At most [`MAX_SHOWN`] bytes of a value from Redis (cut at a character boundary).
pub(super) fn bounded(value: &str) -> &str {
    let mut end = value.len().min(MAX_SHOWN);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// A holder as printed in text: bounded, control characters escaped.
pub(super) fn shown_identity(value: &str) -> String {
    crate::daemon::escape::escape_text(bounded(value))
}

/// The longest identity shown (the bound on identities, docs/protocol.md#messages).
const MAX_SHOWN: usize = 256;

fn print_status_error(name: &str, err: &LeaseError, json: bool) {
    if json {
        println!("{}", status_error_json(name, err));
    }
    eprintln!("{}", status_error_line(name, err));
}

/// The `status --json` document when Redis cannot be read.
fn status_error_json(name: &str, err: &LeaseError) -> String {
    serde_json::json!({"name": name, "error": err.to_string()}).to_string()
}

/// The line `status` prints when Redis cannot be read.
fn status_error_line(name: &str, err: &LeaseError) -> String {
    format!("leaderd: status of {name}: {err}")
}
