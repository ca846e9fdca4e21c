//! The accept loop: hyper with a timer (header read timeout), a header size limit, a cap on
//! open connections, and a shutdown that waits for clients at most [`SHUTDOWN_WAIT`].

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::metrics::Metrics;

/// A request whose headers have not arrived within this is closed (slowloris). hyper runs
/// this timer from the start of every request head, so a keep-alive connection with no next
/// request is closed after it too.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Request head (start line and headers) larger than this: 431, then closed.
pub(crate) const MAX_HEADER_BYTES: usize = 16 * 1024;
/// After shutdown, open connections get this long to finish, then they are dropped.
pub(crate) const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);
/// File descriptors kept for the election itself (Redis, the leader file, the keeper, the
/// runtime) whatever HTTP clients do.
pub(crate) const RESERVED_FDS: u64 = 32;
/// Pause after an accept error (EMFILE and the like) before accepting again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// One connection's handle, in every request's extensions: cancelling `close` drops the
/// connection (an `/events` client that does not read).
#[derive(Clone)]
pub(crate) struct ConnHandle {
    pub(crate) close: CancellationToken,
}

/// The connection cap in force: `max_connections`, lowered so that HTTP never takes the
/// descriptors reserved for the election.
pub(crate) fn connection_cap(max_connections: u32) -> usize {
    let configured = max_connections.max(1) as usize;
    match crate::http::fds::soft_limit() {
        Some(limit) => {
            let room = limit.saturating_sub(RESERVED_FDS).max(1) as usize;
            if room < configured {
                tracing::warn!(
                    max_connections = configured,
                    nofile = limit,
                    "publish.max_connections lowered to {room}: RLIMIT_NOFILE is {limit} and {RESERVED_FDS} descriptors are kept for the election"
                );
            }
            room.min(configured)
        }
        None => configured,
    }
}

/// Accepts until `shutdown`, serving `app` on each connection within the limits above.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    app: Router,
    cap: usize,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(cap));
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::debug!(error = %err, "accept failed; retrying");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics.http_refused();
            drop(stream); // closed at once
            continue;
        };
        conns.spawn(serve_connection(
            stream,
            app.clone(),
            slot,
            shutdown.clone(),
        ));
    }
    drop(listener);
    // Each connection bounds its own shutdown; this bound is a second line.
    let all_done = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_WAIT + Duration::from_millis(200), all_done)
        .await
        .is_err()
    {
        conns.abort_all();
    }
}

/// Serves one connection until it ends, its handle is closed, or [`SHUTDOWN_WAIT`] after
/// `shutdown`. An idle keep-alive connection ends by the header read timeout.
async fn serve_connection(
    stream: TcpStream,
    app: Router,
    _slot: OwnedSemaphorePermit,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let handle = ConnHandle {
        close: CancellationToken::new(),
    };
    let close = handle.close.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(handle.clone());
        app.clone().oneshot(req)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = close.cancelled() => return,
        () = shutdown.cancelled() => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(SHUTDOWN_WAIT, conn).await;
}
