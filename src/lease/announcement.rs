//! The messages on a lease's release channel (README, "Announcements"): a release, and the
//! start of a term, as JSON. Anyone who may publish can send one, so a message is bounded
//! and checked here, and what it says is only a reason to read the lease.

/// The largest message read; a longer one is dropped unparsed.
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;
/// The longest identity, holder, successor or address a message may name (what the keys
/// hold).
pub(crate) const MAX_FIELD_BYTES: usize = 256;
/// The most shards an election has (README, "Shards"): a message's `"shard"` is below it.
pub(crate) const MAX_SHARDS: u64 = 4096;

/// One announcement on the release channel. What it says was heard, not read: a hint of
/// what to read in Redis, never the truth about the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Announcement {
    /// `{"event":"released","holder","fence","reserved_for"}`: a leader let go, possibly
    /// reserving the lease for a successor.
    Released {
        /// The identity that released.
        holder: String,
        /// The released term's fence.
        fence: u64,
        /// The successor the lease is reserved for, if any.
        reserved_for: Option<String>,
    },
    /// `{"event":"acquired","holder","fence","address"}`: a term really began (granted, and
    /// confirmed by WAIT or a Redlock majority where asked for).
    Acquired {
        /// The new leader.
        holder: String,
        /// Its fence.
        fence: u64,
        /// The address the new leader advertises (`LeaseSpec::address`), if any.
        address: Option<String>,
    },
}

/// How many messages a client's listeners dropped (shared with them).
#[derive(Debug, Clone, Default)]
pub(crate) struct Dropped(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Dropped {
    pub(crate) fn count(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn total(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// What one message on an election's channel is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Heard<T> {
    /// A message of this version, within bounds.
    Message(T),
    /// Something else within bounds (the plain-text release of an older leaderd, an event
    /// this version does not know): it only wakes.
    Other,
    /// Over [`MAX_MESSAGE_BYTES`], or a message with a field outside its bounds:
    /// dropped (and counted) without waking anyone.
    Dropped,
}

/// The JSON object of a message within [`MAX_MESSAGE_BYTES`]; `Err` with what the message
/// is otherwise.
pub(crate) fn json_object<T>(
    payload: &[u8],
) -> Result<serde_json::Map<String, serde_json::Value>, Heard<T>> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(Heard::Dropped);
    }
    match serde_json::from_slice(payload) {
        Ok(serde_json::Value::Object(v)) => Ok(v),
        _ => Err(Heard::Other),
    }
}

impl Heard<Announcement> {
    /// Checks and parses one message of the release channel.
    pub(crate) fn of(payload: &[u8]) -> Self {
        let v = match json_object(payload) {
            Ok(v) => v,
            Err(heard) => return heard,
        };
        let event = match v.get("event").and_then(|e| e.as_str()) {
            Some(e @ ("released" | "acquired")) => e,
            _ => return Heard::Other,
        };
        let name = |k: &str| bounded_name(v.get(k));
        let (Some(Some(holder)), Some(fence)) =
            (name("holder"), v.get("fence").and_then(|f| f.as_u64()))
        else {
            return Heard::Dropped;
        };
        let optional = if event == "released" {
            "reserved_for"
        } else {
            "address"
        };
        let Some(extra) = name(optional) else {
            return Heard::Dropped;
        };
        let shard_ok = match v.get("shard") {
            None | Some(serde_json::Value::Null) => true,
            Some(shard) => shard.as_u64().is_some_and(|s| s < MAX_SHARDS),
        };
        if !shard_ok {
            return Heard::Dropped;
        }
        Heard::Message(match event {
            "released" => Announcement::Released {
                holder,
                fence,
                reserved_for: extra,
            },
            _ => Announcement::Acquired {
                holder,
                fence,
                address: extra,
            },
        })
    }
}

/// A field that names an identity or an address: `Some(None)` when absent or null,
/// `Some(Some(text))` for a string of at most [`MAX_FIELD_BYTES`], `None` (out of bounds)
/// for anything else.
pub(crate) fn bounded_name(v: Option<&serde_json::Value>) -> Option<Option<String>> {
    match v {
        None | Some(serde_json::Value::Null) => Some(None),
        Some(serde_json::Value::String(s)) if s.len() <= MAX_FIELD_BYTES => Some(Some(s.clone())),
        Some(_) => None,
    }
}

impl Announcement {
    /// Parses one message; `None` for anything else (e.g. the plain-text release of an
    /// older leaderd, which only wakes the waiting candidates) and for a message over 1 KiB
    /// or with a field out of bounds (a name over 256 bytes, a fence that is not an
    /// unsigned integer, a shard that is not one below 4096).
    pub fn parse(payload: &[u8]) -> Option<Self> {
        match Heard::of(payload) {
            Heard::Message(a) => Some(a),
            Heard::Other | Heard::Dropped => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Announcement, Heard};

    #[test]
    fn parses_both_events_and_ignores_plain_text() {
        let r =
            br#"{"event":"released","holder":"a","fence":1764600000000001,"reserved_for":null}"#;
        assert_eq!(
            Announcement::parse(r),
            Some(Announcement::Released {
                holder: "a".into(),
                fence: 1764600000000001,
                reserved_for: None
            })
        );
        let a = br#"{"event":"acquired","holder":"b","fence":7}"#;
        assert_eq!(
            Announcement::parse(a),
            Some(Announcement::Acquired {
                holder: "b".into(),
                fence: 7,
                address: None
            })
        );
        assert_eq!(Announcement::parse(b"pod-a"), None);
        assert_eq!(Heard::of(b"pod-a"), Heard::Other);
        assert_eq!(Heard::of(br#"{"event":"later","x":1}"#), Heard::Other);
    }

    #[test]
    fn drops_what_the_keys_cannot_hold() {
        let long = "x".repeat(257);
        let at_bound = "x".repeat(256);
        let acquired = |holder: &str, fence: &str, address: &str| {
            format!(
                r#"{{"event":"acquired","holder":{holder},"fence":{fence},"address":{address}}}"#
            )
        };
        let q = |s: &str| format!("\"{s}\"");
        let ok = acquired(&q(&at_bound), "18446744073709551615", &q(&at_bound));
        assert!(matches!(Heard::of(ok.as_bytes()), Heard::Message(_)));
        let shard = r#"{"event":"released","holder":"a","fence":1,"shard":4095}"#;
        assert!(matches!(Heard::of(shard.as_bytes()), Heard::Message(_)));
        for bad in [
            acquired(&q(&long), "1", "null"),
            acquired(&q("a"), "1", &q(&long)),
            acquired(&q("a"), "-1", "null"),
            acquired(&q("a"), "1.5", "null"),
            acquired(&q("a"), "\"1\"", "null"),
            acquired(&q("a"), "18446744073709551616", "null"),
            acquired("7", "1", "null"),
            acquired(&q("a"), "1", "[1]"),
            format!(
                r#"{{"event":"released","holder":"a","fence":1,"reserved_for":{}}}"#,
                q(&long)
            ),
            r#"{"event":"released","holder":"a"}"#.to_string(),
            r#"{"event":"released","holder":"a","fence":1,"shard":4096}"#.to_string(),
            r#"{"event":"acquired","holder":"a","fence":1,"shard":"abc"}"#.to_string(),
            r#"{"event":"acquired","holder":"a","fence":1,"shard":-1}"#.to_string(),
        ] {
            assert_eq!(Heard::of(bad.as_bytes()), Heard::Dropped, "{bad}");
        }
        let padded = format!(
            r#"{{"event":"acquired","holder":"a","fence":1,"pad":"{}"}}"#,
            "p".repeat(1000)
        );
        assert_eq!(Heard::of(padded.as_bytes()), Heard::Dropped);
        assert_eq!(Heard::of(&vec![b'x'; 8 << 20]), Heard::Dropped);
    }
}
