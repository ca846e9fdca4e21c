//! `/events`: one Server-Sent Events stream per client, fed by its own task through a small
//! queue. A client that does not read leaves its documents unsent and its connection is
//! closed: the election never waits for it, and leaderd holds a few documents for it at most.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::server::ConnHandle;
use super::HttpContext;
use crate::daemon::publish::next_update;
use crate::daemon::state::StatusDoc;

/// Documents (and keep-alive comments) queued for one stream, not yet taken by the
/// connection; one more closes it.
pub(crate) const QUEUED_DOCUMENTS: usize = 4;
/// Bytes of the stream taken by the connection since its write buffer was last empty
/// (hyper's, up to 16 KiB otherwise): past this, at the next document, the stream is closed.
/// About seven documents of a leader (some 420 bytes each).
const HELD_BYTES: u64 = 3 * 1024;
/// A comment line this often keeps proxies from closing a quiet stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What every stream shares: the server's shutdown.
#[derive(Clone)]
pub(crate) struct Streams {
    pub(crate) shutdown: CancellationToken,
}

/// The stream of a client (counted against `max_connections` like any connection).
pub(crate) async fn events(
    State(ctx): State<HttpContext>,
    Extension(conn): Extension<ConnHandle>,
    Extension(streams): Extension<Streams>,
) -> Response {
    conn.activity.carries_a_stream();
    let (tx, rx) = mpsc::channel(QUEUED_DOCUMENTS);
    tokio::spawn(feed(ctx, tx, conn, streams.shutdown));
    Sse::new(ReceiverStream::new(rx).map(Ok::<_, Infallible>)).into_response()
}

/// Queues the current document, then one per update and a keep-alive comment when quiet,
/// until the client goes, the server shuts down, or the queue is full (then the connection
/// is closed).
async fn feed(
    ctx: HttpContext,
    tx: mpsc::Sender<Event>,
    conn: ConnHandle,
    shutdown: CancellationToken,
) {
    let close = conn.close;
    let mut rx = ctx.state.clone();
    let mut last = rx.borrow_and_update().clone();
    let mut next = Some(status_event(&ctx.document_of(&last)));
    loop {
        if let Some(event) = next.take() {
            let full = conn.activity.unsent_bytes() > HELD_BYTES
                || matches!(tx.try_send(event), Err(TrySendError::Full(_)));
            if full {
                tracing::debug!("an /events client does not read: closing its connection");
                close.cancel();
                return;
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = close.cancelled() => return,
            () = tx.closed() => return,
            update = next_update(&mut rx, &last) => {
                let Some(snapshot) = update else { return };
                next = Some(status_event(&ctx.document_of(&snapshot)));
                last = snapshot;
            }
            () = tokio::time::sleep(KEEP_ALIVE) => next = Some(Event::default().comment("")),
        }
    }
}

fn status_event(doc: &StatusDoc) -> Event {
    let json = serde_json::to_string(doc).expect("the status document serializes");
    Event::default().event("status").data(json)
}
