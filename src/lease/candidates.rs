//! The candidates of an election (README "Candidates"): each replica's entry in
//! `<prefix>{<name>}:candidates`, written by its heartbeat (`lua/candidate.lua`, called by
//! `registry`) with the Redis server's time, and read back live and checked.

use tokio::time::Instant;

use super::Observed;

/// One registered candidate, as its last heartbeat wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// Its identity (`LeaseSpec::holder`).
    pub identity: String,
    /// Its state as in the status document (`leader`, `follower`, ...).
    pub state: String,
    /// Whether its service passes its health check.
    pub healthy: bool,
    /// False while it sits out (after a yield, or a term it lost) and will not take the
    /// lease: no successor then.
    pub contending: bool,
    /// Its priority as a successor, 0..=1000.
    pub priority: u32,
    /// The address it advertises, if any.
    pub address: Option<String>,
    /// The version of leaderd it runs.
    pub version: String,
    /// When it started (wall clock, ms).
    pub started_at_ms: u64,
    /// Since when it has been healthy without a break (Redis time, ms), if it is.
    pub healthy_since_ms: Option<u64>,
    /// Its last heartbeat (Redis server time, ms).
    pub seen_at_ms: u64,
}

/// The live candidates, with the Redis server time they were read at, and the lease as the
/// same read saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Roster {
    /// Redis server time of the read (ms).
    pub now_ms: u64,
    /// The candidates not older than a lease duration, in no particular order: at most
    /// [`MAX_CANDIDATES`], the lease holder's entry and the reader's own besides. Between
    /// changes a writing heartbeat reads only what changed, so the others' `seen_at_ms` is
    /// the one of the last full read.
    pub candidates: Vec<Candidate>,
    /// The lease as the heartbeat read it (on Redlock, as a majority sees it), with when the
    /// heartbeat was sent: its `remaining` counts from then, so a follower that takes it as
    /// a read of the lease never thinks it expires later than it does. `None` when unknown.
    pub lease: Option<(Observed, Instant)>,
    /// What a writing heartbeat found about this replica's own entry.
    pub registration: Registration,
}

/// What a writing heartbeat found about this replica's own entry (README "Candidates").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Registration {
    /// The registry holds [`MAX_CANDIDATES`] live candidates already: this replica's entry
    /// was not written (it may still lead).
    pub refused: bool,
    /// A live entry of this identity written by another process was found.
    pub conflict: bool,
}

/// Live candidates a registry holds; past that a new one is refused (`lua/candidate.lua`).
pub const MAX_CANDIDATES: usize = 1000;

/// The longest entry a reader decodes, in bytes (`lua/candidate.lua`'s `MAX_ENTRY`).
const MAX_ENTRY: usize = 1024;

/// The candidates as last read from one Redis, with the registry's version then, and this
/// client's instance id (random per client: two processes of one identity tell each other
/// apart by it).
pub(crate) struct Cache {
    instance: String,
    pub(super) known: std::sync::Mutex<Option<Known>>,
}

/// A list of candidates and the registry version it was read at.
pub(super) struct Known {
    pub(super) version: String,
    pub(super) candidates: Vec<Candidate>,
}

impl Cache {
    /// This client's instance id, written in its entry.
    pub(super) fn instance(&self) -> &str {
        &self.instance
    }
}

impl Default for Cache {
    fn default() -> Self {
        let mut instance = crate::lease::new_token();
        instance.truncate(16);
        Cache {
            instance,
            known: std::sync::Mutex::new(None),
        }
    }
}

/// What a heartbeat does with this replica's entry.
#[derive(Debug, Clone, Copy)]
pub enum Heartbeat<'a> {
    /// Only read the candidates.
    Read,
    /// Write (refresh) this entry, then read.
    Write(&'a Candidate),
    /// Remove this replica's entry (clean shutdown), then read.
    Remove,
}

impl Candidate {
    /// The entry of `identity`, a healthy follower that contends, of priority 0, running
    /// this version; set the other fields before writing it.
    pub fn new(identity: &str) -> Self {
        Candidate {
            identity: identity.to_owned(),
            state: "follower".to_owned(),
            healthy: true,
            contending: true,
            priority: 0,
            address: None,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_at_ms: 0,
            healthy_since_ms: None,
            seen_at_ms: 0,
        }
    }
}

impl Candidate {
    pub(super) fn to_json(&self) -> String {
        serde_json::json!({
            "state": self.state,
            "healthy": self.healthy,
            "contending": self.contending,
            "priority": self.priority,
            "address": self.address,
            "version": self.version,
            "started_at_ms": self.started_at_ms,
            "healthy_since_ms": self.healthy_since_ms,
        })
        .to_string()
    }

    /// The entry `text` of `identity` when it is what leaderd writes (an entry of at most
    /// [`MAX_ENTRY`] bytes, each field of its type and range), else `None`.
    pub(crate) fn from_json(identity: String, text: &str) -> Option<Candidate> {
        use serde_json::Value;
        if text.len() > MAX_ENTRY || identity.is_empty() || identity.len() > 256 {
            return None;
        }
        let v: Value = serde_json::from_str(text).ok()?;
        let absent = |k: &str| v.get(k).is_none_or(Value::is_null);
        // An integer as cjson writes it (a whole double is one too).
        let num = |k: &str| -> Option<u64> {
            let x = v.get(k)?;
            x.as_u64().or_else(|| {
                let f = x.as_f64()?;
                (f >= 0.0 && f.fract() == 0.0 && f < 9.0e15).then_some(f as u64)
            })
        };
        let string = |k: &str, max: usize| {
            let s = v.get(k)?.as_str()?;
            (s.len() <= max).then(|| s.to_string())
        };
        let flag = |k: &str| v.get(k).and_then(Value::as_bool);
        let optional = |k: &str, ok: bool| absent(k) || ok;
        let fine = optional("contending", flag("contending").is_some())
            && optional("address", string("address", 256).is_some())
            && optional("healthy_since_ms", num("healthy_since_ms").is_some())
            && optional("instance", string("instance", 64).is_some());
        if !fine {
            return None;
        }
        let state = string("state", 32).filter(|s| !s.is_empty())?;
        let priority = num("priority").filter(|p| *p <= 1000)? as u32;
        Some(Candidate {
            identity,
            state,
            healthy: flag("healthy")?,
            contending: flag("contending").unwrap_or(true),
            priority,
            address: string("address", 256),
            version: string("version", 64)?,
            started_at_ms: num("started_at_ms")?,
            healthy_since_ms: num("healthy_since_ms"),
            seen_at_ms: num("seen_at_ms")?,
        })
    }

    /// Whether this entry was refreshed within `ttl_ms` before `now_ms` and not after it.
    pub(crate) fn live_at(&self, now_ms: u64, ttl_ms: u64) -> bool {
        self.seen_at_ms <= now_ms && now_ms - self.seen_at_ms < ttl_ms
    }
}

impl Roster {
    /// Merges rosters read from several nodes (Redlock): per identity the freshest entry;
    /// refused or in conflict when any node says so; the lease is `lease`, summarized by the
    /// caller over the nodes.
    pub(crate) fn merge(rosters: Vec<Roster>, lease: Option<(Observed, Instant)>) -> Roster {
        let mut out = Roster {
            lease,
            ..Roster::default()
        };
        for r in rosters {
            out.now_ms = out.now_ms.max(r.now_ms);
            out.registration.refused |= r.registration.refused;
            out.registration.conflict |= r.registration.conflict;
            for c in r.candidates {
                match out.candidates.iter_mut().find(|x| x.identity == c.identity) {
                    Some(x) if x.seen_at_ms < c.seen_at_ms => *x = c,
                    Some(_) => {}
                    None => out.candidates.push(c),
                }
            }
        }
        out
    }

    /// The best successor: a healthy candidate other than `leader` that is not sitting out,
    /// highest priority first, then the smallest identity.
    pub fn best_successor(&self, leader: Option<&str>) -> Option<&Candidate> {
        self.candidates
            .iter()
            .filter(|c| c.healthy && c.contending && Some(c.identity.as_str()) != leader)
            .min_by(|a, b| {
                b.priority
                    .cmp(&a.priority)
                    .then_with(|| a.identity.cmp(&b.identity))
            })
    }
}

#[cfg(test)]
impl Candidate {
    /// A follower entry for unit tests: everything else zero, empty or `"v"`.
    pub(crate) fn example(identity: &str, healthy: bool, priority: u32) -> Candidate {
        Candidate {
            identity: identity.into(),
            state: "follower".into(),
            healthy,
            contending: true,
            priority,
            address: None,
            version: "v".into(),
            started_at_ms: 0,
            healthy_since_ms: None,
            seen_at_ms: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, healthy: bool, priority: u32, seen: u64) -> Candidate {
        Candidate {
            started_at_ms: 1,
            seen_at_ms: seen,
            ..Candidate::example(id, healthy, priority)
        }
    }

    #[test]
    fn best_successor_is_healthy_highest_priority_then_smallest_identity() {
        let r = Roster {
            now_ms: 0,
            candidates: vec![c("c", true, 5, 1), c("b", true, 5, 1), c("a", false, 9, 1)],
            lease: None,
            registration: Default::default(),
        };
        assert_eq!(r.best_successor(None).unwrap().identity, "b");
        assert_eq!(r.best_successor(Some("b")).unwrap().identity, "c");
        let entry = c("x", true, 7, 0);
        let back = Candidate::from_json(
            "x".into(),
            &entry.to_json().replace('}', ",\"seen_at_ms\":3}"),
        );
        assert_eq!(back.unwrap().seen_at_ms, 3);
    }

    #[test]
    fn merge_keeps_the_freshest_entry() {
        let a = Roster {
            now_ms: 5,
            candidates: vec![c("a", true, 1, 2)],
            lease: None,
            registration: Default::default(),
        };
        let b = Roster {
            now_ms: 7,
            candidates: vec![c("a", false, 1, 4), c("b", true, 1, 1)],
            lease: None,
            registration: Default::default(),
        };
        let m = Roster::merge(vec![a, b], None);
        assert_eq!(m.now_ms, 7);
        assert_eq!(m.candidates.len(), 2);
        assert!(
            !m.candidates
                .iter()
                .find(|x| x.identity == "a")
                .unwrap()
                .healthy
        );
    }
}
