//! `/events`: one Server-Sent Events stream per client, fed by its own task through a small
//! queue. A client that does not read fills the queue and its connection is closed: the
//! election never waits for it, and leaderd keeps at most [`QUEUED_DOCUMENTS`] for it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::server::ConnHandle;
use super::HttpContext;
use crate::publish::next_update;
use crate::state::StatusDoc;

/// Documents (and keep-alive comments) leaderd holds for one stream; one more closes it.
pub(crate) const QUEUED_DOCUMENTS: usize = 4;
/// A comment line this often keeps proxies from closing a quiet stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What every stream shares: the slots (a cap on open streams) and the server's shutdown.
#[derive(Clone)]
pub(crate) struct Streams {
    pub(crate) slots: Arc<Semaphore>,
    pub(crate) shutdown: CancellationToken,
}

/// The cap on open event streams: half the connection cap (at least 1), so that streams
/// never take every connection from the probes and the scraper.
pub(crate) fn stream_cap(connection_cap: usize) -> usize {
    (connection_cap / 2).max(1)
}

/// The stream of a client, or 503 when every stream slot is taken.
pub(crate) async fn events(
    State(ctx): State<HttpContext>,
    Extension(conn): Extension<ConnHandle>,
    Extension(streams): Extension<Streams>,
) -> Response {
    let Ok(slot) = streams.slots.clone().try_acquire_owned() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "too many event streams\n").into_response();
    };
    conn.activity.carries_a_stream();
    let (tx, rx) = mpsc::channel(QUEUED_DOCUMENTS);
    tokio::spawn(feed(ctx, tx, conn.close, streams.shutdown));
    let stream = ReceiverStream::new(rx).map(move |event| {
        let _held = &slot; // the stream's slot, released when the response is dropped
        Ok::<_, Infallible>(event)
    });
    Sse::new(stream).into_response()
}

/// Queues the current document, then one per update and a keep-alive comment when quiet,
/// until the client goes, the server shuts down, or the queue is full (then the connection
/// is closed).
async fn feed(
    ctx: HttpContext,
    tx: mpsc::Sender<Event>,
    close: CancellationToken,
    shutdown: CancellationToken,
) {
    let mut rx = ctx.state.clone();
    let mut last = rx.borrow_and_update().clone();
    let mut next = Some(status_event(&ctx.document_of(&last)));
    loop {
        if let Some(event) = next.take() {
            match tx.try_send(event) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    tracing::debug!("an /events client does not read: closing its connection");
                    close.cancel();
                    return;
                }
                Err(TrySendError::Closed(_)) => return,
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
