//! A client stream that counts the bytes it reads (in) and writes (out) as they pass, and
//! tells the connection's [`Activity`] when bytes pass and when either side finished sending.

use std::pin::Pin;
use std::task::{Context, Poll};

use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::idle::Activity;

pub(crate) struct Counted<'a, S> {
    inner: S,
    bytes_in: IntCounter,
    bytes_out: IntCounter,
    activity: &'a Activity,
}

impl<'a, S> Counted<'a, S> {
    pub(crate) fn new(
        inner: S,
        (bytes_in, bytes_out): (IntCounter, IntCounter),
        activity: &'a Activity,
    ) -> Self {
        Counted {
            inner,
            bytes_in,
            bytes_out,
            activity,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.bytes_in.inc_by(read as u64);
            self.activity.moved();
        } else if matches!(polled, Poll::Ready(Ok(()))) && buf.remaining() > 0 {
            self.activity.half_closed(); // the client's end of file
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.bytes_out.inc_by(n as u64);
            self.activity.moved();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.activity.half_closed(); // the upstream's end of file, passed on
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
