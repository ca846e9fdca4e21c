//! Listens on a lease's release channel and turns every message within bounds into a `watch`
//! change, so candidates read the lease the moment a leader lets go instead of at their next
//! poll (many messages are one change); drops and counts the rest; PINGs the subscription so
//! that a follower knows when it can rely on it.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;

use super::announcement::{Dropped, Heard};
use super::Announcement;
use crate::connector::Connector;

/// How the subscription is kept and checked.
pub(crate) struct Listen {
    /// The release channel and this replica's own one (a reserved release for it).
    pub channels: Vec<String>,
    pub connect_timeout: Duration,
    /// A PING on the subscriber connection this often...
    pub ping_every: Duration,
    /// ...answered within this, or the subscription is dropped and made again.
    pub ping_timeout: Duration,
    /// Counts the messages dropped unread (too large, or a field out of bounds).
    pub dropped: Dropped,
}

/// Keeps a subscription to `channel` until `tx` has no receivers, resubscribing after any
/// loss of the connection or an unanswered PING, on connections from `connector`: the
/// server, the current Sentinel master (looked up again at every resubscription, so a
/// failover is followed), or a cluster node. Each message, each loss and each fresh
/// subscription (a release may have been missed while it was down) is sent on `tx`: the
/// parsed announcement, or `None`; a message too large or out of bounds is only counted.
/// `tx` is a watch: a flood of messages is one change to whoever reads it. `confirmed` is true only while the subscription is
/// acknowledged and its last PING was answered in time.
pub(crate) async fn listen_with(
    connector: Connector,
    how: Listen,
    tx: watch::Sender<Option<Announcement>>,
    confirmed: watch::Sender<bool>,
) {
    let mut pause = Duration::from_millis(50);
    while !tx.is_closed() {
        let epoch = connector.epoch();
        let subscribed = subscribe(&connector, &how.channels, how.connect_timeout);
        match tokio::time::timeout(how.connect_timeout, subscribed).await {
            Ok(Ok(pubsub)) => {
                pause = Duration::from_millis(50);
                // The wake-up first: whoever waited for the confirmation has it behind them.
                tx.send_replace(None);
                confirmed.send_replace(true);
                let why = listen(pubsub, &how, &tx, || connector.epoch() != epoch).await;
                confirmed.send_replace(false);
                if why == End::Closed {
                    return;
                }
                tracing::debug!(
                    event = "release_watch_lost",
                    reason = why.as_str(),
                    "release subscription lost ({}): polling until it is back",
                    why.as_str()
                );
                tx.send_replace(None);
            }
            _ => {
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = tx.closed() => return,
                }
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Nobody listens any more.
    Closed,
    /// The connection ended.
    Disconnected,
    /// A PING went unanswered (or failed).
    Unanswered,
    /// The master moved (Sentinel).
    Moved,
}

impl End {
    fn as_str(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::Disconnected => "disconnected",
            End::Unanswered => "ping unanswered",
            End::Moved => "master moved",
        }
    }
}

/// Forwards the messages of one subscription until it ends, PINGing it every `ping_every`.
async fn listen(
    pubsub: redis::aio::PubSub,
    how: &Listen,
    tx: &watch::Sender<Option<Announcement>>,
    moved: impl Fn() -> bool,
) -> End {
    let (mut sink, mut messages) = pubsub.split();
    let mut next_ping = tokio::time::Instant::now() + how.ping_every;
    let mut next_epoch_check = tokio::time::Instant::now() + Duration::from_millis(500);
    loop {
        tokio::select! {
            msg = messages.next() => match msg {
                Some(msg) => match Heard::of(msg.get_payload_bytes()) {
                    Heard::Message(a) => { tx.send_replace(Some(a)); }
                    Heard::Other => { tx.send_replace(None); }
                    Heard::Dropped => how.dropped.count(),
                },
                None => return End::Disconnected,
            },
            _ = tx.closed() => return End::Closed,
            _ = tokio::time::sleep_until(next_ping) => {
                let ping = sink.ping::<redis::Value>();
                match tokio::time::timeout(how.ping_timeout, ping).await {
                    // Any answer, even a refusal (an ACL without +ping), shows the
                    // connection alive.
                    Ok(Ok(_)) => next_ping = tokio::time::Instant::now() + how.ping_every,
                    Ok(Err(e)) if e.code().is_some() => {
                        next_ping = tokio::time::Instant::now() + how.ping_every;
                    }
                    _ => return End::Unanswered,
                }
            }
            _ = tokio::time::sleep_until(next_epoch_check) => {
                if moved() {
                    return End::Moved;
                }
                next_epoch_check = tokio::time::Instant::now() + Duration::from_millis(500);
            }
        }
    }
}

async fn subscribe(
    connector: &Connector,
    channels: &[String],
    limit: Duration,
) -> redis::RedisResult<redis::aio::PubSub> {
    let key = channels.first().map_or("", String::as_str);
    let mut pubsub = connector.pubsub(key, limit).await?;
    pubsub.subscribe(channels).await?;
    Ok(pubsub)
}
