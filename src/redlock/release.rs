//! The Redlock release: compare-and-delete on every node; and one watch over every node's
//! release channel.

use std::time::Duration;

use tokio::sync::watch;

use super::RedlockClient;
use crate::lease::{Lease, LeaseError, ReleaseWatch, Reservation, Term};

impl RedlockClient {
    /// Deletes the lease of `token` on every node (each publishes the release), reserving it
    /// there for the successor if one is given. Returns false when no node held it any
    /// more; `Unavailable` when no node answered.
    pub(super) async fn release_token(
        &self,
        token: &str,
        fence: u64,
        reservation: Option<Reservation<'_>>,
        t: Duration,
    ) -> Result<bool, LeaseError> {
        let term = Term::unclaimed(token, fence);
        let answers = self
            .all(|node| node.lease.release_to(&term, reservation, t))
            .await;
        let mut released = false;
        let mut answered = 0;
        let mut errors = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            self.note(i, answer.as_ref().err());
            match answer {
                Ok(r) => {
                    answered += 1;
                    released |= r;
                }
                Err(err) => errors.push((i, err)),
            }
        }
        if answered == 0 {
            return Err(self.unavailable("release", 0, &errors));
        }
        Ok(released)
    }

    /// One watch over the release channels of every node: it changes whenever any node
    /// publishes a release (or resubscribes). Dropping it stops the listeners.
    pub(super) fn watch_all_releases(&self) -> ReleaseWatch {
        let (tx, rx) = watch::channel(None);
        let mut watches: Vec<ReleaseWatch> = self
            .nodes
            .iter()
            .map(|n| n.lease.watch_releases())
            .collect();
        // Quiet only while every node's subscription is confirmed: a release published on a
        // node whose subscription is down would be missed.
        let all = ReleaseWatch::from_announcements(rx).confirmed_with_all(&watches);
        tokio::spawn(async move {
            loop {
                let any =
                    futures::future::select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
                tokio::select! {
                    (msg, _, _) = any => {
                        tx.send_replace(msg);
                    }
                    _ = tx.closed() => return,
                }
            }
        });
        all
    }
}
