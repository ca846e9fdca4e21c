//! How a term began, as the follower that won it last knew the lease: the `began` label of
//! `leaderd_leader_transitions_total` (README, "Metrics"). Counted on the replica whose
//! term begins, so a graceful step-down shows even when the old leader exits at once.

use tokio::time::Instant;

use crate::lease::Observed;

/// How the lease became free for the term that begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Began {
    /// Nothing was known of an earlier term: the replica had just started, or just ended a
    /// term of its own, and found the lease free.
    First,
    /// The leader released the lease (a release announced, or the lease seen vacant before
    /// its expiry), or a reservation for another replica lapsed.
    Release,
    /// The lease seen held expired: its leader crashed, hung or lost Redis.
    Expiry,
    /// The leader released the lease reserved for this replica (a graceful shutdown, yield,
    /// `leaderd handover` or preemption with this replica as successor).
    Handover,
    /// The election's quarantine passed: a brand-new election or a Redis that lost its data.
    Quarantine,
}

impl Began {
    /// Every value, in the order the metrics list them.
    pub const ALL: [Began; 5] = [
        Began::First,
        Began::Release,
        Began::Expiry,
        Began::Handover,
        Began::Quarantine,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Began::First => "first",
            Began::Release => "release",
            Began::Expiry => "expiry",
            Began::Handover => "handover",
            Began::Quarantine => "quarantine",
        }
    }
}

/// What a follower knows of how the lease would become free: updated at everything it
/// learns, kept while Redis cannot be read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    /// How a term won now would have begun.
    pub(crate) began: Began,
    /// When the lease last seen held expires (`None`: none seen, or no TTL).
    held_until: Option<Instant>,
}

impl Default for Origin {
    fn default() -> Self {
        Origin {
            began: Began::First,
            held_until: None,
        }
    }
}

impl Origin {
    /// Takes in `seen`, learned at `at`, with `expiry` (when it expires, if known). A vacancy
    /// learned before the held lease's expiry was a release; after it, an expiry.
    pub(crate) fn learn(
        &mut self,
        seen: &Observed,
        at: Instant,
        expiry: Option<Instant>,
        me: &str,
    ) {
        let (began, held_until) = match seen {
            Observed::Held(_) => (Began::Expiry, expiry),
            Observed::Reserved { for_identity, .. } if for_identity == me => {
                (Began::Handover, None)
            }
            Observed::Reserved { .. } => (Began::Release, None),
            Observed::Quarantined { .. } => (Began::Quarantine, None),
            Observed::Vacant if self.held_until.is_some_and(|until| at < until) => {
                (Began::Release, None)
            }
            Observed::Vacant => (self.began, self.held_until),
        };
        (self.began, self.held_until) = (began, held_until);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::lease::Holder;

    fn held(secs: u64) -> Observed {
        Observed::Held(Holder {
            holder: "a".into(),
            fence: 7,
            remaining: Some(Duration::from_secs(secs)),
            address: None,
        })
    }

    #[test]
    fn a_vacancy_before_the_expiry_is_a_release_after_it_an_expiry() {
        let t0 = Instant::now();
        let until = Some(t0 + Duration::from_secs(3));
        let mut origin = Origin::default();
        assert_eq!(origin.began, Began::First);
        origin.learn(&held(3), t0, until, "b");
        assert_eq!(origin.began, Began::Expiry);
        let mut early = origin;
        early.learn(&Observed::Vacant, t0 + Duration::from_secs(1), None, "b");
        assert_eq!(early.began, Began::Release);
        origin.learn(&Observed::Vacant, t0 + Duration::from_secs(4), None, "b");
        assert_eq!(origin.began, Began::Expiry);
    }

    #[test]
    fn a_reservation_for_me_is_a_handover_for_another_a_release() {
        let t0 = Instant::now();
        let reserved = |who: &str| Observed::Reserved {
            for_identity: who.into(),
            fence: 7,
            remaining: Some(Duration::from_secs(1)),
        };
        let mut origin = Origin::default();
        origin.learn(&reserved("b"), t0, None, "b");
        assert_eq!(origin.began, Began::Handover);
        origin.learn(&reserved("c"), t0, None, "b");
        assert_eq!(origin.began, Began::Release);
        let quarantined = Observed::Quarantined {
            fence: 7,
            remaining: None,
        };
        origin.learn(&quarantined, t0, None, "b");
        assert_eq!(origin.began, Began::Quarantine);
        origin.learn(&Observed::Vacant, t0, None, "b");
        assert_eq!(
            origin.began,
            Began::Quarantine,
            "a vacancy changes nothing known"
        );
    }
}
