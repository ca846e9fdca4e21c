//! Who may take a shard that is free (README, "Shards"; docs/protocol.md, "Shards"): its
//! target at once; at an expiry (its owner died, or let it go without a reservation) the
//! target computed without that owner at once and the others after `retry_period / 2`; any
//! other vacancy anybody after `retry_period`. Remembers, per shard, who held it at the last
//! read, since when it has been vacant, and how a term taken now would begin.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::Assignment;
use crate::election::{Began, Origin};
use crate::lease::Observed;

/// A shard seen vacant: since when, and who held it at the read before.
#[derive(Debug)]
struct Vacancy {
    since: Instant,
    after: Option<String>,
}

/// What the reads have shown of the shards this replica does not hold.
#[derive(Debug, Default)]
pub(crate) struct Vacancies {
    /// Each shard's holder at the last read that saw one, and when its lease runs out by
    /// that read (`None`: no TTL).
    held_by: HashMap<u32, (String, Option<Instant>)>,
    vacant: HashMap<u32, Vacancy>,
    /// Shards this replica does not take before the given instants (its work there ended).
    resting: HashMap<u32, Instant>,
    /// How each shard became free, as the reads showed it (`leaderd_leader_transitions_total`).
    origins: HashMap<u32, Origin>,
}

/// Whether to try a shard now, or when it may be tried next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Take,
    /// Not now; it may be free at this instant (`None`: not before a message or a read).
    Wait(Option<Instant>),
}

impl Vacancies {
    /// Takes in `seen`, shard `shard` as a read sent at `sent` saw it (at `now`), and says
    /// whether `me` tries it. `without` gives shard `shard`'s target without one identity.
    pub(crate) fn judge(
        &mut self,
        (shard, seen): (u32, &Observed),
        (sent, now): (Instant, Instant),
        me: &str,
        retry_period: Duration,
        without: &mut impl FnMut(&str) -> Option<String>,
    ) -> Verdict {
        let expiry = seen
            .holder()
            .and_then(|h| h.remaining)
            .map(|left| sent + left);
        let origin = self.origins.entry(shard).or_default();
        origin.learn(seen, now, expiry, me);
        let verdict = self.free((shard, seen), (sent, now), me, retry_period, without);
        match self.resting.get(&shard).copied() {
            Some(until) if until > now && verdict == Verdict::Take => Verdict::Wait(Some(until)),
            Some(until) if until <= now => {
                self.resting.remove(&shard);
                verdict
            }
            _ => verdict,
        }
    }

    /// Shard `shard` is not taken by this replica before `until`.
    pub(crate) fn rest(&mut self, shard: u32, until: Instant) {
        self.resting.insert(shard, until);
    }

    /// `judge` without the rests.
    fn free(
        &mut self,
        (shard, seen): (u32, &Observed),
        (sent, now): (Instant, Instant),
        me: &str,
        retry_period: Duration,
        without: &mut impl FnMut(&str) -> Option<String>,
    ) -> Verdict {
        let Observed::Vacant = seen else {
            self.vacant.remove(&shard);
            match seen.holder() {
                Some(h) => {
                    let ends = h.remaining.map(|left| sent + left);
                    self.held_by.insert(shard, (h.holder.clone(), ends))
                }
                None => self.held_by.remove(&shard),
            };
            if let Observed::Reserved { for_identity, .. } = seen {
                if for_identity == me {
                    return Verdict::Take;
                }
            }
            let free_at = seen
                .remaining()
                .map(|left| sent + left + Duration::from_millis(1));
            return Verdict::Wait(free_at);
        };
        let vacancy = self.vacant.entry(shard).or_insert_with(|| Vacancy {
            since: now,
            after: self.held_by.remove(&shard).map(|(holder, _)| holder),
        });
        let (target, wait) = match &vacancy.after {
            Some(owner) if owner != me => (without(owner), retry_period / 2),
            _ => (without(""), retry_period),
        };
        let anyone_at = vacancy.since + wait;
        if target.as_deref() == Some(me) || now >= anyone_at {
            Verdict::Take
        } else {
            Verdict::Wait(Some(anyone_at))
        }
    }

    /// The shards whose lease, held by another at the last read, has run out by `now` and
    /// whose target without that holder is `me` (`target(shard, holder)`): tried at once, in
    /// the same round trip as the next read, rather than after it.
    pub(crate) fn expired(
        &self,
        now: Instant,
        me: &str,
        mut target: impl FnMut(u32, &str) -> Option<String>,
    ) -> Vec<u32> {
        let ran_out = self
            .held_by
            .iter()
            .filter(|(_, (holder, ends))| holder != me && ends.is_some_and(|at| at <= now));
        let mut mine: Vec<u32> = ran_out
            .filter(|(shard, (holder, _))| target(**shard, holder).as_deref() == Some(me))
            .map(|(shard, _)| *shard)
            .filter(|shard| self.resting.get(shard).is_none_or(|until| *until <= now))
            .collect();
        mine.sort_unstable();
        mine
    }

    /// Shard `shard` was taken by this replica: how its term began (as with one lease:
    /// `first` when nothing was known of an earlier term).
    pub(crate) fn taken(&mut self, shard: u32) -> Began {
        self.vacant.remove(&shard);
        self.held_by.remove(&shard);
        self.origins
            .remove(&shard)
            .map_or(Began::First, |o| o.began)
    }
}

/// Shard targets without one identity (`""`: `assignment` as it is), each assignment
/// computed once.
pub(crate) struct Without<'a> {
    assignment: &'a Assignment,
    name: &'a str,
    max_per_member: u32,
    computed: HashMap<String, Assignment>,
}

impl<'a> Without<'a> {
    pub(crate) fn new(assignment: &'a Assignment, name: &'a str, max_per_member: u32) -> Self {
        Without {
            assignment,
            name,
            max_per_member,
            computed: HashMap::new(),
        }
    }

    /// The same, with the assignments already computed by another `Without` of this
    /// assignment ([`Without::into_cache`]).
    pub(crate) fn with_cache(mut self, computed: HashMap<String, Assignment>) -> Self {
        self.computed = computed;
        self
    }

    /// The assignments computed so far, each without one identity, for a later `Without`
    /// of the same assignment.
    pub(crate) fn into_cache(self) -> HashMap<String, Assignment> {
        self.computed
    }

    /// Shard `shard`'s target in the assignment without `identity`.
    pub(crate) fn target(&mut self, shard: u32, identity: &str) -> Option<String> {
        let a = self.assignment;
        if identity.is_empty() || !a.members().iter().any(|m| m == identity) {
            return a.target(shard).map(str::to_owned);
        }
        let (name, max) = (self.name, self.max_per_member);
        let without = self.computed.entry(identity.to_owned()).or_insert_with(|| {
            let others: Vec<&String> = a.members().iter().filter(|m| *m != identity).collect();
            Assignment::compute(name, a.shards(), &others, max)
        });
        without.target(shard).map(str::to_owned)
    }
}

#[cfg(test)]
#[path = "vacancy_tests.rs"]
mod tests;
