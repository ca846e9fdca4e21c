//! A reentrant lock over a lease, with a watchdog that renews it in the background and makes
//! its loss something the holder can await.
//!
//! "The same holder" is one [`Locker`] value and its clones. Async tasks move between
//! threads, so neither a thread nor a task is an identity worth having; a `Locker` is what a
//! program hands to the code that should share one hold. Locking again through the same
//! `Locker` while it holds the lease succeeds at once and is counted; the lease is released
//! when every [`LeaseGuard`] has been released (or dropped).
//!
//! Any [`Lease`] will do: one Redis ([`crate::LeaseClient`]), Redlock
//! ([`crate::RedlockClient`]), or the configured [`crate::Backend`]: a fenced lock, the safe
//! choice for guarding writes. [`Locker::plain`] is a lock without a fence ([`PlainLease`]),
//! for work that only needs to run once at a time.
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

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::{watch, Mutex};
use tokio::time::Instant;

use crate::lease::{Acquire, Lease, LeaseClient, LeaseError, Term};

mod plain;
mod watchdog;

pub use plain::PlainLease;
use watchdog::Watchdog;

/// Why a held lease ended without being released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// Redis says the lease is no longer ours (expired, or taken over).
    Lost,
    /// No renew succeeded within the renew deadline; the lease may be gone.
    Deadline,
}

/// How the watchdog keeps a lease alive.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct WatchdogConfig {
    /// Time between renewals.
    pub renew_every: Duration,
    /// Without a successful renew for this long (counted from the last one sent), the
    /// lease is reported lost. Keep it below the lease duration.
    pub renew_deadline: Duration,
    /// Interval between attempts while waiting in [`Locker::lock`].
    pub retry: Duration,
}

impl WatchdogConfig {
    /// Renew every third of the lease; give up after two thirds.
    pub fn for_lease(lease: Duration) -> Self {
        WatchdogConfig {
            renew_every: lease / 3,
            renew_deadline: lease * 2 / 3,
            retry: lease / 3,
        }
    }

    /// The time between renewals.
    pub fn with_renew_every(mut self, every: Duration) -> Self {
        self.renew_every = every;
        self
    }

    /// How long without a successful renew before the lease is reported lost.
    pub fn with_renew_deadline(mut self, deadline: Duration) -> Self {
        self.renew_deadline = deadline;
        self
    }

    /// The interval between attempts while waiting in [`Locker::lock`].
    pub fn with_retry(mut self, retry: Duration) -> Self {
        self.retry = retry;
        self
    }
}

struct Hold {
    count: u32,
    term: Arc<StdMutex<Term>>,
    loss: watch::Receiver<Option<LossReason>>,
}

/// The holder's watchdog, ended when the last clone of the holder is dropped.
struct Dog(Arc<Watchdog>);

impl Drop for Dog {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A reentrant lock over one lease. Cheap to clone; clones are the same holder.
pub struct Locker<L: Lease> {
    client: Arc<L>,
    config: WatchdogConfig,
    hold: Arc<Mutex<Option<Hold>>>,
    dog: Arc<Dog>,
}

impl<L: Lease> Clone for Locker<L> {
    fn clone(&self) -> Self {
        Locker {
            client: self.client.clone(),
            config: self.config,
            hold: self.hold.clone(),
            dog: self.dog.clone(),
        }
    }
}

impl<L: Lease> Locker<L> {
    /// A locker with the watchdog timings of [`WatchdogConfig::for_lease`].
    pub fn new(client: L) -> Self {
        let config = WatchdogConfig::for_lease(client.spec().lease_duration);
        Self::with_config(client, config)
    }

    /// A locker with explicit watchdog timings.
    pub fn with_config(client: L, config: WatchdogConfig) -> Self {
        Locker {
            client: Arc::new(client.for_lock()),
            config,
            hold: Arc::new(Mutex::new(None)),
            dog: Arc::new(Dog(Arc::default())),
        }
    }

    /// Takes the lease, waiting until `deadline` (waking on releases and at expiry).
    ///
    /// # Errors
    /// `Timeout` when the deadline passes; `WrongType` for a foreign key.
    pub async fn lock(&self, deadline: Instant) -> Result<LeaseGuard<L>, LeaseError> {
        let mut hold = self.hold.lock().await;
        if let Some(guard) = self.reenter(&mut hold) {
            return Ok(guard);
        }
        let term = self.client.acquire(deadline, self.config.retry).await?;
        Ok(self.start(&mut hold, term))
    }

    /// One attempt, without waiting.
    ///
    /// # Errors
    /// `Held` (who holds it, for how long) when someone else holds the lease; Redis errors.
    pub async fn try_lock(&self) -> Result<LeaseGuard<L>, LeaseError> {
        let mut hold = self.hold.lock().await;
        if let Some(guard) = self.reenter(&mut hold) {
            return Ok(guard);
        }
        match self
            .client
            .try_acquire(self.client.default_budget())
            .await?
        {
            Acquire::Acquired(term) => Ok(self.start(&mut hold, term)),
            Acquire::Denied(seen) => Err(LeaseError::Held(seen)),
        }
    }

    /// How many guards of this holder are outstanding (0 when not held).
    pub async fn hold_count(&self) -> u32 {
        self.hold.lock().await.as_ref().map_or(0, |h| h.count)
    }

    fn reenter(&self, hold: &mut Option<Hold>) -> Option<LeaseGuard<L>> {
        let held = hold.as_mut()?;
        let alive = held.loss.borrow().is_none() && held.term.lock().ok()?.is_valid();
        if !alive {
            return None;
        }
        held.count += 1;
        Some(self.guard(held))
    }

    /// A new hold (replacing a dead one, whose loss watch closes), renewed by the watchdog.
    fn start(&self, hold: &mut Option<Hold>, term: Term) -> LeaseGuard<L> {
        let term = Arc::new(StdMutex::new(term));
        let loss = self.dog.0.watch(&self.client, self.config, term.clone());
        let new = Hold {
            count: 1,
            term,
            loss,
        };
        let guard = self.guard(&new);
        *hold = Some(new);
        guard
    }

    fn guard(&self, hold: &Hold) -> LeaseGuard<L> {
        LeaseGuard {
            locker: Some(self.clone()),
            term: hold.term.clone(),
            loss: hold.loss.clone(),
        }
    }

    async fn unlock(&self, term: &Arc<StdMutex<Term>>) -> Result<bool, LeaseError> {
        let mut hold = self.hold.lock().await;
        let Some(held) = hold.as_mut().filter(|h| Arc::ptr_eq(&h.term, term)) else {
            return Ok(false);
        };
        held.count -= 1;
        if held.count > 0 {
            return Ok(true);
        }
        let held = hold.take().expect("checked above");
        // Release is ordered after a renew in flight.
        self.dog.0.unwatch(&held.term).await;
        let term = held.term.lock().map(|t| t.clone()).ok();
        match term {
            Some(term) => {
                self.client
                    .release(&term, self.client.default_budget())
                    .await
            }
            None => Ok(false),
        }
    }
}

impl Locker<PlainLease> {
    /// A plain lock (no fence) on `client`'s lease name and connection: `SET NX PX` to take
    /// it, compare-and-set to renew it and compare-and-delete to release it, with the
    /// server's native commands where it has them (`SET .. IFEQ`, `DELIFEQ`, `DELEX`) and a
    /// script elsewhere. Reentrancy, the watchdog and [`LeaseGuard::lost`] are the fenced
    /// lock's; [`LeaseGuard::fence`] is 0. Prefer [`Locker::new`] (fenced) for guarding
    /// writes: see [`PlainLease`] and README, "Library".
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use leaderd::{LeaseClient, LeaseSpec, Locker};
    ///
    /// let spec = LeaseSpec::new("cache-refresh", "worker-1", Duration::from_secs(10));
    /// let locker = Locker::plain(LeaseClient::connect("redis://127.0.0.1:6379/0", spec)?);
    /// let guard = locker.try_lock().await?; // `LeaseError::Held` when another holds it
    /// // ... the work, while guard.is_valid()
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn plain(client: LeaseClient) -> Self {
        Self::new(PlainLease::new(client))
    }
}

/// One hold of a lease. Release it with [`LeaseGuard::release`]; dropping it releases in
/// the background.
pub struct LeaseGuard<L: Lease> {
    locker: Option<Locker<L>>,
    term: Arc<StdMutex<Term>>,
    loss: watch::Receiver<Option<LossReason>>,
}

impl<L: Lease> LeaseGuard<L> {
    /// The fencing token of this term: pass it to the resources the lock protects (0 for a
    /// plain lock, [`Locker::plain`]).
    pub fn fence(&self) -> u64 {
        self.term.lock().map_or(0, |t| t.fence)
    }

    /// True while the lease is certainly still held: not reported lost, and before the
    /// validity instant of the last successful acquire or renew.
    pub fn is_valid(&self) -> bool {
        self.loss.borrow().is_none() && self.term.lock().is_ok_and(|t| t.is_valid())
    }

    /// The validity instant of the last successful acquire or renew.
    pub fn valid_until(&self) -> Option<Instant> {
        self.term.lock().ok().map(|t| t.valid_until)
    }

    /// Resolves when the lease is lost (or its renew deadline passes) while held.
    pub async fn lost(&mut self) -> LossReason {
        loop {
            if let Some(reason) = *self.loss.borrow_and_update() {
                return reason;
            }
            if self.loss.changed().await.is_err() {
                return LossReason::Lost;
            }
        }
    }

    /// A watch of the loss, for use from other tasks: `Some(reason)` once lost.
    pub fn loss_watch(&self) -> watch::Receiver<Option<LossReason>> {
        self.loss.clone()
    }

    /// Gives up this hold; the last hold of the holder releases the lease in Redis.
    /// Returns false when the lease was no longer ours.
    ///
    /// # Errors
    /// Redis errors of the release.
    pub async fn release(mut self) -> Result<bool, LeaseError> {
        match self.locker.take() {
            Some(locker) => locker.unlock(&self.term).await,
            None => Ok(false),
        }
    }
}

impl<L: Lease> Drop for LeaseGuard<L> {
    fn drop(&mut self) {
        if let Some(locker) = self.locker.take() {
            let term = self.term.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = locker.unlock(&term).await;
                });
            }
        }
    }
}
