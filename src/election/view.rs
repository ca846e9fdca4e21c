//! The term as the elector hands it to the work and the outputs: its fence and validity.

use std::time::SystemTime;

use tokio::time::Instant;

use crate::lease::Term;

/// This replica's current term, as published.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TermView {
    /// The fencing token of the term.
    pub fence: u64,
    /// When the reply that granted the term arrived.
    pub acquired_at: SystemTime,
    /// Before this monotonic instant no one else can hold the lease.
    pub valid_until: Instant,
    /// The same instant on the wall clock, for publishing.
    pub valid_until_wall: SystemTime,
}

impl From<&Term> for TermView {
    fn from(term: &Term) -> Self {
        TermView {
            fence: term.fence,
            acquired_at: term.acquired_at,
            valid_until: term.valid_until,
            valid_until_wall: term.valid_until_wall,
        }
    }
}
