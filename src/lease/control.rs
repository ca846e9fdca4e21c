//! Handover requests (docs/protocol.md#handover): the request key `<prefix>{<name>}:handover`
//! and the control channel `<prefix>{<name>}:control` (`lua/handover.lua`), and the
//! subscription that tells a leader of a request at once.

use std::time::Duration;

use futures::{StreamExt, TryFutureExt};
use tokio::sync::{mpsc, watch};

use super::announcement::{bounded_name, json_object, Dropped, Heard};
use super::{LeaseClient, LeaseError};
use crate::connector::invoke;
use crate::lease::acl::LeaseScript;

/// One request to hand the leadership over.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandoverRequest {
    /// Unique per request: answers name it.
    pub id: String,
    /// The candidate to hand over to.
    pub to: String,
    /// Who asked (for the logs).
    pub by: String,
    /// The fence of the term asked to hand over (0: whichever leads). Any other term's
    /// leader drops the request: it was for a term that has ended.
    pub fence: u64,
}

impl HandoverRequest {
    /// A request, `id` unique to it, to hand the term of `fence` (0: whichever leads) over to
    /// `to`, asked by `by`.
    pub fn new(id: &str, to: &str, by: &str, fence: u64) -> Self {
        HandoverRequest {
            id: id.to_owned(),
            to: to.to_owned(),
            by: by.to_owned(),
            fence,
        }
    }
}

/// A message on the control channel.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlMessage {
    /// `{"event":"handover","id","to","by"}`: someone asks the leader to hand over.
    Request(HandoverRequest),
    /// `{"event":"refused","id","to","by","reason"}`: the leader refused the request.
    Refused {
        /// The refused request.
        request: HandoverRequest,
        /// Why, in one line.
        reason: String,
    },
}

impl ControlMessage {
    /// Parses one message; `None` for anything else, and for a message over 1 KiB or with
    /// a field out of bounds (a name over 256 bytes, a fence that is not an integer).
    pub fn parse(payload: &[u8]) -> Option<Self> {
        match Self::heard(payload) {
            Heard::Message(m) => Some(m),
            Heard::Other | Heard::Dropped => None,
        }
    }

    /// Checks and parses one message of the control channel.
    pub(crate) fn heard(payload: &[u8]) -> Heard<Self> {
        let v = match json_object(payload) {
            Ok(v) => v,
            Err(heard) => return heard,
        };
        let event = match v.get("event").and_then(|e| e.as_str()) {
            Some(e @ ("handover" | "refused")) => e,
            _ => return Heard::Other,
        };
        let text = |k: &str| match v.get(k) {
            None | Some(serde_json::Value::Null) => Some(String::new()),
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(_) => None,
        };
        let name = |k: &str| bounded_name(v.get(k)).map(Option::unwrap_or_default);
        let fence = match v.get("fence") {
            None => Some(0),
            Some(f) => f.as_u64(),
        };
        let (Some(id), Some(to), Some(by), Some(fence), Some(reason)) =
            (text("id"), name("to"), name("by"), fence, text("reason"))
        else {
            return Heard::Dropped;
        };
        if id.is_empty() {
            return Heard::Dropped;
        }
        let request = HandoverRequest { id, to, by, fence };
        Heard::Message(match event {
            "handover" => ControlMessage::Request(request),
            _ => ControlMessage::Refused { request, reason },
        })
    }
}

/// What [`super::Lease::control`] does with the request key.
#[derive(Debug, Clone, Copy)]
pub enum Control<'a> {
    /// Write a request (unless one is pending) with this TTL, and publish it.
    Request(&'a HandoverRequest, Duration),
    /// Read the pending request, if any.
    Read,
    /// Answer a request (the leader): delete it, and publish the refusal when there is a
    /// reason (`None`: accepted).
    Answer(&'a HandoverRequest, Option<&'a str>),
}

/// The control channel's messages, kept up in the background. A `None` from
/// [`Self::changed`] means "read the request key": the subscription was (re)established, or a
/// renew saw a pending request, so a message may have been missed.
pub struct ControlWatch {
    rxs: Vec<mpsc::Receiver<Option<ControlMessage>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ControlWatch {
    /// A watch that never changes (a lease without a control channel).
    pub fn never() -> Self {
        ControlWatch {
            rxs: Vec::new(),
            tasks: Vec::new(),
        }
    }

    /// One watch over several (Redlock: one per node).
    pub(crate) fn merge(watches: Vec<ControlWatch>) -> Self {
        let mut out = ControlWatch::never();
        for mut w in watches {
            out.rxs.append(&mut w.rxs);
            out.tasks.append(&mut w.tasks);
        }
        out
    }

    /// The next message (`None`: read the request key). Never resolves without listeners.
    pub async fn changed(&mut self) -> Option<ControlMessage> {
        loop {
            if self.rxs.is_empty() {
                std::future::pending::<()>().await;
            }
            let any = futures::future::select_all(self.rxs.iter_mut().map(|r| Box::pin(r.recv())));
            let closed = match any.await {
                (Some(msg), _, _) => return msg,
                (None, i, _) => i,
            };
            self.rxs.remove(closed);
        }
    }
}

impl Drop for ControlWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl LeaseClient {
    /// Subscribes to the control channel (see [`super::Lease::watch_control`]).
    pub(crate) fn subscribe_control(&self) -> ControlWatch {
        let (tx, rx) = mpsc::channel(16);
        let task = tokio::spawn(listen(
            self.endpoint.connector().clone(),
            self.keys.control.clone(),
            self.endpoint.connect_timeout(),
            self.control_poke.subscribe(),
            tx,
            self.dropped.clone(),
        ));
        ControlWatch {
            rxs: vec![rx],
            tasks: vec![task],
        }
    }

    /// Tells the control watch to read the request key (a renew saw one pending).
    pub(crate) fn poke_control(&self) {
        self.control_poke.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// One operation on the request key of this Redis (see [`super::Lease::control`]).
    pub(crate) async fn control_here(
        &self,
        op: Control<'_>,
        budget: Duration,
    ) -> Result<Option<HandoverRequest>, LeaseError> {
        let mut call = self.scripts.handover.prepare_invoke();
        call.key(&self.keys.handover).key(&self.keys.control);
        match op {
            Control::Request(r, ttl) => {
                call.arg("request").arg(&r.id).arg(&r.to).arg(&r.by);
                call.arg(ttl.as_millis().max(1) as u64).arg(r.fence)
            }
            Control::Read => call.arg("read"),
            Control::Answer(r, reason) => call.arg("answer").arg(&r.id).arg(reason.unwrap_or("")),
        };
        let reply: Vec<redis::Value> = self
            .endpoint
            .call(
                Some(budget),
                |mut c| async move { invoke(&mut c, &call).await },
            )
            .or_else(|f| self.fail(f, LeaseScript::Handover))
            .await?;
        let text =
            |i: usize| -> Option<String> { redis::from_redis_value(reply.get(i)?.clone()).ok() };
        let found = match (text(1), text(2), text(3)) {
            (Some(id), Some(to), Some(by)) => Some(HandoverRequest {
                id,
                to,
                by,
                fence: text(4).and_then(|f| f.parse().ok()).unwrap_or(0),
            }),
            _ => None,
        };
        Ok(match op {
            Control::Answer(..) => None,
            _ => found,
        })
    }
}

/// Keeps a subscription to `channel` until `tx` is dropped, resubscribing after any loss
/// of the connection; forwards every message, and a `None` at every (re)subscription and
/// every poke.
async fn listen(
    connector: crate::connector::Connector,
    channel: String,
    limit: Duration,
    mut poke: watch::Receiver<u64>,
    tx: mpsc::Sender<Option<ControlMessage>>,
    dropped: Dropped,
) {
    let mut pause = Duration::from_millis(50);
    loop {
        let epoch = connector.epoch();
        let subscribed = async {
            let mut pubsub = connector.pubsub(&channel, limit).await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let Ok(Ok(pubsub)) = tokio::time::timeout(limit, subscribed).await else {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = poke.changed() => { let _ = tx.try_send(None); }
                _ = tx.closed() => return,
            }
            pause = (pause * 2).min(Duration::from_secs(1));
            continue;
        };
        pause = Duration::from_millis(50);
        let _ = tx.try_send(None);
        let mut messages = pubsub.into_on_message();
        loop {
            tokio::select! {
                msg = messages.next() => match msg {
                    Some(msg) => {
                        match ControlMessage::heard(msg.get_payload_bytes()) {
                            Heard::Message(m) => { let _ = tx.try_send(Some(m)); }
                            Heard::Other => {}
                            Heard::Dropped => dropped.count(),
                        }
                    }
                    None => break,
                },
                _ = poke.changed() => { let _ = tx.try_send(None); }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_requests_and_refusals() {
        let r = br#"{"event":"handover","id":"1","to":"b","by":"ops","fence":1764600000000017}"#;
        let req = HandoverRequest {
            id: "1".into(),
            to: "b".into(),
            by: "ops".into(),
            fence: 1764600000000017,
        };
        assert_eq!(
            ControlMessage::parse(r),
            Some(ControlMessage::Request(req.clone()))
        );
        let f = br#"{"event":"refused","id":"1","to":"b","by":"ops","fence":1764600000000017,"reason":"b is not healthy"}"#;
        assert_eq!(
            ControlMessage::parse(f),
            Some(ControlMessage::Refused {
                request: req,
                reason: "b is not healthy".into()
            })
        );
        assert_eq!(ControlMessage::parse(b"x"), None);
    }
}
