//! leaderd: leader election over a Redis lease, as a sidecar daemon and as a library.
//!
//! Library (always built):
//! - [`Lease`]: the one lease interface (acquire, renew, release, observe, the blocking
//!   wait), with fencing tokens; [`LeaseClient`] implements it on one Redis (a server, the
//!   Sentinel master or a cluster), [`RedlockClient`] on a majority of independent masters,
//!   and [`Backend`] is whichever a [`RedisSpec`] names. A release may be reserved for a
//!   successor ([`Reservation`]); handover requests go through [`Control`] and a
//!   [`ControlWatch`] (`lease::control`).
//! - [`Locker`]: a reentrant lock over any lease, with a watchdog that renews it in the
//!   background and reports its loss; fenced by default, or plain ([`Locker::plain`],
//!   [`PlainLease`]: no fence, fewer commands).
//! - [`election`]: the elector state machine over any lease, reporting every transition to
//!   an [`ElectionEvents`] of the caller's; [`state`]: the leadership state it implies.
//!
//! - [`RedisSpec`]: where the lease's Redis is (a [`Topology`] with its addresses,
//!   credentials as a [`Secret`], [`TlsFiles`]); a mistake in it is a [`ConnectError`].
//!
//! Internal modules: `conn` (one Redis endpoint with timeouts), `failure` (its error kinds),
//! `connector` (where its connections come from), `lease::release_watch` (the release channel
//! listener), `lease::acl` (naming the ACL permission a Redis user lacks), `eviction` (what a
//! server's `maxmemory-policy` can evict, [`EvictionPolicy`]), `server_info` (a server's name,
//! version and native commands), `backend` ([`Backend`]).
//!
//! Daemon (cargo feature `daemon`, on by default): `daemon`, the wing that `leaderd run` and
//! the other commands add above the library (config, cli, outputs, exec and keeper, hooks,
//! proxy); its own module comment maps it. The library never imports from it.
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
//! use std::sync::Arc;
//! use std::time::Duration;
//! use leaderd::election::{self, AfterLoss, AfterWorkExit, Inputs, NoWork, Policy, StepDown, Timing};
//! use leaderd::{Backend, ElectionEvents, LeaseSpec, RedisSpec, Term};
//!
//! struct Log;
//! impl ElectionEvents for Log {
//!     fn acquired(&self, term: &Term) {
//!         println!("leading with fence {}", term.fence);
//!     }
//!     fn stepped_down(&self, _: &Term, reason: StepDown) {
//!         println!("stepped down: {}", reason.as_str());
//!     }
//! }
//!
//! let lease = LeaseSpec::new("orders-scheduler", "pod-a", Duration::from_secs(15));
//! let backend = Backend::connect(&RedisSpec::single("redis://127.0.0.1:6379/0"), lease)?;
//! let policy = Policy {
//!     timing: Timing {
//!         lease_duration: Duration::from_secs(15),
//!         renew_deadline: Duration::from_secs(10),
//!         retry_period: Duration::from_secs(2),
//!         jitter: 0.2,
//!         command_timeout: Duration::from_millis(500),
//!     },
//!     on_lost: AfterLoss::Contend,
//!     on_work_exit: AfterWorkExit::Release,
//!     release_on_shutdown: true,
//!     preempt: false,
//! };
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! let (_yield_tx, yields) = tokio::sync::mpsc::channel(1);
//! let (_health_tx, healthy) = tokio::sync::watch::channel(true);
//! let candidates = election::no_candidates();
//! let inputs = Inputs { shutdown: shutdown.clone(), yields, healthy, candidates };
//! let code = election::run(Arc::new(backend), policy, NoWork, inputs, Log).await;
//! # let _ = code; Ok(()) }
//! ```
#![warn(missing_docs)]

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
#[doc(hidden)]
pub mod daemon;
#[cfg(feature = "daemon")]
pub use daemon::state;
#[cfg(feature = "daemon")]
#[doc(hidden)]
pub use daemon::{http, metrics, publish};

pub use backend::Backend;
pub use conn::{FailureKind, RedisFailure};
pub use connector::{ConnectError, RedisSpec, Secret, TlsFiles, Topology};
pub use election::{ElectionEvents, StepDown};
pub use eviction::EvictionPolicy;
pub use lease::{
    Acquire, Announcement, Candidate, Heartbeat, Holder, Lease, LeaseClient, LeaseError, LeaseKeys,
    LeaseSpec, Observed, Registration, ReleaseWatch, Roster, Term, MAX_CANDIDATES,
};
pub use lease::{Control, ControlMessage, ControlWatch, HandoverRequest, Reservation};
pub use lock::{LeaseGuard, Locker, LossReason, PlainLease, WatchdogConfig};
pub use redlock::RedlockClient;

/// The `leaderd` command line (the binary's `main`).
#[cfg(feature = "daemon")]
#[doc(hidden)]
pub use daemon::cli::main as cli_main;
