//! Naming the key of the election that holds another type, when Redis answers `WRONGTYPE`.

use std::time::Duration;

use super::LeaseKeys;
use crate::conn::Endpoint;

/// The key that holds a type the scripts do not write there: `TYPE` of each key once (the
/// lock is a hash, the fence a string). The lock key when none can be told (Redis gone).
pub(crate) async fn foreign_key(
    endpoint: &Endpoint,
    keys: &LeaseKeys,
    budget: Option<Duration>,
) -> String {
    let expected = [(&keys.lock, "hash"), (&keys.fence, "string")];
    let (lock, fence) = (keys.lock.clone(), keys.fence.clone());
    let types: Result<(String, String), _> = endpoint
        .call(budget, |mut c| async move {
            redis::pipe()
                .cmd("TYPE")
                .arg(&lock)
                .cmd("TYPE")
                .arg(&fence)
                .query_async(&mut c)
                .await
        })
        .await;
    let Ok((lock_type, fence_type)) = types else {
        return keys.lock.clone();
    };
    expected
        .into_iter()
        .zip([lock_type, fence_type])
        .find(|((_, want), got)| got != "none" && got != want)
        .map_or_else(|| keys.lock.clone(), |((key, _), _)| key.clone())
}
