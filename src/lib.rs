//! leaderd: leader election over a Redis lease.
