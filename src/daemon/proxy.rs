//! The leader-aware proxy: every replica accepts TCP connections on `proxy.listen` and
//! forwards each, bytes unchanged both ways (half-closes too), to whichever replica leads:
//! its own `proxy.upstream` while it leads with a valid lease, else the leader's advertised
//! address. With `on_change: close` a connection ends when its target stops leading; any
//! connection ends after `proxy.idle_timeout` without bytes, or soon after a half-close
//! ([`idle`]), so that its slot of `max_connections` always comes back.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::daemon::config::{Config, OnChange};
use crate::daemon::metrics::Metrics;

mod counted;
mod gate;
mod idle;
mod route;

pub(crate) use gate::LocalGate;
pub(crate) use route::{follow, Route, Target};

/// The copy buffer of each direction of a connection: 64 KiB (tokio's default is 8 KiB)
/// moves a bulk transfer in an eighth of the reads, writes and wake-ups.
const COPY_BUFFER: usize = 64 * 1024;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    /// `proxy.listen` cannot be bound (exit 1).
    #[error("proxy.listen {addr}: cannot listen: {cause}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
}

/// What the proxy needs besides its listener.
#[derive(Clone)]
pub(crate) struct ProxyContext {
    pub routes: watch::Receiver<Route>,
    pub gate: LocalGate,
    pub metrics: Arc<Metrics>,
    pub close_on_change: bool,
    pub connect_timeout: Duration,
    /// None: connections may stay idle for ever.
    pub idle_timeout: Option<Duration>,
    pub max_connections: usize,
}

impl ProxyContext {
    pub(crate) fn new(
        config: &Config,
        routes: watch::Receiver<Route>,
        gate: LocalGate,
        metrics: Arc<Metrics>,
    ) -> Self {
        let p = &config.proxy;
        ProxyContext {
            routes,
            gate,
            metrics,
            close_on_change: p.on_change == OnChange::Close,
            connect_timeout: p.connect_timeout,
            idle_timeout: (!p.idle_timeout.is_zero()).then_some(p.idle_timeout),
            max_connections: p.max_connections as usize,
        }
    }
}

/// Binds `proxy.listen`, if set.
///
/// # Errors
/// [`ProxyError::Listen`] when the address is taken or not ours.
pub(crate) async fn bind(config: &Config) -> Result<Option<TcpListener>, ProxyError> {
    let Some(addr) = config.proxy.listen else {
        return Ok(None);
    };
    crate::daemon::http::listen(addr)
        .map(Some)
        .map_err(|cause| ProxyError::Listen {
            addr: addr.to_string(),
            cause,
        })
}

/// Accepts and forwards connections until `stop`; open connections end with it.
pub(crate) async fn serve(listener: TcpListener, ctx: ProxyContext, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(ctx.max_connections));
    loop {
        let client = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => client,
                Err(err) => {
                    tracing::warn!(event = "proxy_accept_failed", error = %err, "proxy cannot accept: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            ctx.metrics.outputs.proxy_connection("refused");
            drop(client);
            continue;
        };
        let ctx = ctx.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = handle(client, &ctx, slot) => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

/// One connection: wait for a usable route, connect, forward until either side closes or
/// (with `close`) the target stops leading. Its `slot` of `max_connections` is free again
/// before the active gauge falls, so a client that reads the gauge can count on the slot.
async fn handle(client: TcpStream, ctx: &ProxyContext, slot: OwnedSemaphorePermit) {
    let _ = client.set_nodelay(true);
    let deadline = Instant::now() + ctx.connect_timeout;
    let mut routes = ctx.routes.clone();
    let Some((upstream, target, guard)) = connect(&mut routes, ctx, deadline).await else {
        ctx.metrics.outputs.proxy_connection("refused");
        return;
    };
    let label = match target {
        Target::Local(_) => "local",
        Target::Remote(..) => "remote",
    };
    ctx.metrics.outputs.proxy_connection(label);
    let out = &ctx.metrics.outputs;
    out.proxy_active.inc();
    let activity = idle::Activity::new();
    let counters = (out.proxy_bytes_in.clone(), out.proxy_bytes_out.clone());
    let mut client = counted::Counted::new(client, counters, &activity);
    let mut upstream = upstream;
    tokio::select! {
        _ = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, COPY_BUFFER, COPY_BUFFER) => {}
        _ = deposed(&mut routes, &target, ctx), if ctx.close_on_change => {}
        _ = activity.expired(ctx.idle_timeout) => {}
    }
    drop(slot);
    out.proxy_active.dec();
    tracing::debug!(
        event = "proxy_connection_closed",
        target = label,
        "proxied connection closed"
    );
    drop(guard);
}

/// Waits (until `deadline`) for a route that can be reached and connects to it.
async fn connect(
    routes: &mut watch::Receiver<Route>,
    ctx: &ProxyContext,
    deadline: Instant,
) -> Option<(TcpStream, Target, Option<gate::LocalGuard>)> {
    loop {
        let usable = {
            let route = routes.borrow_and_update();
            route
                .usable(Instant::now())
                .map(|(addr, t)| (addr.to_string(), t))
        };
        if let Some((addr, target)) = usable {
            let guard = match target {
                Target::Local(fence) => match ctx.gate.enter(fence) {
                    Some(guard) => Some(guard),
                    None => {
                        wait_change(routes, deadline).await?;
                        continue;
                    }
                },
                Target::Remote(..) => None,
            };
            let attempt = tokio::time::timeout_at(deadline, TcpStream::connect(&addr)).await;
            match attempt {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    // The route may have moved while connecting.
                    if routes.borrow().still(&target, Instant::now()) {
                        return Some((stream, target, guard));
                    }
                    continue;
                }
                Ok(Err(err)) => {
                    tracing::debug!(event = "proxy_connect_failed", address = %addr, error = %err, "proxy cannot reach {addr}: {err}");
                    drop(guard);
                    // Try again at the next route change, or shortly.
                    let retry = (Instant::now() + Duration::from_millis(50)).min(deadline);
                    tokio::select! {
                        _ = routes.changed() => {}
                        _ = tokio::time::sleep_until(retry) => {}
                    }
                    if Instant::now() >= deadline {
                        return None;
                    }
                    continue;
                }
                Err(_) => return None,
            }
        }
        wait_change(routes, deadline).await?;
    }
}

/// The next route change, or None at `deadline` (or when routes end).
async fn wait_change(routes: &mut watch::Receiver<Route>, deadline: Instant) -> Option<()> {
    tokio::select! {
        changed = routes.changed() => changed.ok(),
        _ = tokio::time::sleep_until(deadline) => None,
    }
}

/// Resolves when `target` no longer leads: the route names another, a local term's
/// validity passes, or the step-down ends the local term.
async fn deposed(routes: &mut watch::Receiver<Route>, target: &Target, ctx: &ProxyContext) {
    let term_over = async {
        match target {
            Target::Local(fence) => ctx.gate.ended(*fence).await,
            Target::Remote(..) => std::future::pending().await,
        }
    };
    let moved = async {
        loop {
            let expiry = {
                let route = routes.borrow_and_update();
                if !route.still(target, Instant::now()) {
                    return;
                }
                match &*route {
                    Route::Local { valid_until, .. } => Some(*valid_until),
                    _ => None,
                }
            };
            tokio::select! {
                changed = routes.changed() => if changed.is_err() { return },
                _ = until(expiry) => {}
            }
        }
    };
    tokio::select! {
        _ = term_over => {}
        _ = moved => {}
    }
}

async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
