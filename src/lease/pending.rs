//! A reserved release's announcement: told to the successor alone first, published on the
//! release channel by the successor's announcement or, if it does not come, by the releaser
//! a moment later (`lua/release_announce.lua`).

use std::time::Duration;

use futures::TryFutureExt;
use tokio::time::Instant;

use super::{LeaseClient, LeaseError};
use crate::connector::invoke;
use crate::lease::acl::LeaseScript;

/// The longest a releaser waits for the successor to announce the release: the successor
/// acquires in a round trip or two; after this the others hear of the release from the
/// releaser and see the reservation until the window ends.
pub(crate) fn announce_within(window: Duration) -> Duration {
    (window / 4).min(Duration::from_millis(20))
}

impl LeaseClient {
    /// After a reserved release: looks at 1, 2, 4... ms whether the successor's term has
    /// announced it, and publishes it here at [`announce_within`] if not (or at once if
    /// the lease went vacant: the successor's term was undone).
    pub(super) async fn follow_reserved_release(
        &self,
        successor: &str,
        fence: u64,
        window: Duration,
    ) -> Result<(), LeaseError> {
        let start = Instant::now();
        let limit = announce_within(window);
        let mut step = Duration::from_millis(1);
        loop {
            let left = limit.saturating_sub(start.elapsed());
            tokio::time::sleep(step.min(left)).await;
            let now = start.elapsed() >= limit;
            if self.announce_release(successor, fence, now).await? != 2 {
                return Ok(());
            }
            step *= 2;
        }
    }

    /// One call of `lua/release_announce.lua`: 0 nothing left to do, 1 published, 2 pending.
    async fn announce_release(
        &self,
        successor: &str,
        fence: u64,
        now: bool,
    ) -> Result<i64, LeaseError> {
        let mut call = self.scripts.release_announce.prepare_invoke();
        call.key(&self.keys.lock)
            .key(&self.keys.released)
            .arg(&self.spec.holder)
            .arg(successor)
            .arg(if now { "1" } else { "0" })
            .arg(fence);
        if let Some(shard) = self.shard_index() {
            call.arg(shard);
        }
        self.endpoint
            .call(Some(self.spec.command_timeout), |mut c| async move {
                invoke(&mut c, &call).await
            })
            .or_else(|f| self.fail(f, LeaseScript::ReleaseAnnounce))
            .await
    }
}
