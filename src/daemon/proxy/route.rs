//! Where a new proxied connection goes, derived from the leadership state: this replica's
//! own service while it leads with a valid lease, the leader's advertised address while
//! another replica leads, nowhere otherwise.

use tokio::sync::watch;
use tokio::time::Instant;

use crate::daemon::state::{Phase, Snapshot};

/// The route of new connections.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Route {
    /// Nobody leads, or the leader has no address: connections wait.
    Nobody,
    /// This replica leads: its own service, until `valid_until` (term `fence`).
    Local {
        upstream: String,
        fence: u64,
        valid_until: Instant,
    },
    /// Another replica leads, reachable at `address`.
    Remote {
        leader: String,
        fence: Option<u64>,
        address: String,
    },
}

/// What a forwarded connection is bound to; when the route stops naming it, the connection
/// talks to a deposed leader.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// This replica's term `fence`.
    Local(u64),
    /// The term `fence` of `leader` at `address`.
    Remote(String, Option<u64>, String),
}

impl Route {
    /// The route of `snapshot` at `now`; `upstream` is this replica's own service.
    /// A remote leader counts only before `remote_until` (None: no expiry was observed).
    pub(crate) fn of(
        snapshot: &Snapshot,
        upstream: &str,
        now: Instant,
        remote_until: Option<Instant>,
    ) -> Route {
        if let Some(term) = snapshot.valid_term(now) {
            return Route::Local {
                upstream: upstream.to_string(),
                fence: term.fence,
                valid_until: term.valid_until,
            };
        }
        match (&snapshot.phase, &snapshot.leader, &snapshot.leader_address) {
            (Phase::Follower, Some(leader), Some(address))
                if remote_until.is_none_or(|until| now < until) =>
            {
                Route::Remote {
                    leader: leader.clone(),
                    fence: snapshot.fence,
                    address: address.clone(),
                }
            }
            _ => Route::Nobody,
        }
    }

    /// Where to connect and what the connection is bound to, if a connection may be made
    /// now: a local route only before its validity.
    pub(crate) fn usable(&self, now: Instant) -> Option<(&str, Target)> {
        match self {
            Route::Nobody => None,
            Route::Local {
                upstream,
                fence,
                valid_until,
            } => (now < *valid_until).then_some((upstream.as_str(), Target::Local(*fence))),
            Route::Remote {
                leader,
                fence,
                address,
            } => Some((
                address.as_str(),
                Target::Remote(leader.clone(), *fence, address.clone()),
            )),
        }
    }

    /// True while a connection bound to `target` still goes to the current leader.
    pub(crate) fn still(&self, target: &Target, now: Instant) -> bool {
        self.usable(now).is_some_and(|(_, t)| t == *target)
    }
}

/// Follows `state` and the observed expiry of a remote leader's lease, keeping the returned
/// route current, also when a validity passes without a new state.
pub(crate) fn follow(
    mut state: watch::Receiver<Snapshot>,
    mut remote_until: watch::Receiver<Option<Instant>>,
    upstream: String,
) -> watch::Receiver<Route> {
    let until = *remote_until.borrow_and_update();
    let first = Route::of(&state.borrow_and_update(), &upstream, Instant::now(), until);
    let (tx, rx) = watch::channel(first);
    tokio::spawn(async move {
        loop {
            let expiry = match &*tx.borrow() {
                Route::Local { valid_until, .. } => Some(*valid_until),
                Route::Remote { .. } => *remote_until.borrow(),
                Route::Nobody => None,
            };
            tokio::select! {
                changed = state.changed() => if changed.is_err() { break },
                _ = remote_until.changed() => {}
                _ = sleep_until(expiry) => {}
                _ = tx.closed() => break,
            }
            let until = *remote_until.borrow_and_update();
            let route = Route::of(&state.borrow_and_update(), &upstream, Instant::now(), until);
            tx.send_if_modified(|r| {
                let changed = *r != route;
                *r = route;
                changed
            });
        }
        tx.send_replace(Route::Nobody);
    });
    rx
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
