//! Taking back an acquire on a node that did not answer it. A frozen node executes the
//! request when it resumes, so the undo (compare-and-delete with the attempt's token,
//! harmless to repeat) is retried until the node has answered a few in a row, bounded.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use tokio::time::Instant;

use crate::conn::{Endpoint, RedisFailure};
use crate::connector::invoke;

/// Undos the node must answer after it answers again: its stale request, read in the same
/// wake-up as the new connection, may run just after the first answer.
const ANSWERS_AFTER_RESUME: u32 = 3;

/// One undo: 1 when it deleted the attempt's grant.
pub(super) async fn undo_once(
    endpoint: &Endpoint,
    undo: &Script,
    lock: &str,
    token: &str,
    t: Duration,
) -> Result<i64, RedisFailure> {
    let mut call = undo.prepare_invoke();
    call.key(lock).arg(token);
    endpoint
        .call(Some(t), |mut c| async move { invoke(&mut c, &call).await })
        .await
}

/// Retries the undo every node timeout until it deleted the grant, or the node answered
/// [`ANSWERS_AFTER_RESUME`] undos with nothing to delete, for at most a few leases (a node
/// frozen longer than that expires the grant itself before it could matter for long).
pub(super) fn retry_in_background(
    endpoint: Arc<Endpoint>,
    undo: Script,
    lock: String,
    token: String,
    t: Duration,
    lease: Duration,
) {
    tokio::spawn(async move {
        let give_up = Instant::now() + lease * 4;
        let mut answered = 0;
        while Instant::now() < give_up && answered < ANSWERS_AFTER_RESUME {
            match undo_once(&endpoint, &undo, &lock, &token, t).await {
                Ok(1) => return,
                Ok(_) => answered += 1,
                Err(_) => answered = 0,
            }
            tokio::time::sleep(t.max(Duration::from_millis(10))).await;
        }
    });
}
