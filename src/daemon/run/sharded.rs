//! `leaderd run` in a sharded election (README, "Shards"): the shard elector instead of the
//! single lease's, with the same outputs beside it, stopped in the same order; with
//! `on_exit: exit` a shard's child exiting by itself stops it with the child's code.

use std::sync::{Arc, OnceLock};

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::beside::Running;
use crate::backend::Backend;
use crate::daemon::config::{Config, OnExit, OnLost};
use crate::daemon::exec::{ChildExits, ShardWork};
use crate::daemon::report::ShardReporter;
use crate::election::Timing;
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
    ShardPolicy::new(e.shards, timing)
        .with_max_shards_per_replica(e.max_shards_per_replica)
        .with_release_on_shutdown(e.release_on_shutdown)
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
    let e = &config.election;
    let mut reporter = ShardReporter::new(feeds.reporter, e.shards, e.lease_duration);
    let (to_elector, exits) = mpsc::channel(e.shards as usize);
    let code = Arc::new(OnceLock::new());
    if e.on_lost == OnLost::Exit {
        reporter = reporter.with_exit_on_loss(code.clone(), shutdown.clone());
    }
    if !config.exec.command.is_empty() {
        let exit = (config.exec.on_exit == OnExit::Exit).then(|| (code.clone(), shutdown.clone()));
        let exits = ChildExits {
            elector: to_elector,
            exit,
        };
        reporter = reporter.with_work(ShardWork::new(&config, exits));
    }
    let elector = ShardElector::new(lease.twin(), policy(&config))
        .with_events(Arc::new(reporter.clone()))
        .with_health(feeds.healthy)
        .with_yields(yields)
        .with_work_exits(exits)
        .with_address(config.publish.advertise.clone());
    elector.run(shutdown).await;
    reporter.stopped();
    drop(reporter); // the leader file's writer ends once every state sender is gone
    running.shutdown().await;
    // `on_exit: exit`: leaderd's code is the child's (README, "Exec mode"); `on_lost: exit`: 1.
    let code = code.get().copied().unwrap_or(0);
    tracing::info!(event = "exited", code, "leaderd stopped");
    code
}
