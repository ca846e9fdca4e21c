//! leaderd: leader election over a Redis lease, as a sidecar daemon and as a library.
//!
//! The library, at the root:
//! - [`Lease`]: the one lease interface (acquire, renew, release, observe, the blocking wait),
//!   with fencing tokens. [`LeaseClient`] implements it on one Redis (a server, the Sentinel
//!   master or a cluster), [`RedlockClient`] on a majority of independent masters, and
//!   [`Backend`] is whichever a [`RedisSpec`] names (a mistake in it: [`ConnectError`]).
//!   A lease is named by a [`LeaseSpec`] (its Redis keys: [`LeaseKeys`]); an acquire
//!   ([`Acquire`]) wins a [`Term`] or sees what holds it ([`Observed`], [`Holder`]); a failed
//!   call is a [`LeaseError`].
//! - [`Locker`]: a reentrant lock over any lease, whose [`LeaseGuard`] is renewed in the
//!   background ([`WatchdogConfig`]) and reports its loss ([`LossReason`]); fenced by
//!   default, or plain ([`Locker::plain`], [`PlainLease`]: no fence, fewer commands).
//! - [`election`]: the elector over any lease, reporting every transition to the caller's
//!   [`election::ElectionEvents`].
//! - [`shard`]: a sharded election: N shards, each a fenced lease, spread over the live
//!   replicas by a fixed assignment ([`shard::Assignment`]) and owned through a
//!   [`shard::ShardElector`] (a `watch` of the owned shards with their fences and validities),
//!   over a [`LeaseClient`] or a [`RedlockClient`] (a majority per shard).
//! - [`connection`]: the parts of a [`RedisSpec`] and what a failed call reports;
//!   [`handover`]: the candidates' registry, handover requests and release announcements.
//!
//! The daemon (cargo feature `daemon`, on by default) is what `leaderd run` and the other
//! commands add above the library; it is not part of the library's API, and the library
//! never imports from it. Modules map: `lease` (with its release watch), `lock`, `redlock`,
//! `election`, `shard`, `backend`, `conn` (one Redis endpoint with timeouts), `failure` (its error
//! kinds), `connector` (where connections come from), `eviction`, `server_info`; `daemon`.
//!
//! # A lock
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use leaderd::{LeaseClient, LeaseSpec, Locker};
//!
//! let spec = LeaseSpec::new("nightly-report", "worker-1", Duration::from_secs(10));
//! let locker = Locker::new(LeaseClient::connect("redis://127.0.0.1:6379/0", spec)?);
//! let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
//! let mut guard = locker.lock(deadline).await?;
//! tokio::select! {
//!     _ = guard.lost() => eprintln!("lease lost: stop writing"),
//!     _ = tokio::time::sleep(Duration::from_secs(5)) => {} // the work, fenced by guard.fence()
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # An elector
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::{sync::Arc, time::Duration};
//! use leaderd::election::{self, ElectionEvents, Inputs, NoWork, Policy, Timing};
//! use leaderd::{LeaseClient, LeaseSpec, Term};
//!
//! struct Log;
//! impl ElectionEvents for Log {
//!     fn acquired(&self, term: &Term) { println!("leading with fence {}", term.fence) }
//! }
//!
//! let lease = Duration::from_secs(15);
//! let spec = LeaseSpec::new("orders-scheduler", "pod-a", lease);
//! let client = Arc::new(LeaseClient::connect("redis://127.0.0.1:6379/0", spec)?);
//! let policy = Policy::new(Timing::new(lease));
//! let shutdown = tokio_util::sync::CancellationToken::new(); // cancel it to step down
//! let code = election::run(client, policy, NoWork, Inputs::new(shutdown), Log).await;
//! # let _ = code; Ok(()) }
//! ```
//!
//! # A sharded elector
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use leaderd::election::Timing;
//! use leaderd::shard::{ShardElector, ShardPolicy};
//! use leaderd::{LeaseClient, LeaseSpec};
//!
//! let lease = Duration::from_secs(15);
//! let spec = LeaseSpec::new("tenant-scheduler", "pod-a", lease);
//! let client = LeaseClient::connect("redis://127.0.0.1:6379/0", spec)?;
//! let elector = ShardElector::new(client, ShardPolicy::new(64, Timing::new(lease)));
//! let mut owned = elector.watch(); // the shards owned now, each with its fence and validity
//! let shutdown = tokio_util::sync::CancellationToken::new(); // cancel it to hand them over
//! tokio::spawn(elector.run(shutdown.clone()));
//! while owned.changed().await.is_ok() {
//!     let shards: Vec<(u32, u64)> = owned.borrow().iter().map(|s| (s.shard, s.fence)).collect();
//!     println!("own (shard, fence): {shards:?}"); // stop each shard's work before its valid_until
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod backend;
mod conn;
mod connector;
pub mod election;
mod eviction;
mod failure;
mod lease;
mod lock;
mod redlock;
mod server_info;
pub mod shard;

#[cfg(feature = "daemon")]
mod daemon;

pub use backend::Backend;
pub use connector::{ConnectError, RedisSpec};
pub use lease::{
    Acquire, Holder, Lease, LeaseClient, LeaseError, LeaseKeys, LeaseSpec, Observed, Term,
};
pub use lock::{LeaseGuard, Locker, LossReason, PlainLease, WatchdogConfig};
pub use redlock::RedlockClient;

/// Where the lease's Redis is ([`RedisSpec`]'s parts), what a failed call reports, and what
/// a server's eviction policy can do to the lease.
pub mod connection {
    pub use crate::conn::{FailureKind, RedisFailure};
    pub use crate::connector::{Secret, TlsFiles, Topology};
    pub use crate::eviction::EvictionPolicy;
}

/// Who comes next: the candidates' registry ([`Lease::heartbeat`]),
/// handover requests ([`Lease::control`]), reserved releases and the
/// release announcements that wake followers.
pub mod handover {
    pub use crate::lease::{
        Announcement, Candidate, Control, ControlMessage, ControlWatch, HandoverRequest, Heartbeat,
        Registration, ReleaseWatch, Reservation, Roster, MAX_CANDIDATES,
    };
}

/// The `leaderd` command line (the binary's `main`).
#[cfg(feature = "daemon")]
#[doc(hidden)]
pub use daemon::cli::main as cli_main;
