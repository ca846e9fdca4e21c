//! `leaderd run`: the elector over the lease, with what runs beside it (`beside`: the
//! outputs, started together and stopped in one order), until shutdown.

mod beside;
mod sharded;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::connector::ConnectError;
use crate::daemon::config::{Config, OnExit, OnLost};
use crate::election::{self, AfterLoss, AfterWorkExit, Inputs, NoWork, Policy, Timing};
use crate::lease::Lease;
use beside::Running;

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
    if config.election.shards > 0 {
        return Ok(sharded::run(lease, config, listener, shutdown, yields).await);
    }
    let proxy = crate::daemon::proxy::bind(&config).await?;
    Ok(run_with(lease, config, listener, proxy, shutdown, yields).await)
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
    let (running, feeds) = Running::start(&lease, None, &config, listener, proxy, &shutdown);
    let inputs = Inputs {
        shutdown,
        yields,
        healthy: feeds.healthy,
        candidates: feeds.candidates,
    };
    let code = if config.exec.command.is_empty() {
        election::run(lease, policy(&config), NoWork, inputs, feeds.reporter).await
    } else {
        let work = crate::daemon::exec::ExecWork::new(&config);
        election::run(lease, policy(&config), work, inputs, feeds.reporter).await
    };
    // The elector has stepped down, released and sent `stopped`: the rest stops in order.
    running.shutdown().await;
    tracing::info!(event = "exited", code, "leaderd stopped");
    code
}
