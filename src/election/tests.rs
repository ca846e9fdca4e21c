//! The state machine on paused time, against an in-memory lease that follows the same rules
//! as the Redis scripts.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::lease::{Acquire, Lease, LeaseError, Roster, Term};
use crate::lease::{Announcement, Candidate, LeaseSpec, Observed, ReleaseWatch};

/// Where the elector is, as the test events record it (the daemon keeps its own richer state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Starting,
    Follower,
    Leader,
    SteppingDown,
    Stopped,
}

/// What the events learned, on a `watch` as the daemon keeps its state.
#[derive(Debug, Clone)]
struct Snapshot {
    phase: Phase,
    leader: Option<String>,
    fence: Option<u64>,
    term: Option<TermView>,
    leader_address: Option<String>,
}

impl Snapshot {
    fn starting() -> Self {
        Snapshot {
            phase: Phase::Starting,
            leader: None,
            fence: None,
            term: None,
            leader_address: None,
        }
    }

    /// A new phase; the term belongs to the leader phase only.
    fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
        if phase != Phase::Leader {
            self.term = None;
        }
    }

    /// True while this replica may claim leadership at `now`: leading, its term still valid.
    fn is_leader_at(&self, now: Instant) -> bool {
        self.phase == Phase::Leader && self.term.as_ref().is_some_and(|t| now < t.valid_until)
    }
}

fn drift(lease: Duration) -> Duration {
    LeaseSpec::new("x", "me", lease).drift()
}

/// The events as a state channel (as the daemon keeps one) and a log of their order.
struct TestEvents {
    state: watch::Sender<Snapshot>,
    log: Arc<Mutex<Vec<&'static str>>>,
    /// Every error reported through `redis_failed`, with the phase it came in.
    failures: Arc<Mutex<Vec<(LeaseError, Phase)>>>,
    /// How long `work_stopped` takes before it notes itself.
    slow_stop: Duration,
}

impl TestEvents {
    fn note(&self, what: &'static str) {
        self.log.lock().unwrap().push(what);
    }
}

impl ElectionEvents for TestEvents {
    fn redis_failed(&self, err: &LeaseError) {
        let phase = self.state.borrow().phase;
        self.failures.lock().unwrap().push((err.clone(), phase));
    }
    fn observed(&self, seen: &Observed) {
        let leader = seen.holder().map(|h| h.holder.clone());
        let fence = seen.holder().map(|h| h.fence);
        let address = seen.holder().and_then(|h| h.address.clone());
        self.state.send_modify(|s| {
            s.set_phase(Phase::Follower);
            s.leader = leader;
            s.fence = fence;
            s.leader_address = address;
        });
    }
    fn acquired(&self, term: &Term) {
        self.note("acquired");
        self.state.send_modify(|s| {
            s.set_phase(Phase::Leader);
            s.leader = Some("me".into());
            s.fence = Some(term.fence);
            s.term = Some(TermView::from(term));
        });
    }
    fn renewed(&self, term: &Term) {
        self.state
            .send_modify(|s| s.term = Some(TermView::from(term)));
    }
    fn stepped_down(&self, _: &Term, _: StepDown) {
        self.note("stepped_down");
        self.state.send_modify(|s| s.set_phase(Phase::SteppingDown));
    }
    async fn work_stopped(&self, _: &Term, _: StepDown) {
        tokio::time::sleep(self.slow_stop).await;
        self.note("work_stopped");
    }
    fn released(&self, _: &Term) {
        self.note("released");
    }
    fn acquired_too_late(&self, _: &Term) {
        self.note("too_late");
    }
    fn acquire_result(&self, result: AcquireResult) {
        if result == AcquireResult::Expired {
            self.note("expired");
        }
    }
    fn stopped(&self) {
        self.note("stopped");
        self.state.send_modify(|s| s.set_phase(Phase::Stopped));
    }
}

const LEASE: Duration = Duration::from_millis(2000);

#[derive(Default)]
struct FakeLease {
    held: Mutex<Option<(String, u64, Instant)>>, // token, fence, expiry
    fence: AtomicU64,
    down: AtomicBool,
    releases: AtomicU64,
    release_calls: AtomicU64, // every release sent, whether it found the lease or not
    released: watch::Sender<u64>,
    late_replies: AtomicU64, // grants to answer as if the reply came after their validity
    attempts: AtomicU64,     // acquires and observes (what a follower costs Redis)
    reserved: Mutex<Option<(String, Instant)>>, // a reservation: for whom, until when
    /// When set: the release watch carries these announcements, confirmed by `confirmed`.
    messages: Mutex<Option<watch::Receiver<Option<Announcement>>>>,
    confirmed: Mutex<Option<watch::Receiver<bool>>>,
    /// When set: every call fails with this error (after `down`).
    broken: Mutex<Option<LeaseError>>,
}

impl FakeLease {
    fn hold_by_other(&self, for_: Duration) {
        *self.held.lock().unwrap() = Some(("other".into(), 100, Instant::now() + for_));
        self.fence.store(100, Ordering::SeqCst);
    }
    /// A reservation for someone else, while it lasts.
    fn reserved_for_other(&self) -> Option<Observed> {
        let mut r = self.reserved.lock().unwrap();
        match r.clone() {
            Some((_, until)) if Instant::now() >= until => {
                *r = None;
                None
            }
            Some((who, until)) if who != "me" => Some(Observed::Reserved {
                for_identity: who,
                fence: self.fence.load(Ordering::SeqCst),
                remaining: Some(until - Instant::now()),
            }),
            _ => None,
        }
    }
    fn live(&self) -> Option<(String, u64, Instant)> {
        let mut held = self.held.lock().unwrap();
        if held.as_ref().is_some_and(|h| Instant::now() >= h.2) {
            *held = None;
        }
        held.clone()
    }
    fn check(&self) -> Result<(), LeaseError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(LeaseError::Unavailable(crate::conn::RedisFailure {
                kind: crate::conn::FailureKind::Connection,
                cause: "down".into(),
                code: None,
                source: None,
            }));
        }
        match self.broken.lock().unwrap().clone() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

fn holder(token: String, fence: u64, exp: Instant) -> Observed {
    Observed::Held(crate::lease::Holder {
        holder: token,
        fence,
        remaining: Some(exp.saturating_duration_since(Instant::now())),
        address: None,
    })
}

impl Lease for FakeLease {
    fn spec(&self) -> &LeaseSpec {
        static SPEC: std::sync::OnceLock<LeaseSpec> = std::sync::OnceLock::new();
        SPEC.get_or_init(|| LeaseSpec::new("t", "me", LEASE))
    }
    fn default_budget(&self) -> Duration {
        Duration::from_millis(200)
    }
    async fn try_acquire(&self, _: Duration) -> Result<Acquire, LeaseError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        let sent = Instant::now();
        if let Some(reserved) = self.reserved_for_other() {
            return Ok(Acquire::Denied(reserved));
        }
        if let Some((token, fence, exp)) = self.live() {
            return Ok(Acquire::Denied(holder(token, fence, exp)));
        }
        let fence = self.fence.fetch_add(1, Ordering::SeqCst) + 1;
        let token = crate::lease::new_token();
        *self.held.lock().unwrap() = Some((token.clone(), fence, sent + LEASE));
        let validity = LEASE - drift(LEASE);
        let late = self
            .late_replies
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let sent = if late { sent - LEASE } else { sent };
        Ok(Acquire::Acquired(Term {
            token,
            fence,
            acquired_at: SystemTime::now(),
            last_sent: sent,
            valid_until: sent + validity,
            valid_until_wall: SystemTime::now() + validity,
        }))
    }
    async fn renew(&self, term: &mut Term, _: Duration) -> Result<(), LeaseError> {
        self.check()?;
        let sent = Instant::now();
        match self.live() {
            Some((token, fence, _)) if token == term.token => {
                *self.held.lock().unwrap() = Some((token, fence, sent + LEASE));
                term.last_sent = sent;
                term.valid_until = sent + LEASE - drift(LEASE);
                Ok(())
            }
            _ => Err(LeaseError::Lost),
        }
    }
    async fn release_to(
        &self,
        term: &Term,
        _: Option<crate::lease::Reservation<'_>>,
        _: Duration,
    ) -> Result<bool, LeaseError> {
        self.check()?;
        self.release_calls.fetch_add(1, Ordering::SeqCst);
        let mine = self.live().is_some_and(|h| h.0 == term.token);
        if mine {
            *self.held.lock().unwrap() = None;
            self.releases.fetch_add(1, Ordering::SeqCst);
            self.released.send_modify(|n| *n += 1);
        }
        Ok(mine)
    }
    async fn observe(&self, _: Duration) -> Result<Observed, LeaseError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        if let Some(reserved) = self.reserved_for_other() {
            return Ok(reserved);
        }
        Ok(self
            .live()
            .map_or(Observed::Vacant, |(h, fence, exp)| holder(h, fence, exp)))
    }
    async fn heartbeat(
        &self,
        _: crate::lease::Heartbeat<'_>,
        _: Duration,
    ) -> Result<crate::lease::Roster, LeaseError> {
        self.check()?;
        Ok(crate::lease::Roster::default())
    }
    fn watch_releases(&self) -> ReleaseWatch {
        let watch = match self.messages.lock().unwrap().clone() {
            Some(rx) => ReleaseWatch::from_announcements(rx),
            None => ReleaseWatch::from_receiver(self.released.subscribe()),
        };
        match self.confirmed.lock().unwrap().clone() {
            Some(rx) => watch.confirmed_by(rx),
            None => watch,
        }
    }
}

struct Harness {
    lease: Arc<FakeLease>,
    log: Arc<Mutex<Vec<&'static str>>>,
    failures: Arc<Mutex<Vec<(LeaseError, Phase)>>>,
    state: watch::Receiver<Snapshot>,
    shutdown: CancellationToken,
    yields: mpsc::Sender<()>,
    /// The candidates (and lease) as the heartbeat would read them.
    roster: watch::Sender<Roster>,
    task: tokio::task::JoinHandle<i32>,
}

fn policy(on_lost: AfterLoss) -> Policy {
    let timing = Timing::new(LEASE)
        .with_renew_deadline(Duration::from_millis(1400))
        .with_retry_period(Duration::from_millis(300))
        .with_jitter(0.2)
        .with_command_timeout(Duration::from_millis(200));
    Policy::new(timing).with_on_lost(on_lost)
}

fn start(lease: Arc<FakeLease>, on_lost: AfterLoss) -> Harness {
    start_with(lease, on_lost, Duration::ZERO)
}

/// The elector with events whose `work_stopped` takes `slow_stop`.
fn start_with(lease: Arc<FakeLease>, on_lost: AfterLoss, slow_stop: Duration) -> Harness {
    let (tx, state) = watch::channel(Snapshot::starting());
    let log = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let reporter = TestEvents {
        state: tx,
        log: log.clone(),
        failures: failures.clone(),
        slow_stop,
    };
    let shutdown = CancellationToken::new();
    let (ytx, yrx) = mpsc::channel(4);
    let (_htx, healthy) = watch::channel(true);
    let (roster, candidates) = watch::channel(Roster::default());
    let inputs = Inputs::new(shutdown.clone())
        .with_yields(yrx)
        .with_health(healthy)
        .with_candidates(candidates);
    let task = tokio::spawn(run(
        lease.clone(),
        policy(on_lost),
        NoWork,
        inputs,
        reporter,
    ));
    Harness {
        lease,
        log,
        failures,
        state,
        shutdown,
        yields: ytx,
        roster,
        task,
    }
}

async fn wait_phase(state: &mut watch::Receiver<Snapshot>, phase: Phase) -> Snapshot {
    let snap = state.wait_for(|s| s.phase == phase);
    tokio::time::timeout(Duration::from_secs(60), snap)
        .await
        .expect("phase reached")
        .unwrap()
        .clone()
}

#[tokio::test(start_paused = true)]
async fn leads_renews_and_releases_on_shutdown() {
    let mut h = start(Arc::new(FakeLease::default()), AfterLoss::Contend);
    let snap = wait_phase(&mut h.state, Phase::Leader).await;
    let first_validity = snap.term.unwrap().valid_until;
    tokio::time::sleep(LEASE * 3).await;
    let later = h.state.borrow().clone();
    assert_eq!(later.phase, Phase::Leader, "renewals keep the term");
    assert!(later.term.unwrap().valid_until > first_validity + LEASE);
    h.shutdown.cancel();
    assert_eq!(bounded(h.task).await, 0);
    assert_eq!(h.state.borrow().phase, Phase::Stopped);
    assert_eq!(h.lease.releases.load(Ordering::SeqCst), 1);
    assert_eq!(
        *h.log.lock().unwrap(),
        [
            "acquired",
            "stepped_down",
            "work_stopped",
            "released",
            "stopped"
        ],
        "stop claiming, stop the work, then release"
    );
}

/// `Inputs::new` alone: nobody can ask to yield, health stays true, no candidates; the
/// leader keeps its term until shutdown (closed inputs are no yield and no health change).
#[tokio::test(start_paused = true)]
async fn inputs_with_only_a_shutdown_token_lead_until_shutdown() {
    let lease = Arc::new(FakeLease::default());
    let (tx, mut state) = watch::channel(Snapshot::starting());
    let reporter = TestEvents {
        state: tx,
        log: Default::default(),
        failures: Default::default(),
        slow_stop: Duration::ZERO,
    };
    let shutdown = CancellationToken::new();
    let inputs = Inputs::new(shutdown.clone());
    let task = tokio::spawn(run(
        lease.clone(),
        policy(AfterLoss::Contend),
        NoWork,
        inputs,
        reporter,
    ));
    let first = wait_phase(&mut state, Phase::Leader).await.fence;
    tokio::time::sleep(LEASE * 3).await;
    let later = state.borrow().clone();
    assert_eq!((later.phase, later.fence), (Phase::Leader, first));
    shutdown.cancel();
    assert_eq!(bounded(task).await, 0);
    assert_eq!(lease.releases.load(Ordering::SeqCst), 1);
}

#[test]
fn the_default_timing_and_policy_are_the_daemons() {
    let t = Timing::new(Duration::from_secs(15));
    assert_eq!(t.renew_deadline(), Duration::from_secs(10));
    assert_eq!(t.retry_period(), Duration::from_secs(2));
    assert_eq!(
        (t.jitter, t.command_timeout),
        (0.2, Duration::from_millis(500))
    );
    let p = Policy::new(t);
    assert_eq!(
        (p.on_lost, p.on_work_exit),
        (AfterLoss::Contend, AfterWorkExit::Release)
    );
    assert!(p.release_on_shutdown && !p.preempt);
}

/// A slow `work_stopped` (a proxy closing its connections) is awaited before the release.
#[tokio::test(start_paused = true)]
async fn the_release_waits_for_work_stopped() {
    let slow = Duration::from_millis(500);
    let mut h = start_with(Arc::new(FakeLease::default()), AfterLoss::Contend, slow);
    wait_phase(&mut h.state, Phase::Leader).await;
    h.shutdown.cancel();
    wait_phase(&mut h.state, Phase::SteppingDown).await;
    let stepped_at = Instant::now();
    assert_eq!(bounded(h.task).await, 0);
    assert!(
        stepped_at.elapsed() >= slow,
        "the elector waited for work_stopped"
    );
    assert_eq!(h.lease.releases.load(Ordering::SeqCst), 1);
    assert_eq!(
        *h.log.lock().unwrap(),
        [
            "acquired",
            "stepped_down",
            "work_stopped",
            "released",
            "stopped"
        ]
    );
}

/// A `work_stopped` that never finishes delays the release by `WORK_STOPPED_LIMIT`, no more.
#[tokio::test(start_paused = true)]
async fn a_hung_work_stopped_delays_the_release_by_its_limit_only() {
    let hung = Duration::from_secs(3600);
    let lease = Arc::new(FakeLease::default());
    let mut h = start_with(lease.clone(), AfterLoss::Contend, hung);
    wait_phase(&mut h.state, Phase::Leader).await;
    h.shutdown.cancel();
    wait_phase(&mut h.state, Phase::SteppingDown).await;
    let stepped_at = Instant::now();
    assert_eq!(bounded(h.task).await, 0);
    let took = stepped_at.elapsed();
    assert!(
        took >= WORK_STOPPED_LIMIT && took < WORK_STOPPED_LIMIT + LEASE,
        "took {took:?}"
    );
    // The release is still sent (it finds the 2 s lease expired by then: nothing to delete,
    // so nothing is reported released).
    assert_eq!(lease.release_calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        *h.log.lock().unwrap(),
        ["acquired", "stepped_down", "stopped"]
    );
}

/// Every wait in these tests is bounded: a broken elector fails instead of hanging.
async fn bounded<T>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the elector stops in time")
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn steps_down_at_the_renew_deadline_before_validity_ends() {
    let mut h = start(Arc::new(FakeLease::default()), AfterLoss::Exit);
    let snap = wait_phase(&mut h.state, Phase::Leader).await;
    let term = snap.term.unwrap();
    h.lease.down.store(true, Ordering::SeqCst);
    let ended = tokio::time::timeout(LEASE * 2, h.state.wait_for(|s| s.phase != Phase::Leader))
        .await
        .expect("stepped down within two leases")
        .unwrap()
        .clone();
    let stepped_at = Instant::now();
    assert!(
        stepped_at < term.valid_until,
        "stepped down before the validity ended"
    );
    assert!(
        stepped_at >= term.valid_until - LEASE,
        "not before the deadline"
    );
    assert!(!ended.is_leader_at(stepped_at));
    assert_eq!(bounded(h.task).await, 1, "on_lost: exit ends with 1");
    assert_eq!(h.state.borrow().phase, Phase::Stopped);
}

/// A renew answered with something the scripts cannot produce is reported (logged and
/// counted by the daemon), and the leader steps down at its deadline as for any failure.
#[tokio::test(start_paused = true)]
async fn a_renew_with_an_unreadable_reply_is_reported_and_the_leader_steps_down() {
    let mut h = start(Arc::new(FakeLease::default()), AfterLoss::Exit);
    let term = wait_phase(&mut h.state, Phase::Leader).await.term.unwrap();
    *h.lease.broken.lock().unwrap() = Some(LeaseError::Protocol("odd reply".into()));
    tokio::time::timeout(LEASE * 2, h.state.wait_for(|s| s.phase != Phase::Leader))
        .await
        .expect("stepped down within two leases")
        .unwrap();
    assert!(
        Instant::now() < term.valid_until,
        "stepped down before the validity ended"
    );
    let failures = h.failures.lock().unwrap().clone();
    let odd = (LeaseError::Protocol("odd reply".into()), Phase::Leader);
    assert!(
        failures.contains(&odd),
        "reported while leading: {failures:?}"
    );
    assert_eq!(bounded(h.task).await, 1);
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_steps_down_at_once_and_contends_again() {
    let mut h = start(Arc::new(FakeLease::default()), AfterLoss::Contend);
    let first = wait_phase(&mut h.state, Phase::Leader).await.fence.unwrap();
    h.lease.hold_by_other(Duration::from_millis(700));
    let follower = wait_phase(&mut h.state, Phase::Follower).await;
    assert_eq!(follower.leader.as_deref(), Some("other"));
    let again = wait_phase(&mut h.state, Phase::Leader).await;
    assert!(again.fence.unwrap() > first, "fences increase term by term");
    h.shutdown.cancel();
    assert_eq!(bounded(h.task).await, 0);
}

#[tokio::test(start_paused = true)]
async fn a_follower_contends_when_the_holder_expires_not_a_retry_later() {
    let lease = Arc::new(FakeLease::default());
    lease.hold_by_other(Duration::from_millis(450));
    let started = Instant::now();
    let mut h = start(lease, AfterLoss::Contend);
    wait_phase(&mut h.state, Phase::Leader).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(460),
        "took {took:?}"
    );
    h.shutdown.cancel();
    bounded(h.task).await;
}

#[tokio::test(start_paused = true)]
async fn yielding_sits_out_one_lease() {
    let mut h = start(Arc::new(FakeLease::default()), AfterLoss::Contend);
    wait_phase(&mut h.state, Phase::Leader).await;
    h.yields.send(()).await.unwrap();
    tokio::time::timeout(LEASE, h.state.wait_for(|s| s.phase != Phase::Leader))
        .await
        .expect("yielded in time")
        .unwrap();
    let yielded = Instant::now();
    wait_phase(&mut h.state, Phase::Leader).await;
    assert!(
        yielded.elapsed() >= LEASE,
        "sat out {:?}",
        yielded.elapsed()
    );
    h.shutdown.cancel();
    bounded(h.task).await;
}

#[tokio::test(start_paused = true)]
async fn a_grant_whose_reply_came_after_its_validity_is_released_not_a_term() {
    let lease = Arc::new(FakeLease::default());
    lease.late_replies.store(1, Ordering::SeqCst);
    let mut h = start(lease, AfterLoss::Contend);
    let mut phases = h.state.clone();
    let first_phase_change = tokio::spawn(async move {
        phases
            .wait_for(|s| s.phase == Phase::Leader)
            .await
            .unwrap()
            .fence
    });
    let snap = wait_phase(&mut h.state, Phase::Leader).await;
    assert_eq!(snap.fence, Some(2), "the late grant (fence 1) never led");
    assert_eq!(bounded(first_phase_change).await, Some(2));
    assert_eq!(
        h.lease.releases.load(Ordering::SeqCst),
        1,
        "late grant released"
    );
    assert_eq!(
        *h.log.lock().unwrap(),
        ["expired", "too_late", "acquired"],
        "counted, reported, then a real term"
    );
    h.shutdown.cancel();
    bounded(h.task).await;
}

// ---------------------------------------------------------------------------------------
// Quiet followers (issue 11): when a follower attempts, and what it costs.

/// The FakeLease's `attempts` after `for_` of paused time.
async fn attempts_after(lease: &FakeLease, for_: Duration) -> u64 {
    tokio::time::sleep(for_).await;
    lease.attempts.load(Ordering::SeqCst)
}

fn candidate(id: &str, priority: u32) -> Candidate {
    Candidate {
        identity: id.into(),
        state: "follower".into(),
        healthy: true,
        contending: true,
        priority,
        address: None,
        version: "v".into(),
        started_at_ms: 1,
        healthy_since_ms: None,
        seen_at_ms: 1,
    }
}

fn held_by_other(left: Duration) -> Observed {
    holder("other".into(), 100, Instant::now() + left)
}

#[tokio::test(start_paused = true)]
async fn a_quiet_follower_sends_nothing_while_a_live_leader_holds_the_lease() {
    let lease = Arc::new(FakeLease::default());
    lease.hold_by_other(LEASE * 10);
    let h = start(lease.clone(), AfterLoss::Contend);
    let polls = attempts_after(&lease, LEASE * 5).await;
    assert_eq!(
        polls, 1,
        "one read at the start, then nothing until the expiry"
    );
    assert_eq!(h.state.borrow().leader.as_deref(), Some("other"));
    h.shutdown.cancel();
    bounded(h.task).await;
}

#[tokio::test(start_paused = true)]
async fn an_unconfirmed_subscription_polls_every_jittered_retry() {
    let lease = Arc::new(FakeLease::default());
    let (confirmed, rx) = watch::channel(false);
    *lease.confirmed.lock().unwrap() = Some(rx);
    lease.hold_by_other(LEASE * 10);
    let h = start(lease.clone(), AfterLoss::Contend);
    // retry 300 ms, jitter 0.2: a poll every 300-360 ms.
    let polls = attempts_after(&lease, Duration::from_millis(3000)).await;
    assert!((9..=11).contains(&polls), "{polls} polls in 3 s");
    confirmed.send_replace(true);
    let quiet = attempts_after(&lease, LEASE * 3).await;
    assert!(
        quiet <= polls + 1,
        "quiet once confirmed: {polls} -> {quiet}"
    );
    h.shutdown.cancel();
    bounded(h.task).await;
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_read_pushes_the_expiry_read_forward() {
    let lease = Arc::new(FakeLease::default());
    lease.hold_by_other(Duration::from_millis(1000));
    let started = Instant::now();
    let mut h = start(lease.clone(), AfterLoss::Contend);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The leader renewed: its lease now ends at 2500 ms; the heartbeat read says so.
    lease.hold_by_other(Duration::from_millis(2000));
    h.roster.send_modify(|r| {
        r.lease = Some((held_by_other(Duration::from_millis(2000)), Instant::now()))
    });
    wait_phase(&mut h.state, Phase::Leader).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_millis(2510),
        "took {took:?}"
    );
    assert_eq!(
        lease.attempts.load(Ordering::SeqCst),
        2,
        "the start and the expiry: no read at the first expiry"
    );
    h.shutdown.cancel();
    bounded(h.task).await;
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_read_of_a_vacant_lease_contends_at_once() {
    let lease = Arc::new(FakeLease::default());
    lease.hold_by_other(LEASE * 10);
    let mut h = start(lease.clone(), AfterLoss::Contend);
    tokio::time::sleep(Duration::from_millis(500)).await;
    *lease.held.lock().unwrap() = None;
    let read_at = Instant::now();
    h.roster
        .send_modify(|r| r.lease = Some((Observed::Vacant, Instant::now())));
    wait_phase(&mut h.state, Phase::Leader).await;
    assert!(read_at.elapsed() < Duration::from_millis(5));
    h.shutdown.cancel();
    bounded(h.task).await;
}

/// How long after its start a follower with `priority` wins a lease that expires in 450 ms,
/// among the candidates "best" (10) and "other" (the holder, 20); with `vacant_read_at`, its
/// heartbeat reads the lease vacant at that time.
async fn won_after_expiry_with_priority(
    priority: u32,
    vacant_read_at: Option<Duration>,
) -> Duration {
    let lease = Arc::new(FakeLease::default());
    lease.hold_by_other(Duration::from_millis(450));
    let started = Instant::now();
    let mut h = start(lease.clone(), AfterLoss::Contend);
    h.roster.send_modify(|r| {
        r.candidates = vec![
            candidate("best", 10),
            candidate("me", priority),
            candidate("other", 20),
        ];
    });
    if let Some(at) = vacant_read_at {
        tokio::time::sleep_until(started + at).await;
        h.roster
            .send_modify(|r| r.lease = Some((Observed::Vacant, Instant::now())));
    }
    wait_phase(&mut h.state, Phase::Leader).await;
    let took = started.elapsed();
    h.shutdown.cancel();
    bounded(h.task).await;
    took
}

#[tokio::test(start_paused = true)]
async fn a_follower_that_is_not_the_best_successor_waits_half_a_retry_longer() {
    let took = won_after_expiry_with_priority(0, None).await;
    // 450 ms to the expiry, then retry_period / 2 = 150 ms.
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_millis(610),
        "took {took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_read_of_the_expired_lease_does_not_cut_the_wait_short() {
    let took = won_after_expiry_with_priority(0, Some(Duration::from_millis(470))).await;
    // The expiry at 450 ms, then retry_period / 2 = 150 ms, read or no read.
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_millis(610),
        "took {took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_best_successor_contends_at_the_expiry() {
    let took = won_after_expiry_with_priority(30, None).await;
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(460),
        "took {took:?}"
    );
}

fn with_announcements(lease: &FakeLease) -> watch::Sender<Option<Announcement>> {
    let (tx, rx) = watch::channel(None);
    *lease.messages.lock().unwrap() = Some(rx);
    tx
}

#[tokio::test(start_paused = true)]
async fn a_release_reserved_for_another_waits_for_its_acquired() {
    let lease = Arc::new(FakeLease::default());
    let tx = with_announcements(&lease);
    lease.hold_by_other(LEASE * 10);
    let mut h = start(lease.clone(), AfterLoss::Contend);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = lease.attempts.load(Ordering::SeqCst);
    *lease.held.lock().unwrap() = None;
    *lease.reserved.lock().unwrap() = Some(("pod-b".into(), Instant::now() + LEASE));
    tx.send_replace(Some(Announcement::Released {
        holder: "other".into(),
        fence: 100,
        reserved_for: Some("pod-b".into()),
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        lease.attempts.load(Ordering::SeqCst),
        before + 1,
        "one read, no contention"
    );
    assert_eq!(
        h.state.borrow().leader,
        None,
        "nobody leads during the window"
    );
    // The successor's term began.
    *lease.reserved.lock().unwrap() = None;
    *lease.held.lock().unwrap() = Some(("pod-b".into(), 101, Instant::now() + LEASE));
    tx.send_replace(Some(Announcement::Acquired {
        holder: "pod-b".into(),
        fence: 101,
        address: None,
    }));
    let named = h.state.wait_for(|s| s.leader.as_deref() == Some("pod-b"));
    tokio::time::timeout(Duration::from_millis(1), named)
        .await
        .expect("the new leader is shown at once")
        .unwrap();
    let polls = attempts_after(&lease, LEASE / 2).await;
    assert_eq!(polls, before + 2, "one read per announcement, no poll");
    h.shutdown.cancel();
    bounded(h.task).await;
}

#[tokio::test(start_paused = true)]
async fn a_release_reserved_for_another_is_contended_after_its_window() {
    let lease = Arc::new(FakeLease::default());
    let tx = with_announcements(&lease);
    lease.hold_by_other(LEASE * 10);
    let mut h = start(lease.clone(), AfterLoss::Contend);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let window = Duration::from_millis(300); // min(retry_period, 1s)
    *lease.held.lock().unwrap() = None;
    *lease.reserved.lock().unwrap() = Some(("pod-b".into(), Instant::now() + window));
    let released = Instant::now();
    tx.send_replace(Some(Announcement::Released {
        holder: "other".into(),
        fence: 100,
        reserved_for: Some("pod-b".into()),
    }));
    // pod-b never comes: the window passes and anyone may acquire.
    wait_phase(&mut h.state, Phase::Leader).await;
    let took = released.elapsed();
    assert!(
        took >= window && took < window + Duration::from_millis(5),
        "took {took:?}"
    );
    h.shutdown.cancel();
    bounded(h.task).await;
}

#[tokio::test(start_paused = true)]
async fn the_named_successor_contends_at_once() {
    let lease = Arc::new(FakeLease::default());
    let tx = with_announcements(&lease);
    lease.hold_by_other(LEASE * 10);
    let mut h = start(lease.clone(), AfterLoss::Contend);
    tokio::time::sleep(Duration::from_millis(100)).await;
    *lease.held.lock().unwrap() = None;
    *lease.reserved.lock().unwrap() = Some(("me".into(), Instant::now() + LEASE));
    let released = Instant::now();
    tx.send_replace(Some(Announcement::Released {
        holder: "other".into(),
        fence: 100,
        reserved_for: Some("me".into()),
    }));
    wait_phase(&mut h.state, Phase::Leader).await;
    assert!(released.elapsed() < Duration::from_millis(2));
    h.shutdown.cancel();
    bounded(h.task).await;
}

#[tokio::test(start_paused = true)]
async fn a_reservation_read_for_another_is_waited_out() {
    let lease = Arc::new(FakeLease::default());
    *lease.reserved.lock().unwrap() = Some(("pod-b".into(), Instant::now() + LEASE));
    let started = Instant::now();
    let mut h = start(lease.clone(), AfterLoss::Contend);
    wait_phase(&mut h.state, Phase::Leader).await;
    let took = started.elapsed();
    assert!(
        took >= LEASE && took < LEASE + Duration::from_millis(5),
        "took {took:?}"
    );
    assert_eq!(
        lease.attempts.load(Ordering::SeqCst),
        2,
        "no poll inside it"
    );
    h.shutdown.cancel();
    bounded(h.task).await;
}

#[tokio::test(start_paused = true)]
async fn a_forged_acquired_is_read_and_not_believed() {
    let lease = Arc::new(FakeLease::default());
    let tx = with_announcements(&lease);
    lease.hold_by_other(LEASE * 10);
    let mut h = start(lease.clone(), AfterLoss::Contend);
    let leader = h.state.wait_for(|s| s.leader.as_deref() == Some("other"));
    tokio::time::timeout(Duration::from_secs(1), leader)
        .await
        .expect("the leader is shown")
        .unwrap();
    for _ in 0..20 {
        tx.send_replace(Some(Announcement::Acquired {
            holder: "evil".into(),
            fence: u64::MAX,
            address: Some("127.0.0.1:1".into()),
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let s = h.state.borrow();
        assert_eq!(s.leader.as_deref(), Some("other"));
        assert_eq!(s.fence, Some(100));
        assert_eq!(s.leader_address, None);
    }
    // A real release after the forged maximal fence is taken at once.
    *lease.held.lock().unwrap() = None;
    let released = Instant::now();
    tx.send_replace(Some(Announcement::Released {
        holder: "other".into(),
        fence: 100,
        reserved_for: None,
    }));
    wait_phase(&mut h.state, Phase::Leader).await;
    assert!(released.elapsed() < Duration::from_millis(2));
    h.shutdown.cancel();
    bounded(h.task).await;
}

#[tokio::test(start_paused = true)]
async fn a_forged_release_makes_nobody_contend() {
    let lease = Arc::new(FakeLease::default());
    let tx = with_announcements(&lease);
    lease.hold_by_other(LEASE * 10);
    let h = start(lease.clone(), AfterLoss::Contend);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = lease.attempts.load(Ordering::SeqCst);
    let acquires = lease.fence.load(Ordering::SeqCst);
    for reserved_for in [None, Some("me".to_string()), Some("pod-b".to_string())] {
        tx.send_replace(Some(Announcement::Released {
            holder: "other".into(),
            fence: u64::MAX,
            reserved_for,
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tx.send_replace(None);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        lease.attempts.load(Ordering::SeqCst),
        before + 4,
        "one read each"
    );
    assert_eq!(
        lease.fence.load(Ordering::SeqCst),
        acquires,
        "nothing granted"
    );
    assert_eq!(h.state.borrow().leader.as_deref(), Some("other"));
    assert_eq!(h.state.borrow().phase, Phase::Follower);
    h.shutdown.cancel();
    bounded(h.task).await;
}
