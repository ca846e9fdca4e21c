//! Listens on a lease's release channel and turns every release into a `watch` change, so
//! candidates contend the moment a leader lets go instead of at their next poll.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;

use crate::connector::Connector;
use crate::lease::Announcement;

/// Keeps a subscription to `channel` until `tx` has no receivers, resubscribing after any
/// loss of the connection, on connections from `connector`: the server, the current Sentinel
/// master (looked up again at every resubscription, so a failover is followed), or a cluster
/// node. Each release, and each fresh subscription (a release may have been missed while it
/// was down), is sent on `tx`: the parsed announcement, or `None`.
pub(crate) async fn listen_with(
    connector: Connector,
    channel: String,
    connect_timeout: Duration,
    tx: watch::Sender<Option<Announcement>>,
) {
    let mut pause = Duration::from_millis(50);
    while !tx.is_closed() {
        let epoch = connector.epoch();
        let subscribed = subscribe(&connector, &channel, connect_timeout);
        match tokio::time::timeout(connect_timeout, subscribed).await {
            Ok(Ok(pubsub)) => {
                pause = Duration::from_millis(50);
                tx.send_replace(None);
                let mut messages = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        msg = messages.next() => match msg {
                            Some(msg) => {
                                tx.send_replace(Announcement::parse(msg.get_payload_bytes()));
                            }
                            None => break,
                        },
                        _ = tx.closed() => return,
                        // The master moved (Sentinel): subscribe on the new one.
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {
                            if connector.epoch() != epoch {
                                break;
                            }
                        }
                    }
                }
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

async fn subscribe(
    connector: &Connector,
    channel: &str,
    limit: Duration,
) -> redis::RedisResult<redis::aio::PubSub> {
    let mut pubsub = connector.pubsub(limit).await?;
    pubsub.subscribe(channel).await?;
    Ok(pubsub)
}
