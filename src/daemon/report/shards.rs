//! The events of a sharded election (README, "Shards"): each shard's term published in the
//! state (`shards.owned`), logged as `acquired` / `renewed` / `stepped_down` with `"shard"`,
//! counted, and given to the hooks with `LEADERD_SHARD`.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{now_ms, Own, Reporter};
use crate::daemon::exec::ShardWork;
use crate::daemon::hooks::HookEvent;
use crate::daemon::state::{Phase, ShardsView};
use crate::election::{AcquireResult, Began, RenewResult};
use crate::lease::{unix_ms, LeaseError, Registration, Roster};
use crate::shard::{OwnedShard, ShardEvents, ShardStepDown};

/// A [`Reporter`] for a sharded election of `count` shards.
#[derive(Clone)]
pub(crate) struct ShardReporter {
    reporter: Reporter,
    /// Exec mode: the children of the owned shards.
    work: Option<Arc<ShardWork>>,
    /// What the heartbeats found about this replica's own entry.
    own: Arc<Mutex<Own>>,
    /// With `on_lost: exit`: leaderd's exit code (1 at the first shard lost) and shutdown.
    exit_on_loss: Option<(Arc<OnceLock<i32>>, CancellationToken)>,
}

impl ShardReporter {
    /// Publishes the state of an election of `count` shards, none owned yet (leases of
    /// `lease_duration`).
    pub(crate) fn new(reporter: Reporter, count: u32, lease_duration: Duration) -> ShardReporter {
        reporter.metrics.set_shards(count);
        reporter.state.send_modify(|s| {
            s.shards = Some(ShardsView {
                count,
                owned: Vec::new(),
            });
        });
        ShardReporter {
            reporter,
            work: None,
            own: Arc::new(Mutex::new(Own::new(lease_duration))),
            exit_on_loss: None,
        }
    }

    /// The same reporter, ending leaderd with code 1 (`code`, then `shutdown`) when a shard is
    /// lost or passes its renew deadline (`on_lost: exit`).
    pub(crate) fn with_exit_on_loss(
        mut self,
        code: Arc<OnceLock<i32>>,
        shutdown: CancellationToken,
    ) -> ShardReporter {
        self.exit_on_loss = Some((code, shutdown));
        self
    }

    /// The same reporter, running one child per owned shard.
    pub(crate) fn with_work(mut self, work: Arc<ShardWork>) -> ShardReporter {
        self.work = Some(work);
        self
    }

    /// Applies `change` to the owned shards; the phase follows (leader while one is owned).
    fn owned(&self, change: impl FnOnce(&mut Vec<OwnedShard>)) {
        let mut count = 0;
        self.reporter.state.send_modify(|s| {
            let Some(view) = s.shards.as_mut() else {
                return;
            };
            change(&mut view.owned);
            view.owned.sort_by_key(|o| o.shard);
            count = view.owned.len();
            let phase = if count > 0 {
                Phase::Leader
            } else {
                Phase::Follower
            };
            if s.phase != Phase::Stopped && s.phase != phase {
                s.set_phase(phase);
            }
            s.observed_at = SystemTime::now();
        });
        self.reporter.metrics.set_shards_owned(count);
    }

    /// The elector has finished: `stopped`.
    pub(crate) fn stopped(&self) {
        self.reporter
            .state
            .send_modify(|s| s.set_phase(Phase::Stopped));
    }
}

impl ShardEvents for ShardReporter {
    /// The loop is not stuck (`/healthz`), and has left `starting`.
    fn attempted(&self) {
        self.reporter.progress.touch();
        self.reporter.state.send_if_modified(|s| {
            let first = s.phase == Phase::Starting;
            if first {
                s.set_phase(Phase::Follower);
            }
            first
        });
    }

    fn redis_failed(&self, err: &LeaseError) {
        self.reporter.failed(err);
    }

    /// After failures, `redis_recovered` (as with one lease).
    fn redis_answered(&self) {
        self.reporter.recovered();
    }

    /// `identity_conflict`, `registry_full` and the gauge, as the candidacy of one lease.
    fn registered(&self, registration: Registration) {
        let r = &self.reporter;
        let mut own = self.own.lock().expect("shard reporter");
        own.found(registration, &r.identity, &r.metrics);
    }

    /// `leaderd_candidates{healthy}`, as the candidacy of one lease counts them.
    fn candidates_read(&self, roster: &Roster) {
        crate::daemon::candidacy::count(&self.reporter.metrics, roster);
    }

    fn acquire_result(&self, result: AcquireResult) {
        self.reporter.metrics.acquire_attempt(result);
    }

    fn renew_result(&self, result: RenewResult, took: Duration) {
        self.reporter.metrics.renewal(result, took);
    }

    /// Counted as a term (README, "Shards": the per-term counters count shard terms).
    fn began(&self, _o: &OwnedShard, how: Began) {
        self.reporter.metrics.transition(how);
    }

    fn acquired(&self, o: &OwnedShard) {
        self.reporter.progress.touch();
        let fresh = o.clone();
        self.owned(|owned| {
            owned.retain(|x| x.shard != fresh.shard);
            owned.push(fresh);
        });
        let valid_until_ms = unix_ms(o.valid_until_wall);
        tracing::info!(
            event = "acquired",
            shard = o.shard,
            fence = o.fence,
            acquired_at_ms = unix_ms(o.acquired_at),
            lease_valid_until_ms = valid_until_ms,
            "acquired shard {} (fence {})",
            o.shard,
            o.fence
        );
        if let Some(work) = &self.work {
            work.start(o);
        }
        let me = &self.reporter.identity;
        let hook = HookEvent::acquired(me, o.fence, valid_until_ms).of_shard(o.shard);
        self.reporter.hook(hook);
    }

    fn renewed(&self, o: &OwnedShard) {
        self.reporter.progress.touch();
        let fresh = o.clone();
        self.owned(|owned| {
            if let Some(x) = owned.iter_mut().find(|x| x.shard == fresh.shard) {
                *x = fresh;
            }
        });
        if let Some(work) = &self.work {
            work.extend(o);
        }
        tracing::debug!(
            event = "renewed",
            shard = o.shard,
            fence = o.fence,
            lease_valid_until_ms = unix_ms(o.valid_until_wall),
            "renewed shard {}",
            o.shard
        );
    }

    fn stepped_down(&self, o: &OwnedShard, reason: ShardStepDown) {
        let lost = matches!(reason, ShardStepDown::Lost | ShardStepDown::Deadline);
        if let Some((code, shutdown)) = self.exit_on_loss.as_ref().filter(|_| lost) {
            // Every other shard is then released as at any shutdown (README "Shards").
            let _ = code.set(1);
            shutdown.cancel();
        }
        let (shard, fence) = (o.shard, o.fence);
        self.owned(|owned| owned.retain(|x| !(x.shard == shard && x.fence == fence)));
        if let Some(work) = &self.work {
            work.stop(o);
        }
        self.reporter.metrics.shard_moved(reason);
        tracing::info!(
            event = "stepped_down",
            shard,
            fence,
            reason = reason.as_str(),
            acquired_at_ms = unix_ms(o.acquired_at),
            lease_valid_until_ms = unix_ms(o.valid_until_wall),
            ended_at_ms = now_ms(),
            "stepped down from shard {shard} ({})",
            reason.as_str()
        );
        let hook = HookEvent::stepped_down(fence, reason.as_str()).of_shard(shard);
        self.reporter.hook(hook);
    }

    fn work_stopped(&self, o: &OwnedShard) -> BoxFuture<'static, ()> {
        match &self.work {
            Some(work) => work.stopped(o),
            None => Box::pin(async {}),
        }
    }
}
