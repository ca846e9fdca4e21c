//! The time limits of one HTTP connection: a request head must arrive within
//! [`HEAD_TIMEOUT`] of its first byte (of the accept, for the first request), and a keep-alive
//! connection with no request in progress is closed after [`IDLE_TIMEOUT`] without traffic.
//!
//! hyper's own header timer starts as soon as it waits for the next request, so it would
//! close an idle keep-alive connection after the head timeout; this one tells the two apart.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// A request whose head has not arrived within this of its first byte is closed (slowloris).
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// A keep-alive connection without a request in progress is closed after this without traffic.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The send buffer of a connection that carries an event stream (Linux doubles it for its
/// bookkeeping, and allows no less than about 4.5 KiB): about ten documents.
pub(crate) const STREAM_SEND_BUFFER: usize = 2048;

const NONE: u64 = u64::MAX;

/// What one connection is doing, shared by its stream, its service and its watchdog. Times are
/// milliseconds since `born` (monotonic).
pub(crate) struct Activity {
    born: Instant,
    /// When the head being read began ([`NONE`]: no head being read).
    head_started: AtomicU64,
    last_traffic: AtomicU64,
    /// Requests handed to the service whose response body is not done yet.
    in_flight: AtomicUsize,
    /// Set by an event stream: its connection's send buffer is to shrink at the next write.
    streaming: std::sync::atomic::AtomicBool,
    /// Bytes of response bodies taken by the connection (hyper), and how many of them it had
    /// taken when its write buffer was last empty (it flushes the stream only then): what
    /// came after may still be held by leaderd.
    body_bytes: AtomicU64,
    drained_bytes: AtomicU64,
    changed: Notify,
}

impl Activity {
    /// A fresh connection: its first head is awaited from now.
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            born: Instant::now(),
            head_started: AtomicU64::new(0),
            last_traffic: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            streaming: std::sync::atomic::AtomicBool::new(false),
            body_bytes: AtomicU64::new(0),
            drained_bytes: AtomicU64::new(0),
            changed: Notify::new(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    fn read_bytes(&self) {
        let now = self.now_ms();
        self.last_traffic.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) == 0
            && self
                .head_started
                .compare_exchange(NONE, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.changed.notify_one();
        }
    }

    /// The connection carries an event stream from now on: its send buffer shrinks to
    /// [`STREAM_SEND_BUFFER`], so that a client that does not read fills the stream's queue
    /// after a few documents.
    pub(crate) fn carries_a_stream(&self) {
        self.streaming.store(true, Ordering::Release);
    }

    /// Bytes of body that the connection took from a response (to send).
    pub(crate) fn took_body(&self, bytes: usize) {
        self.body_bytes.fetch_add(bytes as u64, Ordering::AcqRel);
    }

    /// Bytes of body taken since the connection's write buffer was last empty: at most
    /// what leaderd holds for the client.
    pub(crate) fn unsent_bytes(&self) -> u64 {
        let drained = self.drained_bytes.load(Ordering::Acquire);
        self.body_bytes
            .load(Ordering::Acquire)
            .saturating_sub(drained)
    }

    /// A head arrived and its request goes to the service; the guard ends it.
    pub(crate) fn request_started(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_started.store(NONE, Ordering::Release);
        RequestGuard(self.clone())
    }

    /// When the connection must be closed if nothing changes before; `None`: not while a
    /// request is in progress.
    fn deadline(&self) -> Option<Instant> {
        let at = |ms: u64, limit: Duration| self.born + Duration::from_millis(ms) + limit;
        match self.head_started.load(Ordering::Acquire) {
            NONE if self.in_flight.load(Ordering::Acquire) > 0 => None,
            NONE => Some(at(self.last_traffic.load(Ordering::Relaxed), IDLE_TIMEOUT)),
            started => Some(at(started, HEAD_TIMEOUT)),
        }
    }

    /// Resolves when the connection is over its head or idle limit.
    pub(crate) async fn expired(&self) {
        loop {
            let changed = self.changed.notified();
            match self.deadline() {
                Some(at) if Instant::now() >= at => return,
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// Held by a request until its response body is done (dropped).
pub(crate) struct RequestGuard(Arc<Activity>);

impl RequestGuard {
    /// The connection's activity.
    pub(crate) fn activity(&self) -> &Activity {
        &self.0
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let a = &self.0;
        a.last_traffic.store(a.now_ms(), Ordering::Relaxed);
        if a.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            a.changed.notify_one();
        }
    }
}

/// A stream that reports its traffic to an [`Activity`].
pub(crate) struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, activity: Arc<Activity>) -> Watched<S> {
        Watched { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read_bytes();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin + std::os::fd::AsFd> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.activity.streaming.swap(false, Ordering::AcqRel) {
            let _ = socket2::SockRef::from(&self.inner).set_send_buffer_size(STREAM_SEND_BUFFER);
        }
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                let a = &self.activity;
                a.last_traffic.store(a.now_ms(), Ordering::Relaxed);
            }
        }
        polled
    }

    /// hyper flushes the stream once its write buffer is empty: every body byte it took so
    /// far is with the socket.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let a = &self.activity;
        let taken = a.body_bytes.load(Ordering::Acquire);
        a.drained_bytes.store(taken, Ordering::Release);
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_head_has_five_seconds_and_an_idle_connection_sixty() {
        let a = Activity::new();
        // The first head is awaited from the accept.
        assert_eq!(a.deadline(), Some(a.born + HEAD_TIMEOUT));
        let guard = a.request_started();
        assert_eq!(a.deadline(), None, "no limit while a request is served");
        tokio::time::advance(Duration::from_secs(30)).await;
        drop(guard);
        let idle_until = a.deadline().unwrap();
        assert!(idle_until >= Instant::now() + IDLE_TIMEOUT - Duration::from_millis(1));
        // The first byte of the next head starts its 5 s.
        a.read_bytes();
        let head_until = a.deadline().unwrap();
        assert!(head_until <= Instant::now() + HEAD_TIMEOUT);
        let t0 = Instant::now();
        a.expired().await;
        assert!(t0.elapsed() >= HEAD_TIMEOUT - Duration::from_millis(1));
    }
}
