//! The release channel: a subscription that wakes waiting candidates at every message and
//! hands them the announcement it carried (to read the lease by), and says whether it can be
//! relied on.

use tokio::sync::watch;

use super::release_watch::{self, Listen};
use super::{Announcement, LeaseClient};

impl LeaseClient {
    /// Subscribes to the release channel (see [`super::Lease::watch_releases`]).
    pub(super) fn subscribe_releases(&self) -> ReleaseWatch {
        let (tx, rx) = watch::channel(None);
        let (confirmed_tx, confirmed) = watch::channel(false);
        let connector = self.endpoint.connector().clone();
        let how = Listen {
            channels: vec![
                self.keys.released.clone(),
                self.keys.successor_channel(&self.spec.holder),
            ],
            connect_timeout: self.endpoint.connect_timeout(),
            // A PING every check (`retry_period`, docs/protocol.md#wake-ups), each given half of
            // it: a silently dead subscription is noticed within one and a half checks (a false
            // alarm costs a resubscription and a read).
            ping_every: self.spec.release_check,
            ping_timeout: self.spec.release_check / 2,
            dropped: self.dropped.clone(),
        };
        let task = tokio::spawn(release_watch::listen_with(connector, how, tx, confirmed_tx));
        ReleaseWatch {
            rx: Rx::Messages(rx),
            confirmed: Confirmed::Flags(vec![confirmed]),
            task: Some(task),
        }
    }
}

/// Subscription to a lease's release channel, kept up in the background.
pub struct ReleaseWatch {
    rx: Rx,
    confirmed: Confirmed,
    task: Option<tokio::task::JoinHandle<()>>,
}

enum Rx {
    Counter(watch::Receiver<u64>),
    Messages(watch::Receiver<Option<Announcement>>),
}

/// Whether every release would be heard: always (an in-process source), or while each of
/// these subscriptions is confirmed (one per Redis; all of a Redlock's nodes).
#[derive(Clone)]
enum Confirmed {
    Always,
    Flags(Vec<watch::Receiver<bool>>),
}

impl ReleaseWatch {
    /// A watch fed by some other source of release notifications (tests, other backends),
    /// without announcements; always confirmed.
    pub fn from_receiver(rx: watch::Receiver<u64>) -> Self {
        ReleaseWatch {
            rx: Rx::Counter(rx),
            confirmed: Confirmed::Always,
            task: None,
        }
    }

    /// A watch fed by some other source of announcements: every value sent is one change,
    /// `None` a wake-up without a message (a resubscription). Always confirmed.
    pub fn from_announcements(rx: watch::Receiver<Option<Announcement>>) -> Self {
        ReleaseWatch {
            rx: Rx::Messages(rx),
            confirmed: Confirmed::Always,
            task: None,
        }
    }

    /// The same watch, confirmed only while `confirmed` is true: for a source that can miss
    /// releases (a subscription that is down). Its changes should also wake
    /// [`Self::changed`] (send `None` on the source when it changes).
    pub fn confirmed_by(mut self, confirmed: watch::Receiver<bool>) -> Self {
        self.confirmed = Confirmed::Flags(vec![confirmed]);
        self
    }

    /// The same watch, confirmed only while all of `others` are too (Redlock: one
    /// subscription per node).
    pub(crate) fn confirmed_with_all(mut self, others: &[ReleaseWatch]) -> Self {
        let mut flags = Vec::new();
        for w in others {
            match &w.confirmed {
                Confirmed::Always => {}
                Confirmed::Flags(f) => flags.extend(f.iter().cloned()),
            }
        }
        self.confirmed = Confirmed::Flags(flags);
        self
    }

    /// True while every release published would reach this watch: the subscription is
    /// acknowledged and answered its last PING in time. A follower that cannot rely on it
    /// polls the lease instead (docs/protocol.md#wake-ups).
    pub fn is_confirmed(&self) -> bool {
        match &self.confirmed {
            Confirmed::Always => true,
            Confirmed::Flags(flags) => flags.iter().all(|f| *f.borrow()),
        }
    }

    /// Waits (at most `limit`) until [`Self::is_confirmed`]; returns whether it is. A watch
    /// made at once is usually confirmed a round trip later: a follower that waits for it
    /// before its first read needs no second read for the subscription.
    pub async fn confirmed_within(&self, limit: std::time::Duration) -> bool {
        let Confirmed::Flags(flags) = &self.confirmed else {
            return true;
        };
        let all = async {
            for f in flags {
                if f.clone().wait_for(|c| *c).await.is_err() {
                    return false;
                }
            }
            true
        };
        tokio::time::timeout(limit, all).await.unwrap_or(false)
    }

    /// Forgets the messages received so far: the next [`Self::changed`] waits for a new one.
    pub fn mark_seen(&mut self) {
        match &mut self.rx {
            Rx::Counter(rx) => rx.mark_unchanged(),
            Rx::Messages(rx) => rx.mark_unchanged(),
        }
    }

    /// Resolves at the next message published (or loss of the subscription, or
    /// resubscription), with the announcement when the message was one: what anyone allowed
    /// to publish said, a reason to read the lease and never the truth about it. Messages
    /// that came since the last call are one change. Never resolves if the listener has
    /// stopped.
    pub async fn changed(&mut self) -> Option<Announcement> {
        let ok = match &mut self.rx {
            Rx::Counter(rx) => rx.changed().await.is_ok(),
            Rx::Messages(rx) => rx.changed().await.is_ok(),
        };
        if !ok {
            std::future::pending::<()>().await;
        }
        match &mut self.rx {
            Rx::Counter(_) => None,
            Rx::Messages(rx) => rx.borrow_and_update().clone(),
        }
    }
}

impl Drop for ReleaseWatch {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
