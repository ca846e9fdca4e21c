//! `leaderd run`: wires the lease, the elector, the HTTP server, the leader file and the
//! metrics together around one state channel, and runs them until shutdown.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, OnChange, OnExit, OnLost, RedisMode};
use crate::election::{
    self, AfterLoss, AfterWorkExit, Inputs, LeaseBackend, NoWork, Outputs, Policy, Reporter, Timing,
};
use crate::lease::{Holder, LeaseClient, LeaseError, LeaseSpec};
use crate::metrics::Metrics;
use crate::redlock::RedlockClient;
use crate::state::{Progress, Snapshot};

/// Why the daemon could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration asks for something this build cannot do (exit 2).
    #[error("{0}")]
    Unsupported(String),
    /// The Redis settings cannot make a client (exit 2).
    #[error("{0}")]
    BadRedis(String),
    /// The HTTP address cannot be bound (exit 1).
    #[error("publish.http_addr {addr}: cannot listen: {cause}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        cause: std::io::Error,
    },
    /// `proxy.listen` cannot be bound (exit 1).
    #[error(transparent)]
    ProxyListen(#[from] crate::proxy::ProxyError),
}

/// What the configuration allows but probably did not mean; one line each, naming the key.
pub fn warnings(config: &Config) -> Vec<String> {
    let mut warnings = Vec::new();
    if config.proxy.listen.is_some() && config.publish.advertise.is_none() {
        warnings.push("publish.advertise: not set while proxy.listen is; when this replica leads, the other replicas' proxies cannot reach its service (set it to the HOST:PORT where they reach proxy.upstream)".to_string());
    }
    warnings
}

/// Features the configuration may name that this build does not provide yet; each entry is
/// one line naming the key.
pub fn unsupported(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    if config.redis.min_replicas_ack > 0 && config.redis.mode == RedisMode::Redlock {
        problems.push(format!(
            "redis.min_replicas_ack: {} is not supported with mode redlock (its nodes are independent masters; allowed: 0)",
            config.redis.min_replicas_ack
        ));
    }
    problems
}

/// Binds the HTTP address of the configuration, if any.
///
/// # Errors
/// [`DaemonError::Listen`] when the address is taken or not ours.
pub async fn bind_http(config: &Config) -> Result<Option<TcpListener>, DaemonError> {
    let Some(addr) = config.publish.http_addr else {
        return Ok(None);
    };
    TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|cause| DaemonError::Listen {
            addr: addr.to_string(),
            cause,
        })
}

/// The Redis client of the configuration (single mode), with its credentials.
///
/// # Errors
/// [`DaemonError::BadRedis`] when the URL does not parse.
pub fn redis_client(config: &Config) -> Result<redis::Client, DaemonError> {
    let url = config
        .redis
        .url
        .as_deref()
        .unwrap_or("redis://127.0.0.1:6379/0");
    crate::connector::client_for_url(config, url, "redis.url").map_err(DaemonError::BadRedis)
}

/// The lease client of the configuration.
///
/// # Errors
/// As [`redis_client`].
pub fn lease_client(config: &Config) -> Result<LeaseClient, DaemonError> {
    let spec = lease_spec(config);
    let connector = crate::connector::from_config(config).map_err(DaemonError::BadRedis)?;
    Ok(LeaseClient::with_connector(
        connector,
        spec,
        config.redis.min_replicas_ack,
    ))
}

/// The Redlock client of the configuration (mode redlock): one client per `redis.urls`
/// entry, each with the configuration's credentials and TLS files.
///
/// # Errors
/// [`DaemonError::BadRedis`] when a URL does not parse, a TLS file cannot be used, or the
/// number of URLs is not odd and >= 3.
pub fn redlock_client(config: &Config) -> Result<RedlockClient, DaemonError> {
    let clients = config
        .redis
        .urls
        .iter()
        .enumerate()
        .map(|(i, url)| {
            crate::connector::client_for_url(config, url, &format!("redis.urls[{i}]"))
                .map_err(DaemonError::BadRedis)
        })
        .collect::<Result<Vec<_>, _>>()?;
    RedlockClient::with_clients(clients, lease_spec(config))
        .map_err(|e| DaemonError::BadRedis(format!("redis.urls: {e}")))
}

/// The lease spec of the configuration.
fn lease_spec(config: &Config) -> LeaseSpec {
    LeaseSpec {
        name: config.name.clone(),
        key_prefix: config.redis.key_prefix.clone(),
        holder: config.identity.clone(),
        lease_duration: config.election.lease_duration,
        command_timeout: config.redis.command_timeout,
        connect_timeout: config.redis.connect_timeout,
        address: config.publish.advertise.clone(),
    }
}

/// The lease of the configuration in whichever mode it names, for `leaderd status`.
pub enum Observer {
    /// Mode single.
    Single(LeaseClient),
    /// Mode redlock.
    Redlock(RedlockClient),
}

impl Observer {
    /// Who holds the lease (in redlock mode: the holder seen on a majority).
    ///
    /// # Errors
    /// As [`LeaseClient::observe`] and [`RedlockClient::observe`].
    pub async fn observe(&self) -> Result<Option<Holder>, LeaseError> {
        match self {
            Observer::Single(lease) => lease.observe().await,
            Observer::Redlock(lease) => lease.observe().await,
        }
    }
}

/// The [`Observer`] of the configuration.
///
/// # Errors
/// As [`lease_client`] and [`redlock_client`].
pub fn observer(config: &Config) -> Result<Observer, DaemonError> {
    match config.redis.mode {
        RedisMode::Redlock => redlock_client(config).map(Observer::Redlock),
        _ => lease_client(config).map(Observer::Single),
    }
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
    }
}

/// Runs the daemon until `shutdown` is cancelled (exit code 0) or the election ends by
/// itself (its exit code). `listener` serves HTTP when given; `yields` carries SIGUSR1.
///
/// # Errors
/// [`DaemonError`] when it cannot start.
pub async fn run(
    config: Config,
    listener: Option<TcpListener>,
    shutdown: CancellationToken,
    yields: mpsc::Receiver<()>,
) -> Result<i32, DaemonError> {
    if let Some(first) = unsupported(&config).into_iter().next() {
        return Err(DaemonError::Unsupported(first));
    }
    match config.redis.mode {
        RedisMode::Single | RedisMode::Sentinel | RedisMode::Cluster => {
            let lease = Arc::new(lease_client(&config)?);
            let proxy = crate::proxy::bind(&config).await?;
            Ok(run_with(lease, config, listener, proxy, shutdown, yields).await)
        }
        RedisMode::Redlock => {
            let lease = Arc::new(redlock_client(&config)?);
            let proxy = crate::proxy::bind(&config).await?;
            Ok(run_with(lease, config, listener, proxy, shutdown, yields).await)
        }
    }
}

/// Runs the daemon over any lease backend (single Redis, Sentinel, Redlock, ...); `proxy`
/// is the bound `proxy.listen`, if any.
pub async fn run_with<B: LeaseBackend>(
    lease: Arc<B>,
    config: Config,
    listener: Option<TcpListener>,
    proxy: Option<TcpListener>,
    shutdown: CancellationToken,
    yields: mpsc::Receiver<()>,
) -> i32 {
    let metrics = Arc::new(Metrics::new(&config.name, env!("CARGO_PKG_VERSION")));
    let progress = Progress::new();
    // With a health check, a replica is unhealthy until its first check passes.
    let healthy_at_start = config.election.health_check.is_none();
    let (state_tx, state_rx) = watch::channel(Snapshot::starting(healthy_at_start));
    let state_tx = Arc::new(state_tx);
    let stop_outputs = CancellationToken::new();

    let http = listener.map(|listener| {
        let ctx = crate::http::HttpContext {
            name: config.name.clone(),
            identity: config.identity.clone(),
            ready_when: config.publish.ready_when,
            renew_deadline: config.election.renew_deadline,
            state: state_rx.clone(),
            progress: progress.clone(),
            metrics: metrics.clone(),
        };
        tokio::spawn(crate::http::serve(listener, ctx, stop_outputs.clone()))
    });
    let file = config.publish.leader_file.clone().map(|path| {
        tokio::spawn(crate::publish::run_leader_file(
            path,
            config.name.clone(),
            config.identity.clone(),
            state_rx.clone(),
        ))
    });
    let margin =
        2 * config.redis.command_timeout + crate::lease::drift(config.election.lease_duration);
    let gate = crate::proxy::LocalGate::new(config.proxy.on_change == OnChange::Close, margin);
    let proxy = proxy.map(|listener| {
        let upstream = config.proxy.upstream.clone().unwrap_or_default();
        let routes = crate::proxy::follow(state_rx.clone(), gate.remote_until(), upstream);
        let ctx = crate::proxy::ProxyContext::new(&config, routes, gate.clone(), metrics.clone());
        tokio::spawn(crate::proxy::serve(listener, ctx, stop_outputs.clone()))
    });
    let (hook_sink, hook_runner) = crate::hooks::hooks(&config, metrics.clone());
    let finish_hooks = CancellationToken::new();
    let hooks = tokio::spawn(crate::hooks::run_hooks(
        hook_runner,
        shutdown.clone(),
        finish_hooks.clone(),
    ));
    let outputs = Outputs {
        hooks: Some(hook_sink),
        proxy: proxy.is_some().then_some(gate),
        advertise: config.publish.advertise.clone(),
    };
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
    let reporter =
        Reporter::new(&config.identity, state_tx, metrics, progress).with_outputs(outputs);
    let stop_checks = CancellationToken::new();
    let healthy = crate::health::watch_health(
        config.election.health_check.clone(),
        reporter.clone(),
        stop_checks.clone(),
    );
    let inputs = Inputs {
        shutdown: shutdown.clone(),
        yields,
        healthy,
    };
    let code = if config.exec.command.is_empty() {
        election::run(lease, policy(&config), NoWork, inputs, reporter).await
    } else {
        let work = crate::exec::ExecWork::new(&config);
        election::run(lease, policy(&config), work, inputs, reporter).await
    };
    stop_checks.cancel();
    finish_hooks.cancel();
    let _ = hooks.await;

    // The elector sent `stopped` and dropped its sender: the file writer ends after
    // writing it. HTTP answers until then.
    if let Some(file) = file {
        let _ = file.await;
    }
    stop_outputs.cancel();
    if let Some(http) = http {
        let _ = http.await;
    }
    if let Some(proxy) = proxy {
        let _ = proxy.await;
    }
    tracing::info!(event = "exited", code, "leaderd stopped");
    code
}
