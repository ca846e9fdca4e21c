//! This replica as a candidate: its entry in the election's registry, refreshed at every
//! change of its state or health and every `lease_duration / 3`, removed on a clean shutdown;
//! what the heartbeat finds about it (refused, an identity conflict, a failure) logged.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::report::{Own, Reporter};
use crate::daemon::metrics::Metrics;
use crate::daemon::state::{Phase, Snapshot};
use crate::election::ElectionEvents;
use crate::lease::{unix_ms, Candidate, Heartbeat, Lease, Roster};

/// What this replica says about itself besides its state.
pub(crate) struct Profile {
    pub identity: String,
    pub priority: u32,
    pub address: Option<String>,
    pub lease_duration: Duration,
    pub command_timeout: Duration,
}

/// The candidates as last read by this replica's heartbeat (the elector reads them too).
pub(crate) type Latest = watch::Sender<Roster>;

/// Runs the heartbeat until `stop`; then removes the entry (after the election has ended and
/// released).
pub(crate) async fn run<L: Lease>(
    lease: Arc<L>,
    profile: Profile,
    mut state: watch::Receiver<Snapshot>,
    (metrics, reporter): (Arc<Metrics>, Reporter),
    latest: Arc<Latest>,
    stop: CancellationToken,
) {
    let mut own = Own::new(profile.lease_duration);
    let started_at_ms = unix_ms(SystemTime::now());
    let every = profile.lease_duration / 3;
    // The first state is a moment away (the elector's first read): register with it rather
    // than write `starting` and, a few ms later, the state again.
    let first = state.wait_for(|s| s.phase != Phase::Starting);
    let _ = tokio::time::timeout(every, first).await;
    loop {
        let (phase, healthy, sitting_out) = {
            let s = state.borrow_and_update();
            (s.phase, s.healthy, s.sitting_out)
        };
        if phase == Phase::Stopped {
            break;
        }
        let entry = Candidate {
            identity: profile.identity.clone(),
            state: phase_name(phase).into(),
            healthy,
            contending: !sitting_out,
            priority: profile.priority,
            address: profile.address.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            started_at_ms,
            // Stamped by the heartbeat script with the Redis time it turned healthy.
            healthy_since_ms: None,
            seen_at_ms: 0,
        };
        let beat = lease.heartbeat(Heartbeat::Write(&entry), profile.command_timeout);
        match beat.await {
            Ok(roster) => {
                own.found(roster.registration, &profile.identity, &metrics);
                publish(&metrics, &latest, roster);
            }
            // A failed call like any other: a `redis_error` line (rate-limited, an
            // out-of-memory error named) and `leaderd_redis_errors_total{kind}`.
            Err(err) => reporter.redis_failed(&err),
        }
        let next = tokio::time::Instant::now() + every;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => break,
                _ = stop.cancelled() => return remove(&*lease, &profile, &reporter).await,
                changed = state.changed() => {
                    if changed.is_err() {
                        return remove(&*lease, &profile, &reporter).await;
                    }
                    let s = state.borrow();
                    if (s.phase, s.healthy, s.sitting_out) != (phase, healthy, sitting_out) {
                        break;
                    }
                }
            }
        }
    }
    remove(&*lease, &profile, &reporter).await;
}

async fn remove<L: Lease>(lease: &L, profile: &Profile, reporter: &Reporter) {
    let beat = lease.heartbeat(Heartbeat::Remove, profile.command_timeout);
    if let Err(err) = beat.await {
        reporter.redis_failed(&err);
    }
}

fn publish(metrics: &Metrics, latest: &Latest, roster: Roster) {
    count(metrics, &roster);
    latest.send_replace(roster);
}

/// `leaderd_candidates{healthy}` from the candidates `roster` lists (docs/outputs.md).
pub(crate) fn count(metrics: &Metrics, roster: &Roster) {
    let healthy = roster.candidates.iter().filter(|c| c.healthy).count();
    metrics.candidates(healthy, roster.candidates.len() - healthy);
}

/// The state's name as in the status document.
pub(crate) fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Starting => "starting",
        Phase::Follower => "follower",
        Phase::Leader => "leader",
        Phase::SteppingDown => "stepping_down",
        Phase::Stopped => "stopped",
    }
}

/// One candidate as `status --json` and `GET /candidates` list it (fields in this order).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Listed {
    pub identity: String,
    pub state: String,
    pub healthy: bool,
    pub priority: u32,
    pub address: Option<String>,
    pub version: String,
    pub started_at_ms: u64,
    pub seen_ms_ago: u64,
}

/// The candidates as docs/operating.md#candidates lists them: the leader first, then by priority
/// (highest first), then identity; `seen_ms_ago` from the Redis time of the read.
pub(crate) fn listed(roster: &Roster, leader: Option<&str>) -> Vec<Listed> {
    let mut cs: Vec<&Candidate> = roster.candidates.iter().collect();
    cs.sort_by(|a, b| {
        let lead = |c: &Candidate| Some(c.identity.as_str()) != leader;
        lead(a)
            .cmp(&lead(b))
            .then(b.priority.cmp(&a.priority))
            .then(a.identity.cmp(&b.identity))
    });
    cs.into_iter()
        .map(|c| Listed {
            identity: c.identity.clone(),
            state: c.state.clone(),
            healthy: c.healthy,
            priority: c.priority,
            address: c.address.clone(),
            version: c.version.clone(),
            started_at_ms: c.started_at_ms,
            seen_ms_ago: roster.now_ms.saturating_sub(c.seen_at_ms),
        })
        .collect()
}

/// One line of `leaderd status` per candidate, whatever its entry in Redis holds (control
/// characters are escaped).
pub(crate) fn line(c: &Listed) -> String {
    let shown = crate::daemon::escape::escape_text;
    format!(
        "  {} {} {} priority {} {} {} seen {} ms ago",
        shown(&c.identity),
        shown(&c.state),
        if c.healthy { "healthy" } else { "unhealthy" },
        c.priority,
        shown(c.address.as_deref().unwrap_or("-")),
        shown(&c.version),
        c.seen_ms_ago
    )
}
