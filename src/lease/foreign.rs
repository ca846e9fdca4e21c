//! Naming the key of the election that holds another type, when Redis answers `WRONGTYPE`.

use std::time::Duration;

use super::LeaseKeys;
use crate::conn::Endpoint;

/// The key that holds a type the scripts do not write there: `TYPE` of each of the election's
/// keys once (the lock and the registry's are hashes, the fence a string, the registry's index
/// a sorted set). The lock key when none can be told (Redis gone).
pub(crate) async fn foreign_key(
    endpoint: &Endpoint,
    keys: &LeaseKeys,
    budget: Option<Duration>,
) -> String {
    let found = foreign_among(endpoint, election_keys(keys), budget).await;
    found.unwrap_or_else(|| keys.lock.clone())
}

/// Each key the election's scripts touch, with the type they write there.
pub(crate) fn election_keys(keys: &LeaseKeys) -> Vec<(String, &'static str)> {
    vec![
        (keys.lock.clone(), "hash"),
        (keys.fence.clone(), "string"),
        (keys.candidates.clone(), "hash"),
        (keys.candidates_index.clone(), "zset"),
        (keys.candidates_state.clone(), "hash"),
    ]
}

/// The first of `expected` (key, type) that holds another type, by one `TYPE` of each in one
/// pipeline (the keys share a hash tag); none when every key is absent or as expected, or
/// when Redis does not answer.
pub(crate) async fn foreign_among(
    endpoint: &Endpoint,
    expected: Vec<(String, &'static str)>,
    budget: Option<Duration>,
) -> Option<String> {
    let mut pipe = redis::pipe();
    for (key, _) in &expected {
        pipe.cmd("TYPE").arg(key);
    }
    let types: Vec<String> = endpoint
        .call(
            budget,
            |mut c| async move { pipe.query_async(&mut c).await },
        )
        .await
        .ok()?;
    expected
        .into_iter()
        .zip(types)
        .find(|((_, want), got)| got != "none" && got != want)
        .map(|((key, _), _)| key)
}
