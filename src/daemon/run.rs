//! `leaderd run`: wires the lease, the elector, the HTTP server, the leader file and the
//! metrics together around one state channel, and runs them until shutdown.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{candidacy, eviction};
use crate::backend::Backend;
use crate::connector::ConnectError;
use crate::daemon::config::{Config, OnChange, OnExit, OnLost};
use crate::daemon::metrics::Metrics;
use crate::daemon::state::{Progress, Snapshot};
use crate::election::{self, AfterLoss, AfterWorkExit, Inputs, NoWork, Policy, Timing};
use crate::lease::Lease;

pub(crate) use super::report::{Outputs, Reporter};

/// Why the daemon could not run at all.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DaemonError {
    /// The Redis settings cannot make a client (exit 2).
    #[error(transparent)]
    Redis(#[from] ConnectError),
    /// The HTTP address cannot be bound (exit 1).
    #[error("publish.http_addr {addr}: cannot listen: {cause}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
    /// `proxy.listen` cannot be bound (exit 1).
    #[error(transparent)]
    ProxyListen(#[from] crate::daemon::proxy::ProxyError),
}

/// What the configuration allows but probably did not mean; one line each, naming the key.
pub(crate) fn warnings(config: &Config) -> Vec<String> {
    let mut warnings = crate::daemon::config::group_writable_warnings(config);
    if config.proxy.listen.is_some() && config.publish.advertise.is_none() {
        warnings.push("publish.advertise: not set while proxy.listen is; when this replica leads, the other replicas' proxies cannot reach its service (set it to the HOST:PORT where they reach proxy.upstream)".to_string());
    }
    warnings
}

/// Binds the HTTP address of the configuration, if any.
///
/// # Errors
/// [`DaemonError::Listen`] when the address is taken or not ours.
pub(crate) async fn bind_http(config: &Config) -> Result<Option<TcpListener>, DaemonError> {
    let Some(addr) = config.publish.http_addr else {
        return Ok(None);
    };
    crate::daemon::http::listen(addr)
        .map(Some)
        .map_err(|cause| DaemonError::Listen {
            addr: addr.to_string(),
            cause,
        })
}

/// The lease of the configuration, in whichever mode it names (for `run` and `status`).
///
/// # Errors
/// [`DaemonError::Redis`] naming the setting that cannot make a client.
pub(crate) fn backend(config: &Config) -> Result<Backend, DaemonError> {
    Ok(config.backend()?)
}

fn policy(config: &Config) -> Policy {
    let e = &config.election;
    Policy {
        timing: Timing {
            lease_duration: e.lease_duration,
            renew_deadline: e.renew_deadline,
            retry_period: e.retry_period,
            jitter: e.jitter,
            command_timeout: config.redis.command_timeout,
        },
        on_lost: match e.on_lost {
            OnLost::Contend => AfterLoss::Contend,
            OnLost::Exit => AfterLoss::Exit,
        },
        on_work_exit: match config.exec.on_exit {
            OnExit::Release => AfterWorkExit::Release,
            OnExit::Exit => AfterWorkExit::Exit,
        },
        release_on_shutdown: e.release_on_shutdown,
        preempt: e.preempt,
    }
}

/// Runs the daemon until `shutdown` is cancelled (exit code 0) or the election ends by
/// itself (its exit code). `listener` serves HTTP when given; `yields` carries SIGUSR1.
///
/// # Errors
/// [`DaemonError`] when it cannot start.
pub(crate) async fn run(
    config: Config,
    listener: Option<TcpListener>,
    shutdown: CancellationToken,
    yields: mpsc::Receiver<()>,
) -> Result<i32, DaemonError> {
    let lease = Arc::new(backend(&config)?);
    let proxy = crate::daemon::proxy::bind(&config).await?;
    Ok(run_with(lease, config, listener, proxy, shutdown, yields).await)
}

/// `GET /candidates`: the candidates read from Redis when asked, within the command timeout.
fn candidates_reader<L: Lease>(
    lease: Arc<L>,
    config: &Config,
) -> crate::daemon::http::ReadCandidates {
    use crate::daemon::http::CandidatesError;
    let budget = config.redis.command_timeout;
    // The HTTP server runs on a runtime of its own: the read runs on the lease's.
    let election = tokio::runtime::Handle::current();
    Arc::new(move || {
        let lease = lease.clone();
        let read = election.spawn(async move {
            let both = async {
                tokio::join!(
                    lease.heartbeat(crate::lease::Heartbeat::Read, budget),
                    lease.observe(budget)
                )
            };
            let (roster, seen) = tokio::time::timeout(budget, both)
                .await
                .map_err(|_| CandidatesError::TimedOut)?;
            let roster = roster?;
            let seen = seen.ok();
            let leader = seen
                .as_ref()
                .and_then(|s| s.holder())
                .map(|h| h.holder.clone());
            let list = candidacy::listed(&roster, leader.as_deref());
            Ok(serde_json::to_string(&list).unwrap_or_else(|_| "[]".into()))
        });
        Box::pin(async move { read.await.unwrap_or(Err(CandidatesError::Stopped)) })
    })
}

/// Publishes the health verdict (the status document's `healthy`) as it changes, until the
/// checks end.
async fn publish_health(mut healthy: watch::Receiver<bool>, reporter: Reporter) {
    loop {
        reporter.set_healthy(*healthy.borrow_and_update());
        if healthy.changed().await.is_err() {
            return;
        }
    }
}

/// Runs the daemon over any lease; `proxy` is the bound `proxy.listen`, if any.
async fn run_with<L: Lease>(
    lease: Arc<L>,
    config: Config,
    listener: Option<TcpListener>,
    proxy: Option<TcpListener>,
    shutdown: CancellationToken,
    yields: mpsc::Receiver<()>,
) -> i32 {
    let metrics = Arc::new(Metrics::new(&config.name, env!("CARGO_PKG_VERSION")));
    let counted = lease.clone();
    metrics.count_dropped_messages(move || counted.messages_dropped());
    let progress = Progress::new();
    // With a health check, a replica is unhealthy until its first check passes.
    let healthy_at_start = config.election.health_check.is_none();
    let mut first = Snapshot::starting(healthy_at_start);
    first.priority = config.election.priority;
    let (state_tx, state_rx) = watch::channel(first);
    let state_tx = Arc::new(state_tx);
    let stop_outputs = CancellationToken::new();

    let http = listener.map(|listener| {
        let ctx = crate::daemon::http::HttpContext {
            name: config.name.clone(),
            identity: config.identity.clone(),
            ready_when: config.publish.ready_when,
            renew_deadline: config.election.renew_deadline,
            state: state_rx.clone(),
            progress: progress.clone(),
            metrics: metrics.clone(),
            max_connections: config.publish.max_connections,
            candidates: Some(candidates_reader(lease.clone(), &config)),
        };
        let served = crate::daemon::http::serve_apart(listener, ctx, stop_outputs.clone());
        served.inspect_err(
            |err| tracing::error!(event = "http_failed", error = %err, "cannot serve HTTP: {err}"),
        )
    });
    let file = config.publish.leader_file.clone().map(|path| {
        tokio::spawn(crate::daemon::publish::run_leader_file(
            path,
            config.name.clone(),
            config.identity.clone(),
            state_rx.clone(),
        ))
    });
    let margin = 2 * config.redis.command_timeout + lease.spec().drift();
    let gate =
        crate::daemon::proxy::LocalGate::new(config.proxy.on_change == OnChange::Close, margin);
    let proxy = proxy.map(|listener| {
        let upstream = config.proxy.upstream.clone().unwrap_or_default();
        let routes = crate::daemon::proxy::follow(state_rx.clone(), gate.remote_until(), upstream);
        let ctx =
            crate::daemon::proxy::ProxyContext::new(&config, routes, gate.clone(), metrics.clone());
        tokio::spawn(crate::daemon::proxy::serve(
            listener,
            ctx,
            stop_outputs.clone(),
        ))
    });
    let (hook_sink, hook_runner) = crate::daemon::hooks::hooks(&config, metrics.clone());
    let finish_hooks = CancellationToken::new();
    let hooks = tokio::spawn(crate::daemon::hooks::run_hooks(
        hook_runner,
        shutdown.clone(),
        finish_hooks.clone(),
    ));
    let outputs = Outputs {
        hooks: Some(hook_sink),
        proxy: proxy.is_some().then_some(gate),
        advertise: config.publish.advertise.clone(),
    };
    let reporter =
        Reporter::new(&config.identity, state_tx, metrics.clone(), progress).with_outputs(outputs);
    let (latest, candidates) = watch::channel(crate::lease::Roster::default());
    let latest = Arc::new(latest);
    let stop_candidacy = CancellationToken::new();
    let candidacy = tokio::spawn(candidacy::run(
        lease.clone(),
        candidacy::Profile {
            identity: config.identity.clone(),
            priority: config.election.priority,
            address: config.publish.advertise.clone(),
            lease_duration: config.election.lease_duration,
            command_timeout: config.redis.command_timeout,
        },
        state_rx.clone(),
        (metrics.clone(), reporter.clone()),
        latest.clone(),
        stop_candidacy.clone(),
    ));
    drop(state_rx);

    tracing::info!(
        event = "started",
        name = %config.name,
        identity = %config.identity,
        "leaderd {} starting",
        env!("CARGO_PKG_VERSION")
    );
    for warning in warnings(&config) {
        tracing::warn!(event = "config_warning", "{warning}");
    }
    eviction::watch_eviction(
        lease.eviction_policies(),
        metrics.clone(),
        stop_outputs.clone(),
    );
    let stop_checks = CancellationToken::new();
    let healthy = crate::daemon::health::watch_health(
        config.election.health_check.clone(),
        stop_checks.clone(),
    );
    reporter.set_healthy(*healthy.borrow());
    tokio::spawn(publish_health(healthy.clone(), reporter.clone()));
    let inputs = Inputs {
        shutdown: shutdown.clone(),
        yields,
        healthy,
        candidates,
    };
    let code = if config.exec.command.is_empty() {
        election::run(lease, policy(&config), NoWork, inputs, reporter).await
    } else {
        let work = crate::daemon::exec::ExecWork::new(&config);
        election::run(lease, policy(&config), work, inputs, reporter).await
    };
    stop_checks.cancel();
    finish_hooks.cancel();
    // After the release: the entry goes last, so a successor still sees it until then. It
    // goes while the last hooks run, which may take most of the time left to exit.
    stop_candidacy.cancel();
    let _ = tokio::join!(hooks, candidacy);

    // The elector sent `stopped` and dropped its sender: the file writer ends after
    // writing it. HTTP answers until then.
    if let Some(file) = file {
        let _ = file.await;
    }
    stop_outputs.cancel();
    if let Some(Ok(http)) = http {
        http.await;
    }
    if let Some(proxy) = proxy {
        let _ = proxy.await;
    }
    tracing::info!(event = "exited", code, "leaderd stopped");
    code
}
