//! The release channel: a subscription that wakes waiting candidates at every release.

use tokio::sync::watch;

use super::LeaseClient;

impl LeaseClient {
    /// Subscribes to the release channel (see [`super::Lease::watch_releases`]).
    pub(super) fn subscribe_releases(&self) -> ReleaseWatch {
        let (tx, rx) = watch::channel(0u64);
        let connector = self.endpoint.connector().clone();
        let channel = self.keys.released.clone();
        let timeout = self.endpoint.connect_timeout();
        let task = tokio::spawn(crate::release_watch::listen_with(
            connector, channel, timeout, tx,
        ));
        ReleaseWatch {
            rx,
            task: Some(task),
        }
    }
}

/// Subscription to a lease's release channel, kept up in the background.
pub struct ReleaseWatch {
    rx: watch::Receiver<u64>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ReleaseWatch {
    /// A watch fed by some other source of release notifications (tests, other backends).
    pub fn from_receiver(rx: watch::Receiver<u64>) -> Self {
        ReleaseWatch { rx, task: None }
    }

    /// Resolves at the next release published (or resubscription). Never resolves if the
    /// listener has stopped.
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
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
