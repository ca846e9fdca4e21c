//! The watchdog: one task per holder (a [`super::Locker`] and its clones) that renews the
//! holder's current hold and reports its loss. A hold only registers itself here, so taking
//! and releasing a lock spawns no task and arms no timer of its own (README, "Library").

use std::sync::{Arc, Mutex as StdMutex, PoisonError};

use tokio::sync::{watch, Mutex, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{LossReason, WatchdogConfig};
use crate::lease::{Lease, LeaseError, Term};

/// The hold being renewed.
struct Watched {
    term: Arc<StdMutex<Term>>,
    loss: watch::Sender<Option<LossReason>>,
    /// The next renew; `None` once the loss is reported.
    due: Option<Instant>,
}

#[derive(Default)]
struct Slot {
    current: Option<Watched>,
    /// When the task wakes next by itself (`None`: it waits to be told of a hold).
    armed: Option<Instant>,
}

/// A holder's watchdog, shared by its clones and its task.
#[derive(Default)]
pub(super) struct Watchdog {
    slot: StdMutex<Slot>,
    wake: Notify,
    /// Held by the task while a renew is in flight.
    renewing: Mutex<()>,
    /// The task, started on the holder's first hold (again if its runtime ended).
    task: StdMutex<Option<tokio::task::JoinHandle<()>>>,
    /// Cancelled when the last clone of the holder is dropped: the task ends.
    closed: CancellationToken,
}

impl Watchdog {
    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Renews `term` from now on (instead of any earlier hold, whose loss watch closes) and
    /// returns the watch of its loss. Starts the task on the holder's first hold.
    pub(super) fn watch<L: Lease>(
        self: &Arc<Self>,
        client: &Arc<L>,
        config: WatchdogConfig,
        term: Arc<StdMutex<Term>>,
    ) -> watch::Receiver<Option<LossReason>> {
        let (tx, rx) = watch::channel(None);
        let last_sent = term.lock().map_or_else(|_| Instant::now(), |t| t.last_sent);
        let due = next_renew(config, last_sent, last_sent);
        let tell = {
            let mut slot = self.slot();
            slot.current = Some(Watched {
                term,
                loss: tx,
                due: Some(due),
            });
            slot.armed.is_none_or(|armed| armed > due)
        };
        let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if task
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            *task = Some(tokio::spawn(run(self.clone(), client.clone(), config)));
        } else if tell {
            self.wake.notify_one();
        }
        rx
    }

    /// Stops renewing `term`, then waits for a renew in flight, so that a release is
    /// ordered after it.
    pub(super) async fn unwatch(&self, term: &Arc<StdMutex<Term>>) {
        {
            let mut slot = self.slot();
            if slot
                .current
                .as_ref()
                .is_some_and(|w| Arc::ptr_eq(&w.term, term))
            {
                slot.current = None;
            }
        }
        if self.renewing.try_lock().is_err() {
            let _ = self.renewing.lock().await;
        }
    }

    /// Ends the task (the holder is gone).
    pub(super) fn close(&self) {
        self.closed.cancel();
    }

    /// The next renew of the current hold, noted as the task's next wake.
    fn next_due(&self) -> Option<Instant> {
        let mut slot = self.slot();
        let due = slot.current.as_ref().and_then(|w| w.due);
        slot.armed = due;
        due
    }

    /// Renews the current hold when it is due, and reports its loss.
    async fn renew_current<L: Lease>(&self, client: &L, config: WatchdogConfig) {
        let _renewing = self.renewing.lock().await;
        let now = Instant::now();
        let Some(term) = self
            .slot()
            .current
            .as_ref()
            .filter(|w| w.due.is_some_and(|d| d <= now))
            .map(|w| w.term.clone())
        else {
            return; // released or replaced meanwhile: no renew after the release
        };
        let Ok(mut current) = term.lock().map(|t| t.clone()) else {
            return;
        };
        let deadline = current.last_sent + config.renew_deadline;
        let budget = deadline
            .saturating_duration_since(Instant::now())
            .min(client.default_budget());
        let outcome = if budget.is_zero() {
            Err(LeaseError::Timeout { last_seen: None })
        } else {
            client.renew(&mut current, budget).await
        };
        let last_sent = current.last_sent;
        if outcome.is_ok() {
            if let Ok(mut t) = term.lock() {
                *t = current;
            }
        }
        let mut slot = self.slot();
        let Some(watched) = slot
            .current
            .as_mut()
            .filter(|w| Arc::ptr_eq(&w.term, &term))
        else {
            return;
        };
        let now = Instant::now();
        let lost = match outcome {
            Ok(()) => None,
            Err(LeaseError::Lost) => Some(LossReason::Lost),
            Err(_) if now >= deadline => Some(LossReason::Deadline),
            Err(_) => None,
        };
        match lost {
            Some(reason) => {
                let _ = watched.loss.send(Some(reason));
                watched.due = None;
            }
            None => watched.due = Some(next_renew(config, now, last_sent)),
        }
    }
}

/// The next renew after an attempt at `now`: a renew interval later, but never past the renew
/// deadline, so that after a failed renew the loss is reported at the deadline, not a whole
/// interval later (maybe past validity).
fn next_renew(config: WatchdogConfig, now: Instant, last_sent: Instant) -> Instant {
    (now + config.renew_every).min(last_sent + config.renew_deadline)
}

/// The holder's task: sleeps until the current hold's renew is due (one timer, reset), waits
/// to be told of a hold when there is none, and ends with the holder.
async fn run<L: Lease>(dog: Arc<Watchdog>, client: Arc<L>, config: WatchdogConfig) {
    let sleep = tokio::time::sleep_until(Instant::now());
    tokio::pin!(sleep);
    loop {
        match dog.next_due() {
            None => tokio::select! {
                _ = dog.closed.cancelled() => return,
                _ = dog.wake.notified() => {}
            },
            Some(due) if due > Instant::now() => {
                sleep.as_mut().reset(due);
                tokio::select! {
                    _ = dog.closed.cancelled() => return,
                    _ = &mut sleep => {}
                    _ = dog.wake.notified() => {}
                }
            }
            Some(_) => dog.renew_current(&*client, config).await,
        }
    }
}
