//! A sharded elector on one Redis (README, "Shards"): registers as a candidate, computes the
//! assignment from the members, contends for its targets (at an expiry, the target without
//! the owner that let it expire; and for shards vacant a while: `vacancy.rs`), renews every owned shard with one call per `retry_period`, steps down
//! each shard at its own renew deadline, hands a shard to its target once the target has
//! been a member for a heartbeat period, and on shutdown releases each shard reserved for
//! its next target. What it owns is published as a watch, stepped down before released.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::events::NoEvents;
use super::members::Members;
use super::vacancy::{Vacancies, Verdict, Without};
use super::{Assignment, ShardEvents, ShardLeases, ShardRenewal, ShardStepDown, ShardTerm};
use crate::election::{handover_window, AcquireResult, Began, RenewResult, Timing};
use crate::lease::{unix_ms, Acquire, Candidate, Heartbeat, LeaseClient};
use crate::lease::{LeaseError, Reservation};

mod exits;
use exits::next_exit;

/// The shape and timing of a sharded election.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardPolicy {
    /// How many shards (1..=4096).
    pub shards: u32,
    /// The most shards one replica owns (0: no bound but balance).
    pub max_shards_per_replica: u32,
    /// Each shard's lease TTL in Redis (the client's `LeaseSpec::lease_duration`).
    pub lease_duration: Duration,
    /// A shard without a successful renew for this long (from its send) is stepped down.
    pub renew_deadline: Duration,
    /// How often owned shards are renewed, and shards read.
    pub retry_period: Duration,
    /// How long a shard released to its target stays reserved for it.
    pub handover_window: Duration,
    /// At shutdown, release every shard reserved for its next owner (true), or step down
    /// and leave each to expire (false).
    pub release_on_shutdown: bool,
}

impl ShardPolicy {
    /// `shards` shards (1..=4096) with `timing`'s lease, renew deadline and retry period, no
    /// bound but balance, and the election's handover window.
    pub fn new(shards: u32, timing: Timing) -> Self {
        ShardPolicy {
            shards,
            max_shards_per_replica: 0,
            lease_duration: timing.lease_duration,
            renew_deadline: timing.renew_deadline,
            retry_period: timing.retry_period,
            handover_window: handover_window(&timing),
            release_on_shutdown: true,
        }
    }

    /// Whether shutdown releases the shards (true, the default) or leaves them to expire.
    pub fn with_release_on_shutdown(mut self, release: bool) -> Self {
        self.release_on_shutdown = release;
        self
    }

    /// The most shards one replica owns, a hard bound (0: none but balance).
    pub fn with_max_shards_per_replica(mut self, max: u32) -> Self {
        self.max_shards_per_replica = max;
        self
    }
}

/// One shard this replica owns, as published.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedShard {
    /// The shard.
    pub shard: u32,
    /// Its term's fence.
    pub fence: u64,
    /// When the reply that granted it arrived.
    pub acquired_at: SystemTime,
    /// Before this instant nobody else can own it; work for it stops by then.
    pub valid_until: Instant,
    /// `valid_until` on the wall clock, for publishing.
    pub valid_until_wall: SystemTime,
    /// When it leaves the list unless renewed first: its renew deadline, never after
    /// `valid_until`.
    pub step_down_at: Instant,
}

impl OwnedShard {
    fn of(held: &ShardTerm, step_down_at: Instant) -> OwnedShard {
        OwnedShard {
            shard: held.shard,
            fence: held.term.fence,
            acquired_at: held.term.acquired_at,
            valid_until: held.term.valid_until,
            valid_until_wall: held.term.valid_until_wall,
            step_down_at,
        }
    }
}

/// Takes each shard off the list at its `step_down_at`, whatever the elector is awaiting (a
/// Redis that does not answer holds a call for its whole budget).
async fn step_down_on_time(owned: Arc<watch::Sender<Vec<OwnedShard>>>) {
    let mut changed = owned.subscribe();
    loop {
        let next = changed
            .borrow_and_update()
            .iter()
            .map(|o| o.step_down_at)
            .min();
        let at = tokio::time::sleep_until(next.unwrap_or_else(|| Instant::now() + LONG));
        tokio::select! {
            _ = changed.changed() => {}
            _ = at => {
                owned.send_if_modified(|list| {
                    let (now, before) = (Instant::now(), list.len());
                    list.retain(|o| o.step_down_at > now);
                    list.len() != before
                });
            }
        }
    }
}

/// A wait with nothing to wait for.
const LONG: Duration = Duration::from_secs(3600);

/// The elector: see the module documentation. Over one Redis, Sentinel or Cluster
/// ([`LeaseClient`]) or Redlock ([`crate::RedlockClient`]: a majority per shard).
pub struct ShardElector<C = LeaseClient> {
    client: C,
    policy: ShardPolicy,
    owned: Arc<watch::Sender<Vec<OwnedShard>>>,
    held: Vec<ShardTerm>,
    members: Members,
    assignment: Assignment,
    vacancies: Vacancies,
    started_at_ms: u64,
    /// The shards must be read again: the assignment changed, or a message came.
    read_due: bool,
    events: Arc<dyn ShardEvents>,
    /// The health verdict (healthy when not given); unhealthy, it is not a member.
    healthy: Option<watch::Receiver<bool>>,
    /// Each message: hand every shard over and sit out one `lease_duration`.
    yields: Option<mpsc::Receiver<()>>,
    sit_out_until: Option<Instant>,
    /// The work of a shard ended by itself: (shard, fence) (`exits.rs`).
    work_exits: Option<mpsc::Receiver<(u32, u64)>>,
    exited: Vec<(u32, u64)>,
    /// The address its registry entry advertises.
    address: Option<String>,
    /// Whether its registry entry, as last written, says `leader` (it owned a shard).
    entry_leads: bool,
}

impl<C: ShardLeases> ShardElector<C> {
    /// An elector for the shards of `client`'s election, as `client`'s holder.
    pub fn new(client: C, policy: ShardPolicy) -> Self {
        let assignment = Assignment::compute::<&str>(&client.spec().name, policy.shards, &[], 0);
        ShardElector {
            client,
            policy,
            owned: Arc::new(watch::channel(Vec::new()).0),
            held: Vec::new(),
            members: Members::default(),
            assignment,
            vacancies: Vacancies::default(),
            started_at_ms: unix_ms(SystemTime::now()),
            read_due: true,
            events: Arc::new(NoEvents),
            healthy: None,
            yields: None,
            sit_out_until: None,
            work_exits: None,
            exited: Vec::new(),
            address: None,
            entry_leads: false,
        }
    }

    /// The same elector, advertising `address` in its registry entry (as a candidate of one
    /// lease does).
    pub fn with_address(mut self, address: Option<String>) -> Self {
        self.address = address;
        self
    }

    /// The same elector, telling `events` of every shard's term.
    pub fn with_events(mut self, events: Arc<dyn ShardEvents>) -> Self {
        self.events = events;
        self
    }

    /// The same elector, a member only while `healthy` says true: unhealthy, it hands every
    /// shard over (reason `yield`) and takes none.
    pub fn with_health(mut self, healthy: watch::Receiver<bool>) -> Self {
        self.healthy = Some(healthy);
        self
    }

    /// The same elector, yielding at each message of `yields` (SIGUSR1): every shard handed
    /// over (reason `yield`), then no shard taken for one `lease_duration`.
    pub fn with_yields(mut self, yields: mpsc::Receiver<()>) -> Self {
        self.yields = Some(yields);
        self
    }

    /// The shards owned, in order, with their fences and validities: a shard leaves the list
    /// before its release is sent, and before its validity passes.
    pub fn watch(&self) -> watch::Receiver<Vec<OwnedShard>> {
        self.owned.subscribe()
    }

    /// Runs until `shutdown`, then releases every owned shard reserved for its next target
    /// and removes this replica's registry entry.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let guard = tokio::spawn(step_down_on_time(self.owned.clone()));
        let mut releases = self.client.watch_releases();
        let (mut next_beat, mut next_renew) = (Instant::now(), Instant::now());
        let mut next_read = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next_beat {
                self.read_members().await;
                next_beat = now + self.policy.lease_duration / 3;
            }
            self.step_down_late().await;
            self.end_exited().await;
            if now >= next_renew {
                self.renew().await;
                next_renew = now + self.policy.retry_period;
            }
            if self.out() {
                self.step_aside().await;
            } else {
                self.hand_over().await;
                if self.read_due || Instant::now() >= next_read {
                    next_read = self.contend().await;
                }
            }
            self.events.attempted();
            if self.held.is_empty() == self.entry_leads {
                next_beat = Instant::now(); // its state changed: the registry says so at once
            }
            let deadline = self.held.iter().map(|h| self.deadline(h)).min();
            let mut wake = deadline.map_or(next_renew, |d| d.min(next_renew));
            if let Some(until) = self.sit_out_until {
                wake = wake.min(until);
            }
            wake = self.next_move_at().map_or(wake, |at| wake.min(at));
            let was_out = self.out();
            tokio::select! {
                biased;
                // Before a shutdown: an `exit` after the work's end steps it down first.
                exit = next_exit(&mut self.work_exits) => match exit {
                    Some(exit) => self.exited.push(exit),
                    None => self.work_exits = None,
                },
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(wake.min(next_beat).min(next_read)) => {}
                // Any message wakes a read: the watch keeps only the latest, so a release told
                // to this replica may sit under a later `acquired` (its own takes, in a join).
                _ = releases.changed() => self.read_due = true,
                asked = next_yield(&mut self.yields) => {
                    if asked {
                        self.sit_out_until = Some(Instant::now() + self.policy.lease_duration);
                    } else {
                        self.yields = None;
                    }
                }
                alive = health_changed(&mut self.healthy) => {
                    if !alive {
                        self.healthy = None;
                    }
                }
            }
            if self.out() != was_out {
                next_beat = Instant::now(); // the registry says so at once
                self.read_due = true;
            }
        }
        self.leave().await;
        guard.abort();
    }

    /// What Redis answered; an error is told to the events.
    fn answered<T>(&self, reply: Result<T, LeaseError>) -> Option<T> {
        match reply {
            Ok(answer) => {
                self.events.redis_answered();
                Some(answer)
            }
            Err(err) => {
                self.events.redis_failed(&err);
                None
            }
        }
    }

    /// Not a member now: unhealthy, or sitting out after a yield.
    fn out(&mut self) -> bool {
        if self.sit_out_until.is_some_and(|t| Instant::now() >= t) {
            self.sit_out_until = None;
        }
        let unhealthy = self.healthy.as_ref().is_some_and(|h| !*h.borrow());
        unhealthy || self.sit_out_until.is_some()
    }

    fn me(&self) -> &str {
        &self.client.spec().holder
    }

    fn budget(&self) -> Duration {
        self.client.default_budget()
    }

    /// When a held shard is stepped down unless renewed: its renew deadline, never after its
    /// validity.
    fn deadline(&self, held: &ShardTerm) -> Instant {
        (held.term.last_sent + self.policy.renew_deadline).min(held.term.valid_until)
    }

    /// A held shard as published, leaving the list at its deadline.
    fn owned_of(&self, held: &ShardTerm) -> OwnedShard {
        OwnedShard::of(held, self.deadline(held))
    }

    /// Publishes the held shards whose deadline has not passed.
    fn publish(&self) {
        let now = Instant::now();
        let listed = self.held.iter().map(|h| self.owned_of(h));
        let mut owned: Vec<OwnedShard> = listed.filter(|o| o.step_down_at > now).collect();
        owned.sort_by_key(|o| o.shard);
        self.owned.send_replace(owned);
    }

    /// Refreshes this replica's registry entry, reads the members and recomputes the
    /// assignment. On an error the last assignment stands.
    async fn read_members(&mut self) {
        self.entry_leads = !self.held.is_empty();
        let entry = Candidate {
            identity: self.me().to_owned(),
            state: if self.entry_leads {
                "leader"
            } else {
                "follower"
            }
            .into(),
            healthy: self.healthy.as_ref().is_none_or(|h| *h.borrow()),
            contending: self.sit_out_until.is_none(),
            priority: 0,
            address: self.address.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            started_at_ms: self.started_at_ms,
            healthy_since_ms: None,
            seen_at_ms: 0,
        };
        let budget = self.budget();
        let beat = self.client.heartbeat(Heartbeat::Write(&entry), budget);
        let Some(roster) = self.answered(beat.await) else {
            return;
        };
        self.events.registered(roster.registration);
        self.events.candidates_read(&roster);
        let window = self.policy.lease_duration.as_millis() as u64 / 2;
        let since = roster.now_ms.saturating_sub(window);
        let read = self.client.candidates_seen_since(since, budget).await;
        let Some(fresh) = self.answered(read) else {
            return;
        };
        let members = self.members.update(&roster, &fresh);
        let (name, p) = (&self.client.spec().name, &self.policy);
        let assignment = Assignment::compute(name, p.shards, &members, p.max_shards_per_replica);
        self.read_due |= assignment != self.assignment;
        self.assignment = assignment;
    }

    /// One renew of every held shard; a shard reported lost is stepped down at once.
    async fn renew(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let budget = self.budget();
        let deadlines: Vec<Instant> = self.held.iter().map(|h| self.deadline(h)).collect();
        let sent = Instant::now();
        let renewed = self.client.renew_shards(&mut self.held, budget).await;
        let Some(results) = self.answered(renewed) else {
            self.events.renew_result(RenewResult::Error, sent.elapsed());
            return; // each shard keeps its own deadline
        };
        let found = |want: fn(&ShardRenewal) -> bool| results.iter().any(want);
        let result = if found(|r| matches!(r, ShardRenewal::Lost)) {
            RenewResult::Lost
        } else if found(|r| !matches!(r, ShardRenewal::Renewed)) {
            RenewResult::Error // unconfirmed (Redlock: no majority either way)
        } else {
            RenewResult::Ok
        };
        self.events.renew_result(result, sent.elapsed());
        // A renew answered after a shard's deadline does not bring it back: it was
        // stepped down then (`step_down_on_time`); its term ends here and is released.
        let now = Instant::now();
        let (mut kept, mut lost, mut late) = (Vec::new(), Vec::new(), Vec::new());
        let mut unconfirmed = Vec::new(); // each keeps its validity and deadline
        let renewed = std::mem::take(&mut self.held).into_iter().zip(results);
        for ((held, result), deadline) in renewed.zip(deadlines) {
            match result {
                ShardRenewal::Renewed if deadline > now => kept.push(held),
                ShardRenewal::Renewed => late.push(held),
                ShardRenewal::Lost => lost.push(held),
                _ => unconfirmed.push(held),
            }
        }
        let renewed = kept.len();
        self.held = kept;
        self.held.append(&mut unconfirmed);
        self.publish();
        for held in &self.held[..renewed] {
            self.events.renewed(&self.owned_of(held));
        }
        self.ended(&lost, ShardStepDown::Lost);
        self.ended(&late, ShardStepDown::Deadline);
        for held in &late {
            let _ = self.release(held, None).await;
        }
    }

    /// Tells of each term of `ended` that it ended for `reason`.
    fn ended(&self, ended: &[ShardTerm], reason: ShardStepDown) {
        for held in ended {
            self.events.stepped_down(&self.owned_of(held), reason);
        }
    }

    /// Tells of each shard of `ended` that it ended for `reason` (so the work of all of them
    /// stops at once), then releases each reserved for its target as soon as its own work
    /// has stopped, all at once (one after another, the last would wait for every other's
    /// round trip).
    async fn end_and_release(&self, ended: &[(ShardTerm, Option<String>)], reason: ShardStepDown) {
        for (held, _) in ended {
            self.events.stepped_down(&self.owned_of(held), reason);
        }
        let each = ended.iter().map(|(held, to)| async move {
            self.events.work_stopped(&self.owned_of(held)).await;
            let _ = self.release(held, to.as_deref()).await;
        });
        join_all(each).await;
    }

    /// Steps down every shard whose renew deadline has passed (published, told), then tries
    /// to release each (it may still be this term's in Redis).
    async fn step_down_late(&mut self) {
        let now = Instant::now();
        let before = self.held.len();
        let deadlines: Vec<Instant> = self.held.iter().map(|h| self.deadline(h)).collect();
        let (kept, late): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .zip(deadlines)
            .partition(|(_, d)| *d > now);
        self.held = kept.into_iter().map(|(h, _)| h).collect();
        if self.held.len() != before {
            self.publish();
            let late: Vec<ShardTerm> = late.into_iter().map(|(h, _)| h).collect();
            self.ended(&late, ShardStepDown::Deadline);
            for h in &late {
                let _ = self.release(h, None).await;
            }
        }
    }

    /// Hands each held shard whose target is another member, settled for a heartbeat
    /// period, to that target: stepped down (published) first, then released reserved for it.
    /// The members are read again first (a leaver may have handed this replica a shard that
    /// an older read still gives the leaver).
    async fn hand_over(&mut self) {
        if self.moving().is_empty() {
            return;
        }
        self.read_members().await;
        let moving = self.moving();
        if moving.is_empty() {
            return;
        }
        self.held
            .retain(|h| !moving.iter().any(|(m, _)| m.shard == h.shard));
        self.publish();
        self.end_and_release(&moving, ShardStepDown::Rebalance)
            .await;
    }

    /// The held shards whose target is another member, settled for a heartbeat period, each
    /// with it; and those no member is assigned that this replica gives up (released, not
    /// reserved) to make room under `max_shards_per_replica` for its own targets.
    fn moving(&self) -> Vec<(ShardTerm, Option<String>)> {
        let settle = self.policy.lease_duration / 3;
        let me = self.me();
        let target = |h: &ShardTerm| {
            let target = self.assignment.target(h.shard)?;
            (target != me && self.members.settled(target, settle)).then(|| target.to_owned())
        };
        let moving = self
            .held
            .iter()
            .filter_map(|h| Some((h.clone(), Some(target(h)?))));
        let max = self.policy.max_shards_per_replica as usize;
        let over = match max {
            0 => 0,
            max => (self.held.len() + self.awaited()).saturating_sub(max),
        };
        let unassigned = self
            .held
            .iter()
            .filter(|h| self.assignment.target(h.shard).is_none());
        let room = unassigned.take(over);
        moving.chain(room.map(|h| (h.clone(), None))).collect()
    }

    /// How many of this replica's targets it does not hold: under `max_shards_per_replica`
    /// it keeps room for them rather than own shards no member is assigned (README, "Shards").
    fn awaited(&self) -> usize {
        let mine = self.assignment.shards_of(self.me());
        let held = |s: &u32| self.held.iter().any(|h| h.shard == *s);
        mine.iter().filter(|s| !held(s)).count()
    }

    /// When the next hand-over falls due: the earliest a held shard's target, another member
    /// not settled yet, will have been one for a heartbeat period.
    fn next_move_at(&self) -> Option<Instant> {
        let (settle, now) = (self.policy.lease_duration / 3, Instant::now());
        let due = |h: &ShardTerm| {
            let target = self
                .assignment
                .target(h.shard)
                .filter(|t| *t != self.me())?;
            self.members
                .settles_at(target, settle)
                .filter(|at| *at > now)
        };
        self.held.iter().filter_map(due).min()
    }

    async fn release(&self, held: &ShardTerm, to: Option<&str>) -> Result<bool, LeaseError> {
        let reservation = to.map(|successor| Reservation {
            successor,
            window: self.policy.handover_window,
        });
        let budget = self.budget();
        self.client.release_shard(held, reservation, budget).await
    }

    /// Reads every shard and tries those that are this replica's to take (`Vacancies`): its
    /// targets when vacant, any reserved for it, at an expiry those whose target is this
    /// replica without the owner that let it expire, and any vacant long enough; all of them
    /// at once. A shard whose lease ran out by the last read and that is this replica's at
    /// its expiry is tried in the same round trip as the read, not after it. Returns when to
    /// read again (unless a message or a new assignment comes first): the earliest a shard
    /// not held here can become free as this read saw it, or be taken by anyone; a
    /// `retry_period` after a failed read.
    async fn contend(&mut self) -> Instant {
        let (shards, budget) = (self.policy.shards, self.budget());
        self.read_due = false;
        let sent = Instant::now();
        let (name, p) = (&self.client.spec().name, &self.policy);
        let mut without = Without::new(&self.assignment, name, p.max_shards_per_replica);
        let expired = self
            .vacancies
            .expired(sent, self.me(), |s, h| without.target(s, h));
        // Kept for the read's verdicts below: each assignment without a dead owner is
        // computed once per round (1 ms at 1,024 shards), not twice.
        let cache = without.into_cache();
        let expired = self.within_bound(expired);
        let read = self.client.read_shards(shards, budget);
        let (read, early) = tokio::join!(read, self.try_shards(&expired, budget));
        let mut fresh = self.took(early);
        let Some(seen) = self.answered(read) else {
            self.began(&fresh);
            return sent + self.policy.retry_period;
        };
        let now = Instant::now();
        let mut next = now + self.policy.lease_duration;
        let (name, p) = (&self.client.spec().name, &self.policy);
        let mut without =
            Without::new(&self.assignment, name, p.max_shards_per_replica).with_cache(cache);
        let mut tried = Vec::new();
        for (shard, seen) in (0..shards).zip(&seen) {
            if self.held.iter().any(|h| h.shard == shard) {
                continue;
            }
            let me = &self.client.spec().holder;
            let judged = self.vacancies.judge(
                (shard, seen),
                (sent, now),
                me,
                p.retry_period,
                &mut |id: &str| without.target(shard, id),
            );
            match judged {
                Verdict::Take => tried.push(shard),
                Verdict::Wait(at) => {
                    next = next.min(at.unwrap_or(now + p.retry_period / 2));
                }
            }
        }
        let tried = self.within_bound(tried);
        let replies = self.try_shards(&tried, budget).await;
        let taken = self.took(replies);
        if taken.len() < tried.len() {
            next = next.min(Instant::now() + self.policy.retry_period / 2);
        }
        fresh.extend(taken);
        self.began(&fresh);
        next
    }

    /// `shards` cut to the room `max_shards_per_replica` leaves beside the shards held, this
    /// replica's targets first, others only in the room its targets not held yet leave: a
    /// hard bound, vacant shards included (with `shards: K` and 1 it is a semaphore). Without
    /// it, only balance bounds what a replica takes.
    fn within_bound(&self, mut shards: Vec<u32>) -> Vec<u32> {
        let max = self.policy.max_shards_per_replica as usize;
        if max > 0 {
            let me = self.me();
            let mine = |s: &u32| self.assignment.target(*s) == Some(me);
            shards.sort_by_key(|s| (!mine(s), *s));
            let room = max.saturating_sub(self.held.len());
            let targets = shards.iter().filter(|s| mine(s)).count().min(room);
            shards.truncate(targets + room.saturating_sub(self.awaited()));
        }
        shards
    }

    /// Tries every shard of `shards` at once.
    async fn try_shards(&self, shards: &[u32], budget: Duration) -> Vec<(u32, Acquire)> {
        let tries = shards
            .iter()
            .map(|&s| self.client.try_acquire_shard(s, budget));
        let replies = join_all(tries).await;
        for reply in &replies {
            self.events.acquire_result(match reply {
                Ok(Acquire::Acquired(_)) => AcquireResult::Acquired,
                Ok(Acquire::Denied(_)) => AcquireResult::Held,
                Err(_) => AcquireResult::Error,
            });
        }
        let answered = shards.iter().zip(replies);
        answered.filter_map(|(s, r)| Some((*s, r.ok()?))).collect()
    }

    /// Holds each shard granted in `replies`; returns them, each with how its term began.
    fn took(&mut self, replies: Vec<(u32, Acquire)>) -> Vec<(u32, Began)> {
        let mut taken = Vec::new();
        for (shard, reply) in replies {
            if let Acquire::Acquired(term) = reply {
                let how = self.vacancies.taken(shard);
                self.held.push(ShardTerm { shard, term });
                taken.push((shard, how));
            }
        }
        taken
    }

    /// Publishes the shards of `fresh` (just taken) and tells of each term begun.
    fn began(&self, fresh: &[(u32, Began)]) {
        if fresh.is_empty() {
            return;
        }
        self.publish();
        for (shard, how) in fresh {
            let Some(held) = self.held.iter().find(|h| h.shard == *shard) else {
                continue;
            };
            let owned = self.owned_of(held);
            self.events.began(&owned, *how);
            self.events.acquired(&owned);
        }
    }

    /// On shutdown: every held shard stepped down (published), the registry entry removed (so
    /// that no member's next read makes this replica a target), then each shard released
    /// reserved for its target computed without this replica (without
    /// `release_on_shutdown`: left to expire once its work has stopped).
    async fn leave(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.publish();
        let budget = self.budget();
        let _ = self.client.heartbeat(Heartbeat::Remove, budget).await;
        if !self.policy.release_on_shutdown {
            self.ended(&held, ShardStepDown::Shutdown);
            let stopped = held
                .iter()
                .map(|h| self.events.work_stopped(&self.owned_of(h)));
            join_all(stopped).await;
            return;
        }
        let ended = self.with_next_targets(held);
        self.end_and_release(&ended, ShardStepDown::Shutdown).await;
    }

    /// Out (unhealthy or sitting out): every held shard stepped down (published), the
    /// registry told at once, then each released reserved for its target without this replica.
    async fn step_aside(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        self.publish();
        self.read_members().await;
        let ended = self.with_next_targets(held);
        self.end_and_release(&ended, ShardStepDown::Yield).await;
    }

    /// Each of `held` with its target in the assignment without this replica.
    fn with_next_targets(&self, held: Vec<ShardTerm>) -> Vec<(ShardTerm, Option<String>)> {
        let (name, max) = (&self.client.spec().name, self.policy.max_shards_per_replica);
        let mut next = Without::new(&self.assignment, name, max);
        let with_target = |h: ShardTerm| {
            let to = next.target(h.shard, self.me());
            (h, to)
        };
        held.into_iter().map(with_target).collect()
    }
}

/// The next yield asked for: true, or false once nobody can ask any more (never without a
/// channel).
async fn next_yield(yields: &mut Option<mpsc::Receiver<()>>) -> bool {
    match yields {
        Some(rx) => rx.recv().await.is_some(),
        None => std::future::pending().await,
    }
}

/// The next change of health: true, or false once the checks have ended (never without).
async fn health_changed(healthy: &mut Option<watch::Receiver<bool>>) -> bool {
    match healthy {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}
