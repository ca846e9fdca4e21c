//! The release channel: a subscription that wakes waiting candidates at every release and
//! hands them the announcement it carried.

use tokio::sync::watch;

use super::{Announcement, LeaseClient};

impl LeaseClient {
    /// Subscribes to the release channel (see [`super::Lease::watch_releases`]).
    pub(super) fn subscribe_releases(&self) -> ReleaseWatch {
        let (tx, rx) = watch::channel(None);
        let connector = self.endpoint.connector().clone();
        let channel = self.keys.released.clone();
        let timeout = self.endpoint.connect_timeout();
        let task = tokio::spawn(crate::release_watch::listen_with(
            connector, channel, timeout, tx,
        ));
        ReleaseWatch {
            rx: Rx::Messages(rx),
            task: Some(task),
        }
    }
}

/// Subscription to a lease's release channel, kept up in the background.
pub struct ReleaseWatch {
    rx: Rx,
    task: Option<tokio::task::JoinHandle<()>>,
}

enum Rx {
    Counter(watch::Receiver<u64>),
    Messages(watch::Receiver<Option<Announcement>>),
}

impl ReleaseWatch {
    /// A watch fed by some other source of release notifications (tests, other backends),
    /// without announcements.
    pub fn from_receiver(rx: watch::Receiver<u64>) -> Self {
        ReleaseWatch {
            rx: Rx::Counter(rx),
            task: None,
        }
    }

    /// A watch fed by some other source of announcements: every value sent is one change,
    /// `None` a wake-up without a message (a resubscription).
    pub fn from_announcements(rx: watch::Receiver<Option<Announcement>>) -> Self {
        ReleaseWatch {
            rx: Rx::Messages(rx),
            task: None,
        }
    }

    /// Forgets the messages received so far: the next [`Self::changed`] waits for a new one.
    pub fn mark_seen(&mut self) {
        match &mut self.rx {
            Rx::Counter(rx) => rx.mark_unchanged(),
            Rx::Messages(rx) => rx.mark_unchanged(),
        }
    }

    /// Resolves at the next message published (or resubscription), with the announcement
    /// when the message was one. Never resolves if the listener has stopped.
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
