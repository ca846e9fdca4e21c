//! What runs beside the elector in `leaderd run` (the health checks, the candidacy, the
//! hooks, the leader file, HTTP, the proxy and the eviction watch): [`Running::start`]
//! starts it around one state channel, [`Running::shutdown`] stops it in one order.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::daemon::config::{Config, OnChange};
use crate::daemon::hooks::HookSink;
use crate::daemon::metrics::Metrics;
use crate::daemon::proxy::LocalGate;
use crate::daemon::report::{Outputs, Reporter};
use crate::daemon::state::{Progress, Snapshot};
use crate::daemon::{candidacy, eviction};
use crate::lease::{Lease, Roster};

/// What the elector takes from what runs beside it.
pub(super) struct Feeds {
    /// Publishes what the elector does to the state channel, metrics, logs and outputs.
    pub(super) reporter: Reporter,
    /// The health verdict.
    pub(super) healthy: watch::Receiver<bool>,
    /// The candidates as the heartbeat last read them.
    pub(super) candidates: watch::Receiver<Roster>,
}

/// The tasks beside the elector, and the two moments that stop them.
pub(super) struct Running {
    /// Cancelled once the elector has returned: the health checks stop, the hooks take no
    /// more events, the candidacy removes this replica's entry.
    election_over: CancellationToken,
    /// Cancelled once the leader file is final: HTTP, the proxy, the eviction watch.
    stop_outputs: CancellationToken,
    hooks: JoinHandle<()>,
    candidacy: JoinHandle<()>,
    file: Option<JoinHandle<()>>,
    http: Option<BoxFuture<'static, ()>>,
    proxy: Option<JoinHandle<()>>,
}

/// What each task beside the elector is built from.
struct Parts<'a, L> {
    lease: &'a Arc<L>,
    /// A sharded election's client (README, "Shards").
    sharded: Option<&'a Backend>,
    config: &'a Config,
    state: watch::Receiver<Snapshot>,
    metrics: Arc<Metrics>,
    progress: Progress,
}

impl Running {
    /// Starts everything beside the elector: `listener` serves HTTP and `proxy` the proxy
    /// when given; after `shutdown` (the signal), the last hooks get less time. `sharded`:
    /// the client of a sharded election, whose elector keeps its own registry entry.
    pub(super) fn start<L: Lease>(
        lease: &Arc<L>,
        sharded: Option<&Backend>,
        config: &Config,
        listener: Option<TcpListener>,
        proxy: Option<TcpListener>,
        shutdown: &CancellationToken,
    ) -> (Running, Feeds) {
        let metrics = Arc::new(Metrics::new(&config.name, env!("CARGO_PKG_VERSION")));
        let counted = lease.clone();
        metrics.count_dropped_messages(move || counted.messages_dropped());
        // With a health check, a replica is unhealthy until its first check passes.
        let mut first = Snapshot::starting(config.election.health_check.is_none());
        first.priority = config.election.priority;
        let (state_tx, state) = watch::channel(first);
        let parts = Parts {
            lease,
            sharded,
            config,
            state,
            metrics,
            progress: Progress::new(),
        };
        let election_over = CancellationToken::new();
        let stop_outputs = CancellationToken::new();

        let http = listener.and_then(|listener| parts.http(listener, &stop_outputs));
        let file = parts.file();
        let margin = 2 * config.redis.command_timeout + lease.spec().drift();
        let gate = LocalGate::new(config.proxy.on_change == OnChange::Close, margin);
        let proxy = proxy.map(|listener| parts.proxy(listener, &gate, &stop_outputs));
        let (hook_sink, hooks) = parts.hooks(shutdown, &election_over);
        let outputs = Outputs {
            hooks: Some(hook_sink),
            proxy: proxy.is_some().then_some(gate),
            advertise: config.publish.advertise.clone(),
        };
        let (metrics, progress) = (parts.metrics.clone(), parts.progress.clone());
        let reporter = Reporter::new(&config.identity, Arc::new(state_tx), metrics, progress)
            .with_outputs(outputs);
        let (latest, candidates) = watch::channel(Roster::default());
        let candidacy = parts.candidacy(&reporter, Arc::new(latest), &election_over);

        announce(config);
        eviction::watch_eviction(
            lease.eviction_policies(),
            parts.metrics.clone(),
            stop_outputs.clone(),
        );
        let healthy = parts.health(&reporter, &election_over);
        let running = Running {
            election_over,
            stop_outputs,
            hooks,
            candidacy,
            file,
            http,
            proxy,
        };
        let feeds = Feeds {
            reporter,
            healthy,
            candidates,
        };
        (running, feeds)
    }

    /// Stops what runs beside the elector once it has returned: it has stepped down (the
    /// child stopped, the proxy's local connections closed), released the lease and sent
    /// `stopped`. In this order:
    /// 1. The health checks stop, the hooks take no more events, the candidacy removes this
    ///    replica's entry; the hooks already queued still run (within `exec.grace_period`),
    ///    and both are waited for. The entry goes after the release, so a successor still
    ///    sees it until then; it goes while the last hooks run, which may take most of the
    ///    time left to exit.
    /// 2. The leader file: its writer ends after writing `stopped`, once the elector and the
    ///    tasks above have dropped their senders.
    /// 3. HTTP, the proxy and the eviction watch: HTTP answers until the file says `stopped`.
    pub(super) async fn shutdown(self) {
        self.election_over.cancel();
        let _ = tokio::join!(self.hooks, self.candidacy);

        if let Some(file) = self.file {
            let _ = file.await;
        }

        self.stop_outputs.cancel();
        if let Some(http) = self.http {
            http.await;
        }
        if let Some(proxy) = self.proxy {
            let _ = proxy.await;
        }
    }
}

impl<L: Lease> Parts<'_, L> {
    /// Serves HTTP until `stop`; none (logged) when the server cannot start.
    fn http(
        &self,
        listener: TcpListener,
        stop: &CancellationToken,
    ) -> Option<BoxFuture<'static, ()>> {
        let config = self.config;
        let ctx = crate::daemon::http::HttpContext {
            name: config.name.clone(),
            identity: config.identity.clone(),
            ready_when: config.publish.ready_when,
            renew_deadline: config.election.renew_deadline,
            state: self.state.clone(),
            progress: self.progress.clone(),
            metrics: self.metrics.clone(),
            max_connections: config.publish.max_connections,
            candidates: Some(candidates_reader(self.lease.clone(), config)),
            shards: self.sharded.map(|c| shards_reader(c.twin(), config)),
        };
        match crate::daemon::http::serve_apart(listener, ctx, stop.clone()) {
            Ok(served) => Some(Box::pin(served)),
            Err(err) => {
                tracing::error!(event = "http_failed", error = %err, "cannot serve HTTP: {err}");
                None
            }
        }
    }

    /// Writes the leader file at every change of state, if the configuration names one; the
    /// writer ends after the last state, once every sender is gone.
    fn file(&self) -> Option<JoinHandle<()>> {
        let config = self.config;
        config.publish.leader_file.clone().map(|path| {
            tokio::spawn(crate::daemon::publish::run_leader_file(
                path,
                config.name.clone(),
                config.identity.clone(),
                self.state.clone(),
            ))
        })
    }

    /// Runs the hooks queued by the returned sink until `finish` (what is queued then still
    /// runs); after `shutdown`, within less time.
    fn hooks(
        &self,
        shutdown: &CancellationToken,
        finish: &CancellationToken,
    ) -> (HookSink, JoinHandle<()>) {
        let (sink, runner) = crate::daemon::hooks::hooks(self.config, self.metrics.clone());
        let run = crate::daemon::hooks::run_hooks(runner, shutdown.clone(), finish.clone());
        (sink, tokio::spawn(run))
    }

    /// Checks health until `stop` (if configured) and publishes the verdict as it changes.
    fn health(&self, reporter: &Reporter, stop: &CancellationToken) -> watch::Receiver<bool> {
        let check = self.config.election.health_check.clone();
        let healthy = crate::daemon::health::watch_health(check, stop.clone());
        reporter.set_healthy(*healthy.borrow());
        tokio::spawn(publish_health(healthy.clone(), reporter.clone()));
        healthy
    }

    /// Serves the proxy on `listener` until `stop`, routing as the state says.
    fn proxy(
        &self,
        listener: TcpListener,
        gate: &LocalGate,
        stop: &CancellationToken,
    ) -> JoinHandle<()> {
        use crate::daemon::proxy::{follow, serve, ProxyContext};
        let upstream = self.config.proxy.upstream.clone().unwrap_or_default();
        let routes = follow(self.state.clone(), gate.remote_until(), upstream);
        let ctx = ProxyContext::new(self.config, routes, gate.clone(), self.metrics.clone());
        tokio::spawn(serve(listener, ctx, stop.clone()))
    }

    /// Keeps this replica's entry in the registry until `stop`.
    fn candidacy(
        &self,
        reporter: &Reporter,
        latest: Arc<candidacy::Latest>,
        stop: &CancellationToken,
    ) -> JoinHandle<()> {
        let config = self.config;
        if self.sharded.is_some() {
            return tokio::spawn(async {}); // the shard elector keeps the entry
        }
        let profile = candidacy::Profile {
            identity: config.identity.clone(),
            priority: config.election.priority,
            address: config.publish.advertise.clone(),
            lease_duration: config.election.lease_duration,
            command_timeout: config.redis.command_timeout,
        };
        tokio::spawn(candidacy::run(
            self.lease.clone(),
            profile,
            self.state.clone(),
            (self.metrics.clone(), reporter.clone()),
            latest,
            stop.clone(),
        ))
    }
}

/// Logs `started` and each warning about the configuration.
fn announce(config: &Config) {
    tracing::info!(
        event = "started",
        name = %config.name,
        identity = %config.identity,
        "leaderd {} starting",
        env!("CARGO_PKG_VERSION")
    );
    for warning in super::warnings(config) {
        tracing::warn!(event = "config_warning", "{warning}");
    }
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

/// `GET /shards`: every shard read from Redis when asked, within the command timeout.
fn shards_reader(client: Backend, config: &Config) -> crate::daemon::http::ReadCandidates {
    use crate::daemon::http::CandidatesError;
    let (client, config) = (Arc::new(client), Arc::new(config.clone()));
    let budget = config.redis.command_timeout;
    let election = tokio::runtime::Handle::current();
    Arc::new(move || {
        let (client, config) = (client.clone(), config.clone());
        let read = election.spawn(async move {
            let rows = crate::daemon::shards::read(&*client, &config, budget);
            let rows = tokio::time::timeout(3 * budget, rows)
                .await
                .map_err(|_| CandidatesError::TimedOut)??;
            Ok(serde_json::to_string(&rows).unwrap_or_else(|_| "[]".into()))
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
