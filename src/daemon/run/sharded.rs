//! `leaderd run` in a sharded election (README, "Shards"): the shard elector instead of the
//! single lease's, with the same outputs beside it, stopped in the same order.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::beside::Running;
use crate::backend::Backend;
use crate::daemon::config::Config;
use crate::daemon::exec::ShardWork;
use crate::daemon::report::ShardReporter;
use crate::election::{handover_window, Timing};
use crate::shard::{ShardElector, ShardPolicy};

/// The shape and timing of `config`'s sharded election.
fn policy(config: &Config) -> ShardPolicy {
    let e = &config.election;
    let timing = Timing {
        lease_duration: e.lease_duration,
        renew_deadline: e.renew_deadline,
        retry_period: e.retry_period,
        jitter: e.jitter,
        command_timeout: config.redis.command_timeout,
    };
    ShardPolicy {
        shards: e.shards,
        max_shards_per_replica: e.max_shards_per_replica,
        lease_duration: e.lease_duration,
        renew_deadline: e.renew_deadline,
        retry_period: e.retry_period,
        handover_window: handover_window(&timing),
    }
}

/// Runs the shard elector over its own twin of `lease` until `shutdown` (exit code 0): it steps down and
/// releases every shard, then what runs beside it stops in order.
pub(super) async fn run(
    lease: Arc<Backend>,
    config: Config,
    listener: Option<TcpListener>,
    shutdown: CancellationToken,
    yields: mpsc::Receiver<()>,
) -> i32 {
    let (running, feeds) =
        Running::start(&lease, Some(&*lease), &config, listener, None, &shutdown);
    let mut reporter = ShardReporter::new(feeds.reporter, config.election.shards);
    if !config.exec.command.is_empty() {
        reporter = reporter.with_work(ShardWork::new(&config));
    }
    let elector = ShardElector::new(lease.twin(), policy(&config))
        .with_events(Arc::new(reporter.clone()))
        .with_health(feeds.healthy)
        .with_yields(yields);
    elector.run(shutdown).await;
    reporter.stopped();
    drop(reporter); // the leader file's writer ends once every state sender is gone
    running.shutdown().await;
    tracing::info!(event = "exited", code = 0, "leaderd stopped");
    0
}
