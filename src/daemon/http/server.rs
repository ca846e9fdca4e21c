//! The accept loop: hyper with a header size limit, each connection under its
//! [`watchdog`](super::watchdog) (head and idle timeouts), a cap on open connections, and a
//! shutdown that waits for clients at most [`SHUTDOWN_WAIT`].

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};

use super::watchdog::{Activity, RequestGuard, Watched};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::daemon::metrics::Metrics;

/// Request head (start line and headers) larger than this: 431, then closed.
pub(crate) const MAX_HEADER_BYTES: usize = 16 * 1024;
/// After shutdown, open connections get this long to finish, then they are dropped.
pub(crate) const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);
/// File descriptors kept for the election itself (Redis, the leader file, the keeper, the
/// runtime) whatever HTTP clients do.
pub(crate) const RESERVED_FDS: u64 = 32;
/// Pause after an accept error (EMFILE and the like) before accepting again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// The kernel's send buffer of each connection (Linux doubles it for its bookkeeping). Left
/// to autotuning it grows to megabytes for a client that does not read, so an `/events`
/// stream nobody reads would hold thousands of documents before its queue filled.
const SEND_BUFFER_BYTES: usize = 16 * 1024;
/// Connections the kernel completes before the accept loop takes them (128 by default): a
/// burst of clients waits there instead of retrying its SYN a second later.
pub(crate) const LISTEN_BACKLOG: u32 = 1024;

/// Listens on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, as `TcpListener::bind`).
///
/// # Errors
/// The address is taken, not ours, or of no family this host has.
pub(crate) fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// One connection's handle, in every request's extensions: cancelling `close` drops the
/// connection (an `/events` client that does not read); `activity` is its watchdog's.
#[derive(Clone)]
pub(crate) struct ConnHandle {
    pub(crate) close: CancellationToken,
    pub(crate) activity: Arc<Activity>,
}

/// The connection cap in force: `max_connections`, lowered so that HTTP never takes the
/// descriptors reserved for the election.
pub(crate) fn connection_cap(max_connections: u32) -> usize {
    let configured = max_connections.max(1) as usize;
    match crate::daemon::http::fds::soft_limit() {
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

/// Serves one connection until it ends, its handle is closed, its watchdog expires (a head
/// too slow, or idle too long), or [`SHUTDOWN_WAIT`] after `shutdown`.
async fn serve_connection(
    stream: TcpStream,
    app: Router,
    _slot: OwnedSemaphorePermit,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER_BYTES);
    let activity = Activity::new();
    let handle = ConnHandle {
        close: CancellationToken::new(),
        activity: activity.clone(),
    };
    let close = handle.close.clone();
    let watched = activity.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(handle.clone());
        let guard = watched.request_started();
        let response = app.clone().oneshot(req);
        async move {
            let response = response.await?;
            Ok::<_, std::convert::Infallible>(
                response.map(|body| axum::body::Body::new(Guarded { body, guard })),
            )
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .max_buf_size(MAX_HEADER_BYTES)
        // The watchdog times heads and idle connections; hyper's own header timer (30 s by
        // default) would close an idle keep-alive connection before IDLE_TIMEOUT.
        .header_read_timeout(None)
        .keep_alive(true);
    let io = TokioIo::new(Watched::new(stream, activity.clone()));
    let conn = builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = close.cancelled() => return,
        () = activity.expired() => return,
        () = shutdown.cancelled() => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(SHUTDOWN_WAIT, conn).await;
}

/// A response body that ends its request (for the watchdog) when it is done or dropped.
struct Guarded {
    body: axum::body::Body,
    guard: RequestGuard,
}

impl axum::body::HttpBody for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                self.guard.activity().took_body(data.len());
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
