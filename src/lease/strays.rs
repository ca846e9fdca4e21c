//! Grants this replica may hold without knowing it, kept by token: an acquire whose reply
//! never came (a Redis that was frozen runs it when it resumes, granting a term nobody
//! claims) and a term whose release failed (a renew still queued may have extended it).
//! Released (compare-and-delete, announced) when the replica sees its own identity hold the
//! lease while it leads nothing, so the election does not wait a whole lease for them.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Tokens kept at most; the oldest go first.
const MAX_STRAYS: usize = 16;

/// The tokens, each with the instant after which it is forgotten.
#[derive(Default)]
pub(crate) struct Strays {
    tokens: Mutex<VecDeque<(String, Instant)>>,
}

impl Strays {
    /// Keeps `token` for `keep` (a few lease durations: a grant runs out by itself after one,
    /// counted from when a Redis that was frozen got to it).
    pub(crate) fn remember(&self, token: &str, keep: Duration) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if tokens.iter().any(|(t, _)| t == token) {
            return;
        }
        if tokens.len() == MAX_STRAYS {
            tokens.pop_front();
        }
        tokens.push_back((token.to_owned(), Instant::now() + keep));
    }

    /// The tokens still kept.
    pub(crate) fn current(&self) -> Vec<String> {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        tokens.retain(|(_, until)| *until > now);
        tokens.iter().map(|(t, _)| t.clone()).collect()
    }

    /// Drops `token` (its grant was released).
    pub(crate) fn forget(&self, token: &str) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.retain(|(t, _)| t != token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokens_are_kept_bounded_and_forgotten() {
        let strays = Strays::default();
        strays.remember("a", Duration::from_secs(10));
        strays.remember("a", Duration::from_secs(10));
        strays.remember("b", Duration::from_secs(1));
        assert_eq!(strays.current(), ["a", "b"]);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(strays.current(), ["a"]);
        strays.forget("a");
        assert!(strays.current().is_empty());
        for i in 0..MAX_STRAYS + 3 {
            strays.remember(&i.to_string(), Duration::from_secs(10));
        }
        let kept = strays.current();
        assert_eq!(kept.len(), MAX_STRAYS);
        assert_eq!(kept[0], "3");
    }
}
