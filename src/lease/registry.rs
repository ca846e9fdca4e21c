//! The registry heartbeat on one Redis (`lua/candidate.lua`, README "Candidates"): the call,
//! and the list it keeps between calls. A writing heartbeat sends the registry version it last
//! read; while nothing changed Redis answers with the lease and this replica's own entry only,
//! so a heartbeat costs the same whatever the number of candidates.

use std::time::Duration;

use futures::TryFutureExt;
use tokio::time::Instant;

use super::candidates::{Cache, Candidate, Heartbeat, Registration, Roster};
use super::{LeaseClient, LeaseError, Observed};
use crate::connector::invoke;
use crate::lease::acl::LeaseScript;

/// A heartbeat's reply, parsed.
#[derive(Debug, PartialEq)]
struct Reply {
    now_ms: u64,
    lease: Option<Observed>,
    version: String,
    registration: Registration,
    /// `true`: the live entries; `false`: what this call changed since the version sent.
    full: bool,
    /// Identity and entry (`None`: removed, or not what leaderd writes).
    entries: Vec<(String, Option<Candidate>)>,
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
        // A read asks for everything (`status`, a successor's choice); a write for changes.
        let since = match beat {
            Heartbeat::Read => String::new(),
            _ => self.registry.version(),
        };
        let mut call = self.scripts.candidate.prepare_invoke();
        call.key(&self.keys.candidates)
            .key(&self.keys.lock)
            .key(&self.keys.candidates_index)
            .key(&self.keys.candidates_state)
            .arg(identity)
            .arg(entry)
            .arg(self.ttl_ms())
            .arg(self.registry.instance())
            .arg(&since)
            .arg(&self.spec.holder); // a read lists the reader's own entry too
        let sent = Instant::now();
        let reply: Vec<redis::Value> = self
            .endpoint
            .call(
                Some(budget),
                |mut c| async move { invoke(&mut c, &call).await },
            )
            .or_else(|f| self.fail(f, LeaseScript::Candidate))
            .await?;
        let reply = parse(reply, self.ttl_ms())
            .ok_or_else(|| LeaseError::Protocol("a heartbeat reply of another shape".into()))?;
        let candidates = self.registry.apply(&since, &reply);
        Ok(Roster {
            now_ms: reply.now_ms,
            candidates,
            lease: reply.lease.map(|seen| (seen, sent)),
            registration: reply.registration,
        })
    }
}

impl Cache {
    fn version(&self) -> String {
        let known = self.known.lock().expect("registry lock");
        known
            .as_ref()
            .map(|k| k.version.clone())
            .unwrap_or_default()
    }

    /// The list after `reply`, kept for the next heartbeat when it is a full list or the
    /// changes since the version kept (`since`); another call's read in between wins.
    fn apply(&self, since: &str, reply: &Reply) -> Vec<Candidate> {
        let mut known = self.known.lock().expect("registry lock");
        let mut list = match (&*known, reply.full) {
            (_, true) => Vec::new(),
            (Some(k), false) => k.candidates.clone(),
            (None, false) => Vec::new(),
        };
        for (id, entry) in &reply.entries {
            list.retain(|c| &c.identity != id);
            list.extend(entry.clone());
        }
        let current = known.as_ref().is_some_and(|k| k.version == since);
        if (reply.full || current) && !reply.version.is_empty() {
            *known = Some(super::candidates::Known {
                version: reply.version.clone(),
                candidates: list.clone(),
            });
        }
        list
    }
}

/// `{now, pttl, holder, fence, reserved_for, confirmed, address, version, refused,
/// conflict, mode, (identity, entry)...}`; entries of a full list that are not live at `now`
/// are left out.
fn parse(reply: Vec<redis::Value>, ttl_ms: u64) -> Option<Reply> {
    let text = |v: &redis::Value| -> Option<String> { redis::from_redis_value(v.clone()).ok() };
    let int = |v: &redis::Value| redis::from_redis_value::<i64>(v.clone()).ok();
    let (head, rest) = reply.split_at_checked(11)?;
    let now_ms = int(&head[0])? as u64;
    let pttl = int(&head[1])?;
    let fields: Vec<String> = head[2..7]
        .iter()
        .map(|v| text(v).unwrap_or_default())
        .collect();
    let lease = (pttl >= -2).then(|| {
        let [holder, fence, reserved_for, confirmed, address] = &fields[..] else {
            unreachable!("five fields")
        };
        lease_of(pttl, holder, fence, reserved_for, confirmed, address)
    });
    let full = match text(&head[10])?.as_str() {
        "full" => true,
        "changes" => false,
        _ => return None,
    };
    let mut entries = Vec::new();
    for pair in rest.chunks_exact(2) {
        let Some(id) = text(&pair[0]) else { continue };
        let entry = text(&pair[1])
            .and_then(|t| Candidate::from_json(id.clone(), &t))
            .filter(|c| !full || c.live_at(now_ms, ttl_ms));
        if full && entry.is_none() {
            continue;
        }
        entries.push((id, entry));
    }
    Some(Reply {
        now_ms,
        lease,
        version: text(&head[7]).unwrap_or_default(),
        registration: Registration {
            refused: int(&head[8]) == Some(1),
            conflict: int(&head[9]) == Some(1),
        },
        full,
        entries,
    })
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
mod tests {
    use super::*;
    use redis::Value;

    fn b(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn reply(pttl: i64, holder: &str, confirmed: &str, mode: &str, rest: &[&str]) -> Vec<Value> {
        let mut v = vec![
            Value::Int(1000),
            Value::Int(pttl),
            b(holder),
            b("1764600000000018"),
            b(""),
            b(confirmed),
            b("10.0.0.2:8080"),
            b("7"),
            Value::Int(0),
            Value::Int(1),
            b(mode),
        ];
        v.extend(rest.iter().map(|s| b(s)));
        v
    }

    const ENTRY: &str = r#"{"state":"follower","healthy":true,"priority":3,"version":"v","started_at_ms":1,"seen_at_ms":990}"#;

    #[test]
    fn the_heartbeat_reply_carries_the_lease() {
        let r = parse(reply(14000, "pod-a", "1", "full", &["pod-b", ENTRY]), 500).unwrap();
        assert_eq!(r.entries.len(), 1);
        assert!(r.registration.conflict && !r.registration.refused);
        let seen = r.lease.unwrap();
        let h = seen.holder().unwrap();
        assert_eq!((h.holder.as_str(), h.fence), ("pod-a", 1764600000000018));
        assert_eq!(h.remaining, Some(Duration::from_millis(14000)));
        assert_eq!(h.address.as_deref(), Some("10.0.0.2:8080"));
        // An unconfirmed term names nobody; no lease is vacant; -3 is unknown.
        let unconfirmed = parse(reply(14000, "pod-a", "0", "full", &[]), 500);
        assert!(matches!(
            unconfirmed.unwrap().lease,
            Some(Observed::Quarantined { .. })
        ));
        let vacant = parse(reply(-2, "", "", "full", &[]), 500).unwrap();
        assert_eq!(vacant.lease, Some(Observed::Vacant));
        assert_eq!(
            parse(reply(-3, "", "", "full", &[]), 500).unwrap().lease,
            None
        );
        assert_eq!(parse(reply(-3, "", "", "other", &[]), 500), None);
    }

    #[test]
    fn a_full_list_leaves_out_what_is_not_live_or_not_what_leaderd_writes() {
        let future = ENTRY.replace("990", "1001");
        let old = ENTRY.replace("990", "400");
        let bad = ENTRY.replace("3,", "1001,");
        let big = format!("{} {}", ENTRY, " ".repeat(1024));
        let rest = [
            "a", ENTRY, "b", &future, "c", &old, "d", &bad, "e", &big, "f", "{x",
        ];
        let r = parse(reply(-2, "", "", "full", &rest), 500).unwrap();
        let ids: Vec<&str> = r.entries.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["a"]);
        // Changes keep removals (and entries that are not what leaderd writes) as removals.
        let r = parse(reply(-2, "", "", "changes", &["a", "", "d", &bad]), 500).unwrap();
        assert!(r.entries.iter().all(|(_, e)| e.is_none()));
    }

    #[test]
    fn changes_apply_to_the_version_they_follow_only() {
        let cache = Cache::default();
        let full = parse(reply(-2, "", "", "full", &["a", ENTRY, "b", ENTRY]), 500).unwrap();
        assert_eq!(cache.apply("", &full).len(), 2);
        assert_eq!(cache.version(), "7");
        let mut changes = parse(reply(-2, "", "", "changes", &["a", ""]), 500).unwrap();
        changes.version = "8".into();
        let list = cache.apply("7", &changes);
        assert_eq!(
            list.iter().map(|c| c.identity.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(cache.version(), "8");
        // Changes sent against a version another read has replaced are not kept.
        changes.version = "9".into();
        cache.apply("7", &changes);
        assert_eq!(cache.version(), "8");
    }
}
