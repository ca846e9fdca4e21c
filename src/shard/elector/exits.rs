//! A shard whose work ended by itself (README, "Shards", exec mode): stepped down (reason
//! `child_exit`), released reserved for its target without this replica, and not taken
//! again by this replica for a `retry_period`, as one lease does after its work's end.

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::ShardElector;
use crate::shard::{ShardLeases, ShardStepDown};

impl<C: ShardLeases> ShardElector<C> {
    /// The same elector, told by `exits` of each shard whose work ended by itself, as
    /// `(shard, fence)`: if that term is still held, it is stepped down (reason `child_exit`),
    /// released reserved for the shard's target without this replica, and not taken again
    /// here for a `retry_period`.
    pub fn with_work_exits(mut self, exits: mpsc::Receiver<(u32, u64)>) -> Self {
        self.work_exits = Some(exits);
        self
    }

    /// Steps down and releases every held term whose work ended.
    pub(super) async fn end_exited(&mut self) {
        if self.exited.is_empty() {
            return;
        }
        let exited = std::mem::take(&mut self.exited);
        let ended = |h: &super::ShardTerm| exited.contains(&(h.shard, h.term.fence));
        let (gone, kept) = std::mem::take(&mut self.held).into_iter().partition(ended);
        self.held = kept;
        if gone.is_empty() {
            return;
        }
        self.publish();
        let until = Instant::now() + self.policy.retry_period;
        for h in &gone {
            self.vacancies.rest(h.shard, until);
        }
        let ended = self.with_next_targets(gone);
        self.end_and_release(&ended, ShardStepDown::WorkExit).await;
    }
}

/// The next work that ended, or `None` once nobody can tell any more (never without).
pub(super) async fn next_exit(
    exits: &mut Option<mpsc::Receiver<(u32, u64)>>,
) -> Option<(u32, u64)> {
    match exits {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
