//! `leaderd handover [--to ID] [--timeout D] [--json]`: asks the leader, through Redis, to
//! hand its leadership over, and waits until the new term has begun (docs/operating.md#handover).

use std::time::Duration;

use tokio::time::Instant;

use super::{load, runtime, EXIT_FAILURE, EXIT_USAGE, EXIT_VACANT};
use crate::daemon::config::{Config, Overrides};
use crate::lease::{Control, ControlMessage, HandoverRequest, Heartbeat, Lease};
use crate::lease::{LeaseError, Observed};

/// Exit code of a refused handover (unknown or unhealthy target, the leader itself).
pub(super) const EXIT_REFUSED: i32 = 4;

/// How a handover ended: the exit code and the line that says so.
struct Outcome {
    code: i32,
    line: String,
}

impl Outcome {
    fn fail(code: i32, line: String) -> Self {
        Outcome { code, line }
    }
}

/// The old and the new term, and how long it took.
struct Done {
    from: String,
    from_fence: u64,
    to: String,
    to_fence: u64,
    elapsed: Duration,
}

/// Runs the command; returns its exit code.
pub(super) fn handover(
    overrides: &Overrides,
    to: Option<String>,
    timeout: Option<String>,
    json: bool,
) -> i32 {
    if let Some(problem) = to.as_deref().and_then(bad_target) {
        return usage(&problem);
    }
    let config = match load(overrides) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if config.election.shards > 0 {
        return usage(&format!("handover: {} has election.shards ({}): the assignment decides who owns each shard (to drain a replica, send it SIGUSR1 or stop it)", config.name, config.election.shards));
    }
    let timeout = match timeout
        .as_deref()
        .map(crate::daemon::config::parse_duration)
    {
        None => config.election.lease_duration,
        Some(Ok(d)) if !d.is_zero() => d,
        Some(Ok(_)) => return usage("--timeout: \"0s\" is too short (allowed: a duration > 0)"),
        Some(Err(e)) => return usage(&format!("--timeout: {e}")),
    };
    let lease = match crate::daemon::run::backend(&config) {
        Ok(lease) => lease,
        Err(err) => return usage(&err.to_string()),
    };
    let name = config.name.clone();
    let outcome = runtime().block_on(ask(&lease, &config, to.unwrap_or_default(), timeout));
    match outcome {
        Ok(done) => {
            print_done(&name, &done, json);
            0
        }
        Err(Outcome { code, line }) => {
            if json {
                println!("{}", serde_json::json!({"name": name, "error": line}));
            }
            // One line, whatever the refusal read from Redis holds.
            let line = crate::daemon::escape::escape_text(&line);
            eprintln!("leaderd: handover of {name}: {line}");
            code
        }
    }
}

/// Why `--to` cannot name a candidate: "" (which would mean the best successor), or not an
/// identity at all.
fn bad_target(to: &str) -> Option<String> {
    if to.is_empty() {
        let why = "\"\" is not allowed (write a candidate's identity, or leave --to out for the best successor)";
        return Some(format!("--to: {why}"));
    }
    let why = crate::daemon::config::check_identity(to).err()?;
    Some(format!("--to: {why}"))
}

fn usage(line: &str) -> i32 {
    eprintln!("leaderd: {line}");
    EXIT_USAGE
}

fn unreachable(err: LeaseError) -> Outcome {
    Outcome::fail(EXIT_FAILURE, err.to_string())
}

/// Checks what it can, subscribes, sends the request and waits for the new term.
async fn ask<L: Lease>(
    lease: &L,
    config: &Config,
    to: String,
    timeout: Duration,
) -> Result<Done, Outcome> {
    let budget = super::one_shot_budget(lease, config);
    let seen = lease.observe(budget).await.map_err(unreachable)?;
    let Observed::Held(leader) = seen else {
        return Err(Outcome::fail(EXIT_VACANT, "nobody leads".into()));
    };
    let roster = lease
        .heartbeat(Heartbeat::Read, budget)
        .await
        .map_err(unreachable)?;
    // The best successor named when there is one; the leader checks the request either way
    // and refuses (and logs) what it cannot do.
    let target = crate::election::handover_target(&roster, &leader.holder, &to).unwrap_or(to);

    let mut releases = lease.watch_releases();
    let mut control = lease.watch_control();
    let confirm = config.redis.connect_timeout;
    let _ = tokio::time::timeout(confirm, releases.changed()).await;
    let _ = tokio::time::timeout(confirm, control.changed()).await;

    let request = HandoverRequest {
        id: request_id(&config.identity),
        to: target,
        by: config.identity.clone(),
        fence: leader.fence,
    };
    let started = Instant::now();
    let pending = lease
        .control(Control::Request(&request, timeout), budget)
        .await
        .map_err(unreachable)?;
    if let Some(other) = pending {
        let line = format!(
            "another handover (to {}, asked by {}) is pending; try again when it is done",
            other.to, other.by
        );
        return Err(Outcome::fail(EXIT_FAILURE, line));
    }
    let deadline = started + timeout;
    let poll = config.election.retry_period.min(Duration::from_millis(250));
    // A new term ends the wait: another replica's is the handover done; the old leader's
    // own (its target did not take the lease within the window, and it took it back) is a
    // handover that did not happen.
    let ended = |holder: String, fence: u64| -> Option<Result<Done, Outcome>> {
        if fence <= leader.fence {
            return None;
        }
        if holder == leader.holder {
            let line = format!(
                "{} did not take over within the handover window; {} took the lease back (fence {fence})",
                super::status::shown_identity(&request.to),
                super::status::shown_identity(&holder)
            );
            return Some(Err(Outcome::fail(EXIT_FAILURE, line)));
        }
        Some(Ok(Done {
            from: leader.holder.clone(),
            from_fence: leader.fence,
            to: holder,
            to_fence: fence,
            elapsed: started.elapsed(),
        }))
    };
    // A message only wakes: the new term is read from the lease, and a refusal counts once
    // the request is gone from its key (README, "Announcements").
    loop {
        tokio::select! {
            _ = releases.changed() => {
                if let Some(outcome) = read_term(lease, budget).await.and_then(|(h, f)| ended(h, f)) {
                    return outcome;
                }
            }
            msg = control.changed() => {
                if let Some(ControlMessage::Refused { request: r, reason }) = msg {
                    if r.id == request.id && answered(lease, budget, &request).await {
                        let line = format!("refused: {reason}");
                        return Err(Outcome::fail(EXIT_REFUSED, line));
                    }
                }
            }
            _ = tokio::time::sleep(poll) => {
                if let Some(outcome) = read_term(lease, budget).await.and_then(|(h, f)| ended(h, f)) {
                    return outcome;
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                let line = format!(
                    "timed out after {} waiting for a new term (asked {} to hand over to {})",
                    crate::daemon::config::format_duration(timeout), leader.holder, request.to
                );
                return Err(Outcome::fail(EXIT_FAILURE, line));
            }
        }
    }
}

/// The holder and fence of the lease, when it is held.
async fn read_term<L: Lease>(lease: &L, budget: Duration) -> Option<(String, u64)> {
    match lease.observe(budget).await {
        Ok(Observed::Held(h)) => Some((h.holder, h.fence)),
        _ => None,
    }
}

/// Whether `request` is no longer pending: a refusal deletes it before it is published.
async fn answered<L: Lease>(lease: &L, budget: Duration, request: &HandoverRequest) -> bool {
    match lease.control(Control::Read, budget).await {
        Ok(pending) => pending.is_none_or(|p| p.id != request.id),
        Err(_) => false,
    }
}

/// Unique enough per request: who asks, the process, the time.
fn request_id(by: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{by}-{}-{nanos}", std::process::id())
}

fn print_done(name: &str, d: &Done, json: bool) {
    let ms = d.elapsed.as_millis() as u64;
    if json {
        // A struct keeps the field order of docs/operating.md#handover; u64 fences print exactly.
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            name: &'a str,
            from: &'a str,
            from_fence: u64,
            to: &'a str,
            to_fence: u64,
            elapsed_ms: u64,
        }
        let doc = Doc {
            name,
            from: super::status::bounded(&d.from),
            from_fence: d.from_fence,
            to: super::status::bounded(&d.to),
            to_fence: d.to_fence,
            elapsed_ms: ms,
        };
        println!("{}", serde_json::to_string(&doc).unwrap_or_default());
    } else {
        println!(
            "{name}: handed over from {} (fence {}) to {} (fence {}) in {ms} ms",
            super::status::shown_identity(&d.from),
            d.from_fence,
            super::status::shown_identity(&d.to),
            d.to_fence
        );
    }
}
