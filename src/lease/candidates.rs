//! The candidates of an election (contract part 2, "Candidates"): each replica's entry in
//! `<prefix>{<name>}:candidates`, written by its heartbeat (`lua/candidate.lua`) with the
//! Redis server's time, and read back live.

use std::time::Duration;

use futures::TryFutureExt;
use tokio::time::Instant;

use super::{LeaseClient, LeaseError, Observed};
use crate::lease::acl::LeaseScript;

/// One registered candidate, as its last heartbeat wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
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
pub struct Roster {
    /// Redis server time of the read (ms).
    pub now_ms: u64,
    /// The candidates not older than a lease duration, in no particular order.
    pub candidates: Vec<Candidate>,
    /// The lease as the heartbeat read it (on Redlock, as a majority sees it), with when the
    /// heartbeat was sent: its `remaining` counts from then, so a follower that takes it as
    /// a read of the lease never thinks it expires later than it does. `None` when unknown.
    pub lease: Option<(Observed, Instant)>,
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
    fn to_json(&self) -> String {
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

    fn from_json(identity: String, text: &str) -> Option<Candidate> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let num = |k: &str| v.get(k).and_then(|x| x.as_f64()).map(|x| x as u64);
        let string = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
        Some(Candidate {
            identity,
            state: string("state").unwrap_or_default(),
            healthy: v.get("healthy").and_then(|x| x.as_bool()).unwrap_or(false),
            contending: v
                .get("contending")
                .and_then(|x| x.as_bool())
                .unwrap_or(true),
            priority: num("priority").unwrap_or(0).min(1000) as u32,
            address: string("address"),
            version: string("version").unwrap_or_default(),
            started_at_ms: num("started_at_ms").unwrap_or(0),
            healthy_since_ms: num("healthy_since_ms"),
            seen_at_ms: num("seen_at_ms")?,
        })
    }
}

impl Roster {
    /// Merges rosters read from several nodes (Redlock): per identity the freshest entry;
    /// the lease is `lease`, summarized by the caller over the nodes.
    pub(crate) fn merge(rosters: Vec<Roster>, lease: Option<(Observed, Instant)>) -> Roster {
        let mut out = Roster {
            lease,
            ..Roster::default()
        };
        for r in rosters {
            out.now_ms = out.now_ms.max(r.now_ms);
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

impl LeaseClient {
    /// One heartbeat on this Redis (see [`super::Lease::heartbeat`]).
    pub(crate) async fn heartbeat_here(
        &self,
        beat: Heartbeat<'_>,
        budget: Duration,
    ) -> Result<Roster, LeaseError> {
        let (identity, entry) = match beat {
            Heartbeat::Read => (String::new(), String::new()),
            Heartbeat::Write(c) => (self.spec.holder.clone(), c.to_json()),
            Heartbeat::Remove => (self.spec.holder.clone(), String::new()),
        };
        let mut call = self.scripts.candidate.prepare_invoke();
        call.key(&self.keys.candidates)
            .key(&self.keys.lock)
            .arg(identity)
            .arg(entry)
            .arg(self.ttl_ms());
        let sent = Instant::now();
        let reply: Vec<redis::Value> = self
            .endpoint
            .call(Some(budget), |mut c| async move {
                call.invoke_async(&mut c).await
            })
            .or_else(|f| self.fail(f, LeaseScript::Candidate))
            .await?;
        Ok(parse_roster(reply, sent))
    }
}

fn parse_roster(reply: Vec<redis::Value>, sent: Instant) -> Roster {
    let text = |v: &redis::Value| -> Option<String> { redis::from_redis_value(v.clone()).ok() };
    let int =
        |v: Option<&redis::Value>| v.and_then(|v| redis::from_redis_value::<i64>(v.clone()).ok());
    let mut it = reply.iter();
    let now_ms = int(it.next()).unwrap_or(0) as u64;
    let pttl = int(it.next());
    let fields: Vec<String> = it
        .by_ref()
        .take(5)
        .map(|v| text(v).unwrap_or_default())
        .collect();
    let lease = match (pttl, fields.as_slice()) {
        (Some(pttl), [holder, fence, reserved_for, confirmed, address]) if pttl >= -2 => Some((
            lease_of(pttl, holder, fence, reserved_for, confirmed, address),
            sent,
        )),
        _ => None,
    };
    let mut candidates = Vec::new();
    while let (Some(id), Some(entry)) = (it.next(), it.next()) {
        if let (Some(id), Some(entry)) = (text(id), text(entry)) {
            candidates.extend(Candidate::from_json(id, &entry));
        }
    }
    Roster {
        now_ms,
        candidates,
        lease,
    }
}

/// The lease as `lua/candidate.lua` returns it, read as [`LeaseClient`]'s observe reads it:
/// an unconfirmed term (WAIT, Redlock) names nobody yet.
fn lease_of(
    pttl: i64,
    holder: &str,
    fence: &str,
    reserved_for: &str,
    confirmed: &str,
    address: &str,
) -> Observed {
    if pttl == -2 {
        return Observed::Vacant;
    }
    let holder = if confirmed == "0" { "" } else { holder };
    Observed::from_fields(
        holder.to_string(),
        fence.parse().unwrap_or(0),
        address.to_string(),
        reserved_for.to_string(),
        pttl,
    )
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
    fn the_heartbeat_reply_carries_the_lease() {
        use redis::Value;
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = |pttl: i64, holder: &str, confirmed: &str| {
            vec![
                Value::Int(1000),
                Value::Int(pttl),
                b(holder),
                b("1764600000000018"),
                b(""),
                b(confirmed),
                b("10.0.0.2:8080"),
                b("pod-b"),
                b(r#"{"healthy":true,"priority":3,"seen_at_ms":990}"#),
            ]
        };
        let sent = Instant::now();
        let r = parse_roster(reply(14000, "pod-a", "1"), sent);
        assert_eq!(r.candidates.len(), 1);
        let (seen, at) = r.lease.unwrap();
        assert_eq!(at, sent);
        let h = seen.holder().unwrap();
        assert_eq!((h.holder.as_str(), h.fence), ("pod-a", 1764600000000018));
        assert_eq!(h.remaining, Some(Duration::from_millis(14000)));
        assert_eq!(h.address.as_deref(), Some("10.0.0.2:8080"));
        // An unconfirmed term names nobody; no lease is vacant; -3 is unknown.
        let unconfirmed = parse_roster(reply(14000, "pod-a", "0"), sent)
            .lease
            .unwrap()
            .0;
        assert!(matches!(unconfirmed, Observed::Quarantined { .. }));
        let vacant = parse_roster(reply(-2, "", ""), sent).lease.unwrap().0;
        assert_eq!(vacant, Observed::Vacant);
        assert_eq!(parse_roster(reply(-3, "", ""), sent).lease, None);
    }

    #[test]
    fn merge_keeps_the_freshest_entry() {
        let a = Roster {
            now_ms: 5,
            candidates: vec![c("a", true, 1, 2)],
            lease: None,
        };
        let b = Roster {
            now_ms: 7,
            candidates: vec![c("a", false, 1, 4), c("b", true, 1, 1)],
            lease: None,
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
