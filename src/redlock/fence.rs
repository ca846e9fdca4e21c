//! Fences that keep increasing across majorities: the highest fence of the granting nodes
//! written back to each of them (`lua/fence_raise.lua`).

use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::{Node, RedlockClient};
use crate::conn::{FailureKind, RedisFailure};
use crate::connector::invoke;
use crate::lease::LeaseError;

impl RedlockClient {
    /// Writes the highest fence of the granting nodes back to them; the fence when a
    /// majority confirmed it within the validity.
    pub(super) async fn confirm_fence(
        &self,
        token: &str,
        granted: &[(usize, u64)],
        t: Duration,
        valid_until: Instant,
    ) -> Result<u64, LeaseError> {
        let fence = granted.iter().map(|&(_, f)| f).max().unwrap_or(0);
        let answers = join_all(
            granted
                .iter()
                .map(|&(i, _)| self.raise_fence(&self.nodes[i], token, fence, t)),
        )
        .await;
        let confirmed = answers.iter().filter(|a| matches!(a, Ok(true))).count();
        if Instant::now() >= valid_until {
            return Err(LeaseError::Unavailable(RedisFailure {
                kind: FailureKind::Timeout,
                cause: "redlock acquire: confirming the fence outlasted the lease validity".into(),
                code: None,
                source: None,
            }));
        }
        if confirmed >= self.quorum() {
            return Ok(fence);
        }
        let errors: Vec<(usize, LeaseError)> = granted
            .iter()
            .zip(answers)
            .filter_map(|(&(i, _), a)| match a {
                Err(err) => Some((i, err)),
                Ok(false) => Some((i, LeaseError::Lost)),
                Ok(true) => None,
            })
            .collect();
        Err(self.unavailable("acquire (confirming the fence)", confirmed, &errors))
    }

    pub(super) async fn raise_fence(
        &self,
        node: &Node,
        token: &str,
        fence: u64,
        t: Duration,
    ) -> Result<bool, LeaseError> {
        let mut call = self.fence_raise.prepare_invoke();
        call.key(&self.keys.lock)
            .key(&self.keys.fence)
            .arg(token)
            .arg(fence);
        let raised: Result<i64, _> = node
            .lease
            .endpoint()
            .call(Some(t), |mut c| async move { invoke(&mut c, &call).await })
            .await;
        match raised {
            Ok(raised) => Ok(raised == 1),
            Err(f) if f.code.as_deref() == Some("WRONGTYPE") => Err(LeaseError::WrongType {
                key: node.lease.foreign_key().await,
            }),
            Err(f) => Err(self.lift(f)),
        }
    }
}
