//! The HTTP server (docs/outputs.md#http-when-publishhttp_addr-is-set): probes, the status
//! document, its event stream and the metrics, every answer computed from the state when it is
//! asked.

mod events;
pub(crate) mod fds;
mod server;
mod watchdog;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) use crate::daemon::config::ReadyWhen;
use crate::daemon::metrics::Metrics;
use crate::daemon::state::{Phase, Progress, Snapshot, StatusDoc};

pub(crate) use server::listen;

/// The content type of the Prometheus text format.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Everything the handlers read: the election's identity, the state channel, the progress of
/// the election loop and the metrics.
#[derive(Clone)]
pub(crate) struct HttpContext {
    /// The election name.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// When `/readyz` answers 200.
    pub ready_when: ReadyWhen,
    /// `/healthz` answers 503 when no attempt has finished for longer than this.
    pub renew_deadline: Duration,
    /// The elector's state.
    pub state: watch::Receiver<Snapshot>,
    /// When the election loop last finished an attempt.
    pub progress: Progress,
    /// The metrics `/metrics` renders.
    pub metrics: Arc<Metrics>,
    /// `publish.max_connections`: open connections past it are closed at once.
    pub max_connections: u32,
    /// Reads the candidates from Redis for `GET /candidates`: the JSON array, or why not.
    pub candidates: Option<ReadCandidates>,
    /// In a sharded election, reads every shard for `GET /shards` (README, "Shards").
    pub shards: Option<ReadCandidates>,
}

/// A read of the candidates (bounded by the command timeout): the JSON body, or the error.
pub(crate) type ReadCandidates = Arc<
    dyn Fn() -> futures::future::BoxFuture<'static, Result<String, CandidatesError>> + Send + Sync,
>;

/// Why `GET /candidates` has no answer (503).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CandidatesError {
    /// Redis did not answer within the command timeout.
    #[error("redis: timed out reading from Redis")]
    TimedOut,
    /// Redis answered with an error, or could not be reached.
    #[error(transparent)]
    Redis(#[from] crate::lease::LeaseError),
    /// This server has no reader (a test's context).
    #[error("no candidates reader")]
    NoReader,
    /// The daemon is stopping.
    #[error("leaderd is stopping")]
    Stopped,
}

impl HttpContext {
    pub(crate) fn snapshot(&self) -> Snapshot {
        self.state.borrow().clone()
    }

    pub(crate) fn document_of(&self, snapshot: &Snapshot) -> StatusDoc {
        snapshot.document(&self.name, &self.identity, Instant::now())
    }
}

/// Serves until `shutdown` is cancelled, within the limits of the `server` module: open `/events`
/// streams end then, other connections get `server::SHUTDOWN_WAIT` (1 s) to finish.
///
/// # Errors
/// None today (accept errors on single connections are retried); kept for callers.
pub(crate) async fn serve(
    listener: TcpListener,
    ctx: HttpContext,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let cap = server::connection_cap(ctx.max_connections);
    let metrics = ctx.metrics.clone();
    let streams = events::Streams {
        shutdown: shutdown.clone(),
    };
    let app = router(ctx).layer(Extension(streams));
    server::accept_loop(listener, app, cap, metrics, shutdown).await;
    Ok(())
}

/// [`serve`] on a runtime of its own, on threads of its own (`leaderd-http`): however busy
/// HTTP clients keep it (a flood of scrapes), the election's tasks on the caller's runtime
/// never wait behind them for a worker. Resolves when the server has stopped.
///
/// # Errors
/// When the listener cannot be moved to the new runtime, or the thread not started.
pub(crate) fn serve_apart(
    listener: TcpListener,
    ctx: HttpContext,
    shutdown: CancellationToken,
) -> std::io::Result<impl std::future::Future<Output = ()>> {
    let listener = listener.into_std()?;
    let (done, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("leaderd-http".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("leaderd-http")
                .enable_all()
                .build();
            let Ok(runtime) = runtime else {
                tracing::error!(event = "http_failed", "cannot start the HTTP server's runtime");
                return;
            };
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => {
                        let _ = serve(listener, ctx, shutdown).await;
                    }
                    Err(err) => tracing::error!(event = "http_failed", error = %err, "cannot serve HTTP: {err}"),
                }
            });
            drop(done);
        })?;
    Ok(async move {
        let _ = stopped.await;
    })
}

/// The routes of docs/outputs.md#http-when-publishhttp_addr-is-set; unknown paths get 404, other
/// methods on known paths 405.
fn router(ctx: HttpContext) -> Router {
    Router::new()
        .route("/", get(root))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/leader", get(leader))
        .route("/metrics", get(metrics))
        .route("/candidates", get(candidates))
        .route("/shards", get(shards))
        .route("/events", get(events::events))
        .with_state(ctx)
}

/// 200 while the election loop makes progress, 503 when it is stuck.
async fn healthz(State(ctx): State<HttpContext>) -> (StatusCode, &'static str) {
    if ctx.progress.since_last() > ctx.renew_deadline {
        (StatusCode::SERVICE_UNAVAILABLE, "stuck")
    } else {
        (StatusCode::OK, "ok")
    }
}

/// 200 when ready by `ready_when`, checked against the lease validity now.
async fn readyz(State(ctx): State<HttpContext>) -> (StatusCode, &'static str) {
    let snapshot = ctx.snapshot();
    let ready = match ctx.ready_when {
        ReadyWhen::Leader => snapshot.is_leader_at(Instant::now()),
        ReadyWhen::Always => !matches!(snapshot.phase, Phase::Starting | Phase::Stopped),
    };
    match (ctx.ready_when, ready) {
        (ReadyWhen::Leader, true) => (StatusCode::OK, "leader"),
        (ReadyWhen::Leader, false) => (StatusCode::SERVICE_UNAVAILABLE, "not leader"),
        (ReadyWhen::Always, true) => (StatusCode::OK, "ready"),
        (ReadyWhen::Always, false) => (StatusCode::SERVICE_UNAVAILABLE, "not ready"),
    }
}

/// The status document as of now.
async fn leader(State(ctx): State<HttpContext>) -> Json<StatusDoc> {
    Json(ctx.document_of(&ctx.snapshot()))
}

/// `{"name": "<leader identity or empty>"}`, as the Kubernetes `leader-elector` sidecar answers.
async fn root(State(ctx): State<HttpContext>) -> Json<serde_json::Value> {
    let doc = ctx.document_of(&ctx.snapshot());
    Json(serde_json::json!({ "name": doc.leader.unwrap_or_default() }))
}

/// The candidates read from Redis now: 200 and the array, 503 `{"error"}` when unreachable.
async fn candidates(State(ctx): State<HttpContext>) -> Response {
    read_json(ctx.candidates.as_ref()).await
}

/// Every shard read from Redis now: 200 and the array, 503 `{"error"}` when unreachable,
/// 404 when the election is not sharded.
async fn shards(State(ctx): State<HttpContext>) -> Response {
    if ctx.shards.is_none() {
        let body = Json(serde_json::json!({ "error": "this election is not sharded" }));
        return (StatusCode::NOT_FOUND, body).into_response();
    }
    read_json(ctx.shards.as_ref()).await
}

/// The JSON `read` answers: 200 and the body, 503 `{"error"}` when it cannot.
async fn read_json(read: Option<&ReadCandidates>) -> Response {
    let read = match read {
        Some(read) => read().await,
        None => Err(CandidatesError::NoReader),
    };
    match read {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "error": error.to_string() })),
        )
            .into_response(),
    }
}

/// The Prometheus text exposition, leadership gauges checked against now.
async fn metrics(State(ctx): State<HttpContext>) -> Response {
    let body = ctx.metrics.render(&ctx.snapshot(), Instant::now());
    ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], body).into_response()
}
