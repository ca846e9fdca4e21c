//! The leader's side of a handover (docs/protocol.md#handover): checking a
//! request, refusing or accepting it, and choosing the candidate a preempting leader hands
//! over to.

use std::time::Duration;

use tokio::sync::watch;

use super::{ElectionEvents, Timing};
use crate::lease::{Control, ControlMessage, HandoverRequest, Heartbeat, Lease, Roster};

/// Who a reserved release is for.
pub(super) enum Successor {
    /// The target of a handover (with its request, answered before the release) or of a
    /// preemption.
    Named(String, Option<HandoverRequest>),
    /// The best successor, read afresh; `hint` (the last roster's) when the read fails.
    Best { hint: Option<String> },
}

impl Successor {
    /// The identity to reserve the release for, if any (`None` as well when no release
    /// follows), and the handover request to answer.
    pub(super) async fn choose<L: Lease>(
        self,
        lease: &L,
        budget: Duration,
        release: bool,
    ) -> (Option<String>, Option<HandoverRequest>) {
        match self {
            Successor::Named(to, request) => (release.then_some(to), request),
            _ if !release => (None, None),
            Successor::Best { hint } => match lease.heartbeat(Heartbeat::Read, budget).await {
                Ok(roster) => (
                    roster
                        .best_successor(Some(lease.spec().holder.as_str()))
                        .map(|c| c.identity.clone()),
                    None,
                ),
                Err(_) => (hint, None),
            },
        }
    }
}

/// Handles one message of the control channel (`None`: read the request key) for the term
/// with `fence`. Returns the request and its target when the leader is to hand over; refuses
/// (logged and answered) a request whose target is not a registered, healthy candidate
/// other than the leader. Acts only on the request pending in Redis: a message whose
/// request has timed out or been answered is old news. A request asked of another term is
/// dropped (that term has ended: what it asked is done or moot). `handled` is the last
/// request seen (Redlock delivers each once per node).
pub(super) async fn on_control<L: Lease, E: ElectionEvents>(
    lease: &L,
    budget: Duration,
    reporter: &E,
    (msg, fence): (Option<ControlMessage>, u64),
    handled: &mut Option<String>,
) -> Option<(HandoverRequest, String)> {
    let announced = match msg {
        Some(ControlMessage::Request(r)) => Some(r.id),
        Some(ControlMessage::Refused { .. }) => return None,
        None => None,
    };
    if announced.is_some() && announced == *handled {
        return None;
    }
    let request = match lease.control(Control::Read, budget).await {
        Ok(found) => found?,
        Err(err) => {
            reporter.redis_failed(&err);
            return None;
        }
    };
    if announced.is_some_and(|id| id != request.id) || handled.as_deref() == Some(&request.id) {
        return None;
    }
    *handled = Some(request.id.clone());
    if request.fence != 0 && request.fence != fence {
        reporter.handover_dropped(&request);
        if let Err(err) = lease.control(Control::Answer(&request, None), budget).await {
            reporter.redis_failed(&err);
        }
        return None;
    }
    reporter.handover_requested(&request);
    let me = lease.spec().holder.as_str();
    let checked = match lease.heartbeat(Heartbeat::Read, budget).await {
        Ok(roster) => target(&roster, me, &request.to),
        Err(err) => Err(format!("cannot read the candidates ({err})")),
    };
    match checked {
        Ok(to) => Some((request, to)),
        Err(reason) => {
            reporter.handover_refused(&request, &reason);
            let answer = Control::Answer(&request, Some(&reason));
            if let Err(err) = lease.control(answer, budget).await {
                reporter.redis_failed(&err);
            }
            None
        }
    }
}

/// The request is accepted (the leader has stopped claiming, for its target): delete it,
/// before the release, so that the target does not find it once it leads.
pub(super) async fn accepted<L: Lease, E: ElectionEvents>(
    lease: &L,
    budget: Duration,
    reporter: &E,
    request: &HandoverRequest,
) {
    if let Err(err) = lease.control(Control::Answer(request, None), budget).await {
        reporter.redis_failed(&err);
    }
}

/// The target of a request to hand over to `to` (empty: the best successor), or why not.
///
/// # Errors
/// The reason for the refusal, in one line.
pub(crate) fn target(roster: &Roster, leader: &str, to: &str) -> Result<String, String> {
    if to.is_empty() {
        return match roster.best_successor(Some(leader)) {
            Some(c) => Ok(c.identity.clone()),
            None => Err("no healthy candidate besides the leader".into()),
        };
    }
    if to == leader {
        return Err(format!("{to} is the leader itself"));
    }
    match roster.candidates.iter().find(|c| c.identity == to) {
        None => Err(format!("{to} is not a registered candidate")),
        Some(c) if !c.healthy => Err(format!("{to} is not healthy")),
        Some(c) if !c.contending => Err(format!(
            "{to} is sitting out (it yielded or lost a term a moment ago)"
        )),
        Some(_) => Ok(to.to_string()),
    }
}

/// With `preempt`: the candidate to hand over to, if one with a higher priority than the
/// leader's has been registered and healthy for a lease duration. The last roster is only a
/// hint; the decision is made on a fresh read (Redis time on both sides).
pub(super) async fn preempt<L: Lease>(
    lease: &L,
    t: &Timing,
    candidates: &watch::Receiver<Roster>,
) -> Option<String> {
    let me = lease.spec().holder.as_str();
    let hint = better(&candidates.borrow(), me, None).is_some();
    if !hint {
        return None;
    }
    let fresh = lease
        .heartbeat(Heartbeat::Read, t.command_timeout)
        .await
        .ok()?;
    better(&fresh, me, Some(t.lease_duration))
}

/// The best candidate with a priority above the leader's own entry, healthy (for at least
/// `for_at_least` of Redis time, when given).
fn better(roster: &Roster, leader: &str, for_at_least: Option<Duration>) -> Option<String> {
    let own = roster.candidates.iter().find(|c| c.identity == leader)?;
    let settled = |since: Option<u64>| match for_at_least {
        None => true,
        Some(d) => since.is_some_and(|s| s + d.as_millis() as u64 <= roster.now_ms),
    };
    let eligible = Roster {
        now_ms: roster.now_ms,
        lease: None,
        registration: Default::default(),
        candidates: roster
            .candidates
            .iter()
            .filter(|c| c.priority > own.priority && settled(c.healthy_since_ms))
            .cloned()
            .collect(),
    };
    let best = eligible.best_successor(Some(leader));
    best.map(|c| c.identity.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Candidate;

    fn c(id: &str, healthy: bool, priority: u32, since: Option<u64>) -> Candidate {
        Candidate {
            healthy_since_ms: since,
            ..Candidate::example(id, healthy, priority)
        }
    }

    #[test]
    fn a_request_names_a_registered_healthy_other_candidate() {
        let r = Roster {
            now_ms: 0,
            lease: None,
            registration: Default::default(),
            candidates: vec![
                c("a", true, 0, None),
                c("b", true, 0, None),
                c("x", false, 9, None),
            ],
        };
        assert_eq!(target(&r, "a", "b"), Ok("b".into()));
        assert_eq!(target(&r, "a", ""), Ok("b".into()));
        assert_eq!(target(&r, "a", "a"), Err("a is the leader itself".into()));
        assert_eq!(target(&r, "a", "x"), Err("x is not healthy".into()));
        assert_eq!(
            target(&r, "a", "zz"),
            Err("zz is not a registered candidate".into())
        );
        let alone = Roster {
            now_ms: 0,
            lease: None,
            registration: Default::default(),
            candidates: vec![c("a", true, 0, None)],
        };
        assert_eq!(
            target(&alone, "a", ""),
            Err("no healthy candidate besides the leader".into())
        );
    }

    #[test]
    fn preemption_waits_for_a_lease_duration_of_health() {
        let lease = Duration::from_millis(1000);
        let mut r = Roster {
            now_ms: 1500,
            lease: None,
            registration: Default::default(),
            candidates: vec![
                c("a", true, 5, Some(0)),
                c("b", true, 9, Some(1000)),
                c("c", true, 3, Some(0)),
            ],
        };
        assert_eq!(better(&r, "a", None).as_deref(), Some("b"));
        assert_eq!(better(&r, "a", Some(lease)), None);
        r.now_ms = 2000;
        assert_eq!(better(&r, "a", Some(lease)).as_deref(), Some("b"));
        assert_eq!(better(&r, "b", Some(lease)), None);
        assert_eq!(better(&r, "nobody", None), None);
    }
}
