//! What the Sentinels announce about a failover of our master (`+promoted-slave`,
//! `+switch-master`): which node took over from which. For a few seconds after a failover
//! the other Sentinels still name the old master, which keeps accepting writes (and a replica
//! not yet reconfigured keeps acknowledging them) until it is demoted; those writes are lost.
//! A lookup in that time tries the announced new master first and the old one last (only
//! when the new one is not a master: a failover that did not complete).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// An address as the Sentinels give it.
pub(crate) type Addr = (String, u16);

/// How long an announced move outranks what the Sentinels answer: far longer than they take
/// to agree after a failover (a few seconds), short enough that a missed later move heals.
const TRUSTED_FOR: Duration = Duration::from_secs(30);

/// The channels that announce a move, as a Sentinel publishes them.
pub(crate) const CHANNELS: [&str; 2] = ["+promoted-slave", "+switch-master"];

/// One announced move of the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Move {
    pub from: Addr,
    pub to: Addr,
}

/// The moves heard so far: a counter that changes at each (connections made before are
/// dropped) and the latest one.
#[derive(Debug, Default)]
pub(crate) struct Moves {
    epoch: AtomicU64,
    latest: Mutex<Option<(Move, Instant)>>,
}

impl Moves {
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Records a move as the latest, from now, and bumps the epoch. Each Sentinel announces
    /// the same failover, so one failover bumps it several times.
    pub(crate) fn heard(&self, mv: Move) {
        if let Ok(mut latest) = self.latest.lock() {
            *latest = Some((mv, Instant::now()));
        }
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Puts the latest move's new master first among the addresses the Sentinels named and
    /// its old one last, while the move is recent.
    pub(crate) fn prefer_latest(&self, named: &mut Vec<(Addr, usize)>) {
        let latest = self.latest.lock().ok().and_then(|l| l.clone());
        let Some((mv, _)) = latest.filter(|(_, at)| at.elapsed() < TRUSTED_FOR) else {
            return;
        };
        let old = named
            .iter()
            .find(|(a, _)| *a == mv.from)
            .map_or(0, |(_, n)| *n);
        named.retain(|(a, _)| *a != mv.from && *a != mv.to);
        named.insert(0, (mv.to, 0));
        named.push((mv.from, old));
    }
}

/// The move a message announces, if it is about `master_name`:
/// - `+switch-master`: `<name> <old ip> <old port> <new ip> <new port>`;
/// - `+promoted-slave`: `slave <ip>:<port> <ip> <port> @ <name> <old ip> <old port>`.
pub(crate) fn parse(channel: &str, payload: &str, master_name: &str) -> Option<Move> {
    let w: Vec<&str> = payload.split(' ').collect();
    let addr = |ip: &str, port: &str| Some((ip.to_string(), port.parse().ok()?));
    match channel {
        "+switch-master" if w.len() == 5 && w[0] == master_name => Some(Move {
            from: addr(w[1], w[2])?,
            to: addr(w[3], w[4])?,
        }),
        "+promoted-slave" if w.len() == 8 && w[4] == "@" && w[5] == master_name => Some(Move {
            from: addr(w[6], w[7])?,
            to: addr(w[2], w[3])?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(port: u16) -> Addr {
        ("127.0.0.1".into(), port)
    }

    #[test]
    fn reads_both_announcements_of_our_master_only() {
        let promoted = "slave 127.0.0.1:44929 127.0.0.1 44929 @ m 127.0.0.1 36337";
        let switched = "m 127.0.0.1 36337 127.0.0.1 44929";
        let want = Move {
            from: a(36337),
            to: a(44929),
        };
        assert_eq!(parse("+promoted-slave", promoted, "m"), Some(want.clone()));
        assert_eq!(parse("+switch-master", switched, "m"), Some(want));
        assert_eq!(parse("+switch-master", switched, "other"), None);
        assert_eq!(parse("+promoted-slave", promoted, "other"), None);
        assert_eq!(
            parse("+switch-master", "m 127.0.0.1 x 127.0.0.1 1", "m"),
            None
        );
        assert_eq!(parse("+sdown", switched, "m"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_recent_move_sends_lookups_to_the_new_master_and_the_old_one_last() {
        let moves = Moves::default();
        let mut named = vec![(a(1), 2), (a(3), 1)];
        moves.prefer_latest(&mut named);
        assert_eq!(
            named,
            vec![(a(1), 2), (a(3), 1)],
            "no move heard: unchanged"
        );
        moves.heard(Move {
            from: a(1),
            to: a(2),
        });
        assert_eq!(moves.epoch(), 1);
        moves.prefer_latest(&mut named);
        assert_eq!(named, vec![(a(2), 0), (a(3), 1), (a(1), 2)]);
        tokio::time::advance(TRUSTED_FOR).await;
        let mut later = vec![(a(1), 3)];
        moves.prefer_latest(&mut later);
        assert_eq!(
            later,
            vec![(a(1), 3)],
            "an old move no longer outranks the Sentinels"
        );
    }
}
